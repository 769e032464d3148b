"""The campaign config's static type: what `Session.config` holds, section by section.

The model itself is assembled at run time from the units' sections (tasks/config.py's
`config_model`), so a unit can be added in one list; this Protocol gives readers and type
checkers the same shape (`session.config.service.port` is an int, `session.config.macro` a
MacroSection). It imports only the sections (`tasks/<unit>/config.py`), never the units.
"""

from __future__ import annotations

from typing import Literal, Protocol

from tasks.allreduce.config import AllreduceSection
from tasks.campaign_section import CampaignSection
from tasks.commands.config import CommandTask
from tasks.experiments.config import ExperimentConfig
from tasks.gemm.config import GemmSection
from tasks.host.config import HostSection, NodeSection
from tasks.macro.config import MacroSection
from tasks.profile.config import ProfileSection
from tasks.service.config import ServiceSection


class CampaignConfig(Protocol):
    campaign: CampaignSection
    host: HostSection
    nodes: list[NodeSection]
    service: ServiceSection
    macro: MacroSection
    profile: ProfileSection
    gemm: GemmSection
    allreduce: AllreduceSection
    commands: list[CommandTask]
    experiments: list[ExperimentConfig] | Literal["auto"]

    def model_copy(self, *, update: dict | None = None, deep: bool = False) -> CampaignConfig: ...

    def model_dump(self, **kwargs: object) -> dict: ...
