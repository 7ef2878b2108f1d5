"""Horovod's ``examples/tensorflow2/tensorflow2_mnist.py``: a custom loop with
``hvd.DistributedGradientTape``, variables broadcast after the first step, rank 0 printing
every 10 steps; MNIST replaced by synthetic images of the same shape. No Tiresias in it.
With Keras 3 the tape and the broadcast get the ``tf.Variable`` inside each Keras variable.

usage: horovod_tf2_mnist.py STEPS
"""

import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

hvd.init()
steps = int(sys.argv[1])

rng = np.random.default_rng(hvd.rank())
images = rng.random((1024, 28, 28, 1), dtype=np.float32)
labels = rng.integers(0, 10, 1024)
dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().shuffle(1000).batch(32)

mnist_model = tf.keras.Sequential(
    [
        tf.keras.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(8, [3, 3], activation="relu"),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10, activation="softmax"),
    ]
)
loss = tf.losses.SparseCategoricalCrossentropy()
opt = tf.optimizers.Adam(0.001 * hvd.size())


def variables(vs):
    return [v if isinstance(v, tf.Variable) else v.value for v in vs]


@tf.function
def training_step(images, labels, first_batch):
    with tf.GradientTape() as tape:
        probs = mnist_model(images, training=True)
        loss_value = loss(labels, probs)
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss_value, variables(mnist_model.trainable_variables))
    opt.apply_gradients(zip(grads, mnist_model.trainable_variables, strict=True))
    if first_batch:
        hvd.broadcast_variables(variables(mnist_model.variables), root_rank=0)
        hvd.broadcast_variables(variables(opt.variables), root_rank=0)
    return loss_value


for batch, (images, labels) in enumerate(dataset.take(steps // hvd.size())):
    loss_value = training_step(images, labels, batch == 0)
    if batch % 10 == 0 and hvd.rank() == 0:
        print(f"Step #{batch}\tLoss: {float(loss_value):.6f}", flush=True)
