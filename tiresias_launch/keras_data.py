"""The input of a preemptible Keras ``fit``, positioned at (epoch, batch) on resume.

Each kind of input gets a :class:`Source` that rewrites ``fit``'s data arguments for one
phase of a resumed call (the rest of a partly done epoch, then whole epochs):

- arrays: the validation split is taken first, the way ``fit`` takes it; the batches are then
  fed by a ``tf.data`` pipeline that owns the per-epoch permutation (stateless, from a seed
  kept in the checkpoint), so a resumed epoch sees the same samples in the same order;
- ``tf.data``: an infinite dataset is skipped by the batches consumed; a finite one is
  skipped within the epoch, after the epochs already run were replayed (their shuffle seeds
  drawn, a cache filled by the first: :mod:`tiresias_launch.tf_data`);
- Python generators: the batches consumed are drawn and dropped;
- ``PyDataset`` / ``Sequence``: batch order owned like arrays, ``on_epoch_end`` replayed;
- anything else cannot be positioned: the interrupted epoch restarts (logged).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from tiresias_launch import tf_data

if TYPE_CHECKING:
    from tiresias_launch.env import LaunchEnv
    from tiresias_launch.keras_flavours import Flavour

log = logging.getLogger(__name__)


class Source:
    """How one ``fit`` call's input is positioned; the base class cannot position it."""

    #: Batches per epoch, when known (for the progress bar and stream positions).
    steps: int | None = None
    resumes_mid_epoch = True
    #: One iterator across epochs (Keras does not restart it every epoch).
    stream = False
    #: Why this input cannot be resumed exactly ('' when it can), and why not when resumed
    #: inside an epoch.
    why_inexact = ""
    why_inexact_mid_epoch = ""

    def phase(self, epoch: int, skip: int, consumed: int) -> dict[str, Any]:
        """``fit`` arguments for a phase starting at batch ``skip`` of ``epoch``, after
        ``consumed`` batches of this call (a stream's position)."""
        return {}

    def replay_epochs(self, epochs: int, whole_call: bool = False) -> str:
        """Bring per-epoch state to where ``epochs`` whole epochs of this call left it (and
        the call's end, when it ``whole_call`` finished); why that could not be done exactly
        ('' when it was)."""
        return ""

    def resumes(self, started: float) -> None:
        """This call resumes from a checkpoint, in a process started at ``started``."""

    def call_record(self) -> dict[str, Any]:
        """What a finished call's record keeps to replay this input (``replay_call``)."""
        return {}

    def replay_call(self, record: dict[str, Any]) -> None:
        """Leave this input where the finished call of ``record`` left it."""

    def epoch_begins(self, epoch: int) -> None:
        """``fit`` starts ``epoch`` (called from ``on_epoch_begin``)."""

    def position(self) -> dict[str, Any]:
        """Entries the checkpoint must keep to position this input again."""
        return {}

    def sample(self) -> Any | None:
        """One batch (or its specs) to build an unbuilt model from, without consuming it."""
        return None


class Opaque(Source):
    resumes_mid_epoch = False

    def __init__(self, why: str, steps: int | None) -> None:
        self.why_inexact = why
        self.steps = steps


def source_for(
    arguments: dict[str, Any],
    defaults: dict[str, Any],
    flavour: Flavour,
    position: dict,
    replicas: int,
    call: int,
) -> Source:
    """The source for ``fit``'s input; ``position`` is the checkpoint's when resuming this
    call (``call``: its number in the process), else empty."""

    def arg(name: str) -> Any:
        return arguments.get(name, defaults.get(name))

    x, per_epoch, shuffle = arg("x"), arg("steps_per_epoch"), arg("shuffle")
    if isinstance(x, tf.data.Dataset):
        # a resumed stream continues one iterator: in one fit where Keras can start an epoch
        # at a batch, else through a generator (not under a multi-replica strategy)
        one_fit = flavour.starts_mid_epoch
        return DatasetSource(x, per_epoch, flavour, one_fit, replicas == 1)
    if isinstance(x, flavour.load(flavour.dataset_base)):
        if _batches(x) is None:
            return Opaque("an infinite PyDataset cannot be positioned", per_epoch)
        return SequenceSource(
            x, flavour, bool(shuffle), position.get("shuffle_seed", fresh_seed(call))
        )
    if _is_arrays(x):
        if per_epoch is not None or shuffle not in (True, False):
            why = "arrays with steps_per_epoch" if per_epoch else f"shuffle={shuffle!r}"
            return Opaque(f"{why} cannot be positioned mid-epoch", per_epoch)
        return ArraySource(arg, flavour, position.get("shuffle_seed", fresh_seed(call)))
    if inspect.isgenerator(x):
        return GeneratorSource(x, per_epoch)
    return Opaque(f"{type(x).__name__} input cannot be positioned mid-epoch", per_epoch)


def _batches(dataset: Any) -> int | None:
    """Batches of a PyDataset (``num_batches``, None when infinite) or Sequence (``len``)."""
    try:
        return dataset.num_batches if hasattr(type(dataset), "num_batches") else len(dataset)
    except (NotImplementedError, TypeError):
        return None


def _is_arrays(x: Any) -> bool:
    leaves = tf.nest.flatten(x)
    return bool(leaves) and all(isinstance(v, (np.ndarray, tf.Tensor)) for v in leaves)


def fresh_seed(call: int) -> int:
    """A shuffle seed that follows the script's NumPy seeding (read, not drawn, so the
    script's own random numbers are unchanged); random when the script seeds nothing."""
    state = np.random.get_state()[1].tobytes() + call.to_bytes(4, "little")
    return int.from_bytes(hashlib.sha256(state).digest()[:4], "little")


def _permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


class ArraySource(Source):
    """NumPy arrays / tensors (nested in tuples, lists or dicts) with ``batch_size``."""

    def __init__(self, arg: Any, flavour: Flavour, seed: int) -> None:
        data = (arg("x"), arg("y"), arg("sample_weight"))
        self.fixed: dict[str, Any] = {}
        if arg("validation_split") and arg("validation_data") is None:
            data, validation = flavour.load(flavour.split)(
                data, validation_split=arg("validation_split")
            )
            self.fixed = {"validation_data": validation, "validation_split": 0.0}
        floatx = flavour.load(flavour.floatx)()
        self.tensors = tuple(_to_tensors(d, floatx) for d in data if d is not None)
        self.n = int(tf.nest.flatten(self.tensors)[0].shape[0])
        self.batch_size = arg("batch_size") or 32
        self.steps = math.ceil(self.n / self.batch_size)
        self.shuffle = bool(arg("shuffle"))
        self.seed = seed

    def position(self) -> dict[str, Any]:
        return {"shuffle_seed": self.seed}

    def order(self, epoch: tf.Tensor) -> tf.Tensor:
        def permutation(e: np.int64) -> np.ndarray:
            return _permutation(self.seed, int(e), self.n)

        if not self.shuffle:
            return tf.range(self.n, dtype=tf.int64)
        order = tf.numpy_function(permutation, [epoch], tf.int64, stateful=False)
        return tf.ensure_shape(order, [self.n])

    def phase(self, epoch: int, skip: int, consumed: int) -> dict[str, Any]:
        def gather(indices: tf.Tensor) -> Any:
            batch = tf.nest.map_structure(lambda t: tf.gather(t, indices), self.tensors)
            return batch[0] if len(batch) == 1 else batch

        # epochs back to back, each batched on its own (its last batch may be short)
        batches = tf.data.Dataset.counter(epoch).flat_map(
            lambda e: tf.data.Dataset.from_tensor_slices(self.order(e)).batch(self.batch_size)
        )
        data = batches.skip(skip).map(gather).prefetch(2)
        return {
            **self.fixed,
            "x": data,
            "y": None,
            "sample_weight": None,
            "batch_size": None,
            "shuffle": False,
            "steps_per_epoch": self.steps - skip,
        }

    def sample(self) -> Any:
        specs = tf.nest.map_structure(
            lambda t: tf.TensorSpec([None, *t.shape[1:]], t.dtype), self.tensors
        )
        return specs[0] if len(specs) == 1 else specs


def _to_tensors(data: Any, floatx: str) -> Any:
    """Tensors of ``data``, floats in Keras's float type (as ``fit`` converts arrays)."""

    def convert(v: Any) -> tf.Tensor:
        t = tf.convert_to_tensor(v)
        return tf.cast(t, floatx) if t.dtype.is_floating and t.dtype != floatx else t

    return tf.nest.map_structure(convert, data)


class DatasetSource(Source):
    """``tf.data``. Keras iterates an infinite dataset once across epochs: a resumed epoch's
    rest and the epochs after it must continue one iterator (a second one would draw new
    shuffle seeds): in one fit (``one_fit``, tf_keras) or fed through a generator over it
    (``bridge``; not under a multi-replica strategy, whose dataset rebatching needs a real
    pipeline: there the dataset is skipped and reshuffles from new seeds). A finite dataset
    is iterated every epoch: the epoch is skipped into after advancing its shuffle seeds by
    the epochs run."""

    def __init__(
        self,
        dataset: tf.data.Dataset,
        per_epoch: int | None,
        flavour: Flavour,
        one_fit: bool,
        bridge: bool,
    ) -> None:
        self.dataset = dataset
        self.per_epoch = per_epoch
        cardinality = int(dataset.cardinality())
        self.infinite = self.stream = cardinality == tf.data.INFINITE_CARDINALITY
        self.steps = per_epoch or (cardinality if cardinality >= 0 else None)
        # an unknown batch count (list_files, TFRecords, filter) is iterated otherwise
        unknown = cardinality == tf.data.UNKNOWN_CARDINALITY and not per_epoch
        iterators = flavour.unknown_iterators if unknown else flavour.dataset_iterators
        self.iterators = iterators
        self.bridge = bridge
        self.iterator: Iterator[Any] | None = None  # the bridge's
        self.pipeline = tf_data.inspect(dataset)
        reshuffles = self.pipeline.reshuffles
        if reshuffles and not self.infinite and per_epoch:
            self.why_inexact = "a finite reshuffling dataset with steps_per_epoch"
        elif reshuffles and self.infinite and not (one_fit or bridge):
            self.why_inexact = "an infinite reshuffling dataset under a multi-replica strategy"
        # a second fit (the epochs after a partly done one) makes its own unused iterator
        self.why_inexact_mid_epoch = (
            "a finite reshuffling dataset under tf_keras"
            if reshuffles and not self.infinite and iterators[0]
            else ""
        )

    def phase(self, epoch: int, skip: int, consumed: int) -> dict[str, Any]:
        overrides: dict[str, Any] = {}
        if self.per_epoch:
            overrides["steps_per_epoch"] = self.per_epoch - skip
        if self.infinite and self.bridge and (skip or self.iterator is not None):
            if self.iterator is None:
                self.iterator = iter(self.dataset.skip(consumed))
            rest = _take(self.iterator, self.per_epoch - skip) if skip else _iterate(self.iterator)
            return {**overrides, "x": rest}
        drop = consumed if self.infinite else skip
        return {**overrides, "x": self.dataset.skip(drop) if drop else self.dataset}

    def resumes(self, started: float) -> None:
        for lock in tf_data.remove_stale_cache_locks(self.pipeline.cache_files, started):
            log.warning("tiresias: removed %s, left by the stopped run's cache", lock)

    def replay_epochs(self, epochs: int, whole_call: bool = False) -> str:
        made, fill_at = self.iterators[1] * epochs, self.iterators[0]
        made += self.iterators[0] if whole_call else 0  # the resumed call makes its own
        if self.infinite or tf_data.replay(self.dataset, self.pipeline, made, fill_at):
            return ""
        return "a cached dataset reshuffling after its cache, under tf_keras,"

    def sample(self) -> Any:
        return self.dataset.element_spec


def _iterate(stream: Iterator[Any]) -> Iterator[Any]:
    yield from stream


class GeneratorSource(Source):
    """A Python generator: one stream across epochs (Keras needs ``steps_per_epoch``), and
    across the ``fit`` calls given the same generator: a finished call is replayed by
    drawing what it drew (Keras draws ahead of the batches it trains, a varying number)."""

    def __init__(self, generator: Iterator[Any], per_epoch: int | None) -> None:
        self.drawn = 0
        self.generator = self._counted(generator)
        self.steps = per_epoch
        self.drained = False

    def _counted(self, generator: Iterator[Any]) -> Iterator[Any]:
        for item in generator:
            self.drawn += 1
            yield item

    def call_record(self) -> dict[str, Any]:
        return {"drawn": self.drawn}

    def replay_call(self, record: dict[str, Any]) -> None:
        for _ in range(record.get("drawn", 0)):
            next(self.generator)

    def phase(self, epoch: int, skip: int, consumed: int) -> dict[str, Any]:
        if not self.drained:
            self.drained = True
            for _ in range(consumed):
                next(self.generator)
        if not skip or not self.steps:
            return {"x": self.generator}
        # exactly the epoch's rest, so Keras's prefetching cannot take the next epoch's
        return {"x": _take(self.generator, self.steps - skip), "steps_per_epoch": self.steps - skip}

    def sample(self) -> Any:
        first = next(self.generator)
        self.generator = _chain(first, self.generator)
        return first


def _take(generator: Iterator[Any], n: int) -> Iterator[Any]:
    for _ in range(n):
        yield next(generator)


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


class SequenceSource(Source):
    """``keras.utils.PyDataset`` (tf_keras: ``Sequence``): indexed batches."""

    def __init__(self, inner: Any, flavour: Flavour, shuffle: bool, seed: int) -> None:
        self.inner = inner
        self.view = _view_class(flavour.load(flavour.dataset_base))
        self.steps = _batches(inner)
        self.shuffle = shuffle
        self.seed = seed

    def position(self) -> dict[str, Any]:
        return {"shuffle_seed": self.seed}

    def order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.steps)
        return _permutation(self.seed, epoch, self.steps)

    def phase(self, epoch: int, skip: int, consumed: int) -> dict[str, Any]:
        self.current = self.view(self.inner, self, epoch, skip)
        return {"x": self.current, "shuffle": False}

    def epoch_begins(self, epoch: int) -> None:
        self.current.set_epoch(epoch)

    def replay_epochs(self, epochs: int, whole_call: bool = False) -> str:
        for _ in range(epochs):
            self.inner.on_epoch_end()
        return ""

    def sample(self) -> Any:
        return self.inner[0]


def _view_class(base: type) -> type:
    class View(base):  # type: ignore[misc, valid-type]
        """The user's dataset in this epoch's order, from batch ``skip`` of the first."""

        def __init__(self, inner: Any, source: SequenceSource, epoch: int, skip: int) -> None:
            options = ("workers", "use_multiprocessing", "max_queue_size")
            super().__init__(**{k: getattr(inner, k) for k in options if hasattr(inner, k)})
            self.inner, self.source = inner, source
            self.first_epoch, self.first_skip = epoch, skip
            self.set_epoch(epoch)

        def set_epoch(self, epoch: int) -> None:
            """Told by the epoch callback: Keras also calls ``on_epoch_end`` when it peeks."""
            self.skip = self.first_skip if epoch == self.first_epoch else 0
            self.order = self.source.order(epoch)

        def __len__(self) -> int:
            return self.source.steps - self.first_skip

        def __getitem__(self, index: int) -> Any:
            return self.inner[int(self.order[index + self.skip])]

        def on_epoch_begin(self) -> None:
            getattr(self.inner, "on_epoch_begin", lambda: None)()

        def on_epoch_end(self) -> None:
            self.inner.on_epoch_end()

    return View


def metric_variables(model: Any) -> list[Any]:
    return [v for m in model.metrics for v in m.variables]


def saved_metrics(model: Any, env: LaunchEnv) -> dict[str, Any]:
    """The metric totals a checkpoint keeps (every rank calls it at a save): the chief's, or
    under Horovod every rank's (each rank logs its own), so that a resume gives each rank its
    own (``restored_metrics``)."""
    values = [v.numpy() for v in metric_variables(model)]
    if env.mode != "horovod":
        return {"metrics": values}
    import horovod.tensorflow as hvd

    gathered = [
        hvd.allgather(tf.constant(v)[None], name=f"tiresias.metrics.{i}").numpy()
        for i, v in enumerate(values)
    ]
    return {"rank_metrics": [[g[r] for g in gathered] for r in range(env.num_workers)]}


def restored_metrics(state: dict[str, Any], env: LaunchEnv) -> list[Any]:
    """This rank's metric totals from a checkpoint's (``saved_metrics``). At another world a
    rank stands for other ranks of the largest world (``tiresias_launch.horovod_elastic``):
    as Keras totals count samples, it takes the sum of the saved ranks it stands for (world
    W0 >= W: those ``r mod W``), or its share of the one that stood for it (W0 < W: W0/W of
    rank ``r mod W0``'s); their means are then those of the ranks it stands for."""
    ranks = state.get("rank_metrics")
    if ranks is None:
        return state.get("metrics", [])
    import horovod.tensorflow as hvd

    n, world, rank = len(ranks), env.num_workers, hvd.rank()
    mine = [s for s in range(n) if s % world == rank] if n >= world else [rank % n]
    first = ranks[mine[0]]
    return [
        (np.mean([ranks[s][i] for s in mine], axis=0) * n / world).astype(first[i].dtype)
        for i in range(len(first))
    ]
