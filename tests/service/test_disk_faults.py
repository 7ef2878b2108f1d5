"""A state disk that fills, turns read-only, or aborts (ext4 journal abort) under a running
coordinator: the client gets one clear error, the coordinator stops accepting, and after the
coordinator is killed and restarted on the repaired disk every acknowledged submit is there.
Real mounts: a tmpfs with ``size=`` and an ext4 image on a loop device, mounted
``errors=remount-ro`` (root only; skipped elsewhere). A plain ``mount -o remount,ro`` is
refused while the database is open for writing (EBUSY), so read-only comes from an ext4
error (``trigger_fs_error``), as on a real disk."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import FAKE_JOB

from coordinator.cli.jobs import list_jobs
from coordinator.service.client import RequestError

from .conftest import Cluster
from .test_reconcile import ScriptedAgent

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting file systems needs root")

REFUSAL = "cannot be written"


def _sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    try:
        _sh("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot mount a tmpfs here: {e.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@contextlib.contextmanager
def ext4_loop(tmp: Path) -> Iterator[tuple[Path, str]]:
    image, where = tmp / "disk.img", tmp / "ext4"
    with image.open("wb") as f:
        f.truncate(64 << 20)
    where.mkdir()
    try:
        device = _sh("losetup", "-f", "--show", str(image))
    except subprocess.CalledProcessError as e:
        pytest.skip(f"no loop device here: {e.stderr.strip()}")
    try:
        _sh("mkfs.ext4", "-q", device)
        _sh("mount", "-o", "errors=remount-ro", device, str(where))
        yield where, device
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        subprocess.run(["losetup", "-d", device], check=False)


def _submit(cluster: Cluster, arg: str = "x") -> str:
    reply = cluster.client.request("submit", argv=[str(FAKE_JOB), arg], workers=1)
    return str(reply["job_id"])


def _start(cluster: Cluster, state: Path) -> ScriptedAgent:
    cluster.state = state
    cluster.start_coordinator("--heartbeat-timeout", "60")
    return ScriptedAgent(cluster.address, "n1", 1)


def _refused(cluster: Cluster, arg: str = "x") -> str:
    with pytest.raises(RequestError) as refused:
        _submit(cluster, arg)
    return str(refused.value)


def _restart_and_list(cluster: Cluster, state: Path) -> list[str]:
    cluster.kill_coordinator()
    cluster.state = state
    cluster.start_coordinator()
    return [j["job_id"] for j in list_jobs(cluster.client, "status", all=True)]


def _logged_once(cluster: Cluster) -> None:
    log = (cluster.tmp / "coordinator.log").read_text()
    assert log.count(REFUSAL) == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_full_disk(cluster: Cluster, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "3m") as disk:
        agent = _start(cluster, disk / "state")
        acked: list[str] = []
        fat = "a" * 60_000
        while len(acked) < 1000:
            try:
                acked.append(_submit(cluster, fat))
            except RequestError as e:
                error = str(e)
                break
        assert 5 < len(acked) < 1000
        assert REFUSAL in error and "full" in error, error
        # it stays refused (no retry can half-succeed), while reads still work
        assert REFUSAL in _refused(cluster)
        assert cluster.client.request("status", job_id=acked[-1])["job"]["state"] == "waiting"
        _logged_once(cluster)
        agent.close()
        cluster.kill_coordinator()
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        assert _restart_and_list(cluster, disk / "state") == acked


def _turn_read_only(disk: Path, device: str) -> None:
    """What ext4 mounted ``errors=remount-ro`` does on a metadata error."""
    Path(f"/sys/fs/ext4/{Path(device).name}/trigger_fs_error").write_text("1")


def _abort(disk: Path, device: str) -> None:
    """What ext4 does on a journal I/O error: abort the journal, nothing more is written."""
    _sh("mount", "-o", "remount,abort", str(disk))


@pytest.mark.parametrize("fault", [_turn_read_only, _abort], ids=["read-only", "aborted"])
def test_failing_disk_loses_no_acknowledged_submit(
    cluster: Cluster, tmp_path: Path, fault: Callable[[Path, str], None]
) -> None:
    with ext4_loop(tmp_path) as (disk, device):
        agent = _start(cluster, disk / "state")
        acked = [_submit(cluster) for _ in range(5)]
        fault(disk, device)
        error = _refused(cluster)
        assert REFUSAL in error, error
        _logged_once(cluster)
        agent.close()
        cluster.kill_coordinator()  # and the coordinator dies mid-run
        _sh("umount", str(disk))
        subprocess.run(["fsck.ext4", "-fy", device], check=False, capture_output=True)
        _sh("mount", device, str(disk))
        assert _restart_and_list(cluster, disk / "state") == acked
