"""The compute-node side of the Slurm executor: what a Tiresias job's batch script runs.

``batch JOBDIR`` is the batch step. It reads the gang the coordinator planned for this start
(``JOBDIR/launch.json``, on a file system every node shares), refuses a start the coordinator
did not release (Slurm restarted the job on its own, e.g. after a node failure: exit 75, so the
job is requeued held again), and runs one ``srun`` step per node with one task per process.
Its exit code is Slurm's verdict on the whole start: 0 completed, 75 stopped to be resumed
(``RequeueExitHold=75`` requeues the job held and frees its GPUs), anything else failed.

``task JOBDIR RESTART NODE`` is one task: it picks its process by ``SLURM_LOCALID`` among
the node's, narrows ``CUDA_VISIBLE_DEVICES`` to the process' GPUs within those Slurm gave
the step, runs it with its output in the job's log directory and records its exit code. Slurm
signals every process of a step itself (proctrack), so the task only waits; its exit status
is its process'.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from coordinator.executors.node import PREEMPTION_DEATHS, private_file
from coordinator.service.executor import SETTLE
from tiresias_launch.contract import EXIT_CHECKPOINTED

#: Seconds between a task's looks at its job's fence file (a shared file system's read).
FENCE_LOOK = 0.2
CAUGHT = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT)


def launch_file(jobdir: Path) -> Path:
    return jobdir / "launch.json"


def exit_dir(jobdir: Path, restart: int) -> Path:
    """Where the processes of start ``restart`` leave their exit codes."""
    return jobdir / f"r{restart}" / "exits"


def preempt_file(jobdir: Path, restart: int) -> Path:
    """Written before start ``restart`` is signalled: a process that starts after the signal
    went out (Slurm signals only the steps running then) is signalled by its task."""
    return jobdir / f"r{restart}" / "preempt.json"


def fence_file(jobdir: Path) -> Path:
    """Names the job's newest restart: a task of an older one stops its process."""
    return jobdir / "fence.json"


def fenced(jobdir: Path, restart: int) -> bool:
    """Whether a newer start of the job has replaced start ``restart`` (``slurm.waits``)."""
    try:
        return int(json.loads(fence_file(jobdir).read_text())["restart"]) > restart
    except (OSError, ValueError, KeyError, TypeError):
        return False


def log_dir(jobdir: Path, node: str) -> Path:
    return jobdir / "logs" / node


def write_json(path: Path, data: Any, owner: tuple[int, int] | None = None) -> None:
    """Whole or not at all (readers on other nodes never see half a file), mode 0600, owned
    by ``owner`` (uid, gid) when given: the job's user, whose processes read it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        if owner is not None:
            os.fchown(fd, *owner)
        f.write(json.dumps(data))
    os.replace(tmp, path)


def exits(jobdir: Path, restart: int) -> dict[str, dict[str, Any]]:
    """``node/role-index`` → {node, role, task_index, code} of every process that exited."""
    found = {}
    directory = exit_dir(jobdir, restart)
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            found[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being written: the next look finds it whole
    return found


def verdict(codes: list[int]) -> int:
    """The batch step's exit code from its processes' codes: the first failure, else 75 when
    any process stopped to be resumed, else 0."""
    failures = [c for c in codes if c not in (0, EXIT_CHECKPOINTED) and c not in PREEMPTION_DEATHS]
    if failures:
        return failures[0] if failures[0] > 0 else 128 - failures[0]
    if any(c != 0 for c in codes):
        return EXIT_CHECKPOINTED
    return 0


def batch(jobdir: Path) -> int:
    gang = json.loads(launch_file(jobdir).read_text())
    slurm_restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    if slurm_restarts != gang["slurm_restarts"]:
        print(
            f"tiresias: Slurm started this job (restart {slurm_restarts}) without the "
            f"coordinator's release; it waits held for the coordinator",
            flush=True,
        )
        return EXIT_CHECKPOINTED
    restart = gang["restart"]
    if fenced(jobdir, restart) or preempt_file(jobdir, restart).exists():  # nothing ran
        return EXIT_CHECKPOINTED
    steps = []
    for i, (node, procs) in enumerate(gang["parts"].items()):
        gpus = len({g for p in procs for g in p["gpus"]})
        where = [f"--het-group={i}"] if gang.get("het") else [f"--nodelist={node}", "--nodes=1"]
        cmd = [
            "srun", *where, f"--ntasks={len(procs)}",
            "--kill-on-bad-exit=0", "--overlap", f"--job-name={gang['job_id']}-{node}",
            "--export=ALL",  # the batch step's own (else sbatch's --export list, narrowed)
            *([f"--gres=gpu:{gpus}"] if gpus else ["--gres=none"]),
            sys.executable, "-m", "coordinator.executors.slurm.task", "task",
            str(jobdir), str(restart), node,
        ]  # fmt: skip
        steps.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL))
    total = sum(map(len, gang["parts"].values()))
    settle_at: float | None = None
    while any(s.poll() is None for s in steps):
        done = exits(jobdir, restart)
        chief_done = any(e["role"] == "chief" and e["code"] == 0 for e in done.values())
        failed = verdict([e["code"] for e in done.values()]) not in (0, EXIT_CHECKPOINTED)
        if (chief_done or failed) and len(done) < total:
            settle_at = settle_at or time.monotonic() + SETTLE
            if time.monotonic() >= settle_at:
                break  # ending the batch step ends the job: Slurm kills the rest
        time.sleep(0.1)
    codes = [e["code"] for e in exits(jobdir, restart).values()]
    if len(codes) < total and not codes:  # no process got to run: the steps' own verdict
        codes = [s.returncode or 0 for s in steps if s.returncode is not None]
    chief = [e["code"] for e in exits(jobdir, restart).values() if e["role"] == "chief"]
    if chief == [0] and verdict(codes) == EXIT_CHECKPOINTED:
        return 0  # peers stopped after the chief completed
    return verdict(codes)


def task(jobdir: Path, restart: int, node: str) -> int:
    gang = json.loads(launch_file(jobdir).read_text())
    procs = gang["parts"][node]
    proc = procs[int(os.environ["SLURM_LOCALID"])]
    env = {**os.environ, **proc["env"]}
    node_gpus = sorted({g for p in procs for g in p["gpus"]})
    given = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    slurm_gpus = given.split(",") if given else [str(g) for g in node_gpus]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(
        slurm_gpus[node_gpus.index(g)] for g in proc["gpus"] if node_gpus.index(g) < len(slurm_gpus)
    )
    name = f"{proc['role']}-{proc['task_index']}"
    logs = log_dir(jobdir, node)
    logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    for sig in CAUGHT:  # Slurm signals the process itself; a handler (unlike SIG_IGN) is
        signal.signal(sig, lambda *_: None)  # reset by exec, so the process sees its signals
    with open(private_file(logs / f"{name}.log"), "ab") as out:
        out.write(f"=== {gang['job_id']} restart {restart} on {node} ===\n".encode())
        out.flush()
        try:
            child = subprocess.Popen(
                proc["argv"], env=env, cwd=proc.get("cwd") or None, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            with contextlib.suppress(OSError, ValueError, KeyError):  # signalled before it ran
                sig = json.loads(preempt_file(jobdir, restart).read_text())["signal"]
                child.send_signal(signal.Signals[sig])
            code = wait_unless_fenced(child, jobdir, restart, out)
        except OSError as e:
            out.write(f"tiresias: cannot start {proc['argv'][:1]} on {node}: {e}\n".encode())
            code = 127
    record = {"node": node, "role": proc["role"], "task_index": proc["task_index"], "code": code}
    write_json(exit_dir(jobdir, restart) / f"{node}-{name}.json", record)
    return code if code >= 0 else 128 - code


def wait_unless_fenced(
    child: subprocess.Popen[bytes], jobdir: Path, restart: int, out: BinaryIO
) -> int:
    """The process' exit status; a process whose start a newer one replaced (its node lost
    to Slurm, this copy still running) is killed with everything it started."""
    while True:
        try:
            return child.wait(FENCE_LOOK)
        except subprocess.TimeoutExpired:
            if fenced(jobdir, restart):
                out.write(b"tiresias: a newer start of this job replaced this one; stopping\n")
                out.flush()
                with contextlib.suppress(OSError):
                    os.killpg(child.pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["batch"] and len(args) == 2:
        return batch(Path(args[1]))
    if args[:1] == ["task"] and len(args) == 4:
        return task(Path(args[1]), int(args[2]), args[3])
    print("usage: slurm_task batch JOBDIR | task JOBDIR RESTART NODE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
