"""The local Slurm itself: two slurmd on one host form one cluster that runs a 2-node gang
with GPUs from gres.conf, and a job exiting 75 is requeued held (RequeueExitHold)."""

from __future__ import annotations

from helpers import wait_until

from tools.slurm_local import LocalSlurm


def test_gang_across_both_nodes(slurm: LocalSlurm) -> None:
    out = slurm.run(
        "srun",
        "-N2",
        "-n2",
        "--gres=gpu:2",
        "bash",
        "-c",
        'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"',
    )
    assert sorted(out.split("\n")[:2]) == ["n1 0,1", "n2 0,1"]


def test_exit_75_is_requeued_held(slurm: LocalSlurm) -> None:
    job = slurm.run(
        "sbatch", "--parsable", "--requeue", "-N1", "--output=/dev/null", "--wrap", "exit 75"
    ).strip()
    wait_until(
        lambda: "JobState=SPECIAL_EXIT" in slurm.run("scontrol", "show", "job", job),
        what="the job requeued held",
    )
    assert "Restarts=1" in slurm.run("scontrol", "show", "job", job)
    assert slurm.states() == {"n1": "idle", "n2": "idle"}
