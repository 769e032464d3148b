"""The cross-phase sections of the findings: what no single phase can say alone (summary,
setup, cross-checks, bottleneck, decision record, baseline, the config the results came from).
They read typed results only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tasks.service.results import SERVICE_READY
from tasks.view import Findings


def opening_sections(findings: Findings) -> list[str]:
    from tasks.synthesis.figures import key_figures
    from tasks.synthesis.server_ran import server_ran_section
    from tasks.synthesis.setup import setup_section
    from tasks.synthesis.summary import summary_section

    figures = key_figures(findings)
    ready = findings.result(SERVICE_READY)
    return [
        summary_section(figures),
        setup_section(findings),
        server_ran_section(ready.load if ready else None, figures.rank0, figures.model),
    ]


def closing_sections(findings: Findings, after_decision: Callable[[Findings, Any], str] | None = None) -> list[str]:
    """``after_decision`` adds sections that read the decision record (the experiments, which
    import this package and so cannot be imported by it)."""
    from tasks.synthesis.crosscheck import crosscheck_section
    from tasks.synthesis.decisions import campaign_rules, decide
    from tasks.synthesis.estimates import rule_figures
    from tasks.synthesis.figures import key_figures
    from tasks.synthesis.record import baseline_section, configuration_section, decision_section
    from tasks.synthesis.step_model import step_model_section
    from tasks.synthesis.summary import bottleneck_section

    figures = key_figures(findings)
    rules = campaign_rules(findings)
    record = decide(rule_figures(figures, rules.assumptions), rules)
    return [
        crosscheck_section(figures, figures.capture),
        step_model_section(figures),
        bottleneck_section(figures),
        decision_section(figures, rules, record, findings),
        after_decision(findings, rules) if after_decision else "",
        baseline_section(figures, findings, record),
        configuration_section(findings),
    ]
