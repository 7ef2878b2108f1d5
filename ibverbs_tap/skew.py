"""Skew S_J (Tiresias §3.3.1): the share of a job's aggregation bytes carried by its busiest
parameter server. High skew means one PS is the bottleneck, so spreading the job over machines
hurts it more; the placement compares S_J with PACKLIMIT."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ibverbs_tap.profile import ProcessProfile
from ibverbs_tap.roles import label, ps_tasks, role_endpoints, roles

ASSIGNMENTS = ("round-robin", "greedy")


def skew(bytes_per_ps: Mapping[Any, float] | Sequence[float]) -> float:
    """max / sum of the bytes each parameter server carried."""
    values = list(bytes_per_ps.values() if isinstance(bytes_per_ps, Mapping) else bytes_per_ps)
    if not values:
        raise ValueError("skew needs the bytes of at least one parameter server")
    if any(v < 0 for v in values):
        raise ValueError(f"negative byte counts: {values}")
    total = sum(values)
    if total <= 0:
        raise ValueError("no aggregation traffic: every parameter server carried 0 bytes")
    return max(values) / total


def assign_tensors(sizes: Sequence[int], num_ps: int, assignment: str = "round-robin") -> list[int]:
    """Bytes each PS holds when TF places tensors in creation order: ``round-robin``
    (replica_device_setter's default, ParameterServerStrategy's variable placement) or
    ``greedy`` (GreedyLoadBalancingStrategy: the least-loaded PS, lowest index on ties)."""
    if num_ps < 1:
        raise ValueError(f"num_ps must be at least 1, not {num_ps}")
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"unknown assignment {assignment!r}; use one of {ASSIGNMENTS}")
    loads = [0] * num_ps
    for i, size in enumerate(sizes):
        if size < 0:
            raise ValueError(f"tensor {i} has negative size {size}")
        ps = i % num_ps if assignment == "round-robin" else loads.index(min(loads))
        loads[ps] += size
    return loads


def skew_from_tensor_sizes(
    sizes: Sequence[int], num_ps: int, assignment: str = "round-robin"
) -> float:
    """S_J predicted from the model's tensor sizes (bytes), in creation order: every tensor
    is pulled and its gradient pushed once per step, so PS traffic is proportional to the bytes
    each PS holds."""
    return skew(assign_tensors(sizes, num_ps, assignment))


def largest_class_share(sizes: Iterable[int]) -> float:
    """Skew of an all-reduce job: the share of bytes in its largest log2 message-size class."""
    by_class: dict[int, int] = {}
    for s in sizes:
        if s > 0:
            by_class[s.bit_length() - 1] = by_class.get(s.bit_length() - 1, 0) + s
    if not by_class:
        raise ValueError("no tensors with bytes")
    return by_class[max(by_class)] / sum(by_class.values())


def ps_addresses_from_tf_config(tf_config: str | Mapping[str, Any]) -> list[str]:
    """The ``ps`` task addresses of a TF_CONFIG given as JSON text, a path, or a mapping."""
    return list(ps_tasks(tf_config).values())


def bytes_per_role(profiles: Iterable[ProcessProfile], ps_roles: Iterable[str]) -> dict[str, int]:
    """Bytes (both directions) the labelled ``profiles`` exchanged with each PS role, counted
    on the client side: connections whose peer is the PS's listening address."""
    totals = dict.fromkeys(ps_roles, 0)
    for prof in profiles:
        for peer in prof.peers:
            if peer.role in totals:
                totals[peer.role] += peer.total_bytes
    return totals


def bytes_per_ps(profiles: Iterable[ProcessProfile], ps_addresses: Sequence[str]) -> dict[str, int]:
    """Bytes (both directions) the given processes exchanged with each parameter server,
    counted on the client side: connections whose peer is the PS's listening address."""
    cluster = {"ps": dict(enumerate(ps_addresses))}
    by_endpoint = role_endpoints(cluster, strict=True)
    per_role = bytes_per_role((label(p, by_endpoint) for p in profiles), roles(cluster))
    return {address: per_role[role] for role, address in roles(cluster).items()}
