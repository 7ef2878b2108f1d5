"""``fit(..., epochs=1)`` called in a loop on one cached, reshuffling ``tf.data`` pipeline,
with an ``evaluate`` between the calls (the shape of progressive-training and GAN-style
scripts): each call continues the dataset where the previous one left it.

usage: fit_loop_dataset.py RESULTS   (writes RESULTS and RESULTS.batches)
"""

import hashlib
import json
import sys

import keras
import tensorflow as tf

results = sys.argv[1]
keras.utils.set_random_seed(11)

x = tf.random.stateless_normal([96, 5], seed=[1, 2])
y = tf.reduce_sum(x * [1.0, -2.0, 0.5, 0.0, 1.5], axis=1, keepdims=True)
train = (
    tf.data.Dataset.from_tensor_slices((x, y))
    .shuffle(96)
    .map(lambda a, b: (a * 2.0, b))
    .cache()
    .shuffle(32)
    .batch(12)
    .prefetch(tf.data.AUTOTUNE)
)

model = keras.Sequential(
    [keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


histories = []
for round_ in range(3):
    h = model.fit(train, epochs=1, callbacks=[BatchLog()], verbose=2)
    histories.append(h.history)
    print("round", round_, "eval", model.evaluate(x[:12] * 2.0, y[:12], verbose=0))

weights = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
with open(results, "w") as f:
    json.dump(
        {
            "weights": weights,
            "history": histories,
            "epochs": [0, 0, 0],
            "iterations": int(model.optimizer.iterations),
        },
        f,
    )
