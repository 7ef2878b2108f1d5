"""Paper Figures 4/5 on this machine: what preempting and resuming each reference DNN costs.

Per model, two fresh processes go through the launcher's own checkpoint code path
(``tiresias.State``, i.e. ``tiresias_launch``'s atomic checkpoint store):

* pause: build the model, train one step, then time ``State.save()`` — the checkpoint a
  preempted job writes before it exits (fsynced data, manifest, rename);
* resume: a new process times ``import tensorflow`` (startup), building the model and optimizer
  (build), ``tiresias.State(...)`` restoring the checkpoint (restore), and the first training
  step (warm-up: tracing and first run; the fastest of the next three steps is shown for
  comparison).

Models keep their paper image size (so parameter counts and checkpoint sizes are the real
ones); only the batch is reduced for CPUs. Writes a table to stdout and, under ``--out``,
``figure45.md``, ``figure45.json`` and ``figure45.png``.

    nice -n 10 python tools/reproduce/figure45.py            # all paper models, minutes
    python tools/reproduce/figure45.py --models alexnet resnet50 --out /tmp/fig45
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a script from anywhere in the checkout

import models  # noqa: E402

PHASES = ("pause", "resume")
RESUME_PARTS = (("build", "build model"), ("restore", "load checkpoint"), ("first_step", "warm-up"))


def worker(phase: str, model_name: str, image_size: int, batch_size: int) -> dict[str, Any]:
    """One process of the experiment; returns its measurements (seconds, bytes, counts)."""
    t_start = time.perf_counter()
    import tensorflow  # noqa: F401  (timed: the startup every resumed process pays)

    import tiresias
    from models import common
    from tiresias_launch.tensorflow import tensor_facts

    out: dict[str, Any] = {"startup": time.perf_counter() - t_start}
    args = common.parse_args(
        common.arg_parser(None),
        ["--model", model_name, "--image-size", str(image_size), "--batch-size", str(batch_size)],
    )
    t0 = time.perf_counter()
    model = common.build(args)
    optimizer = common.optimizer(args.lr)
    out["build"] = time.perf_counter() - t0
    step_fn = common.train_step(model, optimizer)

    t0 = time.perf_counter()
    state = tiresias.State(model=model, optimizer=optimizer)
    out["restore"] = time.perf_counter() - t0
    if (state.restored is not None) != (phase == "resume"):
        raise RuntimeError(f"{phase}: unexpected checkpoint state {state.restored}")

    # Pause after one step (optimizer slots exist); resume measures the first step and then
    # three more, whose minimum is the steady-state step (the machine is shared: min, not mean).
    step_seconds = []
    for step in state.steps(state.step + (4 if phase == "resume" else 1)):
        t0 = time.perf_counter()
        float(step_fn(*common.batch(args, step)))  # float(): wait for the step to finish
        step_seconds.append(time.perf_counter() - t0)
    out["first_step"] = step_seconds[0]
    out["steady_step"] = min(step_seconds[1:], default=None)

    if phase == "pause":
        t0 = time.perf_counter()
        ckpt = state.save()
        out["checkpoint"] = time.perf_counter() - t0
        out["checkpoint_bytes"] = ckpt.manifest.bytes if ckpt else 0
    out["params"] = model.count_params()
    tensor_bytes = tensor_facts(model.trainable_weights, num_ps=0)["tensor_bytes"]  # as reported
    out["param_bytes"], out["tensors"] = sum(tensor_bytes), len(tensor_bytes)
    return out


def run_model(name: str, image_size: int, batch_size: int, root: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONWARNINGS": "ignore",
        "TIRESIAS_JOB_ID": f"figure45-{name}",
        "TIRESIAS_CHECKPOINT_DIR": str(root / name),
    }
    result: dict[str, Any] = {
        "model": name,
        "image_size": image_size,
        "batch_size": batch_size,
        "load_average": os.getloadavg()[0],  # the machine is shared: how busy it was
    }
    for phase in PHASES:
        cmd = [sys.executable, __file__, "--worker", phase, "--models", name]
        cmd += ["--image-size", str(image_size), "--batch-size", str(batch_size)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
        if proc.returncode != 0:
            raise RuntimeError(f"{name} {phase} failed:\n{proc.stderr[-4000:]}")
        result[phase] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def row(r: dict[str, Any]) -> list[str]:
    p, s = r["pause"], r["resume"]
    resume = sum(s[k] for k, _ in RESUME_PARTS)
    return [
        r["model"],
        f"{r['image_size']}",
        f"{p['params'] / 1e6:.1f}",
        f"{p['param_bytes'] / 2**20:.0f}",
        f"{p['tensors']}",
        f"{p['checkpoint_bytes'] / 2**20:.0f}",
        f"{p['checkpoint']:.2f}",
        f"{s['startup']:.2f}",
        f"{s['build']:.2f}",
        f"{s['restore']:.2f}",
        f"{s['first_step']:.2f}",
        f"{s['steady_step']:.2f}",
        f"{resume:.2f}",
    ]


HEADER = [
    "model",
    "image",
    "params (M)",
    "model (MB)",
    "tensors",
    "checkpoint (MB)",
    "pause: checkpoint (s)",
    "startup: import TF (s)",
    "build model (s)",
    "load checkpoint (s)",
    "warm-up: first step (s)",
    "steady step (s)",
    "resume = build + load + warm-up (s)",
]


def table(results: Sequence[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row(r)) + " |" for r in results]
    return "\n".join(lines)


def plot(results: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["model"] for r in results]
    x = range(len(names))
    fig, (ax_pause, ax_resume) = plt.subplots(1, 2, figsize=(13, 4.5))
    ax_pause.bar(x, [r["pause"]["checkpoint"] for r in results], color="tab:red")
    for i, r in enumerate(results):
        mb = r["pause"]["checkpoint_bytes"] / 2**20
        ax_pause.annotate(f"{mb:.0f} MB", (i, r["pause"]["checkpoint"]), ha="center", va="bottom")
    ax_pause.set_title("Pause: checkpoint write (label: checkpoint size)")
    ax_pause.set_ylabel("seconds")
    bottom = [0.0] * len(results)
    for key, label in RESUME_PARTS:
        values = [r["resume"][key] for r in results]
        ax_resume.bar(x, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax_resume.set_title("Resume: build model + load checkpoint + warm-up (first step)")
    ax_resume.set_ylabel("seconds")
    ax_resume.legend()
    for ax in (ax_pause, ax_resume):
        ax.set_xticks(list(x), names, rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def report(results: Sequence[dict[str, Any]], out: Path, batch_size: int, wall: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    loads = [r["load_average"] for r in results]
    (out / "figure45.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, out / "figure45.png")
    cmd = "nice -n 10 python tools/reproduce/figure45.py"
    (out / "figure45.md").write_text(
        f"""# Figures 4/5: preemption cost of the reference DNNs on CPU

Generated by `{cmd}` ({time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
{wall / 60:.1f} min). Plot: `figure45.png`; raw numbers: `figure45.json`.

Machine: {platform.machine()} CPU, {os.cpu_count()} cores, no GPU
(1-minute load average {min(loads):.1f}–{max(loads):.1f} when the models started), so seconds
are indicative, and inflated where the load exceeds the cores. TensorFlow on CPU; checkpoints
to local disk. Images at the model's paper size (224, 299 for Inception), so parameter counts,
model and checkpoint sizes are the real ones; **batch {batch_size} per step instead of the
paper's GPU batches**, which makes a training step far cheaper than on a GPU at full batch.

Measured through the launcher's checkpoint path (`tiresias.State`, `tiresias_launch`'s atomic
checkpoint store), each phase in a fresh process:

- *pause*: `State.save()` after one training step: `tf.train.Checkpoint` write of model and
  SGD-momentum slots, fsync, manifest, rename (what a preempted job does before exiting 75);
- *resume*: *build model* (model and optimizer construction), *load checkpoint*
  (`tiresias.State(...)`: find the newest complete checkpoint, build optimizer slots, restore),
  *warm-up* (first training step: tracing plus first run; *steady step* is the fastest of the
  next three, for comparison). *startup* (Python and TensorFlow import) comes before all of it
  and is not part of the model's cost.

*model (MB)* is the float32 size of the trainable tensors (what is exchanged every iteration);
*tensors* counts them; the checkpoint also holds BatchNorm statistics and momentum slots.

{table(results)}
"""
    )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(models.PAPER_NAMES), choices=models.NAMES)
    p.add_argument("--image-size", type=int, help="default: each model's paper size")
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--out", type=Path, default=REPO / "docs" / "results")
    p.add_argument("--worker", choices=PHASES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        (name,) = args.models
        print(json.dumps(worker(args.worker, name, args.image_size, args.batch_size)))
        return
    t0 = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="figure45-") as root:
        for name in args.models:
            size = args.image_size or models.spec(name).canonical_size
            results.append(run_model(name, size, args.batch_size, Path(root)))
            print(table(results[-1:]).splitlines()[-1], flush=True)
    print(table(results))
    report(results, args.out, args.batch_size, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
