"""A real TF ParameterServerStrategy job (in-process cluster: 2 PS, 2 workers, loopback gRPC)
under the tap: per-PS byte shares tell the VGG-like model (one dominant tensor) from the
ResNet-like one (many similar tensors), and the skew placement decides accordingly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from coordinator.core.model import Job, JobSpec, Node
from coordinator.core.packlimit import Observation, learn_packlimit
from coordinator.core.placement import SkewAware

from .helpers import tap_run

JOB = Path(__file__).resolve().parents[2] / "tools" / "bench" / "tap_tf_job.py"


@pytest.mark.tf
def test_ps_job_skew_and_placement(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    _, profiles = tap_run(
        [sys.executable, JOB, "--steps", "5", "--out", result], tmp_path / "dump.json"
    )
    res = json.loads(result.read_text())
    assert res["traced"]
    vgg, resnet = res["models"]["vgg"], res["models"]["resnet"]
    # Round-robin puts every kernel of the kernel/bias pairs, the big fc6 one included, on PS 0.
    assert vgg["measured_skew"] > 0.95
    assert vgg["measured_skew"] == pytest.approx(vgg["predicted_skew"], abs=0.03)
    assert resnet["measured_skew"] == pytest.approx(0.5, abs=0.03)
    assert resnet["predicted_skew"] == 0.5
    # Every step moves each tensor at least once; the dump shows the same PS peers.
    assert sum(vgg["bytes_per_ps"].values()) > 5 * sum(vgg["tensor_bytes"])
    [job] = [p for p in profiles if p.pid == res["pid"]]
    assert set(res["ps"]) <= {p.address for p in job.peers}

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
        kind: placement.choose(Job(JobSpec(kind, 2, 0.0, skew=m["measured_skew"])), free, nodes)
        for kind, m in res["models"].items()
    }
    assert chosen == {"vgg": {"n1": 2}, "resnet": {"n2": 1, "n1": 1}}
