"""A real TF ParameterServerStrategy job (in-process cluster: 2 PS, 2 workers, loopback gRPC,
the cluster given in TF_CONFIG) under the tap: per-PS byte shares tell the VGG-like model (one
dominant tensor) from the ResNet-like one (many similar tensors), ``profile`` names the peers
ps0/ps1, ``skew PID`` needs no PS list, and the skew placement decides accordingly."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from coordinator.core.free import FreeCounts
from coordinator.core.model import Job, JobSpec, Node
from coordinator.core.packlimit import Observation, learn_packlimit
from coordinator.core.placement import SkewAware
from ibverbs_tap import ProcessProfile

from .helpers import tap_cli, tap_popen

JOB = Path(__file__).resolve().parents[2] / "tools" / "bench" / "tap_tf_job.py"


def _free_addresses(n: int) -> list[str]:
    socks = [socket.socket() for _ in range(n)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    addresses = [f"127.0.0.1:{sock.getsockname()[1]}" for sock in socks]
    for sock in socks:
        sock.close()
    return addresses


def _wait_for_line(proc: subprocess.Popen[str], prefix: str, timeout: float) -> list[str]:
    """The job's stdout up to the line starting with ``prefix`` (fails after ``timeout``)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen: list[str] = []
    while not (seen and seen[-1].startswith(prefix)):
        try:
            seen.append(lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"no {prefix!r} line within {timeout} s: {seen}") from None
    return seen


@pytest.mark.tf
def test_ps_job_skew_labels_and_placement(tmp_path: Path) -> None:
    result, dump = tmp_path / "result.json", tmp_path / "dump.json"
    workers, ps = _free_addresses(2), _free_addresses(2)
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    tf_config = json.dumps({"cluster": {"worker": workers, "ps": ps}})
    proc = tap_popen(
        [sys.executable, JOB, "--steps", "5", "--out", result, "--hold"],
        "--out",
        str(dump),
        env=dict(env, TF_CONFIG=tf_config),
    )
    try:
        _wait_for_line(proc, "holding", timeout=300)
        res = json.loads(result.read_text())
        profile = tap_cli("profile", str(res["pid"]), "--interval", "0", "--json", env=env)
        measured = tap_cli("skew", str(res["pid"]), "--json", env=env)
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
    assert res["traced"] and res["ps"] == ps
    # The profile names the job's peers by their TF_CONFIG role; skew needs no PS list.
    assert profile.returncode == 0, profile.stderr
    [job] = json.loads(profile.stdout)["processes"]
    named = {peer["role"]: peer["address"] for peer in job["peers"] if peer["role"]}
    assert {"ps0": ps[0], "ps1": ps[1]}.items() <= named.items()
    assert set(named) <= {"ps0", "ps1", "worker0", "worker1"}
    assert measured.returncode == 0, measured.stderr
    per_ps = json.loads(measured.stdout)
    assert per_ps["addresses"] == {"ps0": ps[0], "ps1": ps[1]}
    for role, address in per_ps["addresses"].items():
        # The job's own reading just before it idled; an idle gRPC channel adds next to nothing.
        own = res["bytes_per_ps"][address]
        assert own <= per_ps["bytes_per_ps"][role] <= own * 1.01
    vgg, resnet = res["models"]["vgg"], res["models"]["resnet"]
    # Round-robin puts every kernel of the kernel/bias pairs, the big fc6 one included, on PS 0.
    assert vgg["measured_skew"] > 0.95
    assert vgg["measured_skew"] == pytest.approx(vgg["predicted_skew"], abs=0.03)
    assert resnet["measured_skew"] == pytest.approx(0.5, abs=0.03)
    assert resnet["predicted_skew"] == 0.5
    # Every step moves each tensor at least once; the dump shows the same PS peers.
    assert sum(vgg["bytes_per_ps"].values()) > 5 * sum(vgg["tensor_bytes"])
    profiles = [ProcessProfile.from_dict(p) for p in json.loads(dump.read_text())["processes"]]
    [dumped] = [p for p in profiles if p.pid == res["pid"]]
    assert set(ps) <= {p.address for p in dumped.peers}

    # PACKLIMIT learned from history (packing helped the skewed jobs only), then placement:
    # a 2-GPU job on nodes with 4 and 1 free GPUs is packed on one node or spread over two.
    history = []
    for i, (skew, ratio) in enumerate(
        [
            (0.3, 1.0),
            (0.45, 1.02),
            (0.55, 0.98),
            (0.6, 1.0),
            (0.8, 1.4),
            (0.85, 1.3),
            (0.9, 1.7),
            (0.97, 2.1),
        ]
    ):
        history += [
            Observation(f"j{i}", skew, "packed", 1.0),
            Observation(f"j{i}", skew, "spread", ratio),
        ]
    placement = SkewAware(learn_packlimit(history))
    assert 0.6 < placement.packlimit < 0.8
    nodes = {"n1": Node("n1", (0, 1, 2, 3)), "n2": Node("n2", (0, 1, 2, 3))}
    free = {"n1": 4, "n2": 1}
    chosen = {
        kind: placement.choose(
            Job(JobSpec(kind, 2, 0.0, skew=m["measured_skew"])), FreeCounts.of(free, nodes)
        )
        for kind, m in res["models"].items()
    }
    assert chosen == {"vgg": {"n1": 2}, "resnet": {"n2": 1, "n1": 1}}
