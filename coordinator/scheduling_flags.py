"""The scheduling flags of every program that runs the core: ``tiresias-coordinator``,
``tiresias-run`` (its embedded coordinator) and ``tiresias-sim``, declared once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click

from coordinator.argtypes import FACTOR, FEATURES, SECONDS
from coordinator.clikit import option
from coordinator.core.config import QUEUE_ORDERS
from coordinator.core.gittins import SERVICE_FEATURES
from coordinator.core.settings import Settings

#: The ``Settings`` (and ``Options``, ``SimOptions``) fields :func:`scheduling_options` sets.
SCHEDULING = (
    "queue_order",
    "min_run",
    "min_run_restores",
    "cheap_victims",
    "learn_thresholds",
    "service_groups",
)


def scheduling_options(
    mode: str = "", section: str | None = None
) -> Callable[[Callable], Callable]:
    """The scheduling options the simulator measured (docs/simulator.md), the same in
    ``tiresias-sim``, ``tiresias-coordinator`` and ``tiresias-run`` (which adds them with
    ``mode`` "embedded mode: "), with the core's defaults."""
    decorators = [
        option(
            "--queue-order",
            section=section,
            type=click.Choice(QUEUE_ORDERS),
            default=Settings.queue_order,
            metavar="|".join(QUEUE_ORDERS),
            help=f"{mode}order inside a tiresias queue: running jobs ahead of waiting ones, or "
            "FIFO by first start (a preempted job may evict a later-started one)",
        ),
        option(
            "--min-run",
            section=section,
            type=SECONDS,
            default=Settings.min_run,
            metavar="S",
            show_default=f"{Settings.min_run:g}: off",
            help=f"{mode}a started job runs at least S seconds before it may be preempted",
        ),
        option(
            "--min-run-restores",
            section=section,
            type=FACTOR,
            default=Settings.min_run_restores,
            show_default=f"{Settings.min_run_restores:g}: off",
            help=f"{mode}… and at least X times its restore cost: start-up, restore and first "
            "step as the job's runtime measured them (in the simulator: --preempt-cost)",
        ),
        option(
            "--cheap-victims/--no-cheap-victims",
            section=section,
            default=Settings.cheap_victims,
            help=f"{mode}preempt the running jobs of a queue that are cheapest to stop and "
            "restart first (checkpoint + restore seconds, as measured; in the simulator: "
            "--preempt-cost)",
        ),
        option(
            "--learn-thresholds/--no-learn-thresholds",
            section=section,
            default=Settings.learn_thresholds,
            help=f"{mode}tiresias-l/-g: learn the queue thresholds from completed jobs' GPU "
            "service (Gittins-derived, re-learned online; --thresholds is where they start)",
        ),
        option(
            "--service-groups",
            section=section,
            type=FEATURES,
            default=Settings.service_groups,
            show_default="none: FIFO",
            help=f"{mode}tiresias-l/-g: rank a queue's waiting jobs by the Gittins index of "
            f"what completed jobs of their group needed; group by {', '.join(SERVICE_FEATURES)}",
        ),
    ]

    def decorate(f: Callable) -> Callable:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return decorate


def scheduling_fields(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the flags :func:`scheduling_options` added set."""
    return {name: flags[name] for name in SCHEDULING}
