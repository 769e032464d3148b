"""The cross-phase sections of the findings: what no single phase can say alone (summary,
setup, cross-checks, bottleneck, decision record, baseline, the config the results came from).
They read typed results only."""

from __future__ import annotations

from tasks.decisions.decide import Option, decide
from tasks.decisions.estimates import rule_figures
from tasks.decisions.figures import key_figures
from tasks.decisions.rules import campaign_rules
from tasks.service.results import SERVICE_READY
from tasks.synthesis.crosscheck import crosscheck_section
from tasks.synthesis.record import baseline_section, configuration_section, decision_section
from tasks.synthesis.server_ran import server_ran_section
from tasks.synthesis.setup import setup_section
from tasks.synthesis.step_model import step_model_section
from tasks.synthesis.summary import bottleneck_section, summary_section
from tasks.view import Findings


def opening_sections(findings: Findings) -> list[str]:

    figures = key_figures(findings)
    ready = findings.result(SERVICE_READY)
    return [
        summary_section(figures),
        setup_section(findings),
        server_ran_section(ready.load if ready else None, figures.rank0, figures.model),
    ]


def analysis_sections(findings: Findings) -> list[str]:
    """What the phases say together: the cross-checks, the decode-step model, the bottleneck and
    the decision record. The units' closing sections (the experiments) follow them."""

    figures = key_figures(findings)
    return [
        crosscheck_section(figures, figures.capture),
        step_model_section(figures),
        bottleneck_section(figures),
        decision_section(figures, campaign_rules(findings), judged(findings), findings),
    ]


def record_sections(findings: Findings) -> list[str]:
    """The document's last sections: the baseline comparison and the config the results came from."""

    return [baseline_section(key_figures(findings), findings, judged(findings)), configuration_section(findings)]


def judged(findings: Findings) -> list[Option]:
    """The decision record of this view, judged once (two sections read it)."""
    if "judged" not in findings.cache:
        rules = campaign_rules(findings)
        findings.cache["judged"] = decide(rule_figures(key_figures(findings), rules.assumptions), rules)
    return findings.cache["judged"]
