"""The cross-phase sections of the findings: what no single phase can say alone (summary,
setup, cross-checks, bottleneck, decision record, baseline, the config the results came from).
They read typed results only."""

from __future__ import annotations

from tasks.view import Findings


def opening_sections(findings: Findings) -> list[str]:
    from tasks.service import ServiceReady
    from tasks.synthesis.figures import key_figures
    from tasks.synthesis.server_ran import server_ran_section
    from tasks.synthesis.setup import setup_section
    from tasks.synthesis.summary import summary_section

    figures = key_figures(findings)
    ready = findings.result("service_ready", ServiceReady)
    return [summary_section(figures), setup_section(findings),
            server_ran_section(ready.load if ready else None, figures.rank0, figures.model)]


def closing_sections(findings: Findings) -> list[str]:
    from tasks.profile.results import CaptureManifest
    from tasks.synthesis.crosscheck import crosscheck_section
    from tasks.synthesis.figures import key_figures
    from tasks.synthesis.record import baseline_section, configuration_section, decision_section
    from tasks.synthesis.summary import bottleneck_section

    figures = key_figures(findings)
    capture = findings.result("profile_capture", CaptureManifest)
    return [crosscheck_section(figures, capture), bottleneck_section(figures), decision_section(figures),
            baseline_section(figures, findings), configuration_section(findings)]
