"""Synthetic data is a pure function of (seed + step, shard): resumes see the same batches."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest
from helpers import needs

pytestmark = needs("tensorflow", "needs TensorFlow (the [tensorflow] extra)")


@pytest.fixture(scope="module")
def common() -> ModuleType:
    from models import common  # imports TensorFlow: in the test, not at collection

    return common


@pytest.fixture(scope="module")
def args(common: ModuleType) -> Any:
    return common.parse_args(common.arg_parser(None), ["--batch-size", "4", "--num-classes", "10"])


def as_numpy(batch: Any) -> tuple[np.ndarray, np.ndarray]:
    return batch[0].numpy(), batch[1].numpy()


def test_same_step_same_batch_and_shapes(common: ModuleType, args: Any) -> None:
    x1, y1 = as_numpy(common.batch(args, 3))
    x2, y2 = as_numpy(common.batch(args, 3))
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert x1.shape == (4, args.image_size, args.image_size, 3)
    assert ((y1 >= 0) & (y1 < 10)).all()


def test_steps_and_shards_differ(common: ModuleType, args: Any) -> None:
    x0, _ = as_numpy(common.batch(args, 3))
    assert not np.array_equal(x0, as_numpy(common.batch(args, 4))[0])
    assert not np.array_equal(x0, as_numpy(common.batch(args, 3, shard=1))[0])


def test_data_depends_on_seed_plus_step(common: ModuleType, args: Any) -> None:
    shifted = common.parse_args(
        common.arg_parser(None),
        ["--batch-size", "4", "--num-classes", "10", "--seed", "1"],
    )
    np.testing.assert_array_equal(
        as_numpy(common.batch(shifted, 2))[0], as_numpy(common.batch(args, 3))[0]
    )


def test_dataset_skipped_by_a_resume_continues_the_same_sequence(
    common: ModuleType, args: Any
) -> None:
    full = [as_numpy(b)[0] for b in common.dataset(args).take(6)]
    resumed = [as_numpy(b)[0] for b in common.dataset(args).skip(4).take(2)]
    for a, b in zip(full[4:], resumed, strict=True):
        np.testing.assert_array_equal(a, b)


def test_image_size_defaults_to_the_models_smallest(common: ModuleType) -> None:
    args = common.parse_args(common.arg_parser(None), ["--model", "inception_v3"])
    assert args.image_size == 75
