"""The ibverbs-tap CLI: profile windows and trees of live processes, S_J from a pid or a dump,
and clear errors for what cannot be profiled; the socket-only build says so."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import ibverbs_tap
from ibverbs_tap.profile import DIR_ENV, FILE_PREFIX, HEADER
from ibverbs_tap.reading import environ_of
from ibverbs_tap.roles import NOTES

from .helpers import (
    ACK,
    HERE,
    REPS,
    SIZES,
    TAP_CSRC,
    ScheduleServers,
    SinkServer,
    cc,
    expected_rx,
    expected_tx,
    tap_cli,
    tap_popen,
)

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


def test_profile_windows_show_histograms_since_start_and_rates(sink: SinkServer) -> None:
    proc = tap_popen([sys.executable, LOOPER, "stream", str(sink.ports[0])])
    pid = int(proc.stdout.readline().split()[1])
    try:
        res = tap_cli("profile", str(pid), "--interval", "0.2", "--total", "0.4", "--json")
        text = tap_cli("profile", str(pid), "--interval", "0.1")
    finally:
        _stop(proc)
    assert res.returncode == 0, res.stderr
    windows = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(windows) == 2
    tx = []
    for w in windows:
        assert 0.2 <= w["window"] < 5
        [p] = w["processes"]
        assert p["pid"] == pid and p["verbs_built"] and not p["verbs_seen"]
        [peer] = p["peers"]
        assert peer["address"] == f"127.0.0.1:{sink.ports[0]}" and peer["role"] is None
        # Everything since the start, all 1000 B (bucket 9). Counts and bytes are separate
        # lock-free counters read a moment apart, so a busy stream may tear by the few
        # messages sent during the read (docs/profiler.md, Hot path).
        [[bucket, count, nbytes]] = peer["tx"]["buckets"]
        assert bucket == 9 and count > 10
        assert abs(nbytes - 1000 * count) <= 1000 * 64
        tx.append(peer["tx"])
    # The second window's rate is the growth between the two snapshots.
    assert tx[1]["count"] > tx[0]["count"]
    grown = tx[1]["count"] - tx[0]["count"]
    assert round(tx[1]["msgs_per_s"] * windows[1]["window"]) == grown
    assert text.returncode == 0, text.stderr
    assert f"pid {pid} " in text.stdout and f"tcp 127.0.0.1:{sink.ports[0]}: tx" in text.stdout
    assert "verbs: built, no device opened" in text.stdout
    assert "rates over the last" in text.stdout
    assert "/s)" in text.stdout and "[512 B, 1.0 KiB)" in text.stdout


def _buckets(direction: dict) -> list[tuple[int, int, int]]:
    return [tuple(b) for b in direction["buckets"]]


def test_profile_after_the_traffic_shows_exactly_what_was_sent(servers: ScheduleServers) -> None:
    """Attached after the traffic: the histograms since the start, every message in its
    bucket, and zero rates while the process idles."""
    a, b = (f"127.0.0.1:{p}" for p in servers.ports)
    proc = tap_popen([sys.executable, LOOPER, "schedule", *map(str, servers.ports)])
    pid = proc.stdout.readline().split()[1]
    try:
        res = tap_cli("profile", pid, "--interval", "0.1", "--json")
        now = tap_cli("profile", pid, "--interval", "0")
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    [p] = report["processes"]
    assert [peer["address"] for peer in p["peers"]] == sorted([a, b])
    for peer in p["peers"]:
        assert _buckets(peer["tx"]) == expected_tx(1)
        assert _buckets(peer["rx"]) == expected_rx(1)
        assert peer["tx"]["bytes"] == REPS * sum(SIZES)
        assert peer["tx"]["msgs_per_s"] == peer["rx"]["bytes_per_s"] == 0
    assert now.returncode == 0, now.stderr
    assert "rates" not in now.stdout and "/s)" not in now.stdout
    assert f"tcp {a}: tx 10 msgs 148.6 KiB, rx 10 msgs 80 B" in now.stdout
    rows = [" ".join(line.split()) for line in now.stdout.splitlines()]
    assert "tx [64.0 KiB, 128.0 KiB) 2 msgs 136.7 KiB" in rows


def test_profile_tree_sums_a_gang_labelled_by_role(servers: ScheduleServers) -> None:
    """A launcher and its task, worker1 of a TF cluster with two PS listening at the servers'
    addresses (only the task has TF_CONFIG): the task's peers are ps0/ps1, ``--tree`` on the
    launcher sums both processes per PS under those names, and ``skew`` finds the PS without
    being told."""
    a, b = (f"127.0.0.1:{p}" for p in servers.ports)
    cluster = {"chief": ["127.0.0.1:1"], "ps": [a, b], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}
    tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}})
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    proc = tap_popen(
        [sys.executable, LOOPER, "schedule", *map(str, servers.ports), "--spawn"],
        env=dict(env, CHILD_TF_CONFIG=tf_config),
    )
    _, pid, child = proc.stdout.readline().split()
    try:
        tree = tap_cli("profile", pid, "--tree", "--interval", "0", "--json", env=env)
        text = tap_cli("profile", pid, "--tree", "--interval", "0", env=env)
        task = tap_cli("profile", child, "--interval", "0", "--json", env=env)
        launcher = tap_cli("profile", pid, "--interval", "0", "--json", env=env)
        skew = tap_cli("skew", child, "--json", env=env)
        skew_tree = tap_cli("skew", pid, "--tree", env=env)
        skew_launcher = tap_cli("skew", pid, env=env)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert tree.returncode == 0, tree.stderr
    report = json.loads(tree.stdout)
    assert {p["pid"]: p["role"] for p in report["processes"]} == {
        int(pid): None,
        int(child): "worker1",
    }
    total = report["total"]
    assert sorted(total["pids"]) == sorted([int(pid), int(child)]) and total["untraced"] == []
    assert [(peer["role"], peer["address"]) for peer in total["peers"]] == [
        ("ps0", a),
        ("ps1", b),
    ]
    for peer in total["peers"]:
        assert _buckets(peer["tx"]) == expected_tx(2)
        assert _buckets(peer["rx"]) == expected_rx(2)
    assert f"ps0 tcp {a}: tx 20 msgs 297.3 KiB, rx 20 msgs 160 B" in text.stdout
    assert f"pid {child} worker1 (ppid {pid})" in text.stdout
    [one] = json.loads(task.stdout)["processes"]
    assert [peer["role"] for peer in one["peers"]] == ["ps0", "ps1"]
    assert _buckets(one["peers"][0]["tx"]) == expected_tx(1)
    # Alone, the launcher has no TF_CONFIG: no names, and skew has no PS to go by.
    [alone] = json.loads(launcher.stdout)["processes"]
    assert [peer["role"] for peer in alone["peers"]] == [None, None]
    assert skew_launcher.returncode == 1 and "no parameter servers" in skew_launcher.stderr
    per_ps = REPS * (sum(SIZES) + ACK * len(SIZES))
    assert skew.returncode == 0, skew.stderr
    assert json.loads(skew.stdout) == {
        "bytes_per_ps": {"ps0": per_ps, "ps1": per_ps},
        "addresses": {"ps0": a, "ps1": b},
        "skew": 0.5,
    }
    assert skew_tree.returncode == 0, skew_tree.stderr
    assert skew_tree.stdout.split()[:2] == ["ps0", a] and "S_J = 0.500" in skew_tree.stdout
    assert "297.4 KiB" in skew_tree.stdout  # both processes' bytes


def test_profile_job_sums_the_jobs_processes_on_this_machine(servers: ScheduleServers) -> None:
    """Two processes of one Tiresias job (same TIRESIAS_JOB_ID and TIRESIAS_COORDINATOR, not
    parent and child) and one of a same-named job of another coordinator: ``--job`` sums the
    first two and names them by TIRESIAS_ROLE/TIRESIAS_TASK_INDEX."""
    coordinator = f"tcp://127.0.0.1:1/{uuid.uuid4()}"  # no other process on the machine has it
    job = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    job.update(TIRESIAS_JOB_ID="j1", TIRESIAS_COORDINATOR=coordinator, TIRESIAS_ROLE="worker")
    cmd = [sys.executable, LOOPER, "schedule", *map(str, servers.ports)]
    procs = [
        tap_popen(cmd, env=dict(job, TIRESIAS_TASK_INDEX="0")),
        tap_popen(cmd, env=dict(job, TIRESIAS_TASK_INDEX="1")),
        tap_popen(cmd, env=dict(job, TIRESIAS_COORDINATOR=coordinator + "-other")),
    ]
    pids = [int(p.stdout.readline().split()[1]) for p in procs]
    try:
        res = tap_cli("profile", str(pids[0]), "--job", "--interval", "0", "--json")
        no_job = tap_cli("profile", str(os.getpid()), "--job", "--interval", "0")
        both = tap_cli("profile", str(pids[0]), "--job", "--tree")
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=30)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert {p["pid"]: p["role"] for p in report["processes"]} == {
        pids[0]: "worker0",
        pids[1]: "worker1",
    }
    total = report["total"]
    assert total["pids"] == pids[:2]
    # The `ibverbs-tap run` wrappers carry the job's environment but are not traced.
    assert sorted(total["untraced"]) == sorted(p.pid for p in procs[:2])
    assert [peer["address"] for peer in total["peers"]] == sorted(
        f"127.0.0.1:{port}" for port in servers.ports
    )
    for peer in total["peers"]:
        assert _buckets(peer["tx"]) == expected_tx(2)
    assert no_job.returncode == 1
    assert f"process {os.getpid()} has no TIRESIAS_JOB_ID" in no_job.stderr
    assert both.returncode == 2 and both.stderr.endswith(": --job: not allowed with --tree\n")


def _until(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_profile_names_the_processes_that_connected() -> None:
    """A traced server and a traced client on this machine, named only by the gang's
    TIRESIAS_ROLE/TIRESIAS_TASK_INDEX (no TF_CONFIG, as in a Horovod job): each names the
    other's connections by the role of the process holding the other end."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    server = tap_popen(
        [sys.executable, LOOPER, "serve"],
        env=dict(env, TIRESIAS_ROLE="ps", TIRESIAS_TASK_INDEX="0"),
    )
    _, spid, port = server.stdout.readline().split()
    client = tap_popen(
        [sys.executable, LOOPER, "schedule", port, port],
        env=dict(env, TIRESIAS_ROLE="worker", TIRESIAS_TASK_INDEX="1"),
    )
    _, cpid = client.stdout.readline().split()
    try:
        # The server counts its last ACK just after sending it: wait for that, not a sleep.
        replies = 2 * REPS * len(SIZES)
        _until(
            lambda: sum(p.tx.count for p in ibverbs_tap.read_process(int(spid)).peers) == replies
        )
        served = tap_cli("profile", spid, "--interval", "0", "--json", env=env)
        text = tap_cli("profile", spid, "--interval", "0", env=env)
        dialled = tap_cli("profile", cpid, "--interval", "0", "--json", env=env)
    finally:
        client.stdin.close()
        client.wait(timeout=30)
        server.stdin.close()
        server.wait(timeout=30)
    assert served.returncode == 0, served.stderr
    [ps] = json.loads(served.stdout)["processes"]
    assert ps["role"] == "ps0" and len(ps["peers"]) == 2
    for peer in ps["peers"]:
        assert peer["role"] == "worker1" and peer["port"] != int(port)
        assert _buckets(peer["rx"]) == expected_tx(1)
        assert _buckets(peer["tx"]) == expected_rx(1)
    assert f"pid {spid} ps0 " in text.stdout and "  worker1 tcp 127.0.0.1:" in text.stdout
    [worker] = json.loads(dialled.stdout)["processes"]
    [peer] = worker["peers"]  # both connections go to one address: one peer
    assert (worker["role"], peer["role"]) == ("worker1", "ps0")
    assert _buckets(peer["tx"]) == expected_tx(2)


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


def test_profile_errors() -> None:
    untraced = tap_cli("profile", str(os.getpid()), "--interval", "0.01")
    assert untraced.returncode == 1
    assert f"process {os.getpid()} is not traced by ibverbs-tap" in untraced.stderr
    gone = tap_cli("profile", "4194999", "--interval", "0.01")
    assert gone.returncode == 1 and "process 4194999 does not exist" in gone.stderr
    for interval in ("-1", "nan", "inf"):
        bad = tap_cli("profile", "1", "--interval", interval)
        assert bad.returncode == 2 and "--interval must be 0 (no rates) or positive" in bad.stderr
    bad = tap_cli("profile", "1", "--total", "nan")
    assert bad.returncode == 2 and "--total must be positive" in bad.stderr
    no_window = tap_cli("profile", "1", "--interval", "0", "--total", "5")
    assert no_window.returncode == 2 and "--total needs a positive --interval" in no_window.stderr


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
    from_environ = tap_cli("skew", pid, "--json", env=env)
    explicit = tap_cli("skew", pid, "--ps-addresses", b, a, env=env)
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert from_environ.returncode == 0, from_environ.stderr
    assert json.loads(from_environ.stdout) == {
        "bytes_per_ps": {"ps0": 3000, "ps1": 1000},
        "addresses": {"ps0": a, "ps1": b},
        "skew": 0.75,
    }
    assert explicit.stdout.split()[:3] == ["ps0", b, "1000"]  # --ps order names the roles
    assert explicit.stdout.splitlines()[-1] == "S_J = 0.750"
    (tmp_path / "tf_config.json").write_text(tf_config)
    config_file = str(tmp_path / "tf_config.json")
    from_dump = tap_cli("skew", "--dump", str(dump), "--tf-config", config_file, "--json", env=env)
    assert json.loads(from_dump.stdout)["skew"] == 0.75
    labelled = tap_cli("skew", "--dump", str(dump), "--json", env=env)  # roles in the dump
    assert json.loads(labelled.stdout)["skew"] == 0.75
    unlabelled = json.loads(dump.read_text())
    for process in unlabelled["processes"]:
        for peer in process["peers"]:
            peer["role"] = None
    dump.write_text(json.dumps(unlabelled))
    no_ps = tap_cli("skew", "--dump", str(dump), env=env)
    assert no_ps.returncode == 1 and "no parameter servers" in no_ps.stderr
    bad_dump = tap_cli(
        "skew", "--dump", str(tmp_path / "tf_config.json"), "--ps-addresses", a, env=env
    )
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


def test_run_out_names_processes_and_peers_by_role(tmp_path: Path) -> None:
    """A worker and the child it spawns (another task, its own TF_CONFIG) under one
    `ibverbs-tap run --out`: the dump, written after both exited, names each process by its
    task and the peers by the task at their address, so `skew --dump` needs no --ps."""
    servers = ScheduleServers(2)
    a, b = (f"127.0.0.1:{p}" for p in servers.ports)
    cluster = {"ps": [a, b], "worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    dump = tmp_path / "dump.json"
    proc = tap_popen(
        [sys.executable, LOOPER, "schedule", *map(str, servers.ports), "--spawn"],
        "--out",
        str(dump),
        env=dict(
            env,
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}),
            CHILD_TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}),
        ),
    )
    _, parent, child = proc.stdout.readline().split()
    notes = Path(environ_of(int(child))[DIR_ENV]) / NOTES  # what run has noted so far
    _until(lambda: notes.exists() and child in json.loads(notes.read_text()))
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    servers.close()
    processes = {p["pid"]: p for p in json.loads(dump.read_text())["processes"]}
    assert {pid: p["role"] for pid, p in processes.items()} == {
        int(parent): "worker0",
        int(child): "chief0",
    }
    assert sorted(peer["role"] for peer in processes[int(parent)]["peers"]) == ["ps0", "ps1"]
    assert sorted(peer["role"] for peer in processes[int(child)]["peers"]) == ["ps0", "ps1"]
    skew = tap_cli("skew", "--dump", str(dump), "--json", env=env)
    assert skew.returncode == 0, skew.stderr
    assert json.loads(skew.stdout)["addresses"] == {"ps0": a, "ps1": b}
