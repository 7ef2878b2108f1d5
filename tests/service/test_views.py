"""What people read about preemptions: ``tiresias status JOB`` text and ``tiresias-run``'s
running commentary, from the status views the coordinator answers with."""

from __future__ import annotations

from typing import Any

from coordinator.cli.tables import format_job
from coordinator.service.views import job_view, run_events
from tiresias_launch.contract import OWN_CHECKPOINTS

from .runbook import Bench


def view(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "job_id": "j1",
        "key": "j1-0a1b2c3d",
        "name": "train.py",
        "argv": ["train.py"],
        "state": "running",
        "exit_code": None,
        "workers": 1,
        "ps": 0,
        "gpus": 1,
        "queue": 1,
        "priority": 1,
        "attained": 12.0,
        "executed": 12.0,
        "waiting": 0.0,
        "skew": None,
        "placement": {"local": [0]},
        "restarts": 0,
        "preemptions": 0,
        "promotions": 0,
        "log_tail": None,
        "last_exit": None,
        "progress": {"step": 30, "restart": 0, "iter_time": 0.004, "gpu_time": 12.0},
        "checkpointable": True,
        "checkpointable_why": None,
        "lost": None,
    }
    return base | changes


CHECKPOINT = {"step": 30, "epoch": 1, "batch": 5, "bytes": 2_400_000, "seconds": 0.31}
WARMUP = {"build": 4.0, "restore": 0.42, "first_step": 1.25, "step": 30}
EXIT_75 = {
    "node": "local",
    "outcome": "checkpointed",
    "restart": 0,
    "step": 30,
    "processes": [{"role": "chief", "task_index": 0, "code": 75}],
}


def test_a_preemption_told_as_it_happens() -> None:
    running = view()
    preempting = view(state="preempting", preemptions=1)
    waiting = view(
        state="waiting",
        preemptions=1,
        restarts=1,
        last_exit=EXIT_75,
        progress={**running["progress"], "checkpoint": CHECKPOINT},
    )
    resumed = view(
        restarts=1,
        preemptions=1,
        last_exit=EXIT_75,
        progress={"step": 31, "restart": 1, "checkpoint": CHECKPOINT, "warmup": WARMUP},
    )
    said = [run_events(a, b) for a, b in [({}, running), (running, preempting)]]
    said += [run_events(preempting, waiting), run_events(waiting, resumed)]
    assert said == [
        [],
        ["j1 preempted by the scheduler at step 30"],
        ["j1 stopped: checkpoint at step 30 (epoch 2, batch 5; 2.4 MB in 0.31 s)"],
        [
            "j1 restarted (restart 1)",
            "j1 resumed from step 30 (restore 0.42 s, first step 1.25 s)",
        ],
    ]
    assert run_events(resumed, resumed) == []  # each said once
    grown = {**resumed, "min_workers": 2, "workers": 4, "gpus": 4, "placement": {"n": [0, 1, 2, 3]}}
    assert run_events(waiting, grown)[0] == "j1 restarted on 4 of 2:4 GPUs (restart 1)"
    resized = {"kind": "resized", "text": "grew to 4 at step 30"}
    growing = {**preempting, "history": [{"kind": "preempted", "text": "preempted"}, resized]}
    assert run_events(running, growing) == ["j1 resized by the scheduler: grew to 4 at step 30"]
    text = format_job(resumed)
    assert "job        j1  (train.py; checkpoints and logs under j1-0a1b2c3d)" in text
    assert "checkpoint at step 30 (epoch 2, batch 5; 2.4 MB in 0.31 s)" in text
    assert "resumed    from step 30 (restore 0.42 s, first step 1.25 s)" in text
    assert "last exit  checkpointed (chief-0 exit 75)" in text
    assert "{" not in text


def test_a_job_that_cannot_be_checkpointed_says_so() -> None:
    why = "train.py uses no tiresias.State, @tiresias.preemptible or Keras fit"
    before = view(checkpointable=None)
    now = view(checkpointable=False, checkpointable_why=why)
    assert run_events(before, now) == [f"j1 cannot be checkpointed: {why}"]
    ended = view(
        state="waiting",
        checkpointable=False,
        checkpointable_why=why,
        restarts=1,
        last_exit={
            "node": "local",
            "outcome": "preempted",
            "restart": 0,
            "step": 30,
            "processes": [{"role": "chief", "task_index": 0, "code": -15}],
        },
        lost={"preemptions": 1, "steps": 30, "gpu_seconds": 12.0},
    )
    assert run_events(now, ended) == [
        "j1 stopped at step 30: preempted without a checkpoint (chief-0 SIGTERM); "
        "it restarts from step 0"
    ]
    text = format_job(ended)
    assert f"checkpoint none: this job cannot be checkpointed: {why}" in text
    assert "lost       1 preemption without a checkpoint: 30 steps, 12.0 GPU·s" in text
    own = f"train.py keeps its own checkpoints (torch.save/torch.load); {OWN_CHECKPOINTS}"
    ended_own = {**ended, "checkpointable_why": own}
    assert run_events({**now, "checkpointable_why": own}, ended_own) == [
        "j1 stopped at step 30: preempted without a checkpoint (chief-0 SIGTERM); "
        "it restarts from its own checkpoints"
    ]


def test_states_passed_between_two_polls_are_still_told() -> None:
    """Preempted, checkpointed and running again within one poll interval."""
    before = view()
    now = view(
        restarts=1,
        preemptions=1,
        last_exit=EXIT_75,
        progress={"step": 31, "restart": 1, "checkpoint": CHECKPOINT, "warmup": WARMUP},
    )
    assert run_events(before, now) == [
        "j1 preempted by the scheduler at step 30",
        "j1 stopped: checkpoint at step 30 (epoch 2, batch 5; 2.4 MB in 0.31 s)",
        "j1 restarted (restart 1)",
        "j1 resumed from step 30 (restore 0.42 s, first step 1.25 s)",
    ]


def test_wait_times_count_every_wait_in_every_state() -> None:
    """``waited`` is the time not running since submit, finished jobs included (status --all
    showed 0.0s for a job that had waited minutes); ``waiting`` only the current wait."""
    bench = Bench()
    bench.node("n", 1)
    bench.submit("j1", 1)
    bench.schedule(0.0)
    bench.submit("j2", 1, t=10.0)
    bench.schedule(10.0)
    bench.exit("j1", "n", "completed", 110.0)
    bench.schedule(110.0)
    sched, records = bench.sched, bench.book.records

    def seen(job_id: str, now: float) -> dict[str, Any]:
        return job_view(sched.job(job_id), records[job_id], now, None)

    assert seen("j1", 200.0)["waited"] == 0.0
    assert (seen("j2", 150.0)["waited"], seen("j2", 150.0)["waiting"]) == (100.0, 0.0)
    bench.exit("j2", "n", "completed", 160.0)
    done = seen("j2", 500.0)
    assert (done["state"], done["waited"]) == ("completed", 100.0)
    assert "waited 1m40s" in format_job({**view(), **done, "argv": ["train.py"]})


def test_attained_and_progress_say_what_they_count() -> None:
    text = format_job(
        view(gpus=2, attained=144.7, executed=72.35, progress={"step": 7, "gpu_time": 71.2})
    )
    assert "attained   144.7 GPU·s  (2 GPUs × its runs, as the scheduler counts" in text
    assert "71.2 GPU·s of the reporting process in this run" in text
