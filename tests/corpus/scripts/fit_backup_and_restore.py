"""Keras ``fit`` protected by the script's own ``keras.callbacks.BackupAndRestore`` (the
fault-tolerance recipe of the Keras and TensorFlow guides), on synthetic arrays.

usage: fit_backup_and_restore.py BACKUP_DIR PROGRESS_FILE [EPOCHS]
"""

import sys

import keras
import numpy as np

backup_dir, progress = sys.argv[1], sys.argv[2]
epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 4
keras.utils.set_random_seed(3)

x = np.random.normal(size=(2048, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True))


class Progress(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        with open(progress, "a") as f:
            print(epoch, file=f)


model.fit(
    x,
    y,
    epochs=epochs,
    batch_size=32,
    verbose=2,
    callbacks=[keras.callbacks.BackupAndRestore(backup_dir), Progress()],
)
print(f"done, optimizer at {int(model.optimizer.iterations)} iterations", flush=True)
