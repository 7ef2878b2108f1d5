"""Elastic jobs: a job asked with a range of workers runs at the world the coordinator gives
each run, with the training of its largest world (docs/launcher.md, "Elastic jobs").

The job's global batch is defined at its largest world W_max (``TIRESIAS_MAX_WORKERS``): with
per-rank batch b there, a run at world W uses per-rank batch b·W_max/W (the framework adapters
scale it), or W_max/W micro-steps of b with gradients accumulated (PyTorch ``State`` loops:
``tiresias_launch.torch_accumulate``), so each step trains the same samples with the same
gradient up to reduction order.
A world that does not divide W_max, or a script whose batch an adapter cannot scale, runs
rigid: the chief says why once, and the first report says ``resizable: false`` so the
coordinator pins the job's range to the size it runs at. Framework-neutral: the adapters
(``tiresias_launch.torch_resize``) decide whether they can keep the batch.
"""

from __future__ import annotations

from tiresias_launch.env import LaunchEnv
from tiresias_launch.runtime import Runtime


def factor(env: LaunchEnv) -> int | str:
    """How many of the largest world's per-rank batches one rank takes at this world
    (W_max / W), or why the batch cannot be kept at this world."""
    top, world = env.max_workers or env.num_workers, env.num_workers
    if world > top or top % world:
        return f"its world of {world} does not divide its largest world, {top} workers"
    return top // world


def declare(rt: Runtime, rigid_why: str | None) -> None:
    """Say, once per process and for elastic jobs only, whether the job keeps its global batch
    at other world sizes: ``resizable: true``, or the notice (the chief's, in its log and the
    job's history) and ``resizable: false``."""
    if not rt.env.elastic or rt.resizable is not None:
        return
    rt.resizable = rigid_why is None
    if rigid_why is None:
        rt.reporter.note(resizable=True)
        return
    line = f"this job runs rigid, at {rt.env.num_workers} workers: {rigid_why}"
    if rt.env.is_chief:
        rt.say(line)
        rt.reporter.note(notice=line, resizable=False)
    else:
        rt.reporter.note(resizable=False)


def resumed(rt: Runtime, saved_world: int | None, per_rank: str) -> None:
    """The chief's line (log and history) for a resume at another world than the
    checkpoint's, with the batch each rank now takes (``per_rank``)."""
    env = rt.env
    if not rt.resizable or saved_world in (None, env.num_workers) or not env.is_chief:
        return
    line = (
        f"resumed on {env.num_workers} of {env.max_workers} workers (the checkpoint's run "
        f"had {saved_world}): {per_rank}, the same global batch and sample order"
    )
    rt.say(line)
    rt.reporter.note(notice=line)
