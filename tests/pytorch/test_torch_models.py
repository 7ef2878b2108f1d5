"""The PyTorch reference models: sizes against the literature, and ``train_torch.py`` as a
2-rank DDP job preempted at a held step, against an uninterrupted run."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from helpers import REPO, needs, wait_until
from launch.gangs import start

from coordinator.gang import GangRequest
from tiresias_launch import EXIT_CHECKPOINTED

pytestmark = [pytest.mark.torch, needs("torch", "needs PyTorch (the [torch] extra)")]

#: torchvision's counts at 1000 classes (Inception-v3 without its auxiliary classifier).
EXPECTED_PARAMS = {"vgg16": 138_357_544, "resnet50": 25_557_032, "inception_v3": 23_834_568}
TIMEOUT = 180


@pytest.mark.parametrize("name", ["mlp", "cnn", "vgg16", "resnet50", "inception_v3"])
def test_models_build_and_run_at_their_smallest_size(name: str) -> None:
    import torch

    from models import torch_nets

    model = torch_nets.build(name, num_classes=10).eval()
    size = torch_nets.MIN_SIZE[name]
    assert model(torch.zeros(2, 3, size, size)).shape == (2, 10)
    if name in EXPECTED_PARAMS:
        with torch.device("meta"):  # counts without allocating or initialising 138M weights
            full = torch_nets.build(name)
        assert sum(p.numel() for p in full.parameters()) == EXPECTED_PARAMS[name]
    with pytest.raises(ValueError, match="needs image_size"):
        torch_nets.build(name, image_size=size - 1)


def losses(log: Path) -> list[str]:
    return re.findall(r"^step \d+ loss \S+$", log.read_text(), flags=re.MULTILINE)


def test_train_torch_resumes_where_it_was_preempted(tmp_path: Path) -> None:
    script = str(REPO / "models" / "train_torch.py")
    request = GangRequest((script, "--model", "cnn", "--steps", "24", "--log-every", "1"), 2)
    for run in ("plain", "job"):
        (tmp_path / run).mkdir()
    plain = start(request, tmp_path / "plain")
    assert plain.wait(TIMEOUT) == [0, 0], plain.tails()
    first = start(request, tmp_path / "job", env={"TIRESIAS_HOLD_AT_STEP": "11"})
    wait_until(
        lambda: all("holding at step 11" in log.read_text() for log in first.logs),
        TIMEOUT,
        "both ranks to hold at step 11",
    )
    first.signal(signal.SIGTERM)
    assert first.wait(TIMEOUT) == [EXIT_CHECKPOINTED] * 2, first.tails()
    second = start(request, tmp_path / "job", restart=1)
    assert second.wait(TIMEOUT) == [0, 0], second.tails()
    resumed = losses(first.logs[0]) + losses(second.logs[0])
    assert resumed == losses(plain.logs[0]) and len(resumed) == 24
