"""The `model` unit's refs and result models: the model's config.json and what derives from it."""

from __future__ import annotations

from pydantic import Field

from orchestrator.errors import InputError
from orchestrator.refs import TaskRef
from tasks.model.shapes import ModelShapes
from tasks.models import Result


class ModelFacts(Result):
    model: str = Field(description="the model's folder on the host")
    generated: bool = Field(description="the tiny random-weight model this project generates")
    model_type: str | None
    config_artifact: str
    vocab_size: int
    tokenizer_vocab_size: int | None = Field(
        None, description="tokens the model folder's tokenizer.json knows; prompts stay below it"
    )
    weight_dtype: str = Field(description="what config.json declares; the trace shows what ran")
    group_size: int | None
    shapes: ModelShapes | None = Field(description="per-rank GEMM shapes; None when the family is unknown")
    shapes_error: str | None = None

    @property
    def prompt_vocab(self) -> int:
        """Token ids a random prompt may use: valid for the model and for its tokenizer (a
        dummy-weight model may pair a full-size config with a small tokenizer)."""
        return min(self.vocab_size, self.tokenizer_vocab_size or self.vocab_size)

    def require_shapes(self) -> ModelShapes:
        if self.shapes is None:
            raise InputError(self.shapes_error or f"{self.config_artifact}: no GEMM shapes derived")
        return self.shapes


MODEL_FACTS = TaskRef("model_facts", ModelFacts)
