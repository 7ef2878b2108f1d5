"""The run lifecycle without machines: a real scheduler core decides, the run book turns
its decisions into executor commands and the parts' exits (played by the test) into job
outcomes."""

from __future__ import annotations

import pytest

from coordinator.core import events
from coordinator.core.model import ExitOutcome
from coordinator.service.commands import Forget, KillParts, LaunchGang, Signal
from coordinator.service.executor import SETTLE
from coordinator.service.records import JobRecord
from tiresias_launch.contract import JOB_TOKEN, OWN_CHECKPOINTS

from .runbook import GRACE, HEARTBEAT, Bench


def _started(bench: Bench, job_id: str, workers: int, t: float = 0.0) -> LaunchGang:
    bench.submit(job_id, workers, t)
    (launch,) = bench.schedule(t)
    assert isinstance(launch, LaunchGang) and launch.gang.job_id == job_id
    return launch


def test_a_start_launches_one_part_per_node_with_the_allocated_gpus() -> None:
    bench = Bench(policy="yarn-cs")
    bench.node("n1", 2)
    bench.node("n2", 2)
    gang = _started(bench, "j1", 4).gang
    assert (gang.job_key, gang.restart, gang.owner, gang.grace) == ("j1-x", 0, "alice", GRACE)
    assert sorted(gang.parts) == ["n1", "n2"]
    for node, procs in gang.parts.items():
        assert sorted(g for p in procs for g in p.gpus) == [0, 1], node
        for p in procs:
            assert p.env["TIRESIAS_PREEMPT_SIGNAL"] == "SIGTERM" and p.env[JOB_TOKEN] == "tok"
            assert p.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, p.gpus))
    run = bench.book.records["j1"].run
    assert run is not None and run.parts == {"n1": None, "n2": None}
    assert bench.book.records["j1"].nodes_ever == ["n1", "n2"]
    assert bench.ledger.decisions == [("start", "j1")]


def test_a_failed_part_stops_the_others_and_fails_the_job_once_all_are_gone() -> None:
    bench = Bench(policy="yarn-cs")
    bench.node("n1", 1)
    bench.node("n2", 1)
    _started(bench, "j1", 2)
    bench.exit("j1", "n1", "failed", 1.0, codes=(3,))
    assert bench.take() == [KillParts("j1", 0, ("n2",), 0.0)]
    assert bench.state("j1") == "running"  # the core hears of it once every part is gone
    bench.exit("j1", "n2", "killed", 1.5, codes=(-9,))
    rec = bench.book.records["j1"]
    assert bench.state("j1") == "failed" and rec.exit_code == 3 and rec.run is None
    assert rec.ended == bench.when(1.5).wall
    assert bench.take() == [Forget("j1")]  # the executor may drop what it kept for the job
    assert not bench.book.is_current("j1", 0, "n2")  # a resent exit is old news


def test_only_a_found_job_carries_its_executor_id_into_its_starts_and_its_forget() -> None:
    """A job the executor found (a plain sbatch job) is released, not launched: its id rides
    in the gang and in the final Forget. A submitted job cannot claim one from its
    environment (it would make Slurm release someone else's held job)."""
    bench = Bench(policy="yarn-cs")
    bench.node("n1", 1)
    bench.submit("j1", 1)
    bench.book.records["j1"].request.env["TIRESIAS_FOUND_JOB"] = "4242"
    (launch,) = bench.schedule(0.0)
    assert isinstance(launch, LaunchGang) and launch.gang.found is None
    bench.exit("j1", "n1", "completed", 1.0)
    assert bench.take() == [Forget("j1")]
    bench.submit("j2", 1, 2.0)
    bench.book.records["j2"].request.found = "4242"
    (launch,) = bench.schedule(2.0)
    assert isinstance(launch, LaunchGang) and launch.gang.found == "4242"
    bench.exit("j2", "n1", "completed", 3.0)
    assert bench.take() == [Forget("j2", "4242")]


def test_a_completed_part_gives_its_peers_a_moment_then_the_job_completes() -> None:
    bench = Bench(policy="yarn-cs")
    bench.node("n1", 1)
    bench.node("n2", 1)
    _started(bench, "j1", 2)
    bench.exit("j1", "n1", "completed", 1.0)
    assert bench.take() == [KillParts("j1", 0, ("n2",), SETTLE)]
    bench.exit("j1", "n2", "killed", 1.2, codes=(-15,))
    assert bench.state("j1") == "completed" and bench.book.records["j1"].exit_code == 0


def _preempted(bench: Bench) -> Signal:
    """tiresias-l, 4 GPU-s threshold: j1 (2 GPUs) is demoted by t=3, when j2 arrives."""
    bench.node("n", 2)
    _started(bench, "j1", 2)
    bench.submit("j2", 1, 3.0)
    (signal,) = bench.schedule(3.0)
    assert isinstance(signal, Signal)
    return signal


def test_a_preemption_signals_with_a_grace_then_insists_then_resumes_from_the_checkpoint() -> None:
    bench = Bench(policy="tiresias-l", queue_thresholds=(4.0,))
    assert _preempted(bench) == Signal("j1", 0, ("n",), "SIGTERM", GRACE)
    mono = bench.when(3.0).mono
    bench.book.overdue(mono + GRACE + HEARTBEAT - 1)
    assert bench.take() == []
    bench.book.overdue(mono + GRACE + HEARTBEAT + 1)
    assert bench.take() == [KillParts("j1", 0, ("n",))]
    bench.exit("j1", "n", "checkpointed", 4.0, codes=(75,))
    assert bench.state("j1") == "waiting" and bench.book.records["j1"].lost is None
    assert bench.take() == []  # not finished: nothing to forget
    (start,) = bench.schedule(4.0)
    assert isinstance(start, LaunchGang) and start.gang.job_id == "j2"


def test_a_preemption_without_a_checkpoint_counts_the_steps_to_run_again() -> None:
    bench = Bench(policy="tiresias-l", queue_thresholds=(4.0,))
    _preempted(bench)  # j1 ran t=0..3 on 2 GPUs
    p = bench.book.records["j1"].progress
    p.restart, p.step, p.checkpoint = 0, 100, {"step": 60}
    bench.exit("j1", "n", "preempted", 4.0, codes=(-15,))
    lost = bench.book.records["j1"].lost
    assert lost is not None
    assert (lost.preemptions, lost.steps) == (1, 40)
    assert abs(lost.gpu_seconds - 2 * 3.0 * 0.4) < 1e-9  # 40 of 100 steps of 3 s on 2 GPUs


def test_a_job_that_keeps_its_own_checkpoints_is_not_counted_as_losing_its_run() -> None:
    bench = Bench(policy="tiresias-l", queue_thresholds=(4.0,))
    _preempted(bench)
    rec = bench.book.records["j1"]
    rec.checkpointable = False  # as its runtime said at start (checkpointable.why_not)
    rec.checkpointable_why = f"train.py keeps torch.save snapshots; {OWN_CHECKPOINTS}"
    bench.exit("j1", "n", "preempted", 4.0, codes=(-15,))
    assert rec.lost is not None
    assert (rec.lost.preemptions, rec.lost.steps, rec.lost.gpu_seconds) == (1, 0, 0.0)


@pytest.mark.parametrize("own", [False, True], ids=["said step 0", "said own checkpoints"])
def test_a_restart_whose_first_report_is_past_step_0_resumed_from_its_own_checkpoints(
    own: bool,
) -> None:
    """What the runtime said at start (restarts from step 0, or keeps its own checkpoints)
    is a guess; the next run's first report says where it really resumed, and the lost
    work is counted from the steps."""
    bench = Bench(policy="tiresias-l", queue_thresholds=(4.0,))
    _preempted(bench)  # j1 ran t=0..3 on 2 GPUs
    rec = bench.book.records["j1"]
    rec.checkpointable = False
    tail = OWN_CHECKPOINTS if own else "it restarts from step 0"
    rec.checkpointable_why = f"train.py uses no tiresias.State; a preemption stops it and {tail}"
    rec.progress.restart, rec.progress.step = 0, 100
    bench.exit("j1", "n", "preempted", 4.0, codes=(-15,))
    assert rec.lost is not None and rec.lost.steps == (0 if own else 100)
    assert rec.resumed_itself(1, 60) == "resumed from its own checkpoints at step 60"
    assert (rec.lost.preemptions, rec.lost.steps) == (1, 40)
    assert abs(rec.lost.gpu_seconds - 2 * 3.0 * 0.4) < 1e-9  # 40 of 100 steps of 3 s on 2 GPUs
    assert rec.checkpointable_why.endswith(OWN_CHECKPOINTS)
    assert rec.checkpointable_why.startswith("train.py uses no tiresias.State; ")
    rec.resumed_itself(2, 90)  # no preemption before that run: nothing more to correct
    assert rec.lost.steps == 40
    again = JobRecord.from_wire("j1", rec.to_wire())
    assert again.lost == rec.lost and again.checkpointable_why == rec.checkpointable_why


def test_a_lost_node_loses_its_parts_kills_the_survivors_and_requeues_the_job() -> None:
    bench = Bench(policy="yarn-cs")
    bench.node("n1", 1)
    bench.node("n2", 1)
    _started(bench, "j1", 2)
    bench.book.node_lost("n1", bench.when(5.0))
    assert events.NodeDown("n1", 5.0) in bench.ledger.events
    assert bench.take() == [KillParts("j1", 0, ("n2",), 0.0)]
    bench.exit("j1", "n2", "killed", 5.5, codes=(-9,))
    assert bench.state("j1") == "waiting"  # lost, not failed: it runs again


def test_reconcile_kills_what_a_node_should_not_run_and_loses_what_it_no_longer_does() -> None:
    bench = Bench(policy="yarn-cs")
    bench.node("n1", 2)
    _started(bench, "j1", 1)
    _started(bench, "j2", 1)
    bench.node("n1", 2, 1.0, running={"j1": 0, "j9": 4})  # j2 gone, j9 unknown
    assert bench.take() == [KillParts("j9", 4, ("n1",))]
    assert bench.book.records["j1"].run is not None
    assert bench.book.records["j2"].run is None and bench.state("j2") == "waiting"
    bench.node("n1", 2, 2.0, running={"j1": 0})  # all agreed: nothing to do
    assert bench.take() == []


def test_a_node_back_with_an_older_run_loses_the_newer_launch_it_never_got() -> None:
    """Restart 1 was launched to a connection of n1 that went away; the agent comes back
    still running restart 0: that one is killed, and restart 1, which runs nowhere, is lost
    at once, so the job waits again instead of holding its GPUs as a phantom."""
    bench = Bench(policy="yarn-cs")
    bench.node("n1", 1)
    _started(bench, "j1", 1)
    bench.book.node_lost("n1", bench.when(1.0))  # restart 0 lost; the job waits again
    bench.node("n1", 1, 2.0)
    (launch,) = bench.schedule(2.0)
    assert isinstance(launch, LaunchGang) and launch.gang.restart == 1
    bench.node("n1", 1, 3.0, running={"j1": 0})  # it never got restart 1
    assert bench.take() == [KillParts("j1", 0, ("n1",))]
    assert bench.book.records["j1"].run is None and bench.state("j1") == "waiting"
    assert bench.sched.free_gpus() == {"n1": (0,)}


def test_the_chiefs_checkpoint_counts_however_its_peers_ended() -> None:
    bench = Bench(policy="tiresias-l", queue_thresholds=(4.0,))
    bench.node("n1", 1)
    bench.node("n2", 1)
    _started(bench, "j1", 2)
    bench.submit("j2", 1, 3.0)
    (signal,) = bench.schedule(3.0)
    assert signal == Signal("j1", 0, ("n1", "n2"), "SIGTERM", GRACE)
    bench.exit("j1", "n2", "preempted", 3.5, codes=(-15,))  # a worker died of the signal
    bench.exit("j1", "n1", "checkpointed", 4.0, codes=(75,))  # the chief saved
    assert bench.state("j1") == "waiting" and bench.book.records["j1"].lost is None
    assert events.Exited("j1", 4.0, ExitOutcome.CHECKPOINTED) in bench.ledger.events


def test_a_node_back_with_other_gpus_is_a_new_node_to_the_core() -> None:
    bench = Bench(policy="yarn-cs")
    bench.node("n1", 2)
    bench.node("n1", 2, 1.0)  # the same node again: nothing new for the core
    bench.node("n1", 4, 2.0)
    assert [type(e).__name__ for e in bench.ledger.events] == ["NodeUp", "NodeDown", "NodeUp"]
    assert bench.sched.free_gpus()["n1"] == (0, 1, 2, 3)


def test_an_elastic_job_shrunk_for_a_job_ahead_restarts_on_fewer_ranks() -> None:
    """A 2:4 job on all 4 GPUs of a node, demoted, when a 2-GPU job arrives in Q1: the core
    shrinks it instead of preempting it; the run book signals it like any preemption and,
    once it has checkpointed, launches it on 2 ranks, each told its world and its top."""
    bench = Bench(policy="tiresias-l", queue_thresholds=(4.0,))
    bench.node("n", 4)
    bench.submit("e", 4, least=2)
    (launch,) = bench.schedule(0.0)
    assert isinstance(launch, LaunchGang) and len(launch.gang.parts["n"]) == 4
    bench.ledger.core(events.Release("e", 1.0))  # its runtime's resizable: true
    bench.submit("r", 2, 2.0)  # e has 8 GPU-seconds: in Q2, behind r
    assert bench.schedule(2.0) == [Signal("e", 0, ("n",), "SIGTERM", GRACE)]
    bench.exit("e", "n", "checkpointed", 3.0, codes=(75, 75, 75, 75))
    launches = {c.gang.job_id: c.gang for c in bench.schedule(3.0) if isinstance(c, LaunchGang)}
    assert sorted(launches) == ["e", "r"]
    ranks = launches["e"].parts["n"]
    assert [p.task_index for p in ranks] == [0, 1] and launches["e"].restart == 1
    assert {(p.env["TIRESIAS_NUM_WORKERS"], p.env["TIRESIAS_MAX_WORKERS"]) for p in ranks} == {
        ("2", "4")
    }
    assert all("TIRESIAS_MAX_WORKERS" not in p.env for p in launches["r"].parts["n"])
