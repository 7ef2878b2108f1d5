"""Role labels: which task of a TF cluster each peer is (``ps0``, ``worker1``, ``chief0``).

A TF job's processes carry the cluster spec in ``TF_CONFIG`` (the Tiresias gang planner writes
it for every process of a PS or all-reduce job, next to ``TIRESIAS_ROLE`` and
``TIRESIAS_TASK_INDEX``). A peer whose address is a task's listening address is that task, so
"bytes to ps0" is what a user reads instead of "bytes to 10.0.0.7:2222".
"""

from __future__ import annotations

import functools
import json
import socket
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ibverbs_tap.profile import ProcessProfile, environ_of

Cluster = Mapping[str, Mapping[int, str]]  # task type -> index -> address (``cluster_of``)
Endpoints = dict[tuple[str, int], str]  # (ip, port) -> role


def parse_tf_config(tf_config: str | Mapping[str, Any]) -> Mapping[str, Any]:
    """A TF_CONFIG given as JSON text, a path to a JSON file, or a mapping."""
    if not isinstance(tf_config, str):
        return tf_config
    text = tf_config
    if not text.lstrip().startswith("{"):
        text = Path(tf_config).read_text()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("cluster", {}), dict):
        raise ValueError("TF_CONFIG must be a JSON object with a 'cluster' object")
    return parsed


def cluster_of(tf_config: str | Mapping[str, Any]) -> dict[str, dict[int, str]]:
    """The cluster spec of a TF_CONFIG: task type -> task index -> address (TF also accepts
    a sparse ``{"worker": {"1": "host:port"}}`` form)."""
    cluster = parse_tf_config(tf_config).get("cluster", {})
    spec: dict[str, dict[int, str]] = {}
    for job, addresses in cluster.items():
        if isinstance(addresses, Mapping):
            tasks = {int(i): a for i, a in addresses.items() if str(i).isdigit()}
        elif isinstance(addresses, list):
            tasks = dict(enumerate(addresses))
        else:
            raise ValueError(f"TF_CONFIG cluster.{job} is neither a list nor an object")
        if not all(isinstance(a, str) for a in tasks.values()):
            raise ValueError(f"TF_CONFIG cluster.{job} has an address that is not a string")
        spec[str(job)] = dict(sorted(tasks.items()))
    return spec


def ps_tasks(tf_config: str | Mapping[str, Any]) -> dict[int, str]:
    """The parameter servers of a TF_CONFIG: task index -> address."""
    ps = cluster_of(tf_config).get("ps")
    if not ps:
        raise ValueError("TF_CONFIG has no cluster.ps addresses")
    return ps


def roles(cluster: Cluster) -> dict[str, str]:
    """role -> address, e.g. {"ps0": "10.0.0.7:2222", "worker1": "10.0.0.8:2223"}."""
    return {f"{job}{i}": a for job, tasks in cluster.items() for i, a in tasks.items()}


@functools.lru_cache(maxsize=1024)
def endpoints(address: str) -> frozenset[tuple[str, int]]:
    """The (ip, port) pairs a ``host:port`` address resolves to."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ValueError(f"cannot resolve {address!r}: {e}") from None
    return frozenset((str(info[4][0]), int(port)) for info in infos)


def role_endpoints(cluster: Cluster, strict: bool = False) -> Endpoints:
    """(ip, port) -> role for every task of ``cluster``. Addresses that do not resolve raise
    ValueError when ``strict``, else are left out (their peers stay unlabelled)."""
    found: Endpoints = {}
    for role, address in roles(cluster).items():
        try:
            found.update(dict.fromkeys(endpoints(address), role))
        except ValueError:
            if strict:
                raise
    return found


def label(profile: ProcessProfile, by_endpoint: Endpoints) -> ProcessProfile:
    """``profile`` with its TCP peers named by role where their address is a task's."""
    peers = tuple(
        replace(p, role=by_endpoint.get((p.host, p.port), p.role)) if p.kind == "tcp" else p
        for p in profile.peers
    )
    return replace(profile, peers=peers)


def own_role(environ: Mapping[str, str]) -> str | None:
    """This process's role: TF_CONFIG's task, else the Tiresias gang's TIRESIAS_ROLE and
    TIRESIAS_TASK_INDEX; None when neither says."""
    try:
        task = parse_tf_config(environ["TF_CONFIG"]).get("task", {})
        if isinstance(task, dict) and "type" in task:
            return f"{task['type']}{task.get('index', 0)}"
    except (KeyError, ValueError, OSError):
        pass
    if "TIRESIAS_ROLE" in environ:
        return f"{environ['TIRESIAS_ROLE']}{environ.get('TIRESIAS_TASK_INDEX', '0')}"
    return None


def tf_config_of(pid: int) -> str | None:
    """TF_CONFIG from a process's environment, if it has one and we may read it."""
    return environ_of(pid).get("TF_CONFIG")


def labelled(profile: ProcessProfile) -> ProcessProfile:
    """``profile`` with its own role and its peers' roles, from its process's environment
    (unlabelled where the environment has no readable, valid TF_CONFIG)."""
    environ = environ_of(profile.pid)
    profile = replace(profile, role=own_role(environ))
    try:
        cluster = cluster_of(environ["TF_CONFIG"])
    except (KeyError, ValueError, OSError, TypeError, AttributeError):
        return profile
    return label(profile, role_endpoints(cluster))
