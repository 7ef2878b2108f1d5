"""Elastic PyTorch jobs: a training ``DataLoader`` made to yield, at this run's world, the
global batches of the job's largest world (``tiresias_launch.elastic``).

With a ``DistributedSampler`` at W_max ranks and per-rank batch b, step s of an epoch trains
the samples at positions [s·b·W_max, (s+1)·b·W_max) of the epoch's padded order (rank r takes
positions r, r + W_max, …). The same sampler at W ranks, ordering and padding the epoch as at
W_max and dealing it over W ranks, with per-rank batch b·W_max/W, trains the very same
positions at step s. DDP and FSDP average gradients over ranks, so each step's gradient is the
largest world's up to reduction order, and a checkpoint's data position (steps done in the
epoch) means the same samples at every world.

Gradient accumulation (``TIRESIAS_ELASTIC_BATCH=accumulate``, and a loader of single samples)
keeps the script's per-rank batch b instead: each step's b·W_max/W samples come as W_max/W
micro-batches, micro-batch j holding exactly what max-world rank r + j·W had (the elements
j, j + W_max/W, … of the dealt batch), so ``tiresias_launch.torch_accumulate`` can sum their
gradients into the largest world's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler
from torch.utils.data.distributed import DistributedSampler

from tiresias_launch.env import LaunchEnv

#: Where a rescaled batch sampler keeps the script's own per-rank batch (the largest world's).
SCRIPT_BATCH = "_tiresias_script_batch"


def plain_class(obj: Any) -> type:
    """The class a sampler had before the runtime swapped it (``tiresias_launch.torch.resumable``,
    ``rescale``)."""
    return next(c for c in type(obj).__mro__ if not _SWAPPED & vars(c).keys())


#: The markers of the classes the runtime swaps in (same layout, new ``__iter__``).
_SWAPPED = {"_tiresias_resumable", "_tiresias_micro"}


def why_not(loader: torch.utils.data.DataLoader[Any], env: LaunchEnv) -> str | None:
    """Why the runtime cannot keep this loader's global batch at other worlds, or None (a
    loader of single samples can keep it only by accumulation: ``micro_steps_only``)."""
    batches, sampler = loader.batch_sampler, loader.sampler
    if batches is not None and plain_class(batches) is not BatchSampler:
        return (
            f"its DataLoader batches with a {plain_class(batches).__name__}, whose per-rank "
            "batch the runtime cannot scale (give the DataLoader batch_size=…)"
        )
    if not isinstance(sampler, DistributedSampler) or (
        plain_class(sampler).__iter__ is not DistributedSampler.__iter__
    ):
        return (
            f"its DataLoader samples with a {plain_class(sampler).__name__}, not a "
            "DistributedSampler, so the runtime cannot deal the global order over other worlds"
        )
    if sampler.num_replicas != env.num_workers:
        return (
            f"its DistributedSampler has num_replicas={sampler.num_replicas}, "
            f"not this world's {env.num_workers}"
        )
    return None


def micro_steps_only(loader: torch.utils.data.DataLoader[Any]) -> bool:
    """Whether the loader yields single samples (``batch_size=None``): a rank of a smaller
    world then keeps the global batch only by taking several per step."""
    return loader.batch_sampler is None


def rescale(
    loader: torch.utils.data.DataLoader[Any], factor: int, top: int, accumulate: bool = False
) -> str:
    """Deal the epoch as ``top`` ranks would have it and give each rank ``factor`` of the
    script's batches per step: one batch of ``factor`` times the script's, or (``accumulate``)
    ``factor`` micro-batches, each a max-world rank's (a loader ``why_not`` accepted;
    idempotent). Says what the rank takes."""
    batches, sampler = loader.batch_sampler, loader.sampler
    assert isinstance(sampler, DistributedSampler)
    _deal(sampler, top)
    if batches is None:  # single samples: the dealt order is already the micro-steps' order
        return f"{factor} micro-steps of one sample each, gradients accumulated"
    assert isinstance(batches, BatchSampler)
    script_batch = getattr(batches, SCRIPT_BATCH, batches.batch_size)
    setattr(batches, SCRIPT_BATCH, script_batch)
    batches.batch_size = script_batch * factor
    if not accumulate:
        return f"per-rank batch {batches.batch_size} (the script's {script_batch} × {factor})"
    _micro_batched(batches, factor)
    return (
        f"{factor} micro-steps of the script's per-rank batch {script_batch}, gradients accumulated"
    )


def _micro_batched(batches: BatchSampler, factor: int) -> None:
    """Make ``batches`` yield each dealt batch as ``factor`` micro-batches: the j-th holds
    elements j, j + factor, …, which are max-world rank r + j·W's batch, in its order (the
    short last batch of an epoch too). ``len`` stays the steps per epoch."""
    cls = type(batches)
    if getattr(cls, "_tiresias_micro", None) == factor:
        return

    def micro_batched_iter(self: Any) -> Iterator[list[int]]:
        for batch in cls.__iter__(self):
            yield from (batch[j::factor] for j in range(factor))

    members = {"__slots__": (), "__iter__": micro_batched_iter, "_tiresias_micro": factor}
    batches.__class__ = type(f"MicroBatched{cls.__name__}", (cls,), members)


def _deal(sampler: DistributedSampler[Any], top: int) -> None:
    """Make ``sampler`` order and pad the epoch as at ``top`` ranks, dealt over its own."""
    n = len(sampler.dataset)  # type: ignore[arg-type]
    # DistributedSampler's own split, at `top` replicas: pad up, or drop the tail
    per_rank = math.ceil((n - top) / top) if sampler.drop_last and n % top else math.ceil(n / top)
    sampler.total_size = per_rank * top
    sampler.num_samples = sampler.total_size // sampler.num_replicas
