"""A model with its own ``train_step`` (as in the Keras guide "Customizing what happens in
fit()"), fed a dict of features and labels: ``train_step`` unpacks the batch itself, so the
batch is not ``(x, y)``. Arrays in a dict, default shuffle, its own loss and metric trackers.

usage: custom_train_step.py RESULTS   (writes RESULTS and RESULTS.batches)
"""

import hashlib
import json
import sys

import keras
import numpy as np
import tensorflow as tf

results = sys.argv[1]
keras.utils.set_random_seed(11)


class Classifier(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(3)
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")

    def call(self, inputs):
        return self.out(self.hidden(inputs))

    @property
    def metrics(self):
        return [self.loss_tracker, self.accuracy]

    def train_step(self, data):
        features, labels = data["features"], data["label"]
        with tf.GradientTape() as tape:
            logits = self(features, training=True)
            loss = self.loss_fn(labels, logits)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
        self.loss_tracker.update_state(loss)
        self.accuracy.update_state(labels, logits)
        return {m.name: m.result() for m in self.metrics}


features = np.random.normal(size=(200, 5)).astype("float32")
labels = (features[:, 0] > 0).astype("int64") + (features[:, 1] > 0.5).astype("int64")

model = Classifier()
model.compile(optimizer=keras.optimizers.Adam(0.01))


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


history = model.fit(
    {"features": features, "label": labels},
    batch_size=25,
    epochs=3,
    callbacks=[BatchLog()],
    verbose=2,
)

digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
with open(results, "w") as f:
    json.dump(
        {
            "weights": digest,
            "history": history.history,
            "epochs": history.epoch,
            "iterations": int(model.optimizer.iterations),
        },
        f,
    )
