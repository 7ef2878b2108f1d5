"""A resumed epoch of a finite ``tf.data`` pipeline sees what it saw uninterrupted, for each
transformation whose state carries from one iterator to the next (``tiresias_launch.tf_data``).

Keras 3's ``fit`` is played by hand, in process: each epoch iterates one new iterator to its
end and, when the dataset's length is known, makes one more that it never uses
(``Flavour.dataset_iterators``, ``unknown_iterators``). A resume at
(epoch, batch) replays the epochs run through ``DatasetSource`` and iterates its phases; the
batches must be the uninterrupted run's. The corpus (``tests/corpus``) runs the same patterns
as user scripts under ``tiresias-run``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import Lazy, needs

from tiresias_launch import tf_data
from tiresias_launch.keras_flavours import TARGETS

pytestmark = [pytest.mark.tf, needs("tensorflow", "needs TensorFlow")]
tf = Lazy("tensorflow")

KERAS3 = TARGETS["keras.src.models.model"]
TF_KERAS = TARGETS["tf_keras.src.engine.training"]
EPOCHS = 4


def shuffle_map_cache(_: Path) -> Any:  # image_dataset_from_directory → map → cache
    ds = tf.data.Dataset.range(12).shuffle(12).map(lambda x: x * 10).batch(3)
    return ds.cache().prefetch(2)


def cache_then_shuffle(_: Path) -> Any:  # the TF tutorial's cache().shuffle()
    return tf.data.Dataset.range(12).map(lambda x: x * 10).cache().shuffle(12).batch(3)


def file_cache(tmp: Path) -> Any:
    return tf.data.Dataset.range(12).shuffle(12).cache(str(tmp / "cache")).batch(3)


def interleave_own_rng(_: Path) -> Any:  # per-file datasets with their own shuffles
    files = tf.data.Dataset.range(4).shuffle(4)
    inner = files.interleave(
        lambda f: tf.data.Dataset.range(3).map(lambda v: f * 10 + v).shuffle(3), cycle_length=2
    )
    return inner.batch(3)


def sample_from_datasets(_: Path) -> Any:
    a, b = tf.data.Dataset.range(6), tf.data.Dataset.range(100, 106)
    mixed = tf.data.Dataset.sample_from_datasets(
        [a, b], rerandomize_each_iteration=True, stop_on_empty_dataset=True
    )
    return mixed.batch(3)


def snapshot(tmp: Path) -> Any:
    return tf.data.Dataset.range(12).shuffle(12).snapshot(str(tmp / "snapshot")).batch(3)


PIPELINES: list[Callable[[Path], Any]] = [
    shuffle_map_cache,
    cache_then_shuffle,
    file_cache,
    interleave_own_rng,
    sample_from_datasets,
    snapshot,
]


def batches(iterable: Any) -> list[list[int]]:
    return [b.numpy().tolist() for b in iterable]


def uninterrupted(make: Callable[[Path], Any], tmp: Path) -> list[list[list[int]]]:
    tmp.mkdir()
    tf.random.set_seed(7)
    ds = make(tmp)
    epochs = []
    for _ in range(EPOCHS):
        epochs.append(batches(ds))
        if ds.cardinality() >= 0:
            iter(ds)  # made for the next epoch, never used (not when the length is unknown)
    return epochs


def resumed(make: Callable[[Path], Any], tmp: Path, epoch: int, batch: int) -> list[Any]:
    tmp.mkdir()
    tf.random.set_seed(7)
    ds = make(tmp)
    from tiresias_launch.keras_data import DatasetSource  # imports TensorFlow

    source = DatasetSource(ds, None, KERAS3, one_fit=False, bridge=True)
    assert source.replay_epochs(epoch) == ""
    epochs = []
    for e, skip in [(epoch, batch), *((e, 0) for e in range(epoch + 1, EPOCHS))]:
        x = source.phase(e, skip, 0)["x"]
        epochs.append(batches(x))
        if x.cardinality() >= 0:
            iter(x)
    return epochs


@pytest.mark.parametrize("make", PIPELINES, ids=[p.__name__ for p in PIPELINES])
@pytest.mark.parametrize(("epoch", "batch"), [(0, 2), (1, 0), (2, 1)])
def test_a_resumed_epoch_sees_the_uninterrupted_batches(
    make: Callable[[Path], Any], epoch: int, batch: int, tmp_path: Path
) -> None:
    # each run has its own files: a file cache or snapshot of one would serve the other
    expected = uninterrupted(make, tmp_path / "a")
    got = resumed(make, tmp_path / "b", epoch, batch)
    assert got == [expected[epoch][batch:], *expected[epoch + 1 :]]


@pytest.mark.parametrize("make", [cache_then_shuffle, interleave_own_rng, sample_from_datasets])
@pytest.mark.parametrize("epoch", [1, 2])
def test_a_resumed_tf_keras_fit_sees_the_uninterrupted_epochs(
    make: Callable[[Path], Any], epoch: int, tmp_path: Path
) -> None:
    """tf_keras's ``fit`` makes one iterator it never uses when it starts, then one an
    epoch: a resumed call makes its own, so the replay makes one fewer, and a cache filled
    in an order no reshuffle decides is filled by any of them."""
    (tmp_path / "a").mkdir()
    tf.random.set_seed(7)
    ds = make(tmp_path / "a")
    iter(ds)
    expected = [batches(ds) for _ in range(EPOCHS)]
    (tmp_path / "b").mkdir()
    tf.random.set_seed(7)
    ds = make(tmp_path / "b")
    from tiresias_launch.keras_data import DatasetSource  # imports TensorFlow

    source = DatasetSource(ds, None, TF_KERAS, one_fit=False, bridge=False)
    assert source.replay_epochs(epoch) == ""
    x = source.phase(epoch, 0, 0)["x"]
    iter(x)  # the resumed call's own
    assert [batches(x) for _ in range(epoch, EPOCHS)] == expected[epoch:]


def test_a_cache_filled_in_a_reshuffled_order_says_a_tf_keras_resume_is_not_exact(
    tmp_path: Path,
) -> None:
    """``shuffle().cache()`` resumed after epoch 1: the cache must hold epoch 1's order,
    whose seeds come from the iterator the resumed call would make itself."""
    from tiresias_launch.keras_data import DatasetSource  # imports TensorFlow

    source = DatasetSource(shuffle_map_cache(tmp_path), None, TF_KERAS, False, False)
    assert source.replay_epochs(1).startswith("a cached dataset reshuffling after its cache")


def test_what_a_pipeline_carries_is_read_from_its_graph(tmp_path: Path) -> None:
    cached = tf_data.inspect(shuffle_map_cache(tmp_path))
    assert (cached.reshuffles, cached.fills, cached.cache_files) == (True, True, ())
    assert cached.fill_reshuffles and tf_data.inspect(snapshot(tmp_path)).fill_reshuffles
    assert not tf_data.inspect(cache_then_shuffle(tmp_path)).fill_reshuffles
    on_disk = tf_data.inspect(file_cache(tmp_path))
    assert on_disk.cache_files == (str(tmp_path / "cache"),)
    assert tf_data.inspect(sample_from_datasets(tmp_path)).reshuffles
    plain = tf_data.inspect(tf.data.Dataset.range(4).shuffle(4, reshuffle_each_iteration=False))
    assert (plain.reshuffles, plain.fills) == (False, False)


STOPPED_WHILE_CACHING = """
import os, sys, tensorflow as tf
iterator = iter(tf.data.Dataset.range(10).cache(sys.argv[1]))
next(iterator)
os._exit(75)
"""


def test_a_file_cache_left_locked_by_a_stopped_run_is_unlocked_on_resume(tmp_path: Path) -> None:
    prefix = str(tmp_path / "cache")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    stopped = subprocess.run(
        [sys.executable, "-c", STOPPED_WHILE_CACHING, prefix], env=env, timeout=120
    )
    assert stopped.returncode == 75
    locks = list(tmp_path.glob("cache_*.lockfile"))
    assert locks  # TensorFlow would refuse this cache: "cache lockfile already exists"
    started = max(lock.stat().st_mtime for lock in locks) + 1
    assert tf_data.remove_stale_cache_locks((prefix,), started) == locks
    assert [int(v) for v in tf.data.Dataset.range(10).cache(prefix)] == list(range(10))
    # a lock newer than the process (its own iterator's) is left alone
    iterator = iter(tf.data.Dataset.range(10).cache(str(tmp_path / "mine")))
    next(iterator)
    assert tf_data.remove_stale_cache_locks((str(tmp_path / "mine"),), started - 1) == []


def test_a_shuffle_without_any_seed_is_said_on_resume() -> None:
    from tiresias_launch import fingerprint

    tf.random.set_seed(None)  # what a script that seeds nothing has
    unseeded = fingerprint.of_inputs(training=tf.data.Dataset.range(9).shuffle(9).batch(3))
    assert unseeded["training"]["unseeded"]
    line = fingerprint.describe_change(unseeded, unseeded)
    assert line is not None and line.startswith("the training inputs shuffle without a seed")
    tf.random.set_seed(3)
    seeded = fingerprint.of_inputs(training=tf.data.Dataset.range(9).shuffle(9).batch(3))
    assert not seeded["training"]["unseeded"]
    assert fingerprint.describe_change(seeded, seeded) is None
