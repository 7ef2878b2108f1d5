"""``tiresias-sim`` end to end: the paper's Figure 7 numbers, JSON schema, output files, and
errors that stop the run cleanly."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.core import POLICY_NAMES
from coordinator.sim.cli import main
from coordinator.sim.report import METRICS

ROOT = Path(__file__).resolve().parents[2]
FIGURE7 = ROOT / "examples" / "traces" / "figure7.csv"
DATA = ROOT / "coordinator" / "sim" / "data"
FIGURE7_ARGS = [str(FIGURE7), "--cluster", "1x2", "--interval", "1"]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow  # starts a process
@pytest.mark.skipif(shutil.which("tiresias-sim") is None, reason="console script not installed")
def test_figure7_console_script() -> None:
    """The paper's worked example, through the installed entry point: SRSF 28/3, LAS 35/3."""
    out = subprocess.run(
        ["tiresias-sim", *FIGURE7_ARGS, "--policy", "srsf", "--policy", "las"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    srsf = next(line for line in out.splitlines() if line.startswith("srsf "))
    las = next(line for line in out.splitlines() if line.startswith("las "))
    assert srsf.split()[1] == "9.33" and las.split()[1] == "11.67"
    assert "(1.25)" in las  # 35/28: ratio to the first policy


def test_figure7_json(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, *FIGURE7_ARGS, "--policy", "srsf", "--policy", "las")
    assert list(doc) == ["policies"]
    assert list(doc["policies"]) == ["srsf", "las"]
    for metrics in doc["policies"].values():
        assert list(metrics) == list(METRICS)
        assert all(isinstance(v, int | float) for v in metrics.values())
    assert doc["policies"]["srsf"]["avg_jct"] == pytest.approx(28 / 3)
    assert doc["policies"]["las"]["avg_jct"] == pytest.approx(35 / 3)
    assert doc["policies"]["srsf"]["makespan"] == 16.0
    assert doc["policies"]["srsf"]["utilization"] == pytest.approx((4 + 8 + 12) / (2 * 16))


def test_figure7_gittins_both_variants(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Pinned on purpose: the index as written gives 28/3, the authors' simulator 10."""
    samples = tmp_path / "s.csv"
    samples.write_text("duration\n4\n8\n12\n")
    args = [*FIGURE7_ARGS, "--policy", "tiresias-g", "--gittins-samples", str(samples)]
    args += ["--gittins-fixed"]
    args += ["--thresholds", "100"]  # one Δ far above every job: the index alone decides
    written = run_json(capsys, *args)["policies"]["tiresias-g"]["avg_jct"]
    authors = run_json(capsys, *args, "--gittins-variant", "authors")
    assert written == pytest.approx(28 / 3)
    assert authors["policies"]["tiresias-g"]["avg_jct"] == pytest.approx(10.0)


def test_out_dir(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "res"
    main([*FIGURE7_ARGS, "--policy", "srsf", "--policy", "las", "--out", str(out)])
    assert "11.67" in capsys.readouterr().out
    with (out / "jobs-las.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["job_id"], float(r["jct"])) for r in rows) == [
        ("1", 5.0),
        ("2", 14.0),
        ("3", 16.0),
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policies"]["las"]["avg_jct"] == pytest.approx(35 / 3)
    assert summary["bins"]["srsf"]["small-short"]["jobs"] == 3
    assert summary["bins"]["srsf"]["large-long"]["avg_jct"] is None  # empty bin: null, not NaN
    assert (out / "jct_cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # a process of its own, where the fakes shadow the real packages
def test_without_the_sim_extra_it_runs_and_says_what_is_not_drawn(tmp_path: Path) -> None:
    """matplotlib and tqdm are the ``sim`` extra, not base dependencies: shadowed by
    packages that fail to import, the run writes everything but the plot, and says so."""
    fake = tmp_path / "fake"
    for name in ("matplotlib", "tqdm"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    out = tmp_path / "res"
    args = [*FIGURE7_ARGS, "--policy", "las", "--out", str(out)]
    code = "import sys; from coordinator.sim.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "11.67" in done.stdout
    assert (out / "summary.json").exists() and not (out / "jct_cdf.png").exists()
    assert "no JCT CDF plot: matplotlib is not installed" in done.stderr
    assert "pip install 'tiresias[sim]'" in done.stderr and "Traceback" not in done.stderr


def test_bins_split(capsys: pytest.CaptureFixture[str]) -> None:
    main([*FIGURE7_ARGS, "--policy", "srsf", "--bins-gpus", "2", "--bins-duration", "7"])
    out = capsys.readouterr().out
    assert "large: ≥ 2 GPUs; long: ≥ 7 s" in out
    names = ("small-short", "small-long", "large-short", "large-long")
    bins = {line.split()[0]: line.split()[2] for line in out.splitlines() if line.startswith(names)}
    assert bins == {"small-short": "0", "small-long": "1", "large-short": "2", "large-long": "0"}


def test_unknown_policy_lists_valid_names(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(FIGURE7), "--policy", "nope"])
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown policy 'nope'" in err
    assert all(name in err for name in POLICY_NAMES)


def test_malformed_trace_stops_without_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,num_gpu,submit_time,model_name,duration\n1,1,0,,5\n2,two,0,,5\n")
    code = main([str(bad), "--policy", "tiresias-l"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{bad}, line 3, column 2 (num_gpu): expected a number, got 'two'" in err
    assert "Traceback" not in err


def test_oversize_jobs_reported(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,num_gpu,submit_time,model_name,duration\n1,1,0,,5\n2,8,0,,5\n")
    assert main([str(trace), "--cluster", "1x4", "--policy", "tiresias-l", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["policies"]["tiresias-l"]["avg_jct"] == 5.0
    assert "skipped 1 job(s) the core refused (all policies), e.g. job 2" in err


def test_bad_knobs_are_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (["--cluster", "4by4"], ["--queues", "3"], ["--placement", "nowhere"]):
        code = main([str(FIGURE7), "--policy", "tiresias-l", *extra])
        assert code == 2
        assert "tiresias-sim: error:" in capsys.readouterr().err


def test_shipped_traces_by_name_from_any_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's examples: shipped traces and Gittins samples by name, outside the repo,
    give what the files themselves give."""
    monkeypatch.chdir(tmp_path)
    knobs = ["--cluster", "4x4", "--policy", "tiresias-g", "--gittins-samples"]
    by_name = run_json(capsys, "tiresias-60job", *knobs, "yarn-gput1000")
    by_path = run_json(
        capsys, str(DATA / "tiresias-60job.csv"), *knobs, str(DATA / "yarn-gput1000.csv")
    )
    assert by_name == by_path and by_name["policies"]["tiresias-g"]["avg_jct"] > 0
    philly = run_json(capsys, "philly", "--limit", "200", "--cluster", "8x8", "--policy", "srsf")
    assert philly["policies"]["srsf"]["makespan"] > 0


def test_out_with_reasons_tells_why_each_job_waited(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Job 1 (4 GPUs) is demoted at 25 s; jobs 2 and 3 (Q1) wait for GPUs, then for job 1
    to checkpoint (5 s), then job 1 waits in Q2 for them."""
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
        "1,4,0,1,,100,0\n2,2,10,1,,20,0\n3,2,10,1,,20,0\n"
    )
    out = tmp_path / "res"
    args = [str(trace), "--cluster", "1x4", "--thresholds", "100", "--preempt-cost", "5"]
    assert main([*args, "--policy", "tiresias-l", "--out", str(out), "--reasons"]) == 0
    docs = {
        d["job_id"]: d
        for d in map(json.loads, (out / "reasons-tiresias-l.jsonl").read_text().splitlines())
    }
    assert [(r["time"], r["queue"], r["reason"]) for r in docs["2"]["reasons"]] == [
        (10.0, 0, "gpus"),
        (25.0, 0, "releasing"),
    ]
    assert [r["text"] for r in docs["2"]["reasons"]] == [
        "waiting for 2 GPUs (0 free): the 1 job ahead of it (Q1: 1) holds or needs 4 of 4; "
        "it will be consolidated (skew not measured yet)",
        "its turn has come: waiting for 1 to checkpoint and free 4 GPUs; "
        "it will be consolidated (skew not measured yet)",
    ]
    assert docs["1"]["reasons"][0]["reason"] == "gpus"
    assert docs["1"]["reasons"][0]["text"].startswith(
        "waiting for 4 GPUs (0 free): the 2 jobs ahead of it (Q1: 2) hold or need 4 of 4; "
        "in Q2 since its service passed 100 GPU-s (100 GPU-s attained); preempted 5s ago"
    )
    assert [(h["time"], h["text"]) for h in docs["1"]["history"]] == [
        (0.0, "submitted"),
        (0.0, "started on n000:0,1,2,3"),
        (25.0, "demoted to Q2: its service passed 100 GPU-s"),
        (25.0, "preempted for 2 (Q1), 3 (Q1), a higher queue than its Q2"),
        (50.0, "restarted on n000:0,1,2,3 (restart 1)"),
        (130.0, "completed after 1m of run time"),
    ]
    with (out / "jobs-tiresias-l.csv").open() as f:
        assert {r["job_id"]: r["main_reason"] for r in csv.DictReader(f)} == {
            "1": "gpus",
            "2": "gpus",
            "3": "gpus",
        }
    code = main([*args, "--policy", "tiresias-l", "--reasons"])
    assert code == 2
    assert "--reasons needs --out DIR" in capsys.readouterr().err


def test_elastic_jobs_start_on_what_fits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--elastic 1: the 4-GPU job starts on the 3 GPUs the 1-GPU job leaves, instead of
    waiting for all 4; its resize is counted as a preemption."""
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
        "1,1,0,1,,100,0\n2,4,0,1,,100,0\n"
    )
    args = (str(trace), "--cluster", "1x4", "--policy", "tiresias-l")
    rigid = run_json(capsys, *args)["policies"]["tiresias-l"]
    elastic = run_json(capsys, *args, "--elastic", "1")["policies"]["tiresias-l"]
    assert elastic["avg_jct"] < rigid["avg_jct"]
    assert (rigid["preemptions"], elastic["preemptions"]) == (0, 1)
