"""GEMM shapes of one decode step, per tensor-parallel rank, derived from a model's config.json.

Shapes are (M, K, N): activations M x K times weights K x N. Column-parallel layers split N by
TP, row-parallel layers split K (their outputs are all-reduced). Routed-expert GEMMs see on
average M x top_k / n_experts tokens each; that expected count (at least 1) is their M. A MoE
layer's experts also appear as one 'experts_fused' row (M tokens, all experts, top_k), timed as
vLLM's fused MoE.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import Field

from orchestrator.errors import InputError
from tasks.models import Result


@dataclass(frozen=True)
class GemmShape:
    name: str
    m: int
    k: int
    n: int
    dtype: str  # "bf16", "w4a16" or "fp8"
    parallel: str  # "replicated", "column", "row"
    count_per_layer: float = 1.0
    experts: int | None = None  # set: one MoE layer's routed experts, fused (K hidden, N intermediate)
    top_k: int | None = None

    def as_row(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


class ConfigReader:
    def __init__(self, config: dict[str, Any], source: str) -> None:
        # Multimodal wrappers (Kimi-K2.5, Llama-4) keep the language model under text_config.
        self.config = config.get("text_config", config) if "hidden_size" not in config else config
        self.source = source

    def need(self, key: str) -> Any:
        if key not in self.config or self.config[key] is None:
            raise InputError(
                f"{self.source}: field '{key}' is missing; this model family needs it"
                " to derive GEMM shapes (check the config.json is the model's own)"
            )
        return self.config[key]

    def get(self, key: str, default: Any) -> Any:
        value = self.config.get(key)
        return default if value is None else value


def split(value: int, tp: int, what: str, source: str) -> int:
    if value % tp:
        raise InputError(
            f"{source}: {what} = {value} does not divide by tensor_parallel {tp};"
            " choose a tensor-parallel size that divides it"
        )
    return value // tp


def quantized_dtype(config: dict[str, Any]) -> tuple[str, int | None]:
    """The checkpoint's GEMM weight format and its group: ('w4a16', group) for 4-bit weights with
    16-bit activations; ('fp8', block) for FP8 weights and activations (block 0: per channel);
    else ('bf16', None)."""
    quant = config.get("quantization_config") or config.get("text_config", {}).get("quantization_config")
    if not quant:
        return "bf16", None
    if quant.get("quant_method") == "fp8":  # DeepSeek-V3 style: e4m3, 128 x 128 weight blocks
        return "fp8", int((quant.get("weight_block_size") or [0])[0])
    bits = quant.get("bits") or quant.get("w_bit")
    group = quant.get("group_size") or quant.get("q_group_size")
    for group_cfg in (quant.get("config_groups") or {}).values():
        weights = group_cfg.get("weights") or {}
        if weights.get("num_bits") == 8 and weights.get("type") == "float":
            return "fp8", int((weights.get("block_structure") or [0])[0])
        bits = bits or weights.get("num_bits")
        group = group or weights.get("group_size")
    if bits == 4:
        return "w4a16", group
    return "bf16", None


class LayerShape(Result):
    """One GEMM of a layer per rank, independent of the batch: (M x K) @ (K x N)."""

    name: str
    k: int
    n: int
    dtype: Literal["bf16", "w4a16", "fp8"]
    parallel: Literal["replicated", "column", "row"]
    count_per_layer: float
    tokens_share: float = 1.0
    """Share of the batch's tokens each call sees (routed experts: top_k / experts)."""
    experts: int | None = None
    """Set on 'experts_fused': a MoE layer's routed experts in one fused call (K = hidden, N = the
    expert intermediate size per rank), tokens routed to ``top_k`` of them."""
    top_k: int | None = None

    @property
    def kind(self) -> str:
        """'fused_experts', 'expert' (one routed expert's GEMM) or 'dense'."""
        if self.experts:
            return "fused_experts"
        return "expert" if self.name.startswith("expert_") else "dense"


class AttentionHeads(Result):
    """One rank's attention heads, as vLLM's paged attention sees them."""

    q_heads: int
    kv_heads: int
    head_size: int


class MlaHeads(Result):
    """One rank's MLA attention as vLLM's decode runs it: ``heads`` query heads over one latent
    KV head of ``kv_lora_rank`` + ``rope_dim`` values a token (the query absorbed into the latent)."""

    heads: int
    kv_lora_rank: int
    rope_dim: int
    nope_dim: int


class ModelShapes(Result):
    family: Literal["deepseek_v3", "mixtral", "llama"]
    tensor_parallel: int
    num_layers: int
    hidden_size: int
    vocab_size: int
    weight_dtype: Literal["bf16", "w4a16", "fp8"]
    group_size: int | None
    allreduces_per_step: int
    """2 a layer (attention o_proj, MLP/MoE down) + 1 (vocab-parallel embedding); 0 at TP=1."""
    layers: list[LayerShape]
    kv_bytes_per_token: float | None = Field(
        None, description="KV-cache bytes one token holds on one rank at bf16 (all layers, K and V)"
    )
    attention: AttentionHeads | None = Field(
        None, description="one rank's query and KV heads (GQA/MHA; None for MLA): the FP8 KV micro's shape"
    )
    mla: MlaHeads | None = Field(
        None, description="one rank's MLA heads and latent (MLA only): the FP8 KV micro's shape"
    )

    def gemm_rows(self, batch_sizes: list[int]) -> list[dict[str, Any]]:
        """The GEMMs of one decode step at each batch size, as rows for the GEMM bench."""
        rows = []
        for m in batch_sizes:
            for layer in self.layers:
                rows_m = m if layer.tokens_share == 1.0 else max(1, math.ceil(m * layer.tokens_share))
                rows.append(
                    GemmShape(
                        layer.name,
                        rows_m,
                        layer.k,
                        layer.n,
                        layer.dtype,
                        layer.parallel,
                        layer.count_per_layer,
                        layer.experts,
                        layer.top_k,
                    ).as_row()
                )
        return rows


def derive_shapes(
    config: dict[str, Any], tp: int, batch_sizes: list[int], source: str = "config.json"
) -> dict[str, Any]:
    """The old flat form (family, ..., shapes at each batch size), for scripts and tests."""
    model = model_shapes(config, tp, source)
    return {**model.model_dump(exclude={"layers"}), "shapes": model.gemm_rows(batch_sizes)}


def model_shapes(config: dict[str, Any], tp: int, source: str = "config.json") -> ModelShapes:
    reader = ConfigReader(config, source)
    model_type = str(reader.get("model_type", ""))
    weight_dtype, group = quantized_dtype(config)
    if reader.get("kv_lora_rank", None) is not None:
        family, per_layer = "deepseek_v3", _mla_moe(reader, tp, weight_dtype)
    elif reader.get("num_local_experts", None) or reader.get("num_experts", None):
        family, per_layer = (
            "mixtral",
            (_gqa(reader, tp, "fp8" if weight_dtype == "fp8" else "bf16") + _moe_experts(reader, tp, weight_dtype)),
        )
    elif (
        model_type in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3")
        or reader.get("num_key_value_heads", None) is not None
    ):
        family, per_layer = (
            "llama",
            _gqa(reader, tp, weight_dtype) + _dense_mlp(reader, tp, weight_dtype, "intermediate_size"),
        )
    else:
        raise InputError(
            f"{source}: model_type '{model_type}' is not a supported family"
            " (DeepSeek-V3/Kimi-K2, Llama/Qwen/Mistral, Mixtral)"
        )
    hidden = int(reader.need("hidden_size"))
    vocab = int(reader.need("vocab_size"))
    layers = int(reader.need("num_hidden_layers"))
    lm_head = (
        "lm_head",
        hidden,
        split(vocab, tp, "vocab_size", source) if vocab % tp == 0 else math.ceil(vocab / tp),
        "bf16",
        "column",
        1.0,
    )
    shapes = [
        LayerShape(
            name=name,
            k=int(k),
            n=int(n),
            dtype=dtype,
            parallel=parallel,
            count_per_layer=count,
            **(extra[0] if extra else {}),
        )
        for name, k, n, dtype, parallel, count, *extra in per_layer + [lm_head]
    ]
    return ModelShapes(
        family=family,
        tensor_parallel=tp,
        num_layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        weight_dtype=weight_dtype,
        group_size=group,
        allreduces_per_step=2 * layers + 1 if tp > 1 else 0,
        layers=shapes,
        kv_bytes_per_token=kv_bytes_per_token(config, tp),
        attention=None if family == "deepseek_v3" else attention_heads(reader, tp),
        mla=mla_heads(reader, tp) if family == "deepseek_v3" else None,
    )


def mla_heads(reader: ConfigReader, tp: int) -> MlaHeads:
    return MlaHeads(
        heads=split(int(reader.need("num_attention_heads")), tp, "num_attention_heads", reader.source),
        kv_lora_rank=int(reader.need("kv_lora_rank")),
        rope_dim=int(reader.need("qk_rope_head_dim")),
        nope_dim=int(reader.need("qk_nope_head_dim")),
    )


def attention_heads(reader: ConfigReader, tp: int) -> AttentionHeads:
    hidden = int(reader.need("hidden_size"))
    heads = int(reader.need("num_attention_heads"))
    kv_heads = int(reader.get("num_key_value_heads", heads))
    return AttentionHeads(
        q_heads=split(heads, tp, "num_attention_heads", reader.source),
        kv_heads=max(1, kv_heads // tp),  # fewer KV heads than ranks: vLLM replicates them
        head_size=int(reader.get("head_dim", hidden // heads)),
    )


def kv_bytes_per_token(config: dict[str, Any], tp: int) -> float | None:
    """KV-cache bytes one token holds on one rank (bf16): K and V of every layer, the KV heads
    split over the ranks (at least one a rank); MLA models (kv_lora_rank) cache one latent and
    the rope key a layer, on every rank."""
    text = config.get("text_config") or config
    layers = text.get("num_hidden_layers")
    if not layers:
        return None
    if text.get("kv_lora_rank"):
        return float(layers * (text["kv_lora_rank"] + text.get("qk_rope_head_dim", 0)) * 2)
    heads = text.get("num_attention_heads")
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or (text["hidden_size"] // heads if heads and text.get("hidden_size") else None)
    if not (kv_heads and head_dim):
        return None
    return float(layers * 2 * max(1, kv_heads // max(1, tp)) * head_dim * 2)


def _gqa(reader: ConfigReader, tp: int, dtype: str) -> list[tuple]:
    source = reader.source
    hidden = int(reader.need("hidden_size"))
    heads = int(reader.need("num_attention_heads"))
    kv_heads = int(reader.get("num_key_value_heads", heads))
    head_dim = int(reader.get("head_dim", hidden // heads))
    q_per_rank = split(heads, tp, "num_attention_heads", source)
    kv_per_rank = max(1, kv_heads // tp)  # fewer KV heads than ranks: vLLM replicates them
    return [
        ("qkv_proj", hidden, (q_per_rank + 2 * kv_per_rank) * head_dim, dtype, "column", 1.0),
        ("o_proj", q_per_rank * head_dim, hidden, dtype, "row", 1.0),
    ]


def _dense_mlp(reader: ConfigReader, tp: int, dtype: str, key: str, count: float = 1.0) -> list[tuple]:
    hidden = int(reader.need("hidden_size"))
    inter = split(int(reader.need(key)), tp, key, reader.source)
    return [
        ("gate_up_proj", hidden, 2 * inter, dtype, "column", count),
        ("down_proj", inter, hidden, dtype, "row", count),
    ]


def _moe_experts(reader: ConfigReader, tp: int, dtype: str) -> list[tuple]:
    hidden = int(reader.need("hidden_size"))
    experts = int(
        reader.get("num_local_experts", None) or reader.get("n_routed_experts", None) or reader.need("num_experts")
    )
    top_k = int(reader.need("num_experts_per_tok"))
    key = "moe_intermediate_size" if reader.get("moe_intermediate_size", None) else "intermediate_size"
    inter = split(int(reader.need(key)), tp, key, reader.source)
    share = {"tokens_share": top_k / experts}
    # Each routed expert's GEMM alone (what a GEMM costs), and the layer's experts as the server
    # runs them: one fused call (what the step costs).
    return [
        ("expert_w13", hidden, 2 * inter, dtype, "column", float(top_k), share),
        ("expert_w2", inter, hidden, dtype, "row", float(top_k), share),
        ("experts_fused", hidden, inter, dtype, "row", 1.0, {"experts": experts, "top_k": top_k}),
    ]


def _mla_moe(reader: ConfigReader, tp: int, expert_dtype: str) -> list[tuple]:
    source = reader.source
    hidden = int(reader.need("hidden_size"))
    heads = split(int(reader.need("num_attention_heads")), tp, "num_attention_heads", source)
    q_lora = int(reader.need("q_lora_rank"))
    kv_lora = int(reader.need("kv_lora_rank"))
    nope, rope, v_dim = (int(reader.need(k)) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    layers = int(reader.need("num_hidden_layers"))
    dense_layers = int(reader.get("first_k_dense_replace", 0))
    moe_share = (layers - dense_layers) / layers
    dense_share = dense_layers / layers
    shared = int(reader.get("n_shared_experts", 0))
    moe_inter = int(reader.need("moe_intermediate_size"))
    # An FP8 checkpoint quantizes every linear layer but the router and lm_head; an int4 one
    # (Kimi-K2) only the routed experts, keeping attention and dense layers in bf16.
    dense_dtype = "fp8" if expert_dtype == "fp8" else "bf16"
    rows = [
        ("fused_qkv_a_proj", hidden, q_lora + kv_lora + rope, dense_dtype, "replicated", 1.0),
        ("q_b_proj", q_lora, heads * (nope + rope), dense_dtype, "column", 1.0),
        ("kv_b_proj", kv_lora, heads * (nope + v_dim), dense_dtype, "column", 1.0),
        ("o_proj", heads * v_dim, hidden, dense_dtype, "row", 1.0),
    ]
    if dense_layers:
        rows += [
            (f"dense_{name}", k, n, dense_dtype, par, dense_share)
            for name, k, n, _, par, _ in _dense_mlp(reader, tp, dense_dtype, "intermediate_size")
        ]
    if shared:
        inter = split(moe_inter * shared, tp, "moe_intermediate_size x n_shared_experts", source)
        quant = reader.config.get("quantization_config") or {}
        shared_dtype = "bf16" if "shared_expert" in str(quant.get("ignore", "")) else expert_dtype
        rows += [
            ("shared_expert_w13", hidden, 2 * inter, shared_dtype, "column", moe_share),
            ("shared_expert_w2", inter, hidden, shared_dtype, "row", moe_share),
        ]
    experts = _moe_experts(reader, tp, expert_dtype)
    rows += [(name, k, n, dtype, par, count * moe_share, extra) for name, k, n, dtype, par, count, extra in experts]
    rows.append(("moe_gate", hidden, int(reader.get("n_routed_experts", 0)), "bf16", "replicated", moe_share))
    return rows
