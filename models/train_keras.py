"""Train a reference model with plain Keras ``model.fit`` on synthetic data.

Deliberately free of any Tiresias import: it is the "unmodified user script" case. Under
``tiresias-run`` the launcher's wrapper instruments ``fit`` to checkpoint on preemption and
restore on resume; under plain ``python`` it simply trains. Like any distributed TensorFlow
script it trains under MultiWorkerMirroredStrategy when ``TF_CONFIG`` names a cluster
(``tiresias-run --workers N``; ``--batch-size`` is then the global batch, and Keras 3 ``fit``
does not support that strategy: run with ``TF_USE_LEGACY_KERAS=1``).

    python models/train_keras.py --model resnet50 --steps 20 --epochs 2
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

# models/ is in the checkout, not in the wheel
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import common


def main(argv: Sequence[str] | None = None) -> None:
    parser = common.arg_parser(__doc__)
    parser.add_argument("--epochs", type=int, default=5, help="--steps are split over epochs")
    args = common.parse_args(parser, argv)
    if not 1 <= args.epochs <= args.steps:
        parser.error(f"--epochs must be in 1..--steps ({args.steps})")
    if os.environ.get("TF_CONFIG"):
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    with strategy.scope():
        model = common.build(args)
        model.compile(optimizer=common.optimizer(args.lr), loss=common.loss_fn())
    model.fit(
        common.dataset(args),
        epochs=args.epochs,
        steps_per_epoch=args.steps // args.epochs,
        shuffle=False,  # the batches are already a function of the step
        verbose=2,
    )


if __name__ == "__main__":
    main()
