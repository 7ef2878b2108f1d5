"""Simulated clusters: ``NxG`` shapes and JSON node lists, bounded (``tiresias-sim
--cluster/--cluster-file``, sweeps, the benchmarks and the paper reproductions)."""

from __future__ import annotations

import json
from pathlib import Path

from coordinator.core.model import Node

#: Largest simulated cluster: far above any real one, and within memory.
MAX_MACHINES = 100_000
MAX_GPUS_PER_MACHINE = 1024


def cluster_from_shape(shape: str) -> list[Node]:
    """``NxG``: N machines with G GPUs each, named n000, n001, …"""
    try:
        machines, gpus = (int(x) for x in shape.lower().split("x"))
    except ValueError:
        raise ValueError(f"--cluster {shape!r}: expected MACHINESxGPUS, e.g. 16x4") from None
    if machines < 1 or gpus < 1:
        raise ValueError(f"--cluster {shape!r}: need at least one machine and one GPU")
    if machines > MAX_MACHINES or gpus > MAX_GPUS_PER_MACHINE:
        raise ValueError(
            f"--cluster {shape!r}: at most {MAX_MACHINES} machines of at most "
            f"{MAX_GPUS_PER_MACHINE} GPUs"
        )
    return [Node(f"n{i:03d}", tuple(range(gpus))) for i in range(machines)]


def cluster_from_file(path: Path) -> list[Node]:
    """JSON ``{"nodes": [{"name": "a", "gpus": 4 | [0, 1, …], "switch": "s0"}, …]}``."""
    try:
        doc = json.loads(path.read_text())
        nodes = []
        if len(doc["nodes"]) > MAX_MACHINES:
            raise ValueError(f"at most {MAX_MACHINES} nodes")
        for i, n in enumerate(doc["nodes"]):
            gpus = n["gpus"]
            if isinstance(gpus, int) and not 0 < gpus <= MAX_GPUS_PER_MACHINE:
                raise ValueError(f"node {i}: 1 to {MAX_GPUS_PER_MACHINE} GPUs")
            indices = tuple(range(gpus)) if isinstance(gpus, int) else tuple(int(g) for g in gpus)
            nodes.append(Node(str(n.get("name", f"n{i:03d}")), indices, n.get("switch")))
    except OSError as e:
        raise ValueError(f"--cluster-file {path}: {e.strerror}") from None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise ValueError(
            f'--cluster-file {path}: expected {{"nodes": [{{"name": …, "gpus": N}}, …]}} ({e})'
        ) from None
    if not nodes or any(not n.gpus for n in nodes):
        raise ValueError(f"--cluster-file {path}: every node needs at least one GPU")
    return nodes
