"""The ``tiresias`` CLI against a real coordinator and agent: what a user sees for refused
submits, waiting jobs, cancels, queues and a reader that goes away (``| head``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from .conftest import FAKE_JOB, Cluster, wait_until


def test_refused_submits_say_why_and_use_up_nothing(cluster: Cluster) -> None:
    cluster.start_coordinator()
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    oversize = cluster.cli("submit", "--workers", "4", str(FAKE_JOB), check=False)
    assert oversize.returncode == 1
    assert "asks for 4 GPUs but the cluster has 1" in oversize.stderr
    assert "j1" not in oversize.stderr
    for missing in ("no_such_train.py", str(cluster.tmp / "no_such_train.py")):
        refused = cluster.cli("submit", missing, check=False)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and "no such script" in refused.stderr
    notes = cluster.tmp / "README.md"
    notes.write_text("# not a training script\n")
    refused = cluster.cli("submit", str(notes), check=False)
    assert refused.returncode == 2 and "is not a Python file" in refused.stderr, refused.stderr
    assert cluster.submit("--steps", "1", "--step-time", "0.01") == "j1"


def test_waiting_job_logs_queue_names_and_cancel(cluster: Cluster) -> None:
    cluster.start_coordinator()
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    running = cluster.submit("--steps", "100000", "--step-time", "0.01")
    wait_until(lambda: "step 2" in cluster.logs(running), 30, "the first job to run")
    waiting = cluster.submit("--steps", "1")
    assert cluster.state_of(waiting) == "waiting"

    logs = cluster.cli("logs", waiting)
    assert logs.stdout == "" and f"{waiting} has no logs yet: it has not started" in logs.stderr
    # queues are Q1… in every text view; JSON carries the 0-based index
    table, why = cluster.cli("queue", "--all").stdout.split("\n\nwhy waiting:\n")
    assert all(row.split()[3] == "Q1" for row in table.splitlines()[1:]), table
    assert why.startswith(f"  {waiting}  Q1 #1, 1st overall: waiting for 1 GPU (0 free)"), why
    # the first screen: a line per queue (running, GPUs, waiting, GPUs wanted), then the
    # head of each line; with --limit 1 one job of each line, and how to see the rest
    counts, *_ = cluster.cli("queue").stdout.split("\n\n")
    assert counts.splitlines()[1].split() == ["Q1", "1", "1", "1", "1"], counts
    first = cluster.cli("queue", "--limit", "1").stdout
    assert waiting in first and "tiresias queue --all" not in first, first
    assert "queue      Q1 " in cluster.cli("status", waiting).stdout
    assert json.loads(cluster.cli("status", waiting, "--json").stdout)["queue"] == 0

    assert cluster.cli("cancel", waiting).stdout == f"{waiting}: cancelled\n"
    assert "never started (cancelled)" in cluster.cli("logs", waiting).stderr
    stopping = cluster.cli("cancel", running).stdout
    assert stopping == f"{running}: cancelling: stopping its processes\n"
    wait_until(lambda: cluster.state_of(running) == "cancelled", 30, "the cancel")

    # a reader that has gone away: no traceback, the exit status of a process killed by SIGPIPE
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as closed:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "coordinator.cli",
                "logs",
                running,
                "--coordinator",
                cluster.address,
            ],
            stdout=closed,
            stderr=subprocess.PIPE,
            text=True,
            timeout=30,
        )
    assert out.returncode == 128 + signal.SIGPIPE and out.stderr == "", out.stderr
