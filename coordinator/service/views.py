"""What ``status``, ``queue`` and ``nodes`` show: plain maps built from core jobs and the
service's records, shared by the coordinator (to answer) and the CLI (to print)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coordinator.core.history import signal_name
from coordinator.core.model import Job, JobState
from coordinator.service.records import JobRecord
from tiresias_launch.contract import OWN_CHECKPOINTS
from tiresias_launch.report import checkpoint_line, resume_line


@functools.lru_cache(maxsize=1024)
def script_name(path: str) -> str:
    """A job's name when it has none: its script's file name (jobs share a few scripts, and
    parsing the path was a tenth of a listing page's work)."""
    return Path(path).name


def job_view(job: Job, rec: JobRecord, now: float, rank: int | None) -> dict[str, Any]:
    """One job as clients see it. ``priority`` is its rank in the policy's order (1 = first
    in line), the same for every policy; None once finished."""
    req = rec.request
    waiting = now - job.wait_since if job.state is JobState.WAITING and job.wait_since else 0.0
    executed = job.total_executed_at(now)
    end = job.finish if job.finish is not None else now
    return {
        "job_id": job.job_id,
        "key": rec.key,
        "name": req.name or script_name(req.argv[0] if req.argv else ""),
        "argv": req.argv,
        "owner": req.owner,
        "state": job.state.value,
        "queue": job.queue,
        "priority": rank,
        "gpus": job.gpus,
        "workers": req.workers,
        "min_workers": req.min_workers,
        "held": job.held is not None,  # an elastic job not resized until its runtime confirms
        "ps": req.ps,
        "attained": job.attained(now),
        "executed": executed,
        "waiting": waiting,  # since it last waited, while it waits
        "waited": max(0.0, end - job.spec.arrival - executed),  # in all, since submitted
        "skew": job.spec.skew if rec.skew is None else rec.skew,
        "skew_source": rec.skew_source,
        "placement": job.allocation.to_wire() if job.allocation else None,
        "restarts": job.restarts,
        "preemptions": job.preemptions,
        "promotions": job.promotions,
        "arrival": job.spec.arrival,
        "first_start": job.first_start,
        "finish": job.finish,
        "submitted": rec.submitted,
        "exit_code": rec.exit_code,
        "log_tail": rec.log_tail,
        "last_exit": asdict(rec.last_exit) if rec.last_exit else None,
        "progress": rec.progress.to_wire(),
        "checkpointable": rec.checkpointable,
        "checkpointable_why": rec.checkpointable_why,
        "lost": asdict(rec.lost) if rec.lost else None,
        "nodes_ever": rec.nodes_ever,
    }


def node_view(
    name: str,
    host: str | None,
    gpus: Sequence[Mapping[str, Any]],
    used: dict[int, str],
    silent_for: float | None,
    connected: bool,
    drained: bool,
) -> dict[str, Any]:
    """``drained``: up, but takes no new jobs (Slurm drains it, or still cleans up there)."""
    return {
        "name": name,
        "host": host,
        "connected": connected,
        "drained": drained,
        "silent_for": silent_for,
        "gpus": [{**g, "job": used.get(g["index"])} for g in gpus],
        "total": len(gpus),
        "used": len(used),
    }


def gpus_text(view: dict[str, Any]) -> str:
    """The GPUs of a job: ``4`` for a rigid gang; an elastic one's range, and the size of
    its run while it has one: ``2:8`` waiting, ``4 of 2:8`` running."""
    low = view.get("min_workers")
    if low is None:
        return str(view["gpus"])
    asked = f"{low}:{view['workers']}"
    return f"{view['gpus']} of {asked}" if view.get("placement") else asked


def size_text(view: dict[str, Any]) -> str:
    """`` on 2 of 2:4 GPUs`` for an elastic job that runs, else nothing (a rigid job's size
    never changes)."""
    elastic = view.get("min_workers") is not None and view.get("placement")
    return f" on {gpus_text(view)} GPUs" if elastic else ""


def exit_text(last_exit: dict[str, Any] | None) -> str:
    """How the last run ended, e.g. ``preempted without a checkpoint (chief-0 SIGTERM)``."""
    if not last_exit:
        return "-"
    outcome = {"preempted": "preempted without a checkpoint"}.get(
        last_exit["outcome"], last_exit["outcome"]
    )
    codes = ", ".join(
        f"{p['role']}-{p['task_index']} {_code(p['code'])}" for p in last_exit["processes"]
    )
    return f"{outcome} ({codes})" if codes else outcome


def _code(code: int | None) -> str:
    if code is None:
        return "?"
    return signal_name(code) if code < 0 else f"exit {code}"


def checkpoint_text(view: dict[str, Any]) -> str:
    """The job's newest checkpoint, or why it has none."""
    if view.get("checkpointable") is False:
        return f"none: this job cannot be checkpointed: {view.get('checkpointable_why')}"
    ckpt = (view.get("progress") or {}).get("checkpoint")
    return checkpoint_line(ckpt) if ckpt else "none yet"


def lost_text(lost: dict[str, Any] | None) -> str | None:
    if not lost:
        return None
    n = lost["preemptions"]
    return (
        f"{n} preemption{'s' * (n != 1)} without a checkpoint: {lost['steps']} steps, "
        f"{lost['gpu_seconds']:.1f} GPU·s of work to run again"
    )


def run_events(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What happened between two status views of a job, as lines for ``tiresias-run``:
    preemptions, ends of runs (checkpointed or not), restarts and resumes. Told from counters
    and the last exit, so a state passed between two polls is still told."""
    job, out = now["job_id"], []
    if now.get("checkpointable") is False and before.get("checkpointable") is not False:
        out.append(f"{job} cannot be checkpointed: {now.get('checkpointable_why')}")
    if now["preemptions"] > before.get("preemptions", 0):
        step = (before.get("progress") or {}).get("step")
        if now["state"] == "preempting":
            step = (now.get("progress") or {}).get("step")
        stops = [e for e in now.get("history") or () if e["kind"] in ("preempted", "resized")]
        if stops and stops[-1]["kind"] == "resized":  # an elastic job's: "grew to 4 at step 5"
            out.append(f"{job} resized by the scheduler: {stops[-1]['text']}")
        else:
            out.append(f"{job} preempted by the scheduler" + (f" at step {step}" if step else ""))
    ended = now.get("last_exit") or {}
    if ended != (before.get("last_exit") or {}) and ended.get("outcome") != "completed":
        at = f" at step {ended['step']}" if ended.get("step") else ""  # no steps: none told
        if ended.get("outcome") == "checkpointed":
            out.append(f"{job} stopped: {checkpoint_text(now)}")
        elif ended.get("outcome") == "preempted":
            again = "its last checkpoint"
            if now.get("checkpointable") is False:
                own = OWN_CHECKPOINTS in (now.get("checkpointable_why") or "")
                again = "its own checkpoints" if own else "step 0"
            out.append(f"{job} stopped{at}: {exit_text(ended)}; it restarts from {again}")
    restarted = now["restarts"] > before.get("restarts", 0) or before.get("state") != "running"
    if now["state"] == "running" and now["restarts"] and restarted:
        out.append(f"{job} restarted{size_text(now)} (restart {now['restarts']})")
    warm = (now.get("progress") or {}).get("warmup") or {}
    resumed = now["restarts"] and warm.get("step") and "first_step" in warm
    if resumed and warm != ((before.get("progress") or {}).get("warmup") or {}):
        out.append(f"{job} {resume_line(warm)}")
    return out
