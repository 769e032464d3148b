"""`[campaign]`: the engine's part of campaign.toml (name, phases, attempts) and the campaign-wide
choices (a baseline to compare with, the decision rules, experiments). Declared once: the
assembled config (tasks/config.py) narrows `phases` to the units it has, the typed config
(tasks/config_types.py) names this class."""

from __future__ import annotations

from pydantic import Field, field_validator

from tasks.models import Section


class CampaignSection(Section):
    name: str = Field("default", pattern=r"^[A-Za-z0-9_.-]+$")
    phases: list[str] = Field(
        default_factory=list, description="the phase units to run (the ones they require come too)"
    )
    max_attempts: int = Field(3, ge=1, le=100)
    baseline: str | None = Field(
        None,
        description="a todo file, report folder or baseline.json to compare against: the findings gain a"
        " 'Versus baseline' section",
    )
    applied_option: str | None = Field(
        None,
        description="the decision option this campaign applied (its id): a comparison shows its predicted"
        " gain beside the realised one",
    )
    decision_rules: str | None = Field(None, description="a decision rules file replacing the shipped one")
    auto_experiments: bool = Field(
        False,
        description="besides the [[experiments]] listed, run the options the decision record calls for (what"
        " experiments = 'auto' does alone)",
    )
    max_experiments: int = Field(3, ge=0, le=50, description="experiments 'auto' adds at most")
    auto_rank_concurrency: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="'auto' ranks the options it may run by their predicted gain at this concurrency (one the"
        " campaign serves: 1 or a sweep level); the capture's level by default",
    )

    @field_validator("phases")
    @classmethod
    def _unique(cls, phases: list[str]) -> list[str]:
        if len(set(phases)) != len(phases):
            raise ValueError("a phase is listed twice")
        return phases
