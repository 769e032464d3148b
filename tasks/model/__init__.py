"""The `model` unit: the model's config.json and everything derived from it, computed once.

When no model is configured the tiny random-weight Llama is generated on the host (no hub
downloads exist on this project's machines). Later phases read the typed ``ModelFacts``:
vocabulary, quantization, the per-rank GEMM shapes and the all-reduces a decode step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext, TaskSpec
from orchestrator.errors import InputError, TaskFailed
from orchestrator.schema import Priority
from tasks.host import host_identity
from tasks.host_json import run_json_script
from tasks.model.results import MODEL_FACTS, ModelFacts
from tasks.model.shapes import model_shapes, quantized_dtype
from tasks.session import Node, Session
from tasks.unit import PhaseUnit

TINY_MODEL_SCRIPT = Path(__file__).parent / "remote" / "make_tiny_model.py"


def model_path(session: Session, node: Node | None = None) -> str:
    """The model's folder on the head (or on ``node``): the configured one, the same path on every
    node, or the generated tiny model in that node's workdir."""
    workdir = node.workdir if node is not None else session.workdir
    return session.config.service.model or f"{workdir}/models/tiny-llama"


TOKENIZER_SIZE = (
    "import json, sys\n"
    "try: d = json.load(open(sys.argv[1] + '/tokenizer.json'))\n"
    "except (OSError, ValueError): sys.exit(0)\n"
    "ids = list(d.get('model', {}).get('vocab', {}).values()) + [t['id'] for t in d.get('added_tokens', [])]\n"
    "print(max(ids) + 1 if ids else '')\n"
)


def model_facts(
    config: dict[str, Any],
    model: str,
    generated: bool,
    artifact: Path,
    tp: int,
    tokenizer_vocab_size: int | None = None,
) -> ModelFacts:
    """Typed facts from a config.json; a family we cannot derive shapes for is kept as a reason,
    so phases that need no shapes (serving, capture) still run."""
    try:
        shapes, error = model_shapes(config, tp, source=str(artifact)), None
    except InputError as err:
        shapes, error = None, str(err)
    weight_dtype, group = quantized_dtype(config)
    text = config.get("text_config", config) if "vocab_size" not in config else config
    return ModelFacts(
        model=model,
        generated=generated,
        model_type=config.get("model_type"),
        config_artifact=str(artifact),
        vocab_size=int(text.get("vocab_size", 32000)),
        tokenizer_vocab_size=tokenizer_vocab_size,
        weight_dtype=weight_dtype,
        group_size=group,
        shapes=shapes,
        shapes_error=error,
    )


def _specs(session: Session, enabled: frozenset[str]) -> list[TaskSpec]:
    def run(ctx: TaskContext) -> ModelFacts:
        host = session.host()
        model = model_path(session)
        generated = session.config.service.model is None
        if generated:
            # Every node loads its own copy; the weights are seeded, so the copies are equal.
            for node in reversed(session.nodes):
                document = run_json_script(
                    session, TINY_MODEL_SCRIPT, [model_path(session, node)], timeout_s=900, node=node
                )
            config = document["config"]
        else:
            for node in session.nodes[1:]:
                where = session.node_host(node.index)
                if where.run(["test", "-f", f"{model}/config.json"], check=False, timeout_s=60).exit_code:
                    raise InputError(
                        f"service.model: {model}/config.json is not on {node.label}; every node"
                        " loads the model from the same path: copy it there"
                    )
            read = host.run(["cat", f"{model}/config.json"], check=False, timeout_s=60)
            if read.exit_code != 0:
                raise InputError(
                    f"service.model: {model}/config.json cannot be read on {host.name}"
                    f" ({read.stderr.strip()[:160]}); set service.model to the model's folder there"
                )
            out = read.stdout
            try:
                config = json.loads(out)
            except json.JSONDecodeError as err:
                raise TaskFailed(f"{model}/config.json on {host.name}: not valid JSON ({err})") from None
        artifact = ctx.artifacts_dir / "config.json"
        write_atomic(artifact, json.dumps(config, indent=2).encode())
        size = host.run([session.python, "-c", TOKENIZER_SIZE, model], check=False, timeout_s=120).stdout.strip()
        return model_facts(
            config,
            model,
            generated,
            artifact,
            session.config.service.tensor_parallel,
            int(size) if size.isdigit() else None,
        )

    inputs = {
        "host": host_identity(session.config),
        "service": session.config.service.model_dump(include={"model", "tensor_parallel"}),
    }
    return [
        TaskSpec(
            MODEL_FACTS,
            "Get the model's config.json (generate the tiny model if none is set)",
            "model",
            run,
            priority=Priority.high,
            inputs=inputs,
        )
    ]


def _checks(session: Session) -> list:
    from tasks.model.checks import model_checks

    return model_checks(session)


UNIT = PhaseUnit(
    name="model", runs_on_variants=True, specs=_specs, results=(MODEL_FACTS,), requires=("host",), checks=_checks
)
