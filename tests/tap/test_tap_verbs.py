"""The verbs tap without RDMA hardware: an app compiled against the real verbs.h runs on a
fake libibverbs.so.1 (SONAME and IBVERBS_1.1 node like the real one) built here; its context
ops succeed, so the tap's wrapped post_send/post_recv/poll_cq see real call sequences."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ibverbs_tap import ProcessProfile

from .helpers import CSRC, cc, tap_run

VERBS_H = Path("/usr/include/infiniband/verbs.h")
pytestmark = pytest.mark.skipif(not VERBS_H.exists(), reason="needs libibverbs-dev headers")


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fakeverbs")
    cc(
        d / "libibverbs.so.1",
        "-fPIC",
        "-shared",
        "-Wl,-soname,libibverbs.so.1",
        f"-Wl,--version-script={CSRC / 'fake_verbs.map'}",
        CSRC / "fake_verbs.c",
    )
    return d


def _run_app(exe: Path, fake_lib: Path, out: Path) -> ProcessProfile:
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_lib))
    proc, profiles = tap_run([exe], out, env=env)
    assert proc.stdout.splitlines() == ["device fake0", "completions 19"]
    [profile] = profiles
    return profile


def _check(p: ProcessProfile) -> None:
    assert p.verbs_built and p.verbs_seen
    assert [peer.address for peer in p.peers] == [
        "lid 7 qpn 0x2001",
        "lid 9 gid fe80::1234 qpn 0x3002",
    ]
    qp1, qp2 = p.peers
    assert (qp1.kind, qp1.lid, qp1.qpn, qp1.local_qpn, qp1.gid) == ("verbs", 7, 0x2001, 0x101, None)
    # 4 x 64 B + the 100 B WR posted before the failing one; 2 x (2 x 2 KiB); 1 MiB.
    assert qp1.tx.buckets() == [(6, 5, 4 * 64 + 100), (12, 2, 8192), (20, 1, 1 << 20)]
    # 5 receives of 1 KiB completed; the RDMA read brings 8 KiB in.
    assert qp1.rx.buckets() == [(10, 5, 5 * 1024), (13, 1, 8192)]
    assert qp1.recv_posted == 5
    assert (qp2.lid, qp2.qpn, qp2.local_qpn, qp2.gid) == (9, 0x3002, 0x102, "fe80::1234")
    assert qp2.tx.buckets() == [(3, 3, 30)]
    assert qp2.rx.buckets() == [(16, 2, 140000)]
    assert qp2.recv_posted == 2
    assert p.dropped_calls == 0


def test_linked_app(tmp_path: Path, fake_lib: Path) -> None:
    """Linked against the system libibverbs, run on the fake; QP 2 comes from
    ibv_create_qp_ex (the context's create_qp_ex, which the tap also wraps)."""
    exe = cc(tmp_path / "verbs_app", CSRC / "verbs_app.c", "-libverbs")
    _check(_run_app(exe, fake_lib, tmp_path / "dump.json"))


def test_dlopen_app(tmp_path: Path, fake_lib: Path) -> None:
    """dlopen(RTLD_LOCAL) + dlsym/dlvsym: only the dlsym interposition can see these calls."""
    exe = cc(tmp_path / "verbs_app_dl", "-DUSE_DLOPEN", CSRC / "verbs_app.c", "-ldl")
    _check(_run_app(exe, fake_lib, tmp_path / "dump.json"))
