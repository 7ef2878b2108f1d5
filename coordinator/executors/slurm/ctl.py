"""Slurm's side of the Slurm executor: the commands it runs, the batch jobs it submits, how
Slurm's answers read, and what it keeps of each start."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.executors.node import RunAs, log_tail
from coordinator.executors.slurm.owner import PRIVATE_UMASK, identity_args, private_dirs
from coordinator.executors.slurm.task import log_dir
from coordinator.protocol import PartOutcome, Stopping
from coordinator.service.executor import ExecutorEvent, Gang, RunBegan
from tiresias_launch.contract import CHECKPOINT_DIR, EXIT_CHECKPOINTED

#: Slurm job names of Tiresias jobs: the prefix, then the job key.
PREFIX = "tiresias:"
#: Job states in which a start's processes may still be alive (their GPUs are busy).
ACTIVE = frozenset(
    {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "SIGNALING", "STAGE_OUT",
     "REQUEUE_FED", "REQUEUE_HOLD", "REQUEUED", "RESIZING", "STOPPED"}
)  # fmt: skip
WAITING = frozenset({"PENDING", "SPECIAL_EXIT"})
#: Node states and flags (sinfo's, lower case) of a node that is gone: its jobs are lost.
GONE = ("down", "unknown", "future", "power")
#: Those of a node that is up but takes no new jobs: its running jobs go on (an admin's or
#: Slurm's drain, e.g. after a prolog failure; a failing or maintenance node; a job's
#: processes Slurm is still ending there; a node not responding, as Slurm keeps its jobs
#: until it declares it DOWN after ``SlurmdTimeout``, and as a resumed node is until its
#: slurmd answers again).
DRAINED = ("drain", "fail", "maint", "completing", "not_responding")


class SlurmError(RuntimeError):
    """A Slurm command failed; the message has its standard error."""


class Slurm:
    """The Slurm commands the executor uses, against one partition."""

    def __init__(self, partition: str, env: Mapping[str, str] | None = None) -> None:
        self.partition = partition
        self.env = dict(os.environ if env is None else env)

    def run(self, *cmd: str, timeout: float = 30, umask: str | None = None) -> str:
        env = self.env if umask is None else {**self.env, "SLURM_UMASK": umask}
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SlurmError(f"{cmd[0]}: {e}") from None
        if done.returncode != 0:
            why = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
            raise SlurmError(f"{shlex.join(cmd)}: {why[0]}")
        return done.stdout

    def jobs(self) -> list[dict[str, Any]]:
        """The partition's jobs, finished ones too (``MinJobAge`` keeps them)."""
        return list(
            json.loads(self.run("squeue", "--json", "-t", "all", "-p", self.partition))["jobs"]
        )

    def nodes(self) -> list[dict[str, Any]]:
        out = json.loads(self.run("sinfo", "--json", "-p", self.partition))
        return [n for n in out["nodes"] if self.partition in n.get("partitions", [])]

    def submit(self, script: Path, args: Sequence[str]) -> str:
        """A batch job; its output file private to its user (``SLURM_UMASK``)."""
        return self.run("sbatch", "--parsable", f"--partition={self.partition}", *args,
                        str(script), umask=PRIVATE_UMASK).strip().split(";")[0]  # fmt: skip

    def release(self, slurm_id: str, nodes: Sequence[str] | None) -> None:
        """Let a held job start, on ``nodes`` (None: where it was submitted to)."""
        if nodes is not None:  # a requeued job may not start before its begin time (Slurm
            # waits out old credentials): the coordinator decided it starts now
            self.run("scontrol", "update", f"jobid={slurm_id}", f"NodeList={','.join(nodes)}",
                     "StartTime=now")  # fmt: skip
        self.run("scontrol", "release", slurm_id)

    def signal(self, slurm_id: str, sig: str) -> None:
        self.run("scancel", f"--signal={sig.removeprefix('SIG')}", slurm_id, timeout=5)

    def requeue_hold(self, slurm_id: str) -> None:
        self.run("scontrol", "requeuehold", slurm_id)

    def hold(self, slurm_id: str) -> None:
        self.run("scontrol", "hold", slurm_id)

    def cancel(self, slurm_id: str) -> None:
        self.run("scancel", slurm_id)


def gpu_count(gres: str) -> int:
    """GPUs in a sinfo GRES string: ``gpu:2``, ``gpu:a100:4(S:0-1)``, ``gpu:2,nic:1``."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def outcome(procs: Sequence[Mapping[str, Any]], stopping: Stopping | None) -> PartOutcome:
    """A node's part outcome from its processes' codes (None: killed, no code), as the agent
    judges it: failure first; a completed chief; under preemption, checkpointed only when the
    chief exited 75; a checkpoint nobody asked for; else killed."""
    codes = [p["code"] for p in procs]
    if any(c not in (0, EXIT_CHECKPOINTED, None) and c >= 0 for c in codes):
        return PartOutcome.FAILED
    chief = [p["code"] for p in procs if p["role"] == "chief"]
    if chief == [0] or (codes and all(c == 0 for c in codes)):
        return PartOutcome.COMPLETED
    if stopping == Stopping.PREEMPT:
        checkpointed = (chief or codes)[:1] == [EXIT_CHECKPOINTED]
        return PartOutcome.CHECKPOINTED if checkpointed else PartOutcome.PREEMPTED
    if EXIT_CHECKPOINTED in codes:
        return PartOutcome.CHECKPOINTED
    return PartOutcome.KILLED


def process_exit(jobdir: Path, exit: Mapping[str, Any]) -> dict[str, Any]:
    """A process' exit as ``PartExited`` carries it; a failure with its log's tail."""
    found = {k: exit[k] for k in ("role", "task_index", "code")}
    if exit["code"] not in (0, EXIT_CHECKPOINTED):
        name = f"{exit['role']}-{exit['task_index']}.log"
        found["log_tail"] = log_tail(log_dir(jobdir, exit["node"]) / name)
    return found


@dataclass
class Start:
    """One start of a Tiresias job as a Slurm job."""

    job_id: str
    job_key: str
    restart: int
    slurm_id: str
    nodes: tuple[str, ...]
    shape: tuple[tuple[int, int], ...]  # (GPUs, tasks) of each node
    slurm_restarts: int  # Slurm's restart count at which this start runs
    stopping: Stopping | None = None  # preempt or kill, once asked
    signal: str | None = None  # the preemption signal, until it is sent
    deadline: float | None = None  # after it: requeue held (preempt) or cancel (kill)
    ended: bool = False
    #: Once ended: whether the Slurm job waits held, to be released for the next start,
    #: and Slurm's restart count then.
    reusable: bool = False
    restarts_after: int = 0
    #: Wall-clock time before which the job may not be released: slurmd refuses a job's
    #: credentials issued in the second of its last requeue (or earlier).
    release_after: float = 0.0
    released: bool = True
    launched: float = 0.0  # wall time of the launch: Slurm's start times before it are stale
    began: bool = False  # whether Slurm's start time of it has been reported
    adopted: bool = False  # a plain sbatch job (slurm_adopt), not one of ours
    gang: Gang | None = None  # what was planned (None when found again after a restart)
    attempt: int = 1  # which try of this start (``waits``: a start that did not run)


def planned(
    gang: Gang, env: Mapping[str, str]
) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...], dict[str, list[dict[str, Any]]]]:
    """A gang's nodes, its shape ((GPUs, tasks) of each node) and each node's processes as
    the plan (``launch.json``) gives them to the tasks, ``env`` below their own."""
    nodes = tuple(sorted(gang.parts))
    shape = tuple(
        (len({g for p in gang.parts[n] for g in p.gpus}), len(gang.parts[n])) for n in nodes
    )
    parts = {
        node: [
            {"role": p.role, "task_index": p.task_index, "argv": list(p.argv),
             "env": {**env, **p.env}, "gpus": list(p.gpus), "cwd": p.cwd}
            for p in gang.parts[node]
        ]
        for node in nodes
    }  # fmt: skip
    return nodes, shape, parts


def batch_args(
    job_key: str,
    job_id: str,
    jobdir: Path,
    nodes: Sequence[str],
    shape: Sequence[tuple[int, int]],
    user: RunAs,
) -> list[str]:
    """``sbatch`` options of a held start: one allocation (``--nodes --nodelist
    --ntasks-per-node --gres``) when every node has the same GPUs and processes, else a
    heterogeneous job with one component per node (Slurm starts all of them together, or
    none); run as ``user`` with a login's environment (``slurm.owner``)."""
    args = [
        f"--job-name={PREFIX}{job_key}", f"--comment={job_id}", "--requeue", "--hold",
        "--open-mode=append", f"--output={jobdir}/slurm-%j.out", f"--chdir={jobdir}",
        *identity_args(user),
    ]  # fmt: skip
    if len(set(shape)) == 1:
        gpus, tasks = shape[0]
        return [*args, f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
                f"--ntasks-per-node={tasks}", *_gres(gpus)]  # fmt: skip
    for i, (node, (gpus, tasks)) in enumerate(zip(nodes, shape, strict=True)):
        args += [*([":"] if i else []), "--nodes=1", f"--nodelist={node}", f"--ntasks={tasks}",
                 *_gres(gpus)]  # fmt: skip
    return args


def _gres(gpus: int) -> list[str]:
    return [f"--gres=gpu:{gpus}"] if gpus else []


#: Where the coordinator's own code is: the batch step and its tasks import it from there.
CODE_ROOT = Path(__file__).resolve().parents[3]


def batch_script(jobdir: Path, python: str, user: RunAs) -> Path:
    """The batch step of every Tiresias start: the planned processes (``slurm_task``)."""
    script = jobdir / "batch.sh"
    fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchown(fd, user.uid, user.gid)
    with os.fdopen(fd, "w") as f:
        f.write(
            "#!/bin/sh\n# A Tiresias job: the coordinator plans, releases and preempts it.\n"
            f"PYTHONPATH={shlex.quote(str(CODE_ROOT))} exec {shlex.quote(python)} "
            f"-m coordinator.executors.slurm.task batch {shlex.quote(str(jobdir))}\n"
        )
    return script


def hand_over(gang: Gang, jobdir: Path, user: RunAs) -> None:
    """The directories the job's processes write (its start's, its checkpoints'), made
    and owned by the user they run as, private to them (Slurm runs them as that user)."""
    checkpoints = {p.env[CHECKPOINT_DIR] for ps in gang.parts.values() for p in ps
                   if CHECKPOINT_DIR in p.env}  # fmt: skip
    private_dirs(user, (jobdir, jobdir / f"r{gang.restart}", *map(Path, checkpoints)))


#: Exit codes of a batch step that could not execute (as a shell reports them).
CANNOT_EXECUTE = (126, 127)


def start_failure(job: Mapping[str, Any], jobdir: Path) -> tuple[int, str] | None:
    """Whether Slurm's job ended before any process of it ran: its batch step could not
    execute (exit 126 or 127), or its launch failed (a prolog failure requeues it held);
    the exit code and Slurm's output of it (what slurmstepd said), else None."""
    status = int(job.get("exit_code") or 0)
    code = status >> 8 if status & 0x7F == 0 else 128 + (status & 0x7F)
    if not (launch_failed(job) or (str(job["job_state"]) == "FAILED" and code in CANNOT_EXECUTE)):
        return None
    said = log_tail(jobdir / f"slurm-{job['job_id']}.out").strip()
    reason = str(job.get("state_reason") or "")
    return code or 1, f"the batch step did not start (exit {code}, {reason}): {said}"


def launch_failed(job: Mapping[str, Any]) -> bool:
    """Whether Slurm requeued the job held on its own (asked by nobody, before any of its
    processes ran: the caller knows): it could not launch it, e.g. its prolog failed on a
    node, which Slurm drains."""
    return str(job["job_state"]) in WAITING and not live(job)


def live(job: Mapping[str, Any] | None) -> bool:
    """Whether Slurm runs the job, or will once it can (released, not held)."""
    if job is None:
        return False
    state = str(job["job_state"])
    held = state == "SPECIAL_EXIT" or "held" in str(job.get("state_reason", "")).lower()
    return state in ACTIVE or (state == "PENDING" and not held)


def began(start: Start, job: Mapping[str, Any]) -> list[ExecutorEvent]:
    """Slurm's start time of ``start`` once Slurm has started it (its next scheduling
    pass after the release, not the launch): the core serves the run from then."""
    began = float(job.get("start_time") or 0)
    if str(job["job_state"]) in WAITING or began < start.launched - 1:  # Slurm: whole s
        return []
    start.began = True
    return [RunBegan(start.job_id, start.restart, began)]
