"""Stock callbacks on a finite, reshuffled tf.data pipeline: EarlyStopping (restoring the
best weights), ModelCheckpoint (best only), CSVLogger and ReduceLROnPlateau.

usage: stock_callbacks.py RESULTS   (writes RESULTS, RESULTS.batches, RESULTS.csv and
RESULTS.keras, the best model)
"""

import hashlib
import json
import sys

import keras
import tensorflow as tf

results = sys.argv[1]
keras.utils.set_random_seed(4)

x = tf.random.stateless_normal([192, 4], seed=[3, 4])
y = tf.reduce_sum(x[:, :2], axis=1, keepdims=True) + 0.3 * tf.random.stateless_normal(
    [192, 1], seed=[5, 6]
)
train = tf.data.Dataset.from_tensor_slices((x[:160], y[:160])).shuffle(160).batch(16)
val = tf.data.Dataset.from_tensor_slices((x[160:], y[160:])).batch(16)

model = keras.Sequential(
    [keras.Input((4,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


callbacks = [
    BatchLog(),
    keras.callbacks.EarlyStopping(patience=2, restore_best_weights=True),
    keras.callbacks.ModelCheckpoint(results + ".keras", save_best_only=True),
    keras.callbacks.CSVLogger(results + ".csv"),
    keras.callbacks.ReduceLROnPlateau(factor=0.5, patience=1, min_lr=1e-4),
]
history = model.fit(train, validation_data=val, epochs=12, callbacks=callbacks, verbose=2)

weights = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
best = keras.models.load_model(results + ".keras")
best_weights = hashlib.sha256(b"".join(w.tobytes() for w in best.get_weights())).hexdigest()
with open(results, "w") as f:
    json.dump(
        {
            "weights": weights,
            "best_checkpoint": best_weights,
            "history": history.history,
            "epochs": history.epoch,
            "stopped_epoch": callbacks[1].stopped_epoch,
            "learning_rate": float(model.optimizer.learning_rate),
            "iterations": int(model.optimizer.iterations),
        },
        f,
    )
