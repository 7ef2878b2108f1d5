"""The rules by which an elastic Keras ``fit`` keeps its largest world's batch
(``tiresias_launch.keras_elastic``), in process: which scripts keep it, which run rigid and
what they say, and that a batch redone at the recorded size gives the largest world's
batches. The multi-process 4 → 2 → 4 run is in test_tf_elastic.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import Lazy, needs

from tiresias_launch.env import parse
from tiresias_launch.runtime import Runtime

pytestmark = [pytest.mark.tf, needs("tensorflow", "needs TensorFlow")]
tf = Lazy("tensorflow")


def _runtime(tmp_path: Path, world: int, top: int | None = 4) -> Runtime:
    env = {"TIRESIAS_CHECKPOINT_DIR": str(tmp_path), "TIRESIAS_JOB_ID": "t"}
    env |= {"TIRESIAS_NUM_WORKERS": str(world), "TIRESIAS_MODE": "allreduce"}
    return Runtime(parse(env | ({"TIRESIAS_MAX_WORKERS": str(top)} if top else {})))


def _keep(rt: Runtime, record: Any, **fit: Any) -> Any:
    from tiresias_launch.keras_elastic import keep_global_batch

    return keep_global_batch(rt, fit.get, record)


def _batches(dataset: Any, n: int) -> list[list[int]]:
    return [b.numpy().tolist() for b in dataset.take(n)]


def _data(batch: int) -> Any:
    return tf.data.Dataset.range(40).shuffle(40, seed=3).batch(batch).repeat().prefetch(2)


def test_a_per_replica_batch_is_redone_at_the_largest_worlds_size(tmp_path: Path) -> None:
    """A script's batch and epoch scaled by the world (per replica × replicas, samples over
    the global batch) train with the largest world's; ``batch().repeat()`` included, whose
    epochs end with a short batch."""
    largest = _keep(_runtime(tmp_path, 4), None, x=_data(16), steps_per_epoch=3)
    assert largest.overrides == {} and largest.record["batch"] == 16
    half = _keep(_runtime(tmp_path, 2), largest.record, x=_data(8), steps_per_epoch=6)
    assert half.overrides["steps_per_epoch"] == 3 and half.log_scale == 2
    assert _batches(half.overrides["x"], 7) == _batches(_data(16), 7)
    assert half.record == {"batch": 16, "steps_per_epoch": 3, "world": 2}


def test_a_fixed_global_batch_is_left_alone(tmp_path: Path) -> None:
    largest = _keep(_runtime(tmp_path, 4), None, x=np.zeros((8, 2)), batch_size=16)
    rt = _runtime(tmp_path, 2)
    half = _keep(rt, largest.record, x=np.zeros((8, 2)), batch_size=16)
    assert half.overrides == {} and rt.resizable is True
    scaled = _keep(_runtime(tmp_path, 1), largest.record, x=np.zeros((8, 2)), batch_size=4)
    assert scaled.overrides == {"batch_size": 16}


@pytest.mark.parametrize(
    ("world", "record", "data", "said"),
    [
        (2, None, lambda: _data(8), "nothing tells whether its batch"),
        (2, {"batch": 16, "steps_per_epoch": None}, lambda: _data(6), "neither its 16"),
        (3, {"batch": 16, "steps_per_epoch": None}, lambda: _data(8), "does not divide"),
        (
            2,
            {"batch": 16, "steps_per_epoch": None},
            lambda: _data(8).map(lambda b: b * 2),
            "does not end with its batch",
        ),
        (
            2,
            {"batch": 16, "steps_per_epoch": None},
            lambda: tf.data.TFRecordDataset(["/nonexistent"]).batch(8),
            "sharded by file",
        ),
        (2, {"batch": 16, "steps_per_epoch": None}, lambda: iter([]), "gives its own batches"),
    ],
)
def test_a_batch_that_cannot_be_kept_runs_rigid_and_says_why_once(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    world: int,
    record: Any,
    data: Any,
    said: str,
) -> None:
    rt = _runtime(tmp_path, world)
    assert _keep(rt, record, x=data()).overrides == {}
    assert _keep(rt, record, x=data()).overrides == {}  # a second fit call: nothing more said
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and said in lines[0] and "runs rigid" in lines[0], lines
    assert rt.resizable is False


def test_a_rigid_job_is_untouched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rt = _runtime(tmp_path, 2, top=None)
    batching = _keep(rt, None, x=_data(8))
    assert (batching.overrides, batching.record, rt.resizable) == ({}, None, None)
    assert capsys.readouterr().out == ""
