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
