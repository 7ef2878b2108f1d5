"""The Slurm executor against a real Slurm, driven directly as the run lifecycle drives it:
gangs planned by the coordinator's planner, real signals, the fake job's exact checkpoints."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from helpers import FAKE_JOB, wait_until

from coordinator.gang import GangRequest, free_local_port, plan
from coordinator.service.executor import ExecutorEvent, Gang, NodeUp, PartExited, ProcessLaunch
from coordinator.service.slurm import SlurmExecutor
from tools.slurm_local import LocalSlurm


def gang(
    job_id: str, restart: int, allocation: dict[str, list[int]], argv: list[str], spool: Path
) -> Gang:
    request = GangRequest(tuple(argv), sum(map(len, allocation.values())))
    specs = plan(request, job_id, allocation, None, spool / "ckpt", restart, free_local_port,
                 job_key=f"{job_id}-test")  # fmt: skip
    parts: dict[str, list[ProcessLaunch]] = {}
    for s in specs:
        launch = ProcessLaunch(s.role, s.task_index, s.argv, dict(s.env), s.gpus)
        parts.setdefault(s.node, []).append(launch)
    return Gang(job_id, f"{job_id}-test", restart, "", 30.0, parts)


class Driver:
    """Polls the executor as the coordinator's loop does and keeps every event."""

    def __init__(self, executor: SlurmExecutor) -> None:
        self.executor = executor
        self.events: list[ExecutorEvent] = []

    def until(self, pred: Callable[[list[ExecutorEvent]], bool], what: str) -> None:
        import time

        def look() -> bool:
            self.events += self.executor.poll(time.monotonic())
            return pred(self.events)

        wait_until(look, 60, what)

    def exits(self, job_id: str, restart: int) -> dict[str, PartExited]:
        return {
            e.node: e
            for e in self.events
            if isinstance(e, PartExited) and (e.job_id, e.restart) == (job_id, restart)
        }


def log_of(spool: Path, job_key: str, node: str, name: str = "chief-0") -> str:
    path = spool / job_key / "logs" / node / f"{name}.log"
    return path.read_text() if path.exists() else ""


def test_two_node_gang_preempted_and_resumed_exactly(slurm: LocalSlurm, shared: Path) -> None:
    spool = shared / "spool"
    ex = SlurmExecutor(spool, "", slurm=None, interval=0.2)
    ex.slurm.env = slurm.env
    d = Driver(ex)
    d.until(lambda ev: {e.node for e in ev if isinstance(e, NodeUp)} == {"n1", "n2"}, "nodes")
    argv = [str(FAKE_JOB), "--steps", "6", "--step-time", "0.05", "--hold-at", "3"]
    ex.launch(gang("j1", 0, {"n1": [0], "n2": [0]}, argv, spool))
    wait_until(lambda: "holding at step 3" in log_of(spool, "j1-test", "n1"), what="the hold")
    ex.signal("j1", 0, ["n1", "n2"], "SIGTERM", 30.0)
    d.until(lambda ev: len(d.exits("j1", 0)) == 2, "both parts to exit")
    assert {e.outcome for e in d.exits("j1", 0).values()} == {"checkpointed"}
    show = slurm.run("scontrol", "show", "job", ex.starts["j1"].slurm_id)
    assert "JobState=SPECIAL_EXIT" in show and "Restarts=1" in show
    assert slurm.states() == {"n1": "idle", "n2": "idle"}  # its GPUs are free
    first = ex.starts["j1"].slurm_id

    ex.launch(gang("j1", 1, {"n1": [0], "n2": [0]}, argv, spool))
    d.until(lambda ev: len(d.exits("j1", 1)) == 2, "the resumed run to end")
    assert {e.outcome for e in d.exits("j1", 1).values()} == {"completed"}
    assert ex.starts["j1"].slurm_id == first  # the same Slurm job, requeued and released
    chief = log_of(spool, "j1-test", "n1")
    assert "checkpointed at step 3" in chief and "start at step 3 (restart 1" in chief
    assert "done after 6 steps" in chief
    runs = [line for line in slurm.run("sacct", "-c", "-n", "-j", first, "-o", "state").split()]
    assert runs == ["FAILED", "COMPLETED"]  # the requeued run (exit 75), then the resumed one
