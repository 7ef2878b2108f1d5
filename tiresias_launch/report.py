"""Progress reports to the coordinator, built and sent off the training thread.

The training thread only bumps counters under an uncontended lock (well under a microsecond).
A daemon thread wakes every ``interval`` seconds, turns the counters into one ``report``
message (docs/contracts.md) and sends it on a DEALER socket without blocking; while the
coordinator is unreachable messages wait in a bounded queue that drops the oldest.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import msgpack
import zmq

from tiresias_launch.contract import PROTOCOL_VERSION
from tiresias_launch.env import LaunchEnv

#: How long the last report may wait for an unreachable coordinator (delays the exit).
FINAL_PATIENCE = 0.25
log = logging.getLogger(__name__)


def checkpoint_line(c: Mapping[str, Any]) -> str:
    """``checkpoint at step N (epoch e, batch b; X MB in Y s)`` from a report's
    ``checkpoint``; the epoch is counted from 1 as Keras prints it, the batch is the number of
    batches of that epoch already done."""
    where = f"epoch {c['epoch'] + 1}, batch {c['batch']}; " if c.get("epoch") is not None else ""
    return (
        f"checkpoint at step {c['step']} ({where}{c['bytes'] / 1e6:.3g} MB in {c['seconds']:.2f} s)"
    )


def resume_line(w: Mapping[str, Any]) -> str:
    """``resumed from step N (restore Y s, first step Z s)`` from a report's ``warmup``."""
    return (
        f"resumed from step {w['step']} "
        f"(restore {w['restore']:.2f} s, first step {w['first_step']:.2f} s)"
    )


class GpuClock:
    """Cumulative GPU-seconds of this process: NVML accounting where the driver keeps it for
    our pid, otherwise allocated GPUs × wall time (what the scheduler charges anyway)."""

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus
        self.start = time.monotonic()
        self._handles = self._nvml_handles() if gpus else []

    @staticmethod
    def _nvml_handles() -> list[Any]:
        try:
            import pynvml

            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            indices = [int(i) for i in visible.split(",") if i.strip().isdigit()]
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
            for h in handles:  # accounting must be on, or per-process time is unknown
                pynvml.nvmlDeviceGetAccountingStats(h, os.getpid())
            return handles
        except Exception:  # no NVML, no GPU, or accounting off: fall back to wall time
            return []

    def seconds(self) -> float:
        if self._handles:
            import pynvml

            try:
                used: float = sum(
                    pynvml.nvmlDeviceGetAccountingStats(h, os.getpid()).time / 1000.0
                    for h in self._handles
                )
                return used
            except Exception:
                self._handles = []
        return self.gpus * (time.monotonic() - self.start)


class Reporter:
    """Aggregates step timings and one-off facts; ``close`` flushes what is left."""

    def __init__(self, env: LaunchEnv, interval: float = 1.0, queue_size: int = 64) -> None:
        self.env = env
        self.interval = interval
        self.step = 0
        self._iterations = 0
        self._iter_seconds = 0.0
        self._pending: dict[str, Any] = {}
        self._keepalive = False
        self._lock = threading.Lock()
        self._queue: collections.deque[bytes] = collections.deque(maxlen=queue_size)
        self.dropped = 0
        self._gpu = GpuClock(env.gpus)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if env.coordinator:
            self._thread = threading.Thread(target=self._run, name="tiresias-report", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self._thread is not None

    def step_done(self, step: int, seconds: float, iterations: int = 1) -> None:
        """Called on the training thread: ``iterations`` more done in ``seconds`` (one per
        iteration, or those since a script's last ``tiresias.report(step=…)``), ``step``
        done in all."""
        with self._lock:
            self.step = step
            self._iterations += iterations
            self._iter_seconds += seconds

    def keepalive(self) -> None:
        """Ask for a report even without iterations (servers: their GPU time still counts)."""
        with self._lock:
            self._keepalive = True

    def note(self, **fields: Any) -> None:
        """One-off facts (checkpoint, warmup, skew, tensor_bytes, checkpointable, notice,
        resizable) for the next report."""
        with self._lock:
            self._pending.update(fields)

    def message(self) -> dict[str, Any] | None:
        """Drain the counters into one report; ``None`` when there is nothing new."""
        with self._lock:
            if not (self._iterations or self._pending or self._keepalive):
                return None
            n, total, pending = self._iterations, self._iter_seconds, self._pending
            self._iterations, self._iter_seconds, self._pending = 0, 0.0, {}
            self._keepalive = False
            step = self.step
        e = self.env
        return {
            "type": "report",
            "v": PROTOCOL_VERSION,
            "job_id": e.job_id,
            "role": e.role,
            "task_index": e.task_index,
            "restart": e.restart,
            "step": step,
            "iterations": n,
            "iter_time": total / n if n else 0.0,
            "gpu_time": self._gpu.seconds(),
            "checkpoint": pending.get("checkpoint"),
            "warmup": pending.get("warmup"),
            "skew": pending.get("skew"),
            "tensor_bytes": pending.get("tensor_bytes"),
            "token": e.token,
            "checkpointable": pending.get("checkpointable"),
            "checkpointable_why": pending.get("checkpointable_why"),
            "notice": pending.get("notice"),
            "resizable": pending.get("resizable"),
        }

    def _enqueue(self) -> None:
        msg = self.message()
        if msg is not None:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
            self._queue.append(msgpack.packb(msg))

    def _run(self) -> None:
        # A context of its own, terminated below: only ctx.term() waits (up to LINGER) for
        # zmq's I/O thread to put the last report on the wire; a process that exits right
        # after close() would otherwise drop it.
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IMMEDIATE, 1)  # never queue inside zmq for an absent peer
        sock.setsockopt(zmq.LINGER, 1000)
        if self.env.server_key is not None:  # CURVE with a throwaway key: the token says who
            sock.curve_serverkey = self.env.server_key.encode()
            sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
        sock.connect(self.env.coordinator or "")
        try:
            while True:
                stopping = self._stop.wait(self.interval)
                self._enqueue()
                self._send(sock, patience=FINAL_PATIENCE if stopping else 0.0)
                if stopping:
                    return
        finally:
            sock.close()
            ctx.term()

    def _send(self, sock: zmq.Socket[bytes], patience: float) -> None:
        deadline = time.monotonic() + patience
        while self._queue:
            try:
                sock.send(self._queue[0], zmq.NOBLOCK)
            except zmq.Again:
                if time.monotonic() >= deadline:
                    return  # coordinator unreachable: keep (bounded) and retry next tick
                time.sleep(0.01)
                continue
            self._queue.popleft()

    def close(self) -> None:
        """Send the last report (waiting up to FINAL_PATIENCE for the coordinator) and stop."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=3.0)
