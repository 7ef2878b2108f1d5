"""The job-process environment contract (docs/contracts.md) as one frozen, validated object.

Everything in the runtime reads its role from here, so a bad value fails once, at start, with
a message that names the variable instead of surfacing later as a confusing TensorFlow error.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tiresias_launch.contract import (
    CHECKPOINT_DIR,
    COORDINATOR,
    ELASTIC_BATCH,
    ELASTIC_BATCHES,
    GPUS,
    HOLD_AT_STEP,
    JOB_ID,
    JOB_KEY,
    JOB_TOKEN,
    KEEP_CHECKPOINTS,
    MAX_WORKERS,
    MODE,
    MODES,
    NUM_PS,
    NUM_WORKERS,
    PREEMPT_SIGNAL,
    RESTART_COUNT,
    ROLE,
    ROLES,
    SERVER_KEY,
    TASK_INDEX,
)

#: Signals that always mean "preempt", whatever TIRESIAS_PREEMPT_SIGNAL names.
ALWAYS_HONOURED = (signal.SIGUSR1, signal.SIGUSR2)


class EnvError(ValueError):
    """A contract variable is missing or malformed; the message names it."""


@dataclass(frozen=True)
class LaunchEnv:
    """This process's place in its job. ``coordinator is None`` means pass-through mode."""

    coordinator: str | None
    job_id: str
    job_key: str  # the job's identity in checkpoints (the job id in pass-through mode)
    role: str
    task_index: int
    num_workers: int
    num_ps: int
    mode: str
    checkpoint_dir: Path
    restart: int
    preempt_signal: signal.Signals
    gpus: int
    keep_checkpoints: int
    tf_config: Mapping[str, object] | None
    #: TIRESIAS_HOLD_AT_STEP: the run after r preemptions holds at the r-th of these steps.
    hold_at_steps: tuple[int, ...] = ()
    token: str | None = None
    server_key: str | None = None
    #: TIRESIAS_MAX_WORKERS: the world the job's global batch is defined at (None: rigid)
    max_workers: int | None = None
    #: TIRESIAS_ELASTIC_BATCH: "scale" the per-rank batch at a smaller world, or "accumulate"
    elastic_batch: str = "scale"

    @property
    def elastic(self) -> bool:
        """Whether the job may run at other world sizes (it asked for a range of workers)."""
        return self.max_workers is not None

    @property
    def is_chief(self) -> bool:
        """The one process that writes checkpoints and decides when a PS job stops."""
        return self.role == "chief"

    @property
    def multi_process(self) -> bool:
        """Whether steps must be agreed with peers (allreduce and Horovod gangs)."""
        return self.mode in ("allreduce", "horovod") and self.num_workers > 1

    @property
    def preempt_signals(self) -> tuple[signal.Signals, ...]:
        return tuple(dict.fromkeys((self.preempt_signal, *ALWAYS_HONOURED)))


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r}: expected an integer") from None
    if value < minimum:
        raise EnvError(f"{name}={value}: must be >= {minimum}")
    return value


def _steps(env: Mapping[str, str], name: str) -> tuple[int, ...]:
    """A comma-separated list of step numbers (each >= 1); empty when unset."""
    raw = env.get(name) or ""
    parts = [p.strip() for p in raw.split(",")] if raw.strip() else []
    return tuple(_int({name: p}, name, 0, minimum=1) for p in parts)


def _choice(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = env.get(name) or default
    if value not in allowed:
        raise EnvError(f"{name}={value!r}: expected one of {', '.join(allowed)}")
    return value


def _signal(env: Mapping[str, str]) -> signal.Signals:
    raw = env.get(PREEMPT_SIGNAL) or "SIGTERM"
    name = raw.upper() if raw.upper().startswith("SIG") else "SIG" + raw.upper()
    try:
        return signal.Signals[name]
    except KeyError:
        raise EnvError(f"{PREEMPT_SIGNAL}={raw!r}: not a signal name (e.g. SIGTERM)") from None


def _tf_config(env: Mapping[str, str]) -> Mapping[str, object] | None:
    raw = env.get("TF_CONFIG")
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise EnvError(f"TF_CONFIG is not valid JSON: {e}") from None
    if not isinstance(value, dict) or "cluster" not in value:
        raise EnvError("TF_CONFIG must be a JSON object with a 'cluster' key")
    return value


def _script_name() -> str:
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    return Path(argv0).stem or "python"


def parse(env: Mapping[str, str] | None = None) -> LaunchEnv:
    """Read the contract from ``env`` (default ``os.environ``); raise EnvError if malformed.

    Without a job id (a plain ``python script.py``) checkpoints go to
    ``./tiresias-checkpoints/<script name>`` so a user can still preempt and resume by hand.
    """
    env = os.environ if env is None else env
    coordinator = env.get(COORDINATOR) or None
    if coordinator is not None and not coordinator.startswith(("tcp://", "ipc://", "inproc://")):
        raise EnvError(f"{COORDINATOR}={coordinator!r}: expected a ZeroMQ address tcp://host:port")
    job_id = env.get(JOB_ID) or ""
    if coordinator is not None and not job_id:
        raise EnvError(f"{JOB_ID} must be set when {COORDINATOR} is")
    mode = _choice(env, MODE, "single", MODES)
    role = _choice(env, ROLE, "chief", ROLES)
    num_workers = _int(env, NUM_WORKERS, 1, minimum=1)
    num_ps = _int(env, NUM_PS, 0)
    task_index = _int(env, TASK_INDEX, 0)
    max_workers = _int(env, MAX_WORKERS, 0, minimum=1) or None
    if mode == "ps" and num_ps < 1:
        raise EnvError(f"{MODE}=ps needs {NUM_PS} >= 1")
    if mode != "ps" and role == "ps":
        raise EnvError(f"{ROLE}=ps only exists in {MODE}=ps")
    ckpt = env.get(CHECKPOINT_DIR)
    if ckpt:
        checkpoint_dir = Path(ckpt)
    else:
        checkpoint_dir = Path.cwd() / "tiresias-checkpoints" / (job_id or _script_name())
    return LaunchEnv(
        coordinator=coordinator,
        job_id=job_id or _script_name(),
        job_key=env.get(JOB_KEY) or job_id or _script_name(),
        role=role,
        task_index=task_index,
        num_workers=num_workers,
        num_ps=num_ps,
        mode=mode,
        checkpoint_dir=checkpoint_dir,
        restart=_int(env, RESTART_COUNT, 0),
        preempt_signal=_signal(env),
        gpus=_int(env, GPUS, 0),
        keep_checkpoints=_int(env, KEEP_CHECKPOINTS, 3, minimum=1),
        tf_config=_tf_config(env),
        hold_at_steps=_steps(env, HOLD_AT_STEP),
        token=env.get(JOB_TOKEN) or None,
        server_key=env.get(SERVER_KEY) or None,
        max_workers=max_workers,
        elastic_batch=_choice(env, ELASTIC_BATCH, "scale", ELASTIC_BATCHES),
    )
