"""PyTorch adapter: the checkpointer behind ``tiresias.State`` for torch objects.

A PyTorch State saves every object given (model, optimizer, LR scheduler, ``GradScaler``, or
anything else with ``state_dict``/``load_state_dict``) into one ``torch.save`` file, with the
step, epoch and batch (the data position) and the torch, CUDA, NumPy and Python RNG states,
through the runtime's atomic checkpoint store. A ``DataLoader`` given as ``loader=`` is not
saved but resumed: ``State.epochs`` sets its sampler's epoch (``DistributedSampler``) and
makes the interrupted epoch skip, by index, the batches it already trained. Only the chief
writes; every rank restores before its first step. In a multi-process gang
(``torch.distributed`` initialised, as ``init_process_group()`` does from the environment
``tiresias-run`` gives) the ranks agree on the stop step through one tiny all-reduce.

A model sharded over the ranks (FSDP2's ``fully_shard``, or an FSDP wrapper) is saved with
``torch.distributed.checkpoint`` instead, together with its optimizers: every rank writes and
reads only its own shards, into and from the chief's checkpoint directory (the checkpoint
root is shared), and keeps its RNG states and the other objects in a file of its own.
"""

from __future__ import annotations

import itertools
import random
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from tiresias_launch import elastic, torch_resize
from tiresias_launch.checkpoint import Checkpoint
from tiresias_launch.runtime import Agreement, ReduceSum, Runtime
from tiresias_launch.torch_accumulate import Accumulation

STATE_FILE = "state.pt"


def _module(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DistributedDataParallel (or DataParallel) wrapper."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) else model


def resumable(sampler: Any) -> Any:
    """A loader's (batch) sampler, made resumable by swapping its class for a subclass (same
    layout: no new slots) whose passes record the RNG states they start with (a
    ``RandomSampler`` draws its permutation from them) and can be told, once, to start from
    given states and to skip their first items: the loader then never even loads the
    batches a resumed epoch already trained on."""
    cls = type(sampler)
    if getattr(cls, "_tiresias_resumable", False):
        return sampler

    def resumable_iter(self: Any) -> Iterator[Any]:
        # a generator: the resume is taken by the pass that yields, not by an iterator made
        # and dropped unused (a multi-worker DataLoader makes two per epoch)
        skip, start = self._tiresias_skip, self._tiresias_start
        self._tiresias_skip, self._tiresias_start = 0, None
        if start is not None:
            set_rng_states(start)
        self._tiresias_pass_rng = rng_states()
        yield from itertools.islice(cls.__iter__(self), skip, None)

    members = {
        "__slots__": (),
        "__iter__": resumable_iter,
        "_tiresias_resumable": True,
        "_tiresias_skip": 0,
        "_tiresias_start": None,
        "_tiresias_pass_rng": None,
    }
    try:
        sampler.__class__ = type(f"Resumable{cls.__name__}", (cls,), members)
    except TypeError as e:  # a class that refuses it (another layout, a C type): say so
        from tiresias_launch.runtime import get_runtime

        get_runtime().say(
            f"cannot checkpoint the data position exactly: the loader's {cls.__name__} cannot "
            f"be made resumable ({e}); an interrupted epoch restarts from its first batch"
        )
    return sampler


def resume_pass(sampler: Any, skip: int, start: Any) -> None:
    """Tell a resumable sampler's next pass where to start (others restart the epoch)."""
    if getattr(type(sampler), "_tiresias_resumable", False):
        sampler._tiresias_skip, sampler._tiresias_start = skip, start


def rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: Mapping[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def torch_reduce_sum() -> ReduceSum:
    """A sum over the gang's ranks on the default process group (on the GPU for NCCL)."""
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"

    def reduce_sum(values: Sequence[float]) -> Sequence[float]:
        t = torch.tensor(list(values), dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.tolist()

    return reduce_sum


def horovod_reduce_sum() -> ReduceSum:
    """A sum over the gang's ranks through Horovod's PyTorch binding (``--horovod`` jobs)."""
    import horovod.torch as hvd

    def reduce_sum(values: Sequence[float]) -> Sequence[float]:
        t = torch.tensor(list(values), dtype=torch.float64)
        return hvd.allreduce(t, op=hvd.Sum, name="tiresias_agree").tolist()

    return reduce_sum


def join_gang(rt: Runtime) -> None:
    """Claim the preemption signals and, in a multi-process gang, make the stop decision and
    the last barrier collectives: through Horovod in ``--horovod`` jobs, else on
    torch.distributed's default group (idempotent)."""
    rt.install_signal_handlers()
    if not rt.env.multi_process or rt.agreement is not None:
        return
    if rt.env.mode == "horovod":
        reduce_sum = horovod_reduce_sum()
    elif dist.is_available() and dist.is_initialized():
        reduce_sum = torch_reduce_sum()
    else:
        raise RuntimeError(
            "tiresias.State in a multi-process job: call "
            "torch.distributed.init_process_group() before creating it"
        )
    rt.agreement = Agreement(reduce_sum, rt.env.num_workers)
    rt.barrier = lambda: reduce_sum([0.0])


def describe(modules: Sequence[torch.nn.Module]) -> list[str]:
    """The modules' tensors by name, shape and type: what a checkpoint must match."""
    return [
        f"{name} {list(t.shape)} {t.dtype}" for m in modules for name, t in m.state_dict().items()
    ]


def tensor_bytes(modules: Sequence[torch.nn.Module]) -> list[int]:
    """Sizes of the trainable parameters, as the runtime reports them for skew-aware placement."""
    return [
        p.numel() * p.element_size() for m in modules for p in m.parameters() if p.requires_grad
    ]


class TorchCheckpointer:
    """Saves and restores a set of torch objects the way the gang shape needs."""

    def __init__(self, objects: Mapping[str, Any]) -> None:
        loaders = {n: o for n, o in objects.items() if isinstance(o, torch.utils.data.DataLoader)}
        objects = {n: o for n, o in objects.items() if n not in loaders}
        unsaveable = [
            name
            for name, o in objects.items()
            if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict"))
        ]
        if unsaveable:
            raise ValueError(
                f"tiresias.State: {', '.join(unsaveable)} cannot be checkpointed (no "
                "state_dict/load_state_dict); pass models, optimizers, schedulers, scalers "
                "and the DataLoader (loader=…)"
            )
        self.objects = objects
        # batch_size=None: the loader yields one sample per step, straight from its sampler
        self.loaders = [(o, resumable(o.batch_sampler or o.sampler)) for o in loaders.values()]
        self._resume_passes: list[Any] | None = None
        self.modules = [_module(o) for o in objects.values() if isinstance(o, torch.nn.Module)]
        if not self.modules:
            raise ValueError("tiresias.State needs the model (a torch.nn.Module), e.g. model=…")
        self.described = describe(self.modules)
        self.sharded = _sharded(self.objects)
        self._per_rank = ""  # what each rank takes of the global batch (elastic jobs)
        self.accumulation: Accumulation | None = None  # micro-steps below the largest world

    def join(self, rt: Runtime) -> None:
        """Collective stop decisions in multi-process gangs (idempotent); an elastic job's
        loaders yield its largest world's global batches, or it runs rigid."""
        join_gang(rt)
        elastic.declare(rt, self._keep_global_batch(rt))

    def _keep_global_batch(self, rt: Runtime) -> str | None:
        """Rescale every loader for this world (tiresias_launch.torch_resize); why not, or
        None when done (or the job is rigid)."""
        env = rt.env
        if not env.elastic:
            return None
        factor = elastic.factor(env)
        if isinstance(factor, str):
            return factor
        if not self.loaders:
            return (
                "tiresias.State was given no DataLoader (loader=…), so the runtime cannot "
                "scale its per-rank batch"
            )
        for loader, _ in self.loaders:
            why = torch_resize.why_not(loader, env)
            if why is not None:
                return why
        single = any(torch_resize.micro_steps_only(loader) for loader, _ in self.loaders)
        accumulate = env.elastic_batch == "accumulate" or single
        top = env.max_workers or factor
        why = Accumulation.why_not(self.objects) if accumulate else None
        if why is not None:  # at every world: a job resized later must be able to
            how = "its DataLoader yields single samples" if single else "TIRESIAS_ELASTIC_BATCH"
            return f"it would accumulate gradients ({how}), but {why}"
        if accumulate and factor > 1:
            self.accumulation = Accumulation(factor, top, self.objects)
        for loader, _ in self.loaders:
            self._per_rank = torch_resize.rescale(loader, factor, top, accumulate)
        return None

    def facts(self, num_ps: int) -> dict[str, Any]:
        """Per-tensor sizes of the trainable parameters, for skew-aware placement."""
        return {"tensor_bytes": tensor_bytes(self.modules)}

    def begin_epoch(self, epoch: int, skip_batches: int) -> None:
        """Start each loader's ``epoch``; the first epoch after a restore starts its pass from
        the RNG states the interrupted pass started with and skips the batches it trained."""
        passes, self._resume_passes = self._resume_passes, None
        micro = self.accumulation.count if self.accumulation else 1
        for i, (loader, sampler) in enumerate(self.loaders):
            if hasattr(loader.sampler, "set_epoch"):
                loader.sampler.set_epoch(epoch)
            if passes is not None:  # a loader of single samples yields micro-steps
                skip = skip_batches * (micro if torch_resize.micro_steps_only(loader) else 1)
                resume_pass(sampler, skip, passes[i])

    def restore(self, rt: Runtime) -> Checkpoint | None:
        def read(ckpt: Checkpoint) -> None:
            rng = self._read(ckpt)
            # a DataLoader's iteration draws its workers' seed from the global RNG when it
            # starts: the resumed epoch's starts after this restore, the original's before
            # the checkpoint, so the saved RNG state applies from the first step on
            rt.at_next_step(lambda: set_rng_states(rng))

        ckpt = rt.restore(self.described, read)
        if ckpt is not None:
            elastic.resumed(rt, ckpt.manifest.position.get("world"), self._per_rank)
        return ckpt

    def save(self, rt: Runtime, step: int, position: dict[str, Any]) -> Checkpoint | None:
        """Write a checkpoint of ``step``; only the chief's copy is kept (a sharded model's
        ranks all write their shards into it)."""
        if not rt.needs_save(step):
            return None
        sharded = self.sharded is not None
        return rt.save(step, self.described, self._write, position, every_rank_writes=sharded)

    def _write(self, directory: Path) -> None:
        objects, name = self.objects, STATE_FILE
        if self.sharded is not None:
            # every rank writes its own shards (and RNG states) into the chief's directory,
            # which is on the checkpoint root all ranks share
            [chief_dir] = _broadcast([str(directory)])
            directory, name = Path(chief_dir), _rank_file()
            objects = {n: o for n, o in objects.items() if n not in self.sharded.names}
        passes = [getattr(sampler, "_tiresias_pass_rng", None) for _, sampler in self.loaders]
        state = {n: o.state_dict() for n, o in objects.items()}
        saved = {"objects": state, "rng": rng_states(), "passes": passes}
        torch.save(saved, directory / name)
        if self.sharded is not None:
            # collective: when it returns on the chief, every rank has written everything
            self.sharded.save(directory)

    def _read(self, ckpt: Checkpoint) -> dict[str, Any]:
        """Load every object's state; return the RNG states to apply."""
        objects, name = self.objects, STATE_FILE
        if self.sharded is not None:
            self.sharded.load(ckpt.path)  # resharded when the world changed
            objects = {n: o for n, o in objects.items() if n not in self.sharded.names}
            # at another world every rank takes the chief's RNG states, as DDP ranks do
            same_world = ckpt.manifest.position.get("world") in (None, dist.get_world_size())
            name = _rank_file() if same_world else _rank_file(0)
        saved = torch.load(ckpt.path / name, map_location="cpu", weights_only=False)
        missing = sorted(set(objects) - set(saved["objects"]))
        if missing:
            raise ValueError(f"checkpoint {ckpt.path} has no state for {', '.join(missing)}")
        for n, o in objects.items():
            o.load_state_dict(saved["objects"][n])
        if len(saved["passes"]) == len(self.loaders):
            self._resume_passes = saved["passes"]
        return saved["rng"]


def _broadcast(values: list[Any]) -> list[Any]:
    """Rank 0's ``values`` on every rank (a collective)."""
    dist.broadcast_object_list(values, src=0)
    return values


def _rank_file(rank: int | None = None) -> str:
    return f"state-rank{dist.get_rank() if rank is None else rank}.pt"


class _ShardedState:
    """A model sharded over the ranks (FSDP) and its optimizers, saved and loaded with
    ``torch.distributed.checkpoint``: each rank writes and reads only its own shards."""

    def __init__(self, model_name: str, model: torch.nn.Module, optimizers: dict[str, Any]):
        self.model = model
        self.optimizers = optimizers
        self.names = {model_name, *optimizers}

    def _state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizers = get_state_dict(self.model, list(self.optimizers.values()))
        return {"model": model, "optimizers": optimizers}

    def save(self, directory: Path) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.save(self._state(), checkpoint_id=directory)

    def load(self, directory: Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = self._state()  # the shapes and shards to load into
        dcp.load(state, checkpoint_id=directory)
        set_state_dict(
            self.model,
            list(self.optimizers.values()),
            model_state_dict=state["model"],
            optim_state_dict=state["optimizers"],
        )


def _sharded(objects: Mapping[str, Any]) -> _ShardedState | None:
    """The sharded model among ``objects`` (parameters that are DTensors: FSDP2's
    ``fully_shard``; or an FSDP1 wrapper) with every optimizer given, or None."""
    tensor = sys.modules.get("torch.distributed.tensor")  # loaded by FSDP, else none sharded

    def is_sharded(o: Any) -> bool:
        if type(o).__name__ == "FullyShardedDataParallel":
            return True
        return (
            tensor is not None
            and isinstance(o, torch.nn.Module)
            and any(isinstance(p, tensor.DTensor) for p in o.parameters())
        )

    models = [n for n, o in objects.items() if is_sharded(o)]
    if not models:
        return None
    if len(models) > 1:
        raise ValueError(f"tiresias.State takes one sharded model, not {', '.join(models)}")
    optimizers = {n: o for n, o in objects.items() if isinstance(o, torch.optim.Optimizer)}
    return _ShardedState(models[0], objects[models[0]], optimizers)
