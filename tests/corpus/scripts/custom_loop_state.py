"""A custom training loop made preemptible with ``tiresias.State``: the two-line change of the
docs (the State, and ``state.steps`` instead of ``range``), otherwise a plain Keras 3 model,
optimizer and ``tf.function`` step over step-indexed batches of a synthetic data set.

usage: custom_loop_state.py RESULTS [STEPS]   (prints one loss a step; writes RESULTS)
"""

import hashlib
import json
import sys

import keras
import numpy as np
import tensorflow as tf

import tiresias

results = sys.argv[1]
total = int(sys.argv[2]) if len(sys.argv) > 2 else 40
keras.utils.set_random_seed(7)

x = np.random.normal(size=(512, 8)).astype("float32")
y = (x[:, :1] + x[:, 1:2] > 0).astype("float32")

model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
optimizer = keras.optimizers.Adam(1e-2)
loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


def batch(step, size=32):
    start = (step * size) % len(x)
    return x[start : start + size], y[start : start + size]


state = tiresias.State(model=model, optimizer=optimizer)
for step in state.steps(total):
    loss = train_step(*batch(step))
    print(f"step {step} loss {float(loss):.7f}", flush=True)

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
