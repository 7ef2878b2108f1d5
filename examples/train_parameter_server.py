"""A parameter-server job: the chief runs this script, ps and workers are servers.

    tiresias-run --ps 2 --workers 4 examples/train_parameter_server.py --steps 2000

``tiresias.strategy()`` builds ParameterServerStrategy from the TF_CONFIG the planner wrote.
Steps are scheduled on workers through a ClusterCoordinator; on preemption the chief waits
for scheduled steps to finish (``join``), checkpoints from the parameter servers and exits
75, and the servers exit 75 once the chief is gone.
"""

import argparse

import keras
import tensorflow as tf

import tiresias

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

strategy = tiresias.strategy()
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.SGD(0.01)


@tf.function
def train_step(step: tf.Tensor) -> tf.Tensor:
    def replica(step: tf.Tensor) -> tf.Tensor:
        x = tf.random.stateless_normal([64, 32], seed=tf.stack([step, 0]))
        y = tf.reduce_sum(x, axis=1, keepdims=True)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return strategy.run(replica, args=(step,))


state = tiresias.State(model=model, optimizer=optimizer)
for step in state.steps(args.steps):
    coordinator.schedule(train_step, args=(tf.constant(step, tf.int64),))
coordinator.join()
