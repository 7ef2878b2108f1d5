"""A parameter-server training loop written with TensorFlow alone (no Tiresias API, so its
runtime reports no tensor sizes): two weight matrices, 3 MB and 1 MB, which TF places round-
robin on the two parameter servers. Every step reads both and pushes both gradients, so the
first PS carries three quarters of the traffic (S_J = 0.75).

    tiresias-run --ps 2 --workers 1 plain_ps_loop.py [STEPS]
"""

import sys

import tensorflow as tf

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    w0 = tf.Variable(tf.zeros([768, 1024]))  # ps0
    w1 = tf.Variable(tf.zeros([256, 1024]))  # ps1


@tf.function
def train_step() -> tf.Tensor:
    def replica() -> tf.Tensor:
        x = tf.random.normal([8, 1024])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.matmul(x, w0, transpose_b=True)) + tf.reduce_mean(
                tf.matmul(x, w1, transpose_b=True)
            )
        g0, g1 = tape.gradient(loss, [w0, w1])
        w0.assign_sub(0.01 * g0)
        w1.assign_sub(0.01 * g1)
        return loss

    return strategy.run(replica)


for step in range(steps):
    coordinator.schedule(train_step)
    if step % 20 == 0:
        coordinator.join()
        print(f"step {step}", flush=True)
coordinator.join()
