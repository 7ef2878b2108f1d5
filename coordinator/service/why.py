"""What ``tiresias queue``, ``tiresias status JOB`` and the dashboard say about waiting jobs
(their place in line and the reason, from ``coordinator.core.explain``) and about a job's
history (``coordinator.core.history``), as text."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import Any

from coordinator.core.explain import queue_name


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st …"""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def position_text(pending: dict[str, Any] | None) -> str:
    """``Q2 #3``: third waiting job of Q2 (``-`` when not waiting)."""
    if not pending:
        return "-"
    return f"{queue_name(pending['queue'])} #{pending['position']}"


def pending_line(view: dict[str, Any]) -> str:
    """``j4  Q2 #1, 3rd overall: waiting for 4 GPUs …``"""
    p = view["pending"]
    return f"{view['job_id']}  {position_text(p)}, {ordinal(p['overall'])} overall: {p['text']}"


def why_waiting(views: Sequence[dict[str, Any]]) -> list[str]:
    """A "why waiting" section for the waiting jobs of a listing, in line order (empty when
    nothing waits)."""
    waiting = sorted((v for v in views if v.get("pending")), key=lambda v: v["pending"]["overall"])
    if not waiting:
        return []
    return ["", "why waiting:"] + ["  " + pending_line(v) for v in waiting]


def after_restart(
    pending: dict[str, Any], unconfirmed: Collection[str], opts: Any
) -> dict[str, Any]:
    """A waiting job's reason while the coordinator, just restarted, schedules nothing until
    the nodes it knew have registered again (reason ``restart``; the core's reason after)."""
    names = ", ".join(sorted(unconfirmed))
    who = f"nodes {names} register" if len(unconfirmed) > 1 else f"node {names} registers"
    return {
        **pending,
        "reason": "restart",
        "text": f"nothing is scheduled until {who} again after the coordinator's restart "
        f"(at most {opts.heartbeat_timeout:g} s); then: {pending['text']}",
    }


def history_lines(events: Sequence[dict[str, Any]]) -> list[str]:
    """``2026-12-01 11:02:07  preempted at step 40 for j3 (Q1)``, oldest first."""
    return [
        f"  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(e['wall']))}  {e['text']}"
        for e in events
    ]
