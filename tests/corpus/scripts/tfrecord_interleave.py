"""Sharded TFRecords, the tf.data performance guide's way: ``list_files`` (reshuffled every
epoch), an ``interleave`` whose per-file datasets shuffle with their own seeds, a parse
``map``, a file ``cache``, then a ``shuffle`` after the cache, ``batch`` and ``prefetch``.
The shards are written by the script (synthetic, in place of a download).

usage: tfrecord_interleave.py RESULTS   (writes RESULTS, RESULTS.batches, RESULTS.cache*)
"""

import hashlib
import json
import os
import sys

import keras
import tensorflow as tf

results = sys.argv[1]
keras.utils.set_random_seed(42)

shards = results + ".shards"
os.makedirs(shards, exist_ok=True)
for shard in range(4):
    with tf.io.TFRecordWriter(f"{shards}/train-{shard:05d}.tfrecord") as writer:
        for i in range(24):
            x = tf.random.stateless_normal([6], seed=[shard, i])
            y = tf.reduce_sum(x[:3]) - x[4]
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "x": tf.train.Feature(float_list=tf.train.FloatList(value=x.numpy())),
                        "y": tf.train.Feature(float_list=tf.train.FloatList(value=[float(y)])),
                    }
                )
            )
            writer.write(example.SerializeToString())

features = {
    "x": tf.io.FixedLenFeature([6], tf.float32),
    "y": tf.io.FixedLenFeature([1], tf.float32),
}


def parse(record):
    example = tf.io.parse_single_example(record, features)
    return example["x"], example["y"]


AUTOTUNE = tf.data.AUTOTUNE
files = tf.data.Dataset.list_files(f"{shards}/train-*.tfrecord", shuffle=True)
train = (
    files.interleave(
        lambda f: tf.data.TFRecordDataset(f).shuffle(8),
        cycle_length=2,
        num_parallel_calls=AUTOTUNE,
        deterministic=True,
    )
    .map(parse, num_parallel_calls=AUTOTUNE)
    .cache(results + ".cache")
    .shuffle(32)
    .batch(12)
    .prefetch(AUTOTUNE)
)

model = keras.Sequential(
    [keras.Input((6,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


history = model.fit(train, epochs=4, callbacks=[BatchLog()], verbose=2)

weights = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
with open(results, "w") as f:
    json.dump(
        {
            "weights": weights,
            "history": history.history,
            "epochs": history.epoch,
            "iterations": int(model.optimizer.iterations),
        },
        f,
    )
