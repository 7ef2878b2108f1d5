"""Trace readers: each format, slicing, rebasing, and errors that point at the bad cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.sim.traces import (
    TraceError,
    detect_format,
    load_trace,
    parse_when,
    resolve_trace,
)

PHILLY_ROWS = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:00:10,100.0,1,100.0,vcA
2017-10-09 07:00:00,50.0,2,100.0,vcB
2017-10-10 00:00:00,10.0,4,40.0,vcA
2017-10-08 23:59:59,30.0,1,30.0,vcA
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def job(jobid: str, submitted: str, attempts: list[dict], vc: str = "vc1") -> dict:
    return {
        "jobid": jobid,
        "vc": vc,
        "user": "u1",
        "status": "Pass",
        "submitted_time": submitted,
        "attempts": attempts,
    }


def attempt(start: str | None, end: str | None, gpus_per_ip: list[int]) -> dict:
    detail = [
        {"ip": f"m{i}", "gpus": [f"gpu{g}" for g in range(n)]} for i, n in enumerate(gpus_per_ip)
    ]
    return {"start_time": start, "end_time": end, "detail": detail}


def test_philly_csv_sorted_and_rebased(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "p.csv", PHILLY_ROWS))
    assert trace.format == "philly"
    assert [s.job_id for s in trace.specs] == ["5", "3", "2", "4"]  # by submission; id = line
    assert [s.arrival for s in trace.specs] == [0.0, 25201.0, 25211.0, 86401.0]
    assert [(s.gpus, s.duration, s.vc) for s in trace.specs][1] == (2, 50.0, "vcB")


def test_philly_csv_slices(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_ROWS)
    week = load_trace(path, start=parse_when("2017-10-09"), end=parse_when("2017-10-10", end=True))
    assert [s.job_id for s in week.specs] == ["3", "2"]  # [start, end): midnight 10-10 is out
    assert week.specs[0].arrival == 0.0  # rebased to the slice's first submission
    vc = load_trace(path, vc="vcA", limit=2)
    assert [s.job_id for s in vc.specs] == ["5", "2"]


def test_tiresias_csv(tmp_path: Path) -> None:
    text = (
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
        "a,1,10,5,vgg16,100,0\nb,4,12,5,resnet50,50,0\nc,2,11,5,,7,0\n"
    )
    trace = load_trace(write(tmp_path, "t.csv", text))
    assert trace.format == "tiresias"
    assert [(s.job_id, s.arrival, s.gpus) for s in trace.specs] == [
        ("a", 0.0, 1),
        ("c", 1.0, 2),
        ("b", 2.0, 4),
    ]
    vgg, none, resnet = trace.specs
    assert vgg.skew is not None and resnet.skew is not None and vgg.skew > 0.5 > resnet.skew
    assert none.model is None and none.skew is None


def test_shipped_traces_parse() -> None:
    sixty = load_trace("tiresias-60job")  # by name, from any working directory
    assert len(sixty.specs) == 60 and sixty.specs[0].duration == 164.0
    philly = load_trace("philly.csv", limit=1000)
    assert len(philly.specs) == 1000
    assert philly.specs[0].arrival == 0.0
    assert all(a.arrival <= b.arrival for a, b in zip(philly.specs, philly.specs[1:], strict=False))


def test_a_trace_name_that_is_neither_a_file_nor_shipped_is_a_missing_file() -> None:
    assert resolve_trace("no-such-trace") == Path("no-such-trace")
    assert resolve_trace("sub/philly") == Path("sub/philly")  # a path is never a name
    with pytest.raises(TraceError, match="no-such-trace"):
        load_trace("no-such-trace")


def test_philly_json(tmp_path: Path) -> None:
    jobs = [
        job(
            "j2",
            "2017-10-09 08:00:00",
            [attempt("2017-10-09 08:00:05", "2017-10-09 08:01:05", [4, 4])],
        ),
        job(
            "j1",
            "2017-10-09 07:00:00",
            [
                attempt("2017-10-09 07:00:00", "2017-10-09 07:00:30", [1]),  # failed, retried
                attempt("2017-10-09 07:01:00", "2017-10-09 07:02:00", [2]),
            ],
        ),
        job("never", "2017-10-09 07:30:00", [attempt("2017-10-09 07:31:00", None, [1])]),
        job("queued", "2017-10-09 07:40:00", []),
        job(
            "other",
            "2017-10-09 07:50:00",
            [attempt("2017-10-09 07:50:00", "2017-10-09 07:51:00", [1])],
            vc="vc2",
        ),
    ]
    path = write(tmp_path, "cluster_job_log", json.dumps(jobs, indent=1))
    assert detect_format(path) == "philly-json"
    trace = load_trace(path)
    assert [(s.job_id, s.arrival, s.gpus, s.duration) for s in trace.specs] == [
        ("j1", 0.0, 2, 90.0),  # both attempts' run time; GPUs of the last
        ("other", 3000.0, 1, 60.0),
        ("j2", 3600.0, 8, 60.0),
    ]
    assert trace.skipped == {"no complete attempt": 2}
    assert [s.job_id for s in load_trace(path, vc="vc1").specs] == ["j1", "j2"]


def test_json_bad_job_names_line_and_column(tmp_path: Path) -> None:
    good = job("ok", "2017-10-09 07:00:00", [])
    bad = job("bad", "yesterday", [])
    path = write(tmp_path, "log.json", "[\n" + json.dumps(good) + ",\n  " + json.dumps(bad) + "\n]")
    with pytest.raises(TraceError, match=r"log\.json, line 3, column 3: job 'bad': submitted_time"):
        load_trace(path)


def test_json_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "log.json", '[\n{"jobid": "a",\n "vc": }\n]')
    with pytest.raises(TraceError, match=r"log\.json, line 3, column 8: Expecting value"):
        load_trace(path)


@pytest.mark.parametrize(
    ("row", "where"),
    [
        ("2017-10-09 07:00:00,abc,1,1,vc", "line 3, column 2 (duration): expected a number"),
        ("2017-10-09 07:00:00,-5,1,1,vc", "line 3, column 2 (duration): expected a finite"),
        ("2017-10-09 07:00:00,5,1.5,1,vc", "line 3, column 3 (num_gpus): expected a whole"),
        ("2017-10-09 07:00:00,5,0,1,vc", "line 3, column 3 (num_gpus)"),
        ("10/09/2017,5,1,1,vc", "line 3, column 1 (timestamp): expected 'YYYY-MM-DD"),
        ("2017-10-09 07:00:00,5,1,1", "line 3, column 5: expected 5 fields, got 4"),
        ("2017-10-09 07:00:00,5,1,1,", "line 3, column 5 (cluster): empty"),
    ],
)
def test_malformed_csv_row(tmp_path: Path, row: str, where: str) -> None:
    text = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 06:00:00,1,1,1,vc\n" + row
    path = write(tmp_path, "bad.csv", text + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(path)
    assert str(e.value).startswith(f"{path}, {where}")


def test_duplicate_job_id(tmp_path: Path) -> None:
    text = "job_id,num_gpu,submit_time,model_name,duration\n1,1,0,,5\n1,1,0,,5\n"
    with pytest.raises(TraceError, match=r"line 3, column 1 \(job_id\): duplicate job id '1'"):
        load_trace(write(tmp_path, "t.csv", text))


def test_unknown_header_and_missing_columns(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot tell the trace format"):
        load_trace(write(tmp_path, "x.csv", "a,b\n1,2\n"))
    with pytest.raises(TraceError, match=r"line 1: missing column\(s\) cluster"):
        load_trace(write(tmp_path, "y.csv", "timestamp,duration,num_gpus\n"), "philly")


def test_dated_options_need_a_dated_trace(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "job_id,num_gpu,submit_time,model_name,duration\n1,1,0,,5\n")
    with pytest.raises(TraceError, match="--start/--end/--vc need a dated trace"):
        load_trace(path, vc="x")


def test_parse_when() -> None:
    assert str(parse_when("2017-10-09")) == "2017-10-09 00:00:00"
    assert str(parse_when("2017-10-09 12:30:00")) == "2017-10-09 12:30:00"
    with pytest.raises(TraceError, match="--end 'soon'"):
        parse_when("soon", end=True)
