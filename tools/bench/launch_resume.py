"""End-to-end preemption and resume of one job process under the runtime, against the same
training loop saving and loading itself with its framework's plain checkpoint
(``tf.train.Checkpoint`` write/read, ``torch.save``/``torch.load``), for launch_bench.py
``--end-to-end``.

Each pair runs both sides, in alternating order (A B, then B A), from fresh processes started
the same way (``subprocess.Popen`` of this interpreter, no ``setsid``): train a few steps,
SIGTERM → exited 75 (*preemption*, with the process's CPU time over that window), then start
again → the first step after the restore done (*resume*: start, imports, model build, load,
one step; its CPU time from the process's rusage).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPTS = {"tensorflow": "launch_bench_job.py", "torch": "launch_bench_torch_job.py"}
#: Steps trained before the preemption (the first ones trace and warm up).
WARM_STEPS = 3


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _reap(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    """Wait for ``proc``: its exit code and its whole CPU time (user + system)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def _steps(progress: Path) -> int:
    try:
        return int(progress.read_text() or 0)
    except (OSError, ValueError):
        return 0


def _until(condition: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"bench job ended or stalled (exit {proc.returncode}):\n{tail}")
        time.sleep(0.005)


def _one_side(
    framework: str, width: int, work: Path, tiresias: bool, env: dict[str, str]
) -> dict[str, float]:
    """Preempt one run of the job, then time its resume."""
    script = str(HERE / SCRIPTS[framework])
    saved = work / ("ckpt" if framework == "tensorflow" else "ckpt.pt")
    if framework == "tensorflow":
        saved.mkdir()
    argv = [sys.executable, *(("-m", "tiresias_launch.exec") if tiresias else ()), script]
    out: dict[str, float] = {}
    for restart in (0, 1):
        progress = work / f"progress-{restart}"
        extra = () if tiresias else (str(saved),)
        run_env = {**env, "TIRESIAS_RESTART_COUNT": str(restart)} if tiresias else env
        log = work / f"log-{restart}"
        t0 = time.perf_counter()
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [*argv, str(width), str(progress), *extra],
                env=run_env,
                cwd=work,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        if restart == 0:
            _until(lambda p=progress: _steps(p) >= WARM_STEPS, proc, log)
            cpu0 = _cpu_seconds(proc.pid)
            t0 = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            code, cpu = _reap(proc)
            out["preempt_s"] = time.perf_counter() - t0
            out["preempt_cpu_s"] = cpu - cpu0
            if code != 75:
                raise RuntimeError(f"bench job exited {code} on SIGTERM, not 75")
        else:
            _until(lambda p=progress: _steps(p) > 0, proc, log)
            out["resume_s"] = time.perf_counter() - t0
            cpu = _cpu_seconds(proc.pid)
            proc.kill()
            _reap(proc)
            out["resume_cpu_s"] = cpu
    return out


def end_to_end(framework: str, width: int, pairs: int) -> dict[str, Any]:
    """``pairs`` interleaved pairs of (runtime, plain); medians, ratios and every value."""
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "OMP_NUM_THREADS": "1",
    }
    sides: dict[str, list[dict[str, float]]] = {"tiresias": [], "plain": []}
    loads = []
    with tempfile.TemporaryDirectory(prefix="tiresias-bench-") as tmp:
        for pair in range(pairs):
            order = ("tiresias", "plain") if pair % 2 == 0 else ("plain", "tiresias")
            for side in order:
                work = Path(tmp) / f"{side}-{pair}"
                work.mkdir()
                job_env = {
                    **env,
                    "TIRESIAS_JOB_ID": f"e2e{pair}",
                    "TIRESIAS_CHECKPOINT_DIR": str(work / "store"),
                }
                loads.append(os.getloadavg()[0])
                sides[side].append(_one_side(framework, width, work, side == "tiresias", job_env))
        saved = Path(tmp) / "plain-0"
        mb = sum(f.stat().st_size for f in saved.rglob("*") if "ckpt" in str(f) and f.is_file())
    result: dict[str, Any] = {
        "framework": framework,
        "width": width,
        "pairs": pairs,
        "plain_checkpoint_mb": mb / 1e6,
        "load_average_1m": [min(loads), max(loads)],
    }
    for key in ("preempt_s", "preempt_cpu_s", "resume_s", "resume_cpu_s"):
        ours = [s[key] for s in sides["tiresias"]]
        theirs = [s[key] for s in sides["plain"]]
        result[key] = {
            "tiresias": ours,
            "plain": theirs,
            "median_ratio": statistics.median(a / b for a, b in zip(ours, theirs, strict=True)),
        }
    return result


def markdown_row(result: dict[str, Any]) -> str:
    """The result as a row of docs/launcher.md's end-to-end table."""

    def cell(key: str) -> str:
        r = result[key]
        ours, theirs = statistics.median(r["tiresias"]), statistics.median(r["plain"])
        return f"{ours:.2f} / {theirs:.2f} s (**{r['median_ratio']:.2f}×**)"

    low, high = result["load_average_1m"]
    return (
        f"| {result['framework']} | {result['plain_checkpoint_mb']:.0f} MB | "
        f"{cell('preempt_s')} | {cell('preempt_cpu_s')} | {cell('resume_s')} | "
        f"{cell('resume_cpu_s')} | {result['pairs']} | {low:.0f}–{high:.0f} |"
    )
