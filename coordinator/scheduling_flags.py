"""The scheduling flags of every program that runs the core: ``tiresias-coordinator``,
``tiresias-run`` (its embedded coordinator) and ``tiresias-sim``, declared once, each by the
name of the ``Settings`` field it sets."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, MutableMapping
from typing import Any

import click

from coordinator.core.authors_rules import RULES
from coordinator.core.config import QUEUE_ORDERS, thresholds_text
from coordinator.core.gittins import GITTINS_VARIANTS, SERVICE_FEATURES, service_features
from coordinator.core.placement import DEFAULT_PACKLIMIT, PLACEMENT_NAMES
from coordinator.core.policies import POLICY_NAMES
from coordinator.core.settings import Settings
from tiresias_cli.kit import option
from tiresias_cli.values import FACTOR, FLOATS, FRACTION, SECONDS, Checked

#: The options the simulator measured (docs/simulator.md), the same in all three programs.
MEASURED = (
    "queue_order",
    "min_run",
    "min_run_restores",
    "cheap_victims",
    "learn_thresholds",
    "service_groups",
    "elastic_payback",
)
#: What the flag ``--gittins-fixed`` is the opposite of.
_FIXED = "gittins_fixed"
_SETTINGS = {f.name for f in dataclasses.fields(Settings)}


def _flags(mode: str) -> dict[str, tuple[tuple[str, ...], dict[str, Any]]]:
    """Settings field → the names and click arguments of its flag; ``mode`` starts each help
    ("embedded mode: " in ``tiresias-run``)."""
    return {
        "policy": (
            ("--policy",),
            dict(
                type=click.Choice(POLICY_NAMES),
                default=Settings.policy,
                metavar="NAME",
                help=f"{mode}scheduling policy: {', '.join(POLICY_NAMES)}; tiresias-l is "
                "2D-LAS, tiresias-g 2D-Gittins, yarn-cs FIFO",
            ),
        ),
        "placement": (
            ("--placement",),
            dict(
                type=click.Choice(PLACEMENT_NAMES),
                default=Settings.placement,
                metavar="NAME",
                show_default="the policy's own, skew for tiresias-l/-g, yarn for "
                "yarn-cs/best-effort, else consolidate",
                help=f"{mode}placement: {', '.join(PLACEMENT_NAMES)}",
            ),
        ),
        "queue_thresholds": (
            ("--thresholds", "queue_thresholds"),
            dict(
                type=FLOATS,
                default=list(Settings.queue_thresholds),
                show_default=thresholds_text(Settings.queue_thresholds),
                help=f"{mode}queue thresholds on attained GPU-seconds, comma-separated (K-1 "
                "values for K queues)",
            ),
        ),
        "promote_knob": (
            ("--promote-knob",),
            dict(
                type=float,
                default=Settings.promote_knob,
                metavar="X",
                show_default="inf = off",
                help=f"{mode}PROMOTEKNOB for starvation",
            ),
        ),
        "packlimit": (
            ("--packlimit",),
            dict(
                type=FRACTION,
                default=Settings.packlimit,
                show_default=f"{DEFAULT_PACKLIMIT:g}",
                help=f"{mode}initial PACKLIMIT of the skew placement; learned from finished "
                "jobs after that",
            ),
        ),
        "interval": (
            ("--interval",),
            dict(
                type=SECONDS,
                default=Settings.interval,
                show_default="only on events and policy wakeups",
                help=f"{mode}also re-evaluate priorities every N seconds; las and tiresias-g "
                "then rank running jobs by their service at the last tick, so jobs of close "
                "priority swap at most once per tick",
            ),
        ),
        "queue_order": (
            ("--queue-order",),
            dict(
                type=click.Choice(QUEUE_ORDERS),
                default=Settings.queue_order,
                metavar="|".join(QUEUE_ORDERS),
                help=f"{mode}order inside a tiresias queue: running jobs ahead of waiting ones, "
                "or FIFO by first start (a preempted job may evict a later-started one)",
            ),
        ),
        "min_run": (
            ("--min-run",),
            dict(
                type=SECONDS,
                default=Settings.min_run,
                metavar="S",
                show_default=f"{Settings.min_run:g}: off",
                help=f"{mode}a started job runs at least S seconds before it may be preempted",
            ),
        ),
        "min_run_restores": (
            ("--min-run-restores",),
            dict(
                type=FACTOR,
                default=Settings.min_run_restores,
                show_default=f"{Settings.min_run_restores:g}: off",
                help=f"{mode}… and at least X times its restore cost: start-up, restore and "
                "first step as the job's runtime measured them (in the simulator: "
                "--preempt-cost)",
            ),
        ),
        "elastic_payback": (
            ("--elastic-payback",),
            dict(
                type=FACTOR,
                default=Settings.elastic_payback,
                help=f"{mode}an elastic job below its ask grows only once it has run X times "
                "its checkpoint and restore cost (its runtime's measurements; in the "
                "simulator: --preempt-cost)",
            ),
        ),
        "cheap_victims": (
            ("--cheap-victims/--no-cheap-victims",),
            dict(
                default=Settings.cheap_victims,
                help=f"{mode}preempt the running jobs of a queue that are cheapest to stop and "
                "restart first (checkpoint + restore seconds, as measured; in the simulator: "
                "--preempt-cost)",
            ),
        ),
        "learn_thresholds": (
            ("--learn-thresholds/--no-learn-thresholds",),
            dict(
                default=Settings.learn_thresholds,
                help=f"{mode}tiresias-l/-g: learn the queue thresholds from completed jobs' GPU "
                "service (Gittins-derived, re-learned online; --thresholds is where they start)",
            ),
        ),
        "service_groups": (
            ("--service-groups",),
            dict(
                type=Checked(service_features, "F,…"),
                default=Settings.service_groups,
                show_default="none: FIFO",
                help=f"{mode}tiresias-l/-g: rank a queue's waiting jobs by the Gittins index of "
                "what completed jobs of their group needed; group by "
                f"{', '.join(SERVICE_FEATURES)}",
            ),
        ),
        "gittins_variant": (
            ("--gittins-variant",),
            dict(
                type=click.Choice(GITTINS_VARIANTS),
                default=Settings.gittins_variant,
                metavar="|".join(GITTINS_VARIANTS),
                show_default=GITTINS_VARIANTS[0],
                help=f"{mode}tiresias-g: Gittins index as the paper writes it or as the "
                "authors' simulator computes it",
            ),
        ),
        "rules": (
            ("--rules",),
            dict(
                type=click.Choice(RULES),
                default=Settings.rules,
                metavar="|".join(RULES),
                help=f"{mode}tiresias-l/-g: our queue rules, or those of the authors' "
                "simulator (their dlas-gpu and dlas-gpu-gittins: list order, demotion at "
                "events, Gittins re-sort of every queue; docs/simulator.md), or theirs with "
                "one rule ours",
            ),
        ),
        "gittins_learn": (
            ("--gittins-fixed", _FIXED),
            dict(
                is_flag=True,
                help=f"{mode}tiresias-g: keep the distribution as seeded by --gittins-samples, "
                "not learning from completed jobs "
                "(default: it learns)",
            ),
        ),
    }


def scheduling_options(
    *fields: str, mode: str = "", section: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The flags of the ``Settings`` ``fields``, in that order, with the core's defaults
    (``mode``: see :func:`_flags`)."""
    flags = _flags(mode)
    decorators = [option(*flags[f][0], section=section, **flags[f][1]) for f in fields]

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return decorate


def scheduling_settings(flags: MutableMapping[str, Any]) -> Settings:
    """The ``Settings`` the flags of :func:`scheduling_options` say, taken out of ``flags``
    (a command's parameters); CoreError for a bad combination."""
    given = {name: flags.pop(name) for name in list(flags) if name in _SETTINGS}
    if _FIXED in flags:
        given["gittins_learn"] = not flags.pop(_FIXED)
    return Settings(**given)
