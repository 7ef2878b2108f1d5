"""Real TensorFlow and PyTorch jobs through ``tiresias-run`` on the embedded single-machine
cluster, preempted the way users' jobs are: by the scheduling policy.

Each test starts ``tiresias-run`` (2D-LAS, ``tiresias-l``) with a Q1 threshold of a few
GPU-seconds and ``TIRESIAS_HOLD_AT_STEP=k`` for a step k drawn from a seeded generator: the
training job trains k steps and holds there until it is preempted, so it can neither finish
first nor be preempted elsewhere, however fast or loaded the machine. Once it has been demoted
to Q2, a short competing job (``examples/fake_job.py``, submitted with ``tiresias submit
--coordinator``) then lands in Q1 and needs the GPU, so the scheduler preempts the training
job: every process of it checkpoints and exits 75, the competitor runs and finishes, and the
training job is started again, resumes from its checkpoint and finishes.

What is asserted comes from the job's own output (the chief's log, whose runs the agent
separates with ``=== j1 restart N on local ===`` lines), the checkpoint on disk and
``tiresias-run``'s exit code and summary: one checkpoint, at exactly step k, the
first run trained exactly steps 0…k-1, the second run exactly steps k…total-1 (it continues
at the checkpoint's step + 1 counting from one), one preemption, one restart, exit code 0.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKE_JOB, REPO, wait_until

from coordinator.service.client import Client

#: Q1 → Q2 threshold in GPU-seconds: the TensorFlow job passes it while it starts or holds,
#: the competitor (a fraction of a second of fake steps) never does.
THRESHOLD = 5.0
RUN_TIMEOUT = 300.0
JOB = "j1"
HOLDING = "tiresias: holding at step {} until preempted"


def preemption_step(test: str, total: int) -> int:
    """The step at which ``test`` preempts its job: drawn, but the same on every run."""
    return random.Random(test).randrange(1, total)


@dataclass
class EmbeddedRun:
    """One ``tiresias-run`` process with its embedded coordinator's address and state."""

    proc: subprocess.Popen[bytes]
    #: The step each run holds at, the r-th in the run after r preemptions (none: never).
    hold_at: tuple[int, ...]
    address: str
    state: Path
    out: Path
    err: Path
    client: Client

    def job(self, job_id: str = JOB) -> dict[str, Any]:
        return self.client.request("status", job_id=job_id)["job"]

    def log(self, job_id: str = JOB, name: str = "chief-0.log") -> str:
        # under the job's key <job id>-<state instance>; read from disk, since the embedded
        # coordinator is gone once tiresias-run has exited
        logs = self.state / "agent" / "logs"
        return "".join(p.read_text(errors="replace") for p in logs.glob(f"{job_id}-*/{name}"))

    def diagnostics(self) -> str:
        logs = sorted((self.state / "agent" / "logs").glob("*/*.log"))
        parts = [(p.relative_to(self.state), p.read_text(errors="replace")) for p in logs]
        parts.append(("tiresias-run stderr", self.err.read_text(errors="replace")))
        return "\n".join(f"--- {name} ---\n{text[-3000:]}" for name, text in parts)


#: ``embedded_run(*job)``: starts ``tiresias-run`` for the job's shape, script and flags.
StartRun = Callable[..., EmbeddedRun]


def launch(
    workdir: Path, hold_at: Sequence[int], *job: str, env: dict[str, str] | None = None
) -> EmbeddedRun:
    """``tiresias-run [scheduler options] *job`` in ``workdir`` (state in ``workdir/state``),
    its run after r preemptions holding at step ``hold_at[r]`` (empty: never), with its
    output in files."""
    state = workdir / "state"
    address = f"ipc://{state}/coordinator.sock"
    out, err = workdir / "tiresias-run.out", workdir / "tiresias-run.err"
    hold = {"TIRESIAS_HOLD_AT_STEP": ",".join(map(str, hold_at))}
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coordinator.run",
                "--bind",
                address,
                "--state",
                str(state),
                "--policy",
                "tiresias-l",
                "--thresholds",
                str(THRESHOLD),
                *job,
            ],
            stdout=stdout,
            stderr=stderr,
            cwd=workdir,
            env={
                **os.environ,
                "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONUNBUFFERED": "1",
                **hold,
                **(env or {}),
            },
        )
    client = Client(address, None, timeout=30)  # four TensorFlow imports may load the box
    return EmbeddedRun(proc, tuple(hold_at), address, state, out, err, client)


def stop(run: EmbeddedRun) -> None:
    run.client.close()
    if run.proc.poll() is None:
        run.proc.kill()  # its embedded agent's jobs die with it (PDEATHSIG)
        run.proc.wait()


@pytest.fixture
def embedded_run(tmp_path: Path) -> Iterator[StartRun]:
    """Starts ``tiresias-run`` with a small Q1 threshold; stops it at the end of the test."""
    runs: list[EmbeddedRun] = []

    def start(hold_at: int, *job: str) -> EmbeddedRun:
        runs.append(launch(tmp_path, (hold_at,), *job))
        return runs[-1]

    yield start
    for run in runs:
        stop(run)


def preempt_with_a_short_job(run: EmbeddedRun, preempted: int = 0) -> None:
    """Once the job's run after ``preempted`` preemptions holds at its step and the job is in
    Q2, submit a one-GPU job that lands in Q1: the scheduler preempts the job to run it."""
    step = run.hold_at[preempted]

    def demoted_and_holding() -> bool:
        return HOLDING.format(step) in run.log() and run.job()["queue"] == 1

    try:
        wait_until(demoted_and_holding, 180, f"the job to hold at step {step} in Q2")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{run.diagnostics()}") from None
    submitted = subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator.cli",
            "submit",
            "--coordinator",
            run.address,
            "--json",
            "--workers",
            "1",
            str(FAKE_JOB),
            "--steps",
            "3",
            "--step-time",
            "0.05",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert json.loads(submitted.stdout)["job_id"] == "j2"


def finish(run: EmbeddedRun) -> None:
    """``tiresias-run`` exits 0 after one preemption and one restart; the competitor ran."""
    try:
        code = run.proc.wait(RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AssertionError("tiresias-run did not finish:\n" + run.diagnostics()) from None
    err = run.err.read_text()
    assert code == 0, run.diagnostics()
    assert f"{JOB} completed (restarts 1, preemptions 1)" in err, run.diagnostics()
    assert "done after 3 steps" in run.log("j2"), run.diagnostics()


def runs_of(log: str, runs: int = 2) -> list[str]:
    """A process log split into its ``runs`` runs (the agent writes a header before each
    start)."""
    parts = re.split(rf"^=== {JOB} restart (\d+) on local ===\n", log, flags=re.MULTILINE)
    restarts = [int(r) for r in parts[1::2]]
    assert restarts == list(range(runs)), f"expected {runs} runs:\n{log[-3000:]}"
    return parts[2::2]


def checkpoint_step(run: EmbeddedRun) -> int:
    """The step of the job's last checkpoint. It has one per hold, each at the step it held
    at until preempted, and no other."""
    ckpts = (run.state / "checkpoints").glob(f"{JOB}-*/ckpt-*")
    steps = sorted(int(json.loads((c / "MANIFEST.json").read_text())["step"]) for c in ckpts)
    assert steps == list(run.hold_at), f"checkpoints at {steps}\n{run.diagnostics()}"
    return run.hold_at[-1]


def logged_steps(text: str) -> list[int]:
    return [int(s) for s in re.findall(r"^step (\d+) loss", text, flags=re.MULTILINE)]


def assert_resumed_exactly(run: EmbeddedRun, total: int) -> None:
    """Run 0 logged steps 0…k-1, run 1 steps k…total-1: nothing lost, nothing repeated."""
    first, second = runs_of(run.log())
    k = checkpoint_step(run)
    assert logged_steps(first) == list(range(k)), run.diagnostics()
    assert logged_steps(second) == list(range(k, total)), run.diagnostics()


def train_mlp_through_a_preemption(
    embedded_run: StartRun, gang: tuple[str, ...], script: str, total: int
) -> EmbeddedRun:
    """Runs ``models/<script>`` (the mlp, one loss line per step) as ``gang``, preempts it once
    with a short job, and checks that it resumed at exactly the checkpointed step."""
    run = embedded_run(
        preemption_step(script, total),
        *gang,
        str(REPO / "models" / script),
        *("--model", "mlp", "--steps", str(total), "--log-every", "1"),
    )
    preempt_with_a_short_job(run)
    finish(run)
    assert_resumed_exactly(run, total)
    return run


@pytest.mark.tf
def test_unmodified_keras_fit_is_preempted_and_resumes(embedded_run: StartRun) -> None:
    """``models/train_keras.py`` (plain Keras 3 ``fit``, no Tiresias import) on one worker.
    Its ``verbose=2`` output has one ``Epoch e/4`` header per started epoch and one ``n/n - …
    loss: x`` line per finished one: the first run finishes the epochs before the
    checkpoint's and is stopped inside the next one; the second continues that epoch (under
    the same header, its progress counted from the checkpoint's batch) and runs the rest,
    with the same losses as an uninterrupted run of the script, the interrupted epoch's
    included (same batches in the same order from the same weights, and the epoch's metric
    totals restored)."""
    script = str(REPO / "models" / "train_keras.py")
    epochs, per_epoch = 4, 50
    total = epochs * per_epoch
    flags = ("--model", "mlp", "--steps", str(total), "--epochs", str(epochs))
    run = embedded_run(preemption_step("train_keras.py", total), script, *flags)
    preempt_with_a_short_job(run)
    finish(run)

    first, second = runs_of(run.log())
    k = checkpoint_step(run)
    epoch = k // per_epoch  # 0-based epoch the preemption came in
    headers = [int(e) for e in re.findall(rf"^Epoch (\d+)/{epochs}$", first, flags=re.MULTILINE)]
    assert headers == list(range(1, epoch + 2)), first
    assert [n for n, _ in epoch_lines(first)] == [per_epoch] * epoch, first
    headers = [int(e) for e in re.findall(rf"^Epoch (\d+)/{epochs}$", second, flags=re.MULTILINE)]
    assert headers == list(range(epoch + 1, epochs + 1)), second
    assert [n for n, _ in epoch_lines(second)] == [per_epoch] * (epochs - epoch), second

    plain = subprocess.run(
        [sys.executable, script, *flags],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        check=True,
    ).stdout
    reference = [loss for _, loss in epoch_lines(plain)]
    assert len(reference) == epochs, plain
    assert [loss for _, loss in epoch_lines(first)] == reference[:epoch]
    assert [loss for _, loss in epoch_lines(second)] == reference[epoch:], (
        f"after the resume: {second}\nuninterrupted: {plain}"
    )


def epoch_lines(text: str) -> list[tuple[int, str]]:
    """(batches, loss) of each ``n/n - … - loss: x`` line Keras prints at an epoch's end."""
    found = re.findall(r"^(\d+)/\1 - .* loss: (\S+)$", text, flags=re.MULTILINE)
    return [(int(n), loss) for n, loss in found]


@pytest.mark.tf
def test_parameter_server_job_is_preempted_and_resumes(embedded_run: StartRun) -> None:
    """``models/train.py`` with 1 ps and 2 workers (ParameterServerStrategy; the chief
    schedules every step with ClusterCoordinator and logs each step's loss).

    PS training applies updates at least once in general: ClusterCoordinator re-executes a
    step whose worker failed mid-step. Across a preemption the step count is exact (the chief
    joins every scheduled step before it saves, and the step is restored on resume), and no
    worker fails here, so the exact sequence is asserted."""
    gang = ("--ps", "1", "--workers", "2")
    run = train_mlp_through_a_preemption(embedded_run, gang, "train.py", total=200)
    for name in ("ps-0.log", "worker-0.log", "worker-1.log"):
        assert len(runs_of(run.log(name=name))) == 2  # the whole gang was stopped and restarted


@pytest.mark.tf
@pytest.mark.horovod
@pytest.mark.skipif(importlib.util.find_spec("horovod") is None, reason="needs Horovod")
def test_horovod_job_is_preempted_and_resumes(embedded_run: StartRun) -> None:
    """``models/train_horovod.py`` on 2 Horovod/Gloo ranks: both ranks stop at one agreed
    step, rank 0 checkpoints, both restore it on resume."""
    gang = ("--horovod", "--workers", "2")
    run = train_mlp_through_a_preemption(embedded_run, gang, "train_horovod.py", total=200)
    assert len(runs_of(run.log(name="worker-1.log"))) == 2


@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")
def test_pytorch_ddp_job_is_preempted_and_resumes(embedded_run: StartRun) -> None:
    """``models/train_torch.py`` on 2 DDP ranks (gloo), started like a torchrun script: both
    ranks stop at one agreed step, rank 0 checkpoints, both restore it on resume."""
    run = train_mlp_through_a_preemption(
        embedded_run, ("--workers", "2"), "train_torch.py", total=200
    )
    assert len(runs_of(run.log(name="worker-1.log"))) == 2


@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="needs Lightning")
def test_unmodified_lightning_fit_is_preempted_and_resumes(
    embedded_run: StartRun, tmp_path: Path
) -> None:
    """``tests/pytorch/scripts/lightning_fit.py`` (``Trainer.fit``, no Tiresias import) as a
    2-process DDP gang, preempted by the policy at its held batch: both ranks' per-batch logs
    (epoch, batch, sample indices, loss) and the final weights equal an uninterrupted run's."""
    from launch.gangs import start

    from coordinator.gang import GangRequest

    script = REPO / "tests" / "pytorch" / "scripts" / "lightning_fit.py"
    argv = (str(script), "3", "2", "log-{rank}", "weights.pt")
    run = embedded_run(preemption_step("lightning_fit.py", 3 * 6), "--workers", "2", *argv)
    preempt_with_a_short_job(run)
    finish(run)
    checkpoint_step(run)
    plain = tmp_path / "plain"
    plain.mkdir()
    reference = start(GangRequest(argv, workers=2), plain)
    assert reference.wait(RUN_TIMEOUT) == [0, 0], reference.tails()
    for rank in (0, 1):
        log = f"log-{rank}"
        assert (tmp_path / log).read_text() == (plain / log).read_text(), run.diagnostics()
    import torch

    resumed, expected = torch.load(tmp_path / "weights.pt"), torch.load(plain / "weights.pt")
    assert all(torch.equal(resumed[k], expected[k]) for k in expected)
