"""Horovod's tensorflow2_keras_mnist.py, tiny and synthetic: an unbuilt Sequential,
hvd.DistributedOptimizer, Horovod's broadcast callback and a
repeat().shuffle() pipeline. Legacy Keras: run with TF_USE_LEGACY_KERAS=1. Rank 0 writes the
results. (Horovod 0.28's MetricAverageCallback and LearningRateWarmupCallback use Keras
2's ``keras.backend``, so they fail beside Keras 3 with or without Tiresias: left out. So
is the example's Dropout: legacy Keras draws its masks from TensorFlow's stateful RNG,
which no checkpoint holds.)

usage: horovod_fit.py RESULTS   (writes RESULTS and RESULTS.batches)
"""

import hashlib
import json
import sys

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

results = sys.argv[1]
hvd.init()
tf.keras.utils.set_random_seed(hvd.rank())

x = np.random.uniform(size=(400, 8, 8)).astype("float32")
y = (x[:, :4].mean(axis=(1, 2)) > 0.5).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x[..., None], y)).repeat().shuffle(400).batch(16)

mnist_model = tf.keras.Sequential(
    [
        tf.keras.layers.Conv2D(4, [3, 3], activation="relu"),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(2, activation="softmax"),
    ]
)

scaled_lr = 0.001 * hvd.size()
opt = hvd.DistributedOptimizer(tf.optimizers.Adam(scaled_lr))
mnist_model.compile(
    loss=tf.losses.SparseCategoricalCrossentropy(),
    optimizer=opt,
    metrics=["accuracy"],
    experimental_run_tf_function=False,
)


class BatchLog(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if hvd.rank() == 0:
            with open(results + ".batches", "a") as f:
                print(self.epoch, batch, file=f)


callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    BatchLog(),
]
verbose = 1 if hvd.rank() == 0 else 0
history = mnist_model.fit(
    dataset, steps_per_epoch=40 // hvd.size(), callbacks=callbacks, epochs=3, verbose=verbose
)

if hvd.rank() == 0:
    w = mnist_model.get_weights()
    weights = hashlib.sha256(b"".join(a.tobytes() for a in w)).hexdigest()
    with open(results, "w") as f:
        json.dump(
            {
                "weights": weights,
                "history": history.history,
                "epochs": history.epoch,
                "iterations": int(mnist_model.optimizer.iterations),
            },
            f,
        )
