"""The batch an elastic Keras ``fit`` job has at its largest world, learned when its first run
is smaller (docs/launcher.md, "Elastic jobs").

A ``fit`` script's global batch and epoch come from its own arithmetic on the world (the
Keras guide's ``per_replica * strategy.num_replicas_in_sync``, the TensorFlow tutorial's
``per_worker * len(tf_config["cluster"]["worker"])``, or a constant), and a run at W < MAX
workers sees W: its values alone cannot tell a per-worker batch from a global one. So the
chief runs the script once more, as a probe, in a process that sees MAX workers: TF_CONFIG
lists MAX workers, ``TIRESIAS_NUM_WORKERS`` is MAX, and MultiWorkerMirroredStrategy is a
MirroredStrategy over MAX virtual CPUs, so ``num_replicas_in_sync`` is MAX and nothing waits
for workers that do not exist. The probe runs the script up to its first ``fit`` call, notes
that call's global batch and ``steps_per_epoch``, and exits before it trains: what the script
does before ``fit`` (read its data, build its model) is done twice, once on the CPU. The
chief's answer reaches every worker in one all-reduce, so the gang agrees on it.

``python -m tiresias_launch.keras_probe OUT script.py [args…]`` is the probe (started by
:func:`learn`, never by hand): it writes ``{"batch", "steps_per_epoch"}`` or ``{"why"}`` to
OUT. It ignores the preemption signals (a preemption during the probe stops the job at its
first batch, with what the probe learned in its checkpoint).
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from tiresias_launch.contract import CHECKPOINT_DIR, COORDINATOR, HOLD_AT_STEP, NUM_WORKERS
from tiresias_launch.env import LaunchEnv, parse
from tiresias_launch.imports import patch_on_import
from tiresias_launch.keras_flavours import TARGETS
from tiresias_launch.runtime import Runtime

#: How long the probe may take to reach ``fit`` (reading the data included).
PROBE_SECONDS = 600
_UNKNOWN = "its chief could not learn its batch at its largest world"


def learn(rt: Runtime, model: Any) -> dict[str, Any] | str:
    """The first ``fit`` call's record at the job's largest world (``batch``,
    ``steps_per_epoch``), or why it is not known. Every process of the gang calls it at its
    first ``fit``; the chief probes, and shares its answer through ``model``'s strategy. A
    learning rate the script scales by the world is set to the largest world's too (a
    resume restores it from the checkpoint, as any optimizer variable)."""
    from tiresias_launch.tensorflow import reduce_sum_for

    env = rt.env
    found = _probe(env) if env.is_chief else _UNKNOWN
    if env.multi_process:
        said = [0.0] * 4
        if isinstance(found, dict):
            known = (found["steps_per_epoch"], found["learning_rate"])
            said = [1.0, found["batch"], *(-1.0 if v is None else v for v in known)]
        total = reduce_sum_for(rt, getattr(model, "distribute_strategy", None))(said)
        if total[0] != 1.0:
            return found if isinstance(found, str) else _UNKNOWN
        steps, rate = (None if v < 0 else v for v in total[2:])
        found = {
            "batch": int(total[1]),
            "steps_per_epoch": None if steps is None else int(steps),
            "learning_rate": rate,
        }
    if isinstance(found, str):
        return found
    rate, own = found.pop("learning_rate"), learning_rate(model)
    scaled = rate is not None and own is not None and own != rate  # by the world
    if scaled:  # and from here on in the checkpoints
        model.optimizer.learning_rate.assign(rate)
    if env.is_chief:
        rt.say(
            f"learned its batch at {env.max_workers} workers by running its script as there "
            f"up to fit: global batch {found['batch']}, {found['steps_per_epoch'] or 'its'} "
            f"steps per epoch, which this run at {env.num_workers} workers trains with"
            + (f", and its learning rate there, {rate:g} (its {own:g} here)" if scaled else "")
        )
    return found


def learning_rate(model: Any) -> float | None:
    """The learning rate of ``model``'s optimizer when it is a number (not a schedule)."""
    rate = getattr(getattr(model, "optimizer", None), "learning_rate", None)
    if hasattr(rate, "numpy") and hasattr(rate, "assign"):
        return float(rate.numpy())
    return None


def _probe(env: LaunchEnv) -> dict[str, Any] | str:
    """Run the script as at the largest world, up to its first ``fit``: what it learned."""
    failed = f"running its script as at {env.max_workers} workers to learn its batch there"
    with tempfile.TemporaryDirectory(prefix="tiresias-probe-") as tmp:
        out, log = Path(tmp) / "batch.json", Path(tmp) / "probe.log"
        command = [sys.executable, "-m", "tiresias_launch.keras_probe", str(out), *sys.argv]
        environ = probe_environment(env, os.environ, Path(tmp) / "checkpoints")
        try:
            with log.open("wb") as fh:
                done = subprocess.run(
                    command, env=environ, stdout=fh, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, timeout=PROBE_SECONDS, check=False,
                )  # fmt: skip
        except subprocess.TimeoutExpired:
            return f"{failed} did not reach fit in {PROBE_SECONDS} s"
        if out.exists():
            found: dict[str, Any] = json.loads(out.read_text())
            return found.get("why", found)
        lines = log.read_text(errors="replace").strip().splitlines() or ["no output"]
        return f"{failed} failed (exit {done.returncode}): {lines[-1]}"


def probe_environment(
    env: LaunchEnv, environ: Mapping[str, str], checkpoints: Path
) -> dict[str, str]:
    """This process's environment as a process of the largest world would have it, with no
    coordinator, no hold, no GPU and checkpoints of its own (the probe never trains)."""
    top = env.max_workers or env.num_workers
    tf_config = dict(env.tf_config or {"task": {"type": "worker", "index": env.task_index}})
    cluster = dict(tf_config.get("cluster") or {})  # type: ignore[call-overload]
    workers = list(cluster.get("worker", []))
    cluster["worker"] = workers + [f"tiresias-probe-{i}:0" for i in range(len(workers), top)]
    out = {k: v for k, v in environ.items() if k not in (COORDINATOR, HOLD_AT_STEP)}
    out |= {"TF_CONFIG": json.dumps({**tf_config, "cluster": cluster}), NUM_WORKERS: str(top)}
    return out | {CHECKPOINT_DIR: str(checkpoints), "CUDA_VISIBLE_DEVICES": ""}


# -- the probe process ---------------------------------------------------------------------


def main(argv: list[str]) -> int:
    out, script, *args = argv
    env = parse()
    for sig in env.preempt_signals:
        signal.signal(sig, signal.SIG_IGN)
    _see_largest_world(env.num_workers)
    patch_on_import(dict.fromkeys(TARGETS, functools.partial(_note_first_fit, Path(out))))
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    _write(Path(out), {"why": f"its script, run as at {env.num_workers} workers, never fit"})
    return 0


def _see_largest_world(workers: int) -> None:
    """MultiWorkerMirroredStrategy becomes a MirroredStrategy of ``workers`` CPU replicas,
    whose cluster resolver reads the probe's TF_CONFIG."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * workers
    )

    class LargestWorld(tf.distribute.MirroredStrategy):  # type: ignore[misc]
        def __init__(self, *_: Any, **__: Any) -> None:
            super().__init__([f"/cpu:{i}" for i in range(workers)])

        @property
        def cluster_resolver(self) -> Any:
            return tf.distribute.cluster_resolver.TFConfigClusterResolver()

    tf.distribute.MultiWorkerMirroredStrategy = LargestWorld
    tf.distribute.experimental.MultiWorkerMirroredStrategy = LargestWorld


def _note_first_fit(out: Path, module: ModuleType) -> None:
    """``Model.fit`` notes its call's global batch and epoch, and ends the probe."""
    original = module.Model.fit

    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        from tiresias_launch.keras_elastic import input_of

        bound = inspect.signature(original).bind(self, *args, **kwargs)
        bound.apply_defaults()
        found = input_of(bound.arguments["x"], bound.arguments.get("batch_size"))
        steps = bound.arguments.get("steps_per_epoch")
        note = {"why": found} if isinstance(found, str) else {"batch": found.batch}
        _write(out, {**note, "steps_per_epoch": steps, "learning_rate": learning_rate(self)})
        os._exit(0)

    module.Model.fit = fit


def _write(out: Path, note: dict[str, Any]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    out.write_text(json.dumps(note))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
