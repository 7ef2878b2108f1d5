"""Launcher runtime benchmarks (results and command in docs/launcher.md).

1. Per-step overhead of ``State.steps`` (stop check, timing, report counters) on a small
   Keras or PyTorch model (``--framework``), with reporting on (a local ROUTER plays the
   coordinator): absolute µs/step and share of the model's step time; for ``lightning``, of
   the callback the patched ``Trainer.fit`` adds, per training batch.
2. Preemption latency: SIGTERM to every process of a job planned by ``gang.plan`` (single,
   ``--workers N`` MultiWorkerMirrored or DDP, ``--horovod``; an unmodified Lightning
   ``Trainer.fit`` for ``lightning``) → every process exited with 75,
   against writing the same checkpoint bytes with a plain ``write`` + ``fsync``.
3. PyTorch only: State's checkpoint and restore against a plain ``torch.save`` (+ fsync) and
   ``torch.load`` of the same state dicts.
4. ``--end-to-end``: one process preempted (SIGTERM → exited 75) and resumed (start → first
   step after the restore) under the runtime, against the same loop saving and loading itself
   with its framework's plain checkpoint, in interleaved pairs (``launch_resume.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _abba(
    train_step: Callable[[], object], state: Any, steps: int, rounds: int
) -> tuple[float, float]:
    """Median seconds per step of ``train_step`` in a plain loop and in ``state.steps``,
    alternating the order (ABBA) so load from other processes hits both alike."""

    def timed(loop: Iterable[object]) -> float:
        t0 = time.perf_counter()
        for _ in loop:
            train_step()
        return (time.perf_counter() - t0) / steps

    for _ in range(50):
        train_step()
    plain, instrumented = [], []
    for r in range(rounds):
        pair = [
            lambda: plain.append(timed(range(steps))),
            lambda: instrumented.append(timed(state.steps(state.step + steps))),
        ]
        for run in pair if r % 2 else reversed(pair):
            run()
    return statistics.median(plain), statistics.median(instrumented)


def _torch_step_seconds(steps: int, rounds: int = 20) -> tuple[float, float]:
    """Mean seconds per step of a small PyTorch model without and with the runtime."""
    import torch

    import tiresias

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), 0.01)
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))

    def train_step() -> None:
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return _abba(train_step, tiresias.State(model=model, optimizer=optimizer), steps, rounds)


def _lightning_batch_seconds(steps: int, rounds: int = 6) -> dict[str, float]:
    """Median seconds per training batch of a small Lightning ``fit``: plain, with an empty
    callback (what Lightning's hook dispatch costs for any callback), and with the runtime's
    callback (what the patched ``fit`` adds), timed from the first batch to the last and
    interleaved; and the runtime callback's own two batch hooks, called in a loop."""
    import lightning as L
    import torch

    from tiresias_launch import lightning_callback

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 1))

        def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
            return self.net(batch[0]).square().mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), 0.01)

    class Clock(L.Callback):
        def on_train_batch_start(self, *_: object) -> None:
            self.first = getattr(self, "first", None) or time.perf_counter()

        def on_train_end(self, *_: object) -> None:
            self.seconds = (time.perf_counter() - self.first) / (steps - 1)

    data = torch.utils.data.TensorDataset(torch.randn(64 * steps, 32))
    loader = torch.utils.data.DataLoader(data, batch_size=64)

    def fit(kind: str) -> float:
        model, clock = Tiny(), Clock()
        trainer = L.Trainer(
            max_epochs=1,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[clock],
        )
        extra = {
            "plain": [],
            "empty_callback": [L.Callback()],
            "runtime_callback": [lightning_callback.callback("lightning.pytorch", trainer, model)],
        }[kind]
        trainer.callbacks[:0] = extra
        trainer.fit(model, loader)
        return clock.seconds

    kinds = ["plain", "empty_callback", "runtime_callback"]
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    for r in range(rounds):
        for kind in kinds if r % 2 else reversed(kinds):
            seconds[kind].append(fit(kind))
    result = {kind: statistics.median(values) for kind, values in seconds.items()}

    class AtBatch:  # what the hooks read of the trainer
        current_epoch, accumulate_grad_batches = 0, 1

    trainer = AtBatch()
    hooks = lightning_callback.callback("lightning.pytorch", trainer, Tiny())
    t0 = time.perf_counter()
    for i in range(20_000):
        hooks.on_train_batch_start(trainer, None, None, i)
        hooks.on_train_batch_end(trainer, None, None, None, i)
    result["runtime_hooks"] = (time.perf_counter() - t0) / 20_000
    return result


def _model_step_seconds(steps: int, rounds: int = 20) -> tuple[float, float]:
    """Mean seconds per step of a small Keras model without and with the runtime."""
    import keras
    import tensorflow as tf

    import tiresias

    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01)
    x = tf.random.stateless_normal([64, 32], seed=[0, 1])

    @tf.function
    def train_step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return _abba(train_step, tiresias.State(model=model, optimizer=optimizer), steps, rounds)


def _boundary_seconds(steps: int) -> float:
    """Seconds per step of ``State.steps`` around an empty body: the runtime's own cost."""
    from tiresias_launch.state import State

    state = State.current()
    start = state.step
    t0 = time.perf_counter()
    for _ in state.steps(start + steps):
        pass
    return (time.perf_counter() - t0) / steps


def overhead(steps: int, framework: str) -> dict[str, float]:
    if framework == "lightning":  # no State loop: the callback is the runtime's cost
        seconds = _lightning_batch_seconds(max(steps, 1000))
        return {
            "load_average_1m": os.getloadavg()[0],
            **{f"{kind}_batch_us": value * 1e6 for kind, value in seconds.items()},
            "runtime_share_of_batch_pct": 100 * seconds["runtime_hooks"] / seconds["plain"],
        }
    measure = _torch_step_seconds if framework == "torch" else _model_step_seconds
    plain, instrumented = measure(steps)
    boundary = _boundary_seconds(20_000)
    return {
        "load_average_1m": os.getloadavg()[0],
        "model_step_us": plain * 1e6,
        "instrumented_step_us": instrumented * 1e6,
        "runtime_us_per_step": boundary * 1e6,
        "runtime_share_of_step_pct": 100 * boundary / plain,
        "instrumented_minus_plain_us": (instrumented - plain) * 1e6,
    }


def _wait(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("bench job did not start training")
        time.sleep(0.01)


def _renamed(directory: Path) -> bool:
    """Whether a checkpoint has been renamed into place (it is durable from then on)."""
    return directory.is_dir() and any(p.name.startswith("ckpt-") for p in directory.iterdir())


def preemption(
    width: int, runs: int, workers: int, horovod: bool, framework: str
) -> dict[str, object]:
    from coordinator.gang import GangRequest, free_local_port, plan
    from tiresias_launch import EXIT_CHECKPOINTED
    from tiresias_launch.checkpoint import CheckpointStore

    durable, exited, ckpt_bytes = [], [], 0
    with tempfile.TemporaryDirectory(prefix="tiresias-bench-") as tmp:
        work = Path(tmp)
        for run in range(runs):
            job, progress = f"bench{run}", work / f"progress-{run}"
            script = {
                "torch": "launch_bench_torch_job.py",
                "lightning": "launch_bench_lightning_job.py",
            }.get(framework, "launch_bench_job.py")
            argv = (str(HERE / script), str(width), str(progress))
            request = GangRequest(argv, workers=workers, horovod=horovod)
            placement = {"localhost": list(range(workers))}
            specs = plan(request, job, placement, None, work, 0, free_local_port)
            procs = [
                subprocess.Popen(
                    [sys.executable, *spec.argv[1:]],
                    env={
                        **os.environ,
                        **spec.env,
                        "CUDA_VISIBLE_DEVICES": "",
                        "TF_CPP_MIN_LOG_LEVEL": "2",
                    },
                    cwd=work,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for spec in specs
            ]
            _wait(lambda p=progress: p.exists() and int(p.read_text() or 0) >= 20, 300)
            t0 = time.perf_counter()
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            while procs[0].poll() is None and not _renamed(work / job):
                time.sleep(0.002)
            durable.append(time.perf_counter() - t0)
            codes = [proc.wait(300) for proc in procs]
            exited.append(time.perf_counter() - t0)
            assert codes == [EXIT_CHECKPOINTED] * len(procs), f"bench job exited {codes}"
            [ckpt] = CheckpointStore(work / job, job).complete()
            ckpt_bytes = ckpt.manifest.bytes
        payload = os.urandom(ckpt_bytes)
        writes = []
        for run in range(runs):
            t0 = time.perf_counter()
            with open(work / f"plain-{run}", "wb") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            writes.append(time.perf_counter() - t0)
    return {
        "load_average_1m": os.getloadavg()[0],
        "processes": workers,
        "framework": framework,
        "mode": "horovod" if horovod else ("allreduce" if workers > 1 else "single"),
        "checkpoint_mb": ckpt_bytes / 1e6,
        "signal_to_checkpoint_renamed_s": sorted(durable),
        "signal_to_exit_s": sorted(exited),
        "plain_write_fsync_s": sorted(writes),
    }


def torch_checkpoint(width: int, runs: int) -> dict[str, object]:
    """State's checkpoint write and restore of the bench job's state (MLP + Adam), against
    ``torch.save`` + fsync and ``torch.load`` of the same state dicts, in this process."""
    import torch

    from tiresias_launch.runtime import get_runtime
    from tiresias_launch.state import checkpointer_for

    net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 1))
    optimizer = torch.optim.Adam(net.parameters(), 1e-3)
    net(torch.randn(8, width)).square().mean().backward()
    optimizer.step()  # Adam's moments exist now
    rt = get_runtime()
    checkpointer = checkpointer_for({"model": net, "optimizer": optimizer})
    saves, restores, plain_saves, plain_loads = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="tiresias-bench-") as tmp:
        for run in range(runs):
            t0 = time.perf_counter()
            ckpt = checkpointer.save(rt, 1_000 + run, {"step": 1_000 + run})
            saves.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            checkpointer.restore(rt)
            restores.append(time.perf_counter() - t0)
            path = Path(tmp) / f"plain-{run}.pt"
            t0 = time.perf_counter()
            with open(path, "wb") as fh:
                torch.save({"model": net.state_dict(), "optimizer": optimizer.state_dict()}, fh)
                fh.flush()
                os.fsync(fh.fileno())
            plain_saves.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            torch.load(path, weights_only=False)
            plain_loads.append(time.perf_counter() - t0)
    assert ckpt is not None
    return {
        "checkpoint_mb": ckpt.manifest.bytes / 1e6,
        "state_save_s": statistics.median(saves),
        "torch_save_fsync_s": statistics.median(plain_saves),
        "state_restore_s": statistics.median(restores),
        "torch_load_s": statistics.median(plain_loads),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per overhead round")
    parser.add_argument("--width", type=int, default=2048, help="bench job hidden width")
    parser.add_argument("--runs", type=int, default=3, help="preemptions to time")
    parser.add_argument("--workers", type=int, default=1, help="processes in the bench job")
    parser.add_argument("--horovod", action="store_true", help="Horovod/Gloo instead of MWMS")
    parser.add_argument("--skip-overhead", action="store_true", help="only time preemption")
    parser.add_argument(
        "--end-to-end",
        type=int,
        metavar="PAIRS",
        help="only time preemption and resume against the plain framework checkpoint, in "
        "PAIRS interleaved pairs (one process; --width sets the state's size)",
    )
    parser.add_argument(
        "--framework", choices=("tensorflow", "torch", "lightning"), default="tensorflow"
    )
    args = parser.parse_args()
    import zmq

    # A live coordinator for this process and the bench jobs, so reporting costs are included.
    router = zmq.Context.instance().socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    os.environ.update(
        TIRESIAS_COORDINATOR=f"tcp://127.0.0.1:{port}",
        TIRESIAS_JOB_ID="bench",
        TIRESIAS_CHECKPOINT_DIR=tempfile.mkdtemp(prefix="tiresias-bench-"),
    )
    result: dict[str, object] = {}
    if args.end_to_end:
        from launch_resume import end_to_end, markdown_row

        measured = end_to_end(args.framework, args.width, args.end_to_end)
        print(json.dumps({**measured, "markdown_row": markdown_row(measured)}, indent=2))
        return
    if not args.skip_overhead:
        result["overhead"] = overhead(args.steps, args.framework)
    result["preemption"] = preemption(
        args.width, args.runs, args.workers, args.horovod, args.framework
    )
    if args.framework == "torch":
        result["checkpoint"] = torch_checkpoint(args.width, args.runs)
    reports = 0
    while router.poll(100):
        router.recv_multipart()
        reports += 1
    router.close(linger=0)
    result["reports_received"] = reports
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
