"""The ibverbs-tap CLI: profile windows and trees of live processes, S_J from a pid or a dump,
and clear errors for what cannot be profiled; the socket-only build says so."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import ibverbs_tap
from ibverbs_tap.profile import FILE_PREFIX, HEADER

from .helpers import HERE, TAP_CSRC, SinkServer, cc, tap_cli, tap_popen

LOOPER = HERE / "looper.py"


@pytest.fixture
def sink() -> Iterator[SinkServer]:
    srv = SinkServer(2)
    yield srv
    srv.close()


def _stop(proc: subprocess.Popen[str], *pids: int) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    proc.terminate()
    proc.wait(timeout=30)


def test_profile_windows_report_bytes_and_rates(sink: SinkServer) -> None:
    proc = tap_popen([sys.executable, LOOPER, "stream", str(sink.ports[0])])
    pid = int(proc.stdout.readline().split()[1])
    try:
        res = tap_cli("profile", str(pid), "--interval", "0.2", "--duration", "0.4", "--json")
        text = tap_cli("profile", str(pid), "--interval", "0.1")
    finally:
        _stop(proc)
    assert res.returncode == 0, res.stderr
    windows = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(windows) == 2
    for w in windows:
        assert 0.2 <= w["window"] < 5
        [p] = w["processes"]
        assert p["pid"] == pid and p["verbs_built"] and not p["verbs_seen"]
        [peer] = p["peers"]
        assert peer["address"] == f"127.0.0.1:{sink.ports[0]}"
        # Only this window's messages: all 1000 B (bucket 9), and there were some. Counts and
        # bytes are separate lock-free counters read a moment apart, so a busy stream may
        # tear by the few messages sent during the read (docs/profiler.md, Hot path).
        [[bucket, count, nbytes]] = peer["tx"]["buckets"]
        assert bucket == 9 and count > 0
        assert abs(nbytes - 1000 * count) <= 1000 * 64
    assert text.returncode == 0, text.stderr
    assert f"pid {pid} " in text.stdout and f"tcp 127.0.0.1:{sink.ports[0]}: tx" in text.stdout
    assert "verbs: built, no device opened" in text.stdout
    assert "/s)" in text.stdout and "[512 B, 1.0 KiB)" in text.stdout


def test_profile_into_a_closed_pipe_exits_quietly(sink: SinkServer) -> None:
    """``ibverbs-tap profile PID | head``: the reader goes away; no traceback."""
    proc = tap_popen([sys.executable, LOOPER, "stream", str(sink.ports[0])])
    pid = proc.stdout.readline().split()[1]
    read, write = os.pipe()
    os.close(read)
    try:
        with os.fdopen(write, "w") as closed:
            out = subprocess.run(
                [sys.executable, "-m", "ibverbs_tap.cli", "profile", pid, "--interval", "0.05"],
                stdout=closed,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
            )
    finally:
        _stop(proc)
    assert out.returncode == 128 + signal.SIGPIPE and out.stderr == "", out.stderr


def test_profile_tree_includes_traced_children(sink: SinkServer) -> None:
    proc = tap_popen([sys.executable, LOOPER, "stream", str(sink.ports[0]), "--spawn"])
    _, pid, child = (int(x) if x.isdigit() else x for x in proc.stdout.readline().split())
    try:
        res = tap_cli("profile", str(pid), "--interval", "0.2", "--tree", "--json")
        alone = tap_cli("profile", str(pid), "--interval", "0.2", "--json")
    finally:
        _stop(proc, child)
    assert res.returncode == 0, res.stderr
    [window] = [json.loads(line) for line in res.stdout.splitlines()]
    procs = {p["pid"]: p for p in window["processes"]}
    assert set(procs) == {pid, child}
    assert procs[child]["ppid"] == pid
    assert all(p["peers"][0]["tx"]["bytes"] > 0 for p in procs.values())
    assert [p["pid"] for p in json.loads(alone.stdout)["processes"]] == [pid]


def test_profile_errors() -> None:
    untraced = tap_cli("profile", str(os.getpid()), "--interval", "0.01")
    assert untraced.returncode == 1
    assert f"process {os.getpid()} is not traced by ibverbs-tap" in untraced.stderr
    gone = tap_cli("profile", "4194999", "--interval", "0.01")
    assert gone.returncode == 1 and "process 4194999 does not exist" in gone.stderr
    bad = tap_cli("profile", "1", "--interval", "0")
    assert bad.returncode == 1 and "--interval must be positive" in bad.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)
def test_profile_of_another_users_process(tap_lib: str, sink: SinkServer) -> None:
    """The profile file is 0600: another user gets a clear permission error."""
    env = {k: v for k, v in os.environ.items() if k != "IBVERBS_TAP_DIR"}
    env["LD_PRELOAD"] = tap_lib
    proc = subprocess.Popen(
        [sys.executable, LOOPER, "fixed", *map(str, sink.ports)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = proc.stdout.readline().split()[1]
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    res = subprocess.run(
        [*nobody, sys.executable, "-m", "ibverbs_tap.cli", "profile", pid],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(HERE.parents[1])),
    )
    proc.stdin.close()
    proc.wait(timeout=30)
    assert res.returncode == 1, res.stderr
    assert f"cannot read /dev/shm/{FILE_PREFIX}{pid}: permission denied" in res.stderr


def test_stale_and_corrupt_files(tmp_path: Path, tap_lib: str) -> None:
    env = dict(os.environ, LD_PRELOAD=tap_lib, IBVERBS_TAP_DIR=str(tmp_path), IBVERBS_TAP_KEEP="1")
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(done.stdout)
    with pytest.raises(ibverbs_tap.ProcessGoneError, match=f"process {pid} has exited"):
        ibverbs_tap.read_process(pid, directory=str(tmp_path))
    assert ibverbs_tap.read_file(tmp_path / f"{FILE_PREFIX}{pid}").pid == pid

    # A file left by an earlier process whose pid is now ours (different start time).
    raw = bytearray((tmp_path / f"{FILE_PREFIX}{pid}").read_bytes())
    fields = list(HEADER.unpack_from(raw))
    fields[7] = os.getpid()
    HEADER.pack_into(raw, 0, *fields)
    (tmp_path / f"{FILE_PREFIX}{os.getpid()}").write_bytes(bytes(raw))
    with pytest.raises(ibverbs_tap.NotTracedError, match="earlier process with the same pid"):
        ibverbs_tap.read_process(os.getpid(), directory=str(tmp_path))

    (tmp_path / "junk").write_bytes(b"not a profile" * 100)
    with pytest.raises(ibverbs_tap.TapError, match="not an ibverbs-tap profile"):
        ibverbs_tap.read_file(tmp_path / "junk")


def test_run_errors_and_exit_codes() -> None:
    empty = tap_cli("run")
    assert empty.returncode == 1 and "run needs a command" in empty.stderr
    missing = tap_cli("run", "--", "/nonexistent/program")
    assert missing.returncode == 127 and "cannot run /nonexistent/program" in missing.stderr
    assert tap_cli("run", "--", "sh", "-c", "exit 3").returncode == 3
    assert tap_cli("run", "--", "sh", "-c", "kill -TERM $$").returncode == 128 + signal.SIGTERM


def test_skew_from_pid_tf_config_and_dump(tmp_path: Path, sink: SinkServer) -> None:
    a, b = (f"127.0.0.1:{p}" for p in sink.ports)
    tf_config = json.dumps({"cluster": {"ps": [a, b], "worker": ["127.0.0.1:1"]}})
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    dump = tmp_path / "dump.json"
    proc = tap_popen(
        [sys.executable, LOOPER, "fixed", *map(str, sink.ports)],
        "--out",
        str(dump),
        env=dict(env, TF_CONFIG=tf_config),
    )
    pid = proc.stdout.readline().split()[1]
    from_environ = tap_cli("skew", "--pid", pid, "--json", env=env)
    explicit = tap_cli("skew", "--pid", pid, "--ps", b, a, env=env)
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert from_environ.returncode == 0, from_environ.stderr
    assert json.loads(from_environ.stdout) == {"bytes_per_ps": {a: 3000, b: 1000}, "skew": 0.75}
    assert explicit.stdout.splitlines()[-1] == "S_J = 0.750"
    (tmp_path / "tf_config.json").write_text(tf_config)
    config_file = str(tmp_path / "tf_config.json")
    from_dump = tap_cli("skew", "--dump", str(dump), "--tf-config", config_file, "--json", env=env)
    assert json.loads(from_dump.stdout)["skew"] == 0.75
    no_ps = tap_cli("skew", "--dump", str(dump), env=env)
    assert no_ps.returncode == 1 and "no parameter servers" in no_ps.stderr
    bad_dump = tap_cli("skew", "--dump", str(tmp_path / "tf_config.json"), "--ps", a, env=env)
    assert bad_dump.returncode == 1 and "is not an ibverbs-tap dump" in bad_dump.stderr


def test_socket_only_build_says_so(tmp_path: Path, sink: SinkServer) -> None:
    """Built without verbs headers the library still taps TCP, exports no verbs symbols, and
    the CLI says the profile is socket-only."""
    sources = sorted(TAP_CSRC.glob("*.c"))
    flags = ["-fPIC", "-shared", "-std=gnu11", "-fvisibility=hidden", *sources, "-ldl", "-pthread"]
    lib = cc(tmp_path / "libtap_noverbs.so", *flags)
    cc(tmp_path / "libtap_verbs.so", "-DTAP_HAVE_VERBS", *flags)  # warning-clean both ways
    symbols = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    assert " send\n" in symbols.stdout and "ibv_" not in symbols.stdout
    env = dict(os.environ, LD_PRELOAD=str(lib), IBVERBS_TAP_DIR=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, LOOPER, "fixed", *map(str, sink.ports)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = proc.stdout.readline().split()[1]
    res = tap_cli("profile", pid, "--interval", "0.01")
    profile = ibverbs_tap.read_process(int(pid))
    proc.stdin.close()
    proc.wait(timeout=30)
    assert "verbs: not built (socket tap only)" in res.stdout
    assert not profile.verbs_built
    assert ibverbs_tap.bytes_per_ps([profile], [f"127.0.0.1:{p}" for p in sink.ports]) == {
        f"127.0.0.1:{sink.ports[0]}": 3000,
        f"127.0.0.1:{sink.ports[1]}": 1000,
    }
    assert not (tmp_path / f"{FILE_PREFIX}{pid}").exists()  # removed at exit without KEEP
