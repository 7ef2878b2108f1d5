"""A functional model with two inputs, NumPy arrays, class_weight for an imbalanced label,
validation_split and the default shuffle.

usage: functional_class_weight.py RESULTS   (writes RESULTS and RESULTS.batches)
"""

import hashlib
import json
import sys

import keras
import numpy as np

results = sys.argv[1]
keras.utils.set_random_seed(3)

n = 250
numbers = np.random.normal(size=(n, 6)).astype("float32")
flags = np.random.randint(0, 2, size=(n, 3)).astype("float32")
labels = (numbers[:, 0] + flags[:, 0] > 1.2).astype("int32")  # about one in four is 1

a = keras.Input((6,), name="numbers")
b = keras.Input((3,), name="flags")
h = keras.layers.Concatenate()([keras.layers.Dense(8, activation="relu")(a), b])
out = keras.layers.Dense(1, activation="sigmoid")(h)
model = keras.Model([a, b], out)
model.compile(optimizer=keras.optimizers.RMSprop(0.01), loss="binary_crossentropy", metrics=["auc"])


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


history = model.fit(
    {"numbers": numbers, "flags": flags},
    labels,
    batch_size=20,
    epochs=3,
    validation_split=0.2,
    class_weight={0: 1.0, 1: 3.0},
    callbacks=[BatchLog()],
    verbose=2,
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
