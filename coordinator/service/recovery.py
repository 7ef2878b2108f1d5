"""Opening a state directory: refuse one this coordinator cannot replay exactly, and rebuild
the scheduler, the job records and the learned PACKLIMIT history as last committed."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from dataclasses import dataclass

from coordinator.core import events
from coordinator.core.explain import holding
from coordinator.core.model import CoreError
from coordinator.core.packlimit import PackLimit
from coordinator.core.scheduler import Scheduler
from coordinator.core.settings import Settings, build_scheduler, restore_scheduler, snapshot
from coordinator.service.options import Options
from coordinator.service.records import JobRecord
from coordinator.service.store import Store

log = logging.getLogger("tiresias.coordinator")


class Clock:
    """Core time in seconds: monotonic within a process and continued across restarts from
    the journal (``base``); or advanced only by ``advance`` requests (manual, for tests)."""

    def __init__(self, base: float, manual: bool) -> None:
        self.manual = manual
        self.base = base
        self._mono0 = time.monotonic()

    def now(self) -> float:
        return self.base if self.manual else self.base + time.monotonic() - self._mono0

    def advance(self, seconds: float) -> None:
        self.base += seconds


#: Options the shell derives rather than the operator (``--executor slurm`` without
#: ``--manual-clock`` turns on ``await_begin``): a journal from before one existed was written
#: at its default and is upgraded to today's value instead of refused (``_upgrade``).
DERIVED = frozenset({"await_begin"})


def check_core_options(store: Store, opts: Options, settings: Settings) -> None:
    """Replay is exact only under the options the journal was written with: refuse a
    restart that changes them, except a derived option the journal predates."""
    gittins_history = str(opts.gittins_history) if opts.gittins_history else None
    mine = {**settings.journal_record(), "gittins_history": gittins_history}
    # options newer than the journal were at what is now their default
    defaults = Settings().journal_record()
    stored = store.get_meta("core_options")
    if stored is None or store.empty():  # nothing to replay: any options will do
        with store.tx():
            store.set_meta("core_options", mine)
        return
    predated: dict[str, object] = {}
    for key, value in mine.items():
        was = stored.get(key, defaults.get(key))
        if was == value:
            continue
        if key in DERIVED and key not in stored:
            predated[key] = value
            continue
        raise ValueError(
            f"state {opts.state} was created with {key}={was!r} but this "
            f"start asks for {value!r}; restart with the same scheduler options or "
            f"use a new --state"
        )
    if predated:
        with store.tx():  # the snapshot and the options it is under, together
            _upgrade(store, opts, settings, predated)
            store.set_meta("core_options", mine)


def _upgrade(store: Store, opts: Options, settings: Settings, new: dict[str, object]) -> None:
    """Replay the journal as it was written (``new``'s options at their defaults), then
    snapshot that state under ``new``: later restarts replay only what ran under it."""
    defaults = Settings().journal_record()
    written = dataclasses.replace(settings, **{key: defaults[key] for key in new})
    state = snapshot(load(store, opts, written).sched)
    state["scheduler"]["config"].update(new)
    store.save_snapshot(state)
    changed = ", ".join(f"{key}={value!r}" for key, value in new.items())
    log.info("state %s predates %s: replayed as written, continuing under it", opts.state, changed)


def instance(store: Store) -> str:
    """This state directory's random identity: job keys ``<job id>-<instance>`` are unique
    across state directories and coordinators, although every new state starts at j1."""
    found = store.get_meta("instance")
    if found is None:
        found = secrets.token_hex(4)
        with store.tx():
            store.set_meta("instance", found)
    return str(found)


@dataclass
class Loaded:
    sched: Scheduler
    #: In submission order (j1, j2, …).
    records: dict[str, JobRecord]
    packlimit: PackLimit
    next_job: int
    #: Journal events replayed; None for a fresh state directory.
    replayed: int | None


def load(store: Store, opts: Options, settings: Settings, fresh: Scheduler | None = None) -> Loaded:
    """Everything as last committed: the snapshot's scheduler (``fresh`` when nothing was
    snapshotted) with the journal replayed on it, the job records, the PACKLIMIT learner."""
    snapshot, journal = store.load()
    if snapshot is None:
        sched = fresh or build_scheduler(settings)
    else:
        sched = restore_scheduler(snapshot, settings)
    for kind, args in journal:
        event = events.from_wire(kind, args)  # CoreError: a journal this version cannot read
        try:
            sched.apply(event)
        except CoreError as e:  # it failed live too, and was journaled regardless
            log.debug("replayed %s failed again: %s", kind, e)
    holding(sched)  # the index a view of the running jobs reads, kept from here on
    records = {
        job_id: JobRecord.from_wire(job_id, rec)
        for job_id, rec in sorted(store.jobs(), key=lambda item: int(item[0][1:]))
    }
    packlimit = PackLimit(settings.packlimit_value)
    for key, skew, placement, iter_time in store.observations():
        packlimit.observe(key, skew, placement, iter_time)
    replayed = len(journal) if journal or snapshot else None
    return Loaded(sched, records, packlimit, store.get_meta("next_job", 1), replayed)


def submit_keys(records: dict[str, JobRecord]) -> dict[tuple[str | None, str | None], str]:
    """(owner, client key) → job id: a resent submit is answered with the same job."""
    return {
        (rec.request.owner, rec.request.key): job_id
        for job_id, rec in records.items()
        if rec.request.key is not None
    }
