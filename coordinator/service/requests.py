"""Client requests and runtime reports: one handler per message, each ``(coordinator, route,
message) -> reply`` (None: the reply comes later, or never). Changes happen inside the
coordinator's journal transaction (``c.atomic()``)."""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from typing import Any

from coordinator import protocol
from coordinator.core import events
from coordinator.core.model import CoreError, Job, JobSpec, JobState
from coordinator.core.placement import packlimit_of
from coordinator.gang import GangRequest
from coordinator.service import access, identity, listing
from coordinator.service.costs import measured_costs
from coordinator.service.executor import JobFound
from coordinator.service.gangs import plan_gang
from coordinator.service.records import REQUEST_FIELDS, JobRecord, Request
from coordinator.service.server import Server
from coordinator.service.views import node_view

log = logging.getLogger("tiresias.coordinator")

#: The byte budget of one ``logs`` reply.
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
    request.min_workers = shape.min_workers  # None for MIN == MAX: a rigid gang
    done = _submitted(c, owner, request.key)
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
                   model=request.name, user=request.owner,
                   min_gpus=request.min_workers)  # fmt: skip
    with c.atomic():
        c.core(events.Submit(spec, now))
        c.next_job += 1
        c.store.set_meta("next_job", c.next_job)
        rec = JobRecord(f"{job_id}-{c.instance}", request, time.time(), skew=skew)
        if checkpointable_why is not None:
            c.core(events.UpdateCheckpointable(job_id, False, now))
            rec.checkpointable, rec.checkpointable_why = False, checkpointable_why
        c.book.add(job_id, rec)
        c.active.add(job_id, rec)
    if request.key is not None:
        c.submit_keys[(request.owner, request.key)] = job_id
    c.dirty = True
    return job_id


def found(c: Server, job: JobFound) -> None:
    """A job submitted to the executor's own scheduler (a plain ``sbatch``), held there:
    queued as its user's, once (its ref is its key), never checkpointed."""
    key = f"found:{job.ref}"
    if _submitted(c, job.user, key) is not None:  # offered again after a restart
        return
    request = Request([job.command or job.name], job.gpus, job.user, name=job.name, key=key,
                      found=job.ref)  # fmt: skip
    why = "a plain sbatch job: Slurm requeues it from the start when it is preempted"
    try:
        job_id = enqueue(c, request, job.gpus, checkpointable_why=why)
    except CoreError as e:
        log.error("cannot schedule the sbatch job %s: %s", job.ref, e)
        return
    log.info("found %s for %s: the sbatch job %s (%d GPUs)", job_id, job.user, job.ref, job.gpus)


def _submitted(c: Server, owner: str | None, key: str | None) -> str | None:
    """The job an earlier submit with this client key made, active or finished."""
    if key is None:
        return None
    return c.submit_keys.get((owner, key)) or c.archive.job_of_key(owner, key)


def _check_deliverable(c: Server, request: Request) -> None:
    """Refuse at submit a job the executor could never launch: plan it on nodes as big as
    the largest known one, with host names as long as any, and ask."""
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
    why = c.executor.check_launch(gang)
    if why is not None:
        raise protocol.ProtocolError(f"submit: {why}")


def cancel(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    job_id = msg["job_id"]
    access.owned(c, "cancel", job_id, "cancel it")
    if job_id not in c.book.records:  # finished and archived: nothing to cancel
        return {"job_id": job_id, "state": (c.archive.view(job_id) or {})["state"]}
    if c.sched.job(job_id).state.finished:
        return {"job_id": job_id, "state": c.sched.job(job_id).state.value}
    with c.atomic():
        c.act(c.core(events.Cancel(job_id, c.clock.now())))
        if c.sched.job(job_id).state.finished:  # it was not running
            c.book.finished(job_id, c.when())
    c.dirty = True
    return {"job_id": job_id, "state": c.sched.job(job_id).state.value}


def status(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    if msg.get("job_id"):
        job_id = msg["job_id"]
        access.known(c, "status", job_id)
        stored = None if job_id in c.book.records else c.archive.view(job_id)
        if stored is not None:  # finished: as the archive keeps it
            view = listing.stored_view(c, stored)
        else:
            view = listing.views(c, [c.sched.job(job_id)], c.clock.now())[0]
        view["packlimit"] = packlimit_of(c.sched.placement)
        view["history"] = c.history.of(job_id)
        return {"job": listing.fit(view)}
    return listing.listing(c, msg, history=True)


def queue(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    if msg.get("heads") is not None:
        return listing.first_screen(c, msg)
    return listing.listing(c, msg, history=False)


def nodes(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    known, drained = c.executor.nodes(), c.sched.drained()
    views = []
    for name in sorted(c.sched.free_gpus()):
        info = known.get(name)
        used: dict[int, str] = {}  # from the jobs run there, not a walk of every job
        for job_id in c.book.jobs_on(name):
            held = c.sched.job(job_id).allocation
            for node, gpus in held.gpus if held is not None else ():
                if node == name:
                    used.update(dict.fromkeys(gpus, job_id))
        views.append(
            node_view(
                name,
                info.host if info else None,
                list(info.gpus) if info else [],
                used,
                info.silent_for if info else None,
                info is not None and info.connected,
                name in drained,
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
    nodes = [n for n in rec.nodes_ever if (info := c.executor.node(n)) and info.connected]
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
    if job_id not in c.book.records:  # the last report of a finished job: nothing to do
        return
    progress = rec.progress
    if progress.restart != msg.get("restart"):  # a new run: its own facts only
        progress.step = None
    # the run's first steps: where they began (a restart the runtime did not restore, past
    # step 0, resumed from the script's own checkpoints)
    began = (msg.get("step") or 0) - (msg.get("iterations") or 0)
    first_steps = not progress.step and msg.get("iterations") and began > 0
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
    if first_steps and chief and msg.get("restart") and rec.checkpointable is False:
        with c.atomic():
            c.history.note(
                job_id, c.clock.now(), "runtime", rec.resumed_itself(msg["restart"], began)
            )
            c.book.ledger.save(job_id)
    if msg.get("notice") and chief:
        with c.atomic():
            c.history.note(job_id, c.clock.now(), "runtime", msg["notice"])
    if msg.get("resizable") is False and chief:
        _pin(c, job_id, rec, msg.get("restart"))
    elif msg.get("resizable") and chief:
        _release(c, job_id, rec, msg.get("restart"))
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


def _current_elastic_run(c: Server, job_id: str, rec: JobRecord, restart: int | None) -> Job | None:
    """The core's job when it is elastic, running, and run ``restart`` is its current one
    (what a runtime says of an earlier run is about a run that is gone); else None."""
    run, job = rec.run, c.sched.job(job_id)
    if rec.request.min_workers is None or run is None or run.restart != restart:
        return None
    return job if job.state is JobState.RUNNING else None


def _pin(c: Server, job_id: str, rec: JobRecord, restart: int | None) -> None:
    """The runtime of an elastic job's run ``restart`` cannot keep its global batch at
    another size: while that run is the current one, its range becomes the size it runs at
    (the core resizes it no more, the planner gives it no TIRESIAS_MAX_WORKERS), and its
    history says so."""
    request, job = rec.request, _current_elastic_run(c, job_id, rec, restart)
    if job is None:
        return
    asked, size = f"{request.min_workers}:{request.workers}", job.gpus
    with c.atomic():
        c.core(events.Pin(job_id, c.clock.now()))
        request.workers, request.min_workers = size, None
        c.book.ledger.save(job_id)
        why = "its script cannot keep its global batch at another size"
        text = f"pinned to {size} GPUs ({asked} asked): {why}"
        c.history.note(job_id, c.clock.now(), "resized", text)
    c.dirty = True


def _release(c: Server, job_id: str, rec: JobRecord, restart: int | None) -> None:
    """The runtime of an elastic job's run ``restart`` keeps its global batch at another
    size: while that run is the current one, the core may resize it within its range (held at
    the size of its first run until then: ``Job.hold``), and its history says so once."""
    request, job = rec.request, _current_elastic_run(c, job_id, rec, restart)
    if job is None or job.resizable:
        return
    asked = f"{request.min_workers} to {request.workers}"
    with c.atomic():
        c.core(events.Release(job_id, c.clock.now()))
        text = f"its runtime keeps the global batch: resized within {asked} GPUs from now on"
        c.history.note(job_id, c.clock.now(), "runtime", text)
    c.dirty = True


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
