"""Fingerprints of a job's inputs (``tiresias_launch.fingerprint``): the same data prepared
the same way matches, a permutation or another validation split does not."""

from __future__ import annotations

import numpy as np

from tiresias_launch import fingerprint


def prepared(seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(5000 * 3, dtype="float32").reshape(5000, 3)
    y = np.arange(5000) % 2
    order = np.random.default_rng(seed).permutation(len(x))
    return x[order], y[order]


def test_the_same_preparation_matches_and_an_unseeded_one_does_not() -> None:
    first = fingerprint.of_inputs(training=prepared(1), validation=prepared(1)[0][:10])
    again = fingerprint.of_inputs(training=prepared(1), validation=prepared(1)[0][:10])
    assert first == again
    assert fingerprint.describe_change(first, again) is None
    other = fingerprint.of_inputs(training=prepared(None), validation=prepared(None)[0][:10])
    line = fingerprint.describe_change(first, other)
    assert line is not None
    assert line.startswith("the training and validation inputs differ")
    assert "np.random.seed" in line


def test_shapes_and_types_are_part_of_it() -> None:
    x, y = prepared(1)
    base = fingerprint.of_inputs(training=(x, y))
    assert fingerprint.of_inputs(training=(x[:-1], y[:-1])) != base
    assert fingerprint.of_inputs(training=(x.astype("float64"), y)) != base


def test_inputs_without_a_fingerprint_are_not_compared() -> None:
    saved = fingerprint.of_inputs(training=prepared(1))
    now = fingerprint.of_inputs(training=prepared(1), validation=iter([1, 2]))
    assert "validation" not in now
    assert fingerprint.describe_change(saved, now) is None
    assert fingerprint.describe_change({}, now) is None  # an older checkpoint: none recorded


class Rows:
    """A map-style dataset (a torch ``Dataset``'s interface)."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return np.full(4, i + self.offset, dtype="float32"), i % 3


class Loader:
    """What a ``DataLoader`` exposes to the fingerprint (no batch is drawn)."""

    def __init__(self, dataset: Rows) -> None:
        self.dataset, self.batch_sampler = dataset, None

    def __len__(self) -> int:
        return 10


def test_a_loader_is_read_by_index_not_iterated() -> None:
    same = fingerprint.of_inputs(training=Loader(Rows(0)))
    assert same == fingerprint.of_inputs(training=Loader(Rows(0)))
    assert same["training"]["batches"] == 10
    assert fingerprint.of_inputs(training=Loader(Rows(1))) != same
