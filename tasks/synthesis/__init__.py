"""The cross-phase sections of the findings: what no single phase can say alone (summary,
setup, cross-checks, bottleneck, decision record, baseline, the config the results came from).
They read typed results only."""

from __future__ import annotations

from tasks.view import Findings


def opening_sections(findings: Findings) -> list[str]:
    from tasks.synthesis.figures import key_figures
    from tasks.synthesis.setup import setup_section
    from tasks.synthesis.summary import summary_section

    return [summary_section(key_figures(findings)), setup_section(findings)]


def closing_sections(findings: Findings) -> list[str]:
    from tasks.synthesis.crosscheck import crosscheck_section
    from tasks.synthesis.figures import key_figures
    from tasks.synthesis.record import baseline_section, configuration_section, decision_section
    from tasks.synthesis.summary import bottleneck_section

    figures = key_figures(findings)
    return [crosscheck_section(figures), bottleneck_section(figures), decision_section(figures),
            baseline_section(figures, findings), configuration_section(findings)]
