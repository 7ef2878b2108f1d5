"""Every command line refuses a bad input with a message naming the problem and exit code 2:
no traceback, no silent acceptance, no run that fails (or never ends) later."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.cli import main as tiresias
from coordinator.executors.agents.cli import main as agent
from coordinator.run import main as run
from coordinator.service import curve as keys
from coordinator.service.cli import main as coordinator
from coordinator.sim.cli import main as sim
from ibverbs_tap.cli import main as tap

REPO = Path(__file__).resolve().parents[1]
SCRIPT = str(REPO / "examples" / "fake_job.py")
FIGURE7 = str(REPO / "examples" / "traces" / "figure7.csv")
HUGE = str(10**30)


def _check(
    capsys: pytest.CaptureFixture[str], main: Callable, argv: list[str], problem: str
) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    [line] = err.strip().splitlines()  # one line, whatever the program and the problem
    assert problem in line, err
    return line


@pytest.fixture
def busy_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_service_commands(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, busy_port: int
) -> None:
    state = ["--state", str(tmp_path / "state")]
    curve = ["--curve-keys", str(keys.generate(tmp_path / "keys"))]
    cases: list[tuple[Callable, list[str], str]] = [
        (coordinator, [*state, "--policy", "bogus"], "'bogus' is not one of"),
        (coordinator, [*state, "--thresholds", "-5"], "thresholds must be positive"),
        (coordinator, [*state, "--bind", "garbage"], "--bind garbage"),
        (
            coordinator,
            [*state, *curve, "--bind", f"tcp://127.0.0.1:{busy_port}"],
            "Address already in use",
        ),
        (coordinator, [*state, "--packlimit", "nan"], "expected a finite number"),
        (coordinator, [*state, "--packlimit", "5"], "expected a number in [0, 1]"),
        (coordinator, [*state, "--grace", "-1"], "expected seconds >= 0"),
        (coordinator, [*state, "--metrics-port", "99999"], "expected a TCP port"),
        (tiresias, ["queue", "--coordinator", "garbage"], "coordinator address 'garbage'"),
        (tiresias, ["submit", "--workers", HUGE, SCRIPT], "expected a whole number"),
        (tiresias, ["submit", "--env", "NOVALUE", SCRIPT], "expected NAME=VALUE"),
        (tiresias, ["submit", "--gpus", "3", SCRIPT], "No such option '--gpus'"),
        (tiresias, ["submit", "--ps", "1", "--horovod", SCRIPT], "are exclusive"),
        (tiresias, ["submit", "--timeout", "-1", SCRIPT], "expected seconds > 0"),
        (tiresias, ["status", "--since", "yesterday"], "expected a duration (90s, 30m"),
        (tiresias, ["keys", "generate", "/proc/no/such/dir"], "keys generate"),
        (agent, ["--coordinator", "garbage", "--workdir", str(tmp_path)], "address 'garbage'"),
        (agent, ["--gpus", "1000000000"], "a node has 1 to 1024 GPUs"),
        (agent, ["--heartbeat", "0"], "expected seconds > 0"),
        (run, ["--workers", HUGE, SCRIPT], "expected a whole number"),
        (run, ["--workers", "1000000000", SCRIPT], "at most 1024 GPUs"),
        (run, ["--grace", "-1", SCRIPT], "expected seconds >= 0"),
        (run, ["--ps", "1", "--horovod", SCRIPT], "'ps' and 'horovod' are exclusive"),
        (run, [*state, "--bind", "garbage", SCRIPT], "--bind garbage"),
        (run, [*state, "--thresholds", "-5", SCRIPT], "thresholds must be positive"),
    ]
    for main, argv, problem in cases:
        _check(capsys, main, argv, problem)


def test_simulator(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    big_field = tmp_path / "big.csv"
    big_field.write_text(
        "job_id,num_gpu,submit_time,model_name,duration\n1,1,0," + "m" * 200_000 + ",5\n"
    )
    zones = tmp_path / "zones.csv"
    zones.write_text(
        "timestamp,duration,num_gpus,cluster\n"
        "2017-10-09 10:00:00,60,1,vc1\n2017-10-09 11:00:00+00:00,60,1,vc1\n"
    )
    deep = tmp_path / "deep.json"
    deep.write_text("[" + "[" * 200_000 + "]" * 200_000 + "]")
    not_utf8 = tmp_path / "latin1.csv"
    not_utf8.write_bytes(
        b"job_id,num_gpu,submit_time,model_name,duration\n1,1,0,m,5\n2,1,0,caf\xe9,5\n"
    )
    a_file = tmp_path / "file"
    a_file.write_text("")
    run = ["--policy", "las", "--no-progress"]
    cases = [
        ([str(big_field), *run], "big.csv, line 2: field larger than field limit"),
        ([str(zones), *run], "zones.csv, line 3, column 1 (timestamp): expected a local time"),
        ([str(deep), *run], "deep.json, line 1, column 2: a job nested too deeply"),
        ([str(not_utf8), *run], "latin1.csv, line 3, column 10: not UTF-8 text"),
        ([FIGURE7, *run, "--cluster", "1000000000x1"], "at most 100000 machines"),
        ([FIGURE7, *run, "--out", str(a_file / "out")], f"--out {a_file / 'out'}"),
        ([FIGURE7, *run, "--limit", "-1"], "expected a whole number"),
        ([FIGURE7, *run, "--packlimit", "5"], "expected a number in [0, 1]"),
        ([FIGURE7, *run, "--packlimit", "nan"], "expected a finite number"),
        ([FIGURE7, *run, "--interval", "inf"], "expected a finite number"),
    ]
    for argv, problem in cases:
        _check(capsys, sim, argv, problem)


@pytest.mark.parametrize("main", [run, tiresias])
def test_a_worker_range_is_checked_like_any_count(
    capsys: pytest.CaptureFixture[str], main: Callable
) -> None:
    """``--workers MIN:MAX`` (an elastic gang) is checked like any count, one line and exit
    2 before anything is sent; ``--ps`` is a fixed count in every framework, and a range
    there says so."""
    argv = [] if main is run else ["submit"]
    _check(capsys, main, [*argv, "--workers", "8:2", SCRIPT], "MIN <= MAX")
    _check(capsys, main, [*argv, "--workers", "0:2", SCRIPT], ">= 1")
    _check(capsys, main, [*argv, "--workers", "2:x", SCRIPT], "expected a number, got 'x'")
    _check(capsys, main, [*argv, "--workers", "2:", SCRIPT], "expected a number, got ''")
    _check(capsys, main, [*argv, "--ps", "1:2", SCRIPT], "parameter servers are a fixed count")
    ps_range = [*argv, "--workers", "2:4", "--ps", "1", SCRIPT]
    _check(capsys, main, ps_range, "a parameter-server job takes a fixed number of workers")


def test_a_range_is_the_most_and_the_fewest_workers() -> None:
    from tiresias_cli.values import Workers, worker_count

    assert worker_count("4") == worker_count("4:4") == Workers(4)  # a fixed count
    assert worker_count("2:8") == Workers(8, 2)
    assert (str(Workers(8, 2)), str(Workers(4))) == ("2:8", "4")


def test_usage_errors_are_one_line_in_every_program(capsys: pytest.CaptureFixture[str]) -> None:
    """click's own usage errors (an unknown flag, a missing argument or command) print a
    usage block and a hint; every program prints one line instead, naming the program (and
    subcommand) and the flag, argument or command (click words the rest)."""
    cases: list[tuple[Callable, list[str], str, str]] = [
        (coordinator, ["--no-such-flag"], "tiresias-coordinator", "--no-such-flag"),
        (agent, ["--heartbeat"], "tiresias-agent", "'--heartbeat' requires an argument"),
        (tiresias, [], "tiresias", "Missing command"),
        (tiresias, ["stat"], "tiresias", "'stat'"),
        (tiresias, ["cancel"], "tiresias cancel", "Missing argument 'JOB'"),
        (tiresias, ["keys", "add-user", "dir"], "tiresias keys add-user", "'NAME'"),
        (run, ["--workers", "2"], "tiresias-run", "Missing argument 'SCRIPT'"),
        (sim, [FIGURE7], "tiresias-sim", "Missing option '--policy'"),
        (tap, ["skew", "--dump"], "ibverbs-tap skew", "'--dump' requires an argument"),
    ]
    for main, argv, program, problem in cases:
        assert _check(capsys, main, argv, problem).startswith(f"{program}: "), argv
