"""A Horovod Keras ``fit`` script written the way Horovod's Keras guide writes one: the data
sharded with ``shard(hvd.size(), hvd.rank())``, the learning rate scaled by ``hvd.size()``,
an epoch of ``samples // (batch * hvd.size())`` steps, ``hvd.DistributedOptimizer`` and the
broadcast callback. No Tiresias in it. Legacy Keras (TF_USE_LEGACY_KERAS=1), as Horovod
0.28's Keras binding needs. ``--shuffle-shard`` shuffles after the shard instead of before.

The model is subclassed: the sample ids are an input it does not use, and its ``train_step``
logs the ids each rank trains on, one line per step (RESULTS.ids-RANK). A callback logs the
ranks' mean running loss after every batch, averaged with ``hvd.allreduce`` as Horovod's
MetricAverageCallback does (RESULTS.loss); rank 0 writes the final weights
(RESULTS.weights.npy).

usage: horovod_elastic_fit.py RESULTS [--shuffle-shard]
"""

import sys

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

hvd.init()
results = sys.argv[1]
tf.keras.utils.set_random_seed(0)

batch_size = 4
samples = 64
x = np.random.uniform(size=(samples, 6)).astype("float32")
y = x @ np.random.uniform(size=(6, 1)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices(((x, np.arange(samples)), y))
if "--shuffle-shard" in sys.argv:
    dataset = dataset.repeat().shard(hvd.size(), hvd.rank()).shuffle(16)
else:
    dataset = dataset.shuffle(samples, seed=1).repeat().shard(hvd.size(), hvd.rank())
dataset = dataset.batch(batch_size)


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
        tf.print(ids, summarize=-1, output_stream=f"file://{results}.ids-{hvd.rank()}")
        return super().train_step(data)


class LossLog(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        loss = float(hvd.allreduce(tf.constant(logs["loss"]), name=f"loss{batch}"))
        if hvd.rank() == 0:
            with open(f"{results}.loss", "a") as f:
                print(loss.hex(), file=f)


model = LoggedModel()
model((x[:1], np.arange(1)))
opt = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.005 * hvd.size()))
model.compile(optimizer=opt, loss="mse")

model.fit(
    dataset,
    epochs=2,
    steps_per_epoch=samples // (batch_size * hvd.size()),
    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), LossLog()],
    verbose=0,
)
if hvd.rank() == 0:
    np.save(f"{results}.weights.npy", np.concatenate([w.ravel() for w in model.get_weights()]))
