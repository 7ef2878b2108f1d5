"""The Slurm executor against a real Slurm, driven directly as the run lifecycle drives it:
gangs planned by the coordinator's planner, real signals, the fake job's exact checkpoints."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from helpers import FAKE_JOB, wait_until

from coordinator.executors.slurm.ctl import Slurm
from coordinator.executors.slurm.executor import SlurmExecutor
from coordinator.gang import GangRequest, free_local_port, plan
from coordinator.service.executor import ExecutorEvent, Gang, NodeJoined, PartExited, ProcessLaunch
from tools.slurm_local import LocalSlurm


def gang(
    job_id: str,
    restart: int,
    allocation: dict[str, list[int]],
    argv: list[str],
    spool: Path,
    env: dict[str, str] | None = None,
) -> Gang:
    request = GangRequest(tuple(argv), sum(map(len, allocation.values())))
    hosts = dict.fromkeys(allocation, "127.0.0.1")
    specs = plan(request, job_id, allocation, None, spool / "ckpt", restart, free_local_port,
                 hosts=hosts, job_key=f"{job_id}-test")  # fmt: skip
    parts: dict[str, list[ProcessLaunch]] = {}
    for s in specs:
        launch = ProcessLaunch(s.role, s.task_index, s.argv, {**s.env, **(env or {})}, s.gpus)
        parts.setdefault(s.node, []).append(launch)
    return Gang(job_id, f"{job_id}-test", restart, "", 30.0, parts)


class Driver:
    """Polls the executor as the coordinator's loop does and keeps every event."""

    def __init__(self, executor: SlurmExecutor) -> None:
        self.executor = executor
        self.events: list[ExecutorEvent] = []

    def until(
        self, pred: Callable[[list[ExecutorEvent]], bool], what: str, timeout: float = 60
    ) -> None:
        def look() -> bool:
            self.events += self.executor.poll(time.monotonic())
            return pred(self.events)

        wait_until(look, timeout, what)

    def exits(self, job_id: str, restart: int) -> dict[str, PartExited]:
        return {
            e.node: e
            for e in self.events
            if isinstance(e, PartExited) and (e.job_id, e.restart) == (job_id, restart)
        }


def nodes_up(d: Driver, *names: str) -> None:
    d.until(lambda ev: {e.node for e in ev if isinstance(e, NodeJoined)} == set(names), "nodes")


def gpus_free(slurm: LocalSlurm, *nodes: str) -> bool:
    """No job holds these nodes' GPUs: idle, or idle and planned by the backfill scheduler
    for a pending job."""
    states = slurm.states()
    return all(states[n] in ("idle", "planned") for n in nodes)


def job_state(slurm: LocalSlurm, slurm_id: str) -> tuple[str, str]:
    show = slurm.run("scontrol", "-o", "show", "job", slurm_id)
    fields = dict(f.split("=", 1) for f in show.split() if "=" in f)
    return fields["JobState"], fields["Reason"]


def log_of(spool: Path, job_key: str, node: str, name: str = "chief-0") -> str:
    path = spool / job_key / "logs" / node / f"{name}.log"
    return path.read_text() if path.exists() else ""


def test_two_node_gang_preempted_and_resumed_exactly(slurm: LocalSlurm, shared: Path) -> None:
    spool = shared / "spool"
    ex = SlurmExecutor(spool, "", interval=0.2, slurm=Slurm("tiresias", slurm.env))
    d = Driver(ex)
    nodes_up(d, "n1", "n2")
    argv = [str(FAKE_JOB), "--steps", "6", "--step-time", "0.05", "--hold-at", "3"]
    ex.launch(gang("j1", 0, {"n1": [0], "n2": [0]}, argv, spool))
    wait_until(lambda: "holding at step 3" in log_of(spool, "j1-test", "n1"), what="the hold")
    ex.signal("j1", 0, ["n1", "n2"], "SIGTERM", 30.0)
    d.until(lambda ev: len(d.exits("j1", 0)) == 2, "both parts to exit")
    assert {e.outcome for e in d.exits("j1", 0).values()} == {"checkpointed"}
    assert job_state(slurm, ex.starts["j1"].slurm_id) == ("SPECIAL_EXIT", "JobHeldUser")
    assert "Restarts=1" in slurm.run("scontrol", "show", "job", ex.starts["j1"].slurm_id)
    assert gpus_free(slurm, "n1", "n2")
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


def test_victim_ignoring_the_signal_is_requeued_held_at_the_deadline(
    slurm: LocalSlurm, shared: Path
) -> None:
    spool = shared / "spool"
    ex = SlurmExecutor(spool, "", interval=0.2, slurm=Slurm("tiresias", slurm.env))
    d = Driver(ex)
    nodes_up(d, "n1", "n2")
    argv = [str(FAKE_JOB), "--steps", "6", "--hold-at", "2", "--ignore-signal"]
    ex.launch(gang("j2", 0, {"n2": [0, 1]}, argv, spool))
    wait_until(lambda: "holding at step 2" in log_of(spool, "j2-test", "n2"), what="the hold")
    signalled = time.monotonic()
    ex.signal("j2", 0, ["n2"], "SIGTERM", 3.0)
    d.until(lambda ev: bool(d.exits("j2", 0)), "the part to end")
    assert time.monotonic() - signalled >= 3.0  # not before the deadline
    assert d.exits("j2", 0)["n2"].outcome == "preempted"  # stopped without a checkpoint
    assert "got SIGTERM" in log_of(spool, "j2-test", "n2")
    held = ex.starts["j2"].slurm_id
    assert job_state(slurm, held) == ("PENDING", "job_requeued_in_held_state")
    assert gpus_free(slurm, "n2")
    ex.forget("j2")  # e.g. cancelled while it waits: the held Slurm job goes too
    assert job_state(slurm, held)[0] == "CANCELLED"


def test_a_restarted_executor_finds_its_running_job(slurm: LocalSlurm, shared: Path) -> None:
    """After a coordinator restart: the start still running is reported on its nodes (not
    started again), and its end is reported as it happens."""
    spool = shared / "spool"
    argv = [str(FAKE_JOB), "--steps", "4", "--hold-at", "1"]
    first = SlurmExecutor(spool, "", interval=0.2, slurm=Slurm("tiresias", slurm.env))
    Driver(first).until(lambda ev: len(ev) >= 2, "nodes")
    first.launch(gang("j3", 0, {"n1": [1]}, argv, spool))
    wait_until(lambda: "holding at step 1" in log_of(spool, "j3-test", "n1"), what="the hold")

    again = SlurmExecutor(spool, "", interval=0.2, slurm=Slurm("tiresias", slurm.env))
    d = Driver(again)
    nodes_up(d, "n1", "n2")
    running = {e.node: dict(e.running) for e in d.events if isinstance(e, NodeJoined)}
    assert running == {"n1": {"j3": 0}, "n2": {}}
    again.signal("j3", 0, ["n1"], "SIGTERM", 30.0)
    d.until(lambda ev: bool(d.exits("j3", 0)), "the part to end")
    assert d.exits("j3", 0)["n1"].outcome == "checkpointed"
    assert log_of(spool, "j3-test", "n1").count("=== j3 restart 0") == 1  # started once


def test_uneven_gang_is_one_heterogeneous_job(slurm: LocalSlurm, shared: Path) -> None:
    """Two GPUs on one node and one on the other: one component per node, started together,
    preempted and requeued held together, resumed (new shape, new job) at the exact step."""
    spool = shared / "spool"
    ex = SlurmExecutor(spool, "", interval=0.2, slurm=Slurm("tiresias", slurm.env))
    d = Driver(ex)
    nodes_up(d, "n1", "n2")
    argv = [str(FAKE_JOB), "--steps", "5", "--step-time", "0.05", "--hold-at", "2"]
    ex.launch(gang("j4", 0, {"n1": [0, 1], "n2": [1]}, argv, spool))
    procs = (("n1", "chief-0"), ("n1", "worker-1"), ("n2", "worker-2"))

    def held() -> bool:
        return all("holding at step 2" in log_of(spool, "j4-test", *p) for p in procs)

    wait_until(held, what="every process to hold")  # a loaded machine starts them apart
    # each process sees its own one of the GPUs Slurm gave its node
    assert "GPUs '0'" in log_of(spool, "j4-test", "n1")
    assert "GPUs '1'" in log_of(spool, "j4-test", "n1", "worker-1")
    assert "GPUs '0'" in log_of(spool, "j4-test", "n2", "worker-2")
    ex.signal("j4", 0, ["n1", "n2"], "SIGTERM", 30.0)
    d.until(lambda ev: len(d.exits("j4", 0)) == 2, "both parts to exit")
    assert {e.outcome for e in d.exits("j4", 0).values()} == {"checkpointed"}
    assert gpus_free(slurm, "n1", "n2")
    ex.launch(gang("j4", 1, {"n1": [0], "n2": [0, 1]}, argv, spool))
    d.until(lambda ev: len(d.exits("j4", 1)) == 2, "the resumed run to end")
    assert {e.outcome for e in d.exits("j4", 1).values()} == {"completed"}
    assert "start at step 2 (restart 1" in log_of(spool, "j4-test", "n1")
