"""What a ``tf.data`` pipeline carries from one iterator to the next, read from its graph.

A finite dataset is iterated anew every epoch, and some of its transformations make one
epoch depend on the epochs before it:

- a new iterator draws new random seeds: ``shuffle`` with ``reshuffle_each_iteration`` (the
  default), ``Dataset.random`` and ``sample_from_datasets`` with
  ``rerandomize_each_iteration``, also inside ``interleave``/``flat_map`` functions;
- the first complete pass fills what later passes read: ``cache()`` (in memory or in
  files) and ``snapshot``. The cache holds the first epoch's order, so a resumed job must
  fill it with that epoch's order, not the resumed epoch's.

A resume therefore replays the epochs already run: it creates as many iterators, and where
the pipeline fills a cache it iterates the first pass to its end (what the first epoch did).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Transformations whose first complete pass fills what later passes read.
FILLING_OPS = frozenset({"CacheDataset", "CacheDatasetV2", "SnapshotDataset", "SnapshotDatasetV2"})
#: Transformations that draw new seeds per iterator when this attribute is true.
RESEEDING_ATTRS = {
    "Shuffle": "reshuffle_each_iteration",
    "RandomDataset": "rerandomize_each_iteration",
}


@dataclass(frozen=True)
class Pipeline:
    """What iterating a dataset leaves behind for the next iterator."""

    reshuffles: bool  # a new iterator draws new seeds
    fills: bool  # the first complete pass fills a cache or snapshot
    cache_files: tuple[str, ...]  # prefixes of ``cache(filename)``
    #: what the filling pass stores depends on its seeds (a reshuffle upstream of the cache)
    fill_reshuffles: bool = True


def graph_of(dataset: Any) -> Any:
    """A dataset's pipeline as a ``GraphDef`` (nothing is iterated)."""
    from tensorflow.core.framework import graph_pb2

    return graph_pb2.GraphDef.FromString(dataset._as_serialized_graph().numpy())


def nodes_of(graph: Any) -> list[Any]:
    """Every node of a pipeline's graph, those of its functions (``map``, ``interleave``)
    included."""
    return [*graph.node, *(n for f in graph.library.function for n in f.node_def)]


def constant_inputs(graph: Any, node: Any, dtype: Any) -> list[Any]:
    """The values (numpy) of ``node``'s inputs that are constants of ``dtype`` (a
    ``tf.DType``) in the graph's top level, in input order."""
    import tensorflow as tf

    constants = {n.name: n for n in graph.node if n.op == "Const"}
    found = (constants.get(name.split(":")[0]) for name in node.input)
    return [
        tf.make_ndarray(c.attr["value"].tensor)
        for c in found
        if c is not None and c.attr["dtype"].type == dtype.as_datatype_enum
    ]


def _reseeds(node: Any) -> bool:
    return any(node.op.startswith(p) and node.attr[a].b for p, a in RESEEDING_ATTRS.items())


def _upstream_reshuffles(graph: Any, fillers: list[Any]) -> bool:
    """Whether a reshuffle feeds a cache or snapshot (``shuffle().cache()``), so the order it
    stores is the filling pass's; a function (``map``, ``interleave``) upstream counts when
    any function of the pipeline reshuffles, and a filler inside a function always does."""
    if any(n.op in FILLING_OPS for f in graph.library.function for n in f.node_def):
        return True
    by_name = {n.name: n for n in graph.node}
    functions_reshuffle = any(_reseeds(n) for f in graph.library.function for n in f.node_def)
    seen, todo = set(), [name for n in fillers for name in n.input]
    while todo:
        node = by_name.get(todo.pop().lstrip("^").split(":")[0])
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        calls = any(v.WhichOneof("value") == "func" for v in node.attr.values())
        if _reseeds(node) or (calls and functions_reshuffle):
            return True
        todo.extend(node.input)
    return False


def inspect(dataset: Any) -> Pipeline:
    graph = graph_of(dataset)
    nodes = nodes_of(graph)
    fills = any(n.op in FILLING_OPS for n in nodes)
    top_fillers = [n for n in graph.node if n.op in FILLING_OPS]
    return Pipeline(
        any(_reseeds(n) for n in nodes),
        fills,
        _cache_files(graph),
        fills and _upstream_reshuffles(graph, top_fillers),
    )


def _cache_files(graph: Any) -> tuple[str, ...]:
    import tensorflow as tf

    files = []
    for node in graph.node:
        if not node.op.startswith("CacheDataset"):
            continue
        for value in constant_inputs(graph, node, tf.string):
            if value.ndim == 0 and value.item():
                files.append(value.item().decode())
    return tuple(files)


def remove_stale_cache_locks(prefixes: tuple[str, ...], started: float) -> list[Path]:
    """A process stopped while it filled a file cache leaves ``<prefix>_<shard>.lockfile``
    behind, and TensorFlow refuses to use the cache again (``AlreadyExistsError``). On a
    resume the locks older than this process are the stopped run's: remove them (the partly
    written cache is then written again). Returns what was removed."""
    removed = []
    for prefix in prefixes:
        path = Path(prefix)
        for lock in path.parent.glob(f"{path.name}_*.lockfile"):
            try:
                if lock.stat().st_mtime < started:
                    lock.unlink()
                    removed.append(lock)
            except OSError:
                continue
    return removed


def replay(dataset: Any, pipeline: Pipeline, made: int, fill_at: int) -> bool:
    """Bring ``dataset`` to where an uninterrupted run left it: make the ``made`` iterators
    it made, iterating the one at ``fill_at`` to its end where the pipeline fills a cache
    (the pass that filled it then gets the seeds it had; later passes read the cache, so
    making their iterators is enough). A cache that stores what no reshuffle reorders
    (``cache().shuffle()``) is filled by any of them. False when that took one iterator
    more than the run made (seeds drawn after the cache are then one ahead)."""
    if not (pipeline.reshuffles or pipeline.fills) or not made:
        return True
    fill_at = fill_at if pipeline.fills else -1
    if not pipeline.fill_reshuffles:
        fill_at = min(fill_at, made - 1)
    for i in range(max(made, fill_at + 1)):
        iterator = iter(dataset)
        if i == fill_at:
            for _ in iterator:
                pass
    return fill_at < made or not pipeline.reshuffles


def replay_validation(data: Any, freq: Any, epochs: range, iterators: tuple[int, int]) -> bool:
    """Replay the validation passes of ``epochs`` on a ``validation_data`` dataset (Keras
    makes ``iterators[0]`` iterators per pass and validates on the one at ``iterators[1]``),
    so a reshuffling or cached validation set is in the state the run left it in."""
    import tensorflow as tf

    if not isinstance(data, tf.data.Dataset):
        return True
    passes = sum(
        1 for e in epochs if (e + 1 in freq if isinstance(freq, list) else (e + 1) % freq == 0)
    )
    pipeline = inspect(data)
    return replay(data, pipeline, iterators[0] * passes, iterators[1])
