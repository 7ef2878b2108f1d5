"""Trace readers: the Tiresias CSV, the Philly CSV and Philly's raw ``cluster_job_log`` JSON,
each turned into ``JobSpec``s with arrivals in seconds since the slice's first submission.

Bad input stops the run with a ``TraceError`` naming file, line and column: a simulation of
a silently half-read trace is worse than no simulation.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TextIO

from coordinator.core.model import JobSpec
from coordinator.sim.data import resolve_trace
from coordinator.sim.profiles import profile

FORMATS = ("tiresias", "philly", "philly-json")
DATED_FORMATS = ("philly", "philly-json")

_COLUMNS = {
    "tiresias": ("job_id", "num_gpu", "submit_time", "model_name", "duration"),
    "philly": ("timestamp", "duration", "num_gpus", "cluster"),
}


#: Trace timestamps are local wall-clock times; one with a zone could not be ordered
#: against the others.
NO_ZONE = "expected a local time without a time zone, as the trace's own timestamps"


class TraceError(Exception):
    """Unreadable or malformed trace; the message says where and what."""


@dataclass
class Trace:
    """Jobs read from one trace file, sorted by arrival, plus rows left out and why."""

    specs: list[JobSpec]
    format: str
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class _Row:
    """One job before slicing: ``submit`` is seconds (Tiresias) or a datetime (Philly)."""

    job_id: str
    gpus: int
    submit: float | datetime
    duration: float
    model: str | None = None
    user: str | None = None
    vc: str | None = None


def parse_when(text: str, *, end: bool = False) -> datetime:
    """A ``--start``/``--end`` bound. A bare date as ``end`` still means that day's midnight:
    slices are half-open, [start, end)."""
    kind = "end" if end else "start"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        try:
            return datetime.combine(date.fromisoformat(text), datetime.min.time())
        except ValueError:
            raise TraceError(
                f"--{kind} {text!r}: expected YYYY-MM-DD or 'YYYY-MM-DD HH:MM:SS'"
            ) from None
    if when.tzinfo is not None:
        raise TraceError(f"--{kind} {text!r}: {NO_ZONE}")
    return when


def detect_format(path: Path) -> str:
    """Guess the format from the first non-blank character (``[`` is JSON) or the CSV header."""
    with _open(path, errors="replace") as f:  # bad bytes are reported, with their line, later
        head = f.read(4096)
    stripped = head.lstrip()
    if stripped.startswith("["):
        return "philly-json"
    header = {c.strip() for c in stripped.splitlines()[0].split(",")} if stripped else set()
    for fmt, columns in _COLUMNS.items():
        if set(columns) <= header:
            return fmt
    raise TraceError(
        f"{path}: cannot tell the trace format from its header {sorted(header)}; "
        f"pass --format ({', '.join(FORMATS)})"
    )


def load_trace(
    path: str | Path,
    fmt: str | None = None,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    vc: str | None = None,
    limit: int | None = None,
) -> Trace:
    """Read, slice (submission in [start, end), virtual cluster, first ``limit`` by
    submission) and rebase arrivals to the first submitted job of the slice. ``path`` may
    name a shipped trace (``philly``)."""
    path = resolve_trace(path)
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; valid: {', '.join(FORMATS)}")
    if fmt not in DATED_FORMATS and (start or end or vc):
        raise TraceError(
            f"{path}: --start/--end/--vc need a dated trace ({', '.join(DATED_FORMATS)}), not {fmt}"
        )
    skipped: Counter[str] = Counter()
    rows = list(_read_json(path, skipped) if fmt == "philly-json" else _read_csv(path, fmt))
    rows = [
        r
        for r in rows
        if (vc is None or r.vc == vc)
        and (start is None or r.submit >= start)  # type: ignore[operator]
        and (end is None or r.submit < end)  # type: ignore[operator]
    ]
    rows.sort(key=lambda r: r.submit)  # stable: equal submissions keep file order
    if limit is not None:
        rows = rows[:limit]
    return Trace(_rebase(rows), fmt, skipped)


def _rebase(rows: list[_Row]) -> list[JobSpec]:
    if not rows:
        return []
    first = rows[0].submit

    def offset(submit: float | datetime) -> float:
        delta = submit - first  # type: ignore[operator]
        return delta.total_seconds() if isinstance(delta, timedelta) else float(delta)

    specs = []
    for r in rows:
        known = profile(r.model)
        specs.append(
            JobSpec(
                job_id=r.job_id,
                gpus=r.gpus,
                arrival=offset(r.submit),
                duration=r.duration,
                skew=known.skew if known else None,
                model=r.model,
                user=r.user,
                vc=r.vc,
            )
        )
    return specs


def _open(path: Path, errors: str = "strict") -> TextIO:
    try:
        return path.open(newline="", encoding="utf-8", errors=errors)
    except OSError as e:
        raise TraceError(f"{path}: cannot open: {e.strerror}") from None


def _text(path: Path) -> str:
    """The whole trace as text; bytes that are not UTF-8 are an error naming their line."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceError(f"{path}: cannot open: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise TraceError(f"{path}, line {line}, column {column}: not UTF-8 text") from None


class _Cells:
    """Typed access to one CSV row, raising errors that point at the offending cell."""

    def __init__(self, path: Path, line: int, index: dict[str, int], row: list[str]) -> None:
        self.path, self.line, self.index, self.row = path, line, index, row

    def fail(self, column: str, message: str) -> TraceError:
        col = self.index[column] + 1
        return TraceError(f"{self.path}, line {self.line}, column {col} ({column}): {message}")

    def text(self, column: str) -> str:
        value = self.row[self.index[column]].strip()
        if not value:
            raise self.fail(column, "empty")
        return value

    def number(self, column: str) -> float:
        value = self.text(column)
        try:
            x = float(value)
        except ValueError:
            raise self.fail(column, f"expected a number, got {value!r}") from None
        if not math.isfinite(x) or x < 0:
            raise self.fail(column, f"expected a finite number ≥ 0, got {value!r}")
        return x

    def gpus(self, column: str) -> int:
        x = self.number(column)
        if x < 1 or not x.is_integer():
            got = self.text(column)
            raise self.fail(column, f"expected a whole number of GPUs ≥ 1, got {got!r}")
        return int(x)

    def when(self, column: str) -> datetime:
        value = self.text(column)
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise self.fail(column, f"expected 'YYYY-MM-DD HH:MM:SS', got {value!r}") from None
        if when.tzinfo is not None:
            raise self.fail(column, f"{NO_ZONE}, got {value!r}")
        return when


def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line, cells) of each CSV record; a malformed one (a field over the csv module's
    limit, a stray quote) is an error naming its line."""
    reader = csv.reader(io.StringIO(_text(path), newline=""))
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise TraceError(f"{path}, line {reader.line_num}: {e}") from None
        yield reader.line_num, row


def _read_csv(path: Path, fmt: str) -> Iterator[_Row]:
    rows = _csv_rows(path)
    header = [c.strip() for c in next(rows, (1, []))[1]]
    missing = [c for c in _COLUMNS[fmt] if c not in header]
    if missing:
        raise TraceError(
            f"{path}, line 1: missing column(s) {', '.join(missing)} for the {fmt} format"
        )
    index = {name: i for i, name in enumerate(header)}
    seen: set[str] = set()
    for line, row in rows:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            col = min(len(row), len(header)) + 1
            raise TraceError(
                f"{path}, line {line}, column {col}: expected {len(header)} fields, got {len(row)}"
            )
        cells = _Cells(path, line, index, row)
        if fmt == "tiresias":
            job_id = cells.text("job_id")
            if job_id in seen:
                raise cells.fail("job_id", f"duplicate job id {job_id!r}")
            seen.add(job_id)
            yield _Row(
                job_id=job_id,
                gpus=cells.gpus("num_gpu"),
                submit=cells.number("submit_time"),
                duration=cells.number("duration"),
                model=row[index["model_name"]].strip() or None,
            )
        else:
            yield _Row(
                job_id=str(line),  # Philly rows have no id; the line is unique
                gpus=cells.gpus("num_gpus"),
                submit=cells.when("timestamp"),
                duration=cells.number("duration"),
                vc=cells.text("cluster"),
            )


def _read_json(path: Path, skipped: Counter[str]) -> Iterator[_Row]:
    """Philly ``cluster_job_log``: a JSON list of jobs. Decoded one job at a time so that an
    error can name the line and column where the bad job starts."""
    text = _text(path)
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0)
    if not text.startswith("[", pos):
        raise TraceError(f"{_where(path, text, pos)}: expected a JSON list of jobs")
    pos = _skip_ws(text, pos + 1)
    seen: set[str] = set()
    while not text.startswith("]", pos):
        try:
            job, after = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise TraceError(f"{path}, line {e.lineno}, column {e.colno}: {e.msg}") from None
        except RecursionError:
            raise TraceError(f"{_where(path, text, pos)}: a job nested too deeply") from None

        def fail(msg: str, p: int = pos) -> TraceError:
            return TraceError(f"{_where(path, text, p)}: {msg}")

        row = _json_job(job, fail)
        if isinstance(row, str):
            skipped[row] += 1
        else:
            if row.job_id in seen:
                raise TraceError(f"{_where(path, text, pos)}: duplicate jobid {row.job_id!r}")
            seen.add(row.job_id)
            yield row
        pos = _skip_ws(text, after)
        if text.startswith(",", pos):
            pos = _skip_ws(text, pos + 1)
        elif not text.startswith("]", pos):
            raise TraceError(f"{_where(path, text, pos)}: expected ',' or ']' after a job")


def _json_job(job: object, fail: Callable[[str], TraceError]) -> _Row | str:
    """One job, or the reason it is left out (no complete attempt, no GPUs)."""
    if not isinstance(job, dict):
        raise fail(f"expected a job object, got {type(job).__name__}")
    job_id = job.get("jobid")
    if not isinstance(job_id, str) or not job_id:
        raise fail("job without a 'jobid' string")

    def stamp(value: object, what: str) -> datetime | None:
        if value is None or value == "None":
            return None
        if isinstance(value, str):
            try:
                when = datetime.fromisoformat(value)
            except ValueError:
                pass
            else:
                if when.tzinfo is not None:
                    raise fail(f"job {job_id!r}: {what}: {NO_ZONE}, got {value!r}")
                return when
        raise fail(f"job {job_id!r}: {what}: expected 'YYYY-MM-DD HH:MM:SS', got {value!r}")

    submitted = stamp(job.get("submitted_time"), "submitted_time")
    if submitted is None:
        raise fail(f"job {job_id!r}: missing submitted_time")
    attempts = job.get("attempts")
    if not isinstance(attempts, list):
        raise fail(f"job {job_id!r}: 'attempts' must be a list")
    duration, gpus = 0.0, 0
    complete = False
    for i, attempt in enumerate(attempts):
        if not isinstance(attempt, dict):
            raise fail(f"job {job_id!r}: attempts[{i}] must be an object")
        begin = stamp(attempt.get("start_time"), f"attempts[{i}].start_time")
        finish = stamp(attempt.get("end_time"), f"attempts[{i}].end_time")
        if begin is None or finish is None or finish < begin:
            continue
        detail = attempt.get("detail", [])
        if not isinstance(detail, list) or not all(
            isinstance(d, dict) and isinstance(d.get("gpus", []), list) for d in detail
        ):
            raise fail(f"job {job_id!r}: attempts[{i}].detail must list {{ip, gpus: [...]}}")
        complete = True
        duration += (finish - begin).total_seconds()
        gpus = sum(len(d.get("gpus", [])) for d in detail)  # the last complete attempt's
    if not complete:
        return "no complete attempt"
    if gpus == 0:
        return "no GPUs in its last complete attempt"
    vc = job.get("vc")
    user = job.get("user")
    return _Row(
        job_id=job_id,
        gpus=gpus,
        submit=submitted,
        duration=duration,
        user=user if isinstance(user, str) else None,
        vc=vc if isinstance(vc, str) else None,
    )


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _where(path: Path, text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"{path}, line {line}, column {column}"
