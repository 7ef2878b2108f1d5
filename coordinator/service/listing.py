"""Pages of jobs for ``status``, ``queue`` and the dashboard, at a cost set by the page and
not by how many jobs there are or ever were: active jobs are found by an index of job
numbers (``ActiveIndex``), finished ones by the archive's indexes; a job's place in the
policy's order is a bisection of the policy's sorted keys; pending reasons are worded for
the page's own jobs only."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable
from itertools import islice
from typing import Any

from coordinator import protocol
from coordinator.core.explain import explain_jobs, holding
from coordinator.core.model import Job, JobState
from coordinator.service import access
from coordinator.service.records import number
from coordinator.service.server import Server
from coordinator.service.views import job_view
from coordinator.service.why import after_restart

#: Most jobs in one page of ``status``/``queue``, and the page's byte budget.
PAGE_JOBS = 500
LIST_BUDGET = protocol.MAX_MESSAGE_BYTES // 2


def listing(c: Server, msg: dict[str, Any], history: bool) -> dict[str, Any]:
    """One page of jobs in submission order: active ones, plus (``history``) finished ones
    when asked (``all``, or those that ended at or after ``since``, wall clock), only
    ``user``'s if given, after the job ``after``. A page stops at ``limit`` jobs or at the
    reply's byte budget; ``next`` is the cursor for the following page."""
    limit = min(msg.get("limit") or PAGE_JOBS, PAGE_JOBS)
    since = msg.get("since")
    user = msg.get("user")
    after = 0
    if msg.get("after") is not None:
        access.known(c, "status", msg["after"])
        after = number(msg["after"])
    active = ((n, None) for n in c.active.after(after, user))
    finished: list[tuple[int, dict[str, Any]]] = []
    if history and (msg.get("all") or since is not None):
        finished = c.archive.page(after, limit + 1, user, None if msg.get("all") else since)
    chosen = list(islice(heapq.merge(active, finished, key=lambda p: p[0]), limit + 1))
    more = len(chosen) > limit
    chosen = chosen[:limit]
    jobs = [c.sched.job(f"j{n}") for n, view in chosen if view is None]
    live = iter(views(c, jobs, c.clock.now()))
    out, cut = _within_budget(next(live) if v is None else stored_view(c, v) for _, v in chosen)
    more = more or cut
    return {"jobs": out, "next": out[-1]["job_id"] if more and out else None}


def _within_budget(views: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """The views that fit one reply, each cut short when huge; and whether some did not."""
    out: list[dict[str, Any]] = []
    used = 0
    for view in views:
        view, size = _fit(view, LIST_BUDGET // 4)
        if out and used + size > LIST_BUDGET:
            return out, True
        out.append(view)
        used += size
    return out, False


def stored_view(c: Server, view: dict[str, Any]) -> dict[str, Any]:
    """A finished job's view as the archive keeps it, as the sender may see it."""
    if not access.is_owner_or_admin(c, view.get("owner")):
        return {**view, "log_tail": None}  # log content is the owner's
    return view


def views(c: Server, jobs: list[Job], now: float) -> list[dict[str, Any]]:
    """Views of active jobs: their place in the policy's order and, for waiting ones, why
    they wait (worded for these jobs only)."""
    pending = explain_jobs(c.sched, now, (j.job_id for j in jobs))
    ranks = _ranks(c, jobs)
    out = []
    for j in jobs:
        rec = c.book.records[j.job_id]
        view = job_view(j, rec, now, ranks.get(j.job_id))
        view["pending"] = pending[j.job_id].to_dict() if j.job_id in pending else None
        if view["pending"] and c.unconfirmed:
            view["pending"] = after_restart(view["pending"], c.unconfirmed, c.opts)
        if not access.may_manage(c, rec):
            view["log_tail"] = None  # log content is the owner's
        out.append(view)
    return out


def _ranks(c: Server, jobs: list[Job]) -> dict[str, int]:
    """Each active job's rank in the policy's order (1: first in line): the waiting and
    running jobs whose keys sort before its key, by bisection, at the last pass's time."""
    policy = c.sched.policy
    at = c.passed_at
    waiting = policy.waiting_order()
    running, _ = policy.running_order(at)
    out = {}
    for j in jobs:
        if not j.state.finished:
            k = policy.waiting_key(j.job_id) or policy.key(j, at)
            out[j.job_id] = bisect.bisect_left(waiting, k) + bisect.bisect_left(running, k) + 1
    return out


def _fit(view: dict[str, Any], budget: int) -> tuple[dict[str, Any], int]:
    """A job view within ``budget`` bytes (a huge command line or log tail is cut short),
    and its encoded size."""
    size = _size(view)
    if size <= budget:
        return view, size
    argv = view["argv"]
    cut = {
        **view,
        "argv": [a[:200] for a in argv[:8]] + (["…"] if len(argv) > 8 else []),
        "log_tail": (view.get("log_tail") or "")[-2048:],
    }
    return cut, _size(cut)


def _size(view: dict[str, Any]) -> int:
    return len(protocol.encode("ok", job=view))


def fit(view: dict[str, Any]) -> dict[str, Any]:
    """One job's view within a reply."""
    return _fit(view, LIST_BUDGET)[0]


def first_screen(c: Server, msg: dict[str, Any]) -> dict[str, Any]:
    """What ``tiresias queue`` shows first: per queue, how many jobs run and wait (and their
    GPUs), and the head of each line: its first ``heads`` waiting jobs in line order, beside
    the first ``heads`` running jobs of that queue in submission order (only ``user``'s, if
    given). Its cost is set by the heads, not by how many jobs run or wait: the policy keeps
    each queue's counts and its running jobs in order, and a user's screen reads that
    user's jobs only."""
    heads, user = min(msg["heads"], MAX_HEADS), msg.get("user")
    policy = c.sched.policy
    counts: dict[int, dict[str, int]] = {}
    running: dict[int, list[Job]] = {}
    mine: list[Job] = []  # the user's waiting jobs
    if user is None:
        for q, (n, gpus) in policy.waiting_per_queue().items():
            counts[q] = {**dict.fromkeys(COUNTS, 0), "waiting": n, "waiting_gpus": gpus}
        for q, held in holding(c.sched).items():
            counted = counts.setdefault(q, dict.fromkeys(COUNTS, 0))
            counted["running"], counted["running_gpus"] = held.jobs, held.gpus
            running[q] = [c.sched.job(k[-1]) for k in held.order[:heads]]
    else:
        for job in (c.sched.job(f"j{n}") for n in c.active.after(0, user)):
            what = STATE_COUNTED.get(job.state)
            if what is None:
                continue
            counted = counts.setdefault(job.queue, dict.fromkeys(COUNTS, 0))
            counted[what] += 1
            counted[f"{what}_gpus"] += job.spec.smallest if what == "waiting" else job.gpus
            if what == "waiting":
                mine.append(job)
            elif counted[what] <= heads:
                running.setdefault(job.queue, []).append(job)
    waiting: dict[int, list[Job]] = {}
    if user is None:
        line: Iterable[Job] = (policy.job(k) for k in policy.waiting_order())
    else:
        line = sorted(mine, key=lambda j: policy.waiting_key(j.job_id) or ())
    for job in line:  # in line order, until each line has its head
        if all(len(waiting.get(q, ())) >= min(heads, n["waiting"]) for q, n in counts.items()):
            break
        head = waiting.setdefault(job.queue, [])
        if len(head) < heads:
            head.append(job)
    jobs = [j for q in sorted(counts) for j in running.get(q, []) + waiting.get(q, [])]
    page, _ = _within_budget(views(c, jobs, c.clock.now()))
    queues = [{"queue": q, **counts[q]} for q in sorted(counts)]
    return {"queues": queues, "jobs": page, "next": None}


#: Most jobs of each line (and running in each queue) on the first screen.
MAX_HEADS = 100
#: The states ``first_screen`` counts (a preempting job still holds its GPUs).
STATE_COUNTED = {
    JobState.WAITING: "waiting",
    JobState.RUNNING: "running",
    JobState.PREEMPTING: "running",
}
#: What ``first_screen`` counts per queue.
COUNTS = ("waiting", "waiting_gpus", "running", "running_gpus")
