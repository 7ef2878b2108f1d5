"""The profiler stage (paper §3.3.1): S_J of a job, for the ``skew`` placement.

Two sources, both optional:
- the runtime's report: ``tensor_bytes`` (the model's tensor sizes in creation order) and the
  job's number of parameter servers: S_J as TF's round-robin assignment would spread them
  (for all-reduce jobs, ``num_ps`` 0: the share of the largest message class);
- the tap: profiles of the job's processes (pids on this machine, run under ``ibverbs-tap``)
  and its PS addresses: S_J as measured on the wire.

Measured traffic wins when there is any; ``None`` means "unknown yet" (the placement then
consolidates). API (stable; see docs/profiler.md):

    skew_from_report(tensor_bytes, num_ps) -> float | None
    skew_from_pids(pids, ps_addresses) -> float | None
    job_skew(tensor_bytes=None, num_ps=0, pids=(), ps_addresses=()) -> float | None
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import ibverbs_tap


def skew_from_report(tensor_bytes: Sequence[int] | None, num_ps: int) -> float | None:
    """S_J from the model's tensor sizes; None when there are none (or all are empty)."""
    if not tensor_bytes or sum(tensor_bytes) <= 0:
        return None
    if num_ps < 0:
        raise ValueError(f"num_ps must be >= 0, not {num_ps}")
    if num_ps == 0:
        return ibverbs_tap.largest_class_share(tensor_bytes)
    return ibverbs_tap.skew_from_tensor_sizes(tensor_bytes, num_ps)


def skew_from_pids(pids: Iterable[int], ps_addresses: Sequence[str]) -> float | None:
    """S_J from the tap profiles of ``pids``; processes that are gone or untraced are
    skipped, and None means no PS traffic was seen."""
    if not ps_addresses:
        return None
    profiles = []
    for pid in pids:
        try:
            profiles.append(ibverbs_tap.read_process(pid))
        except ibverbs_tap.TapError:
            continue
    totals = ibverbs_tap.bytes_per_ps(profiles, ps_addresses)
    return ibverbs_tap.skew(totals) if sum(totals.values()) > 0 else None


def job_skew(
    tensor_bytes: Sequence[int] | None = None,
    num_ps: int = 0,
    pids: Iterable[int] = (),
    ps_addresses: Sequence[str] = (),
) -> float | None:
    """S_J of a job: measured when the tap saw PS traffic, else from the report, else None."""
    measured = skew_from_pids(pids, ps_addresses)
    return measured if measured is not None else skew_from_report(tensor_bytes, num_ps)
