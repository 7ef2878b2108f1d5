"""A MultiWorkerMirrored Keras ``fit`` script written the way the Keras distributed-training
guide writes one: the global batch is the per-replica batch times
``strategy.num_replicas_in_sync``, and an epoch is the dataset's size over that batch. No
Tiresias in it. Legacy Keras (TF_USE_LEGACY_KERAS=1): Keras 3 fit cannot run under this
strategy.

Its learning rate is scaled by the world (0.0025 per replica), as many distributed scripts
do. The model is subclassed: the sample ids are an input it does not use, and its ``train_step``
logs the ids each worker trains on, one line per step (RESULTS.ids-RANK). A callback logs
the running loss after every batch (RESULTS.loss-RANK); the chief writes the final weights
(RESULTS.weights.npy).

usage: mwms_elastic_fit.py RESULTS
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
results = sys.argv[1]
rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
tf.keras.utils.set_random_seed(0)

BATCH_SIZE_PER_REPLICA = 4
global_batch_size = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
samples = 64
x = np.random.uniform(size=(samples, 6)).astype("float32")
y = x @ np.random.uniform(size=(6, 1)).astype("float32")
dataset = (
    tf.data.Dataset.from_tensor_slices(((x, np.arange(samples)), y))
    .shuffle(samples)
    .repeat()
    .batch(global_batch_size)
)


class LoggedModel(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(8, activation="relu")
        self.out = tf.keras.layers.Dense(1)

    def call(self, inputs):
        features, _ = inputs
        return self.out(self.hidden(features))

    def train_step(self, data):
        (_, ids), _ = data
        tf.print(ids, summarize=-1, output_stream=f"file://{results}.ids-{rank}")
        return super().train_step(data)


class LossLog(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        with open(f"{results}.loss-{rank}", "a") as f:
            print(float(logs["loss"]).hex(), file=f)


with strategy.scope():
    model = LoggedModel()
    model((x[:1], np.arange(1)))
    # the learning rate scaled by the world, as many distributed scripts do
    learning_rate = 0.0025 * strategy.num_replicas_in_sync
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate), loss="mse")

model.fit(
    dataset,
    epochs=2,
    steps_per_epoch=samples // global_batch_size,
    callbacks=[LossLog()],
    verbose=0,
)
if rank == 0:
    np.save(f"{results}.weights.npy", np.concatenate([w.ravel() for w in model.get_weights()]))
