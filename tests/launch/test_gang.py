"""gang.plan: roles, GPUs, TF_CONFIG and Horovod env for every gang shape."""

from __future__ import annotations

import itertools
import json

import pytest

from coordinator.gang import GangRequest, plan


def _ports():
    counter = itertools.count(20000)
    return lambda node: next(counter)


TWO_NODES = {"a": [0, 1], "b": [4]}
TWO_HOSTS = {"a": "10.0.0.1", "b": "10.0.0.2"}


def _plan(
    request: GangRequest,
    placement: dict[str, list[int]],
    coordinator: str | None = "tcp://c:1",
    **options: object,
):
    return plan(request, "j7", placement, coordinator, "/ck", 2, _ports(), python="py", **options)


def test_single_runs_script_through_wrapper_on_its_gpu() -> None:
    [p] = _plan(GangRequest(("train.py", "--lr", "1")), {"n1": [3]})
    assert p.argv == ("py", "-m", "tiresias_launch.exec", "train.py", "--lr", "1")
    assert (p.role, p.task_index, p.gpus) == ("chief", 0, (3,))
    assert p.env["CUDA_VISIBLE_DEVICES"] == "3"
    assert p.env["TIRESIAS_CHECKPOINT_DIR"] == "/ck/j7"
    assert p.env["TIRESIAS_RESTART_COUNT"] == "2"
    assert p.env["TIRESIAS_MODE"] == "single"
    assert "TF_CONFIG" not in p.env


def test_parameter_server_gang_has_gpuless_chief_and_servers() -> None:
    specs = _plan(GangRequest(("t.py",), workers=4, ps=2), {"b": [0, 1], "a": [5, 6]})
    roles = [(p.role, p.task_index, p.node, p.gpus) for p in specs]
    assert roles == [
        ("chief", 0, "a", ()),
        ("ps", 0, "a", ()),
        ("ps", 1, "b", ()),
        ("worker", 0, "a", (5,)),
        ("worker", 1, "a", (6,)),
        ("worker", 2, "b", (0,)),
        ("worker", 3, "b", (1,)),
    ]
    configs = [json.loads(p.env["TF_CONFIG"]) for p in specs]
    cluster = configs[0]["cluster"]
    assert all(c["cluster"] == cluster for c in configs)
    addresses = [a for task in cluster.values() for a in task]
    assert len(set(addresses)) == 7
    assert [c["task"] for c in configs[:2]] == [
        {"type": "chief", "index": 0},
        {"type": "ps", "index": 0},
    ]
    assert all(p.argv[2] == "tiresias_launch.server" for p in specs[1:])
    assert specs[0].argv[2] == "tiresias_launch.exec"


def test_allreduce_worker_zero_is_chief() -> None:
    specs = _plan(GangRequest(("t.py",), workers=2), {"a": [0, 1]})
    assert [(p.role, p.task_index) for p in specs] == [("chief", 0), ("worker", 1)]
    tasks = [json.loads(p.env["TF_CONFIG"])["task"] for p in specs]
    assert tasks == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert {p.env["TIRESIAS_MODE"] for p in specs} == {"allreduce"}


def test_horovod_ranks_match_gloo_run_layout() -> None:
    request = GangRequest(("t.py",), workers=3, horovod=True)
    specs = _plan(request, TWO_NODES, coordinator=None, hosts=TWO_HOSTS)
    env = [p.env for p in specs]
    assert [e["HOROVOD_RANK"] for e in env] == ["0", "1", "2"]
    assert [e["HOROVOD_LOCAL_RANK"] for e in env] == ["0", "1", "0"]
    assert [e["HOROVOD_CROSS_RANK"] for e in env] == ["0", "0", "1"]
    assert [e["HOROVOD_CROSS_SIZE"] for e in env] == ["2", "1", "2"]
    assert {e["HOROVOD_GLOO_RENDEZVOUS_ADDR"] for e in env} == {"10.0.0.1"}
    # ranks of a loaded node may start minutes apart; Gloo's default 30 s would abort them
    assert {e["HOROVOD_GLOO_TIMEOUT_SECONDS"] for e in env} == {"300"}
    assert len({e["HOROVOD_GLOO_RENDEZVOUS_PORT"] for e in env}) == 1
    assert env[0]["TIRESIAS_HOROVOD_HOSTS"] == "10.0.0.1:2,10.0.0.2:1"
    assert "TIRESIAS_COORDINATOR" not in env[0]


def test_placement_must_match_request() -> None:
    with pytest.raises(ValueError, match="1 GPUs but the request asks for 2"):
        _plan(GangRequest(("t.py",), workers=2), {"a": [0]})


def test_inconsistent_request_is_refused() -> None:
    with pytest.raises(ValueError, match="exclusive"):
        GangRequest(("t.py",), workers=2, ps=1, horovod=True)
    with pytest.raises(ValueError, match="at least one worker"):
        GangRequest(("t.py",), workers=0)


def test_every_script_process_gets_what_torchrun_gives() -> None:
    """``init_process_group()`` with its defaults (env://) works in every all-reduce shape."""
    specs = _plan(GangRequest(("t.py",), workers=3), TWO_NODES, hosts=TWO_HOSTS)
    env = [p.env for p in specs]
    assert [e["RANK"] for e in env] == ["0", "1", "2"]
    assert [e["LOCAL_RANK"] for e in env] == ["0", "1", "0"]
    assert [e["LOCAL_WORLD_SIZE"] for e in env] == ["2", "2", "1"]
    assert [e["GROUP_RANK"] for e in env] == ["0", "0", "1"]
    assert {e["WORLD_SIZE"] for e in env} == {"3"} and {e["GROUP_WORLD_SIZE"] for e in env} == {"2"}
    assert {e["MASTER_ADDR"] for e in env} == {"10.0.0.1"}
    [port] = {e["MASTER_PORT"] for e in env}  # one store, on rank 0's node, on its own port
    tf_ports = {a.rsplit(":", 1)[1] for a in json.loads(env[0]["TF_CONFIG"])["cluster"]["worker"]}
    assert port not in tf_ports
    assert {e["TORCHELASTIC_RESTART_COUNT"] for e in env} == {"2"}
    [single] = _plan(GangRequest(("t.py",)), {"n1": [3]})
    assert (single.env["RANK"], single.env["WORLD_SIZE"], single.env["LOCAL_RANK"]) == (
        "0",
        "1",
        "0",
    )
    horovod = _plan(GangRequest(("t.py",), workers=2, horovod=True), {"a": [0, 1]})
    assert [p.env["RANK"] for p in horovod] == ["0", "1"]


@pytest.mark.parametrize("horovod", [False, True])
def test_an_elastic_gang_runs_at_the_size_decided_and_knows_its_top(horovod: bool) -> None:
    """Each run of a 2:4 gang is the world the core decided: every rank is told that world
    (TIRESIAS_NUM_WORKERS, torchrun's WORLD_SIZE, Horovod's size) and the top of its range
    (TIRESIAS_MAX_WORKERS, the world its global batch is defined at); a rigid gang gets no
    TIRESIAS_MAX_WORKERS, so the runtime tells the two apart."""
    request = GangRequest(("t.py",), workers=4, horovod=horovod, min_workers=2)
    for placement, world in (
        ({"a": [0, 1]}, 2),
        ({"a": [0, 1], "b": [0]}, 3),
        (TWO_NODES | {"b": [4, 5]}, 4),
    ):
        specs = _plan(request, placement)
        assert [p.task_index for p in specs] == list(range(world))
        for p in specs:
            assert (p.env["TIRESIAS_NUM_WORKERS"], p.env["WORLD_SIZE"]) == (str(world), str(world))
            assert p.env["TIRESIAS_MAX_WORKERS"] == "4"
            assert p.env["TIRESIAS_MODE"] == ("horovod" if horovod else "allreduce")
            if horovod:
                assert p.env["HOROVOD_SIZE"] == str(world)
    for placement in ({"a": [0]}, {"a": [0, 1, 2], "b": [0, 1]}):
        with pytest.raises(ValueError, match="asks for 2 to 4"):
            _plan(request, placement)
    rigid = _plan(GangRequest(("t.py",), workers=2), {"a": [0, 1]})
    assert all("TIRESIAS_MAX_WORKERS" not in p.env for p in rigid)


def test_an_elastic_range_is_checked() -> None:
    with pytest.raises(ValueError, match="'min_workers' must be 1 to 'workers' \\(4\\), got 5"):
        GangRequest(("t.py",), workers=4, min_workers=5)
    with pytest.raises(ValueError, match="a parameter-server job takes a fixed number"):
        GangRequest(("t.py",), workers=4, ps=1, min_workers=2)
    assert GangRequest(("t.py",), workers=4, ps=1, min_workers=4).min_workers == 4
    msg = {"argv": ["t.py"], "workers": 4, "min_workers": 4}
    assert GangRequest.from_submit(msg) == GangRequest(("t.py",), 4)  # MIN == MAX: rigid
