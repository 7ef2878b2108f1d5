"""Elastic Horovod (TensorFlow) Keras ``fit``: a run at world W of a job whose largest world is
W_max trains as W_max ranks would (docs/launcher.md, "Elastic jobs").

A Horovod script keeps a per-rank batch b and takes its learning rate, epoch length and data
shard from ``hvd.size()`` and ``hvd.rank()``. At W = W_max/k each real rank r stands for the
k ranks r, r + W, …, r + (k−1)·W of the largest world: ``hvd.size()`` says W_max (so the
script's arithmetic is the largest world's), ``hvd.rank()`` stays r, and the script's
``dataset.shard(hvd.size(), hvd.rank())`` becomes ``shard(W, r)``, which holds exactly those
ranks' shards interleaved: element m of it is element m // k of rank r + (m mod k)·W's
shard. Batched at k·b, step s of rank r is the union of those ranks' step-s batches, and
the allreduce averages over the W real ranks, so each step's gradient is the largest
world's (the mean over W_max·b samples), up to reduction order; every sample once per epoch.

This holds only where the runtime can see how a rank's data follows its rank: a ``tf.data``
input sharded by ``shard(hvd.size(), hvd.rank())`` on a pipeline the same on every rank
(so rank-seeded data and Horovod's examples, which shuffle all the data on every rank, run
rigid), with nothing but maps (no random draws), caches, repeats and prefetches between the
shard and the batch, shard sizes all equal, and an averaging ``hvd.DistributedOptimizer``.
``hvd.size()`` must say W_max before the script runs, and only its ``fit`` shows whether
its data qualifies: so a first run below W_max runs rigid, and a run below W_max resizes
only after a checkpointed run that qualified. ``horovod.torch`` and ``tiresias.State``
loops run rigid. Each rigid case says why once (``elastic.declare``).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tiresias_launch import elastic
from tiresias_launch.imports import patch_on_import
from tiresias_launch.runtime import Runtime

if TYPE_CHECKING:
    from tiresias_launch.keras_elastic import Batching

TORCH_RIGID = (
    "a Horovod PyTorch script takes its learning rate, steps and data shard from hvd.size() "
    "and hvd.rank(), and the runtime makes only Horovod's TensorFlow Keras fit elastic"
)
#: Why the data of a fit call cannot be dealt to fewer ranks (the lines the chief says).
NOT_SHARDED = (
    "its fit input is not a tf.data pipeline sharded with shard(hvd.size(), hvd.rank()), so "
    "what a rank trains comes from code the runtime cannot run for the ranks it would stand for"
)
#: Transformations that keep a shard's elements one to one and in order.
_ONE_TO_ONE = frozenset(
    {
        "_MapDataset",
        "_ParallelMapDataset",
        "_PrefetchDataset",
        "CacheDataset",
        "_OptionsDataset",
        "_RepeatDataset",
    }
)
_MARK = "_tiresias_rank_shard"  # set on the datasets made by shard(hvd.size(), hvd.rank())


@dataclass
class _World:
    """This run's ranks and what the script made with Horovod."""

    top: int  # W_max: what hvd.size() says
    real: int  # W
    rank: int
    ops: list[Any] = field(default_factory=list)  # each hvd.DistributedOptimizer's op

    @property
    def factor(self) -> int:
        return self.top // self.real


_world: _World | None = None


def install(rt: Runtime, uncheckpointable: str | None) -> None:
    """Before a Horovod script runs: declare rigid what cannot resize; else make
    ``hvd.size()`` say the largest world (below it) and watch the script's shard."""
    env = rt.env
    patch_on_import({"horovod.torch": lambda _: elastic.declare(rt, TORCH_RIGID)})
    factor = elastic.factor(env)
    if not env.elastic:
        return
    if isinstance(factor, str):
        return elastic.declare(rt, factor)
    if uncheckpointable is not None:
        return elastic.declare(rt, "it cannot be checkpointed, so it restarts from step 0")
    if factor != 1 and not _trained_at_top(rt):
        return elastic.declare(
            rt,
            f"its first run is at {env.num_workers} of {env.max_workers} workers: hvd.size() "
            f"must say {env.max_workers} from its start, and only its fit shows whether its "
            "data can be dealt to fewer ranks",
        )
    global _world
    _world = _World(factor * env.num_workers, env.num_workers, int(os.environ["HOROVOD_RANK"]))
    patch_on_import({"horovod.tensorflow": _patch, "horovod.tensorflow.keras": _patch})


def _trained_at_top(rt: Runtime) -> bool:
    """Whether the checkpoint to resume from was trained with the largest world's
    arithmetic (its fit calls' records are this module's)."""
    complete = rt.store.complete()
    records = complete[0].manifest.position.get("batches", {}) if complete else {}
    return any(r.get("horovod") for r in records.values())


def _patch(module: ModuleType) -> None:
    """``hvd.size()`` says the largest world, ``Dataset.shard(hvd.size(), hvd.rank())``
    takes the shards this rank stands for, each ``DistributedOptimizer``'s op is kept."""
    import tensorflow as tf

    world = _world
    assert world is not None
    if world.factor != 1:
        module.size = lambda: world.top  # type: ignore[attr-defined]
    shard = tf.data.Dataset.shard
    if not getattr(shard, _MARK, False):

        def rank_shard(self: Any, num_shards: Any, index: Any, name: str | None = None) -> Any:
            if _is(num_shards, world.top) and _is(index, world.rank):
                made = shard(self, world.real, world.rank, name=name)
                setattr(made, _MARK, True)
                return made
            return shard(self, num_shards, index, name=name)

        setattr(rank_shard, _MARK, True)
        tf.data.Dataset.shard = rank_shard  # type: ignore[method-assign]
    make = getattr(module, "DistributedOptimizer", None)
    if module.__name__ == "horovod.tensorflow.keras" and not getattr(make, _MARK, False):
        assert make is not None
        default = inspect.signature(make).parameters["op"].default

        def distributed_optimizer(*args: Any, **kwargs: Any) -> Any:
            bound = inspect.signature(make).bind(*args, **kwargs).arguments
            world.ops.append(bound.get("op", default))
            return make(*args, **kwargs)

        setattr(distributed_optimizer, _MARK, True)
        module.DistributedOptimizer = distributed_optimizer  # type: ignore[attr-defined]


def _is(value: Any, number: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value == number


def keep_batch(rt: Runtime, arg: Callable[[str], Any], record: Any) -> Batching:
    """A Horovod ``fit`` call's overrides (what ``keras_elastic.keep_global_batch`` is for
    the other gangs): its input batched at k·b, or rigid, said once."""
    from tiresias_launch import keras_elastic

    world = _world
    if world is None or rt.resizable is False:
        return keras_elastic.Batching()
    found = _input(arg("x"), world)
    validation = arg("validation_data")
    checked = _input(validation, world) if _sharded(validation) else None
    why = found if isinstance(found, str) else checked if isinstance(checked, str) else None
    if why is None:
        why = _why_not_averaged(world)
    if why is not None and world.factor != 1:  # hvd.size() already said the largest world
        raise SystemExit(
            f"tiresias: this run below its largest world cannot go on: its checkpointed run "
            f"resized, but now {why}"
        )
    elastic.declare(rt, why)
    if why is not None:
        return keras_elastic.Batching()
    assert isinstance(found, keras_elastic._Input)
    batch = found.batch * world.factor
    elastic.resumed(
        rt,
        record.get("world") if record else None,
        f"each rank takes the shards of {world.factor} of its {world.top} ranks ({batch} "
        f"samples a step, the script's {found.batch} per rank) and hvd.size() says "
        f"{world.top}",
    )
    overrides = found.rebatch(batch) if world.factor != 1 else {}
    if isinstance(checked, keras_elastic._Input) and world.factor != 1:
        overrides["validation_data"] = checked.rebatch(checked.batch * world.factor)["x"]
    record = {"batch": found.batch, "world": world.real, "horovod": True}
    return keras_elastic.Batching(overrides, record, found.unbatched)


def _why_not_averaged(world: _World) -> str | None:
    import horovod.tensorflow as hvd

    if not world.ops:
        return "its fit optimizer is not a hvd.DistributedOptimizer"
    if any(op != hvd.Average for op in world.ops):
        return (
            "its hvd.DistributedOptimizer does not average the ranks' gradients (its op is "
            "not hvd.Average), so its gradient depends on the world"
        )
    return None


def _chain(dataset: Any) -> list[Any]:
    """A dataset and the ones it reads, through single-input transformations."""
    chain = []
    while dataset is not None:
        chain.append(dataset)
        dataset = getattr(dataset, "_input_dataset", None)
    return chain


def _sharded(dataset: Any) -> bool:
    return any(getattr(d, _MARK, False) for d in _chain(dataset))


def _input(x: Any, world: _World) -> Any:
    """``x`` batched and redone at another batch (``keras_elastic._Input``; its ``unbatched``
    is the pipeline before the shard, the same at every world), or why it cannot be."""
    import tensorflow as tf

    from tiresias_launch import keras_elastic

    if not isinstance(x, tf.data.Dataset) or not _sharded(x):
        return NOT_SHARDED
    found = keras_elastic.batched(x)
    if isinstance(found, str):
        return found
    for d in _chain(found.unbatched):
        if getattr(d, _MARK, False):
            before = d._input_dataset
            count = int(before.cardinality())
            if count != tf.data.INFINITE_CARDINALITY and (count < 0 or count % world.top):
                return (
                    f"the tf.data pipeline it shards has {_elements(count)}, not a multiple of "
                    f"{world.top}, so its ranks' shards may differ in size"
                )
            return keras_elastic._Input(found.batch, found.rebatch, before)
        if why := _why_not_one_to_one(d):
            return why
    return NOT_SHARDED


def _elements(count: int) -> str:
    return f"{count} elements" if count >= 0 else "an unknown number of elements"


def _why_not_one_to_one(d: Any) -> str | None:
    """Why transformation ``d`` (between the shard and the batch) does not keep a rank's
    elements one to one and in order."""
    name = type(d).__name__
    between = "between its shard(hvd.size(), hvd.rank()) and its batch"
    if name not in _ONE_TO_ONE:
        return (
            f"its tf.data input has a {name.strip('_').removesuffix('Dataset').lower()} "
            f"{between}, so at another world a "
            "rank's samples would be drawn or ordered otherwise"
        )
    if name == "_ParallelMapDataset" and str(d._deterministic) == "false":
        return f"its tf.data input has a non-deterministic map {between}"
    function = getattr(d, "_map_func", None)
    ops = function.function.graph.get_operations() if function is not None else []
    if any("Random" in op.type and not op.type.startswith("Stateless") for op in ops):
        return (
            f"its tf.data input has a map drawing random numbers {between}, one per "
            "element in a rank's order"
        )
    return None
