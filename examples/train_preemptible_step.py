"""Keeping your own loop: ``@tiresias.preemptible`` makes each call of the step one step.

    python -m tiresias_launch.exec examples/train_preemptible_step.py

The decorated function checks for preemption before it runs and counts itself after, so a
``while`` loop over ``state.step`` resumes where it stopped.
"""

import keras
import tensorflow as tf

import tiresias

model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.01)
state = tiresias.State(model=model, optimizer=optimizer)


@tiresias.preemptible
@tf.function
def train_step(step: tf.Tensor) -> tf.Tensor:
    x = tf.random.stateless_normal([64, 32], seed=tf.stack([step, 0]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - tf.reduce_sum(x, axis=1, keepdims=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


while state.step < 1000:
    train_step(tf.constant(state.step, tf.int64))
