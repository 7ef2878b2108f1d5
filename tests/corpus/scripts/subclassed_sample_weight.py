"""A subclassed model trained on arrays with per-sample weights and explicit
validation_data (weighted too), default shuffle.

usage: subclassed_sample_weight.py RESULTS   (writes RESULTS and RESULTS.batches)
"""

import hashlib
import json
import sys

import keras
import numpy as np

results = sys.argv[1]
keras.utils.set_random_seed(5)


class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(12, activation="tanh")
        self.out = keras.layers.Dense(1)

    def call(self, inputs):
        return self.out(self.hidden(inputs))


x = np.random.uniform(-1, 1, size=(240, 4)).astype("float32")
y = (x @ np.array([1.0, -2.0, 0.5, 0.0], dtype="float32"))[:, None]
weights = np.where(x[:, 0] > 0, 2.0, 0.5).astype("float32")
x_val = np.random.uniform(-1, 1, size=(40, 4)).astype("float32")
y_val = x_val[:, :1] - 2 * x_val[:, 1:2]

model = Regressor()
model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse", metrics=["mae"])


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


history = model.fit(
    x,
    y,
    sample_weight=weights,
    validation_data=(x_val, y_val, np.ones(40, dtype="float32")),
    batch_size=24,
    epochs=3,
    callbacks=[BatchLog()],
    verbose=2,
)

digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
with open(results, "w") as f:
    json.dump(
        {
            "weights": digest,
            "history": history.history,
            "epochs": history.epoch,
            "iterations": int(model.optimizer.iterations),
        },
        f,
    )
