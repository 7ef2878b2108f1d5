"""Finding and reading profile files: one file, a live process, its descendants, a directory.

A root agent reads paths that a job's user controls, so a file is read only as a bounded
regular file, never through a link or from a FIFO; a profile left by an earlier process with
the same pid is told apart by the process's start time."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from ibverbs_tap.profile import (
    DEFAULT_DIR,
    DIR_ENV,
    FILE_PREFIX,
    HEADER,
    NotTracedError,
    ProcessGoneError,
    ProcessProfile,
    TapError,
    parse,
)
from tiresias_launch.procfs import parent_pid, start_ticks


def _denied(path: object) -> str:
    return f"cannot read {path}: permission denied (run as the process's user or root)"


#: Largest profile file read (one is 2.1 MB): a reader running as root never reads more.
MAX_FILE_BYTES = 16 << 20


def _read(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a profile file, never through a symbolic link, from anything but a
    regular file, or past MAX_FILE_BYTES (a job's user may put anything at its path)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise TapError(f"{path} is a symbolic link, not a profile") from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise TapError(f"{path} is not a regular file")
        raw = f.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise TapError(f"{path} is larger than any profile ({MAX_FILE_BYTES} bytes)")
    return raw


def _ticks(raw: bytes) -> int:
    ticks: int = HEADER.unpack_from(raw)[10]
    return ticks


def read_file(path: str | os.PathLike[str]) -> ProcessProfile:
    """A profile file as it is, whether or not its process still runs (``run`` dumps these)."""
    try:
        raw = _read(path)
    except PermissionError:
        raise TapError(_denied(path)) from None
    except FileNotFoundError:
        raise TapError(f"{path} does not exist") from None
    return parse(raw, str(path))


def environ_of(pid: int) -> dict[str, str]:
    """The environment ``pid`` started with; empty if we may not read it."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (e.decode(errors="replace").partition("=") for e in raw.split(b"\0") if e)
    return {k: v for k, sep, v in pairs if sep}


def profile_dir(pid: int) -> str:
    """Where ``pid`` writes its profile: its IBVERBS_TAP_DIR, else /dev/shm."""
    return environ_of(pid).get(DIR_ENV) or DEFAULT_DIR


def _proc_start_ticks(pid: int) -> int | None:
    try:
        return start_ticks(pid)
    except OSError:
        return None


def read_process(pid: int, directory: str | None = None) -> ProcessProfile:
    """The live profile of a running traced process.

    Raises ProcessGoneError when no such process runs, NotTracedError when it runs without the
    tap (or the file is left over from an earlier process with the same pid), TapError when
    the file cannot be read or parsed."""
    directory = directory or profile_dir(pid)
    path = os.path.join(directory, f"{FILE_PREFIX}{pid}")
    ticks = _proc_start_ticks(pid)
    try:
        raw = _read(path)
    except FileNotFoundError:
        if ticks is None:
            raise ProcessGoneError(f"process {pid} does not exist") from None
        raise NotTracedError(
            f"process {pid} is not traced by ibverbs-tap (no {path}); start it with "
            "`ibverbs-tap run -- CMD…`"
        ) from None
    except PermissionError:
        raise TapError(_denied(path)) from None
    profile = parse(raw, path)
    if ticks is None:
        raise ProcessGoneError(f"process {pid} has exited; {path} is left from it")
    if _ticks(raw) != ticks:
        raise NotTracedError(
            f"process {pid} is not traced by ibverbs-tap: {path} is left from an earlier "
            "process with the same pid"
        )
    return profile


def _children_map() -> dict[int, list[int]]:
    """ppid → child pids of every process visible in /proc."""
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ppid = parent_pid(entry.name)
        except OSError:
            continue
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def descendants(pid: int) -> list[int]:
    """``pid`` and all its live descendants, parents first."""
    kids = _children_map()
    order, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        order.append(p)
        todo.extend(sorted(kids.get(p, [])))
    return order


def read_group(pid: int, others: Iterable[int]) -> tuple[list[ProcessProfile], list[int]]:
    """Profiles of ``pid`` (which must be traced) and of the traced ``others``, and the
    others that are not traced (or are gone)."""
    profiles, untraced = [read_process(pid)], []
    for p in others:
        try:
            profiles.append(read_process(p))
        except TapError:
            untraced.append(p)
    return profiles, untraced


def read_tree(pid: int) -> tuple[list[ProcessProfile], list[int]]:
    """Profiles of ``pid`` and its traced descendants, and the descendants that are not
    traced. ``pid`` itself must be traced."""
    return read_group(pid, descendants(pid)[1:])


def read_directory(directory: str | os.PathLike[str]) -> Iterator[ProcessProfile]:
    """Every profile file in ``directory`` (``run`` collects its processes this way)."""
    for path in sorted(Path(directory).glob(f"{FILE_PREFIX}*")):
        yield read_file(path)
