"""Helpers for launcher tests: spawn a planned gang as local processes, wait on conditions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from coordinator.gang import GangRequest, ProcessSpec, free_local_port, plan

SCRIPTS = Path(__file__).parent / "scripts"
QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}


@dataclass
class Gang:
    specs: list[ProcessSpec]
    procs: list[subprocess.Popen[bytes]]
    logs: list[Path]

    def signal(self, sig: int = signal.SIGTERM) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(sig)

    def wait(self, timeout: float) -> list[int]:
        """Exit codes of every process (chief first); kills and fails on timeout."""
        deadline = time.monotonic() + timeout
        try:
            return [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in self.procs]
        except subprocess.TimeoutExpired:
            for p in self.procs:
                p.kill()
            raise AssertionError("gang did not exit in time:\n" + self.tails()) from None

    def tails(self, lines: int = 25) -> str:
        out = []
        for spec, log in zip(self.specs, self.logs, strict=True):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {spec.role} {spec.task_index} ---\n" + "\n".join(text))
        return "\n".join(out)


def start(
    request: GangRequest,
    workdir: Path,
    job_id: str = "job",
    restart: int = 0,
    coordinator: str | None = None,
    env: Mapping[str, str] | None = None,
    placement: Mapping[str, Sequence[int]] | None = None,
) -> Gang:
    """Plan ``request`` on localhost and spawn every process like a node agent would."""
    placement = placement or {"localhost": list(range(request.workers))}
    specs = plan(
        request, job_id, placement, coordinator, workdir / "ckpt", restart, free_local_port
    )
    procs, logs = [], []
    for spec in specs:
        log = workdir / f"{spec.role}-{spec.task_index}-r{restart}.log"
        child_env = {**os.environ, **QUIET_TF, **spec.env, **(env or {})}
        child_env["CUDA_VISIBLE_DEVICES"] = ""  # CPU-only test machine
        with log.open("wb") as fh:
            procs.append(
                subprocess.Popen(
                    [sys.executable, *spec.argv[1:]],
                    env=child_env,
                    cwd=workdir,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                )
            )
        logs.append(log)
    return Gang(specs, procs, logs)


def read_steps(path: Path) -> list[tuple[int, str]]:
    """(step, value) lines of a custom_loop/fit log, without the final "done" line."""
    rows = []
    for line in path.read_text().splitlines():
        head, value = line.split(" ", 1)
        if head != "done":
            rows.append((int(head), value))
    return rows
