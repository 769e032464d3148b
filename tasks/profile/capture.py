"""The `profile` phase's work: a torch.profiler capture of decode steps through vLLM's own profiler endpoints.

The server was launched with `--profiler-config` from the start (one model load a campaign).
Warmup, POST /start_profile, a batch of decode-heavy requests, POST /stop_profile (it blocks
until the traces are written: minutes on big models), wait until every rank's trace is complete
(size stable and gzip readable to the end), then fetch them. A manifest written last marks the
capture safe; a rerun with its files present does not capture again, and an interrupted fetch
resumes where it stopped.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.atomic import write_atomic
from orchestrator.campaign import TaskContext
from orchestrator.errors import TaskFailed
from tasks.host_json import run_json_script
from tasks.macro.action import LOADGEN_SCRIPT, load_args, require_live_server
from tasks.macro.metrics import summarize
from tasks.profile.results import CaptureLoad, CaptureManifest, PendingCapture
from tasks.service.launch import profiler_dir
from tasks.session import Node, Session

MANIFEST = "manifest.json"
TRACES_APPEAR_S = 60


def list_traces(session: Session, node: Node | None = None) -> dict[str, int]:
    """The trace files in the profiler folder of the host (or ``node``): name -> bytes."""
    node = node or session.nodes[0]
    folder = shlex.quote(profiler_dir(session, node))
    out = (
        session.node_host(node.index)
        .run(
            f"cd {folder} 2>/dev/null && for f in *.pt.trace.json.gz; do "
            f'[ -e "$f" ] && echo "$(stat -c %s "$f") $f"; done; true',
            timeout_s=60,
        )
        .stdout
    )
    return {name: int(size) for size, name in (line.split(" ", 1) for line in out.splitlines() if line)}


RANK_TRACE = re.compile(r"(?:^|_)rank(\d+)\.\d+\.pt\.trace\.json\.gz$")


def rank_traces(files: dict[str, int], ranks: int) -> dict[int, str]:
    """Each worker's trace among the new files: `rank0.<ns>.pt.trace.json.gz` (dense models) or
    `dp0_pp0_tp0_dcp0_ep0_rank0.<ns>.pt.trace.json.gz` (vLLM 0.26 MoE models). The API server's
    `<host>_<pid>.async_llm.<ns>...` file is not a rank. The latest file of a rank wins."""
    found = {}
    for name in sorted(files):
        if match := RANK_TRACE.search(name):
            found[int(match[1])] = name
    return {rank: found[rank] for rank in range(ranks) if rank in found}


def wait_complete(
    session: Session,
    names: list[str],
    deadline_s: float,
    node: Node | None = None,
    progress: Callable[..., None] | None = None,
) -> None:
    """Each file's size stable across polls and `gzip -t` clean: written to the end. ``progress``
    sees the bytes written so far (the profiler of a big model writes for minutes)."""
    node = node or session.nodes[0]
    folder = profiler_dir(session, node)
    deadline = time.monotonic() + deadline_s
    pending = set(names)
    last_sizes: dict[str, int] = {}
    while pending:
        sizes = list_traces(session, node)
        if progress is not None:
            written = sum(sizes.get(name, 0) for name in names) / 1e6
            progress(
                f"traces written{f' on {node.name}' if session.multi_node else ''}",
                round(written, 1),
                None,
                "MB",
                f"{len(names) - len(pending)} of {len(names)} complete",
            )
        for name in sorted(pending):
            if sizes.get(name) and sizes[name] == last_sizes.get(name):
                test = session.node_host(node.index).run(["gzip", "-t", f"{folder}/{name}"], check=False, timeout_s=600)
                if test.exit_code == 0:
                    pending.discard(name)
        last_sizes = sizes
        if pending and time.monotonic() > deadline:
            raise TaskFailed(f"traces still incomplete after {deadline_s:.0f} s: {sorted(pending)}")
        if pending:
            time.sleep(1)


def safe_manifest(artifacts_dir: Path, settings: dict[str, int]) -> CaptureManifest | None:
    """The manifest of an earlier complete capture with these settings whose files are all
    here, whole (a capture made with other settings is not reused)."""
    manifest_path = artifacts_dir / MANIFEST
    if not manifest_path.exists():
        return None
    try:
        manifest = CaptureManifest.model_validate_json(manifest_path.read_bytes())
    except ValueError:
        return None  # written by another version, or damaged: capture again
    if any(getattr(manifest, key) != value for key, value in settings.items()):
        return None
    folder = Path(manifest.folder)
    if all(
        (folder / name).exists() and (folder / name).stat().st_size == size for name, size in manifest.files.items()
    ):
        return manifest
    return None


def capture_action(session: Session):
    def run(ctx: TaskContext) -> CaptureManifest:
        local_dir = ctx.artifacts_dir / "traces"
        tp = session.config.service.tensor_parallel
        cfg = session.config.profile
        settings = {
            "requests": cfg.requests,
            "output_tokens": cfg.output_tokens,
            "concurrency": cfg.concurrency,
            "input_tokens": session.config.macro.input_tokens,
        }
        manifest = safe_manifest(ctx.artifacts_dir, settings)
        if manifest is not None:
            ctx.log("traces already safe; not capturing again")
            return manifest
        pending_path = ctx.artifacts_dir / "pending_capture.json"
        if pending_path.exists():
            # An earlier attempt captured but died while fetching: fetch those, don't re-capture.
            chosen = PendingCapture.model_validate_json(pending_path.read_bytes())
        else:
            chosen = capture_on_host(session, ctx, tp, cfg)
            write_atomic(pending_path, chosen.model_dump_json().encode())
        files = {}
        nodes = session.nodes
        for rank, name in sorted(chosen.ranks.items(), key=lambda item: int(item[0])):
            node = nodes[chosen.nodes.get(rank, 0)]
            session.node_host(node.index).get(
                f"{profiler_dir(session, node)}/{name}",
                local_dir / name,
                progress=lambda done, total, rank=rank: ctx.progress(
                    f"fetch rank {rank}", round(done / 1e6, 1), round(total / 1e6, 1), "MB"
                ),
            )
            files[name] = (local_dir / name).stat().st_size
        manifest = CaptureManifest(
            files=files,
            ranks=chosen.ranks,
            nodes=chosen.nodes,
            node_names=chosen.node_names,
            stop_profile_s=chosen.stop_profile_s,
            folder=str(local_dir),
            load=chosen.load,
            **settings,
        )
        write_atomic(ctx.artifacts_dir / MANIFEST, manifest.model_dump_json(indent=1).encode())
        pending_path.unlink(missing_ok=True)
        ctx.log(f"fetched {len(files)} rank traces, {sum(files.values()) / 1e6:.1f} MB")
        return manifest

    return run


def capture_on_host(session: Session, ctx: TaskContext, tp: int, cfg) -> PendingCapture:
    host = session.host()
    port = session.config.service.port
    before = {node.index: set(list_traces(session, node)) for node in session.nodes}
    common = load_args(session, ctx, session.config.macro.input_tokens, cfg.output_tokens)
    if cfg.warmup_requests:
        run_json_script(
            session,
            LOADGEN_SCRIPT,
            common + ["--requests", str(cfg.warmup_requests), "--warmup", "0", "--progress-label", "warmup"],
            timeout_s=1800,
            progress=ctx.progress,
        )
    status, body = host.http_post(port, "/start_profile", timeout_s=120)
    if status == 404:
        raise TaskFailed(
            "the server has no /start_profile: it was not started with --profiler-config"
            " (an adopted server?); stop it and `orchestrate resume` to relaunch it"
        )
    if status != 200:
        raise TaskFailed(f"POST /start_profile answered {status}: {body[:300]}")
    try:
        load = run_json_script(
            session,
            LOADGEN_SCRIPT,
            common
            + [
                "--requests",
                str(cfg.requests),
                "--concurrency",
                str(cfg.concurrency),
                "--warmup",
                "0",
                "--progress-label",
                "profiled load",
            ],
            timeout_s=3600,
            progress=ctx.progress,
        )
    finally:
        ctx.log("POST /stop_profile: the profiler writes each rank's trace before it answers (minutes on a big model)")
        started = time.monotonic()
        status, body = host.http_post(port, "/stop_profile", timeout_s=cfg.stop_timeout_s)
        stop_s = time.monotonic() - started
    if status != 200:
        raise TaskFailed(f"POST /stop_profile answered {status} after {stop_s:.0f} s: {body[:300]}")
    ctx.log(f"/stop_profile returned after {stop_s:.1f} s")
    summary = summarize(load)
    require_live_server(session, summary["failed"], len(load["requests"]), summary["failure_examples"], "profiled")
    if session.multi_node:
        from tasks.service.node_deaths import fail_if_node_died

        fail_if_node_died(session, "during the capture")
    ranks = await_rank_traces(session, before, tp)
    for node in session.nodes:
        wait_complete(
            session,
            [name for rank, name in ranks.items() if ranks.nodes[rank] == node.index],
            cfg.stop_timeout_s,
            node,
            progress=ctx.progress,
        )
    return PendingCapture(
        ranks={str(rank): name for rank, name in ranks.items()},
        nodes={str(rank): index for rank, index in ranks.nodes.items()},
        node_names={str(node.index): node.name for node in session.nodes} if session.multi_node else {},
        stop_profile_s=round(stop_s, 2),
        load=CaptureLoad(
            requests=len(load["requests"]),
            duration_s=load["duration_s"],
            concurrency=cfg.concurrency,
            failed=summary["failed"],
            tpot_ms=summary["tpot_ms"],
            telemetry=summary["telemetry"],
            output_tokens=summary["output_tokens"],
        ),
    )


class RankTraces(dict):
    """rank -> trace file name, and in ``nodes`` the node each was written on."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[int, int] = {}


def await_rank_traces(
    session: Session, before: set[str] | dict[int, set[str]], tp: int, appear_s: float = TRACES_APPEAR_S
) -> RankTraces:
    """Every rank's new trace file, on whichever node wrote it (each node writes its own
    ranks' traces in its own folder). `/stop_profile` returns once the traces are written, so
    they appear within seconds: after ``appear_s`` the capture fails, listing what it found.
    A file whose name gives no rank (a naming vLLM has not used before) is asked for the rank
    in its `distributedInfo`."""
    known = before if isinstance(before, dict) else {0: before}
    deadline = time.monotonic() + appear_s
    asked: dict[tuple[int, str], int | None] = {}
    while True:
        ranks = RankTraces()
        new_names: list[str] = []
        for node in session.nodes:
            new = {
                name: size
                for name, size in list_traces(session, node).items()
                if name not in known.get(node.index, set())
            }
            new_names += sorted(new)
            by_name = rank_traces(new, tp)
            for name in sorted(new):
                if name not in by_name.values() and ".async_llm." not in name:
                    if (node.index, name) not in asked:
                        asked[node.index, name] = rank_in_file(session, f"{profiler_dir(session, node)}/{name}", node)
                    rank = asked[node.index, name]
                    if rank is not None and rank < tp and rank not in by_name:
                        by_name[rank] = name
            for rank, name in by_name.items():
                if rank not in ranks:
                    ranks[rank] = name
                    ranks.nodes[rank] = node.index
        if len(ranks) == tp:
            ordered = RankTraces()
            for rank in sorted(ranks):
                ordered[rank] = ranks[rank]
                ordered.nodes[rank] = ranks.nodes[rank]
            return ordered
        if time.monotonic() > deadline:
            folders = ", ".join(profiler_dir(session, node) for node in session.nodes)
            raise TaskFailed(
                f"/stop_profile returned but after {appear_s:.0f} s only ranks {sorted(ranks)}"
                f" of {tp} have a trace in {folders}; new files there: {new_names or 'none'}"
            )
        time.sleep(1)


RANK_PROBE = (
    "import gzip, re, sys\n"
    "head = gzip.open(sys.argv[1]).read(4 << 20)\n"
    'm = re.search(rb\'"distributedInfo"\\s*:\\s*\\{[^{}]*?"rank"\\s*:\\s*(\\d+)\', head)\n'
    "print(m.group(1).decode() if m else '')\n"
)


def rank_in_file(session: Session, path: str, node: Node | None = None) -> int | None:
    """The rank a trace's `distributedInfo` names (read on the host, first 4 MB), or None."""
    node = node or session.nodes[0]
    out = session.node_host(node.index).run([node.python, "-c", RANK_PROBE, path], check=False, timeout_s=120)
    text = out.stdout.strip()
    return int(text) if out.exit_code == 0 and text.isdigit() else None
