"""The preemption flag: set from a signal handler, read at iteration boundaries.

The handler only stores a Python attribute (async-signal-safe from Python's point of view:
CPython runs it between bytecodes on the main thread), so a signal arriving in the middle of a
TensorFlow op never interrupts the op; the training loop notices at the next boundary.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from types import FrameType


class PreemptFlag:
    """Remembers which preemption signal arrived first (``None`` until one does)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._arrived = threading.Event()

    def __bool__(self) -> bool:
        return self.received is not None

    def set(self, signum: int = signal.SIGTERM) -> None:
        """Mark preemption requested (the signal handler, or a test/bench calling directly)."""
        if self.received is None:
            self.received = signum
            self._arrived.set()

    def wait(self) -> None:
        """Block until a preemption signal has arrived (at once if one already has). The
        main thread wakes in slices so that CPython can run the signal handler."""
        while not self._arrived.wait(0.2):
            pass

    def install(self, signals: Iterable[signal.Signals]) -> None:
        """Route ``signals`` to this flag; only possible from the main thread."""
        for sig in signals:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.set(signum)
