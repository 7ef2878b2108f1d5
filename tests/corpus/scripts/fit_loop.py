"""fit called in a loop, one epoch at a time, with a look at predictions in between
(keras-io addition_rnn style): an LSTM on a synthetic sequence task.

usage: fit_loop.py RESULTS   (writes RESULTS and RESULTS.batches)
"""

import hashlib
import json
import sys

import keras
import numpy as np

results = sys.argv[1]
keras.utils.set_random_seed(2)

x = np.random.randint(0, 5, size=(160, 6))
y = (x.sum(axis=1) % 5).astype("int32")
x_onehot = keras.utils.to_categorical(x, 5)
x_val, y_val = x_onehot[:32], y[:32]

model = keras.Sequential(
    [keras.Input((6, 5)), keras.layers.LSTM(12), keras.layers.Dense(5, activation="softmax")]
)
model.compile(loss="sparse_categorical_crossentropy", optimizer="adam", metrics=["accuracy"])


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


histories = []
for iteration in range(1, 4):
    print("Iteration", iteration)
    h = model.fit(
        x_onehot,
        y,
        batch_size=16,
        epochs=1,
        validation_data=(x_val, y_val),
        callbacks=[BatchLog()],
        verbose=2,
    )
    histories.append(h.history)
    guess = model.predict(x_val[:3], verbose=0).argmax(axis=-1)
    print("expected", y_val[:3], "got", guess)

weights = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
with open(results, "w") as f:
    json.dump(
        {"weights": weights, "history": histories, "iterations": int(model.optimizer.iterations)},
        f,
    )
