"""What the local Slurm's daemons have in common (``tools/slurm_local.py``,
``tools/slurm_accounting.py``): each runs in the foreground with its output under
``ROOT/log``; starting waits on a condition while watching that none has exited; stopping
ends them newest first."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self


class Daemons:
    """``with Subclass(...) as d:`` — its ``start`` has run inside, and ``stop`` after."""

    root: Path
    env: dict[str, str]

    def __init__(self) -> None:
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._terminate()

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = (self.root / "log" / f"{name}.out").open("ab")
        self._procs[name] = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=log)

    def _start_munged(self, munge: Path, timeout: float) -> None:
        """munged with a new key, its socket and state in ``munge``."""
        munge.mkdir(parents=True, exist_ok=True)
        munge.chmod(0o711)
        key = munge / "key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self._spawn("munged", ["munged", "-F", "-f", f"--socket={munge}/socket",
                               f"--key-file={key}", f"--pid-file={munge}/pid",
                               f"--log-file={munge}/log", f"--seed-file={munge}/seed"])  # fmt: skip
        self._wait((munge / "socket").exists, timeout, "munged's socket")

    def _wait(self, cond: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n, p in self._procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(
                    f"{', '.join(dead)} exited while waiting for {what}; see {self.root}/log"
                )
            if cond():
                return
            time.sleep(0.05)
        raise RuntimeError(f"timed out after {timeout}s waiting for {what}; see {self.root}/log")

    def _terminate(self) -> None:
        for name in reversed(list(self._procs)):
            proc = self._procs.pop(name)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
