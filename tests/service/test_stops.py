"""A stop is worded as what it was: the policy's preemption, a cancel, an operator's signal,
a process killed from outside, a failure to start, a node lost, a failure. First through the
real run book and core (parts' exits as executors report them), then through a real
coordinator and agent with real signals."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Sequence
from pathlib import Path

from coordinator.core import events
from coordinator.core.history import Timeline
from coordinator.core.model import ExitOutcome, Preempt, StopReason

from .conftest import Cluster, wait_until
from .runbook import Bench

FOREVER = ("--steps", "1000000", "--step-time", "0.05")


def _told(bench: Bench, timeline: Timeline, t: float) -> list[tuple[str, str]]:
    """What the history tells after a pass at ``t``, with the steps the jobs reported."""
    bench.schedule(t)
    return [(e.kind, e.text) for e in timeline.observe(bench.sched, t, bench.book.step_of)]


def _running(
    policy: str = "yarn-cs", nodes: Sequence[str] = ("n1",), **settings: object
) -> tuple[Bench, Timeline]:
    """j1 runs on ``nodes`` (one GPU each) and has reported step 25."""
    bench = Bench(policy=policy, **settings)
    for n in nodes:
        bench.node(n, 1)
    bench.submit("j1", len(nodes))
    timeline = Timeline()
    assert [k for k, _ in _told(bench, timeline, 0.0)] == ["submitted", "started"]
    bench.book.records["j1"].progress.restart = 0
    bench.book.records["j1"].progress.step = 25
    return bench, timeline


def _exit(
    bench: Bench, outcome: str, codes: Sequence[int], node: str = "n1", t: float = 5.0
) -> None:
    bench.exit("j1", node, outcome, t, codes=codes)


def test_an_operators_sigterm_that_checkpointed() -> None:
    bench, timeline = _running()
    _exit(bench, "checkpointed", (75,))  # the runtime saved on a SIGTERM nobody here sent
    assert bench.sched.job("j1").stop.reason is StopReason.SIGNALLED  # type: ignore[union-attr]
    assert _told(bench, timeline, 5.0)[0] == (
        "signalled",
        "stopped at step 25 by a signal from outside Tiresias (it checkpointed)",
    )


def test_an_operators_sigterm_that_killed_a_script_with_nothing_to_save() -> None:
    bench, timeline = _running()
    _exit(bench, "preempted", (-15,))
    assert _told(bench, timeline, 5.0)[0] == (
        "signalled",
        "stopped at step 25 by SIGTERM from outside Tiresias",
    )


def test_a_sigkill_from_outside_fails_the_job_and_says_so() -> None:
    bench, timeline = _running(nodes=("n1", "n2"))
    _exit(bench, "failed", (-15, -9))  # the agent's SIGTERM to the peer of the killed one
    _exit(bench, "killed", (-15,), node="n2")
    assert bench.state("j1") == "failed"
    assert _told(bench, timeline, 5.0) == [
        ("failed", "failed at step 25 after 5s of run time: killed by SIGKILL from outside "
         "Tiresias on n1"),
    ]  # fmt: skip


def test_a_process_killed_from_outside_that_is_not_a_failure() -> None:
    """Slurm reports a part whose tasks were killed behind its back (scancel) as killed:
    the job runs again, and its history says why."""
    bench, timeline = _running()
    _exit(bench, "killed", (-9,))
    assert bench.state("j1") == "waiting"
    assert _told(bench, timeline, 5.0)[0] == (
        "killed",
        "stopped at step 25: killed by SIGKILL from outside Tiresias on n1",
    )


def test_a_job_that_could_not_start() -> None:
    bench, timeline = _running()
    bench.book.records["j1"].progress.step = None
    _exit(bench, "failed", (127,))
    assert _told(bench, timeline, 5.0) == [
        ("failed", "failed: its processes could not be started (exit code 127)")
    ]


def test_a_failure_names_its_exit_code_even_when_the_agent_stopped_its_peers() -> None:
    bench, timeline = _running()
    _exit(bench, "failed", (-15, 3))
    assert _told(bench, timeline, 5.0) == [
        ("failed", "failed at step 25 after 5s of run time (exit code 3)")
    ]


def test_a_node_that_went_down_and_one_that_lost_its_processes() -> None:
    bench, timeline = _running(nodes=("n1", "n2"))
    bench.book.node_lost("n1", bench.when(5.0))
    bench.exit("j1", "n2", "killed", 5.5, codes=(-9,))  # the survivor, killed by us
    assert _told(bench, timeline, 6.0)[0] == ("lost", "stopped at step 25: node n1 went down")

    bench, timeline = _running()
    bench.node("n1", 1, 5.0, running={})  # the agent came back without the job
    assert ("lost", "stopped at step 25: node n1 lost its processes") in _told(bench, timeline, 5.0)


def test_a_preemption_names_the_jobs_it_was_for() -> None:
    bench, timeline = _running("tiresias-l", queue_thresholds=(4.0,))
    bench.submit("j2", 1, 5.0)  # j1, demoted to Q2 at 4 GPU-s, yields to j2 of Q1
    decisions = bench.ledger.core(events.Schedule(5.0))
    (preempt,) = (d for d in decisions if isinstance(d, Preempt))
    assert (preempt.job_id, preempt.stop.reason, preempt.stop.for_jobs) == (
        "j1",
        StopReason.PREEMPTED,
        ("j2",),
    )
    bench.book.act(decisions, bench.when(5.0), bench.hosts, lambda _: 4242)
    told = [(e.kind, e.text) for e in timeline.observe(bench.sched, 5.0, bench.book.step_of)]
    assert ("preempted", "preempted at step 25 for j2 (Q1), a higher queue than its Q2") in told
    _exit(bench, "checkpointed", (75,), t=6.0)  # the exit is no news: the core decided it
    assert bench.ledger.events[-1] == events.Exited("j1", 6.0, ExitOutcome.CHECKPOINTED)


def test_a_cancel_is_a_cancel() -> None:
    bench, timeline = _running()
    when = bench.when(3.0)
    bench.book.act(bench.ledger.core(events.Cancel("j1", 3.0)), when, bench.hosts, lambda _: 0)
    assert _told(bench, timeline, 3.0) == [("cancelling", "stopping at step 25: cancel requested")]
    _exit(bench, "killed", (-9,))  # our own SIGKILL
    assert _told(bench, timeline, 5.0) == [("cancelled", "cancelled")]


# --- a real coordinator and agent, real signals ---------------------------------------------


def _chief(cluster: Cluster, job_id: str, restart: int = 0) -> int:
    """The chief process of the job's run ``restart``, found as an operator finds it: by its
    environment (the process the agent started leads its own process group)."""
    want = {f"TIRESIAS_JOB_ID={job_id}", "TIRESIAS_ROLE=chief"}
    want.add(f"TIRESIAS_RESTART_COUNT={restart}")
    want.add(f"TIRESIAS_COORDINATOR={cluster.address}")
    for proc in Path("/proc").iterdir():
        try:
            env = set((proc / "environ").read_bytes().decode(errors="replace").split("\0"))
            if proc.name.isdigit() and want <= env and os.getpgid(int(proc.name)) == int(proc.name):
                return int(proc.name)
        except (OSError, ValueError):
            continue
    raise AssertionError(f"no chief process of {job_id}")


def _history(cluster: Cluster, job_id: str) -> list[tuple[str, str]]:
    return [(e["kind"], e["text"]) for e in cluster.job(job_id)["history"]]


def _reported(cluster: Cluster, job_id: str, restart: int = 0) -> bool:
    """Run ``restart`` has reported a few steps (the progress of a run before it counts not:
    it stays until the next run reports, and that run's process may not have started yet)."""
    progress = cluster.job(job_id).get("progress") or {}
    return progress.get("restart") == restart and (progress.get("step") or 0) >= 3


def test_live_an_operators_sigterm_and_a_sigkill_from_outside(cluster: Cluster) -> None:
    cluster.start_coordinator("--policy", "yarn-cs")
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    job = cluster.submit(*FOREVER)
    wait_until(lambda: _reported(cluster, job), 30, "the job to report steps")
    os.kill(_chief(cluster, job), signal.SIGTERM)  # the operator's: it checkpoints
    wait_until(lambda: cluster.job(job)["restarts"] == 1, 30, "the job to run again")
    (kind, text) = next(e for e in _history(cluster, job) if e[0] not in ("submitted", "started"))
    assert kind == "signalled" and text.startswith("stopped at step "), text
    assert text.endswith(" by a signal from outside Tiresias (it checkpointed)"), text

    wait_until(lambda: _reported(cluster, job, restart=1), 30, "the resumed run to report")
    os.kill(_chief(cluster, job, restart=1), signal.SIGKILL)
    wait_until(lambda: cluster.state_of(job) == "failed", 30, "the job to fail")
    kind, text = _history(cluster, job)[-1]
    assert kind == "failed" and text.endswith(": killed by SIGKILL from outside Tiresias on a")


def test_live_a_job_that_cannot_start_and_a_node_that_went_down(cluster: Cluster) -> None:
    cluster.start_coordinator("--policy", "yarn-cs", "--heartbeat-timeout", "2")
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    reply = cluster.client.request(
        "submit",
        argv=["python3", "train.py"],
        workers=1,
        cwd="/nonexistent/tiresias-test",  # the agent cannot start it there
        env={},
        key=uuid.uuid4().hex,
    )
    bad = reply["job_id"]
    wait_until(lambda: cluster.state_of(bad) == "failed", 30, "the job that cannot start")
    assert _history(cluster, bad)[-1] == (
        "failed",
        "failed: its processes could not be started (exit code 127)",
    )

    job = cluster.submit(*FOREVER)
    wait_until(lambda: _reported(cluster, job), 30, "the job to report steps")
    cluster.kill_agent("a")
    wait_until(lambda: cluster.job(job)["restarts"] == 1, 30, "the node to be lost")
    kind, text = _history(cluster, job)[-1]
    assert (
        kind == "lost"
        and text.startswith("stopped at step ")
        and text.endswith(": node a went down")
    ), text
    cluster.cli("cancel", job)
