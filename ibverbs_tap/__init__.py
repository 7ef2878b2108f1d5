"""ibverbs-tap: per-peer message-size histograms of TCP and RDMA verbs traffic, and the skew
S_J the Tiresias placement needs (paper §3.3.1).

A preload library (``library_path()``) counts into a shared-memory file per process; this
package reads those files and turns per-parameter-server bytes into S_J.
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

from ibverbs_tap.profile import (
    Histogram,
    NotTracedError,
    Peer,
    ProcessGoneError,
    ProcessProfile,
    TapError,
)
from ibverbs_tap.reading import read_file, read_process, read_tree
from ibverbs_tap.skew import (
    assign_tensors,
    bytes_per_ps,
    largest_class_share,
    ps_addresses_from_tf_config,
    skew,
    skew_from_tensor_sizes,
)

__all__ = [
    "Histogram",
    "NotTracedError",
    "Peer",
    "ProcessGoneError",
    "ProcessProfile",
    "TapError",
    "assign_tensors",
    "bytes_per_ps",
    "largest_class_share",
    "library_path",
    "ps_addresses_from_tf_config",
    "read_file",
    "read_process",
    "read_tree",
    "skew",
    "skew_from_tensor_sizes",
]


def library_path() -> str:
    """Absolute path of the preload library built at install time."""
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = here / f"_tap{suffix}"
        if candidate.exists():
            return str(candidate)
    raise TapError(
        f"the ibverbs-tap preload library is not built in {here}; "
        "run `pip install -e .` (it needs a C compiler)"
    )
