"""Training job used by launch_bench.py: a wide MLP whose state has a chosen size.

argv: hidden_width progress_path. Runs steps forever through tiresias.State; after each step
it rewrites progress_path with the step number, so the bench knows when it is training.
"""

import sys
from pathlib import Path

import keras
import tensorflow as tf

import tiresias

width, progress = int(sys.argv[1]), Path(sys.argv[2])
model = keras.Sequential([keras.Input((width,)), keras.layers.Dense(width), keras.layers.Dense(1)])
optimizer = keras.optimizers.Adam(1e-3)  # two slots per variable: state = 3 × weights
x = tf.random.stateless_normal([8, width], seed=[0, 1])


@tf.function
def train_step() -> tf.Tensor:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


state = tiresias.State(model=model, optimizer=optimizer)
for step in state.steps(10**9):
    train_step()
    progress.write_text(str(step))
