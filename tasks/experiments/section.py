"""The findings' "Experiments: predicted vs realised" section, and the ledger records it adds."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.report import md_table
from orchestrator.schema import Status
from tasks.decisions.decide import Decision
from tasks.decisions.earlier import identity
from tasks.decisions.formula import evaluate, fmt_figure, fmt_ms
from tasks.decisions.ledger import LEDGER_NAME, LedgerRecord, LevelOutcome, new_records
from tasks.decisions.rules import campaign_rules
from tasks.decisions.vocabulary import provenance
from tasks.experiments.chain import chain_ids
from tasks.experiments.kernel_moves import idle_moves_note, kernel_moves_note
from tasks.experiments.kv_kernels import kv_kernel_note
from tasks.experiments.levels_section import levels_table, misses
from tasks.experiments.plan import configured, experiments_run
from tasks.experiments.results import DECISION_RECORD, DecisionRecord
from tasks.experiments.sweep_section import sweep_section
from tasks.experiments.verify import Verification, variant_findings, verify
from tasks.view import Findings, fmt


def read_before(name: str, measured: float, figures: dict[str, float | None]) -> str:
    """What the prediction read for an input the experiment measured, where it differs."""
    before = figures.get(name)
    if before is None or fmt_figure(before) == fmt_figure(measured):
        return ""
    return f" (the prediction read {fmt_figure(before)})"


def responsible_input(v: Verification, figures: dict[str, float | None]) -> str:
    """Where the prediction misses (outside the realised interval and the 0.8-1.25 band): the measured
    input that alone, at the experiment's value with every other input as the prediction read it, comes
    closest to the realised change — the one the miss is put down to, where it closes at least half the gap."""
    real = v.realised
    if v.predicted_ms is None or real.delta_ms is None or v.ratio is None or not misses(v):
        return ""
    alone = {
        name: ms
        for name, value in v.measured_inputs.items()
        if value is not None
        and read_before(name, value, figures)  # the experiment moved it
        and (ms := evaluate(v.formula, figures | {name: value})) is not None
    }
    if not alone:
        return ""
    name = min(alone, key=lambda n: abs(alone[n] - real.delta_ms))  # type: ignore[operator]
    if abs(alone[name] - real.delta_ms) > abs(v.predicted_ms - real.delta_ms) / 2:  # type: ignore[operator]
        return ""  # no one input explains most of it (host time the formula does not hold, say: noted below)
    return (
        f"; the input responsible for the miss: {name} (with the experiment's value alone, the prediction would"
        f" have been {fmt_ms(alone[name])} ms)"
    )


def verifications(findings: Findings, rules: object) -> tuple[DecisionRecord | None, list[Verification]]:
    record = findings.result(DECISION_RECORD)
    if record is None:
        return None, []
    todos = findings.state.by_id()
    out = []
    for experiment in experiments_run(findings):
        if experiment.grid:
            continue  # a sweep's point: tasks/experiments/sweep_section.py
        found = verify(findings, record, experiment, rules)
        chain = [todos[i] for i in chain_ids(experiment).values() if i in todos]
        found.complete = all(todo.status == Status.completed for todo in chain)
        failed = next((todo for todo in chain if todo.status == Status.failed), None)
        if failed is not None:
            message = failed.error.message.splitlines()[0][:200] if failed.error else "no message"
            found.failure = f"`{failed.id}`: {message}"
        out.append(found)
    return record, out


def experiments_section(findings: Findings) -> str:
    """The experiments unit's closing section (after the decision record, which it checks)."""

    rules = campaign_rules(findings)
    record, found = verifications(findings, rules)
    explicit, candidates, not_applicable = configured(findings.session)
    if record is None:
        return (
            (
                "## Experiments: predicted vs realised\n\nThe decision record has not been written yet:"
                " `orchestrate resume` goes on.\n"
            )
            if explicit or candidates
            else ""
        )
    if not found and not candidates:
        return sweep_section(findings, rules)
    text = (
        "## Experiments: predicted vs realised\n\nEach experiment relaunched the server with one option applied"
        " and served it as the campaign did (same levels, repeats and prompts). Predicted: the decision record's"
        f" ΔTPOT, written before any experiment ran, at c={record.concurrency} (the capture's level). Realised:"
        " the campaign's TPOT there minus the variant's, each the median of its runs' mean TPOT (vLLM's"
        " definition: (E2E − TTFT)/(output tokens − 1)), the interval from the runs' min-max on both sides."
        " Calibrated: the same formula with the inputs the experiment measured in place of the"
        " assumptions. Positive is faster.\n\n"
    )
    rows = []
    for v in found:
        r = v.realised
        rows.append(
            [
                v.experiment.name,
                v.experiment.change.describe(),
                v.decision,
                fmt_ms(v.predicted_ms),
                f"{fmt(r.base_ms, 3)} → {fmt(r.variant_ms, 3)}",
                f"{fmt_ms(r.delta_ms)} [{fmt_ms(r.low_ms)}, {fmt_ms(r.high_ms)}]",
                "n/a" if v.ratio is None else f"{v.ratio:.2f}",
                fmt_ms(v.calibrated_ms),
                "n/a" if v.calibrated_ratio is None else f"{v.calibrated_ratio:.2f}",
                f"**failed** at {v.failure} (the campaign's own findings stand; `orchestrate resume` retries it)"
                if v.failure
                else v.verdict + ("" if v.complete else " (**experiment not finished**)"),
            ]
        )
    if rows:
        text += md_table(
            [
                "experiment",
                "change",
                "decision",
                "predicted ms",
                "TPOT ms base → variant",
                "realised ms [interval]",
                "predicted / realised",
                "calibrated ms",
                "calibrated / realised",
                "verdict",
            ],
            rows,
        )
    text += levels_table(found, record)
    text += "\nCalibration, per formula:\n\n"
    for v in found:
        measured = (
            ", ".join(
                f"{k} = {fmt_figure(value)}" + read_before(k, value, record.figures)
                for k, value in v.measured_inputs.items()
                if value is not None
            )
            or "nothing"
        )
        assumed = (", ".join(f"{k} (assumed)" for k in v.still_assumed)) or "no assumption left"
        line = (
            f"- **{v.experiment.name}** `{v.formula}`: measured {measured}; {assumed}; prediction"
            f" {fmt_ms(v.predicted_ms)} ms → calibrated {fmt_ms(v.calibrated_ms)} ms against realised"
            f" {fmt_ms(v.realised.delta_ms)} ms" + responsible_input(v, record.figures)
        )
        spec = v.variant_figures.get("x_spec_mean_acceptance_length")
        drafts = v.variant_figures.get("x_spec_drafts")
        # a speculative option (either drafter), or another variant that drafted (a grid point)
        if spec is not None and (v.experiment.option.startswith("speculative_decoding") or drafts):
            per_step = v.variant_figures.get("x_spec_tokens_per_step")
            how = provenance("spec_expected_tokens", record.figures, record.assumptions, record.earlier)
            line += (
                f". The variant's stream: {fmt_figure(per_step)} tokens a decode step (decode tokens over the"
                f" chunks they came in, one a step; vLLM's counters: mean acceptance length {spec:.2f} over"
                f" {fmt_figure(drafts)} drafts)"
                + (" (no draft was proposed: the n-gram found no match in these prompts)" if not drafts else "")
                + f", against the predicted {fmt_figure(record.figures.get('spec_expected_tokens'))}"
                + (
                    " (the drafter replayed over the campaign's outputs)"
                    if how.startswith("measured")
                    else " (assumed)"
                )
            )
        variant = variant_findings(findings, v.experiment)
        kernels = kv_kernel_note(findings, variant) if v.experiment.option == "fp8_kv_cache" else None
        moves = [kernel_moves_note(findings, variant), idle_moves_note(findings, variant)]
        text += line + "".join(f"; {note}" for note in [*v.notes, *_trace_change(v), kernels, *moves] if note) + ".\n"
    if candidates or not_applicable:
        # Only the options this campaign's record says apply: what a W4A16 checkpoint would need is no
        # advice for a model already int4, nor halving TP at TP 1.
        unreachable = {
            k: why
            for k, why in not_applicable.items()
            if (option := record.option(k)) is None or option.decision != Decision.NOT_APPLICABLE
        }
        text += (
            f'\n`experiments = "auto"` ran {ELIGIBLE}. Options that apply here but that it cannot apply by'
            " configuration: " + ("; ".join(f"{k}: {why}" for k, why in unreachable.items()) or "none") + ".\n"
        )
    mine, added = _ledger(findings, record, [v for v in found if v.complete])
    where = (
        f"{added} record(s) added by this document"
        if added == mine
        else f"{mine} record(s) of this campaign's experiments, {added} added by this document, the rest by an earlier"
        " report of this campaign"
    )
    text += (
        f"\nLedger: [{LEDGER_NAME}](../{LEDGER_NAME}) ({where};"
        " `orchestrate ledger` prints every verified option with the median error).\n"
    )
    return text + ("\n" + sweep if (sweep := sweep_section(findings, rules)) else "")


def _trace_change(v: Verification) -> list[str]:
    """Where the realised change sits: on the device or on the host, from the two traces and the
    untraced TPOTs; a formula of device figures cannot see the second. The host part is read as
    untraced TPOT less the traced device work, not from the traced step's wall: the profiler's
    own cost differs between servers (on the H100 the variants' traced walls grew 0.74-0.79 ms
    while their untraced TPOTs moved 0.08-0.18)."""
    pairs = [
        (what, v.base_figures.get(name), v.variant_figures.get(f"x_{name}"))
        for what, name in (("device work", "device_ms"), ("wall", "step_wall_ms"))
    ]
    if any(base is None or variant is None for _, base, variant in pairs):
        return []
    notes = [
        "the traces, a step: "
        + ", ".join(f"{what} {base:.3f} → {variant:.3f} ms ({variant - base:+.3f})" for what, base, variant in pairs)
    ]
    idle, x_idle = v.base_figures.get("idle_ms"), v.variant_figures.get("x_idle_ms")
    if idle is not None and x_idle is not None:
        notes.append(f"device idle between a step's kernels {idle:.3f} → {x_idle:.3f} ms ({x_idle - idle:+.3f})")
    (_, device, x_device), (_, wall, x_wall) = pairs
    tpot, x_tpot = v.base_figures.get("tpot_ms"), v.variant_figures.get("x_tpot_ms")
    # An option whose measured inputs read TPOT or the wall (a speculative step's cost, lower TP's
    # host saving) has the host time in its calibrated figure already.
    reads_host = any("tpot_ms" in e or "step_wall_ms" in e for e in v.measured_expressions.values())
    if tpot is None or x_tpot is None or reads_host:
        return notes
    beyond, x_beyond = tpot - device, x_tpot - x_device  # type: ignore[operator]
    if abs(x_beyond - beyond) > max(0.05, 0.1 * abs(v.realised.delta_ms or 0)):
        notes.append(
            f"**TPOT beyond the device work went {beyond:.3f} → {x_beyond:.3f} ms ({x_beyond - beyond:+.3f})**"
            " (the untraced TPOT less the traced step's device work): host time, between kernels or between"
            " steps, which no device-time input of this formula holds; the gap between calibrated and realised"
            f" is there, not in an assumption (under the profiler the step's wall beyond its device work went"
            f" {wall - device:.3f} → {x_wall - x_device:.3f} ms)"  # type: ignore[operator]
        )
    return notes


ELIGIBLE = (
    "the prioritised options, those not pursued only for noise and precision trades whose predicted"
    " change clears the bar, by predicted gain"
)


def _ledger(findings: Findings, record: DecisionRecord, found: list[Verification]) -> tuple[int, int]:
    """This campaign's records and how many of them are new to the ledger: a report regenerated
    (`orchestrate report`, a resume after the last task) finds them there already."""

    mine = identity(findings)
    todos = findings.state.by_id()
    records = []
    for v in found:
        last = max(
            (todos[i].finished_at for i in chain_ids(v.experiment).values() if i in todos and todos[i].finished_at),
            default=None,
        )
        if last is None or v.realised.delta_ms is None:
            continue
        records.append(
            LedgerRecord(
                id=f"{findings.state.campaign}/{v.experiment.name}/{last.isoformat()}",
                campaign=findings.state.campaign,
                experiment=v.experiment.name,
                option=v.experiment.option,
                change=v.experiment.change.describe(),
                model=mine.model,
                hardware=mine.hardware,
                vllm=mine.vllm,
                concurrency=record.concurrency,
                predicted_ms=v.predicted_ms,
                realised_ms=v.realised.delta_ms,
                realised_low_ms=v.realised.low_ms,
                realised_high_ms=v.realised.high_ms,
                base_tpot_ms=v.realised.base_ms,
                calibrated_ms=v.calibrated_ms,
                still_assumed=v.still_assumed,
                measured_inputs={k: val for k, val in v.measured_inputs.items() if val is not None},
                levels=[
                    LevelOutcome(
                        concurrency=check.concurrency,
                        predicted_ms=check.predicted_ms,
                        realised_ms=check.realised.delta_ms,
                        realised_low_ms=check.realised.low_ms,
                        realised_high_ms=check.realised.high_ms,
                        base_tpot_ms=check.realised.base_ms,
                    )
                    for check in v.levels
                ],
                provenance={
                    name: provenance(name, record.figures, record.assumptions, record.earlier)
                    for name in (
                        record.option(v.experiment.option).inputs if record.option(v.experiment.option) else {}
                    )
                },
                recorded_at=datetime.now(UTC).isoformat(),
            )
        )
    new = new_records(findings.session.reports_dir / LEDGER_NAME, records) if records else []
    findings.outputs.ledger.extend(new)  # appended by the document's writer (tasks/findings.py)
    return len(records), len(new)
