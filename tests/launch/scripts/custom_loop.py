"""Deterministic custom training loop for the launcher tests, in every gang shape.

argv: total_steps log_path, where "{rank}" in log_path becomes the task index. Writes one
line per executed step ("<step> <loss hex>", or "<step> scheduled" in ps mode) and a final
"done <applied updates> <optimizer iterations>".
TEST_PAUSE_AT=k: before step k, create <log_path>.paused and wait for the preemption signal.
"""

import os
import sys
import time
from pathlib import Path

import keras
import tensorflow as tf

import tiresias

total = int(sys.argv[1])
pause_at = int(os.environ.get("TEST_PAUSE_AT", "-1"))
tf.config.experimental.enable_op_determinism()
keras.utils.set_random_seed(1)
runtime = tiresias.get_runtime()
mode, rank = runtime.env.mode, runtime.env.task_index
log_path = Path(sys.argv[2].replace("{rank}", str(rank)))
if mode == "horovod":
    import horovod.tensorflow as hvd

    hvd.init()
strategy = tiresias.strategy()
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
    applied = tf.Variable(0, dtype=tf.int64)  # counts updates: catches lost/repeated steps


def batch(step: int, shard: int) -> tuple[tf.Tensor, tf.Tensor]:
    x = tf.random.stateless_normal([16, 8], seed=[step, shard])
    return x, tf.reduce_sum(x[:, :3], axis=1, keepdims=True)


def loss_and_update(x: tf.Tensor, y: tf.Tensor, scale: float = 1.0) -> tf.Tensor:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y)) * scale
    sources = model.trainable_variables
    if mode == "horovod":  # Horovod's tape wants the tf.Variables inside Keras 3 variables
        tape = hvd.DistributedGradientTape(tape)
        sources = [v.value for v in sources]
    grads = tape.gradient(loss, sources)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    applied.assign_add(1)
    return loss


@tf.function
def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    if mode in ("single", "horovod"):
        return loss_and_update(x, y)
    per_replica = strategy.run(loss_and_update, args=(x, y, 1.0 / strategy.num_replicas_in_sync))
    if mode == "ps":
        return per_replica
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


if mode == "ps":
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
state = tiresias.State(model=model, optimizer=optimizer, applied=applied)
with log_path.open("a") as log:
    for step in state.steps(total):
        if step == pause_at:
            Path(f"{log_path}.paused").touch()
            deadline = time.monotonic() + 120
            while not runtime.flag and time.monotonic() < deadline:
                time.sleep(0.01)
        if mode == "ps":
            coordinator.schedule(train_step, args=batch(step, 0))
            print(step, "scheduled", file=log, flush=True)
        else:
            loss = train_step(*batch(step, rank))
            print(step, float(loss).hex(), file=log, flush=True)
    if mode == "ps":
        coordinator.join()
    print("done", int(applied.numpy()), int(optimizer.iterations.numpy()), file=log, flush=True)
