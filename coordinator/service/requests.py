"""Client requests and runtime reports: one handler per message, each ``(coordinator, route,
message) -> reply`` (None: the reply comes later, or never). Changes happen inside the
coordinator's journal transaction (``c.atomic()``)."""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections.abc import Iterator
from typing import Any

from coordinator import protocol
from coordinator.core import events
from coordinator.core.explain import explain
from coordinator.core.model import CoreError, Job, JobSpec
from coordinator.gang import GangRequest
from coordinator.service import access, identity
from coordinator.service.agents import launch_frames
from coordinator.service.costs import measured_costs
from coordinator.service.executor import FOUND_JOB, JobFound
from coordinator.service.records import REQUEST_FIELDS, JobRecord, Request
from coordinator.service.runs import plan_gang
from coordinator.service.server import Server
from coordinator.service.views import job_view, node_view
from coordinator.service.why import after_restart

log = logging.getLogger("tiresias.coordinator")

#: Most jobs in one page of ``status``/``queue``, and the page's byte budget.
PAGE_JOBS = 500
LIST_BUDGET = protocol.MAX_MESSAGE_BYTES // 2
LOG_BUDGET = protocol.MAX_MESSAGE_BYTES // 4


def submit(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    try:
        shape = GangRequest.from_submit(msg, c.opts.max_job_size)
    except ValueError as e:
        raise protocol.ProtocolError(f"submit: {e}") from None
    owner = c.peer.user
    assert owner is not None  # authorize
    if identity.is_root_user(owner) and not c.opts.allow_root_jobs:
        raise protocol.ProtocolError(
            "submit: jobs do not run as root here; submit as an unprivileged user (an "
            "admin may start the coordinator with --allow-root-jobs)"
        )
    request = Request.from_wire({k: msg[k] for k in REQUEST_FIELDS if msg.get(k) is not None})
    request.owner = owner
    done = c.submit_keys.get((owner, request.key))
    if done is not None:  # a retry of a submit whose reply was lost: the same job
        return {"job_id": done, "duplicate": True}
    request.token = secrets.token_urlsafe(24)  # for the job's runtime (report)
    _check_deliverable(c, request)
    try:
        job_id = enqueue(c, request, shape.gpus, msg.get("duration"), msg.get("skew"))
    except CoreError as e:  # the id stays free for the next submit: do not name it
        why = str(e).replace(f"job j{c.next_job}", "the job")
        raise protocol.ProtocolError(f"submit: {why}; nothing was queued") from None
    log.info("submitted %s for %s: %s", job_id, owner, " ".join(msg["argv"])[:200])
    return {"job_id": job_id}


def enqueue(
    c: Server,
    request: Request,
    gpus: int,
    duration: float | None = None,
    skew: float | None = None,
    checkpointable_why: str | None = None,
) -> str:
    """Queue a job (a checked submit, or a job the executor found); its id. CoreError when
    the core refuses it; ``checkpointable_why``: why it cannot be checkpointed, if so."""
    job_id = f"j{c.next_job}"
    now = c.clock.now()
    spec = JobSpec(job_id, gpus, arrival=now, duration=duration, skew=skew,
                   model=request.name, user=request.owner)  # fmt: skip
    with c.atomic():
        c.core(events.Submit(spec, now))
        c.next_job += 1
        c.store.set_meta("next_job", c.next_job)
        rec = JobRecord(f"{job_id}-{c.instance}", request, time.time(), skew=skew)
        if checkpointable_why is not None:
            c.core(events.UpdateCheckpointable(job_id, False, now))
            rec.checkpointable, rec.checkpointable_why = False, checkpointable_why
        c.book.add(job_id, rec)
    if request.key is not None:
        c.submit_keys[(request.owner, request.key)] = job_id
    c.dirty = True
    return job_id


def found(c: Server, job: JobFound) -> None:
    """A job submitted to the executor's own scheduler (a plain ``sbatch``), held there:
    queued as its user's, once (its ref is its key), never checkpointed."""
    key = f"found:{job.ref}"
    if (job.user, key) in c.submit_keys:  # offered again after a restart
        return
    request = Request([job.command or job.name], job.gpus, job.user, name=job.name, key=key,
                      env={FOUND_JOB: job.ref})  # fmt: skip
    why = "a plain sbatch job: Slurm requeues it from the start when it is preempted"
    try:
        job_id = enqueue(c, request, job.gpus, checkpointable_why=why)
    except CoreError as e:
        log.error("cannot schedule the sbatch job %s: %s", job.ref, e)
        return
    log.info("found %s for %s: the sbatch job %s (%d GPUs)", job_id, job.user, job.ref, job.gpus)


def _check_deliverable(c: Server, request: Request) -> None:
    """Refuse at submit a job whose launch could not reach an agent: plan it on nodes as
    big as the largest known one, with host names as long as any, and measure."""
    workers = request.workers
    nodes = c.executor.nodes().values()
    per_node = max((len(n.gpus) for n in nodes), default=workers)
    host = "h" * max([64, *(len(n.host) for n in nodes)])
    allocation = {
        f"n{i:06d}": list(range(min(per_node, workers - start)))
        for i, start in enumerate(range(0, workers, per_node))
    }
    hosts = dict.fromkeys(allocation, host)
    job_id = "j" * 12
    rec = JobRecord(f"{job_id}-{c.instance}", request, 0.0)
    gang = plan_gang(job_id, rec, allocation, 99999, hosts, lambda _: 65535, c.book.settings)
    size = max(map(len, launch_frames(gang).values()))
    if size > protocol.MAX_MESSAGE_BYTES:
        raise protocol.ProtocolError(
            f"submit: the job's command and environment make a launch of {size} bytes "
            f"for one node, over the {protocol.MAX_MESSAGE_BYTES}-byte message limit; "
            f"shrink the environment or arguments (pass large data in files)"
        )


def cancel(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    job_id = msg["job_id"]
    access.owned(c, "cancel", job_id, "cancel it")
    with c.atomic():
        c.act(c.core(events.Cancel(job_id, c.clock.now())))
        if c.sched.job(job_id).state.finished:  # it was not running
            c.book.finished(job_id, c.when())
    c.dirty = True
    return {"job_id": job_id, "state": c.sched.job(job_id).state.value}


def status(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    if msg.get("job_id"):
        access.known(c, "status", msg["job_id"])
        view = _views(c, [c.sched.job(msg["job_id"])], c.clock.now())[0]
        view["packlimit"] = getattr(c.sched.placement, "packlimit", None)
        view["history"] = c.history.of(msg["job_id"])
        return {"job": _fit(view, LIST_BUDGET)}
    return _listing(c, msg, history=True)


def queue(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    return _listing(c, msg, history=False)


def _listing(c: Server, msg: dict[str, Any], history: bool) -> dict[str, Any]:
    """One page of jobs in submission order: active ones, plus (``history``) finished ones
    when asked (``all``, or those that ended at or after ``since``, wall clock), only
    ``user``'s if given, after the job ``after``. A page stops at ``limit`` jobs or at the
    reply's byte budget; ``next`` is the cursor for the following page."""
    limit = min(msg.get("limit") or PAGE_JOBS, PAGE_JOBS)
    since = msg.get("since")
    everything = history and bool(msg.get("all"))
    user = msg.get("user")
    chosen: list[Job] = []
    more = False
    for job_id, rec in _records_after(c, msg.get("after")):
        if user is not None and rec.request.owner != user:
            continue
        job = c.sched.job(job_id)
        ended = rec.ended if rec.ended is not None else rec.submitted
        if job.state.finished and not (
            everything or (history and since is not None and ended >= since)
        ):
            continue
        if len(chosen) == limit:
            more = True
            break
        chosen.append(job)
    views, used = [], 0
    for view in _views(c, chosen, c.clock.now()):
        view = _fit(view, LIST_BUDGET // 4)
        size = len(protocol.encode("ok", job=view))
        if views and used + size > LIST_BUDGET:
            more = True
            break
        views.append(view)
        used += size
    return {"jobs": views, "next": views[-1]["job_id"] if more and views else None}


def _records_after(c: Server, after: str | None) -> Iterator[tuple[str, JobRecord]]:
    """Job records in submission order, starting after job ``after`` (None: the first)."""
    records = iter(c.book.records.items())
    if after is not None:
        access.known(c, "status", after)
        for job_id, _ in records:
            if job_id == after:
                break
    yield from records


def _views(c: Server, jobs: list[Job], now: float) -> list[dict[str, Any]]:
    active = sorted(
        (j for j in c.sched.jobs() if not j.state.finished),
        key=lambda j: c.sched.policy.key(j, now),
    )
    ranks = {j.job_id: i for i, j in enumerate(active, 1)}
    shown = {j.job_id for j in jobs}
    pending = explain(c.sched, now, lambda job, _: job.job_id in shown)
    views = []
    for j in jobs:
        rec = c.book.records[j.job_id]
        view = job_view(j, rec, now, ranks.get(j.job_id))
        view["pending"] = pending[j.job_id].to_dict() if j.job_id in pending else None
        if view["pending"] and c.unconfirmed:
            view["pending"] = after_restart(view["pending"], c.unconfirmed, c.opts)
        if not access.may_manage(c, rec):
            view["log_tail"] = None  # log content is the owner's
        views.append(view)
    return views


def _fit(view: dict[str, Any], budget: int) -> dict[str, Any]:
    """A job view within ``budget`` bytes: a huge command line or log tail is cut short."""
    if len(protocol.encode("ok", job=view)) <= budget:
        return view
    argv = view["argv"]
    return {
        **view,
        "argv": [a[:200] for a in argv[:8]] + (["…"] if len(argv) > 8 else []),
        "log_tail": (view.get("log_tail") or "")[-2048:],
    }


def nodes(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    used: dict[str, dict[int, str]] = {}
    for job in c.sched.jobs():
        if job.allocation is not None and not job.state.finished:
            for node, gpus in job.allocation.gpus:
                used.setdefault(node, {}).update(dict.fromkeys(gpus, job.job_id))
    known = c.executor.nodes()
    views = []
    for name in sorted(c.sched.free_gpus()):
        info = known.get(name)
        views.append(
            node_view(
                name,
                info.host if info else None,
                list(info.gpus) if info else [],
                used.get(name, {}),
                info.silent_for if info else None,
                info is not None and info.connected,
            )
        )
    return {"nodes": views, "now": c.clock.now()}


def advance(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    if not c.clock.manual:
        raise protocol.ProtocolError(
            "advance: the coordinator runs on the wall clock (start it with --manual-clock)"
        )
    if msg["seconds"] < 0:
        raise protocol.ProtocolError("advance: 'seconds' must be >= 0")
    c.clock.advance(msg["seconds"])
    c.dirty = True
    return {"now": c.clock.now()}


def logs(c: Server, rid: bytes, msg: dict[str, Any]) -> None:
    job_id = msg["job_id"]
    rec = access.owned(c, "logs", job_id, "read its logs")
    offsets = msg.get("offsets") or {}
    connected = {n for n, info in c.executor.nodes().items() if info.connected}
    nodes = [n for n in rec.nodes_ever if n in connected]
    # the whole answer must fit one message: split a byte budget over the nodes (and each
    # agent over its files), with room for decoding and framing
    budget = min(msg.get("limit") or LOG_BUDGET, LOG_BUDGET)
    req, fetch = c.logs.open(rid, msg["id"])
    for node in nodes:
        prefix = f"{node}/"
        mine = {k[len(prefix) :]: v for k, v in offsets.items() if k.startswith(prefix)}
        limit = budget // len(nodes)
        if c.executor.fetch_logs(req, job_id, rec.key, node, mine, limit):
            fetch.waiting.add(node)
    if not fetch.waiting:
        c.logs.finish(req)


def report(c: Server, rid: bytes, msg: dict[str, Any]) -> None:
    job_id = msg["job_id"]
    rec = access.known(c, "report", job_id)
    token = rec.request.token.encode()
    offered = (msg.get("token") or "").encode()
    if not (access.may_manage(c, rec) or (token and hmac.compare_digest(token, offered))):
        raise protocol.ProtocolError(
            f"report: {c.peer.describe()} may not report on job {job_id} (it is not the owner "
            f"and has not the job's token)"
        )
    progress = rec.progress
    if progress.restart != msg.get("restart"):  # a new run: its own facts only
        progress.step = None
    for k in ("step", "iterations", "iter_time", "gpu_time", "checkpoint", "warmup"):
        if msg.get(k) is not None:
            setattr(progress, k, msg[k])
    progress.restart = msg.get("restart")
    said = msg.get("checkpointable")
    chief = msg.get("role") in (None, "chief")
    if said is not None and chief and said != rec.checkpointable:
        rec.checkpointable = said
        rec.checkpointable_why = msg.get("checkpointable_why")
        with c.atomic():
            c.core(events.UpdateCheckpointable(job_id, said, c.clock.now()))
            c.book.ledger.save(job_id)
        c.dirty = True
    costs = measured_costs(msg, c.sched.job(job_id))
    if costs is not None:
        with c.atomic():
            c.core(costs)
            c.book.ledger.save(job_id)
        c.dirty = True
    found = c.skew_estimator(msg, rec.request.ps, rec.skew_source)
    if found is not None and found != (rec.skew, rec.skew_source):
        skew, rec.skew_source = found
        rec.skew = skew
        with c.atomic():
            c.core(events.UpdateSkew(job_id, float(skew)))
            c.book.ledger.save(job_id)
    else:
        c.progress_dirty.add(job_id)


CLIENT_HANDLERS = {
    "submit": submit,
    "cancel": cancel,
    "status": status,
    "queue": queue,
    "nodes": nodes,
    "advance": advance,
    "logs": logs,
    "report": report,
}
