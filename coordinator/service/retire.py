"""A job finished for good leaves memory: after the pass that told its end (``job_events``),
its record and final view go to the archive (``archive.py``) in that pass's transaction, so
the coordinator holds the active jobs only, however many it has run; then the core forgets
it too (``events.Retire``, journaled), so its snapshots hold active jobs only."""

from __future__ import annotations

from coordinator.core import events
from coordinator.service import heap
from coordinator.service.server import Server
from coordinator.service.views import job_view


def retire_finished(c: Server, now: float) -> None:
    """Jobs that finished before this pass (whose story it has told) leave memory for the
    archive, inside the pass's transaction."""
    ended, c.book.ended = c.book.ended, []
    retired = c.sched.retired
    for job_id in dict.fromkeys(ended):
        rec = c.book.records.pop(job_id)
        c.active.remove(job_id, rec)
        view = job_view(c.sched.job(job_id), rec, now, None) | {"pending": None}
        c.archive.put(job_id, rec, view)
        c.store.drop_job(job_id)
        c.submit_keys.pop((rec.request.owner, rec.request.key), None)
        c.progress_dirty.discard(job_id)  # the archived record has its progress
        c.core(events.Retire(job_id))
    if heap.crossed(retired, c.sched.retired):
        heap.release()  # their buffers' pages, freed below live blocks
