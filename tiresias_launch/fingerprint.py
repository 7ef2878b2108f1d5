"""Cheap fingerprints of what a ``fit`` or a ``State`` loop trains on, so a resume can say
when its inputs are not the checkpointed run's (an unseeded shuffle before ``fit``, a data
file that changed): the resume is then not exact, and the job says so once.

- arrays and tensors: shape, dtype and a hash of up to ``ROWS`` rows spread over them;
- ``tf.data``: ``element_spec``, cardinality and a hash of the pipeline's graph without its
  names (its in-memory data, file names, seeds and transformations). The first batch is not
  drawn: that would start an iterator (shuffle buffers filled, seeds drawn, a cache begun).
  A shuffle without any seed (seed 0 in the graph) shuffles differently in every process:
  a resume then says so even though the fingerprint is the same;
- a ``tf.data`` iterator given to a ``State``: its dataset's, without the unseeded flag (the
  checkpoint carries the iterator's shuffle state, seeds included);
- ``PyDataset``/``Sequence``, a PyTorch loader: the length and a hash of batch 0 (a loader's:
  of samples spread over its dataset, read by index, so no worker starts and no RNG draws).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tiresias_launch import tf_data

if TYPE_CHECKING:
    from tiresias_launch.runtime import Runtime

#: Rows hashed per array: enough to see a permutation, cheap for any size.
ROWS = 64
SEED_ADVICE = (
    "exactness needs deterministic data preparation: seed what prepares the data "
    "(keras.utils.set_random_seed(…), np.random.seed(…), tf.random.set_seed(…), "
    "torch.manual_seed(…)) before it runs"
)


def _update(h: Any, value: Any) -> None:
    """Hash ``value``: arrays and tensors by dtype, shape and bytes; containers by items."""
    if hasattr(value, "detach"):  # torch
        value = value.detach().cpu()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    if isinstance(value, Mapping):
        for k in sorted(value, key=str):
            h.update(str(k).encode())
            _update(h, value[k])
    elif isinstance(value, (list, tuple)):
        h.update(f"[{len(value)}".encode())
        for v in value:
            _update(h, v)
    elif isinstance(value, (np.ndarray, np.generic)):
        a = np.ascontiguousarray(value)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    elif isinstance(value, (int, float, str, bytes, bool)) or value is None:
        h.update(repr(value).encode())
    else:  # an object without a stable value: its type only
        h.update(type(value).__qualname__.encode())


def digest(value: Any) -> str:
    h = hashlib.blake2b(digest_size=12)
    _update(h, value)
    return h.hexdigest()


def _spread(n: int) -> list[int]:
    return sorted({int(i) for i in np.linspace(0, n - 1, min(n, ROWS))}) if n else []


def arrays(leaves: list[Any]) -> dict[str, Any]:
    """Arrays or tensors (rows on the first axis)."""
    out = []
    for leaf in leaves:
        n = int(leaf.shape[0]) if len(leaf.shape) else 0
        rows = [leaf[i] for i in _spread(n)] if n else [leaf]
        out.append([list(map(int, leaf.shape)), str(leaf.dtype), digest(rows)])
    return {"arrays": out}


def dataset(data: Any) -> dict[str, Any]:
    """A ``tf.data`` dataset, from its graph (no element is drawn)."""
    import tensorflow as tf

    graph = tf_data.graph_of(data)
    h = hashlib.blake2b(digest_size=12)
    for node in tf_data.nodes_of(graph):
        h.update(node.op.encode())
        for key in sorted(node.attr):
            value = node.attr[key]
            # names, ids and resource handles (a shuffle's seed generator) differ between
            # builds of the same pipeline
            if key in ("metadata", "_class") or value.WhichOneof("value") == "func":
                continue
            kind = value.WhichOneof("value")
            if kind == "tensor" and value.tensor.dtype == tf.resource.as_datatype_enum:
                continue
            h.update(key.encode() + value.SerializeToString(deterministic=True))
    return {
        "spec": repr(data.element_spec),
        "cardinality": int(data.cardinality()),
        "graph": h.hexdigest(),
        "unseeded": _unseeded(graph),
    }


def _unseeded(graph: Any) -> bool:
    """Whether a shuffle (or ``Dataset.random``) draws its seeds from the OS: no seed was
    given and no global seed was set, so its graph says seed 0, seed2 0. Its order is then
    another in every process, and the same fingerprint does not mean the same batches."""
    import tensorflow as tf

    for node in graph.node:
        if node.op.startswith(("Shuffle", "RandomDataset")):
            ints = [int(v) for v in tf_data.constant_inputs(graph, node, tf.int64)]
            if len(ints) >= 2 and ints[-2:] == [0, 0]:
                return True
    return False


def indexed(data: Any, length: int) -> dict[str, Any]:
    """Something read by index (a PyDataset, a map-style torch dataset): its first, middle
    and last items."""
    return {
        "length": length,
        "items": digest([data[i] for i in sorted({0, length // 2, length - 1})]),
    }


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [leaf for k in sorted(value, key=str) for leaf in _leaves(value[k])]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value] if value is not None else []


def _iterated_dataset(value: Any) -> Any:
    """The dataset a ``tf.data`` iterator reads, or None (not an iterator, or the name moved:
    then it has no fingerprint)."""
    if not (hasattr(value, "_iterator_resource") and hasattr(value, "element_spec")):
        return None
    from tiresias_launch.compat import TF_ITERATOR_DATASET

    return getattr(value, TF_ITERATOR_DATASET.path, None)


def of_value(value: Any) -> dict[str, Any] | None:
    """The fingerprint of one input, or None when it has none (a generator)."""
    if hasattr(value, "_as_serialized_graph"):  # tf.data
        return dataset(value)
    iterated = _iterated_dataset(value)
    if iterated is not None:
        return {**dataset(iterated), "unseeded": False}
    leaves = _leaves(value)
    if leaves and all(hasattr(v, "shape") and hasattr(v, "dtype") for v in leaves):
        return arrays(leaves)
    if hasattr(value, "batch_sampler") and hasattr(value, "dataset"):  # a torch DataLoader
        data = of_value(value.dataset)
        return {"batches": len(value), **data} if data is not None else None
    if hasattr(value, "__getitem__") and hasattr(value, "__len__"):
        length = len(value)
        return indexed(value, length) if length else None
    return None


def of_state(objects: Mapping[str, Any]) -> dict[str, Any]:
    """Fingerprints of what a ``State`` loop reads: the PyTorch loaders and ``tf.data``
    iterators among its objects; one is ``training``, several go by their State names."""
    fed = {
        name: o
        for name, o in objects.items()
        if hasattr(o, "batch_sampler") or _iterated_dataset(o) is not None
    }
    return of_inputs(**({"training": next(iter(fed.values()))} if len(fed) == 1 else fed))


def of_inputs(**inputs: Any) -> dict[str, Any]:
    """Fingerprints of named inputs (``training``, ``validation``); those without one are
    left out. Never fails the training: an input that cannot be read is left out too."""
    out = {}
    for name, value in inputs.items():
        try:
            found = of_value(value)
        except Exception:  # a user's dataset whose items fail to load here fails in fit
            found = None
        if found is not None:
            out[name] = found
    return out


def describe_change(saved: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """One line saying which inputs (``training``, ``validation``, …) differ from those the
    checkpoint recorded, or None. Inputs the checkpoint did not record are not compared."""
    differ = [k for k, v in now.items() if k in saved and saved[k] != v]
    unseeded = [k for k, v in now.items() if k in saved and v.get("unseeded")]
    if differ:
        said = f"the {' and '.join(differ)} inputs differ from the checkpointed run's"
    elif unseeded:
        said = f"the {' and '.join(unseeded)} inputs shuffle without a seed (tf.data)"
    else:
        return None
    return f"{said}, so this resume is not exact: {SEED_ADVICE}"


def inputs_changed(rt: Runtime, saved: dict[str, Any], now: dict[str, Any]) -> None:
    """On a resume: say once, in the log and to the job's history, when the inputs are not
    those the checkpoint recorded."""
    line = describe_change(saved, now)
    if line is not None and rt.env.is_chief:
        rt.say(line)
        rt.reporter.note(notice=line)
