"""Two data-loading styles in one script: a keras.utils.PyDataset (indexed batches, shuffled
by fit) for pre-training, then a Python generator with steps_per_epoch for fine-tuning.

usage: generator_pydataset.py RESULTS   (writes RESULTS and RESULTS.batches)
"""

import hashlib
import json
import sys

import keras
import numpy as np

results = sys.argv[1]
keras.utils.set_random_seed(21)
x = np.random.normal(size=(180, 5)).astype("float32")
y = (np.sin(x[:, :1]) + x[:, 1:2]).astype("float32")


class Batches(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size

    def __len__(self):
        return int(np.ceil(len(self.x) / self.batch_size))

    def __getitem__(self, i):
        s = slice(i * self.batch_size, (i + 1) * self.batch_size)
        return self.x[s], self.y[s]


def noisy_batches(batch_size):
    rng = np.random.default_rng(0)
    while True:
        idx = rng.integers(0, len(x), batch_size)
        yield x[idx] + rng.normal(0, 0.05, size=(batch_size, 5)).astype("float32"), y[idx]


model = keras.Sequential(
    [keras.Input((5,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer="adam", loss="mse")


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


first = model.fit(Batches(x, y, 16), epochs=2, callbacks=[BatchLog()], verbose=2)
second = model.fit(
    noisy_batches(16), steps_per_epoch=7, epochs=3, callbacks=[BatchLog()], verbose=2
)

weights = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
with open(results, "w") as f:
    json.dump(
        {
            "weights": weights,
            "history": [first.history, second.history],
            "epochs": [first.epoch, second.epoch],
            "iterations": int(model.optimizer.iterations),
        },
        f,
    )
