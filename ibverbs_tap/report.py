"""What ``ibverbs-tap profile`` reports: per process and per peer, the histograms since the
process started and the rates over the last window, as JSON (``profile_report``) and as
text for people (``describe``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ibverbs_tap.profile import Histogram, Peer, ProcessProfile, merge_peers


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _bucket_range(b: int) -> str:
    low = 0 if b == 0 else 1 << b
    return f"[{size(low)}, {size(1 << (b + 1))})"


def _verbs_state(p: Mapping[str, Any]) -> str:
    if not p["verbs_built"]:
        return "verbs: not built (socket tap only)"
    return "verbs: device opened" if p["verbs_seen"] else "verbs: built, no device opened"


def _peer_report(peer: Peer, in_window: Peer | None, window: float | None) -> dict[str, Any]:
    """A peer's cumulative histograms, and with a window its rates over that window."""
    d = peer.to_dict()
    if window:
        for direction in ("tx", "rx"):
            hist: Histogram = getattr(in_window, direction) if in_window else Histogram()
            d[direction]["msgs_per_s"] = hist.count / window
            d[direction]["bytes_per_s"] = hist.total_bytes / window
    return d


def _peers_report(
    peers: Iterable[Peer],
    in_window: Iterable[Peer],
    window: float | None,
    addresses: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    recent = {(p.kind, p.address, p.role): p for p in merge_peers(in_window, addresses)}
    return [
        _peer_report(p, recent.get((p.kind, p.address, p.role)), window)
        for p in merge_peers(peers, addresses)
    ]


def profile_report(
    before: Mapping[int, ProcessProfile],
    after: Mapping[int, ProcessProfile],
    untraced: Sequence[int],
    window: float | None,
    addresses: Mapping[str, str] | None,
) -> dict[str, Any]:
    """What ``profile`` prints: per process, per peer, the histograms since the process
    started and the rates between the two snapshots; with ``addresses`` (role -> address,
    for ``--tree``) also the processes' sum, labelled peers summed by role."""
    deltas = {pid: p.since(before[pid]) if pid in before else p for pid, p in after.items()}
    processes = []
    for pid, prof in after.items():
        d = prof.to_dict()
        d["peers"] = _peers_report(prof.peers, deltas[pid].peers, window)
        processes.append(d)
    report: dict[str, Any] = {"window": window, "processes": processes}
    if addresses is not None:
        report["total"] = {
            "pids": list(after),
            "untraced": list(untraced),
            "peers": _peers_report(
                (peer for p in after.values() for peer in p.peers),
                (peer for p in deltas.values() for peer in p.peers),
                window,
                addresses,
            ),
        }
    return report


def _direction(name: str, d: Mapping[str, Any]) -> str:
    text = f"{name} {d['count']} msgs {size(d['bytes'])}"
    return text + (f" ({size(d['bytes_per_s'])}/s)" if "bytes_per_s" in d else "")


def _peer_lines(peer: Mapping[str, Any]) -> list[str]:
    name = f"{peer['role']} " if peer["role"] else ""
    lines = [
        f"  {name}{peer['kind']} {peer['address']}: {_direction('tx', peer['tx'])}, "
        f"{_direction('rx', peer['rx'])}"
        + (f", {peer['recv_posted']} recvs posted" if peer["kind"] == "verbs" else "")
    ]
    for direction in ("tx", "rx"):
        for b, count, nbytes in peer[direction]["buckets"]:
            lines.append(
                f"    {direction} {_bucket_range(b):>22} {count:>10} msgs {size(nbytes):>12}"
            )
    return lines


def _process_head(p: Mapping[str, Any]) -> str:
    cmd = " ".join(p["cmdline"]) or "?"
    role = f" {p['role']}" if p["role"] else ""
    return f"pid {p['pid']}{role} (ppid {p['ppid']}) `{cmd}` — {_verbs_state(p)}"


def describe(report: Mapping[str, Any], now: float) -> list[str]:
    """The text form of ``profile_report``."""
    window = report["window"]
    when = f"; rates over the last {window:.2f} s" if window else ""
    lines: list[str] = []
    if "total" in report:
        total = report["total"]
        lines.append(f"{len(total['pids'])} traced processes, summed{when}")
        for p in report["processes"]:
            tx = sum(peer["tx"]["bytes"] for peer in p["peers"])
            rx = sum(peer["rx"]["bytes"] for peer in p["peers"])
            lines.append(f"  {_process_head(p)}: tx {size(tx)}, rx {size(rx)}")
        if total["untraced"]:
            lines.append("  not traced: " + " ".join(map(str, total["untraced"])))
        peers = total["peers"]
    else:
        [p] = report["processes"]
        lines.append(f"{_process_head(p)}; since start {now - p['start_time']:.1f} s ago{when}")
        peers = p["peers"]
    for peer in peers:
        lines.extend(_peer_lines(peer))
    if not peers:
        lines.append("  no TCP or verbs traffic")
    for p in report["processes"]:
        if p["dropped_calls"]:
            lines.append(
                f"  pid {p['pid']}: {p['dropped_calls']} calls ({size(p['dropped_bytes'])}) "
                "not attributed: peer table full"
            )
    return lines
