"""One (re)start of a job as the executor receives it: the gang of processes on each node
of its allocation, with the environment every process of a Tiresias job gets."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from coordinator.gang import GangRequest, plan
from coordinator.service.executor import Gang, ProcessLaunch
from coordinator.service.records import JobRecord
from tiresias_launch.contract import JOB_TOKEN, PREEMPT_SIGNAL


@dataclass(frozen=True)
class RunSettings:
    grace: float
    preempt_signal: str
    heartbeat_timeout: float
    checkpoints: Path


def plan_gang(
    job_id: str,
    rec: JobRecord,
    allocation: Mapping[str, list[int]],
    restart: int,
    hosts: Mapping[str, str],
    port: Callable[[str], int],
    settings: RunSettings,
) -> Gang:
    """One (re)start of a job: every process on every node of ``allocation``."""
    req = rec.request
    specs = plan(
        GangRequest(tuple(req.argv), req.workers, req.ps, req.horovod, req.min_workers),
        job_id,
        allocation,
        None,
        settings.checkpoints,
        restart,
        port,
        hosts=hosts,
        job_key=rec.key,
    )
    parts: dict[str, list[ProcessLaunch]] = {}
    extra = {PREEMPT_SIGNAL: settings.preempt_signal, JOB_TOKEN: req.token}
    for s in specs:
        env = {**req.env, **s.env, **extra}
        parts.setdefault(s.node, []).append(
            ProcessLaunch(s.role, s.task_index, tuple(s.argv), env, tuple(s.gpus), req.cwd)
        )
    return Gang(job_id, rec.key, restart, req.owner or "", settings.grace, parts, req.found)
