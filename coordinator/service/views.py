"""What ``status``, ``queue`` and ``nodes`` show: plain maps built from core jobs and the
service's records, shared by the coordinator (to answer) and the CLI (to print)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.core.model import Job, JobState


def job_view(job: Job, rec: dict[str, Any], now: float, rank: int | None) -> dict[str, Any]:
    """One job as clients see it. ``priority`` is its rank in the policy's order (1 = first
    in line), the same for every policy; None once finished."""
    req = rec.get("request", {})
    waiting = now - job.wait_since if job.state is JobState.WAITING and job.wait_since else 0.0
    return {
        "job_id": job.job_id,
        "name": req.get("name") or Path(req.get("argv", [""])[0]).name,
        "argv": req.get("argv", []),
        "owner": req.get("owner"),
        "state": job.state.value,
        "queue": job.queue,
        "priority": rank,
        "gpus": job.gpus,
        "workers": req.get("workers", job.gpus),
        "ps": req.get("ps", 0),
        "attained": job.attained(now),
        "executed": job.total_executed_at(now),
        "waiting": waiting,
        "skew": job.spec.skew if rec.get("skew") is None else rec["skew"],
        "placement": job.allocation.to_wire() if job.allocation else None,
        "restarts": job.restarts,
        "preemptions": job.preemptions,
        "promotions": job.promotions,
        "arrival": job.spec.arrival,
        "first_start": job.first_start,
        "finish": job.finish,
        "submitted": rec.get("submitted"),
        "exit_code": rec.get("exit_code"),
        "log_tail": rec.get("log_tail"),
        "last_exit": rec.get("last_exit"),
        "progress": rec.get("progress", {}),
        "nodes_ever": rec.get("nodes_ever", []),
    }


def node_view(
    name: str,
    host: str | None,
    gpus: list[dict[str, Any]],
    used: dict[int, str],
    silent_for: float | None,
    connected: bool,
) -> dict[str, Any]:
    return {
        "name": name,
        "host": host,
        "connected": connected,
        "silent_for": silent_for,
        "gpus": [{**g, "job": used.get(g["index"])} for g in gpus],
        "total": len(gpus),
        "used": len(used),
    }
