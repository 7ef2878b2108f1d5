"""Single-process jobs with real TensorFlow: preempt → checkpoint → exit 75 → resume gives
bit-identical losses; a SIGKILL mid-checkpoint falls back to the previous checkpoint; a
checkpoint of another model is refused clearly; progress reports reach the coordinator."""

from __future__ import annotations

import signal
from pathlib import Path

import msgpack
import pytest
import zmq
from helpers import wait_until

from coordinator.gang import GangRequest
from tiresias_launch import EXIT_CHECKPOINTED
from tiresias_launch.checkpoint import PAUSE_HOOK, CheckpointStore

from .gangs import SCRIPTS, read_steps, start

pytestmark = pytest.mark.tf
TIMEOUT = 180


def _custom(total: int, log: Path) -> GangRequest:
    return GangRequest((str(SCRIPTS / "custom_loop.py"), str(total), str(log)))


def _drain(router: zmq.Socket) -> list[dict]:
    messages = []
    while router.poll(200):
        messages.append(msgpack.unpackb(router.recv_multipart()[1]))
    return messages


def test_custom_loop_survives_preemption_and_a_killed_checkpoint(tmp_path: Path) -> None:
    ref = start(_custom(20, tmp_path / "ref.log"), tmp_path, job_id="ref")
    router = zmq.Context.instance().socket(zmq.ROUTER)
    coordinator = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    try:
        # Run A: preempted while paused before step 5 → finishes step 5, saves step 6.
        a = start(
            _custom(20, tmp_path / "a.log"),
            tmp_path,
            coordinator=coordinator,
            env={"TEST_PAUSE_AT": "5"},
        )
        wait_until((tmp_path / "a.log.paused").exists, TIMEOUT, "run A to pause")
        a.signal()
        assert a.wait(TIMEOUT) == [EXIT_CHECKPOINTED], a.tails()
        store = CheckpointStore(tmp_path / "ckpt" / "job", "job")
        assert [c.manifest.step for c in store.complete()] == [6]

        # Run B: resumes at 6, preempted at 10, SIGKILLed while writing that checkpoint.
        hook = tmp_path / "writing"
        b = start(
            _custom(20, tmp_path / "b.log"),
            tmp_path,
            restart=1,
            env={"TEST_PAUSE_AT": "9", PAUSE_HOOK: str(hook)},
        )
        wait_until((tmp_path / "b.log.paused").exists, TIMEOUT, "run B to pause")
        b.signal()
        wait_until(hook.exists, TIMEOUT, "run B to be inside its checkpoint write")
        b.signal(signal.SIGKILL)
        assert b.wait(TIMEOUT) == [-signal.SIGKILL]
        assert [s for s, _ in read_steps(tmp_path / "b.log")] == [6, 7, 8, 9]

        # Run C: restores step 6 again (10 never completed) and runs to the end.
        c = start(_custom(20, tmp_path / "c.log"), tmp_path, restart=2, coordinator=coordinator)
        assert c.wait(TIMEOUT) == [0], c.tails()
        assert ref.wait(TIMEOUT) == [0], ref.tails()
        reports = _drain(router)
    finally:
        router.close(linger=0)

    resumed = read_steps(tmp_path / "a.log") + read_steps(tmp_path / "c.log")
    assert [s for s, _ in resumed] == list(range(20))  # no lost or repeated step
    assert resumed == read_steps(tmp_path / "ref.log")  # bit-identical losses
    assert (tmp_path / "c.log").read_text().splitlines()[-1] == "done 20 20"
    assert not list((tmp_path / "ckpt" / "job").glob(".tmp-*"))  # B's half-write cleaned up

    by_restart = {r: [m for m in reports if m["restart"] == r] for r in (0, 2)}
    saved = [m["checkpoint"] for m in by_restart[0] if m["checkpoint"]]
    assert len(saved) == 1 and saved[0]["step"] == 6 and saved[0]["bytes"] > 0, (reports, a.tails())
    assert any(m["tensor_bytes"] == [8 * 16 * 4, 16 * 4, 16 * 4, 4] for m in by_restart[0])
    warmups = [m["warmup"] for m in by_restart[2] if m["warmup"]]
    assert len(warmups) == 1 and set(warmups[0]) == {"build", "restore", "first_step", "step"}
    assert warmups[0]["step"] == 6  # resumed from
    assert warmups[0]["build"] > 0 and warmups[0]["restore"] > 0
    assert max(m["step"] for m in by_restart[2]) == 20
    assert sum(m["iterations"] for m in by_restart[2]) == 14


@pytest.mark.parametrize("infinite", ["0", "1"], ids=["finite-data", "infinite-data"])
def test_unmodified_keras_fit_resumes_mid_epoch(tmp_path: Path, infinite: str) -> None:
    def fit(log: Path) -> GangRequest:
        return GangRequest((str(SCRIPTS / "keras_fit.py"), "3", str(log)))

    data = {"TEST_INFINITE": infinite}
    ref = start(fit(tmp_path / "ref.log"), tmp_path, job_id="ref", env=data)
    a = start(fit(tmp_path / "a.log"), tmp_path, env={**data, "TEST_PAUSE_AT": "10"})
    # paused inside batch 10's callbacks, after the stop check: the stop comes at batch 11
    wait_until((tmp_path / "a.log.paused").exists, TIMEOUT, "fit to pause at batch 10")
    a.signal()
    (tmp_path / "a.log.go").touch()
    assert a.wait(TIMEOUT) == [EXIT_CHECKPOINTED], a.tails()
    [ckpt] = CheckpointStore(tmp_path / "ckpt" / "job", "job").complete()
    position = ckpt.manifest.position
    assert {k: position[k] for k in ("epoch", "batch", "step")} == {
        "epoch": 1,
        "batch": 3,
        "step": 11,
    }

    b = start(fit(tmp_path / "b.log"), tmp_path, restart=1, env=data)
    assert b.wait(TIMEOUT) == [0], b.tails()
    assert ref.wait(TIMEOUT) == [0], ref.tails()

    resumed = (tmp_path / "a.log").read_text().splitlines()
    resumed += (tmp_path / "b.log").read_text().splitlines()
    expected = (tmp_path / "ref.log").read_text().splitlines()
    # the resumed epoch's mean loss covers all its batches: the metric totals were restored
    assert resumed == expected
    assert len([line for line in resumed if not line.startswith("epoch")]) == 24


def test_checkpoint_of_another_model_is_refused_clearly(tmp_path: Path) -> None:
    other = ["sequential/dense/kernel [8, 32] float32", "sequential/dense/bias [32] float32"]
    CheckpointStore(tmp_path / "ckpt" / "job", "job").save(
        3, other, lambda d: (d / "state.index").write_bytes(b"x")
    )
    run = start(_custom(5, tmp_path / "log"), tmp_path)
    assert run.wait(TIMEOUT) == [1]
    out = run.logs[0].read_text()
    assert "CheckpointError" in out
    assert "was written by a different model: checkpoint has " in out
    assert "'sequential/dense/kernel [8, 32] float32', model has" in out
