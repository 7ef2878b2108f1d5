"""A Horovod (Gloo) custom loop: ranks stop at one agreed step, rank 0 checkpoints.

    tiresias-run --horovod --workers 4 examples/train_horovod.py --steps 2000

Rank 0's launcher hosts the Gloo rendezvous, so ``hvd.init()`` needs no horovodrun.
With Keras 3 use ``hvd.DistributedGradientTape`` (Horovod's Keras optimizer wrapper needs
legacy Keras) and hand it the tf.Variables inside the Keras variables (``v.value``).
"""

import argparse

import horovod.tensorflow as hvd
import keras
import tensorflow as tf

import tiresias

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

hvd.init()
model = keras.Sequential(
    [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
)
optimizer = keras.optimizers.SGD(0.01 * hvd.size())


@tf.function
def train_step(step: tf.Tensor) -> tf.Tensor:
    x = tf.random.stateless_normal([64, 32], seed=tf.stack([step, hvd.rank()]))
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, [v.value for v in model.trainable_variables])
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


state = tiresias.State(model=model, optimizer=optimizer)  # every rank restores the same step
for step in state.steps(args.steps):
    loss = train_step(tf.constant(step, tf.int64))
    if hvd.rank() == 0 and step % 100 == 0:
        print(f"step {step} loss {float(loss):.4f}", flush=True)
