"""Elastic Keras ``fit`` under MultiWorkerMirroredStrategy (tf_keras): a run at world W of a
job whose largest world is W_max trains with the global batch and epoch length the script has
at W_max (docs/launcher.md, "Elastic jobs").

Under the strategy the batch of ``fit``'s input is the global batch: the strategy splits it
over the replicas and, with data sharding (the default for in-memory data), every worker runs
the whole pipeline and takes its slice of each global batch, so the samples of a global step
and the gradient (their mean, up to reduction order) do not depend on the world. What does is
the script's own arithmetic: the Keras guide's ``per_replica * strategy.num_replicas_in_sync``
(and an epoch of ``samples // global_batch`` steps) halves the global batch at half the world.

So the checkpoint records, per ``fit`` call, the global batch and ``steps_per_epoch`` of the
run at W_max. At another world the script's values must be those (a fixed global batch) or
those scaled by W / W_max (a per-replica batch): ``fit`` then trains with the recorded ones,
a ``tf.data`` input batched again at the recorded size (its pipeline before the batch is the
same object, seeds and all), arrays given the recorded ``batch_size``. A first run below
W_max has no record: its values alone cannot tell which of the two the script's batch is,
so the chief runs the script as at W_max up to its first ``fit`` to learn the record there
(``tiresias_launch.keras_probe``). Rigid, said once: values that are neither, a later
``fit`` call first met below W_max (only the first is probed), an input whose batch cannot
be redone (no batch at its end, a transformation after it other than prefetch, repeat or
options, a generator), and data sharded by file (which files a worker reads, so a step's
samples, depends on the world).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from tiresias_launch import compat, elastic, tf_data
from tiresias_launch.env import LaunchEnv
from tiresias_launch.runtime import Runtime

#: Transformations after the batch that are redone on the new batches: (how, from the old).
_AFTER_BATCH: dict[str, Callable[[Any, Any], Any]] = {
    "_PrefetchDataset": lambda old, new: new.prefetch(int(old._buffer_size)),
    "_RepeatDataset": lambda old, new: new.repeat(int(old._count)),
    "_OptionsDataset": lambda old, new: new,  # the options are put back at the end
}
#: The record of a ``fit`` call at the job's largest world, or why it is not known.
Learn = Callable[[], "dict[str, Any] | str"]
_BATCHES = ("_BatchDataset", "_ParallelBatchDataset")
#: Sources that the strategy's default (AUTO) sharding shards by file.
_FILE_READERS = frozenset(
    {
        "TFRecordDataset",
        "TFRecordDatasetV2",
        "TextLineDataset",
        "FixedLengthRecordDataset",
        "FixedLengthRecordDatasetV2",
    }
)


@dataclass(frozen=True)
class _Input:
    """How one ``fit`` call's input is batched, and how to batch it otherwise."""

    batch: int
    rebatch: Callable[[int], dict[str, Any]]  # fit overrides for another global batch
    unbatched: Any  # what the inputs fingerprint reads, the same at every world (None: x)


@dataclass
class Batching:
    """What the patched ``fit`` does with an elastic job's batch."""

    overrides: dict[str, Any] = field(default_factory=dict)  # fit arguments replaced
    record: dict[str, Any] | None = None  # kept in the checkpoint, per fit call
    unbatched: Any = None  # fingerprint this instead of the training input, when set
    #: tf_keras logs the sum of the replicas' metric results (its "auto" reduction off
    #: TPUs), so a run at 1/k of the largest world logs 1/k of its values: scaled back.
    log_scale: int = 1


def keep_global_batch(
    rt: Runtime, arg: Callable[[str], Any], record: Any, learn: Learn | None = None
) -> Batching:
    """The overrides that keep the job's largest-world batch for one ``fit`` call (``arg``:
    its arguments; ``record``: the checkpoint's for this call, or None; ``learn``: for the
    process's first call, its record at the largest world or why not, from the probe of
    ``tiresias_launch.keras_probe``)."""
    env = rt.env
    if not env.elastic or rt.resizable is False:
        return Batching()
    found, factor = input_of(arg("x"), arg("batch_size")), elastic.factor(env)
    why = _why_rigid(env, found, factor)
    if why is None and record is None and factor != 1:  # a first run below the largest world
        record = learn() if learn else _unknown(rt.env, found)
        why = record if isinstance(record, str) else None
    if why is None and isinstance(factor, int) and factor != 1:
        why = _why_not_scaled(env, found, arg("steps_per_epoch"), record, factor)
    elastic.declare(rt, why)
    if why is not None:
        return Batching()
    assert isinstance(found, _Input) and isinstance(factor, int)
    steps, saved_world = arg("steps_per_epoch"), record.get("world") if record else None
    if factor == 1:  # the largest world: the script's own values define the job's
        record = {"batch": found.batch, "steps_per_epoch": steps}
    batch, per_epoch = record["batch"], record["steps_per_epoch"]
    elastic.resumed(
        rt,
        saved_world,
        f"global batch {batch} ({batch // env.num_workers} per worker; the script's "
        f"{found.batch}), {per_epoch or 'its'} steps per epoch",
    )
    overrides = found.rebatch(batch) if batch != found.batch else {}
    if per_epoch != steps:
        overrides["steps_per_epoch"] = per_epoch
    return Batching(overrides, {**record, "world": env.num_workers}, found.unbatched, factor)


def _why_rigid(env: LaunchEnv, found: _Input | str, factor: int | str) -> str | None:
    if isinstance(factor, str) or isinstance(found, str):
        return factor if isinstance(factor, str) else str(found)
    if env.mode == "ps":
        return "a parameter-server job's workers each train their own batches"
    return None


def _unknown(env: LaunchEnv, found: Any) -> str:
    """Why a later ``fit`` call first met below the largest world runs rigid."""
    return (
        f"at {env.num_workers} of {env.max_workers} workers with no record of this fit "
        f"call's batch at {env.max_workers} (only a process's first call is probed), "
        f"nothing tells whether its batch of {found.batch} is per worker or global"
    )


def _why_not_scaled(
    env: LaunchEnv, found: Any, steps: int | None, record: Any, factor: int
) -> str | None:
    """Why the script's batch and epoch at this world are neither the largest world's nor
    those scaled by the world (a per-replica batch: batch × W_max/W, steps × W/W_max;
    ``factor``: W_max/W, from ``elastic.factor``)."""
    batch, per_epoch = record["batch"], record["steps_per_epoch"]
    if _same_or_scaled(batch, found.batch, factor) and _same_or_scaled(steps, per_epoch, factor):
        return None
    return (
        f"at {env.num_workers} workers its batch is {found.batch} and its epoch {steps} "
        f"steps, neither its {batch} and {per_epoch} at {env.max_workers} workers nor those "
        f"scaled by {env.num_workers}/{env.max_workers}"
    )


def _same_or_scaled(value: int | None, base: int | None, factor: int) -> bool:
    """Whether ``value`` is ``base`` or ``base`` × ``factor`` (None only matches None)."""
    if value is None or base is None:
        return value == base
    return value in (base, base * factor)


def input_of(x: Any, batch_size: int | None) -> _Input | str:
    """How ``fit``'s input ``x`` is batched, or why its batch cannot be changed."""
    if isinstance(x, tf.data.Dataset):
        return _dataset(x)
    leaves = tf.nest.flatten(x)
    if leaves and all(hasattr(v, "shape") and hasattr(v, "dtype") for v in leaves):
        return _Input(batch_size or 32, lambda n: {"batch_size": n}, None)
    return f"its {type(x).__name__} input gives its own batches"


def _dataset(dataset: tf.data.Dataset) -> _Input | str:
    """The batch at the end of a ``tf.data`` pipeline, redone at another size."""
    policy = dataset.options().experimental_distribute.auto_shard_policy
    Policy = tf.data.experimental.AutoShardPolicy
    nodes = tf_data.nodes_of(tf_data.graph_of(dataset))
    files = any(n.op in _FILE_READERS for n in nodes)
    if policy in (Policy.FILE, Policy.OFF, Policy.HINT) or (policy == Policy.AUTO and files):
        return (
            "its tf.data input is sharded by file or not at all, so the samples of a step "
            "depend on the world"
        )
    return batched(dataset)


def batched(dataset: tf.data.Dataset) -> _Input | str:
    """The batch at the end of a ``tf.data`` pipeline (then prefetch, repeat or options),
    redone at another size on the same pipeline before it."""
    after, d = [], dataset
    while type(d).__name__ not in _BATCHES:
        if type(d).__name__ not in _AFTER_BATCH:
            return (
                f"its tf.data input does not end with its batch (then prefetch, repeat or "
                f"options only): {type(d).__name__.strip('_')} is there"
            )
        if moved := compat.first_missing(type(d).__name__, d):
            return _moved(moved)
        after.append(d)
        d = d._input_dataset
    if moved := compat.first_missing(type(d).__name__, d):
        return _moved(moved)
    batched, unbatched = d, d._input_dataset
    drop = bool(batched._drop_remainder)
    parallel = getattr(batched, "_num_parallel_calls", None)
    parallel = None if parallel is None else int(parallel)

    def rebatch(size: int) -> dict[str, Any]:
        if parallel is None:
            new = unbatched.batch(size, drop_remainder=drop)
        else:
            new = unbatched.batch(size, drop, num_parallel_calls=parallel)
        for old in reversed(after):
            new = _AFTER_BATCH[type(old).__name__](old, new)
        return {"x": new.with_options(dataset.options())}

    return _Input(int(batched._batch_size), rebatch, unbatched)


def _moved(moved: compat.Internal) -> str:
    return (
        f"{moved.framework} {compat.version(moved.framework)} has no {moved.name}, which "
        f"tiresias uses ({moved.use})"
    )
