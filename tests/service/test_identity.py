"""Job identity across state directories: every new ``--state`` numbers jobs from j1 again,
yet a job never resumes another job's checkpoint nor shares its log files."""

from __future__ import annotations

from .conftest import Cluster, wait_until


def test_a_fresh_state_on_a_reused_checkpoint_root_starts_fresh(cluster: Cluster) -> None:
    root = cluster.tmp / "shared-checkpoints"
    cluster.start_coordinator("--checkpoint-root", str(root))
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    first = cluster.submit("--steps", "3", "--step-time", "0.01", "--checkpoint-every", "1")
    wait_until(lambda: cluster.state_of(first) == "completed", 30, "the first job to finish")
    first_key = cluster.job(first)["key"]
    assert (root / first_key / "step").read_text() == "3"  # it left its checkpoint behind

    cluster.kill_coordinator()
    cluster.state = cluster.tmp / "another-state"  # a new cluster, same storage and node
    cluster.start_coordinator()
    cluster.wait_nodes("a")
    second = cluster.submit("--steps", "2", "--step-time", "0.01")
    assert second == first == "j1"
    wait_until(lambda: cluster.state_of(second) == "completed", 30, "the second job to finish")
    second_key = cluster.job(second)["key"]
    assert second_key != first_key and second_key.startswith("j1-")
    log = cluster.logs(second)
    assert "start at step 0" in log and "done after 2 steps" in log, log
    assert log.count("=== j1 restart 0") == 1, log  # its own log file, not the first job's
