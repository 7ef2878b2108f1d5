"""The per-process profile files the preload library writes (layout: csrc/tap.h): their
format and what they say. Finding and reading them safely is :mod:`ibverbs_tap.reading`.

A profile is a snapshot: counters only grow, so the difference of two snapshots of the same
process is the traffic of the window between them (``ProcessProfile.since``).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

MAGIC = b"IBVTAP\x00\x01"
VERSION = 1
NBUCKETS = 64
FILE_PREFIX = "ibverbs-tap."
DEFAULT_DIR = "/dev/shm"
DIR_ENV = "IBVERBS_TAP_DIR"
HEADER = struct.Struct("<8sIIIIIIiiQQIIQQQ")  # up to srq_recv_posted; cmdline at 128
HEADER_SIZE = 256
CMDLINE_OFFSET, CMDLINE_SIZE = 128, 128
PEER_META = struct.Struct("<IIQ16sIIIIQ")
PEER_COUNTERS_OFFSET = 64
KIND_TCP4, KIND_TCP6, KIND_VERBS = 1, 2, 3
FLAG_VERBS_BUILT, FLAG_VERBS_SEEN = 1, 2
PEER_READY = 2


class TapError(Exception):
    """A profile that cannot be read; the message says why and what to do."""


class NotTracedError(TapError):
    """The process exists but has no (current) ibverbs-tap profile."""


class ProcessGoneError(TapError):
    """The process does not exist (any more)."""


@dataclass(frozen=True)
class Histogram:
    """Messages and bytes per log2 size class: bucket b holds sizes in [2^b, 2^(b+1))
    (size 0 counts in bucket 0)."""

    counts: tuple[int, ...] = (0,) * NBUCKETS
    bytes: tuple[int, ...] = (0,) * NBUCKETS

    @property
    def count(self) -> int:
        return sum(self.counts)

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes)

    def buckets(self) -> list[tuple[int, int, int]]:
        """(bucket, messages, bytes) for the non-empty buckets."""
        pairs = zip(self.counts, self.bytes, strict=True)
        return [(b, c, n) for b, (c, n) in enumerate(pairs) if c]

    def since(self, earlier: Histogram) -> Histogram:
        return Histogram(
            tuple(a - b for a, b in zip(self.counts, earlier.counts, strict=True)),
            tuple(a - b for a, b in zip(self.bytes, earlier.bytes, strict=True)),
        )

    def __add__(self, other: Histogram) -> Histogram:
        return Histogram(
            tuple(a + b for a, b in zip(self.counts, other.counts, strict=True)),
            tuple(a + b for a, b in zip(self.bytes, other.bytes, strict=True)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "bytes": self.total_bytes, "buckets": self.buckets()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Histogram:
        counts, sizes = [0] * NBUCKETS, [0] * NBUCKETS
        for b, c, n in d.get("buckets", []):
            counts[b], sizes[b] = c, n
        return cls(tuple(counts), tuple(sizes))


@dataclass(frozen=True)
class Peer:
    """One remote endpoint: a TCP IP:port, or an RDMA QP's remote (LID, GID, QPN)."""

    kind: str  # "tcp" or "verbs"
    address: str  # "127.0.0.1:5000", "[::1]:5000", "lid 7 qpn 0x2001", "qpn ? (local 0x101)"
    tx: Histogram = field(default_factory=Histogram)
    rx: Histogram = field(default_factory=Histogram)
    host: str | None = None
    port: int | None = None
    lid: int | None = None
    gid: str | None = None
    qpn: int | None = None
    local_qpn: int | None = None
    recv_posted: int = 0
    role: str | None = None  # "ps0", "worker1": the TF task at this address (roles.py)

    @property
    def endpoint(self) -> tuple[str, int] | None:
        """(ip, port) of a TCP peer whose address parsed; None otherwise."""
        if self.kind != "tcp" or self.host is None or self.port is None:
            return None
        return (self.host, self.port)

    @property
    def key(self) -> str:
        return self.address if self.local_qpn is None else f"{self.address}/{self.local_qpn}"

    @property
    def total_bytes(self) -> int:
        return self.tx.total_bytes + self.rx.total_bytes

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "address": self.address, "role": self.role}
        for name in ("host", "port", "lid", "gid", "qpn", "local_qpn"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        if self.kind == "verbs":
            d["recv_posted"] = self.recv_posted
        d["tx"], d["rx"] = self.tx.to_dict(), self.rx.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Peer:
        return cls(
            kind=d["kind"],
            address=d["address"],
            tx=Histogram.from_dict(d["tx"]),
            rx=Histogram.from_dict(d["rx"]),
            host=d.get("host"),
            port=d.get("port"),
            lid=d.get("lid"),
            gid=d.get("gid"),
            qpn=d.get("qpn"),
            local_qpn=d.get("local_qpn"),
            recv_posted=d.get("recv_posted", 0),
            role=d.get("role"),
        )


def _order(peer: Peer) -> tuple[bool, str, int, str, str]:
    """Labelled peers first, by role (ps2 before ps10), then by address."""
    job = (peer.role or "").rstrip("0123456789")
    index = (peer.role or "")[len(job) :]
    return (peer.role is None, job, int(index or 0), peer.kind, peer.address)


def merge_peers(
    peers: Iterable[Peer], addresses: Mapping[str, str] | None = None
) -> tuple[Peer, ...]:
    """Peers summed by address (several processes talking to one PS are one row), labelled
    ones first by role. With ``addresses`` (role -> address) labelled peers are summed by
    role, each row at its role's address ("-" if unknown): a gang's traffic with each task,
    whichever side opened the connections."""
    merged: dict[tuple[str, str], Peer] = {}
    for p in peers:
        if addresses is not None and p.role:
            p = replace(p, address=addresses.get(p.role, "-"), host=None, port=None)
        key = (p.kind, p.address) if addresses is None or not p.role else ("role", p.role)
        m = merged.get(key)
        merged[key] = (
            p
            if m is None
            else replace(
                m,
                tx=m.tx + p.tx,
                rx=m.rx + p.rx,
                recv_posted=m.recv_posted + p.recv_posted,
                local_qpn=m.local_qpn if m.local_qpn == p.local_qpn else None,
                role=m.role or p.role,
            )
        )
    return tuple(sorted(merged.values(), key=_order))


@dataclass(frozen=True)
class ProcessProfile:
    """Everything one traced process has sent and received, per peer."""

    pid: int
    ppid: int
    cmdline: tuple[str, ...]
    start_time: float  # seconds since the epoch when the tap attached
    images: int  # 1 + execs that kept counting into the same profile
    verbs_built: bool  # False: the library was built without verbs headers (socket tap only)
    verbs_seen: bool  # the process opened an RDMA device
    peers: tuple[Peer, ...]
    dropped_calls: int = 0  # I/O not attributed (peer table full)
    dropped_bytes: int = 0
    srq_recv_posted: int = 0
    path: str | None = None
    role: str | None = None  # this process's TF task, e.g. "worker1" (roles.py)

    def peer(self, address: str) -> Peer | None:
        return next((p for p in self.peers if p.address == address), None)

    def since(self, earlier: ProcessProfile) -> ProcessProfile:
        """The traffic between ``earlier`` and this snapshot of the same process."""
        before = {p.key: p for p in earlier.peers}
        peers = []
        for p in self.peers:
            e = before.get(p.key)
            peers.append(
                p
                if e is None
                else replace(
                    p,
                    tx=p.tx.since(e.tx),
                    rx=p.rx.since(e.rx),
                    recv_posted=p.recv_posted - e.recv_posted,
                )
            )
        return replace(
            self,
            peers=tuple(peers),
            dropped_calls=self.dropped_calls - earlier.dropped_calls,
            dropped_bytes=self.dropped_bytes - earlier.dropped_bytes,
            srq_recv_posted=self.srq_recv_posted - earlier.srq_recv_posted,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "role": self.role,
            "cmdline": list(self.cmdline),
            "start_time": self.start_time,
            "images": self.images,
            "verbs_built": self.verbs_built,
            "verbs_seen": self.verbs_seen,
            "dropped_calls": self.dropped_calls,
            "dropped_bytes": self.dropped_bytes,
            "srq_recv_posted": self.srq_recv_posted,
            "peers": [p.to_dict() for p in self.peers],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProcessProfile:
        return cls(
            pid=d["pid"],
            ppid=d["ppid"],
            cmdline=tuple(d["cmdline"]),
            start_time=d["start_time"],
            images=d["images"],
            verbs_built=d["verbs_built"],
            verbs_seen=d["verbs_seen"],
            peers=tuple(Peer.from_dict(p) for p in d["peers"]),
            dropped_calls=d.get("dropped_calls", 0),
            dropped_bytes=d.get("dropped_bytes", 0),
            srq_recv_posted=d.get("srq_recv_posted", 0),
            role=d.get("role"),
        )


def _peer(raw: bytes, off: int) -> Peer | None:
    state, kind, _, addr, port, lid, local_qpn, _, recv_posted = PEER_META.unpack_from(raw, off)
    if state != PEER_READY:
        return None
    words = struct.unpack_from(f"<{4 * NBUCKETS}Q", raw, off + PEER_COUNTERS_OFFSET)
    n = NBUCKETS
    tx = Histogram(words[0:n], words[2 * n : 3 * n])
    rx = Histogram(words[n : 2 * n], words[3 * n : 4 * n])
    if not (tx.count or rx.count or recv_posted):
        return None  # claimed but never used in this process (a QP that moved to a new peer)
    if kind == KIND_TCP4:
        host = str(ipaddress.IPv4Address(addr[:4]))
        return Peer("tcp", f"{host}:{port}", tx, rx, host=host, port=port)
    if kind == KIND_TCP6:
        host = str(ipaddress.IPv6Address(addr))
        return Peer("tcp", f"[{host}]:{port}", tx, rx, host=host, port=port)
    gid = str(ipaddress.IPv6Address(addr)) if any(addr) else None
    if lid == 0 and gid is None and port == 0:
        address = f"qpn ? (local {local_qpn:#x}, not connected)"
        return Peer("verbs", address, tx, rx, local_qpn=local_qpn, recv_posted=recv_posted)
    address = f"lid {lid}" + (f" gid {gid}" if gid else "") + f" qpn {port:#x}"
    return Peer(
        "verbs",
        address,
        tx,
        rx,
        lid=lid,
        gid=gid,
        qpn=port,
        local_qpn=local_qpn,
        recv_posted=recv_posted,
    )


def parse(raw: bytes, path: str | None = None) -> ProcessProfile:
    """Parses the bytes of a profile file."""
    where = path or "profile"
    if len(raw) < HEADER_SIZE or raw[:8] != MAGIC:
        raise TapError(f"{where} is not an ibverbs-tap profile (bad magic)")
    (
        _,
        version,
        header_size,
        peer_size,
        max_peers,
        nbuckets,
        flags,
        pid,
        ppid,
        start_ns,
        _ticks,
        _npeers,
        images,
        dropped_calls,
        dropped_bytes,
        srq_posted,
    ) = HEADER.unpack_from(raw)
    if version != VERSION:
        raise TapError(f"{where} has layout version {version}; this reader understands {VERSION}")
    if nbuckets != NBUCKETS or header_size != HEADER_SIZE or peer_size != 64 + 32 * NBUCKETS:
        raise TapError(f"{where} has an unexpected layout")
    if len(raw) < header_size + max_peers * peer_size:
        raise TapError(f"{where} is truncated")
    cmd = raw[CMDLINE_OFFSET : CMDLINE_OFFSET + CMDLINE_SIZE].rstrip(b"\0").split(b"\0")
    peers = [_peer(raw, header_size + i * peer_size) for i in range(max_peers)]
    return ProcessProfile(
        pid=pid,
        ppid=ppid,
        cmdline=tuple(c.decode(errors="replace") for c in cmd if c),
        start_time=start_ns / 1e9,
        images=images,
        verbs_built=bool(flags & FLAG_VERBS_BUILT),
        verbs_seen=bool(flags & FLAG_VERBS_SEEN),
        peers=tuple(sorted((p for p in peers if p), key=lambda p: p.key)),
        dropped_calls=dropped_calls,
        dropped_bytes=dropped_bytes,
        srq_recv_posted=srq_posted,
        path=path,
    )
