"""``tiresias-sim --sweep``: every grid point run once, in parallel, resumable, with a table
and a plot; a bad grid stops before any simulation."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from coordinator.sim.cli import main

ROOT = Path(__file__).resolve().parents[2]
FIGURE7 = [str(ROOT / "examples" / "traces" / "figure7.csv"), "--interval", "1"]


def rows(out: Path) -> list[dict[str, str]]:
    with (out / "sweep.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_sweep_runs_the_grid_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sw"
    args = [*FIGURE7, "--policy", "srsf", "--policy", "las", "--processes", "2", "--out", str(out)]
    grid = ["--sweep", "cluster", "1x2", "1x8"]
    assert main([*args, *grid]) == 0
    got = {(r["policy"], r["cluster"]): float(r["avg_jct"]) for r in rows(out)}
    # Figure 7 on 2 GPUs: SRSF 28/3, continuous LAS 35/3; on 8 GPUs every job starts at once
    assert got[("srsf", "1x2")] == pytest.approx(28 / 3)
    assert got[("las", "1x2")] == pytest.approx(35 / 3)
    assert got[("srsf", "1x8")] == got[("las", "1x8")] == pytest.approx(16 / 3)
    assert (out / "sweep.png").stat().st_size > 0 and "| srsf | 1x2 |" in (
        out / "sweep.md"
    ).read_text()
    # an interrupted sweep: drop the last row; a rerun runs only that config again
    lines = (out / "sweep.csv").read_text().splitlines(keepends=True)
    (out / "sweep.csv").write_text("".join(lines[:-1]))
    capsys.readouterr()
    assert main([*args, *grid]) == 0
    assert "4 configs (1 run now)" in capsys.readouterr().out
    assert len(rows(out)) == 4
    # another grid into the same directory is refused, not mixed in
    code = main([*args, "--sweep", "promote-knob", "2"])
    assert code == 2 and "holds another grid" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        (["--sweep", "colour", "red"], "--sweep colour: unknown; valid: thresholds"),
        (["--sweep", "thresholds", "5,1"], "queue_thresholds must be positive and increasing"),
        (["--sweep", "load", "0"], "--sweep load 0: a load must be > 0"),
        (["--sweep", "cluster", "2"], "expected MACHINESxGPUS"),
    ],
)
def test_bad_grids_stop_before_simulating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sweep: list[str], message: str
) -> None:
    code = main([*FIGURE7, "--policy", "tiresias-l", "--out", str(tmp_path / "o"), *sweep])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o" / "sweep.csv").exists()


def test_sweep_needs_an_out_dir(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*FIGURE7, "--policy", "srsf", "--sweep", "cluster", "1x2"])
    assert code == 2 and "--sweep needs --out DIR" in capsys.readouterr().err
