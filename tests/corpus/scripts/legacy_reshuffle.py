"""Legacy Keras (TF_USE_LEGACY_KERAS=1) on a finite tf.data pipeline that reshuffles every
epoch, the tf.keras tutorials' default.

usage: legacy_reshuffle.py RESULTS   (writes RESULTS and RESULTS.batches)
"""

import hashlib
import json
import sys

import tensorflow as tf

results = sys.argv[1]
tf.keras.utils.set_random_seed(8)

x = tf.random.stateless_normal([120, 3], seed=[7, 8])
y = tf.reduce_sum(x, axis=1, keepdims=True)
train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(120).batch(12)

model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")


class BatchLog(tf.keras.callbacks.Callback):
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
            "iterations": int(model.optimizer.iterations.numpy()),
        },
        f,
    )
