"""End to end on loopback: a coordinator, two agents with virtual GPUs and a stream of fake
jobs submitted through the CLI. Short jobs preempt a long one (2D-LAS with a tiny queue
threshold); the long one resumes from the step it checkpointed; everything completes."""

from __future__ import annotations

import json
import re

from helpers import FAKE_JOB

from .conftest import Cluster, wait_until


def resume_points(log: str) -> tuple[list[int], list[int]]:
    """(steps checkpointed at, steps started at) in one process's log, in order."""
    saved = [int(s) for s in re.findall(r"checkpointed at step (\d+)", log)]
    started = [int(s) for s in re.findall(r"start at step (\d+)", log)]
    return saved, started


def test_short_jobs_preempt_a_long_one_which_resumes(cluster: Cluster) -> None:
    cluster.start_coordinator("--thresholds", "2", "--grace", "5", "--heartbeat-timeout", "3")
    cluster.start_agent("a", gpus=1)
    cluster.start_agent("b", gpus=1)
    cluster.wait_nodes("a", "b")

    # it holds at step 10 until preempted, so neither a slow start nor a fast finish races
    # the short jobs; demoted below Q1 once it has 2 GPU-seconds (1 s on 2 GPUs)
    long_job = cluster.submit("--steps", "50", "--step-time", "0.1", "--hold-at", "10", workers=2)
    wait_until(lambda: cluster.job(long_job)["queue"] == 1, 20, "the long job's demotion")
    assert cluster.job(long_job)["placement"] == {"a": [0], "b": [0]}
    shorts = [cluster.submit("--steps", "4", "--step-time", "0.05") for _ in range(3)]

    wait_until(lambda: cluster.job(long_job)["preemptions"] >= 1, 20, "a preemption")
    everything = [long_job, *shorts]
    wait_until(
        lambda: all(cluster.state_of(j) == "completed" for j in everything),
        60,
        "every job to complete",
    )

    files = cluster.client.request("logs", job_id=long_job, limit=1 << 18)["files"]
    chief = next(v["data"] for k, v in files.items() if k.endswith("chief-0.log"))
    saved, started = resume_points(chief)
    # the first preemption lands at the held step; a short job that finishes before the
    # next one is submitted lets the long job resume, to be preempted again: any number of
    # rounds is right as long as each resume starts exactly where the last checkpoint was
    assert saved[:1] == [10], chief
    assert started == [0, *saved], f"resumed at {started} after checkpoints at {saved}"
    assert chief.count("done after 50 steps") == 1
    assert set(files) == {"a/chief-0.log", "b/worker-1.log"}

    status = json.loads(cluster.cli("status", "--all", "--json").stdout)
    assert {j["job_id"]: j["state"] for j in status} == dict.fromkeys(everything, "completed")
    long_view = json.loads(cluster.cli("status", long_job, "--json").stdout)
    # a run preempted while it started (a loaded machine) trained nothing and saved nothing:
    # every run is in the log, and each one that trained resumed at the last checkpoint
    runs = [int(r) for r in re.findall(r"=== j\d+ restart (\d+) on", chief)]
    assert runs == list(range(len(runs))) and len(runs) > len(saved)
    assert long_view["restarts"] == len(runs) - 1 and long_view["exit_code"] == 0
    # the human views render
    assert long_job in cluster.cli("status", "--all").stdout
    assert "GPUS" in cluster.cli("nodes").stdout
    assert cluster.cli("queue").stdout == "no active jobs\n"  # all of them completed
    assert "done after 50 steps" in cluster.cli("logs", long_job).stdout


def test_failing_job_reports_code_and_log_tail(cluster: Cluster) -> None:
    cluster.start_coordinator("--heartbeat-timeout", "3")
    cluster.start_agent("a", gpus=1)
    cluster.start_agent("b", gpus=1)
    cluster.wait_nodes("a", "b")
    job = cluster.submit("--steps", "100", "--step-time", "0.05", "--fail-at", "3", workers=2)
    wait_until(lambda: cluster.state_of(job) == "failed", 20, "the job to fail")
    view = cluster.job(job)
    assert view["exit_code"] == 3
    assert "failing at step 3" in view["log_tail"]
    # the surviving worker on the other node was stopped, not left running
    nodes = cluster.client.request("nodes")["nodes"]
    assert all(n["used"] == 0 for n in nodes)
    assert "failing at step 3" in cluster.cli("status", job).stdout
    # -f on a finished job prints everything once and returns
    assert "failing at step 3" in cluster.cli("logs", job, "-f").stdout


def test_cancel_waiting_and_running_jobs(cluster: Cluster) -> None:
    cluster.start_coordinator()
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    running = cluster.submit("--steps", "1000", "--step-time", "0.05")
    waiting = cluster.submit("--steps", "1000", "--step-time", "0.05")
    wait_until(lambda: cluster.state_of(running) == "running", 10, "the first job to run")
    assert cluster.state_of(waiting) == "waiting"
    assert "cancelled" in cluster.cli("cancel", waiting).stdout
    cluster.cli("cancel", running)
    wait_until(lambda: cluster.state_of(running) == "cancelled", 10, "the cancellation")
    # logged as what happened: killed at once, never checkpointed, no signal ignored
    said = (cluster.tmp / "coordinator.log").read_text()
    assert f"job {running} restart 0 ended: killed → cancelled" in said, said[-2000:]
    assert "ignored the signal" not in (cluster.tmp / "agent-a.log").read_text()
    for command in ("cancel", "logs", "status"):  # each names itself, not the request it sent
        refused = cluster.cli(command, "nope", check=False)
        assert refused.returncode == 1, refused
        assert refused.stderr == f"tiresias {command}: unknown job id 'nope'\n", refused.stderr


def test_manual_clock_makes_service_time_exact(cluster: Cluster) -> None:
    cluster.start_coordinator("--manual-clock", "--thresholds", "10")
    cluster.start_agent("a", gpus=2)
    cluster.wait_nodes("a")
    job = cluster.submit("--steps", "100000", "--step-time", "0.01", workers=2)
    wait_until(lambda: cluster.state_of(job) == "running", 10, "the job to start")
    assert cluster.client.request("advance", seconds=4.0)["now"] == 4.0
    assert cluster.job(job)["attained"] == 8.0 and cluster.job(job)["queue"] == 0
    cluster.client.request("advance", seconds=1.5)
    wait_until(lambda: cluster.job(job)["queue"] == 1, 5, "the demotion at 10 GPU-s")
    assert cluster.job(job)["attained"] == 11.0
    cluster.cli("cancel", job)
    wait_until(lambda: cluster.state_of(job) == "cancelled", 10, "the cancellation")


def test_logs_larger_than_one_message_arrive_whole(cluster: Cluster) -> None:
    cluster.start_coordinator()
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    job = cluster.submit("--steps", "150000", "--step-time", "0")  # ~1.5 MB of log
    wait_until(lambda: cluster.state_of(job) == "completed", 60, "the chatty job")
    out = cluster.cli("logs", job).stdout
    assert len(out) > 1_000_000 and out.startswith("==> a/chief-0.log <==\n")
    lines = out.splitlines()
    assert lines[-1] == "done after 150000 steps"
    steps = [int(line.split()[1]) for line in lines if line.startswith("step ")]
    assert steps == list(range(1, 150001))


RANKS = ("chief-0", "worker-1", "worker-2", "worker-3")


def test_an_elastic_job_starts_small_grows_when_gpus_free_and_finishes(cluster: Cluster) -> None:
    """Two nodes of 2 GPUs, one taken by a rigid job: a ``--workers 2:4`` job starts on the
    2 that are free (a rigid 4 would wait), holding at step 10. The rigid job ends; the
    elastic one is checkpointed there and restarted on all 4 GPUs across both nodes, every
    process told its world (4) and the top of its range, resumes at step 10 and finishes."""
    cluster.start_coordinator("--grace", "10", "--heartbeat-timeout", "3")
    cluster.start_agent("a", gpus=2)
    cluster.start_agent("b", gpus=2)
    cluster.wait_nodes("a", "b")
    rigid = cluster.submit("--steps", "1000000", "--step-time", "0.05", workers=2)
    wait_until(lambda: cluster.state_of(rigid) == "running", 20, "the rigid job")
    args = ("--steps", "40", "--step-time", "0.05", "--hold-at", "10")
    out = cluster.cli("submit", "--json", "--workers", "2:4", str(FAKE_JOB), *args)
    elastic = json.loads(out.stdout)["job_id"]
    wait_until(lambda: "holding at step 10" in cluster.logs(elastic), 30, "the small run")
    small = cluster.job(elastic)
    assert sum(map(len, small["placement"].values())) == 2 and small["restarts"] == 0
    [line] = [x for x in cluster.cli("queue").stdout.splitlines() if x.startswith(elastic)]
    assert line.split()[1:5] == ["running", "2", "of", "2:4"], line

    cluster.cli("cancel", rigid)  # its GPUs free up
    wait_until(lambda: cluster.state_of(elastic) == "completed", 60, "the elastic job")
    done = cluster.job(elastic)
    assert (done["restarts"], done["exit_code"], done["progress"]["step"]) == (1, 0, 40)
    files = cluster.client.request("logs", job_id=elastic, limit=1 << 18)["files"]
    # each rank has its own log on each node it ran on: ranks 0-1 in the small run, 0-3 grown
    assert {k.split("/")[1] for k in files} == {f"{r}.log" for r in RANKS}
    chief = "".join(files[k]["data"] for k in sorted(files) if k.endswith("chief-0.log"))
    saved, started = resume_points(chief)
    assert saved == [10] and sorted(started) == [0, 10], chief
    assert chief.count("done after 40 steps") == 1
    history = [e["text"] for e in done["history"]]
    assert any(t.startswith("started on 2 of 4 GPUs") for t in history), history
    assert any(t.startswith("grew to 4") for t in history), history
    assert "shape      2 to 4 workers, 0 ps, 2:4 GPUs" in cluster.cli("status", elastic).stdout
