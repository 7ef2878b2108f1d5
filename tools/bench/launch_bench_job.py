"""Training job used by launch_bench.py: a wide MLP whose state has a chosen size, in any
gang shape but ps (single, MultiWorkerMirrored, Horovod).

argv: hidden_width progress_path. Runs steps forever through tiresias.State; after each step
the chief rewrites progress_path with the step number, so the bench knows it is training.
"""

import sys
from pathlib import Path

import keras
import tensorflow as tf

import tiresias

width, progress = int(sys.argv[1]), Path(sys.argv[2])
env = tiresias.get_runtime().env
if env.mode == "horovod":
    import horovod.tensorflow as hvd

    hvd.init()
strategy = tiresias.strategy()
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((width,)), keras.layers.Dense(width), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.Adam(1e-3)  # two slots per variable: state = 3 × weights
x = tf.random.stateless_normal([8, width], seed=[0, 1])


def replica_step() -> tf.Tensor:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x)))
    sources = model.trainable_variables
    if env.mode == "horovod":
        tape = hvd.DistributedGradientTape(tape)
        sources = [v.value for v in sources]
    grads = tape.gradient(loss, sources)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


@tf.function
def train_step() -> None:
    if env.mode == "allreduce":
        strategy.run(replica_step)
    else:
        replica_step()


state = tiresias.State(model=model, optimizer=optimizer)
for step in state.steps(10**9):
    train_step()
    if env.is_chief:
        progress.write_text(str(step))
