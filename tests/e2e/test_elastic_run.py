"""The live run of issue 25: under ``tiresias-run``, a ``--workers 2:4`` PyTorch DDP job (a
torchrun-style ``tiresias.State`` script: DistributedSampler, DataLoader, SGD with momentum,
a per-epoch LR schedule) on a shared cluster starts on the 2 GPUs that are free, grows to 4
when another user's job ends, and finishes with the weights of an uninterrupted rigid
``tiresias-run --workers 4`` run (within the runtime's stated tolerance:
``tests/pytorch/resize.py``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, needs, wait_until
from pytorch.resize import ATOL, RTOL
from pytorch.runs import TIMEOUT
from service.conftest import Cluster

from tiresias_launch.contract import HOLD_AT_STEP

pytestmark = [pytest.mark.torch, needs("torch", "needs PyTorch (the [torch] extra)")]

SCRIPT = REPO / "tests" / "pytorch" / "scripts" / "elastic_train.py"
EPOCHS = 3
#: The small run holds here until the grow preempts it (the second epoch's first step).
HOLD = 5


def tiresias_run(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "coordinator.run", *args],
        cwd=cwd,
        env=env,
        stdout=(cwd / "tiresias-run.out").open("wb"),
        stderr=(cwd / "tiresias-run.err").open("wb"),
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A coordinator and an agent, as in tests/service; their logs are printed after."""
    c = Cluster(tmp_path)
    yield c
    c.close()
    print(c.dump_logs())


def test_a_2_to_4_job_starts_on_2_grows_to_4_and_learns_what_a_rigid_run_does(
    cluster: Cluster, tmp_path: Path
) -> None:
    import torch

    rigid_dir, elastic_dir = tmp_path / "rigid", tmp_path / "elastic"
    rigid_dir.mkdir()
    elastic_dir.mkdir()
    job = ("ddp", str(EPOCHS), "log-{rank}", "weights.pt")
    rigid = tiresias_run(rigid_dir, cluster.env, "--workers", "4", str(SCRIPT), *job)

    # a shared cluster: one node of 4 GPUs, 2 of them another user's rigid job's
    cluster.env[HOLD_AT_STEP] = str(HOLD)
    # a restart here costs the gang's whole start-up (imports: 20 s under load); at the
    # default payback (10 times that) it would grow only minutes after the GPUs free
    cluster.start_coordinator("--grace", "120", "--elastic-payback", "1")
    cluster.start_agent("n", 4, "--host", "127.0.0.1")
    cluster.wait_nodes("n")
    other = cluster.submit("--steps", "1000000", "--step-time", "0.05", workers=2)
    wait_until(lambda: cluster.state_of(other) == "running", 30, "the other user's job")
    args = ("--coordinator", cluster.address, "--workers", "2:4", str(SCRIPT), *job)
    elastic = tiresias_run(elastic_dir, cluster.env, *args)
    holding = f"tiresias: holding at step {HOLD} until preempted"
    wait_until(lambda: holding in cluster.logs("j2"), TIMEOUT, "the small run to hold")
    small = cluster.job("j2")
    assert (small["gpus"], small["min_workers"], small["workers"]) == (2, 2, 4)

    cluster.cli("cancel", other)  # its GPUs free up: the elastic job grows
    assert elastic.wait(TIMEOUT) == 0, (elastic_dir / "tiresias-run.err").read_text()
    assert rigid.wait(TIMEOUT) == 0, (rigid_dir / "tiresias-run.err").read_text()
    said = (elastic_dir / "tiresias-run.err").read_text()
    for line in (
        "j2 running on 2 of 2:4 GPUs",
        "j2 resized by the scheduler: grew to 4",
        "j2 restarted on 4 of 2:4 GPUs (restart 1)",
        "j2 completed (restarts 1, preemptions 1)",
    ):
        assert f"tiresias-run: {line}" in said, said
    done = cluster.job("j2")
    assert (done["state"], done["restarts"], done["gpus"]) == ("completed", 1, 4)
    history = [e["text"] for e in done["history"]]
    assert any(t.startswith("started on 2 of 4 GPUs") for t in history), history
    assert any(t.startswith("grew to 4") for t in history), history
    assert any("resumed on 4 of 4 workers" in t for t in history), history
    want = torch.load(rigid_dir / "weights.pt")
    got = torch.load(elastic_dir / "weights.pt")
    assert want.keys() == got.keys()
    for name in want:
        assert torch.allclose(got[name], want[name], rtol=RTOL, atol=ATOL), name
    # each epoch trained the samples the rigid run's did (DistributedSampler's order, and
    # its padding at world 4), each as often
    assert samples(elastic_dir) == samples(rigid_dir)


def samples(run: Path) -> dict[int, list[int]]:
    """Epoch → the sample indices its steps trained, over every rank's log (sorted)."""
    seen: dict[int, list[int]] = {}
    for log in run.glob("log-*"):
        for line in log.read_text().splitlines():
            _, epoch, *indices, _loss = line.split()
            seen.setdefault(int(epoch), []).extend(map(int, indices))
    assert sorted(seen) == list(range(EPOCHS)), run
    return {epoch: sorted(indices) for epoch, indices in seen.items()}


def test_a_job_never_starts_on_a_world_that_does_not_divide_its_top(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A ``--workers 3:4`` job with 3 GPUs free (one is taken): 3 does not divide 4, so its
    runtime could not keep the global batch there; the scheduler does not start it on 3 but
    waits for 4, and it finishes in one run on 4, resizable and never run rigid."""
    cluster.start_coordinator("--grace", "120")
    cluster.start_agent("n", 4, "--host", "127.0.0.1")
    cluster.wait_nodes("n")
    other = cluster.submit("--steps", "1000000", "--step-time", "0.05")
    wait_until(lambda: cluster.state_of(other) == "running", 30, "the other user's job")
    job = ("ddp", str(EPOCHS), "log-{rank}", "weights.pt")
    args = ("--coordinator", cluster.address, "--workers", "3:4", str(SCRIPT), *job)
    elastic = tiresias_run(tmp_path, cluster.env, *args)

    def waits_for_4() -> bool:
        [view] = [j for j in cluster.client.request("queue")["jobs"] if j["job_id"] == "j2"]
        return view["state"] == "waiting" and view["pending"]["gpus"] == 4

    wait_until(waits_for_4, TIMEOUT, "j2 to wait for 4 GPUs")
    cluster.cli("cancel", other)  # the fourth GPU frees
    assert elastic.wait(TIMEOUT) == 0, (tmp_path / "tiresias-run.err").read_text()
    done = cluster.job("j2")
    assert (done["state"], done["restarts"], done["gpus"]) == ("completed", 0, 4)
    history = [e["text"] for e in done["history"]]
    assert not any("runs rigid" in t or "pinned" in t for t in history), history
