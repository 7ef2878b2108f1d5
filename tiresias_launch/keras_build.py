"""Building an unbuilt Keras model before ``fit``'s first step, so a checkpoint can be
restored into it (Keras builds it in that step)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import tensorflow as tf

if TYPE_CHECKING:
    from tiresias_launch.keras_data import Source

log = logging.getLogger(__name__)


def build(model: Any, source: Source | None) -> None:
    """Build the model, its optimizer and its compiled metrics from a sample batch, as
    ``fit`` would in its first step, so a checkpoint (metric totals of a partly done epoch
    included) can be restored before training. No-op when they are built or without a
    sample."""
    sample = source.sample() if source else None
    if sample is None:
        return
    if _own_train_step(model):
        _trace_train_step(model, sample)
        return
    if hasattr(model, "_symbolic_build"):  # Keras 3: shapes only, no computation
        model._symbolic_build(data_batch=sample)
        return
    x, y = (
        (sample[0], sample[1]) if isinstance(sample, tuple) and len(sample) > 1 else (sample, None)
    )
    with model.distribute_strategy.scope():
        if not model.built:
            model.build(tf.nest.map_structure(lambda t: tf.TensorShape(t.shape), x))
        compiled = getattr(model, "compiled_metrics", None)
        if y is not None and compiled is not None and not compiled.built:
            y_pred = model(tf.nest.map_structure(_zeros, x), training=False)
            model.compiled_loss.build(y_pred)
            compiled.build(y_pred, tf.nest.map_structure(_zeros, y))


def _own_train_step(model: Any) -> bool:
    """An unbuilt model that unpacks its batches itself (a dict, a bare ``x`` it splits):
    calling it on the whole batch, as the plain builds do, would fail or build it wrongly."""
    unbuilt = not (getattr(model, "built", False) and model.variables)
    return unbuilt and not type(model).train_step.__module__.startswith(("keras.", "tf_keras."))


def _trace_train_step(model: Any, sample: Any) -> None:
    """Build what the first step builds by tracing ``train_step`` as ``fit`` does, without
    running it: its variables are made (and initialised) in the same order, no step is taken.
    A step that cannot be traced (eager-only code) is built by the first batch instead."""
    strategy = model.distribute_strategy
    step = tf.function(lambda batch: strategy.run(model.train_step, args=(batch,)))
    try:
        specs = tf.nest.map_structure(_spec, sample)
        with strategy.scope():
            step.get_concrete_function(specs)
    except Exception as e:  # the user's step: the first real batch reports its own errors
        log.info("tiresias: %s.train_step not traced ahead (%s)", type(model).__name__, e)


def _spec(t: Any) -> tf.TypeSpec:
    """The spec of a sample's tensor (a dataset's are specs; a generator's are values)."""
    return t if isinstance(t, tf.TypeSpec) else tf.type_spec_from_value(tf.convert_to_tensor(t))


def _zeros(t: Any) -> tf.Tensor:
    """A one-sample batch of zeros shaped like the tensor or spec ``t``."""
    return tf.zeros([d or 1 for d in t.shape], tf.as_dtype(t.dtype))
