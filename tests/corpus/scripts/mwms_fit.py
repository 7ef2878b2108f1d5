"""The TensorFlow multi-worker tutorial (Keras fit under MultiWorkerMirroredStrategy),
tiny and synthetic. Legacy Keras: run with TF_USE_LEGACY_KERAS=1. Every worker runs this
script with its own TF_CONFIG; the chief (task 0) writes the results.

usage: mwms_fit.py RESULTS   (writes RESULTS and RESULTS.batches)
"""

import hashlib
import json
import os
import sys

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()  # first: it configures the runtime
results = sys.argv[1]
tf.keras.utils.set_random_seed(0)
tf_config = json.loads(os.environ["TF_CONFIG"])
chief = tf_config["task"]["index"] == 0

per_worker_batch_size = 16
global_batch_size = per_worker_batch_size * len(tf_config["cluster"]["worker"])
x = np.random.uniform(size=(512, 10, 10)).astype("float32")
y = (x.mean(axis=(1, 2)) > 0.5).astype("int64")
multi_worker_dataset = (
    tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512).repeat().batch(global_batch_size)
)

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(10, 10)),
            tf.keras.layers.Reshape(target_shape=(10, 10, 1)),
            tf.keras.layers.Conv2D(4, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(2),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.01),
        metrics=["accuracy"],
    )


class BatchLog(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if chief:
            with open(results + ".batches", "a") as f:
                print(self.epoch, batch, file=f)


history = model.fit(
    multi_worker_dataset, epochs=3, steps_per_epoch=8, callbacks=[BatchLog()], verbose=2
)

if chief:
    weights = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
    with open(results, "w") as f:
        json.dump(
            {
                "weights": weights,
                "history": history.history,
                "epochs": history.epoch,
                "iterations": int(model.optimizer.iterations.numpy()),
            },
            f,
        )
