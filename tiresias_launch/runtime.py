"""The per-process runtime: preemption flag, checkpoint store, reporter, warm-up accounting,
and the step-boundary decision "stop now?" agreed with the other processes of the gang.

Framework adapters (``tiresias_launch.tensorflow``, ``.keras``) call :meth:`Runtime.restore`
once, :meth:`Runtime.step_done` after every iteration, and :meth:`Runtime.stop` when
:meth:`Runtime.should_stop` says so. Everything framework-specific is passed in as callables.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from tiresias_launch import env as E
from tiresias_launch.checkpoint import Checkpoint, CheckpointStore
from tiresias_launch.contract import EXIT_CHECKPOINTED
from tiresias_launch.procfs import start_ticks
from tiresias_launch.report import Reporter, checkpoint_line, resume_line
from tiresias_launch.signals import PreemptFlag

#: Agreement may cost at most this share of step time (it sets how often peers agree).
AGREEMENT_BUDGET = 0.01
MAX_AGREEMENT_INTERVAL = 100

ReduceSum = Callable[[Sequence[float]], Sequence[float]]


def process_start_time() -> float:
    """Wall-clock time this process was started (Linux /proc), else now. Measured back from
    now on the boot clock that /proc counts start ticks on: /proc/stat's ``btime`` is whole
    seconds, up to a second early, so a file the stopped run wrote just before this run
    started would look newer than this run."""
    try:
        since_start = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks() / os.sysconf(
            "SC_CLK_TCK"
        )
        return time.time() - since_start
    except (OSError, ValueError, IndexError):
        return time.time()


class Agreement:
    """Decides, identically on every rank, at which step a multi-process gang stops.

    Each check is one collective ``reduce_sum([flag, proposed interval])``: any rank with the
    flag set stops everyone at this same step. Ranks propose how many steps to wait until the
    next check so that the collective costs about AGREEMENT_BUDGET of step time; everyone uses
    the reduced mean, so the schedule stays identical on all ranks without extra messages.
    """

    def __init__(self, reduce_sum: ReduceSum, size: int) -> None:
        self.reduce_sum = reduce_sum
        self.size = size
        self.next_check = 0
        self.checks = 0
        self._collective_seconds = 0.0

    def should_stop(self, step: int, local_flag: bool, mean_step_seconds: float) -> bool:
        if step < self.next_check:
            return False
        proposal = self._proposal(mean_step_seconds)
        t0 = time.perf_counter()
        flag_sum, proposal_sum = self.reduce_sum([float(local_flag), float(proposal)])
        self._collective_seconds = time.perf_counter() - t0
        self.checks += 1
        self.next_check = step + max(1, round(proposal_sum / self.size))
        return flag_sum > 0

    def _proposal(self, mean_step_seconds: float) -> int:
        if mean_step_seconds <= 0 or self.checks < 2:  # first checks include tracing
            return 1
        ideal = self._collective_seconds / (AGREEMENT_BUDGET * mean_step_seconds)
        return min(MAX_AGREEMENT_INTERVAL, max(1, math.ceil(ideal)))


class Runtime:
    """One per process (see :func:`get_runtime`)."""

    def __init__(self, launch_env: E.LaunchEnv | None = None) -> None:
        self.env = launch_env or E.parse()
        #: Whether something checkpointable (State, Keras fit) has restored through us: only
        #: then does the preemption signal mean "stop at the next boundary".
        self.claimed = False
        self.flag = PreemptFlag(lambda: self.claimed)
        self.install_signal_handlers()
        self.store = CheckpointStore(
            self.env.checkpoint_dir,
            self.env.job_key,
            keep=self.env.keep_checkpoints,
            job_id=self.env.job_id,
            generation=self.env.restart,  # a stale copy of an older restart cannot save
        )
        self.reporter = Reporter(self.env)
        atexit.register(self.reporter.close)  # last report of scripts not run through exec
        self.started = process_start_time()
        self.restored_step: int | None = None
        self._resumed: Checkpoint | None = None
        #: Called when the script returns normally after the preemption signal (its loop had
        #: already ended): a last checkpoint, so that exit becomes a resumable 75.
        self.save_at_exit: Callable[[], object] | None = None
        #: Whether this elastic job keeps its global batch at other worlds (tiresias_launch.elastic)
        self.resizable: bool | None = None
        self.agreement: Agreement | None = None
        self.barrier: Callable[[], None] | None = None
        self._warmup: dict[str, float] | None = None
        self._steps = 0
        self._step_seconds = 0.0
        self._at_next_step: list[Callable[[], None]] = []
        self._last_reported: tuple[int, float] | None = None  # tiresias.report(step=…)

    def install_signal_handlers(self) -> None:
        """(Re)claim the preemption signals. Called again once the framework is up because
        TensorFlow's coordination service (MultiWorkerMirroredStrategy) installs its own
        C-level SIGTERM handler, which would silently swallow the preemption."""
        if threading.current_thread() is threading.main_thread():
            self.flag.install(self.env.preempt_signals)

    def cannot_checkpoint(self, why: str) -> None:
        """Nothing in this process can be checkpointed: say so once, tell the coordinator,
        and leave the preemption signals' default action alone (a preemption stops the
        process as it would stop a plain run)."""
        if self.env.is_chief:
            self.say(f"this job cannot be checkpointed: {why}")
        self.reporter.note(checkpointable=False, checkpointable_why=why)
        if threading.current_thread() is threading.main_thread():
            self.flag.release(self.env.preempt_signals)

    def say(self, text: str) -> None:
        """One line for people, in the job's own log."""
        print(f"tiresias: {text}", flush=True)

    def claim(self) -> None:
        """From now on this process is checkpointable (a State or a Keras fit restored, or a
        loop asks :meth:`should_stop`): the preemption signal stops it at a boundary."""
        if not self.claimed:
            self.claimed = True
            self.install_signal_handlers()
            self.reporter.note(checkpointable=True, checkpointable_why=None)

    # -- resume -------------------------------------------------------------------------
    def restore(
        self, described: Sequence[str], read: Callable[[Checkpoint], None]
    ) -> Checkpoint | None:
        """Restore the newest usable checkpoint (every process reads it) and time it."""
        self.claim()
        t0 = time.time()
        if self.env.is_chief:
            self.store.remove_stale_temporaries()
        ckpt = self.store.restore(described, read)
        if ckpt is not None and self.store.damaged:
            self._fell_back(ckpt)
        self.restored_step = ckpt.manifest.step if ckpt else 0
        self._resumed = ckpt
        self._warmup = {
            "build": t0 - self.started,
            "restore": time.time() - t0,
            "step": self.restored_step,
        }
        return ckpt

    def _fell_back(self, ckpt: Checkpoint) -> None:
        """Say that newer checkpoints could not be read, so their steps are trained again
        (in the log, and in the job's history through the next report)."""
        newest, why = self.store.damaged[0]
        line = (
            f"the checkpoint at step {newest.manifest.step} could not be read ({why}); "
            f"resumed from the one at step {ckpt.manifest.step}, so the "
            f"{newest.manifest.step - ckpt.manifest.step} steps after it are trained again"
        )
        if self.env.is_chief:
            self.say(line)
            self.reporter.note(notice=line)

    # -- every iteration ----------------------------------------------------------------
    def step_done(self, step: int, seconds: float) -> None:
        """Account one finished iteration; ``step`` is the number of steps done so far."""
        if self._warmup is not None and "first_step" not in self._warmup:
            self._warmup["first_step"] = seconds
            self.reporter.note(warmup=self._warmup)
            if self._resumed is not None and self.env.is_chief:
                self.say(resume_line(self._warmup))
        self._steps += 1
        self._step_seconds += seconds
        self.reporter.step_done(step, seconds)

    def step_reported(self, step: int) -> None:
        """``tiresias.report(step=…)``: the iterations since the last call, timed between
        the calls; a run's first call only says where the run is (nothing timed yet)."""
        now = time.monotonic()
        last, self._last_reported = self._last_reported, (step, now)
        if last is None or step <= last[0]:  # the first call, or a loop that counts anew
            self.reporter.step_done(step, 0.0, iterations=0)
            return
        self.reporter.step_done(step, now - last[1], iterations=step - last[0])

    def at_next_step(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once, at the next step boundary (before the stop check): for restores
        that must happen after the script's own set-up, such as RNG states a data loader's
        first iteration would otherwise draw from."""
        self._at_next_step.append(fn)

    def should_stop(self, step: int) -> bool:
        """Whether to stop before running step ``step``; identical on every rank."""
        if not self.claimed:
            self.claim()
        while self._at_next_step:
            self._at_next_step.pop(0)()
        if step == self._hold_step() and (self.restored_step or 0) < step:
            self._hold_until_preempted(step)
        if self.agreement is None:
            return bool(self.flag)
        mean = self._step_seconds / self._steps if self._steps else 0.0
        return self.agreement.should_stop(step, bool(self.flag), mean)

    def _hold_step(self) -> int | None:
        """The step this run holds at: the r-th of TIRESIAS_HOLD_AT_STEP's steps in the run
        after r preemptions, reached for the first time. With one step only the first run
        holds, so a job preempted before its hold is not held again for ever; a list
        preempts a test's job at one chosen step per run (4 → 2 → 4 resizes)."""
        steps = self.env.hold_at_steps
        return steps[self.env.restart] if self.env.restart < len(steps) else None

    def _hold_until_preempted(self, step: int) -> None:
        """``TIRESIAS_HOLD_AT_STEP``: wait at this boundary for the preemption signal, so a
        test or demo preempts at a chosen step however fast the machine is. Every rank holds
        at the same step and the agent signals every rank, so they all check here."""
        print(f"tiresias: holding at step {step} until preempted", flush=True)
        self.flag.wait()
        if self.agreement is not None:
            self.agreement.next_check = step

    # -- preemption ---------------------------------------------------------------------
    def save(
        self,
        step: int,
        described: Sequence[str],
        write: Callable[[Path], None],
        position: dict[str, Any] | None = None,
        every_rank_writes: bool = False,
    ) -> Checkpoint | None:
        """Write a checkpoint of ``step``; only the chief's is kept. ``every_rank_writes``:
        the framework needs all ranks in the save (MultiWorkerMirroredStrategy), so the
        others write into a scratch directory that is deleted. Callers check
        :meth:`needs_save` first."""
        ckpt = None
        if self.env.is_chief:
            t0 = time.perf_counter()
            ckpt = self.store.save(step, described, write, position)
            facts = {
                "seconds": time.perf_counter() - t0,
                "bytes": ckpt.manifest.bytes,
                "step": step,
                **{k: v for k, v in (position or {}).items() if k in ("epoch", "batch")},
            }
            self.reporter.note(checkpoint=facts)
            self.say(checkpoint_line(facts))
        elif every_rank_writes:
            scratch = Path(tempfile.mkdtemp(prefix="tiresias-scratch-"))
            try:
                write(scratch)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        self.restored_step = step
        return ckpt

    def needs_save(self, step: int) -> bool:
        """False when nothing ran since the last restore or save: that checkpoint is current
        (every rank must skip together, or a collective save would hang)."""
        return step != self.restored_step

    def stop(self, save: Callable[[], object]) -> NoReturn:
        """Checkpoint (through ``save``), wait for the gang, and exit with EXIT_CHECKPOINTED."""
        save()
        if self.barrier is not None:
            # peers must not exit (and break collectives) before the save. A peer that got
            # through the barrier saw everyone's part of it, the chief's included, so the save
            # is done; its exit may still abort the collective on a slower rank, harmlessly.
            try:
                self.barrier()
            except Exception as e:  # e.g. TF "Collective ops is aborted: Socket closed"
                self.say(f"the gang's last barrier ended early ({type(e).__name__}); stopping")
        self.exit(EXIT_CHECKPOINTED)

    def exit(self, code: int) -> NoReturn:
        """Flush reports and leave now. ``os._exit`` because we may be deep inside user code
        (a ``fit`` callback) that could swallow SystemExit, and because TensorFlow's
        collective and gRPC threads can hang a normal interpreter shutdown.

        A script that returns normally after the preemption signal (its loop ended before a
        boundary noticed) is not done in the agent's eyes: a one-process job then writes a
        last checkpoint (``save_at_exit``) and exits 75; the others' exit 0 is reported as
        preempted without a checkpoint."""
        if code == 0 and self.flag and self.save_at_exit and not self.env.multi_process:
            self.save_at_exit()
            code = EXIT_CHECKPOINTED
        self.reporter.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


_runtime: Runtime | None = None
_lock = threading.Lock()


def get_runtime() -> Runtime:
    """The process's runtime, created (env parsed, signal handlers installed) on first use."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = Runtime()
        return _runtime
