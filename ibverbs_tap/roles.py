"""Role labels: which task of a TF cluster each peer is (``ps0``, ``worker1``, ``chief0``).

A TF job's processes carry the cluster spec in ``TF_CONFIG`` (the Tiresias gang planner writes
it for every process of a PS or all-reduce job, next to ``TIRESIAS_ROLE`` and
``TIRESIAS_TASK_INDEX``). A peer whose address is a task's listening address is that task, so
"bytes to ps0" is what a user reads instead of "bytes to 10.0.0.7:2222". A connection a
process accepted from this machine is named by the role of the process at its other end.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import os
import socket
import sys
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ibverbs_tap.profile import FILE_PREFIX, ProcessProfile
from ibverbs_tap.reading import environ_of
from tiresias_launch import contract as C

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


def resolve(addresses: Mapping[str, str], strict: bool = False) -> Endpoints:
    """(ip, port) -> role, from role -> ``host:port``. Addresses that do not resolve raise
    ValueError when ``strict``, else are left out (their peers stay unlabelled)."""
    found: Endpoints = {}
    for role, address in addresses.items():
        try:
            found.update(dict.fromkeys(endpoints(address), role))
        except ValueError:
            if strict:
                raise
    return found


def role_endpoints(cluster: Cluster, strict: bool = False) -> Endpoints:
    """(ip, port) -> role for every task of ``cluster``."""
    return resolve(roles(cluster), strict)


def label(profile: ProcessProfile, by_endpoint: Endpoints) -> ProcessProfile:
    """``profile`` with its TCP peers named by role where their address is a task's."""
    peers = tuple(
        replace(p, role=by_endpoint.get(p.endpoint, p.role)) if p.endpoint else p
        for p in profile.peers
    )
    return replace(profile, peers=peers)


def environ_tf_config(environ: Mapping[str, str]) -> Mapping[str, Any] | None:
    """The TF_CONFIG of an environment (JSON text only, as TF reads it); None if unset.
    Raises ValueError when it is not a valid TF_CONFIG."""
    text = environ.get("TF_CONFIG")
    if text is None:
        return None
    if not text.lstrip().startswith("{"):
        raise ValueError("TF_CONFIG is not a JSON object")
    return parse_tf_config(text)


def own_role(environ: Mapping[str, str]) -> str | None:
    """This process's role: TF_CONFIG's task, else the Tiresias gang's TIRESIAS_ROLE and
    TIRESIAS_TASK_INDEX; None when neither says. A gang's all-reduce rank 0 (TF_CONFIG's
    worker 0 in a cluster without a chief) is ``chief0``, as the gang's logs name it."""
    with contextlib.suppress(ValueError):
        task = (environ_tf_config(environ) or {}).get("task", {})
        if isinstance(task, dict) and "type" in task:
            role = f"{task['type']}{task.get('index', 0)}"
            return "chief0" if role == "worker0" and environ.get(C.ROLE) == "chief" else role
    if C.ROLE in environ:
        return f"{environ[C.ROLE]}{environ.get(C.TASK_INDEX, '0')}"
    return None


def gang_ps(pids: Iterable[int]) -> dict[int, str] | None:
    """The parameter servers (index -> address) in the TF_CONFIG these processes started
    with; None if none has one. Raises ValueError for a bad TF_CONFIG, one without PS, or
    processes that name different PS."""
    found: dict[int, str] | None = None
    for pid in pids:
        try:
            config = environ_tf_config(environ_of(pid))
            ps = ps_tasks(config) if config is not None else None
        except ValueError as e:
            raise ValueError(f"process {pid} started with a bad TF_CONFIG: {e}") from None
        if ps is not None and found is not None and ps != found:
            raise ValueError(
                "the traced processes name different parameter servers in TF_CONFIG; "
                "give --ps-addresses HOST:PORT…"
            )
        found = found or ps
    return found


def gang_addresses(environ: Mapping[str, str]) -> dict[str, str]:
    """role -> address for the tasks in a process's TF_CONFIG, the Tiresias coordinator it
    reports to (``TIRESIAS_COORDINATOR``) and a Horovod job's Gloo rendezvous; empty where
    the environment names none."""
    found: dict[str, str] = {}
    coordinator = environ.get(C.COORDINATOR, "")
    if coordinator.startswith("tcp://"):
        found["coordinator"] = coordinator[len("tcp://") :]
    if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in environ and "HOROVOD_GLOO_RENDEZVOUS_PORT" in environ:
        host = environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"]
        found["rendezvous"] = f"{host}:{environ['HOROVOD_GLOO_RENDEZVOUS_PORT']}"
    with contextlib.suppress(ValueError):
        cluster = cluster_of(environ_tf_config(environ) or {})
        tasks = roles(cluster)
        if C.ROLE in environ and "chief" not in cluster and "worker0" in tasks:
            tasks["chief0"] = tasks.pop("worker0")  # the gang's chief: an all-reduce rank 0
        found.update(tasks)
    return found


#: What makes processes one Tiresias job on a machine (``job_pids``).
JOB_VARIABLES = (C.JOB_ID, C.COORDINATOR)


def job_pids(pid: int) -> list[int]:
    """``pid`` and every other process on this machine (that we may read) of its Tiresias
    job: the same TIRESIAS_JOB_ID and TIRESIAS_COORDINATOR. Raises ValueError when ``pid``
    has no TIRESIAS_JOB_ID."""
    environ = environ_of(pid)
    if C.JOB_ID not in environ:
        raise ValueError(f"process {pid} has no TIRESIAS_JOB_ID: it is not a Tiresias job process")
    job = [environ.get(v) for v in JOB_VARIABLES]
    others = sorted(
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit()
        and int(entry.name) != pid
        and [environ_of(int(entry.name)).get(v) for v in JOB_VARIABLES] == job
    )
    return [pid, *others]


def _hex_endpoint(text: str) -> tuple[str, int]:
    """/proc/net/tcp's ``0100007F:1F90`` (address in host byte order, 32-bit words)."""
    address, port = text.split(":")
    raw = b"".join(
        int(address[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(address), 8)
    )
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


#: Reads of the TCP tables before a wanted socket counts as gone (``socket_owners``).
TABLE_READS = 3


def _tcp_sockets() -> dict[str, tuple[str, int]]:
    """inode -> (ip, port) of the TCP sockets in /proc/net/tcp and tcp6 (one read each)."""
    by_inode: dict[str, tuple[str, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[9] != "0":  # 0: no process holds it (TIME_WAIT, orphaned)
                by_inode[fields[9]] = _hex_endpoint(fields[1])
    return by_inode


def socket_owners(wanted: Iterable[tuple[str, int]] = ()) -> dict[tuple[str, int], int]:
    """(ip, port) of every TCP socket in this network namespace -> a pid holding it (only
    processes whose fds we may read). The tables are no snapshot: the kernel resumes each
    read at an offset in a hash bucket, so a socket that stays open is skipped when another
    one before it closes meanwhile (busy machines close many). A ``wanted`` endpoint that
    is missing is looked for again, up to ``TABLE_READS`` reads."""
    missing = set(wanted)
    by_inode: dict[str, tuple[str, int]] = {}
    for _ in range(TABLE_READS):
        by_inode |= _tcp_sockets()
        missing -= set(by_inode.values())
        if not missing:
            break
    owners: dict[tuple[str, int], int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:  # closed meanwhile (or the fd that lists the directory)
                continue
            if link.startswith("socket:[") and link[8:-1] in by_inode:
                owners[by_inode[link[8:-1]]] = int(proc.name)
    return owners


def labelled(
    profile: ProcessProfile,
    owners: Mapping[tuple[str, int], int] | None = None,
    gang: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ProcessProfile:
    """``profile`` with its own role and its peers' roles, from its process's environment
    (``environ``, or read from /proc): peers at a task's (or the coordinator's) address by
    that task, also at the addresses of ``gang`` (role -> address, e.g. its gang's
    ``gang_addresses``); with ``owners`` (``socket_owners()``), peers that connected to it
    from this machine by the role of the process that holds the other end."""
    environ = environ_of(profile.pid) if environ is None else environ
    by_endpoint = resolve({**(gang or {}), **gang_addresses(environ)})
    profile = label(replace(profile, role=own_role(environ)), by_endpoint)
    if owners is None:
        return profile
    peers = tuple(
        replace(p, role=own_role(environ_of(owners[p.endpoint])))
        if p.endpoint and p.role is None and p.endpoint in owners
        else p
        for p in profile.peers
    )
    return replace(profile, peers=peers)


#: What ``labelled`` reads from a process's environment.
ROLE_VARIABLES = (
    "TF_CONFIG",
    C.ROLE,
    C.TASK_INDEX,
    C.COORDINATOR,
    "HOROVOD_GLOO_RENDEZVOUS_ADDR",
    "HOROVOD_GLOO_RENDEZVOUS_PORT",
)


#: ``RoleLog``'s notes in the directory of ``ibverbs-tap run``: pid -> role variables.
NOTES = "roles.json"


class RoleLog:
    """The role variables of every process that writes a profile into ``directory``, read
    while it runs (``poll``): ``ibverbs-tap run --out`` writes its dump after they have
    exited, when /proc no longer has their environments. ``command_pid`` started with
    ``command_environ`` (known without reading /proc, so however short it lived)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        command_pid: int,
        command_environ: Mapping[str, str],
    ) -> None:
        self.directory = Path(directory)
        self.environs: dict[int, dict[str, str]] = {command_pid: _role_variables(command_environ)}

    def poll(self) -> None:
        """Note the processes that started since the last poll; what is noted is also in
        ``NOTES`` in the directory (to look at while the command runs)."""
        noted = len(self.environs)
        for path in self.directory.glob(f"{FILE_PREFIX}*"):
            pid = path.name.removeprefix(FILE_PREFIX)
            if pid.isdigit() and int(pid) not in self.environs:
                environ = environ_of(int(pid))
                if environ:  # else gone already (or not ours to read): left unlabelled
                    self.environs[int(pid)] = _role_variables(environ)
        if len(self.environs) > noted:
            notes = self.directory / f".{NOTES}"
            notes.write_text(json.dumps({str(k): v for k, v in self.environs.items()}))
            notes.replace(self.directory / NOTES)

    def label(self, profiles: Iterable[ProcessProfile]) -> list[ProcessProfile]:
        """``profiles`` named by role as ``labelled`` names live ones: each process by its
        own environment, every peer at an address any of them names (the whole gang's)."""
        gang: dict[str, str] = {}
        for environ in self.environs.values():
            gang.update(gang_addresses(environ))
        return [labelled(p, None, gang, self.environs.get(p.pid, {})) for p in profiles]


def _role_variables(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: environ[k] for k in ROLE_VARIABLES if k in environ}


def dump_ps(profiles: Iterable[ProcessProfile]) -> dict[int, str] | None:
    """The parameter servers (index -> address) the peers of a labelled dump name; None
    when no peer is a ``psN``."""
    found = {
        int(peer.role[2:]): peer.address
        for p in profiles
        for peer in p.peers
        if peer.role and peer.role.startswith("ps") and peer.role[2:].isdigit()
    }
    return dict(sorted(found.items())) or None
