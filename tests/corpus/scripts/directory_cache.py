"""Images from a directory tree, the TensorFlow "load and preprocess images" tutorial's way:
``image_dataset_from_directory`` with a validation split (both subsets reshuffle every
epoch), a ``Rescaling`` map, then ``cache().prefetch()``, so every epoch after the first
trains in the first epoch's cached order. The images are written by the script (synthetic,
in place of the tutorial's download).

usage: directory_cache.py RESULTS   (writes RESULTS, RESULTS.batches; images in RESULTS.images)
"""

import hashlib
import json
import os
import sys

import keras
import tensorflow as tf

results = sys.argv[1]
keras.utils.set_random_seed(123)

root = results + ".images"
for label in range(3):
    os.makedirs(f"{root}/class_{label}", exist_ok=True)
    for i in range(20):
        pixels = tf.random.stateless_uniform(
            [16, 16, 3], seed=[label, i], maxval=256, dtype=tf.int32
        )
        pixels = tf.cast(pixels // (label + 1), tf.uint8)
        tf.io.write_file(f"{root}/class_{label}/{i}.png", tf.io.encode_png(pixels))

train_ds, val_ds = keras.utils.image_dataset_from_directory(
    root, validation_split=0.2, subset="both", seed=123, image_size=(16, 16), batch_size=8
)
normalization_layer = keras.layers.Rescaling(1.0 / 255)
AUTOTUNE = tf.data.AUTOTUNE
train_ds = train_ds.map(lambda x, y: (normalization_layer(x), y)).cache().prefetch(AUTOTUNE)
val_ds = val_ds.map(lambda x, y: (normalization_layer(x), y)).cache().prefetch(AUTOTUNE)

model = keras.Sequential(
    [
        keras.Input((16, 16, 3)),
        keras.layers.Conv2D(4, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(3),
    ]
)
model.compile(
    optimizer="adam",
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)


class BatchLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        with open(results + ".batches", "a") as f:
            print(self.epoch, batch, file=f)


history = model.fit(train_ds, validation_data=val_ds, epochs=4, callbacks=[BatchLog()], verbose=2)

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
