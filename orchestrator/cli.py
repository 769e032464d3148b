"""The engine's command line: init, resume, status, reset, report, schema, check, stop over any
campaign.

The engine does not know which campaign it runs: the application passes ``open_campaign``,
which turns the options (config path, state path, reports folder) into a ``Campaign`` (and
chooses the host transport). Every error is one line and a documented exit code.

Exit codes: 0 done; 1 a task failed (`resume` retries it); 2 bad input (config, state file,
trace, arguments); 3 the state is locked by another orchestrate; 4 the host could not be
reached or refused us; 130 interrupted (state saved).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.campaign import Campaign
from orchestrator.errors import BAD_INPUT, DONE, EXIT_CODES, InputError, Interrupted, OrchestrateError
from orchestrator.schema import TodoState


@dataclass
class OpenedCampaign:
    """What the application hands the engine: the campaign, where its config came from, and
    how to release what opening it took (a host connection)."""

    campaign: Campaign
    source: str
    close: Callable[[], None] = field(default=lambda: None)


CampaignOpener = Callable[[Path | None, Path, Path], OpenedCampaign]


@dataclass
class ExtraCommand:
    """An application's own subcommand (e.g. `compare`): its help, its arguments, and what it
    runs with the parsed options; it needs no campaign opened."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("orchestrate")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


GLOBAL_OPTIONS = (
    ("--config", None, "campaign TOML (default: ./campaign.toml, else the embedded default)"),
    ("--state", Path("state/todo.json"), "todo state file (default: state/todo.json)"),
    ("--reports", Path("reports"), "folder for findings documents (default: reports)"),
)


def _add_options(parser: argparse.ArgumentParser, with_defaults: bool) -> None:
    for flag, default, text in GLOBAL_OPTIONS:
        parser.add_argument(flag, type=Path, default=default if with_defaults else argparse.SUPPRESS, help=text)


def _parser(description: str, extra: dict[str, ExtraCommand]) -> argparse.ArgumentParser:
    # The global options are accepted before or after the subcommand (`orchestrate resume --config
    # X`): each subcommand takes them too, with SUPPRESS defaults so that one given before the
    # subcommand is not reset by the subcommand's own parse.
    parser = argparse.ArgumentParser(
        prog="orchestrate",
        description=description,
        epilog="exit codes: "
        + "; ".join(f"{code} {meaning.split(';')[0].split(' (')[0]}" for code, meaning in EXIT_CODES.items()),
    )
    _add_options(parser, with_defaults=True)
    parser.add_argument("--version", action="version", version=f"orchestrate {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        subparser = sub.add_parser(name, help=text, description=text)
        _add_options(subparser, with_defaults=False)
        return subparser

    command("init", "write the campaign's todo file").add_argument(
        "--force", action="store_true", help="start over; the old file is kept as .bak"
    )
    command(
        "resume", "run the campaign from where its todo file stands (after the pre-flight checks, once a configuration)"
    ).add_argument("--no-check", action="store_true", help="skip the pre-flight checks (`orchestrate check`)")
    command("status", "print the todo table")
    command("reset", "re-queue a todo and everything that depends on it").add_argument("task")
    command("report", "regenerate the findings document now")
    command("schema", "print the JSON Schema of the todo file")
    command(
        "stop",
        "stop what the campaign started on the host (its server's whole process tree) and"
        " free the accelerators; refused while an orchestrate runs on this state",
    )
    command(
        "check",
        "pre-flight: the host, its software, the model, ports, accelerators and disk,"
        " each problem one line; exit 2 when anything would stop the campaign",
    )
    for name, extra_command in extra.items():
        extra_command.arguments(command(name, extra_command.help))
    return parser


def _print_checks(campaign: Campaign, source: str) -> int:
    checks = campaign.preflight() if campaign.preflight else []
    print(f"campaign {campaign.name} (config: {source})")
    for check in checks:
        print(f"{'FAIL' if check.blocking else 'ok  '}  {check.what}: {check.found}")
    blocking = sum(check.blocking for check in checks)
    print(f"{blocking} problem{'s' * (blocking != 1)} would stop the campaign" if blocking else "ready")
    return InputError.exit_code if blocking else 0


def main(
    argv: list[str] | None,
    open_campaign: CampaignOpener,
    description: str = "",
    extra: dict[str, ExtraCommand] | None = None,
) -> int:
    extra = extra or {}
    try:
        args = _parser(description or __doc__.splitlines()[0], extra).parse_args(argv)
    except SystemExit as exit_:
        return BAD_INPUT if exit_.code not in (0, None) else DONE
    try:
        _check_paths(args)
        if args.command in extra:
            return extra[args.command].run(args)
        return _dispatch(args, open_campaign)
    except BrokenPipeError:
        # The reader of our output went away (`orchestrate schema | head`): nothing to report.
        sys.stdout = open(os.devnull, "w")  # keep Python's exit flush quiet
        return 0
    except KeyboardInterrupt:
        print(f"orchestrate: interrupted; state saved in {args.state}; `orchestrate resume` goes on", file=sys.stderr)
        return Interrupted.exit_code
    except OrchestrateError as err:
        print(f"orchestrate: error: {err}", file=sys.stderr)
        tail = getattr(err, "output_tail", "")
        if tail:
            print("--- last lines ---\n" + tail, file=sys.stderr)
        return err.exit_code


def _check_paths(args: argparse.Namespace) -> None:
    """The paths the options name, checked before anything is read or written: a folder where
    a file belongs (or the reverse), or a parent that is a file, is one line, not a traceback."""
    if args.config is not None and args.config.is_dir():
        raise InputError(f"{args.config}: is a folder; --config names the campaign's TOML file")
    if args.state.is_dir():
        raise InputError(f"{args.state}: is a folder; --state names the todo file (e.g. {args.state}/todo.json)")
    for parent in args.state.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{args.state}: {parent} is a file, not a folder; choose another --state")
            break
    if args.reports.exists() and not args.reports.is_dir():
        raise InputError(f"{args.reports}: is a file; --reports names a folder for the findings")


def _dispatch(args: argparse.Namespace, open_campaign: CampaignOpener) -> int:
    if args.command == "schema":
        print(json.dumps(TodoState.model_json_schema(), indent=2))
        return 0
    from orchestrator.results import check_stored_results
    from orchestrator.statefile import StateLock, load_state, save_state

    if args.command == "status":
        state = load_state(args.state)
        if state is None:
            raise InputError(f"{args.state}: no state yet; run `orchestrate init` or `orchestrate resume`")
        _print_status(state)
        return 0

    opened = open_campaign(args.config, args.state, args.reports)
    campaign, source = opened.campaign, opened.source
    from orchestrator.campaign import validate_graph
    from orchestrator.runner import Runner, merge_plan, reset

    validate_graph(campaign)
    try:
        if args.command == "check":
            return _print_checks(campaign, source)
        if args.command == "stop":
            with StateLock(args.state):  # a running campaign would relaunch what we stop
                for line in campaign.stop() if campaign.stop else ["nothing to stop"]:
                    print(line)
                state = load_state(args.state) if args.state.is_file() else None
                running = [todo.id for todo in state.todos if todo.status == "in_progress"] if state else []
                if running:
                    print(f"interrupted earlier, re-run by `orchestrate resume`: {', '.join(running)}")
            return 0
        if args.command == "init":
            with StateLock(args.state):
                if args.state.exists():
                    if not args.force:
                        raise InputError(
                            f"{args.state}: already exists; `orchestrate resume` goes on"
                            " from it, `orchestrate init --force` starts over"
                        )
                    backup = args.state.with_name(args.state.name + ".bak")
                    args.state.replace(backup)
                    print(f"previous state kept as {backup}")
                save_state(args.state, merge_plan(campaign, None, args.state))
            print(f"wrote {args.state} ({len(campaign.tasks)} todos, config: {source})")
            return 0
        if args.command == "reset":
            ids = reset(campaign, args.state, args.task)
            print(f"re-queued: {', '.join(ids)}")
            return 0
        if args.command == "report":
            state = load_state(args.state)
            if state is None:
                raise InputError(f"{args.state}: no state yet; run `orchestrate resume` first")
            check_stored_results(campaign, state, args.state)
            for path in campaign.report(state) if campaign.report else []:
                print(f"report written: {path}")
            return 0
        print(f"campaign '{campaign.name}' (config: {source}), state: {args.state}")
        if not args.no_check:
            from orchestrator.preflight import preflight_at_resume

            with StateLock(args.state):  # a running campaign's own server would look like a taken port
                preflight_at_resume(campaign, args.state)
        state = Runner(campaign, args.state).resume()
        _print_status(state)
        return 0
    finally:
        opened.close()


def _print_status(state: TodoState) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"campaign {state.campaign}")
    for column in ("id", "content", "priority", "status", "attempts", "duration s", "error"):
        table.add_column(column)
    for todo in state.todos:
        error = todo.error.message if todo.error else (todo.skipped_reason or "")
        table.add_row(
            todo.id,
            todo.content,
            todo.priority.value,
            todo.status.value,
            str(todo.attempts),
            f"{todo.duration_s:.1f}" if todo.duration_s is not None else "",
            error[:120],
        )
    Console(width=160).print(table)
