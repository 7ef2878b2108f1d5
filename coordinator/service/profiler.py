"""The profiler stage (paper §3.3.1): S_J of a job, for the ``skew`` placement.

Three sources, best first:
- the runtime's own ``skew`` (TensorFlow knows where each variable lives; a script may call
  ``tiresias.report(skew=…)``);
- the runtime's ``tensor_bytes`` (the model's tensor sizes in creation order) and the job's
  number of parameter servers: S_J as TF's round-robin assignment would spread them (for
  all-reduce jobs, ``num_ps`` 0: the share of the largest message class);
- measured traffic: the node agents run a PS job's processes under ``ibverbs-tap`` and report
  the bytes each process exchanged with each PS (``traffic_of``); S_J is the busiest PS's
  share of those bytes, summed over the job's nodes.

A worse source never overrides a better one the job already gave; ``None`` means "unknown
yet" (the placement then consolidates). API (stable; see docs/profiler.md):

    skew_from_report(tensor_bytes, num_ps) -> float | None
    traffic_of(pids, ps_addresses) -> {address: bytes}
    SkewStage()(report, num_ps, known) -> (S_J, source) | None   # the coordinator's stage
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ibverbs_tap
import ibverbs_tap.profile
from tiresias_launch import contract

#: Sources of S_J, worst first (the order in which they may override each other).
MEASURED, TENSORS, REPORTED = "measured", "tensors", "reported"
SOURCES = (MEASURED, TENSORS, REPORTED)
#: A source in words, as ``tiresias status`` says where a job's S_J came from.
SOURCE_WORDS = {
    MEASURED: "measured by ibverbs-tap",
    TENSORS: "from the model's tensor sizes",
    REPORTED: "reported by the job's runtime",
    "submitted": "given at submit",
}


def skew_from_report(tensor_bytes: Sequence[int] | None, num_ps: int) -> float | None:
    """S_J from the model's tensor sizes; None when there are none (or all are empty)."""
    if not tensor_bytes or sum(tensor_bytes) <= 0:
        return None
    if num_ps < 0:
        raise ValueError(f"num_ps must be >= 0, not {num_ps}")
    if num_ps == 0:
        return ibverbs_tap.largest_class_share(tensor_bytes)
    return ibverbs_tap.skew_from_tensor_sizes(tensor_bytes, num_ps)


def traffic_of(
    pids: Iterable[int], ps_addresses: Sequence[str], directory: str | None = None
) -> dict[str, int]:
    """Bytes the traced processes ``pids`` exchanged with each PS address (client side);
    processes that are gone or untraced are skipped, and addresses that do not resolve give
    no traffic (empty). ``directory``: where the profiles are (default: each process's
    IBVERBS_TAP_DIR, else /dev/shm)."""
    profiles = []
    for pid in pids:
        try:
            profiles.append(ibverbs_tap.read_process(pid, directory))
        except ibverbs_tap.TapError:
            continue
    if not profiles or not ps_addresses:
        return {}
    try:
        return ibverbs_tap.bytes_per_ps(profiles, ps_addresses)
    except ValueError:  # an address that does not resolve (here): nothing measurable
        return {}


@dataclass
class _Job:
    source: int = -1  # the best source seen so far (its index in SOURCES)
    #: node → (restart, bytes per PS address) as its agent last measured them
    traffic: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)

    def measured(self, node: str, restart: int, per_ps: Mapping[str, int]) -> float | None:
        self.traffic[node] = (restart, dict(per_ps))
        newest = max(r for r, _ in self.traffic.values())
        totals: dict[str, int] = {}
        for r, counts in self.traffic.values():
            if r == newest:  # a node of an older run measured another gang
                for address, n in counts.items():
                    totals[address] = totals.get(address, 0) + n
        return ibverbs_tap.skew(totals) if sum(totals.values()) > 0 else None


class SkewStage:
    """The live coordinator's skew stage: ``stage(report, num_ps, known)`` is the job's new
    (S_J, source), or None when this report changes nothing. Reports from a job's runtime
    carry ``skew`` or ``tensor_bytes``; the node agents' carry ``node`` and ``ps_bytes``.
    ``known`` is the source the job record already holds, so that after a coordinator restart
    a worse source still cannot override a better one."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}

    def __call__(
        self, msg: Mapping[str, Any], num_ps: int, known: str | None = None
    ) -> tuple[float, str] | None:
        if msg.get("skew") is None and not msg.get("tensor_bytes") and not msg.get("ps_bytes"):
            return None  # most reports: progress only
        job = self._jobs.setdefault(msg["job_id"], _Job())
        if known in SOURCES:
            job.source = max(job.source, SOURCES.index(known))
        found: list[tuple[str, float | None]] = [
            (REPORTED, None if msg.get("skew") is None else float(msg["skew"])),
            (TENSORS, skew_from_report(msg.get("tensor_bytes"), num_ps)),
        ]
        if msg.get("ps_bytes") and msg.get("node"):
            restart = msg.get("restart") or 0
            found.append((MEASURED, job.measured(msg["node"], restart, msg["ps_bytes"])))
        for source, value in found:  # best first
            rank = SOURCES.index(source)
            if value is not None and rank >= job.source:
                job.source = rank
                return value, source
        return None

    def forget(self, job_id: str) -> None:
        """Drop what is kept of a finished job."""
        self._jobs.pop(job_id, None)

    def __contains__(self, job_id: str) -> bool:
        """Whether anything of ``job_id`` is kept."""
        return job_id in self._jobs


# --- the node agent's half: run a PS job under the tap, measure it ---------------------------
#: Seconds between two traffic measurements of a running PS job on a node.
MEASURE_SECONDS = 2.0


@dataclass
class Tapped:
    """One node's part of a PS job, run under the tap: whom it talks to, what was sent."""

    ps_addresses: list[str]
    token: str
    library: str
    directory: str
    sent: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, processes: Sequence[Mapping[str, Any]]) -> Tapped | None:
        """For a launch's processes: None unless it is a PS job and the tap is built here."""
        env = processes[0]["env"] if processes else {}
        if env.get(contract.MODE) != "ps" or not os.path.isdir(ibverbs_tap.profile.DEFAULT_DIR):
            return None
        try:
            library = ibverbs_tap.library_path()
            ps = ibverbs_tap.ps_addresses_from_tf_config(env.get("TF_CONFIG", ""))
        except (ibverbs_tap.TapError, ValueError, OSError):
            return None
        token = env.get(contract.JOB_TOKEN, "")
        return cls(ps, token, library, ibverbs_tap.profile.DEFAULT_DIR)

    def environ(self, env: Mapping[str, str]) -> dict[str, str]:
        """A process's environment with the tap preloaded."""
        preload = " ".join(p for p in (self.library, env.get("LD_PRELOAD", "")) if p)
        return {**env, "LD_PRELOAD": preload, ibverbs_tap.profile.DIR_ENV: self.directory}

    def measure(self, pids: Iterable[int]) -> dict[str, int] | None:
        """Bytes per PS now, when they grew since the last measure (else None)."""
        per_ps = traffic_of(pids, self.ps_addresses, self.directory)
        if not sum(per_ps.values()) or per_ps == self.sent:
            return None
        self.sent = per_ps
        return per_ps

    def clean(self, pids: Iterable[int]) -> None:
        """Remove the profiles of processes that died without removing their own."""
        for pid in pids:
            path = Path(self.directory, f"{ibverbs_tap.profile.FILE_PREFIX}{pid}")
            with contextlib.suppress(OSError):
                path.unlink()
