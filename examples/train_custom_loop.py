"""A custom TensorFlow training loop made preemptible by two added lines (marked ◀).

    tiresias-run --workers 1 examples/train_custom_loop.py --steps 2000
    tiresias-run --workers 2 examples/train_custom_loop.py   # MultiWorkerMirroredStrategy
    python -m tiresias_launch.exec examples/train_custom_loop.py   # by hand, no coordinator

On SIGTERM (``kill -TERM <pid>``) the loop finishes its step, the chief checkpoints model,
optimizer, step and RNG state, and the process exits 75; the next start resumes there.
"""

import argparse

import keras
import tensorflow as tf

import tiresias

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

strategy = tiresias.strategy()  # right strategy for the gang shape (default when alone)
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.Adam(1e-3)


def batch(step: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Synthetic data indexed by step, so the step is the whole data position."""
    x = tf.random.stateless_normal([64, 32], seed=[step, 0])
    return x, tf.reduce_sum(x, axis=1, keepdims=True)


@tf.function
def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    def replica(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y)) / strategy.num_replicas_in_sync
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return strategy.reduce("SUM", strategy.run(replica, args=(x, y)), axis=None)


state = tiresias.State(model=model, optimizer=optimizer)  # ◀ restores when resuming
for step in state.steps(args.steps):  # ◀ was: for step in range(args.steps)
    loss = train_step(*batch(step))
    if step % 100 == 0:
        print(f"step {step} loss {float(loss):.4f}", flush=True)
