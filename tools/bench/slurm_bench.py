"""Slurm executor against the agent fleet, in one run on one machine (results in docs/slurm.md).

The same scenario runs through a real coordinator twice: once with ``tiresias-agent`` on a
2-GPU node, once with ``--executor slurm`` on a real local Slurm (``tools/slurm_local.py``,
one 2-GPU node). Each round, on the coordinator's manual clock (2D-LAS, threshold 4 GPU-s):

- ``submit→start``: a 2-GPU fake job is submitted; seconds until its chief prints its first
  line (the coordinator decided, the executor launched, the process started).
- ``preempt→free``: once it is demoted, a 1-GPU job arrives and preempts it; seconds from that
  submit until the victim has exited (``preempt→exit``: signal, checkpoint, exit 75) and until
  the newcomer's process starts on the freed GPUs (``preempt→start``).
- ``resume``: seconds from the newcomer's exit until the victim runs again.

    sudo python tools/bench/slurm_bench.py [--rounds 5]

Both setups run side by side and their rounds alternate (agents, Slurm, agents, …), so the
machine's load falls on both alike. Beside the medians of each latency, ``cpu s`` is the
median CPU time per round of the processes that run the executor (the coordinator with the
commands it ran, and the agent, or slurmctld and slurmd with theirs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from coordinator.service.client import Client  # noqa: E402
from tools.slurm_local import LocalSlurm, require  # noqa: E402

FAKE_JOB = REPO / "examples" / "fake_job.py"


def wait(pred: Callable[[], Any], what: str, timeout: float = 120.0) -> float:
    """Poll ``pred`` every 5 ms; the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return time.monotonic()
        time.sleep(0.005)
    raise RuntimeError(f"timed out waiting for {what}")


class Setup:
    """A coordinator (and, for agents, one agent) as processes under ``tmp``."""

    def __init__(self, tmp: Path, executor: str, env: dict[str, str]) -> None:
        self.tmp, self.executor = tmp, executor
        self.address = f"ipc://{tmp}/coordinator.sock"
        self.env = {**env, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        args = ["--executor", executor, "--slurm-partition", "tiresias"]
        self.procs = [self._spawn("coordinator", "coordinator.service.cli", "--bind",
                                  self.address, "--state", str(tmp / "state"), "--manual-clock",
                                  "--thresholds", "4", "--allow-root-jobs", *args)]  # fmt: skip
        self.client = Client(self.address, None, timeout=10)
        wait(self._answers, "the coordinator")
        if executor == "agents":
            self.procs.append(self._spawn("agent", "coordinator.executors.agents.cli",
                                          "--coordinator", self.address, "--gpus", "2", "--name",
                                          "n1", "--workdir", str(tmp / "agent")))  # fmt: skip
        wait(lambda: self.client.request("nodes")["nodes"], "the node")

    def _spawn(self, name: str, module: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("ab")
        cmd = [sys.executable, "-m", module, *args]
        return subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def _answers(self) -> bool:
        try:
            return self.client.request("nodes", timeout=0.5) is not None
        except Exception:
            return False

    def submit(self, gpus: int, *args: str) -> str:
        argv = [str(FAKE_JOB), *args]
        return str(self.client.request("submit", argv=argv, workers=gpus)["job_id"])

    def chief_log(self, job_id: str) -> str:
        key = self.client.request("status", job_id=job_id)["job"]["key"]
        path = (
            self.tmp / "agent" / "logs" / key / "chief-0.log"
            if self.executor == "agents"
            else self.tmp / "state" / "slurm" / key / "logs" / "n1" / "chief-0.log"
        )
        return path.read_text() if path.exists() else ""

    def state(self, job_id: str) -> str:
        return str(self.client.request("status", job_id=job_id)["job"]["state"])

    def round(self) -> dict[str, float]:
        t0 = time.monotonic()
        victim = self.submit(2, "--steps", "1000000", "--step-time", "0.01", "--hold-at", "1")
        started = wait(lambda: "start at step 0" in self.chief_log(victim), "the victim")
        wait(lambda: "holding at step 1" in self.chief_log(victim), "the hold")
        self.client.request("advance", seconds=3.0)  # demoted
        t1 = time.monotonic()
        newcomer = self.submit(1, "--steps", "2", "--step-time", "0.01")
        exited = wait(lambda: "checkpointed at step 1" in self.chief_log(victim), "the victim")
        began = wait(lambda: "start at step 0" in self.chief_log(newcomer), "the newcomer")
        ended = wait(lambda: self.state(newcomer) == "completed", "the newcomer's end")
        resumed = wait(lambda: "start at step 1 (restart 1" in self.chief_log(victim), "resume")
        self.client.request("cancel", job_id=victim)
        wait(lambda: self.state(victim) == "cancelled", "the cancel")
        return {
            "submit→start": started - t0,
            "preempt→exit": exited - t1,
            "preempt→start": began - t1,
            "resume": resumed - ended,
        }

    def close(self) -> None:
        self.client.close()
        for p in reversed(self.procs):
            p.terminate()
            p.wait(20)


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU of these processes and their waited-for children, in seconds."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per executor (default 5)")
    args = ap.parse_args()
    require("slurm_bench")
    rounds: dict[str, list[dict[str, float]]] = {"agents": [], "slurm": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with LocalSlurm(tmp / "cluster", {"n1": 2}) as slurm:
            setups = {}
            try:
                for executor in rounds:
                    (tmp / executor).mkdir()
                    setups[executor] = Setup(tmp / executor, executor, {**os.environ, **slurm.env})
                daemons = [p.pid for name, p in slurm.procs().items() if name != "munged"]
                for _ in range(args.rounds):
                    for executor, setup in setups.items():
                        pids = [p.pid for p in setup.procs]
                        pids += daemons if executor == "slurm" else []
                        cpu = cpu_seconds(pids)
                        row = setup.round()
                        rounds[executor].append({**row, "cpu s": cpu_seconds(pids) - cpu})
            finally:
                for setup in setups.values():
                    setup.close()
    results = {
        e: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for e, rs in rounds.items()
    }
    print(f"{'median seconds':16}" + "".join(f"{k:>16}" for k in results["agents"]))
    for executor, row in results.items():
        print(f"{executor:16}" + "".join(f"{v:16.3f}" for v in row.values()))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
