"""A real TensorFlow job under Slurm: the TensorFlow multi-worker tutorial (Keras fit under
MultiWorkerMirroredStrategy), one worker on each of two Slurm nodes, preempted by signal at
a fixed step, requeued held, released again and resumed at exactly that step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, wait_until

from coordinator.executors.slurm.ctl import Slurm
from coordinator.executors.slurm.executor import SlurmExecutor
from tools.slurm_local import LocalSlurm

from .test_executor import Driver, gang, log_of, nodes_up

pytestmark = pytest.mark.tf
SCRIPT = REPO / "tests" / "corpus" / "scripts" / "mwms_fit.py"
HOLD = 11  # of 3 epochs × 8 steps


def test_mwms_across_two_slurm_nodes_resumes_exactly(slurm: LocalSlurm, shared: Path) -> None:
    spool, results = shared / "spool", shared / "results.json"
    ex = SlurmExecutor(spool, "", interval=0.2, slurm=Slurm("tiresias", slurm.env))
    d = Driver(ex)
    nodes_up(d, "n1", "n2")
    env = {"TF_USE_LEGACY_KERAS": "1", "TIRESIAS_HOLD_AT_STEP": str(HOLD)}
    allocation = {"n1": [0], "n2": [0]}  # one worker on each node
    ex.launch(gang("tf", 0, allocation, [str(SCRIPT), str(results)], spool, env))
    held = f"holding at step {HOLD}"
    wait_until(lambda: held in log_of(spool, "tf-test", "n1"), 240, "the chief to hold")
    ex.signal("tf", 0, ["n1", "n2"], "SIGTERM", 120.0)
    d.until(lambda ev: len(d.exits("tf", 0)) == 2, "both workers to checkpoint", 240)
    assert {e.outcome for e in d.exits("tf", 0).values()} == {"checkpointed"}

    ex.launch(gang("tf", 1, {"n1": [1], "n2": [1]}, [str(SCRIPT), str(results)], spool, env))
    d.until(lambda ev: len(d.exits("tf", 1)) == 2, "the resumed run to end", 240)
    assert {e.outcome for e in d.exits("tf", 1).values()} == {"completed"}, log_of(
        spool, "tf-test", "n1"
    )
    lines = Path(f"{results}.batches").read_text().splitlines()
    batches = [tuple(map(int, line.split())) for line in lines]
    assert batches == [(e, b) for e in range(3) for b in range(8)]  # each step once, in order
    assert json.loads(results.read_text())["iterations"] == 24
