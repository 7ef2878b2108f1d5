"""The custom training loop of TensorFlow's "training loop from scratch" and multi-worker
tutorials, with no Tiresias in it: a ``tf.data`` pipeline, a ``tf.function`` step, and an
epoch loop that prints the mean loss of each epoch. Nothing here can be checkpointed.

usage: custom_loop_plain.py RESULTS [EPOCHS]   (writes RESULTS at the end)
"""

import hashlib
import json
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras

results = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
keras.utils.set_random_seed(11)

x = np.random.normal(size=(1024, 8)).astype("float32")
y = (x[:, :1] - x[:, 2:3] > 0).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)

model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
optimizer = keras.optimizers.SGD(learning_rate=0.05)
loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
train_loss = keras.metrics.Mean()


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    train_loss.update_state(loss)


for epoch in range(epochs):
    train_loss.reset_state()
    for xb, yb in dataset:
        train_step(xb, yb)
    print(f"epoch {epoch} loss {float(train_loss.result()):.6f}", flush=True)

with open(results, "w") as f:
    json.dump(
        {
            "weights": hashlib.sha256(
                b"".join(w.tobytes() for w in model.get_weights())
            ).hexdigest(),
            "iterations": int(optimizer.iterations),
        },
        f,
    )
