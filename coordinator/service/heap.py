"""Memory a coordinator freed goes back to the system.

CPython hands blocks over 512 bytes, and C libraries (SQLite, ZeroMQ) all their memory, to
the C allocator. glibc returns freed memory to the system only from the top of its heap, so
the transient buffers of each batch of finished jobs (their archive rows, final views,
messages) leave free holes below live blocks, and RSS grew with every job ever run (about
0.9 KB a job on 1,000 nodes) while the memory in use stayed flat. ``malloc_trim`` hands the
free pages of every arena back. Elsewhere than glibc this does nothing."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

#: Retired jobs between two trims: one trim (a few ms) per batch of this many finished jobs.
TRIM_EVERY = 1000


def _malloc_trim() -> Callable[[int], object] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_TRIM = _malloc_trim()


def release() -> bool:
    """Give the C allocator's free pages back to the system; whether it could."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def crossed(before: int, after: int) -> bool:
    """Whether retiring jobs from ``before`` to ``after`` in all passed a multiple of
    ``TRIM_EVERY``."""
    return before // TRIM_EVERY != after // TRIM_EVERY
