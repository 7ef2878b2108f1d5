"""The simulator ends on every option combination. A tick as often as a restore takes used to
preempt every resumed run of las before it had done any work: the clock went on, no job
ever finished. Now a resumed job works at least as long as its restore before it may be
preempted again (``Scheduler._guard``)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from coordinator.sim.cluster import cluster_from_shape
from coordinator.sim.engine import simulate
from coordinator.sim.traces import load_trace

FIGURE7 = Path(__file__).resolve().parents[2] / "examples" / "traces" / "figure7.csv"


@pytest.fixture
def deadline() -> Iterator[None]:
    """Turn a hang into a failure (a run takes milliseconds; 60 s is for a loaded machine)."""

    def expired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("the simulation did not end")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("policy", ["las", "tiresias-l", "tiresias-g"])
@pytest.mark.parametrize("cost", [0.5, 1.0, 2.0, 5.0])
def test_tick_no_longer_than_a_restore_still_ends(deadline: None, policy: str, cost: float) -> None:
    trace = load_trace(FIGURE7)
    result = simulate(
        trace.specs, cluster_from_shape("1x2"), policy, interval=1.0, preempt_cost=cost
    )
    assert sorted(j.job_id for j in result.jobs) == ["1", "2", "3"]
