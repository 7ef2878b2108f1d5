"""The custom loop of TensorFlow's multi-worker tutorial with its own fault tolerance: a
``tf.train.Checkpoint`` of the model, optimizer and epoch, saved by a
``tf.train.CheckpointManager`` after every epoch and restored from its latest save at start.
No Tiresias in it.

usage: custom_loop_checkpoint_manager.py CHECKPOINT_DIR [EPOCHS]
"""

import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras

checkpoint_dir = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
keras.utils.set_random_seed(5)

x = np.random.normal(size=(1024, 8)).astype("float32")
y = (x[:, :1] + x[:, 3:4] > 0).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)

model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
optimizer = keras.optimizers.SGD(learning_rate=0.05)
loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
epoch = tf.Variable(0, dtype=tf.int64, name="epoch")

checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch)
manager = tf.train.CheckpointManager(checkpoint, directory=checkpoint_dir, max_to_keep=2)
checkpoint.restore(manager.latest_checkpoint)
if manager.latest_checkpoint:
    print(f"restored {manager.latest_checkpoint}", flush=True)


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


while epoch.numpy() < epochs:
    for xb, yb in dataset:
        loss = train_step(xb, yb)
    epoch.assign_add(1)
    manager.save()
    print(f"epoch {int(epoch.numpy()) - 1} loss {float(loss):.6f}", flush=True)
