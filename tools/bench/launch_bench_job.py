"""Training job used by launch_bench.py: a wide MLP whose state has a chosen size, in any gang
shape but ps (single, MultiWorkerMirrored, Horovod).

argv: hidden_width progress_path [plain_dir]. Runs steps forever through tiresias.State;
after each step the chief rewrites progress_path with the step number, so the bench knows it
is training. With plain_dir it is the baseline instead: the same loop without tiresias,
which restores a ``tf.train.Checkpoint`` from plain_dir if there is one and, on SIGTERM,
writes one there (fsynced) and exits 75 at once (``os._exit``, as the runtime does), as a
script that saves itself would.
"""

import os
import signal
import sys
from pathlib import Path

import keras
import tensorflow as tf

width, progress = int(sys.argv[1]), Path(sys.argv[2])
plain = Path(sys.argv[3]) if len(sys.argv) > 3 else None
if plain is None:
    import tiresias

    env = tiresias.get_runtime().env
    mode, chief = env.mode, env.is_chief
    if mode == "horovod":
        import horovod.tensorflow as hvd

        hvd.init()
    strategy = tiresias.strategy()
else:
    mode, chief, strategy = "single", True, tf.distribute.get_strategy()
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((width,)), keras.layers.Dense(width), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.Adam(1e-3)  # two slots per variable: state = 3 × weights
x = tf.random.stateless_normal([8, width], seed=[0, 1])


@tf.autograph.experimental.do_not_convert  # plain Python branches, taken when traced
def replica_step() -> tf.Tensor:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x)))
    sources = model.trainable_variables
    if mode == "horovod":
        tape = hvd.DistributedGradientTape(tape)
        sources = [v.value for v in sources]
    grads = tape.gradient(loss, sources)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


@tf.function
def train_step() -> None:
    if mode == "allreduce":
        strategy.run(replica_step)
    else:
        replica_step()


def plain_loop(directory: Path) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    if (directory / "state.index").exists():
        checkpoint.read(str(directory / "state"))
    step = 0
    while not stop:
        train_step()
        step += 1
        progress.write_text(str(step))
    checkpoint.write(str(directory / "state"))
    for f in directory.iterdir():
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    os._exit(75)  # as the runtime exits: no interpreter teardown


if plain is not None:
    plain_loop(plain)
state = tiresias.State(model=model, optimizer=optimizer)
for step in state.steps(10**9):
    train_step()
    if chief:
        progress.write_text(str(step + 1))
