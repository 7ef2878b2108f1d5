"""The service builds its scheduler like the simulator does: same default placement per policy,
so a live cluster and ``tiresias-sim`` with the same options decide alike."""

from __future__ import annotations

import pytest

from coordinator.service.coordinator import Options
from coordinator.service.core_adapter import build_scheduler
from coordinator.sim.engine import SimOptions
from coordinator.sim.engine import build_scheduler as build_sim_scheduler


@pytest.mark.parametrize(
    ("policy", "placement"),
    [
        ("tiresias-l", "skew"),
        ("tiresias-g", "skew"),
        ("yarn-cs", "yarn"),
        ("best-effort", "yarn"),
        ("srtf", "consolidate"),
        ("las", "consolidate"),
    ],
)
def test_default_placement_follows_the_policy_as_in_the_simulator(
    policy: str, placement: str
) -> None:
    live = build_scheduler(Options(policy=policy))
    assert live.placement.name == placement
    assert type(live.placement) is type(build_sim_scheduler([], policy, SimOptions())[0].placement)


def test_configured_placement_wins() -> None:
    assert build_scheduler(Options(policy="yarn-cs", placement="spread")).placement.name == "spread"
