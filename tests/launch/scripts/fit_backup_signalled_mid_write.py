"""A Keras ``fit`` with its own ``BackupAndRestore`` (the Keras guides' fault-tolerance
recipe), whose backup at the end of one epoch receives the preemption signal as it starts
writing: the fault under test. The subclass only injects the signal.

usage: fit_backup_signalled_mid_write.py BACKUP_DIR EPOCHS SIGNAL_AT_EPOCH (0: never)
"""

import os
import signal
import sys

import keras
import numpy as np

backup_dir, epochs, signal_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
keras.utils.set_random_seed(3)

x = np.random.normal(size=(2048, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True))


class SignalledBackup(keras.callbacks.BackupAndRestore):
    def _save_model(self):
        if self._current_epoch == signal_at:
            print(f"SIGTERM while backing up epoch {signal_at}", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
        super()._save_model()


model.fit(x, y, epochs=epochs, batch_size=32, verbose=2, callbacks=[SignalledBackup(backup_dir)])
print(f"done, optimizer at {int(model.optimizer.iterations)} iterations", flush=True)
