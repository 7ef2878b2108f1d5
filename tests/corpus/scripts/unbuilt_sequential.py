"""A Sequential model without an Input layer, trained on NumPy arrays with validation_split
and Keras's default shuffle (keras-io mnist_convnet style, tiny and synthetic).

usage: unbuilt_sequential.py RESULTS   (writes RESULTS and RESULTS.batches)
"""

import hashlib
import json
import sys

import keras
import numpy as np

results = sys.argv[1]
keras.utils.set_random_seed(1337)

x = np.random.normal(size=(300, 8)).astype("float32")
y = keras.utils.to_categorical((x[:, 0] + x[:, 1] > 0).astype("int32"), 2)

model = keras.Sequential(
    [
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(2, activation="softmax"),
    ]
)
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


history = model.fit(
    x, y, batch_size=16, epochs=3, validation_split=0.1, callbacks=[BatchLog()], verbose=2
)

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
