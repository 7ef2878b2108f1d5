"""Plain ``sbatch`` jobs in the managed partition are held at once and scheduled by
Tiresias like submitted jobs: in the policy's order among Tiresias jobs, on the node the core
chooses, shown by ``tiresias status``."""

from __future__ import annotations

from pathlib import Path

from helpers import wait_until
from service.conftest import Cluster

from tools.slurm_local import LocalSlurm


def test_a_plain_sbatch_job_is_held_and_scheduled_ahead_of_a_demoted_job(
    cluster: Cluster, slurm: LocalSlurm, tmp_path: Path
) -> None:
    """One 2-GPU node: a Tiresias job holds both GPUs and is demoted; a user's plain
    ``sbatch --gres=gpu:1`` is held by the coordinator (not started by Slurm), queued in Q1
    ahead of the demoted job, which it preempts; it runs on the node and completes; the
    Tiresias job resumes from its checkpoint and completes."""
    cluster.start_coordinator(
        *("--executor", "slurm", "--slurm-partition", "one", "--manual-clock"),
        *("--policy", "tiresias-l", "--thresholds", "4", "--grace", "30"),
    )
    cluster.wait_nodes("n1")
    long = cluster.submit("--steps", "20", "--step-time", "0.05", "--hold-at", "5", workers=2)
    wait_until(lambda: "holding at step 5" in cluster.logs(long), 60, "the long job to hold")
    out = tmp_path / "plain.out"
    slurm_id = slurm.run(
        "sbatch", "--parsable", "-p", "one", "--gres=gpu:1", f"--output={out}",
        "--job-name=plain", "--wrap", "echo plain sbatch ran on $SLURMD_NODENAME",
    ).strip()  # fmt: skip

    def found() -> str | None:
        jobs = cluster.client.request("status")["jobs"]
        return next((j["job_id"] for j in jobs if j["name"] == "plain"), None)

    wait_until(lambda: found() is not None, 60, "the coordinator to find the sbatch job")
    plain = found()
    assert plain is not None
    reason = slurm.run("squeue", "-h", "-j", slurm_id, "-o", "%T %r").strip()
    assert reason in ("PENDING JobHeldAdmin", "PENDING JobHeldUser")  # held, not started
    view = cluster.job(plain)
    assert (view["state"], view["gpus"], view["owner"]) == ("waiting", 1, "root")
    assert view["checkpointable"] is False
    status = cluster.cli("status").stdout
    assert plain in status and "plain" in status

    cluster.client.request("advance", seconds=3.0)  # the long job: 6 GPU-s, demoted to Q2
    wait_until(lambda: cluster.state_of(plain) == "completed", 60, "the sbatch job")
    assert out.read_text() == "plain sbatch ran on n1\n"
    assert cluster.state_of(long) != "completed"  # the sbatch job went first
    wait_until(lambda: cluster.state_of(long) == "completed", 60, "the long job to finish")
    assert "start at step 5 (restart 1" in cluster.logs(long)
    assert cluster.job(plain)["restarts"] == 0 and cluster.job(plain)["exit_code"] == 0


def test_a_preempted_sbatch_job_is_requeued_held_and_runs_again_from_the_start(
    cluster: Cluster, slurm: LocalSlurm, tmp_path: Path
) -> None:
    """A plain 2-GPU sbatch job preempts a demoted Tiresias job, is itself demoted and
    preempted by a new Tiresias job: requeued held (its GPUs free, its work lost and
    counted), it runs again from the beginning after the older Tiresias job (both in Q2,
    which is first come, first served), and completes."""
    cluster.start_coordinator(
        *("--executor", "slurm", "--slurm-partition", "one", "--manual-clock"),
        *("--policy", "tiresias-l", "--thresholds", "4", "--grace", "30"),
    )
    cluster.wait_nodes("n1")
    long = cluster.submit("--steps", "20", "--step-time", "0.05", "--hold-at", "5", workers=2)
    wait_until(lambda: "holding at step 5" in cluster.logs(long), 60, "the long job to hold")
    runs, go = tmp_path / "runs", tmp_path / "go"
    script = f"echo run >> {runs}; while [ ! -f {go} ]; do sleep 0.1; done"
    slurm_id = slurm.run(
        "sbatch", "--parsable", "-p", "one", "--gres=gpu:2", "--job-name=plain",
        f"--output={tmp_path}/plain.out", "--wrap", script,
    ).strip()  # fmt: skip
    wait_until(lambda: len(cluster.client.request("status")["jobs"]) == 2, 60, "it found")
    plain = next(
        j["job_id"] for j in cluster.client.request("status")["jobs"] if j["job_id"] != long
    )
    cluster.client.request("advance", seconds=3.0)  # the long job: 6 GPU-s, demoted to Q2
    wait_until(lambda: runs.exists() and runs.read_text() == "run\n", 60, "its first run")
    cluster.client.request("advance", seconds=3.0)  # the sbatch job: 6 GPU-s, in Q2 too
    newcomer = cluster.submit("--steps", "4", "--step-time", "0.05", workers=2)
    wait_until(lambda: cluster.state_of(newcomer) == "completed", 60, "the Tiresias job")
    wait_until(lambda: cluster.state_of(long) == "completed", 60, "the long job to finish")
    assert runs.read_text() == "run\n"  # behind the long job, which arrived first, in Q2
    wait_until(lambda: runs.read_text() == "run\nrun\n", 60, "the sbatch job to run again")
    go.touch()
    wait_until(lambda: cluster.state_of(plain) == "completed", 60, "the sbatch job to finish")
    view = cluster.job(plain)
    assert (view["restarts"], view["preemptions"]) == (1, 1)
    assert view["lost"]["preemptions"] == 1 and view["lost"]["gpu_seconds"] > 0
    assert "Restarts=1 " in slurm.run("scontrol", "show", "job", slurm_id)  # one Slurm job
    assert "start at step 5 (restart 1" in cluster.logs(long)


def test_an_adopted_job_survives_a_coordinator_kill(
    cluster: Cluster, slurm: LocalSlurm, tmp_path: Path
) -> None:
    """kill -9 of the coordinator while an adopted sbatch job runs and another waits held:
    after the restart the running one is found again (not started twice) and completes, and
    the held one is not queued twice and runs after it."""
    cluster.start_coordinator(*("--executor", "slurm", "--slurm-partition", "one"))
    cluster.wait_nodes("n1")
    long = cluster.submit("--steps", "20", "--step-time", "0.05", "--hold-at", "5", workers=2)
    wait_until(lambda: "holding at step 5" in cluster.logs(long), 60, "the GPUs to be busy")
    runs, go = tmp_path / "runs", tmp_path / "go"
    ids = [
        slurm.run(
            "sbatch", "--parsable", "-p", "one", "--gres=gpu:2", f"--job-name=plain{i}",
            f"--output={tmp_path}/plain{i}.out", "--wrap",
            f"echo {i} >> {runs}; while [ ! -f {go} ]; do sleep 0.1; done",
        ).strip()
        for i in (1, 2)
    ]  # fmt: skip
    wait_until(lambda: len(cluster.client.request("status")["jobs"]) == 3, 60, "both found")
    cluster.cli("cancel", long)
    wait_until(lambda: runs.exists() and runs.read_text() == "1\n", 60, "the first to run")
    cluster.kill_coordinator()
    cluster.start_coordinator()
    go.touch()
    wait_until(lambda: runs.read_text() == "1\n2\n", 60, "the second to run after it")

    def jobs() -> dict[str, dict[str, object]]:
        return {j["name"]: j for j in cluster.client.request("status", all=True)["jobs"]}

    wait_until(lambda: jobs()["plain2"]["state"] == "completed", 60, "the second to finish")
    assert sorted(j["job_id"] for j in jobs().values()) == ["j1", "j2", "j3"]  # not twice
    for name in ("plain1", "plain2"):
        view = cluster.job(str(jobs()[name]["job_id"]))
        assert (view["state"], view["restarts"]) == ("completed", 0)
    for slurm_id in ids:
        assert "Restarts=0 " in slurm.run("scontrol", "show", "job", slurm_id)


def test_cancelling_a_waiting_sbatch_job_cancels_it_in_slurm(
    cluster: Cluster, slurm: LocalSlurm, tmp_path: Path
) -> None:
    """``tiresias cancel`` of an adopted job that never started: its held Slurm job goes."""
    cluster.start_coordinator(*("--executor", "slurm", "--slurm-partition", "one"))
    cluster.wait_nodes("n1")
    long = cluster.submit("--steps", "20", "--step-time", "0.05", "--hold-at", "5", workers=2)
    wait_until(lambda: "holding at step 5" in cluster.logs(long), 60, "the GPUs to be busy")
    slurm_id = slurm.run(
        "sbatch", "--parsable", "-p", "one", "--gres=gpu:1", "--job-name=plain",
        f"--output={tmp_path}/plain.out", "--wrap", "true",
    ).strip()  # fmt: skip
    wait_until(lambda: len(cluster.client.request("status")["jobs"]) == 2, 60, "it found")
    cluster.cli("cancel", "j2")

    def state() -> str:
        return slurm.run("squeue", "-h", "-t", "all", "-j", slurm_id, "-o", "%T").strip()

    wait_until(lambda: state() == "CANCELLED", 60, "its Slurm job to be cancelled")
    assert cluster.state_of("j2") == "cancelled"


def test_an_sbatch_job_submitted_while_gpus_are_free_is_held_at_submission(
    cluster: Cluster, slurm: LocalSlurm, tmp_path: Path
) -> None:
    """Partition "one" is idle and no coordinator runs yet: Slurm would start a plain
    ``sbatch`` job at once, but the job_submit/lua plugin holds it in the submission itself;
    the coordinator, started afterwards, adopts it and runs it."""
    out = tmp_path / "plain.out"
    slurm_id = slurm.run(
        "sbatch", "--parsable", "-p", "one", "--gres=gpu:1", f"--output={out}",
        "--job-name=plain", "--wrap", "echo plain sbatch ran",
    ).strip()  # fmt: skip
    held = slurm.run("squeue", "-h", "-j", slurm_id, "-o", "%T %r").strip()
    assert held in ("PENDING JobHeldAdmin", "PENDING JobHeldUser")  # before anyone looked
    assert slurm.states()["n1"] == "idle"
    cluster.start_coordinator(*("--executor", "slurm", "--slurm-partition", "one"))
    cluster.wait_nodes("n1")
    wait_until(lambda: out.exists() and out.read_text() == "plain sbatch ran\n", 60, "its run")
    [job] = cluster.client.request("status", all=True)["jobs"]
    wait_until(lambda: cluster.state_of(job["job_id"]) == "completed", 60, "it to complete")
