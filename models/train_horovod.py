"""Train a reference model data-parallel with Horovod (Gloo) in a custom training loop.

Every rank draws its own step-seeded batches (shard = rank); gradients are averaged by
``hvd.DistributedGradientTape``; rank 0 alone logs and writes the final checkpoint. With
Tiresias installed the loop is preemptible (``tiresias-run --horovod --workers N``): every rank
restores the same checkpoint, the ranks agree on the step to stop at, rank 0 writes it.

    horovodrun --gloo -np 2 -H localhost:2 python models/train_horovod.py --model mlp --steps 5
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import horovod.tensorflow as hvd
import tensorflow as tf

# models/ is in the checkout, not in the wheel
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import common

try:
    import tiresias
except ImportError:  # plain Horovod: the same training, just not preemptible
    tiresias = None


def main(argv: Sequence[str] | None = None) -> None:
    parser = common.arg_parser(__doc__)
    parser.add_argument("--save", help="rank 0 writes a tf.train.Checkpoint here at the end")
    args = common.parse_args(parser, argv)
    hvd.init()
    model = common.build(args)
    # Linear LR scaling: the averaged gradient comes from size × batch-size examples.
    optimizer = common.optimizer(args.lr * hvd.size())
    optimizer.build(model.trainable_variables)  # create slots now so they can be broadcast
    hvd.broadcast_variables(common.tf_variables(model.variables + optimizer.variables), root_rank=0)
    step_fn = common.train_step(model, optimizer, wrap_tape=hvd.DistributedGradientTape)
    if tiresias:
        steps = tiresias.State(model=model, optimizer=optimizer).steps(args.steps)
    else:
        steps = range(args.steps)
    for step in steps:
        images, labels = common.batch(args, step, shard=hvd.rank())
        loss = step_fn(images, labels)
        if hvd.rank() == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            print(f"step {step} loss {float(loss):.4f} ranks {hvd.size()}", flush=True)
    if hvd.rank() == 0 and args.save:
        tf.train.Checkpoint(model=model, optimizer=optimizer).write(args.save)


if __name__ == "__main__":
    main()
