"""Synthetic data is a pure function of (seed + step, shard): resumes see the same batches."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from models import common  # noqa: E402  (needs TensorFlow)

ARGS = common.parse_args(common.arg_parser(None), ["--batch-size", "4", "--num-classes", "10"])


def as_numpy(batch: tuple[tf.Tensor, tf.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    return batch[0].numpy(), batch[1].numpy()


def test_same_step_same_batch_and_shapes() -> None:
    x1, y1 = as_numpy(common.batch(ARGS, 3))
    x2, y2 = as_numpy(common.batch(ARGS, 3))
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert x1.shape == (4, ARGS.image_size, ARGS.image_size, 3)
    assert ((y1 >= 0) & (y1 < 10)).all()


def test_steps_and_shards_differ() -> None:
    x0, _ = as_numpy(common.batch(ARGS, 3))
    assert not np.array_equal(x0, as_numpy(common.batch(ARGS, 4))[0])
    assert not np.array_equal(x0, as_numpy(common.batch(ARGS, 3, shard=1))[0])


def test_data_depends_on_seed_plus_step() -> None:
    shifted = common.parse_args(
        common.arg_parser(None),
        ["--batch-size", "4", "--num-classes", "10", "--seed", "1"],
    )
    np.testing.assert_array_equal(
        as_numpy(common.batch(shifted, 2))[0], as_numpy(common.batch(ARGS, 3))[0]
    )


def test_dataset_skipped_by_a_resume_continues_the_same_sequence() -> None:
    full = [as_numpy(b)[0] for b in common.dataset(ARGS).take(6)]
    resumed = [as_numpy(b)[0] for b in common.dataset(ARGS).skip(4).take(2)]
    for a, b in zip(full[4:], resumed, strict=True):
        np.testing.assert_array_equal(a, b)


def test_image_size_defaults_to_the_models_smallest() -> None:
    args = common.parse_args(common.arg_parser(None), ["--model", "inception_v3"])
    assert args.image_size == 75
