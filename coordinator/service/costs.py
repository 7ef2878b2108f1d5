"""A job's preemption costs as its runtime measured them, for the core's minimum run time and
cost-aware victim choice (``SchedulerConfig.min_run_restores``, ``cheap_victims``).

The chief's reports carry both (docs/contracts.md): ``checkpoint.seconds``, the time its last
checkpoint took to write, and ``warmup``, what its run spent before training: ``build``
(process start to restore), ``restore`` (reading the checkpoint) and ``first_step``. The
restore cost is all three: what every restart of the job pays again before it trains, the
quantity the simulator's ``--preempt-cost`` models as restore time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from coordinator.core.events import UpdateCosts
from coordinator.core.model import Job

WARMUP_PARTS = ("build", "restore", "first_step")


def _seconds(value: object) -> float | None:
    """A measured duration, or None for anything that is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value >= 0 and math.isfinite(value) else None


def measured_costs(report: Mapping[str, Any], job: Job) -> UpdateCosts | None:
    """The event that gives ``job`` the costs ``report`` measured, or None when it measured
    none (not the chief, no checkpoint and no complete warm-up) or nothing changed."""
    if report.get("role") not in (None, "chief"):
        return None
    checkpoint, restore = job.checkpoint_cost, job.restore_cost
    seconds = _seconds((report.get("checkpoint") or {}).get("seconds"))
    if seconds is not None:
        checkpoint = seconds
    warmup = report.get("warmup") or {}
    if "first_step" in warmup:  # the warm-up is over: its parts are all measured
        parts = [_seconds(warmup.get(k, 0.0)) for k in WARMUP_PARTS]
        if all(p is not None for p in parts):
            restore = sum(p for p in parts if p is not None)
    if (checkpoint, restore) == (job.checkpoint_cost, job.restore_cost):
        return None
    return UpdateCosts(job.job_id, checkpoint, restore)
