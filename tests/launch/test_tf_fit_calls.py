"""A process's ``fit`` calls are numbered: a resumed script whose finished calls trained
another model than the checkpoint recorded is refused, not silently reset."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from helpers import wait_until

from coordinator.gang import GangRequest
from tiresias_launch import EXIT_CHECKPOINTED

from .gangs import SCRIPTS, start

pytestmark = pytest.mark.tf
TIMEOUT = 180


def test_fit_calls_in_another_order_after_a_resume_are_refused(tmp_path: Path) -> None:
    def two_models(order: str) -> GangRequest:
        return GangRequest((str(SCRIPTS / "two_models.py"), order))

    # 16 batches a call: step 20 is inside the second call (model "b")
    a = start(two_models("ab"), tmp_path, env={"TIRESIAS_HOLD_AT_STEP": "20"})
    wait_until(lambda: "holding at step 20" in a.logs[0].read_text(), TIMEOUT, "the hold")
    a.signal(signal.SIGTERM)
    assert a.wait(TIMEOUT) == [EXIT_CHECKPOINTED], a.tails()

    b = start(two_models("ba"), tmp_path, restart=1)
    assert b.wait(TIMEOUT) == [1], b.tails()
    out = b.logs[0].read_text()
    assert "CheckpointError: fit call 1 trained model 'a' before the preemption" in out
    assert "done" not in out.splitlines()


def test_fit_calls_sharing_a_generator_resume_where_the_stream_was(tmp_path: Path) -> None:
    """Three fit calls over one generator, preempted in the third: the resumed run replays
    the two finished calls by drawing what they drew, so the third trains on the batches
    that follow the ones it trained before the preemption."""
    trained = tmp_path / "trained"
    request = GangRequest((str(SCRIPTS / "staged_generator.py"), str(trained)))
    # 5 batches a call: after step 12, two batches into the third call
    a = start(request, tmp_path, env={"TIRESIAS_HOLD_AT_STEP": "12"})
    wait_until(lambda: "holding at step 12" in a.logs[0].read_text(), TIMEOUT, "the hold")
    a.signal(signal.SIGTERM)
    assert a.wait(TIMEOUT) == [EXIT_CHECKPOINTED], a.tails()
    before = [int(n) for n in trained.read_text().split()]
    assert len(before) == 12

    b = start(request, tmp_path, restart=1)
    assert b.wait(TIMEOUT) == [0], b.tails()
    after = [int(n) for n in trained.read_text().split()][12:]
    assert after == [before[-1] + 1, before[-1] + 2, before[-1] + 3], (before, after)
