"""Retention of finished jobs' files, so that a long-lived cluster's disks do not fill.

- The coordinator removes a job's checkpoint directory (``CHECKPOINT_ROOT/<job key>``) once
  the job has been finished for ``--keep-finished`` seconds: a finished job is never
  resumed, and its checkpoints are the big files.
- Each node agent removes a job's log directory (``WORKDIR/logs/<job key>``) once nothing has
  been written in it for its own ``--keep-finished``: logs of running jobs are written, so
  only those of jobs that ended (or were silent that long) go.

Both sweep at start and then every :data:`SWEEP_EVERY` seconds on a thread of their own
(the coordinator's reads the state database through its own read-only connection), so the
event loops never wait on a disk.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from coordinator.service.store import finished_before

log = logging.getLogger("tiresias.retention")

#: Default of ``--keep-finished``: a week, time to read a failed job's logs or copy its
#: weights, short enough that a busy cluster does not fill its disks.
KEEP_FINISHED = 7 * 86400.0
#: Seconds between sweeps.
SWEEP_EVERY = 3600.0


def newest_write(directory: Path) -> float:
    """The newest modification time of ``directory`` and everything in it."""
    newest = directory.stat().st_mtime
    for root, dirs, files in os.walk(directory):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
    return newest


def _remove(directory: Path, why: str) -> bool:
    try:
        shutil.rmtree(directory)
    except FileNotFoundError:
        return False
    except OSError as e:
        log.warning("could not remove %s (%s): %s", directory, why, e)
        return False
    log.info("removed %s (%s)", directory, why)
    return True


def sweep_checkpoints(database: Path, root: Path, keep: float, now: float) -> list[Path]:
    """Remove the checkpoint directories of the jobs in ``database`` that finished more
    than ``keep`` seconds before ``now`` (wall clock). The ones removed."""
    db = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        keys = finished_before(db, now - keep)
    finally:
        db.close()
    why = f"finished over {keep:g} s ago"
    return [root / k for k in keys if (root / k).is_dir() and _remove(root / k, why)]


def sweep_logs(logs: Path, keep: float, now: float) -> list[Path]:
    """Remove the job log directories under ``logs`` nothing was written in for ``keep``
    seconds before ``now`` (wall clock). The ones removed."""
    if not logs.is_dir():
        return []
    why = f"nothing written for {keep:g} s"
    return [
        d
        for d in sorted(logs.iterdir())
        if d.is_dir() and now - newest_write(d) > keep and _remove(d, why)
    ]


def start(sweep: Callable[[float], object], name: str) -> threading.Event:
    """Run ``sweep(time.time())`` now and every :data:`SWEEP_EVERY` seconds on a daemon
    thread, until the returned event is set."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                sweep(time.time())
            except (OSError, sqlite3.Error) as e:
                log.warning("retention sweep failed: %s", e)
            stop.wait(SWEEP_EVERY)

    threading.Thread(target=loop, name=name, daemon=True).start()
    return stop
