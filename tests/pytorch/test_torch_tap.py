"""The ibverbs-tap TCP path on a PyTorch gang: a 2-rank gloo all-reduce job run under
``ibverbs-tap run`` and ``tiresias-run`` shows each rank's all-reduce bytes to its peer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import needs

pytestmark = [pytest.mark.torch, needs("torch", "needs PyTorch (the [torch] extra)")]

SCRIPT = Path(__file__).parent / "scripts" / "allreduce_bytes.py"
#: Three all-reduces of 4 MiB: a ring of two sends each rank's other half, then its reduced
#: half, so every rank sends at least 4 MiB per all-reduce to its peer.
EXPECTED = 3 * 4 * (1 << 20)


def test_gloo_allreduce_bytes_are_counted_per_peer(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    tap = [sys.executable, "-m", "ibverbs_tap.cli", "run", "--out", str(dump), "--"]
    job = [sys.executable, "-m", "coordinator.run", "--workers", "2", str(SCRIPT)]
    done = subprocess.run([*tap, *job], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    processes = json.loads(dump.read_text())["processes"]
    ranks = [p for p in processes if "tiresias_launch.exec" in p["cmdline"]]
    assert len(ranks) == 2
    for rank in ranks:
        busiest = max(peer["tx"]["bytes"] for peer in rank["peers"] if peer["kind"] == "tcp")
        assert EXPECTED <= busiest < 2 * EXPECTED, rank["peers"]
