"""Runtime pieces without TensorFlow: signal flag, gang agreement, progress reports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
import zmq
from helpers import wait_until

from coordinator.protocol import validate
from tiresias_launch import contract
from tiresias_launch.env import parse
from tiresias_launch.report import Reporter
from tiresias_launch.runtime import MAX_AGREEMENT_INTERVAL, Agreement
from tiresias_launch.signals import PreemptFlag


def test_every_preemption_signal_sets_the_flag() -> None:
    previous = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2)}
    try:
        for sig in previous:
            flag = PreemptFlag()
            flag.install(previous)
            assert not flag
            os.kill(os.getpid(), sig)
            wait_until(lambda f=flag: f, 5, f"{sig.name} to reach the handler")
            assert flag.received == sig
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class TwoRanks:
    """A stand-in collective: this rank's values plus a peer's, as an all-reduce would."""

    def __init__(self) -> None:
        self.peer_flag = 0.0
        self.calls: list[list[float]] = []

    def __call__(self, values):
        self.calls.append(list(values))
        return [values[0] + self.peer_flag, values[1] * 2]


def test_any_rank_flag_stops_everyone_at_the_checked_step() -> None:
    ranks = TwoRanks()
    agreement = Agreement(ranks, size=2)
    assert [agreement.should_stop(step, False, 0.1) for step in range(3)] == [False] * 3
    ranks.peer_flag = 1.0
    assert agreement.should_stop(3, False, 0.1)
    assert len(ranks.calls) == 4  # first checks happen every step (they include tracing)


def test_check_interval_keeps_collectives_near_one_percent() -> None:
    ranks = TwoRanks()
    agreement = Agreement(ranks, size=2)
    agreement._collective_seconds = 0.002  # measured cost of one collective
    agreement.checks = 2
    # 2 ms collective, 50 ms steps: every ceil(0.002 / (0.01 * 0.05)) = 4 steps
    assert not agreement.should_stop(0, False, 0.05)
    assert agreement.next_check > 0
    agreement._collective_seconds = 10.0  # absurdly slow collective: capped
    agreement.next_check = 0
    agreement.should_stop(0, False, 0.05)
    assert agreement.next_check == MAX_AGREEMENT_INTERVAL
    assert not agreement.should_stop(1, True, 0.05)  # between checks no collective runs


def _env(coordinator: str, tmp_path: Path):
    return parse(
        {
            "TIRESIAS_COORDINATOR": coordinator,
            "TIRESIAS_JOB_ID": "j9",
            "TIRESIAS_ROLE": "worker",
            "TIRESIAS_TASK_INDEX": "1",
            "TIRESIAS_RESTART_COUNT": "2",
            "TIRESIAS_GPUS": "2",
            "TIRESIAS_CHECKPOINT_DIR": str(tmp_path),
        }
    )


def test_reports_are_batched_and_follow_the_contract(tmp_path: Path) -> None:
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    try:
        reporter = Reporter(_env(f"tcp://127.0.0.1:{port}", tmp_path), interval=0.05)
        for step in range(1, 5):
            reporter.step_done(step, 0.25)
        reporter.note(warmup={"build": 1.0, "restore": 0.5, "first_step": 0.3})
        reporter.note(tensor_bytes=[128, 8])
        reporter.close()
        assert router.poll(5000)
        _identity, payload = router.recv_multipart()
        msg = msgpack.unpackb(payload)
    finally:
        router.close(linger=0)
    assert validate(msg) == msg  # the coordinator's own schema accepts it
    assert set(msg) == {"type", "v", *contract.REPORT}  # every field the contract names, no more
    assert msg["type"] == "report" and msg["v"] == contract.PROTOCOL_VERSION
    assert (msg["job_id"], msg["role"], msg["task_index"], msg["restart"]) == ("j9", "worker", 1, 2)
    assert (msg["step"], msg["iterations"], msg["iter_time"]) == (4, 4, 0.25)
    assert msg["warmup"] == {"build": 1.0, "restore": 0.5, "first_step": 0.3}
    assert msg["tensor_bytes"] == [128, 8]
    assert msg["checkpoint"] is None and msg["skew"] is None
    assert msg["gpu_time"] > 0  # no NVML here: 2 GPUs × wall time


def test_unreachable_coordinator_drops_oldest_and_never_blocks(tmp_path: Path) -> None:
    with zmq.Context.instance().socket(zmq.ROUTER) as probe:
        port = probe.bind_to_random_port("tcp://127.0.0.1")  # then closed: nobody listens
    reporter = Reporter(_env(f"tcp://127.0.0.1:{port}", tmp_path), interval=0.01, queue_size=3)
    try:
        step = 0

        def overflowed() -> bool:
            nonlocal step
            step += 1
            reporter.step_done(step, 0.001)
            return reporter.dropped > 0

        wait_until(overflowed, 10, "the bounded queue to drop its oldest report")
        assert len(reporter._queue) == 3
        newest = msgpack.unpackb(reporter._queue[-1])["step"]
        assert newest > msgpack.unpackb(reporter._queue[0])["step"]
    finally:
        reporter.close()


def test_pass_through_has_no_reporter_thread(tmp_path: Path) -> None:
    env = parse({"TIRESIAS_CHECKPOINT_DIR": str(tmp_path)})
    reporter = Reporter(env)
    reporter.step_done(1, 0.1)
    assert not reporter.enabled
    reporter.close()


def test_facade_report_checks_fields_and_notes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tiresias

    class FakeRuntime:
        reporter = Reporter(parse({"TIRESIAS_CHECKPOINT_DIR": str(tmp_path)}))

    monkeypatch.setattr(tiresias, "get_runtime", lambda: FakeRuntime)
    with pytest.raises(ValueError, match=r"unknown fields \['loss'\]"):
        tiresias.report(loss=1.0)
    tiresias.report(skew=0.25)
    message = FakeRuntime.reporter.message()
    assert message is not None and message["skew"] == 0.25


HOLDING_LOOP = """
from tiresias_launch.runtime import get_runtime
rt = get_runtime()
for step in range(10):
    if rt.should_stop(step):
        print(f"stopped before step {step}", flush=True)
        raise SystemExit(75)
    rt.step_done(step + 1, 0.001)
print("ran all 10 steps", flush=True)
"""


@pytest.mark.slow  # starts a process
def test_hold_at_step_waits_for_the_preemption_signal(tmp_path: Path) -> None:
    """TIRESIAS_HOLD_AT_STEP makes a preemption land at one chosen step however fast the
    loop runs: the process holds there, and the signal stops it exactly at that step."""
    env = {**os.environ, "TIRESIAS_HOLD_AT_STEP": "4", "TIRESIAS_CHECKPOINT_DIR": str(tmp_path)}
    with subprocess.Popen(
        [sys.executable, "-c", HOLDING_LOOP], stdout=subprocess.PIPE, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "tiresias: holding at step 4 until preempted\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.read() == "stopped before step 4\n"
        assert proc.wait(30) == 75


@pytest.mark.slow  # starts a process
def test_a_run_after_a_preemption_never_holds(tmp_path: Path) -> None:
    """A job preempted before its hold step (no checkpoint yet) is not held on its next run:
    nothing would preempt it again (the preemption demo in docs/service.md hung there). A
    list of steps holds each run at its own."""
    env = {
        **os.environ,
        "TIRESIAS_HOLD_AT_STEP": "4",
        "TIRESIAS_RESTART_COUNT": "1",
        "TIRESIAS_CHECKPOINT_DIR": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-c", HOLDING_LOOP], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.stdout == "ran all 10 steps\n", out.stderr
    plain = subprocess.run(
        [sys.executable, "-c", HOLDING_LOOP],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "TIRESIAS_HOLD_AT_STEP": ""},
    )
    assert plain.stdout == "ran all 10 steps\n"
    with subprocess.Popen(  # a list: the run after one preemption holds at the second step
        [sys.executable, "-c", HOLDING_LOOP],
        stdout=subprocess.PIPE,
        text=True,
        env={**env, "TIRESIAS_HOLD_AT_STEP": "2,6"},
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "tiresias: holding at step 6 until preempted\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.read() == "stopped before step 6\n"
        assert proc.wait(30) == 75


@pytest.mark.slow  # starts a process
def test_a_barrier_aborted_by_a_peer_that_already_left_still_exits_checkpointed(
    tmp_path: Path,
) -> None:
    """After the chief's save, a fast peer leaves the last barrier and exits; its exit can
    abort the collective on a slower rank. The save is done, so that rank exits 75 too."""
    code = (
        "from tiresias_launch.runtime import get_runtime\n"
        "rt = get_runtime()\n"
        "def aborted():\n"
        "    raise RuntimeError('Collective ops is aborted: Socket closed')\n"
        "rt.barrier = aborted\n"
        "rt.stop(lambda: print('saved', flush=True))\n"
    )
    env = {**os.environ, "TIRESIAS_CHECKPOINT_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 75, done.stderr
    assert done.stdout.splitlines() == [
        "saved",
        "tiresias: the gang's last barrier ended early (RuntimeError); stopping",
    ]


@pytest.mark.slow  # starts a process
def test_process_start_time_is_exact_to_a_clock_tick(tmp_path: Path) -> None:
    """A resumed run tells the stopped run's files (a tf.data cache lock) by their being older
    than its own start, and a restart can follow the stop within a second: the start time
    must not be /proc/stat's whole-second ``btime`` plus ticks (up to a second early)."""
    code = "import time; from tiresias_launch.runtime import process_start_time as t"
    before = time.time()
    child = subprocess.run(
        [sys.executable, "-c", f"{code}; print(t(), time.time())"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    started, now = map(float, child.stdout.split())
    tick = 1 / os.sysconf("SC_CLK_TCK")  # /proc counts a start in these
    assert before - tick - 0.001 <= started <= now
