"""A job never runs twice under Slurm: when the slurmd of the node running a job stops while
the job's processes keep running there, the replacement on the other node starts only once
Slurm has ended the old allocation (the node DOWN), and the old copy, which Slurm cannot
reach, stops itself when the job's fence names the newer start."""

from __future__ import annotations

import threading
import time

from helpers import wait_until
from service.conftest import Cluster

from slurm.test_coordinator import running, sacct_runs, sacct_states, slurm_times
from tools.slurm_local import LocalSlurm, environments

SAMPLE = 0.02  # seconds between two looks at every process of the machine


class Copies:
    """Samples, every SAMPLE s, which restarts of one job have a process alive (its
    environment names the job's key and its restart), on every node: this is one machine."""

    def __init__(self, key: str) -> None:
        self.needle = f"TIRESIAS_JOB_KEY={key}".encode()
        self.samples: list[tuple[float, frozenset[str]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _alive(self) -> frozenset[str]:
        return frozenset(
            var.split(b"=", 1)[1].decode()
            for _, environ in environments()
            if self.needle in environ
            for var in environ
            if var.startswith(b"TIRESIAS_RESTART_COUNT=")
        )

    def _run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), self._alive()))
            time.sleep(SAMPLE)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def test_a_cut_off_node_never_runs_a_job_twice(failing: tuple[Cluster, LocalSlurm]) -> None:
    cluster, slurm = failing
    cluster.start_coordinator("--executor", "slurm", "--slurm-partition", "tiresias")
    cluster.wait_nodes("n1", "n2")
    args = ("--steps", "100000", "--step-time", "0.05", "--checkpoint-every", "5")
    job = cluster.submit(*args, workers=2)
    wait_until(lambda: "step 10\n" in cluster.logs(job), 60, "the job to get going")
    key = cluster.job(job)["key"]
    [(node, _)] = cluster.job(job)["placement"].items()
    copies = Copies(key)
    try:
        slurm.fail_node(node, freeze=False)  # slurmd gone, the job's processes run on
        wait_until(lambda: running(cluster, job, 1), 120, "the job to resume elsewhere")
        wait_until(lambda: "(restart 1" in cluster.logs(job), 120, "the resumed run")
    finally:
        copies.close()
        slurm.revive_node(node, [])
    assert list(cluster.job(job)["placement"]) != [node]
    seen = [alive for _, alive in copies.samples]
    changes = [(round(t, 2), sorted(a)) for i, (t, a) in enumerate(copies.samples)
               if i == 0 or a != copies.samples[i - 1][1]]  # fmt: skip
    print("samples (time, restarts alive) where they changed:", changes)
    assert all(len(alive) <= 1 for alive in seen), "two copies ran at once"
    assert frozenset({"0"}) in seen[5:]  # the old copy ran on after its slurmd stopped
    last_old = max(i for i, alive in enumerate(seen) if "0" in alive)
    first_new = min(i for i, alive in enumerate(seen) if "1" in alive)
    assert last_old < first_new
    old_log = cluster.state / "slurm" / key / "logs" / node / "chief-0.log"
    assert "a newer start of this job replaced this one" in old_log.read_text()
    # Slurm ended the old allocation before the replacement's started (whole seconds)
    old, new = slurm_times(slurm, key)[-2:]
    assert old[2] <= new[1], (old, new)
    # slurmdbd tells the same: the old run ended by the node's failure (DOWN), its requeued
    # job cancelled unrun, then the new run (slurmctld sends its records a moment later:
    # sacct_states waits for them)
    expected = ["NODE_FAIL", "CANCELLED", "RUNNING"]
    assert sacct_states(slurm, key, expected) == expected
    old_run, *_, new_run = sacct_runs(slurm, key)
    assert old_run["end"] <= new_run["start"], (old_run, new_run)


def test_a_node_marked_down_and_back_takes_the_job_again(
    cluster: Cluster, slurm: LocalSlurm
) -> None:
    """An admin marks the only node DOWN while a job runs there: Slurm requeues the job and
    the node returns to service (its slurmd answers). The job's next start runs there from
    its checkpoint as a new Slurm job (not the requeued one, whose old step the node may
    still be ending), and the node is not drained ("Duplicate jobid")."""
    cluster.start_coordinator("--executor", "slurm", "--slurm-partition", "one")
    cluster.wait_nodes("n1")
    args = ("--steps", "100000", "--step-time", "0.05", "--checkpoint-every", "5")
    job = cluster.submit(*args, workers=2)
    wait_until(lambda: "step 10\n" in cluster.logs(job), 60, "the job to get going")
    slurm.run("scontrol", "update", "nodename=n1", "state=down", "reason=tiresias-test")
    wait_until(
        lambda: len(slurm_times(slurm, cluster.job(job)["key"])) == 2, 60, "a second Slurm job"
    )
    # slurmd still answers: the node returns to service at once (ReturnToService=2)
    wait_until(lambda: running(cluster, job, 1), 60, "the job to start again on n1")
    wait_until(lambda: "(restart 1" in cluster.logs(job), 60, "its run")
    assert "drain" not in slurm.states()["n1"]
    assert "Duplicate jobid" not in (slurm.root / "log" / "slurmctld.log").read_text()
    [(first, *_), _] = slurm_times(slurm, cluster.job(job)["key"])
    assert slurm.run("squeue", "-h", "-j", first, "-t", "all", "-o", "%T").strip() == "CANCELLED"
