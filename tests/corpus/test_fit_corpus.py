"""A corpus of Keras ``fit`` scripts written the way users write them (``scripts/``, no
Tiresias import), each preempted twice under ``tiresias-run`` at steps drawn from a seeded
generator and compared with an uninterrupted run of the same script under ``tiresias-run``.

``TIRESIAS_HOLD_AT_STEP`` makes each run of the job hold at its drawn step until it is
preempted, so nothing races. Every script is preempted both ways in one job: its first run
by a SIGTERM sent to the job's processes while they hold at step S0, its second (resumed from
S0) by the policy at a later step S1 (the job is in Q2 while it holds and a short competitor
lands in Q1); the third resumes from S1 and finishes. So each script costs two jobs, not
three, and the second resume starts from a checkpoint written by a resumed run.

Asserted against the reference run, from what the script itself writes: final weights
(bit-identical: the scripts seed everything and the CPU ops are deterministic), History,
the optimizer's iteration count, the ``(epoch, batch)`` numbers a callback saw (each once, in
order), and script-specific files (the CSVLogger file). Under MultiWorkerMirroredStrategy
the History of the resumed epoch is equal to float rounding (see ``Case.history_rel``). The
pattern that cannot be resumed exactly (legacy Keras, a finite reshuffling dataset, resumed
inside an epoch) asserts the documented fallback instead (``Case.fallback``).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import signal
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e.test_tiresias_run import (
    HOLDING,
    JOB,
    RUN_TIMEOUT,
    EmbeddedRun,
    checkpoint_step,
    launch,
    preempt_with_a_short_job,
    runs_of,
    stop,
)
from helpers import wait_until

pytestmark = pytest.mark.tf
SCRIPTS = Path(__file__).parent / "scripts"
LEGACY = {"TF_USE_LEGACY_KERAS": "1"}


@dataclass(frozen=True)
class Case:
    script: str
    gang: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    files: tuple[str, ...] = ()  # other outputs that must be equal (suffixes of RESULTS)
    #: History only to this relative tolerance: a multi-replica epoch's metric totals are
    #: restored split evenly over the replicas, so its mean can differ in the last bit.
    history_rel: float = 0.0
    #: Cannot be resumed exactly inside an epoch: the log line that says so (the documented
    #: fallback keeps every batch number and the step count, not the shuffle).
    fallback: str = ""
    #: The preemption is drawn from the steps from here on (a later epoch's).
    hold_from: int = 1


CASES = [
    Case("unbuilt_sequential"),
    Case("functional_class_weight"),
    Case("subclassed_sample_weight"),
    Case("custom_train_step"),
    Case("tfdata_repeat"),
    Case("generator_pydataset"),
    Case("fit_loop"),
    Case("stock_callbacks", files=(".csv",)),
    Case("directory_cache", hold_from=7),  # in epoch 2 or later: it trains on the cache
    Case("tfrecord_interleave"),
    Case("fit_loop_dataset", hold_from=9),  # in the second or third fit call
    Case("mwms_fit", ("--workers", "2"), tuple(LEGACY.items()), history_rel=1e-6),
    Case(
        "legacy_reshuffle",
        env=tuple(LEGACY.items()),
        fallback="a finite reshuffling dataset under tf_keras draws new shuffle seeds",
    ),
    Case("horovod_fit", ("--horovod", "--workers", "2"), tuple(LEGACY.items())),
]


def run_script(case: Case, workdir: Path, hold_at: tuple[int, ...]) -> EmbeddedRun:
    workdir.mkdir(parents=True)
    script = str(SCRIPTS / f"{case.script}.py")
    return launch(
        workdir, hold_at, *case.gang, script, str(workdir / "results"), env=dict(case.env)
    )


def finished(run: EmbeddedRun, restarts: int) -> str:
    """``tiresias-run``'s stderr once it exited 0 with the job completed."""
    try:
        code = run.proc.wait(RUN_TIMEOUT)
    except Exception:
        raise AssertionError("tiresias-run did not finish:\n" + run.diagnostics()) from None
    err = run.err.read_text()
    assert code == 0, run.diagnostics()
    assert f"{JOB} completed (restarts {restarts}" in err, run.diagnostics()
    return err


@functools.cache
def reference(case: Case, root: Path) -> Path:
    """The uninterrupted run's outputs (once per script)."""
    run = run_script(case, root / f"reference-{case.script}", ())
    try:
        finished(run, restarts=0)
    finally:
        stop(run)
    return run.state.parent


def job_pids(run: EmbeddedRun) -> list[int]:
    """Processes of the job: their environment names its checkpoint directory (under the
    job's key, ``<job id>-<state instance>``)."""
    marker = f"TIRESIAS_CHECKPOINT_DIR={run.state / 'checkpoints' / JOB}-".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0") if proc.name.isdigit() else []
            if any(entry.startswith(marker) for entry in environ):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def preempt_by_sigterm(run: EmbeddedRun, processes: int) -> None:
    """Once every process of the job's first run holds at its step, SIGTERM them all (as a
    node's shutdown or an operator would)."""
    step = run.hold_at[0]

    def holding() -> bool:
        logs = sorted((run.state / "agent" / "logs").glob(f"{JOB}-*/*.log"))
        held = [p for p in logs if HOLDING.format(step) in p.read_text(errors="replace")]
        return len(held) == processes

    try:
        wait_until(holding, 180, f"the job to hold at step {step}")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{run.diagnostics()}") from None
    pids = job_pids(run)
    assert len(pids) == processes, pids
    for pid in pids:
        os.kill(pid, signal.SIGTERM)


def outputs(workdir: Path, case: Case) -> dict[str, object]:
    results = workdir / "results"
    lines = Path(f"{results}.batches").read_text().splitlines()
    batches = [tuple(map(int, line.split())) for line in lines]
    found: dict[str, object] = {"batches": batches, **json.loads(results.read_text())}
    for suffix in case.files:
        found[suffix] = Path(f"{results}{suffix}").read_text()
    return found


def hold_steps(case: Case, total: int) -> tuple[int, int]:
    """S0 < S1, drawn from the steps from ``case.hold_from`` on, before the last (seeded by
    the script's name): both are resumes inside the training."""
    s0, s1 = sorted(random.Random(case.script).sample(range(case.hold_from, total), 2))
    return s0, s1


@pytest.mark.parametrize("case", CASES, ids=[c.script for c in CASES])
def test_fit_script_resumes_as_if_never_preempted(
    case: Case, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if case.script == "horovod_fit" and importlib.util.find_spec("horovod") is None:
        pytest.skip("needs Horovod")
    expected = outputs(reference(case, tmp_path_factory.getbasetemp()), case)
    total = len(expected["batches"])
    processes = 2 if case.gang else 1
    run = run_script(case, tmp_path / "preempted", hold_steps(case, total))
    try:
        preempt_by_sigterm(run, processes)
        preempt_with_a_short_job(run, preempted=1)
        finished(run, restarts=2)
    finally:
        stop(run)
    resumed = dict(zip(run.hold_at, runs_of(run.log(), 3)[1:], strict=True))
    assert checkpoint_step(run) == run.hold_at[-1]  # one checkpoint per hold, at its step
    got = outputs(run.state.parent, case)
    assert got["batches"] == expected["batches"]  # every (epoch, batch) once, in order
    assert got["iterations"] == expected["iterations"] == total
    if case.fallback:
        for step, log in resumed.items():  # said by each resume from inside an epoch only
            batch = expected["batches"][step][1]
            assert (case.fallback in log) == (batch > 0), (step, log)
        assert got["epochs"] == expected["epochs"]
        assert got["history"].keys() == expected["history"].keys()
        return
    for log in resumed.values():
        assert "tiresias: resuming" not in log  # nothing inexact to report
        assert "this resume is not exact" not in log  # the scripts seed their data preparation
    if case.history_rel:
        history, expected_history = got.pop("history"), expected.pop("history")
        assert history.keys() == expected_history.keys()
        for key, values in history.items():
            assert values == pytest.approx(expected_history[key], rel=case.history_rel), key
    assert got == expected, run.diagnostics()


INPUTS_DIFFER = "tiresias: the training and validation inputs differ from the checkpointed run's"


def test_a_resume_whose_inputs_differ_says_so_in_the_log_and_the_history(
    tmp_path: Path,
) -> None:
    """keras-io's unseeded permutation before ``validation_split``: the resumed run holds out
    other rows. The job log says so once, and the job's history records it."""
    run = run_script(Case("unseeded_permutation"), tmp_path / "preempted", (5,))
    try:
        preempt_by_sigterm(run, 1)
        finished(run, restarts=1)
    finally:
        stop(run)
    first, second = runs_of(run.log())
    assert INPUTS_DIFFER not in first
    said = [line for line in second.splitlines() if line.startswith("tiresias: the ")]
    assert len(said) == 1 and said[0].startswith(INPUTS_DIFFER), second
    assert "np.random.seed" in said[0]
    db = sqlite3.connect(run.state / "coordinator.sqlite")
    events = db.execute("SELECT kind, text FROM job_events WHERE job_id = ?", (JOB,)).fetchall()
    assert ("runtime", said[0].removeprefix("tiresias: ")) in events, events
