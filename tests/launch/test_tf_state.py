"""tiresias.State and @preemptible in-process with real TensorFlow: step counting, the
save-and-exit path, restore, and falling back past a damaged checkpoint."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from tiresias_launch import EXIT_CHECKPOINTED
from tiresias_launch.env import parse
from tiresias_launch.runtime import Runtime

pytestmark = pytest.mark.tf


class Exited(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


@pytest.fixture(scope="module")
def tfm() -> SimpleNamespace:
    """TensorFlow modules, imported by the first test, not at collection (`-m "not tf"`)."""
    return SimpleNamespace(
        tf=pytest.importorskip("tensorflow"),
        keras=pytest.importorskip("keras"),
        launch=importlib.import_module("tiresias_launch.state"),
    )


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tfm: SimpleNamespace) -> Runtime:
    """A runtime for this test only: no signal handlers in pytest, exit raises instead."""
    monkeypatch.setattr(Runtime, "install_signal_handlers", lambda self: None)
    rt = Runtime(parse({"TIRESIAS_CHECKPOINT_DIR": str(tmp_path), "TIRESIAS_JOB_ID": "t"}))

    def exit_(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(rt, "exit", exit_)
    monkeypatch.setattr(tfm.launch, "get_runtime", lambda: rt)
    monkeypatch.setattr(tfm.launch.State, "_current", None)
    return rt


def _trainer(tfm: SimpleNamespace):
    """A named model (fresh Keras auto-names would differ within one process) + its step."""
    tf, keras = tfm.tf, tfm.keras
    model = keras.Sequential(
        [keras.Input((4,), name="x"), keras.layers.Dense(2, name="d")], name="net"
    )
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)

    @tf.function
    def step() -> None:
        x = tf.ones([3, 4])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    return model, optimizer, step


def test_preemptible_counts_each_call_once_then_saves_and_exits(
    runtime: Runtime, tfm: SimpleNamespace
) -> None:
    model, optimizer, raw_step = _trainer(tfm)
    state = tfm.launch.State(model=model, optimizer=optimizer)
    train_step = tfm.launch.preemptible(raw_step)
    for _ in state.steps(3):  # decorator inside steps(): still one step per iteration
        train_step()
    assert state.step == 3
    while state.step < 5:
        train_step()
    runtime.flag.set()
    with pytest.raises(Exited) as exited:
        train_step()
    assert exited.value.code == EXIT_CHECKPOINTED
    assert [c.manifest.step for c in runtime.store.complete()] == [5]
    assert int(optimizer.iterations.numpy()) == 5  # the call that saw the flag did not run

    runtime.flag.received = None
    model2, optimizer2, _ = _trainer(tfm)
    resumed = tfm.launch.State(model=model2, optimizer=optimizer2)
    assert resumed.step == 5
    for a, b in zip(model.get_weights(), model2.get_weights(), strict=True):
        assert (a == b).all()
    assert int(optimizer2.iterations.numpy()) == 5


def test_damaged_newest_checkpoint_falls_back_to_previous(
    runtime: Runtime, tfm: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    model, optimizer, train_step = _trainer(tfm)
    state = tfm.launch.State(model=model, optimizer=optimizer)
    for _ in state.steps(2):
        train_step()
    state.save()
    at_two = model.get_weights()
    for _ in state.steps(4):
        train_step()
    newest = state.save()
    assert newest is not None
    data = next(newest.path.glob("state.data-*"))
    raw = bytearray(data.read_bytes())
    raw[: len(raw) // 2] = bytes(len(raw) // 2)  # bit rot in the tensor bytes
    data.write_bytes(bytes(raw))

    model2, optimizer2, _ = _trainer(tfm)
    resumed = tfm.launch.State(model=model2, optimizer=optimizer2)
    assert resumed.step == 2
    for a, b in zip(at_two, model2.get_weights(), strict=True):
        assert (a == b).all()
    said = [line for line in capsys.readouterr().out.splitlines() if "could not be read" in line]
    assert len(said) == 1 and said[0].startswith("tiresias: the checkpoint at step 4 "), said
    assert said[0].endswith(
        "resumed from the one at step 2, so the 2 steps after it are trained again"
    )
    report = runtime.reporter.message()
    assert report is not None and report["notice"] == said[0].removeprefix("tiresias: ")


def test_preempted_before_any_new_step_keeps_the_restored_checkpoint(
    runtime: Runtime, tfm: SimpleNamespace
) -> None:
    model, optimizer, train_step = _trainer(tfm)
    state = tfm.launch.State(model=model, optimizer=optimizer)
    runtime.flag.set()  # e.g. SIGTERM during start-up
    with pytest.raises(Exited) as exited:
        for _ in state.steps(10):
            train_step()
    assert exited.value.code == EXIT_CHECKPOINTED
    assert runtime.store.complete() == []  # nothing ran, so nothing new was written
    assert int(optimizer.iterations.numpy()) == 0


def _rows(tfm: SimpleNamespace, seed: int | None):
    """A data set prepared as scripts do: arrays permuted (seeded or not), then tf.data."""
    import numpy as np

    x = np.arange(64 * 4, dtype="float32").reshape(64, 4)
    order = np.random.default_rng(seed).permutation(len(x))
    return tfm.tf.data.Dataset.from_tensor_slices(x[order]).shuffle(8, seed=1).batch(4)


def test_a_state_loop_over_a_tf_data_iterator_says_when_its_data_changed(
    runtime: Runtime, tfm: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []  # the lines about inputs (checkpoint lines are said too)
    monkeypatch.setattr(runtime, "say", lambda line: "inputs" in line and said.append(line))
    model, optimizer, train_step = _trainer(tfm)
    iterator = iter(_rows(tfm, 1))
    state = tfm.launch.State(model=model, optimizer=optimizer, iterator=iterator)
    for _ in state.steps(2):
        next(iterator)
        train_step()
    state.save()

    def resume(seed: int | None) -> None:
        model2, optimizer2, _ = _trainer(tfm)
        again = iter(_rows(tfm, seed))
        tfm.launch.State(model=model2, optimizer=optimizer2, iterator=again)

    resume(1)  # prepared the same way: silent
    assert said == []
    resume(None)  # an unseeded permutation before tf.data
    assert len(said) == 1
    assert said[0].startswith("the training inputs differ from the checkpointed run's")
