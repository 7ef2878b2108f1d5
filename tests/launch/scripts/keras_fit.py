"""An unmodified Keras ``fit`` script (no tiresias import), deterministic, for the tests.

argv: epochs log_path, where "{rank}" in log_path becomes the worker index. With TF_CONFIG
set it trains under MultiWorkerMirroredStrategy, as a user's distributed script would.
Logs "<optimizer iteration> <weights digest>" after every batch and "epoch <e> <loss hex>"
after every epoch. TEST_PAUSE_AT=k: at the start of global batch k, create
<log_path>.paused and wait for <log_path>.go (the test signals in between).
TEST_INFINITE=1 trains on an infinite dataset with steps_per_epoch=8 instead.
TF_USE_LEGACY_KERAS=1 runs the same script with tf_keras.
"""

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import tensorflow as tf

keras = tf.keras
tf_config = json.loads(os.environ.get("TF_CONFIG", "null"))
rank = tf_config["task"]["index"] if tf_config else 0
epochs, log_path = int(sys.argv[1]), Path(sys.argv[2].replace("{rank}", str(rank)))
pause_at = int(os.environ.get("TEST_PAUSE_AT", "-1"))
strategy = (
    tf.distribute.MultiWorkerMirroredStrategy() if tf_config else tf.distribute.get_strategy()
)
tf.config.experimental.enable_op_determinism()
keras.utils.set_random_seed(1)

x = tf.random.stateless_normal([128, 8], seed=[1, 2])
y = tf.reduce_sum(x[:, :3], axis=1, keepdims=True)
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
infinite = os.environ.get("TEST_INFINITE") == "1"  # one iterator across epochs
if infinite:
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(12)
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(keras.optimizers.SGD(0.05, momentum=0.9), "mse")


class Log(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if int(self.model.optimizer.iterations.numpy()) == pause_at:
            Path(f"{log_path}.paused").touch()
            deadline = time.monotonic() + 120
            while not Path(f"{log_path}.go").exists() and time.monotonic() < deadline:
                time.sleep(0.01)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        digest = hashlib.sha256(b"".join(w.tobytes() for w in self.model.get_weights()))
        step = int(self.model.optimizer.iterations.numpy())
        with log_path.open("a") as log:
            print(step, digest.hexdigest()[:16], file=log)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        with log_path.open("a") as log:
            print("epoch", epoch, float(logs["loss"]).hex(), file=log)


model.fit(
    data, epochs=epochs, callbacks=[Log()], verbose=0, steps_per_epoch=8 if infinite else None
)
