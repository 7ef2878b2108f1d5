"""What the training scripts share: flags, step-seeded synthetic data, optimizer and loss.

Data for step ``s`` is drawn with TensorFlow's stateless RNG from the seed pair
``(seed + s, shard)``, so a job resumed from a checkpoint at step ``s`` sees exactly the batches
an uninterrupted run would have seen, and every Horovod rank (``shard``) gets its own batches.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

import models
from models import flags


def arg_parser(description: str | None) -> argparse.ArgumentParser:
    """The common flags, with the TensorFlow models to choose from."""
    return flags.arg_parser(description, models.NAMES)


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Parse, defaulting ``--image-size`` to the model's smallest size (cheap on CPU)."""
    args = parser.parse_args(argv)
    if args.image_size is None:
        args.image_size = models.spec(args.model).min_size
    return args


def synthetic_batch(
    step: int | tf.Tensor,
    *,
    seed: int,
    batch_size: int,
    image_size: int,
    num_classes: int,
    shard: int = 0,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Images and labels for ``step``: a pure function of (seed + step, shard)."""
    key = tf.stack([tf.cast(seed + step, tf.int64), tf.constant(shard, tf.int64)])
    images = tf.random.stateless_uniform((batch_size, image_size, image_size, 3), key)
    labels = tf.random.stateless_uniform(
        (batch_size,), key, minval=0, maxval=num_classes, dtype=tf.int64
    )
    return images, labels


def batch(
    args: argparse.Namespace, step: int | tf.Tensor, shard: int = 0
) -> tuple[tf.Tensor, tf.Tensor]:
    """``synthetic_batch`` for the scripts' flags."""
    return synthetic_batch(
        step,
        seed=args.seed,
        batch_size=args.batch_size,
        image_size=args.image_size,
        num_classes=args.num_classes,
        shard=shard,
    )


def dataset(args: argparse.Namespace) -> tf.data.Dataset:
    """Batches for steps 0, 1, … without end (``fit`` bounds it with
    ``steps_per_epoch``). Infinite on purpose: the launcher's ``fit`` hook resumes such a
    dataset by skipping the global step count, so a resumed run sees the same batches."""
    return tf.data.Dataset.counter().map(lambda step: batch(args, step))


def build(args: argparse.Namespace) -> tf.keras.Model:
    """The model for the flags, with weights initialised from ``--seed`` (reproducible)."""
    tf.keras.utils.set_random_seed(args.seed)
    return models.build(args.model, image_size=args.image_size, num_classes=args.num_classes)


def optimizer(lr: float) -> tf.keras.optimizers.Optimizer:
    """SGD with momentum, the optimizer of the paper's image models."""
    return tf.keras.optimizers.SGD(learning_rate=lr, momentum=0.9)


def loss_fn() -> tf.keras.losses.Loss:
    """The loss for ``compile``/``fit`` (the models output logits)."""
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def tf_variables(variables: Sequence[Any]) -> list[tf.Variable]:
    """The ``tf.Variable``s behind Keras variables. Keras 3 wraps them (``.value``), and
    Horovod 0.28 needs real ones (``broadcast_variables`` assigns them inside a tf.function,
    ``DistributedGradientTape`` calls ``.ref()``); tf_keras variables already are real."""
    return [v if isinstance(v, tf.Variable) else v.value for v in variables]


def train_step(
    model: tf.keras.Model,
    opt: tf.keras.optimizers.Optimizer,
    *,
    strategy: tf.distribute.Strategy | None = None,
    wrap_tape: Callable[[tf.GradientTape], Any] | None = None,
) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """One compiled SGD step returning the mean loss over the global batch.

    ``strategy``: run the step on its replicas; each replica's loss is divided by the global
    batch (``tf.nn.compute_average_loss``) so that the strategy's gradient sum is a mean. (Keras
    loss objects cannot be used here: Keras 3 rescales them for the strategy itself, tf_keras
    refuses them outside ``fit``.) ``wrap_tape``: e.g. Horovod's ``DistributedGradientTape``,
    which averages the ranks' gradients itself.
    """

    def replica_step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example = tf.keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True
            )
            loss = tf.nn.compute_average_loss(per_example)
        if wrap_tape:
            grads = wrap_tape(tape).gradient(loss, tf_variables(model.trainable_variables))
        else:
            grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        if strategy is None:
            return replica_step(images, labels)
        per_replica = strategy.run(replica_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return step
