"""A real Slurm (munged, slurmctld, two slurmd with 2 fake GPUs each) for the Slurm executor's
tests, started once per session under a temporary directory and stopped afterwards; each test
starts from an idle cluster. Without root or Slurm's packages the tests skip, saying why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from service.conftest import Cluster

from tools.slurm_local import LocalSlurm, missing

NODES = {"n1": 2, "n2": 2}
#: "one": a single 2-GPU node, where a job must be preempted to make room for another.
PARTITIONS = {"tiresias": ["n1", "n2"], "one": ["n1"]}


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    why = missing()
    if why:
        pytest.skip(why)
    with LocalSlurm(tmp_path_factory.mktemp("slurm"), NODES, PARTITIONS) as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_cluster: LocalSlurm) -> Iterator[LocalSlurm]:
    """The session's cluster, idle, with no jobs; whatever a test left is cancelled after it."""
    slurm_cluster.cancel_all()
    yield slurm_cluster
    slurm_cluster.cancel_all()


@pytest.fixture
def cluster(slurm: LocalSlurm, tmp_path: Path) -> Iterator[Cluster]:
    """A coordinator (``--executor slurm`` where a test starts it so) beside the session's
    Slurm, with the CLI's environment pointing at that Slurm."""
    c = Cluster(tmp_path)
    c.env["SLURM_CONF"] = str(slurm.conf)
    yield c
    c.close()
    print(c.dump_logs())


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A directory every Slurm node sees (here: the one machine's file system)."""
    return tmp_path
