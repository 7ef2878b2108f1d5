"""The contract between job processes and the coordinator (docs/contracts.md), in one place.

The launcher side owns it: every name a job process reads from its environment, the exit
codes it ends with, and the ``report`` message it sends. The coordinator imports this module;
nothing here imports the coordinator, so the runtime inside a job stays small.
"""

from __future__ import annotations

#: "Checkpointed for preemption, resume me" (EX_TEMPFAIL).
EXIT_CHECKPOINTED = 75

# --- environment of a job process ----------------------------------------------------------
COORDINATOR = "TIRESIAS_COORDINATOR"
JOB_ID = "TIRESIAS_JOB_ID"
JOB_KEY = "TIRESIAS_JOB_KEY"  # unique across coordinators: names checkpoints and logs
ROLE = "TIRESIAS_ROLE"
TASK_INDEX = "TIRESIAS_TASK_INDEX"
NUM_WORKERS = "TIRESIAS_NUM_WORKERS"
NUM_PS = "TIRESIAS_NUM_PS"
#: The top of the job's worker range: the world its global batch is defined at (a rigid job:
#: its worker count). Absent: the job is rigid at TIRESIAS_NUM_WORKERS.
MAX_WORKERS = "TIRESIAS_MAX_WORKERS"
#: How a PyTorch rank below MAX_WORKERS keeps the global batch: "scale" (default) its per-rank
#: batch by MAX/W, or "accumulate" MAX/W micro-steps of the script's batch (less memory).
ELASTIC_BATCH = "TIRESIAS_ELASTIC_BATCH"
ELASTIC_BATCHES = ("scale", "accumulate")
MODE = "TIRESIAS_MODE"
CHECKPOINT_DIR = "TIRESIAS_CHECKPOINT_DIR"
RESTART_COUNT = "TIRESIAS_RESTART_COUNT"
PREEMPT_SIGNAL = "TIRESIAS_PREEMPT_SIGNAL"
GPUS = "TIRESIAS_GPUS"
KEEP_CHECKPOINTS = "TIRESIAS_KEEP_CHECKPOINTS"
HOROVOD_HOSTS = "TIRESIAS_HOROVOD_HOSTS"
#: How long Horovod ranks wait for rank 0's Gloo rendezvous (also their Gloo timeout).
RENDEZVOUS_WAIT_SECONDS = 300.0
#: Deterministic preemption for tests and demos: hold at this step until preempted.
HOLD_AT_STEP = "TIRESIAS_HOLD_AT_STEP"
JOB_TOKEN = "TIRESIAS_JOB_TOKEN"  # the job's secret; reports carry it (docs/security.md)
SERVER_KEY = "TIRESIAS_SERVER_KEY"  # the coordinator's CURVE public key (Z85), over tcp://

#: How a ``checkpointable_why`` ends for a job that keeps its own checkpoints (a
#: CheckpointManager, BackupAndRestore, torch.save/torch.load): it is not restarted from
#: step 0, and its lost work is not counted as all of its run.
OWN_CHECKPOINTS = "it resumes from its own checkpoints"

ROLES = ("chief", "worker", "ps")
MODES = ("single", "ps", "allreduce", "horovod")

# --- the report message ----------------------------------------------------------------------
#: Version of the wire protocol; every message carries it as ``v`` (coordinator.protocol).
PROTOCOL_VERSION = 1

#: A field of a message: (accepted Python types, required); ``None`` in the types: nil is fine.
Field = tuple[tuple[type | None, ...], bool]
_NUM = (int, float)
_OPT_INT: Field = ((int, None), False)
_OPT_NUM: Field = ((*_NUM, None), False)
_OPT_STR: Field = ((str, None), False)

#: The ``report`` a job's runtime sends (fire and forget), besides ``type`` and ``v``.
REPORT: dict[str, Field] = {
    "job_id": ((str,), True),
    "role": _OPT_STR,
    "task_index": _OPT_INT,
    "restart": _OPT_INT,
    "step": _OPT_INT,
    "iterations": _OPT_INT,
    "iter_time": _OPT_NUM,
    "gpu_time": _OPT_NUM,
    "checkpoint": ((dict, None), False),
    "warmup": ((dict, None), False),
    "skew": _OPT_NUM,
    "tensor_bytes": ((list, None), False),
    "token": _OPT_STR,  # JOB_TOKEN: proves a runtime on an anonymous connection
    "checkpointable": ((bool, None), False),
    "checkpointable_why": _OPT_STR,
    "notice": _OPT_STR,  # a fact for the job's history (inputs that changed on a resume)
    # False: the runtime cannot keep the job's global batch at another world size, so it runs
    # rigid; the coordinator pins the job's range to its current size. Absent/None: no claim.
    "resizable": ((bool, None), False),
}
#: Report fields that are counts or durations: finite and >= 0.
REPORT_AMOUNTS = ("task_index", "restart", "step", "iterations", "iter_time", "gpu_time")
