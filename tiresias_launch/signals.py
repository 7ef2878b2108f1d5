"""The preemption flag: set from a signal handler, read at iteration boundaries.

The handler only stores a Python attribute (async-signal-safe from Python's point of view:
CPython runs it between bytecodes on the main thread), so a signal arriving in the middle of a
TensorFlow op never interrupts the op; the training loop notices at the next boundary.

A process can only be stopped at a boundary once something checkpointable (``State``, Keras
``fit``) has registered with the runtime. Before that (``claimed`` is false) the handler gives
the signal its default action, so a script with nothing to checkpoint dies as it would under
plain ``python`` instead of swallowing the preemption and waiting for SIGKILL.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType


class PreemptFlag:
    """Remembers which preemption signal arrived first (``None`` until one does)."""

    def __init__(self, claimed: Callable[[], bool] = lambda: True) -> None:
        self.received: int | None = None
        self.claimed = claimed
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

    @staticmethod
    def release(signals: Iterable[signal.Signals]) -> None:
        """Give ``signals`` back their default action (nothing here can checkpoint)."""
        for sig in signals:
            signal.signal(sig, signal.SIG_DFL)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.claimed():
            self.set(signum)
            return
        name = signal.Signals(signum).name
        print(
            f"tiresias: {name} before anything checkpointable started; stopping as {name} "
            "would (nothing was trained since the last checkpoint)",
            flush=True,
        )
        sys.stderr.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


class HeldDuringWrites:
    """Holds the preemption signals back while a script writes its own backup, then hands
    one that arrived to the handler it had before (its default action: the process stops as
    a plain run would, once the write is whole). Keras 3's ``BackupAndRestore`` overwrites
    its weights file in place, then its metadata: a stop in between leaves a backup that
    cannot be read, or one epoch's weights under the number of the epoch before."""

    def __init__(self, signals: Iterable[signal.Signals]) -> None:
        self.signals = tuple(signals)
        self.pending: int | None = None

    @contextmanager
    def write(self) -> Iterator[None]:
        """Hold the signals for the block (only the main thread can; elsewhere it is a
        plain block)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        before = {sig: signal.signal(sig, self._hold) for sig in self.signals}
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)
            if self.pending is not None:
                arrived, self.pending = self.pending, None
                sys.stdout.flush()
                sys.stderr.flush()
                signal.raise_signal(arrived)

    def _hold(self, signum: int, _frame: FrameType | None) -> None:
        if self.pending is None:
            self.pending = signum
