"""An ordinary Keras ``fit`` script: nothing Tiresias-specific in it.

    tiresias-run --workers 1 examples/train_keras_fit.py
    python -m tiresias_launch.exec examples/train_keras_fit.py      # what tiresias-run runs

The launcher starts every script through ``tiresias_launch.exec``, which patches
``Model.fit``: on SIGTERM training stops at the next batch, model + optimizer + (epoch, batch)
are checkpointed and the process exits 75; the next start continues at that exact batch.
For multi-worker ``fit`` use legacy Keras (TF_USE_LEGACY_KERAS=1) with
MultiWorkerMirroredStrategy; Keras 3 ``fit`` does not run under that strategy.
"""

import tensorflow as tf

keras = tf.keras
x = tf.random.stateless_normal([4096, 32], seed=[1, 2])
y = tf.reduce_sum(x, axis=1, keepdims=True)
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

model = keras.Sequential(
    [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
)
model.compile(keras.optimizers.Adam(1e-3), "mse")
model.fit(data, epochs=20, verbose=2)
