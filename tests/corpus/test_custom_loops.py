"""Custom training loops, written as users write them, preempted under ``tiresias-run``.

With ``tiresias.State`` (``scripts/custom_loop_state.py``) a preemption, whether a SIGTERM
sent to the process or the scheduling policy, resumes exactly: the same losses, weights and
optimizer iteration count as an uninterrupted run under ``tiresias-run``, and the job log and
``tiresias-run`` say where it checkpointed and resumed. One job is preempted both ways, once
each, at steps drawn from a seeded generator and pinned with ``TIRESIAS_HOLD_AT_STEP``.

Without anything checkpointable (``scripts/custom_loop_plain.py``, the TensorFlow tutorial
loop) the documented fallback holds: the log says once per start that the job cannot be
checkpointed, SIGTERM keeps its default action (the process dies at once, long before the
grace period), the job restarts from step 0, and ``tiresias status`` says why. There is
nothing for the hold hook to hold, so these runs train "forever" and are cancelled once the
restart is seen. A framework that catches SIGTERM and returns normally
(``scripts/catches_sigterm.py``, as Lightning does) is restarted, never ``completed``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKE_JOB, wait_until

from coordinator.cli.tables import format_job
from coordinator.service.client import Client

SCRIPTS = Path(__file__).parent / "scripts"
#: Q1 → Q2 threshold (GPU-seconds): the job under test passes it while it starts.
THRESHOLD = 5.0
#: Long enough that a swallowed SIGTERM would make the test time out instead of pass.
GRACE = "600"
TIMEOUT = 300.0
STEPS = 40


@dataclass
class Run:
    """One ``tiresias-run`` with its embedded coordinator, for job j1."""

    proc: subprocess.Popen[bytes]
    address: str
    state: Path
    err: Path
    client: Client

    def job(self, job_id: str = "j1") -> dict[str, Any]:
        return self.client.request("status", job_id=job_id)["job"]

    def log(self, job_id: str = "j1") -> str:
        """The chief's log, under the job's key ``<job id>-<state instance>`` (read from disk:
        the embedded coordinator is gone once ``tiresias-run`` has exited)."""
        logs = self.state / "agent" / "logs"
        return "".join(p.read_text(errors="replace") for p in logs.glob(f"{job_id}-*/chief-0.log"))

    def runs(self) -> list[str]:
        """The chief's log split into its starts (the agent heads each with a line)."""
        return re.split(r"^=== j1 restart \d+ on local ===\n", self.log(), flags=re.M)[1:]

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def history(self) -> list[str]:
        """j1's history, as the coordinator stored it."""
        with sqlite3.connect(self.state / "coordinator.sqlite") as db:
            rows = db.execute("SELECT text FROM job_events WHERE job_id = 'j1'").fetchall()
        return [text for (text,) in rows]

    def diagnostics(self) -> str:
        logs = sorted((self.state / "agent" / "logs").glob("*/*.log"))
        parts = [(str(p.relative_to(self.state)), p.read_text(errors="replace")) for p in logs]
        parts.append(("tiresias-run stderr", self.stderr()))
        return "\n".join(f"--- {name} ---\n{text[-3000:]}" for name, text in parts)

    def wait(self, what: str, pred: Any, timeout: float = TIMEOUT) -> None:
        try:
            wait_until(pred, timeout, what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.diagnostics()}") from None

    def finish(self) -> int:
        try:
            return self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError("tiresias-run did not finish\n" + self.diagnostics()) from None

    def cli(self, *args: str) -> str:
        return subprocess.run(
            [
                *(sys.executable, "-m", "coordinator.cli", args[0]),
                *("--coordinator", self.address, *args[1:]),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout


@pytest.fixture
def tiresias_run(tmp_path: Path) -> Iterator[Any]:
    runs: list[Run] = []

    def start(*job: str, hold_at: tuple[int, ...] = (), name: str = "run") -> Run:
        state = tmp_path / name
        address = f"ipc://{state}/coordinator.sock"  # users known by uid, no keys needed
        err = tmp_path / f"{name}.err"
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
        env["TIRESIAS_HOLD_AT_STEP"] = ",".join(map(str, hold_at))  # run r holds at the r-th
        with (tmp_path / f"{name}.out").open("wb") as out, err.open("wb") as errf:
            proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "coordinator.run", "--bind", address),
                    *("--state", str(state), "--grace", GRACE, "--thresholds", str(THRESHOLD)),
                    *job,
                ],
                stdout=out,
                stderr=errf,
                cwd=tmp_path,
                env=env,
            )
        run = Run(proc, address, state, err, Client(address, None, timeout=30))
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.client.close()
        if run.proc.poll() is None:
            run.proc.kill()  # its embedded agent's jobs die with it
            run.proc.wait()


def job_pid(marker: str) -> int:
    """The pid of the job process (``tiresias_launch.exec``) whose command line has
    ``marker``: what an operator's ``kill`` would target."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tiresias_launch.exec" in argv and marker.encode() in argv:
            return int(proc.name)
    raise AssertionError(f"no job process with {marker!r} in its command line")


def submit_competitor(run: Run) -> None:
    """A short one-GPU job: it lands in Q1 and the scheduler preempts j1 (in Q2) for it."""
    out = run.cli("submit", "--json", str(FAKE_JOB), "--steps", "3", "--step-time", "0.05")
    assert json.loads(out)["job_id"] == "j2"


def losses(text: str) -> list[tuple[int, str]]:
    return [(int(s), v) for s, v in re.findall(r"^step (\d+) loss (\S+)$", text, flags=re.M)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted run of the State loop under ``tiresias-run``."""
    tmp = tmp_path_factory.mktemp("reference")
    results = tmp / "results.json"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "coordinator.run", "--state", str(tmp / "state")),
            *(str(SCRIPTS / "custom_loop_state.py"), str(results), str(STEPS)),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TIRESIAS_HOLD_AT_STEP": ""},
    )
    assert done.returncode == 0, done.stderr
    return {"results": json.loads(results.read_text()), "losses": losses(done.stdout)}


def assert_resumed_exactly(
    run: Run, results: Path, holds: tuple[int, ...], reference: dict[str, Any]
) -> None:
    """Same losses (steps 0…k0-1, then k0…k1-1, …, then the rest), weights and iterations
    as uninterrupted; the job log and ``tiresias-run`` say where it checkpointed and resumed."""
    assert run.finish() == 0, run.diagnostics()
    runs = run.runs()
    bounds = [0, *holds, STEPS]
    assert len(runs) == len(holds) + 1, run.diagnostics()
    for i, log in enumerate(runs):
        assert [s for s, _ in losses(log)] == list(range(bounds[i], bounds[i + 1])), log
    assert [loss for log in runs for loss in losses(log)] == reference["losses"]
    assert json.loads(results.read_text()) == reference["results"]
    assert reference["results"]["iterations"] == STEPS
    err = run.stderr()
    for restart, k in enumerate(holds, 1):
        checkpoint = rf"^tiresias: checkpoint at step {k} \([\d.]+ MB in [\d.]+ s\)$"
        assert re.search(checkpoint, runs[restart - 1], re.M), runs[restart - 1]
        resumed = rf"^tiresias: resumed from step {k} \(restore [\d.]+ s, first step [\d.]+ s\)$"
        assert re.search(resumed, runs[restart], re.M), runs[restart]
        assert f"j1 stopped: checkpoint at step {k} (" in err, err
        assert f"j1 restarted (restart {restart})" in err, err
        assert f"j1 resumed from step {k} (restore" in err, err


def hold_in_q2(run: Run, k: int) -> None:
    """Waits until the job holds at step ``k`` in Q2, its step reported (so a preemption
    can be told with it)."""

    def holding_in_q2() -> bool:
        job = run.job()
        return job["queue"] == 1 and job["progress"].get("step") == k

    run.wait(f"the job to hold at step {k}", lambda: f"holding at step {k} until" in run.log())
    run.wait("the job in Q2", holding_in_q2)


def assert_status_names_the_checkpoint(run: Run, k: int, restarts: int) -> None:
    """What ``tiresias status j1`` prints while the job restarts (its coordinator lives as
    long as the job: the resumed run is still importing TensorFlow)."""
    run.wait(f"restart {restarts}", lambda: run.job()["restarts"] == restarts)
    status = format_job(run.job())
    assert f"checkpoint at step {k} (" in status and "{" not in status, status


@pytest.mark.tf
def test_state_loop_resumes_exactly(
    tiresias_run: Any, tmp_path: Path, reference: dict[str, Any]
) -> None:
    """Preempted at a drawn step k0 by an operator's ``kill``, then, in the resumed run, at a
    later drawn step k1 by the scheduler; the third run finishes."""
    k0, k1 = sorted(random.Random("state").sample(range(1, STEPS), 2))
    results = tmp_path / "results.json"
    script = str(SCRIPTS / "custom_loop_state.py")
    run = tiresias_run(script, str(results), str(STEPS), hold_at=(k0, k1))
    hold_in_q2(run, k0)
    os.kill(job_pid(str(results)), signal.SIGTERM)
    assert_status_names_the_checkpoint(run, k0, restarts=1)
    hold_in_q2(run, k1)
    submit_competitor(run)
    assert_status_names_the_checkpoint(run, k1, restarts=2)
    assert_resumed_exactly(run, results, (k0, k1), reference)
    told = [line for line in run.stderr().splitlines() if "by the scheduler" in line]
    assert told == [f"tiresias-run: j1 preempted by the scheduler at step {k1}"], run.stderr()


NOT_CHECKPOINTABLE = (
    "tiresias: this job cannot be checkpointed: custom_loop_plain.py uses no tiresias.State, "
    "@tiresias.preemptible or Keras fit; a preemption stops it and it restarts from step 0"
)


def assert_restarted_from_zero(run: Run) -> None:
    """The fallback: killed by SIGTERM's default action, restarted from the first epoch, said
    in the log (once per start), by ``tiresias-run`` and by ``tiresias status``."""
    run.wait("the restart to train", lambda: len(run.runs()) == 2 and "epoch 0 " in run.runs()[1])
    first, second = run.runs()
    for text in (first, second):
        assert text.count(NOT_CHECKPOINTABLE) == 1, text
    assert "epoch 2 loss" in first and second.split("epoch")[1].startswith(" 0 loss"), second
    job = run.job()
    assert job["checkpointable"] is False and job["restarts"] == 1
    assert job["lost"]["preemptions"] == 1 and job["lost"]["gpu_seconds"] > 0, job
    err = run.stderr()
    assert "j1 cannot be checkpointed: custom_loop_plain.py uses no tiresias.State" in err, err
    assert (
        "j1 stopped: preempted without a checkpoint (chief-0 SIGTERM); "
        "it restarts from step 0" in err
    ), err
    table = run.cli("status").splitlines()
    at = table[0].index("CKPT")  # the table of all jobs says it too
    assert [row[at:].split()[0] for row in table[1:]] == ["no"], table
    status = run.cli("status", "j1")
    assert "checkpoint none: this job cannot be checkpointed: custom_loop_plain.py" in status
    assert "last exit  preempted without a checkpoint (chief-0 SIGTERM)" in status, status
    assert "lost       1 preemption without a checkpoint" in status, status
    run.cli("cancel", "j1")
    assert run.finish() == 130


@pytest.mark.tf
def test_plain_loop_killed_by_sigterm_restarts_from_step_0(
    tiresias_run: Any, tmp_path: Path
) -> None:
    results = tmp_path / "results.json"
    run = tiresias_run(str(SCRIPTS / "custom_loop_plain.py"), str(results), "1000000")
    run.wait("two epochs", lambda: "epoch 2 loss" in run.log())
    os.kill(job_pid(str(results)), signal.SIGTERM)
    assert_restarted_from_zero(run)


@pytest.mark.tf
def test_plain_loop_preempted_by_the_policy_restarts_from_step_0(
    tiresias_run: Any, tmp_path: Path
) -> None:
    results = tmp_path / "results.json"
    run = tiresias_run(str(SCRIPTS / "custom_loop_plain.py"), str(results), "1000000")
    run.wait("two epochs in Q2", lambda: "epoch 2 loss" in run.log() and run.job()["queue"] == 1)
    submit_competitor(run)
    run.wait("the competitor", lambda: run.job("j2")["state"] == "completed")
    assert "j1 preempted by the scheduler" in run.stderr()
    assert_restarted_from_zero(run)


def test_a_framework_that_returns_after_sigterm_is_restarted_not_completed(
    tiresias_run: Any,
) -> None:
    """It exits 0 after the preemption signal, with nothing saved: preempted, restarted."""
    run = tiresias_run(str(SCRIPTS / "catches_sigterm.py"), "1000000")
    run.wait("the job in Q2", lambda: "step 10" in run.log() and run.job()["queue"] == 1)
    submit_competitor(run)
    run.wait("the restart", lambda: len(run.runs()) == 2 and "step 0" in run.runs()[1])
    first = run.runs()[0]
    assert "received SIGTERM: stopping training early" in first and "trained " in first
    job = run.job()
    assert job["last_exit"]["outcome"] == "preempted", job
    assert job["last_exit"]["processes"][0]["code"] == 0 and job["state"] == "running"
    assert "cannot be checkpointed" not in first  # it handles the signal itself
    run.cli("cancel", "j1")
    assert run.finish() == 130


@pytest.mark.tf
def test_fit_with_backup_and_restore_resumes_from_its_own_backups(
    tiresias_run: Any, tmp_path: Path
) -> None:
    """Preempted by the policy: the runtime neither restores nor checkpoints a ``fit`` that
    has ``BackupAndRestore``; SIGTERM kills it, the next run resumes from the callback's last
    backup (an epoch end), and that run's first report, past step 0, tells the coordinator:
    the history says it resumed from its own checkpoints, and only the steps after the
    backup count as lost."""
    script = SCRIPTS / "fit_backup_and_restore.py"
    backup, progress = tmp_path / "backup", tmp_path / "progress"
    run = tiresias_run(str(script), str(backup), str(progress), "1000000")

    def epochs_done() -> int:
        return len(progress.read_text().split()) if progress.exists() else 0

    run.wait("two epochs in Q2", lambda: epochs_done() >= 2 and run.job()["queue"] == 1)
    submit_competitor(run)

    said = "resumed from its own checkpoints at step "
    run.wait("the resumed run's report", lambda: any(t.startswith(said) for t in run.history()))
    first, second = run.runs()
    assert first.count("tiresias: this job cannot be checkpointed: its fit uses keras.") == 1
    job = run.job()
    assert job["last_exit"]["processes"][0]["code"] == -signal.SIGTERM, job
    backed_up = int(re.findall(r"^Epoch (\d+)/1000000$", second, flags=re.M)[0]) - 1
    assert backed_up >= 2, second  # epochs done (and backed up) by the first run
    assert f"Epoch {backed_up}/" in first and f"Epoch {backed_up + 2}/" not in first, first
    resumed = backed_up * 64  # 64 batches an epoch
    assert f"{said}{resumed}" in run.history()
    assert 0 <= job["lost"]["steps"] < 64, job  # the part of an epoch after the backup
    assert "resumed" not in "".join(re.findall("^tiresias: .*", second, flags=re.M))
    assert not (run.state / "checkpoints").exists() or not any(
        (run.state / "checkpoints").rglob("MANIFEST.json")
    )
    run.cli("cancel", "j1")
    assert run.finish() == 130


@pytest.mark.tf
@pytest.mark.horovod
@pytest.mark.skipif(importlib.util.find_spec("horovod") is None, reason="needs Horovod")
def test_horovod_custom_loop_dies_by_sigterm_and_restarts_from_step_0(
    tiresias_run: Any,
) -> None:
    """Horovod's tensorflow2_mnist.py on a Gloo gang of 2, preempted by the policy: both
    ranks die of SIGTERM as under ``horovodrun`` (not after the grace period), and the gang
    starts again from step 0."""
    run = tiresias_run(
        "--horovod", "--workers", "2", str(SCRIPTS / "horovod_tf2_mnist.py"), "1000000000"
    )
    run.wait("steps in Q2", lambda: "Step #20\t" in run.log() and run.job()["queue"] == 1)
    submit_competitor(run)
    run.wait("the restart", lambda: len(run.runs()) == 2 and "Step #0\t" in run.runs()[1])
    first = run.runs()[0]
    assert first.count("tiresias: this job cannot be checkpointed: horovod_tf2_mnist.py") == 1
    job = run.job()
    assert job["checkpointable"] is False and job["last_exit"]["outcome"] == "preempted", job
    codes = {(p["role"], p["code"]) for p in job["last_exit"]["processes"]}
    assert codes == {("chief", -signal.SIGTERM), ("worker", -signal.SIGTERM)}, job
    run.cli("cancel", "j1")
    assert run.finish() == 130


@pytest.mark.tf
def test_loop_with_its_own_checkpoint_manager_resumes_from_its_own_save(
    tiresias_run: Any, tmp_path: Path
) -> None:
    """The multi-worker tutorial's loop saves with ``tf.train.CheckpointManager`` after every
    epoch: preempted by the policy, it dies of SIGTERM and resumes from its own last save;
    the runtime restores nothing over it, and the hold hook has nothing to hold."""
    own = tmp_path / "own-checkpoints"
    script = str(SCRIPTS / "custom_loop_checkpoint_manager.py")
    run = tiresias_run(script, str(own), "1000000", hold_at=(5,))
    run.wait("two epochs in Q2", lambda: "epoch 2 loss" in run.log() and run.job()["queue"] == 1)
    submit_competitor(run)
    run.wait("the resumed run to train", lambda: len(run.runs()) == 2 and "loss" in run.runs()[1])
    first, second = run.runs()
    said = "this job cannot be checkpointed: custom_loop_checkpoint_manager.py uses no"
    for text in (first, second):
        assert text.count(said) == 1 and "holding at step" not in text, text
    assert "keeps its own checkpoints (CheckpointManager), so a preemption stops it" in first
    printed = [int(e) for e in re.findall(r"^epoch (\d+) loss", first, flags=re.M)]
    resumed = int(re.findall(r"^epoch (\d+) loss", second, flags=re.M)[0])
    # it saves, then prints: the kill may fall between the two
    assert printed == list(range(len(printed))) and len(printed) <= resumed <= len(printed) + 1
    assert "restored " in second and "tiresias: resumed" not in second, second
    assert not (run.state / "checkpoints").exists() or not any(
        (run.state / "checkpoints").rglob("MANIFEST.json")
    )
    run.cli("cancel", "j1")
    assert run.finish() == 130


def test_a_loop_that_saves_itself_and_reports_its_steps_resumes_where_it_says(
    tiresias_run: Any, tmp_path: Path
) -> None:
    """A NumPy loop with its own save every 10 steps and ``tiresias.report(step=…)``:
    preempted by the policy, it dies of SIGTERM and resumes from its save, and the
    coordinator knows it: the history names the step it resumed at, and only the steps
    after that save count as lost."""
    script = str(SCRIPTS / "numpy_own_checkpoint.py")
    run = tiresias_run(script, str(tmp_path / "own.npz"), "1000000")
    run.wait("15 steps in Q2", lambda: "step 15 loss" in run.log() and run.job()["queue"] == 1)
    assert run.job()["progress"]["step"] >= 14  # progress from the reports
    submit_competitor(run)

    said = "resumed from its own checkpoints at step "
    run.wait("the resumed run's report", lambda: any(t.startswith(said) for t in run.history()))
    first, second = run.runs()
    assert "the steps it reports say where it resumes" in first, first
    resumed = int(re.findall(r"^resumed from my checkpoint at step (\d+)$", second, re.M)[0])
    assert resumed >= 10 and f"{said}{resumed}" in run.history(), run.history()
    job = run.job()
    assert job["last_exit"]["processes"][0]["code"] == -signal.SIGTERM, job
    assert 0 <= job["lost"]["steps"] < 10, job  # the steps after its last save
    run.cli("cancel", "j1")
    assert run.finish() == 130
