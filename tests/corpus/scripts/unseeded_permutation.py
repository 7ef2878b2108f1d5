"""keras-io's "timeseries classification from scratch" data preparation: the training arrays
are permuted with NumPy's unseeded global RNG, then ``fit`` holds out the last 20 % with
``validation_split``. A run that starts again permutes differently, so other rows are held
out. (Synthetic series in place of the FordA download.)

usage: unseeded_permutation.py RESULTS   (writes RESULTS.batches)
"""

import sys

import keras
import numpy as np

results = sys.argv[1]

t = np.linspace(0, 8 * np.pi, 64, dtype="float32")
phase = np.linspace(0, np.pi, 400, dtype="float32")[:, None]
x_train = np.sin(t[None, :] + phase)[..., None]
y_train = (phase[:, 0] > np.pi / 2).astype("int32")

idx = np.random.permutation(len(x_train))
x_train = x_train[idx]
y_train = y_train[idx]

model = keras.Sequential(
    [
        keras.Input(x_train.shape[1:]),
        keras.layers.Conv1D(8, 3, activation="relu"),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(2, activation="softmax"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


model.fit(
    x_train,
    y_train,
    batch_size=32,
    epochs=3,
    validation_split=0.2,
    callbacks=[BatchLog()],
    verbose=2,
)
