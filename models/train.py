"""Train a reference model in a custom training loop on synthetic, step-seeded data.

With Tiresias installed the loop is preemptible: ``tiresias.State`` restores the newest
checkpoint on start, and ``state.steps`` checkpoints and exits 75 when the job is preempted.
Without it, the same loop runs as plain TensorFlow. Under ``tiresias-run`` the strategy comes
from ``tiresias.strategy()``: ``--workers N`` trains data-parallel with
MultiWorkerMirroredStrategy; ``--ps M --workers N`` with ParameterServerStrategy, where this
script runs on the chief and schedules every step onto the workers.

    python models/train.py --model resnet50 --steps 20
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

# models/ is in the checkout, not in the wheel
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import common

try:
    import tiresias
except ImportError:  # plain TensorFlow: the same training, just not preemptible
    tiresias = None


def main(argv: Sequence[str] | None = None) -> None:
    args = common.parse_args(common.arg_parser(__doc__), argv)
    strategy = tiresias.strategy() if tiresias else tf.distribute.get_strategy()
    shard = tiresias.get_runtime().env.task_index if tiresias else 0
    with strategy.scope():
        model = common.build(args)
        optimizer = common.optimizer(args.lr)
    step_fn = common.train_step(model, optimizer, strategy=strategy)
    coordinator = None
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    if tiresias:
        steps = tiresias.State(model=model, optimizer=optimizer).steps(args.steps)
    else:
        steps = range(args.steps)
    for step in steps:
        images, labels = common.batch(args, step, shard=shard)
        if coordinator:
            loss = coordinator.schedule(step_fn, args=(images, labels))
        else:
            loss = step_fn(images, labels)
        if step % args.log_every == 0 or step == args.steps - 1:
            value = loss.fetch() if coordinator else loss  # fetch() waits for a worker
            print(f"step {step} loss {float(value):.4f}", flush=True)
    if coordinator:
        coordinator.join()  # every scheduled step has reached the parameter servers


if __name__ == "__main__":
    main()
