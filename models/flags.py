"""The training scripts' common flags, without importing a framework (the TensorFlow and the
PyTorch scripts share them)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def arg_parser(description: str | None, models: Sequence[str]) -> argparse.ArgumentParser:
    """Flags common to all scripts; a script adds its own before calling ``parse_args``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default="mlp", choices=models)
    p.add_argument("--image-size", type=int, help="default: the model's smallest size (CPU)")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=8, help="per process (per rank)")
    p.add_argument("--steps", type=int, default=100, help="total training steps")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (momentum 0.9)")
    p.add_argument("--seed", type=int, default=0, help="data of step s depends on (seed, s)")
    p.add_argument("--log-every", type=int, default=10, help="steps between progress lines")
    return p
