"""S_J arithmetic, TF's tensor-to-PS assignments, and the service's profiler stage."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ibverbs_tap
from coordinator.service import profiler
from ibverbs_tap import Peer, ProcessProfile, roles
from ibverbs_tap.profile import Histogram, TapError, merge_peers
from ibverbs_tap.reading import MAX_FILE_BYTES, read_process
from ibverbs_tap.skew import assign_tensors


def test_skew_is_busiest_share() -> None:
    assert ibverbs_tap.skew([3, 1]) == 0.75
    assert ibverbs_tap.skew({"ps0": 5, "ps1": 5}) == 0.5
    assert ibverbs_tap.skew([7]) == 1.0
    for bad, msg in (([], "at least one"), ([0, 0], "carried 0 bytes"), ([1, -1], "negative")):
        with pytest.raises(ValueError, match=msg):
            ibverbs_tap.skew(bad)


def test_round_robin_and_greedy_assignment() -> None:
    # VGG-like: kernel/bias pairs with 2 PS put every kernel on PS 0 round-robin.
    sizes = [100, 1, 100, 1, 5000, 1]
    assert assign_tensors(sizes, 2) == [5200, 3]
    # Greedy: each tensor to the least-loaded PS (lowest index on ties), in creation order.
    assert assign_tensors(sizes, 2, "greedy") == [5101, 102]
    assert ibverbs_tap.skew_from_tensor_sizes(sizes, 2) == pytest.approx(5200 / 5203)
    assert ibverbs_tap.skew_from_tensor_sizes(sizes, 1) == 1.0
    assert ibverbs_tap.skew_from_tensor_sizes([4] * 8, 4) == 0.25
    with pytest.raises(ValueError, match="num_ps"):
        ibverbs_tap.skew_from_tensor_sizes(sizes, 0)
    with pytest.raises(ValueError, match="unknown assignment"):
        ibverbs_tap.skew_from_tensor_sizes(sizes, 2, "random")


@given(st.lists(st.integers(1, 10**9), min_size=1, max_size=60), st.integers(1, 9))
def test_skew_bounds(sizes: list[int], num_ps: int) -> None:
    """S_J lies in [1/num_ps, 1] and is at least the largest tensor's share for round-robin."""
    for assignment in ("round-robin", "greedy"):
        s = ibverbs_tap.skew_from_tensor_sizes(sizes, num_ps, assignment)
        assert 1 / num_ps - 1e-12 <= s <= 1.0
        assert s >= max(sizes) / sum(sizes) - 1e-12


def test_largest_class_share() -> None:
    assert ibverbs_tap.largest_class_share([1000, 1000, 10, 20]) == pytest.approx(2000 / 2030)
    assert ibverbs_tap.largest_class_share([600, 1000]) == 1.0  # both in [512, 1024)
    assert ibverbs_tap.largest_class_share([300, 1000]) == pytest.approx(1000 / 1300)


def test_ps_addresses_from_tf_config(tmp_path) -> None:
    cfg = {"cluster": {"ps": ["h:1", "h:2"], "worker": ["w:1"]}, "task": {"type": "worker"}}
    assert ibverbs_tap.ps_addresses_from_tf_config(cfg) == ["h:1", "h:2"]
    assert ibverbs_tap.ps_addresses_from_tf_config(json.dumps(cfg)) == ["h:1", "h:2"]
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert ibverbs_tap.ps_addresses_from_tf_config(str(tmp_path / "c.json")) == ["h:1", "h:2"]
    with pytest.raises(ValueError, match=r"no cluster\.ps"):
        ibverbs_tap.ps_addresses_from_tf_config({"cluster": {"worker": ["w:1"]}})


def _profile(*peers: tuple[str, int, int]) -> ProcessProfile:
    def hist(n: int) -> Histogram:
        counts, sizes = [0] * 64, [0] * 64
        counts[max(n, 1).bit_length() - 1], sizes[max(n, 1).bit_length() - 1] = 1, n
        return Histogram(tuple(counts), tuple(sizes))

    return ProcessProfile(
        pid=1,
        ppid=0,
        cmdline=(),
        start_time=0.0,
        images=1,
        verbs_built=True,
        verbs_seen=False,
        peers=tuple(
            Peer("tcp", f"{h}:{p}", tx=hist(n), rx=hist(n), host=h, port=p) for h, p, n in peers
        ),
    )


def test_bytes_per_ps_matches_resolved_addresses() -> None:
    prof = _profile(("127.0.0.1", 2222, 30), ("127.0.0.1", 3333, 10), ("127.0.0.1", 4444, 99))
    assert ibverbs_tap.bytes_per_ps([prof, prof], ["localhost:2222", "127.0.0.1:3333"]) == {
        "localhost:2222": 120,
        "127.0.0.1:3333": 40,
    }
    with pytest.raises(ValueError, match="not host:port"):
        ibverbs_tap.bytes_per_ps([prof], ["nohostport"])


def test_profile_round_trips_through_dict() -> None:
    prof = _profile(("127.0.0.1", 2222, 30))
    assert ProcessProfile.from_dict(json.loads(json.dumps(prof.to_dict()))) == prof


def test_profiler_stage() -> None:
    sizes = [100, 1, 100, 1, 5000, 1]
    assert profiler.skew_from_report(sizes, 2) == pytest.approx(5200 / 5203)
    assert profiler.skew_from_report(sizes, 0) == pytest.approx(5000 / 5203)  # all-reduce
    assert profiler.skew_from_report(None, 2) is None
    assert profiler.skew_from_report([0, 0], 2) is None
    # Untraced or vanished pids give no measurement.
    assert profiler.traffic_of([4194999], ["127.0.0.1:1"]) == {}


def test_measured_traffic_is_summed_over_nodes_and_never_beats_the_runtime() -> None:
    stage = profiler.SkewStage()

    def measured(job: str, node: str, restart: int, ps0: int, ps1: int) -> float | None:
        ps_bytes = {"h:1": ps0, "h:2": ps1}
        found = stage({"job_id": job, "node": node, "restart": restart, "ps_bytes": ps_bytes}, 2)
        if found is None:
            return None
        assert found[1] == profiler.MEASURED
        return found[0]

    # S_J of the job's traffic over all its nodes: (300 + 100) / (300 + 100 + 100 + 100)
    assert measured("j1", "a", 0, 300, 100) == pytest.approx(0.75)
    assert measured("j1", "b", 0, 100, 100) == pytest.approx(400 / 600)
    # a new run's measurements replace the old run's, node by node
    assert measured("j1", "b", 1, 100, 300) == pytest.approx(0.75)
    # the runtime's tensor sizes win, and measurements do not override them afterwards
    skew, source = stage({"job_id": "j1", "tensor_bytes": [100, 1, 100, 1, 5000, 1]}, 2) or ()
    assert (skew, source) == (pytest.approx(5200 / 5203), profiler.TENSORS)
    assert measured("j1", "a", 1, 900, 100) is None
    # the runtime's own skew wins over everything; a report with nothing new changes nothing
    assert stage({"job_id": "j1", "skew": 0.4}, 2) == (0.4, profiler.REPORTED)
    assert stage({"job_id": "j1", "tensor_bytes": [1, 2]}, 2) is None
    assert stage({"job_id": "j1", "step": 7}, 2) is None
    # other jobs are their own
    assert measured("j2", "a", 0, 0, 0) is None  # no traffic yet: unknown
    assert measured("j2", "a", 0, 100, 300) == pytest.approx(0.75)
    # a restarted coordinator's new stage knows the source from the job record: a
    # measurement still cannot override the tensor sizes the runtime gave before the restart
    fresh = profiler.SkewStage()
    report = {"job_id": "j1", "node": "a", "restart": 2, "ps_bytes": {"h:1": 9, "h:2": 1}}
    assert fresh(report, 2, profiler.TENSORS) is None
    # a skew given at submit is no source the stage ranks: measurements replace it
    report["job_id"] = "j3"
    assert fresh(report, 2, "submitted") == (pytest.approx(0.9), profiler.MEASURED)


def test_roles_from_tf_config_and_gang_variables() -> None:
    dense = {"cluster": {"ps": ["h:1", "h:2"], "worker": ["w:1"]}, "task": {"type": "ps"}}
    assert roles.roles(roles.cluster_of(dense)) == {"ps0": "h:1", "ps1": "h:2", "worker0": "w:1"}
    sparse = json.dumps({"cluster": {"worker": {"1": "w:2", "3": "w:4"}}})
    assert roles.roles(roles.cluster_of(sparse)) == {"worker1": "w:2", "worker3": "w:4"}
    for bad, msg in (
        ("{nope", "not valid JSON"),
        ('{"cluster": []}', "'cluster' object"),
        ('{"cluster": {"ps": "h:1"}}', "neither a list nor an object"),
        ('{"cluster": {"ps": [1]}}', "not a string"),
    ):
        with pytest.raises(ValueError, match=msg):
            roles.cluster_of(bad)
    tf = json.dumps({"cluster": {"chief": ["c:1"]}, "task": {"type": "chief", "index": 0}})
    assert roles.own_role({"TF_CONFIG": tf, "TIRESIAS_ROLE": "worker"}) == "chief0"
    gang = {"TIRESIAS_ROLE": "worker", "TIRESIAS_TASK_INDEX": "2", "TF_CONFIG": "{bad"}
    assert roles.own_role(gang) == "worker2"
    assert roles.own_role({}) is None


def test_label_names_peers_at_task_addresses() -> None:
    prof = _profile(("127.0.0.1", 2222, 30), ("127.0.0.1", 3333, 10), ("127.0.0.1", 4444, 99))
    cluster = roles.cluster_of(
        {"cluster": {"ps": ["localhost:2222"], "worker": ["127.0.0.1:3333", "nohost.invalid:1"]}}
    )
    with pytest.raises(ValueError, match=r"cannot resolve 'nohost\.invalid:1'"):
        roles.role_endpoints(cluster, strict=True)
    labelled = roles.label(prof, roles.role_endpoints(cluster))
    assert [(p.port, p.role) for p in labelled.peers] == [
        (2222, "ps0"),
        (3333, "worker0"),
        (4444, None),
    ]
    [merged] = merge_peers([labelled.peers[0], labelled.peers[0]])
    assert merged.role == "ps0" and merged.tx.total_bytes == 60 and merged.tx.count == 2
    # A gang's sum: peers of one role at different addresses (connections either side
    # opened) are one row at the role's address; unlabelled peers stay per address.
    ps0, worker0, other = labelled.peers
    by_role = merge_peers([ps0, replace(worker0, role="ps0"), other], {"ps0": "h:1"})
    assert [(p.role, p.address, p.host, p.tx.total_bytes) for p in by_role] == [
        ("ps0", "h:1", None, 40),
        (None, "127.0.0.1:4444", "127.0.0.1", 99),
    ]


def test_gang_addresses_name_tasks_the_coordinator_and_the_rendezvous() -> None:
    tf = json.dumps({"cluster": {"ps": ["localhost:2222"]}, "task": {"type": "worker"}})
    environ = {"TF_CONFIG": tf, "TIRESIAS_COORDINATOR": "tcp://127.0.0.1:5555"}
    addresses = roles.gang_addresses(environ)
    assert addresses == {"coordinator": "127.0.0.1:5555", "ps0": "localhost:2222"}
    horovod = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "n1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "7000"}
    assert roles.gang_addresses(horovod) == {"rendezvous": "n1:7000"}
    assert roles.resolve(addresses)[("127.0.0.1", 2222)] == "ps0"
    # TF reads TF_CONFIG as JSON only: a path or junk there gives no labels, not an error.
    assert roles.gang_addresses({"TF_CONFIG": "/etc/passwd"}) == {}
    with pytest.raises(ValueError, match="not a JSON object"):
        roles.environ_tf_config({"TF_CONFIG": "/etc/passwd"})


def test_gang_ps_from_the_processes_environments() -> None:
    def started_with(**env: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(["sleep", "60"], env=env)

    launcher = started_with()
    a = started_with(TF_CONFIG=json.dumps({"cluster": {"ps": ["h:1", "h:2"]}}))
    b = started_with(TF_CONFIG=json.dumps({"cluster": {"ps": ["h:1", "h:2"], "worker": ["w:1"]}}))
    c = started_with(TF_CONFIG=json.dumps({"cluster": {"ps": ["h:3"]}}))
    bad = started_with(TF_CONFIG="{nope")
    try:
        assert roles.gang_ps([launcher.pid, a.pid, b.pid]) == {0: "h:1", 1: "h:2"}
        assert roles.gang_ps([launcher.pid]) is None
        with pytest.raises(ValueError, match="name different parameter servers"):
            roles.gang_ps([a.pid, c.pid])
        with pytest.raises(ValueError, match=f"process {bad.pid} started with a bad TF_CONFIG"):
            roles.gang_ps([bad.pid])
    finally:
        for proc in (launcher, a, b, c, bad):
            proc.kill()
            proc.wait()


def test_a_profile_path_is_read_only_as_a_bounded_regular_file(tmp_path: Path) -> None:
    """A root agent reads profiles at paths a job's user controls: a link, a FIFO or a huge
    file there is refused at once, never followed, blocked on or read whole."""
    me = os.getpid()
    path = tmp_path / f"ibverbs-tap.{me}"
    path.symlink_to("/dev/zero")
    with pytest.raises(TapError, match="symbolic link"):
        read_process(me, str(tmp_path))
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(TapError, match="not a regular file"):
        read_process(me, str(tmp_path))
    path.unlink()
    with path.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse
    with pytest.raises(TapError, match="larger than any profile"):
        read_process(me, str(tmp_path))
