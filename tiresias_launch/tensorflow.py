"""TensorFlow adapter: ``strategy()``, and the checkpointer behind ``tiresias.State`` (see
``tiresias_launch.state``) and the Keras ``fit`` hook.

A TensorFlow State is a ``tf.train.Checkpoint`` of the given trackables plus the step (the
data position for step-indexed input; pass a ``tf.data`` iterator or ``tf.random.Generator``
as a trackable to checkpoint those too) and the Python/NumPy global RNG states.
"""

from __future__ import annotations

import pickle
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tiresias_launch import elastic
from tiresias_launch.checkpoint import Checkpoint, describe_variables
from tiresias_launch.runtime import Agreement, ReduceSum, Runtime, get_runtime

_strategy: tf.distribute.Strategy | None = None
#: Why an elastic job's TensorFlow custom loop runs rigid.
STATE_RIGID = (
    "a TensorFlow custom loop makes its own batches from its world, which the runtime "
    "cannot deal again at another world"
)


def strategy() -> tf.distribute.Strategy:
    """The strategy this process's gang shape calls for (created once, then cached):
    ParameterServerStrategy in ``ps`` mode, MultiWorkerMirroredStrategy in ``allreduce``
    mode, the default strategy otherwise (``single`` and Horovod)."""
    global _strategy
    if _strategy is None:
        mode = get_runtime().env.mode
        if mode == "ps":
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
            _strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
        elif mode == "allreduce":
            _strategy = tf.distribute.MultiWorkerMirroredStrategy()
        else:
            _strategy = tf.distribute.get_strategy()
    return _strategy


def _strategy_reduce_sum(s: tf.distribute.Strategy) -> ReduceSum:
    @tf.function
    def reduce(values: tf.Tensor) -> tf.Tensor:
        def replica(x: tf.Tensor) -> tf.Tensor:
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(x))

        return s.run(replica, args=(values,))

    def reduce_sum(values: Sequence[float]) -> Sequence[float]:
        out = s.experimental_local_results(reduce(tf.constant(values, tf.float64)))[0]
        return out.numpy().tolist()

    return reduce_sum


def _horovod_reduce_sum() -> ReduceSum:
    import horovod.tensorflow as hvd

    def reduce_sum(values: Sequence[float]) -> Sequence[float]:
        t = tf.constant(values, tf.float64)
        return hvd.allreduce(t, op=hvd.Sum, name="tiresias_agree").numpy().tolist()

    return reduce_sum


def reduce_sum_for(rt: Runtime, s: tf.distribute.Strategy | None = None) -> ReduceSum | None:
    """The cheapest collective of the gang's framework, or None when one process decides."""
    if not rt.env.multi_process:
        return None
    if rt.env.mode == "horovod":
        return _horovod_reduce_sum()
    if not isinstance(s, tf.distribute.MultiWorkerMirroredStrategy):
        s = strategy()  # e.g. an optimizer made outside the strategy scope
    return _strategy_reduce_sum(s)


def join_gang(rt: Runtime, s: tf.distribute.Strategy | None = None) -> None:
    """Make stop decisions collective in all-reduce gangs (idempotent); ``s`` is the
    script's strategy when it built its own (Keras ``fit`` scripts)."""
    rt.install_signal_handlers()
    reduce_sum = reduce_sum_for(rt, s)
    if reduce_sum is not None and rt.agreement is None:
        rt.agreement = Agreement(reduce_sum, rt.env.num_workers)
        rt.barrier = lambda: reduce_sum([0.0])


def tensor_facts(variables: Sequence[tf.Variable], num_ps: int) -> dict[str, Any]:
    """``tensor_bytes`` of trainable variables, and in PS mode the measured skew S_J (share
    of bytes on the busiest parameter server, from where variables actually live)."""
    sizes = [int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in variables]
    facts: dict[str, Any] = {"tensor_bytes": sizes}
    if num_ps and sum(sizes):
        per_ps: dict[str, int] = {}
        for v, size in zip(variables, sizes, strict=True):
            device = _device(v)
            per_ps[device] = per_ps.get(device, 0) + size
        facts["skew"] = max(per_ps.values()) / sum(sizes)
    return facts


def _device(v: Any) -> str:
    """Placement of a tf.Variable or a Keras 3 variable (which wraps one in ``.value``)."""
    return getattr(v, "device", None) or getattr(v.value, "device", "")


def _model_variables(trackables: dict[str, Any]) -> list[tf.Variable]:
    """Variables that define "the model" for the fingerprint (not optimizer slots)."""
    out = []
    for t in trackables.values():
        if _is_optimizer(t):
            continue
        variables = getattr(t, "variables", None)
        if variables is not None and not callable(variables):
            out.extend(variables)
    return out


def _is_optimizer(t: object) -> bool:
    return hasattr(t, "apply_gradients")


def _build_optimizers(trackables: dict[str, Any]) -> None:
    """Create optimizer slots now so a restore fills them instead of deferring."""
    trainable = [
        v
        for t in trackables.values()
        if not _is_optimizer(t)
        for v in getattr(t, "trainable_variables", [])
    ]
    for t in trackables.values():
        if _is_optimizer(t) and hasattr(t, "build") and not getattr(t, "built", True):
            # slots must live where the strategy the optimizer was made under puts them
            with (_owner(t) or tf.distribute.get_strategy()).scope():
                t.build(trainable)


def _owner(optimizer: Any) -> tf.distribute.Strategy | None:
    """The strategy a Keras optimizer (Keras 3 or tf_keras) was created under."""
    return getattr(optimizer, "_distribution_strategy", None)


#: Python state saved beside the tensors: (get it for a save, give it back on restore).
ExtraState = tuple[Callable[[], Any], Callable[[Any], None]]


class Checkpointer:
    """A ``tf.train.Checkpoint`` of some trackables plus the global RNG states, saved the way
    the gang shape needs (shared by ``State`` and the Keras ``fit`` hook); ``extra`` adds
    picklable Python state (the Keras hook's callback state)."""

    accumulation = None  # every step is one step (gradient accumulation: PyTorch only)

    def __init__(self, trackables: dict[str, Any], extra: ExtraState | None = None) -> None:
        variables = _model_variables(trackables)
        if not variables:
            raise ValueError(
                "tiresias found no model variables: build the model (call it once or "
                "model.build(shape)) before training starts"
            )
        _build_optimizers(trackables)
        # the script's own strategy (it may not have used tiresias.strategy())
        self.strategy = next(
            (_owner(t) for t in trackables.values() if _is_optimizer(t) and _owner(t)), None
        )
        self.described = describe_variables(variables)
        self.trainable = [v for v in variables if v.trainable]
        self._checkpoint = tf.train.Checkpoint(**trackables)
        self._extra = extra

    def restore(self, rt: Runtime) -> Checkpoint | None:
        return rt.restore(self.described, self._read)

    def join(self, rt: Runtime) -> None:
        join_gang(rt, self.strategy)
        elastic.declare(rt, STATE_RIGID)

    def facts(self, num_ps: int) -> dict[str, Any]:
        return tensor_facts(self.trainable, num_ps)

    def begin_epoch(self, epoch: int, skip_batches: int) -> None:
        """Nothing to do: TensorFlow input is step-indexed or a checkpointed iterator."""

    def save(
        self,
        rt: Runtime,
        step: int,
        position: dict[str, Any],
        s: tf.distribute.Strategy | None = None,
    ) -> Checkpoint | None:
        """Write a checkpoint of ``step``; only the chief's copy is kept."""
        if not rt.needs_save(step):
            return None
        if rt.env.mode == "ps":  # every scheduled step must have reached the parameter servers
            s = s or self.strategy or strategy()
            tf.distribute.experimental.coordinator.ClusterCoordinator(s).join()
        return rt.save(
            step,
            self.described,
            self._write,
            position,
            every_rank_writes=rt.env.mode == "allreduce",
        )

    def _write(self, directory: Path) -> None:
        self._checkpoint.write(str(directory / "state"))
        with open(directory / "rng.pkl", "wb") as fh:
            pickle.dump({"python": random.getstate(), "numpy": np.random.get_state()}, fh)
        if self._extra is not None:
            with open(directory / "extra.pkl", "wb") as fh:
                pickle.dump(self._extra[0](), fh)

    def _read(self, ckpt: Checkpoint) -> None:
        self._checkpoint.read(str(ckpt.path / "state")).assert_existing_objects_matched()
        with open(ckpt.path / "rng.pkl", "rb") as fh:
            rng = pickle.load(fh)
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        if self._extra is not None and (ckpt.path / "extra.pkl").exists():
            with open(ckpt.path / "extra.pkl", "rb") as fh:
                self._extra[1](pickle.load(fh))
