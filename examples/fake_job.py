"""A light stand-in for a training job, for demos and service tests (no TensorFlow).

It "trains" for ``--steps`` steps of ``--step-time`` seconds. On the preemption signal it
finishes the current step, saves the step number to ``$TIRESIAS_CHECKPOINT_DIR/step`` (written
to a temporary name, then renamed) and exits 75; on restart it resumes from that step. Every
step is printed, so the log shows exactly where each run started and stopped.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

EXIT_CHECKPOINTED = 75


def _reporter() -> Any:
    """Progress reports through the Tiresias runtime, when it is installed and we run under a
    coordinator; the job works the same without."""
    if not os.environ.get("TIRESIAS_COORDINATOR"):
        return None
    try:
        from tiresias_launch import env
        from tiresias_launch.report import Reporter
    except ImportError:
        return None
    return Reporter(env.parse(), interval=0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--step-time", type=float, default=0.1)
    ap.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="also checkpoint every N steps (survives a lost node)",
    )
    ap.add_argument("--fail-at", type=int, default=None, help="exit 3 at this step")
    ap.add_argument(
        "--hold-at",
        type=int,
        default=None,
        help="after this many steps, wait for the preemption signal (unless resumed past it), "
        "so a demo or test preempts it there however fast the machine is",
    )
    ap.add_argument(
        "--ignore-signal",
        action="store_true",
        help="ignore the preemption signal (to test the grace-period kill)",
    )
    args = ap.parse_args()

    ckpt_dir = Path(os.environ.get("TIRESIAS_CHECKPOINT_DIR", "fake-job-checkpoint"))
    chief = os.environ.get("TIRESIAS_ROLE", "chief") == "chief"
    ckpt = ckpt_dir / "step"
    step = int(ckpt.read_text()) if ckpt.exists() else 0
    restart = os.environ.get("TIRESIAS_RESTART_COUNT", "0")
    print(
        f"start at step {step} (restart {restart}, "
        f"GPUs {os.environ.get('CUDA_VISIBLE_DEVICES')!r})",
        flush=True,
    )

    reporter = _reporter()
    if reporter is not None and reporter.env.elastic and chief:
        reporter.note(resizable=True)  # no batch to keep: it runs the same at any world size
    stop = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stop
        print(f"got {signal.Signals(signum).name}", flush=True)
        stop = not args.ignore_signal

    preempt = os.environ.get("TIRESIAS_PREEMPT_SIGNAL", "SIGTERM")
    for sig in {signal.Signals[preempt], signal.SIGUSR1, signal.SIGUSR2}:
        signal.signal(sig, on_signal)

    def save() -> None:
        if chief:
            ckpt_dir.mkdir(parents=True, exist_ok=True)
            tmp = ckpt.with_suffix(".tmp")
            tmp.write_text(str(step))
            tmp.rename(ckpt)

    hold = args.hold_at if args.hold_at is not None and step < args.hold_at else None
    try:
        while step < args.steps:
            if step == hold:
                print(f"holding at step {step}", flush=True)
                while not stop:
                    time.sleep(0.05)  # the handler sets it
            if stop:
                save()
                print(f"checkpointed at step {step}", flush=True)
                return EXIT_CHECKPOINTED
            if args.step_time:
                time.sleep(args.step_time)
            step += 1
            print(f"step {step}", flush=True)
            if reporter is not None:
                reporter.step_done(step, args.step_time)
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                save()
                print(f"saved step {step}", flush=True)
            if step == args.fail_at:
                print(f"failing at step {step}", flush=True)
                return 3
        print(f"done after {step} steps", flush=True)
        return 0
    finally:
        if reporter is not None:
            reporter.close()  # the last report, so short runs are counted too


if __name__ == "__main__":
    sys.exit(main())
