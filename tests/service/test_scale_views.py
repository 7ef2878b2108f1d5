"""A page costs what the page holds, not what the cluster has seen: each view is answered at
100 active and 100 finished jobs, and at 10,000 and 10,000, and its work is counted as Python
bytecodes run plus SQLite VM steps (never wall-clock). The issue allows 2×; the work is the
same within SLACK here, so that any step walking every job (even at a few bytecodes a job)
fails. Finished jobs leave memory for the archive and are answered from it. (``queue``'s
first screen costs its heads, also behind 1,000 running jobs; ``nodes`` what runs, not what
waits; a pass what changed.)"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator import bounds
from coordinator.core import events
from coordinator.core.model import JobState, Node
from coordinator.core.settings import Settings
from coordinator.service import requests
from coordinator.service.coordinator import Coordinator, Options
from coordinator.service.identity import Peer
from coordinator.service.records import Request

SMALL, LARGE = 100, 10_000
SLACK = 1.25
#: SQLite VM instructions per progress-handler call.
VM_STEPS = 100


def crowd(state: Path, active: int, finished: int) -> Coordinator:
    """A coordinator (its loop not started) on one 4-GPU node with ``finished`` cancelled
    jobs, archived by a pass, then ``active`` ones of two users (4 run, the rest wait)."""
    opts = Options(
        bind=f"ipc://{state}/c.sock",
        state=state,
        manual_clock=True,
        allow_root_jobs=True,
        snapshot_every=10**9,
    )
    c = Coordinator(opts)
    c.peer = Peer(user="alice", admin=True)
    with c.atomic():
        c.core(events.NodeUp(Node("n1", (0, 1, 2, 3)), c.clock.now()))
        for i in range(finished + active):
            owner = "alice" if i % 2 else "bob"
            requests.enqueue(c, Request(["train.py", str(i)], 1, owner, key=f"k{i}"), 1)
        for i in range(1, finished + 1):
            requests.cancel(c, b"", {"job_id": f"j{i}"})
    c._pass()  # the pass that tells their end archives them
    c.book.jobs_on("n1")  # the node index, built as a real coordinator's first node joins
    return c


def counted(call: Callable[[], Any], db: Any = None) -> tuple[int, Any]:
    """(Python bytecodes run, plus SQLite VM steps / VM_STEPS on ``db``; the result) of
    ``call()``."""
    count = 0

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        frame.f_trace_opcodes = True
        count += event == "opcode"
        return trace

    def step() -> int:
        nonlocal count
        count += 1
        return 0

    if db is not None:
        db.set_progress_handler(step, VM_STEPS)
    sys.settrace(trace)
    try:
        result = call()
    finally:
        sys.settrace(None)
        if db is not None:
            db.set_progress_handler(None, 0)
    return count, result


def work(c: Coordinator, handler: Callable[..., Any], msg: dict[str, Any]) -> tuple[int, Any]:
    """(Python bytecodes run + SQLite VM steps / VM_STEPS, the reply) of one request."""
    return counted(lambda: handler(c, b"", msg), c.store.db)


def requests_at(n: int) -> list[tuple[str, Callable[..., Any], dict]]:
    """The same views asked of both coordinators (``n`` finished, then ``n`` active jobs):
    pages at the start, in the middle (a cursor), of one user, of the history and where it
    meets the active jobs; one active and one finished job."""
    middle, finished = f"j{n + n // 2}", n
    return [
        ("queue page", requests.queue, {"limit": 50}),
        ("queue page after a cursor", requests.queue, {"limit": 50, "after": middle}),
        ("queue page of one user", requests.queue, {"limit": 50, "user": "alice"}),
        ("status --all page", requests.status, {"limit": 50, "all": True}),
        (
            "status --all page after a cursor",
            requests.status,
            {"limit": 50, "all": True, "after": f"j{finished // 2}"},
        ),
        (
            "status --all page of active jobs",
            requests.status,
            {"limit": 50, "all": True, "after": f"j{finished}"},
        ),
        ("status of an active job", requests.status, {"job_id": middle}),
        ("status of a finished job", requests.status, {"job_id": f"j{finished // 2}"}),
        ("queue first screen", requests.queue, {"heads": 10}),
        ("nodes", requests.nodes, {}),
        ("submit, pass, cancel, pass", churn, {}),  # last: it adds a finished job
    ]


def churn(c: Coordinator, rid: bytes, msg: dict[str, Any]) -> Any:
    """Two passes, each telling one job's news (its history: ``Timeline``)."""
    job = requests.submit(c, rid, {"argv": ["x.py"], "workers": 1, "id": 1})["job_id"]
    c._pass()
    reply = requests.cancel(c, rid, {"job_id": job})
    c._pass()
    return reply


@pytest.fixture(scope="module")
def small_and_large(tmp_path_factory: pytest.TempPathFactory) -> tuple[Coordinator, Coordinator]:
    small = crowd(tmp_path_factory.mktemp("small"), SMALL, SMALL)
    large = crowd(tmp_path_factory.mktemp("large"), LARGE, LARGE)
    yield small, large
    small.store.close()
    large.store.close()


@pytest.mark.slow  # builds 20,000 jobs
def test_finished_jobs_leave_memory_for_the_archive(
    small_and_large: tuple[Coordinator, Coordinator],
) -> None:
    _, large = small_and_large
    assert len(large.book.records) == LARGE and len(large.active.numbers) == LARGE
    assert "j8" not in large.book.records
    view = requests.status(large, b"", {"job_id": "j8"})["job"]
    assert (view["state"], view["argv"], view["owner"]) == ("cancelled", ["train.py", "7"], "alice")
    # a resent submit of a finished job is still that job
    again = {"argv": ["train.py"], "workers": 1, "key": "k7"}
    large.peer = Peer(user="alice")
    assert requests.submit(large, b"", again) == {"job_id": "j8", "duplicate": True}
    large.peer = Peer(user="alice", admin=True)


@pytest.mark.parametrize("which", range(11))
def test_a_page_costs_the_same_at_10000_jobs(
    small_and_large: tuple[Coordinator, Coordinator], which: int
) -> None:
    small, large = small_and_large
    name, handler, small_msg = requests_at(SMALL)[which]
    _, _, large_msg = requests_at(LARGE)[which]
    small_work, small_reply = work(small, handler, small_msg)
    large_work, large_reply = work(large, handler, large_msg)
    pages = [r.get("jobs", [r.get("job")]) for r in (small_reply, large_reply)]
    assert [len(p) for p in pages] == [len(pages[1])] * 2, name  # pages of the same size
    assert large_work <= SLACK * small_work, f"{name}: {large_work} against {small_work}"


def on_nodes(state: Path, nodes: int, sent: list[bytes]) -> Coordinator:
    """A small crowd (its 4 running jobs on n1) whose executor has ``nodes`` more agents
    (what it sends them: their routes into ``sent``)."""
    c = crowd(state, 10, 0)
    c.executor.send = lambda route, frame: sent.append(route)  # type: ignore[attr-defined]
    for i, name in enumerate(["n1", *(f"m{k:04d}" for k in range(nodes))]):
        msg = {"node": name, "gpus": [{"index": 0}], "running": []}
        c.executor.on_register(f"r{i}".encode(), msg, 0.0)  # type: ignore[attr-defined]
    return c


def test_logs_cost_the_same_on_1000_nodes(tmp_path: Path) -> None:
    """``logs JOB`` asks the executor about the job's nodes only (it built every node's view
    to find which were connected)."""
    sent: list[bytes] = []
    small = on_nodes(tmp_path / "small", 10, sent)
    large = on_nodes(tmp_path / "large", 1000, sent)
    msg = {"job_id": "j1", "id": 7}
    assert small.book.records["j1"].nodes_ever == ["n1"]
    small_work, _ = work(small, requests.logs, msg)
    large_work, _ = work(large, requests.logs, msg)
    assert sent == [b"r0", b"r0"]  # n1 alone was asked, by each
    for c in (small, large):
        c.store.close()
    assert large_work <= SLACK * small_work, f"{large_work} against {small_work}"


def on_a_cluster(state: Path, nodes: int) -> Coordinator:
    """A crowd of 40 active jobs (4 run on n1, the rest wait) on a cluster of ``nodes`` more
    4-GPU nodes that are up but drained (they take no new jobs), so that the jobs, their
    places and their reasons are the same whatever ``nodes`` is: only the cluster grows."""
    c = crowd(state, 40, 0)
    with c.atomic():
        for k in range(nodes):
            c.core(events.NodeUp(Node(f"m{k:04d}", (0, 1, 2, 3)), c.clock.now()))
            c.core(events.NodeDrain(f"m{k:04d}", True, c.clock.now()))
    c._pass()
    return c


@pytest.mark.parametrize(
    "name, msg",
    [
        ("status of a waiting job", {"job_id": "j20"}),
        ("status of a running job", {"job_id": "j2"}),
        ("queue first screen", {"heads": 10}),
        ("queue page", {"limit": 50}),
    ],
)
def test_a_view_of_jobs_costs_the_same_on_1000_nodes(tmp_path: Path, name: str, msg: dict) -> None:
    """A view of one job, the first screen and a page read the free GPUs from the
    scheduler's index (``FreeCounts``: its total, its largest node), not from a walk of
    every node (explain built a dict over all of them and walked them for the largest)."""
    small = on_a_cluster(tmp_path / "small", 10)
    large = on_a_cluster(tmp_path / "large", 1000)
    handler = requests.status if "job_id" in msg else requests.queue
    (small_work, small_reply), (large_work, large_reply) = (
        work(c, handler, msg) for c in (small, large)
    )
    for c in (small, large):
        c.store.close()
    pages = [r.get("jobs", [r.get("job")]) for r in (small_reply, large_reply)]
    assert [p["pending"] for p in pages[0]] == [p["pending"] for p in pages[1]], name
    assert large_work <= SLACK * small_work, f"{name}: {large_work} against {small_work}"


def hosts_asked(state: Path, nodes: int) -> list[str]:
    """The nodes whose host the pass asks of the executor when a node joins the scheduler's
    cluster and the next job in line starts there (the whole inventory: a failure)."""
    c = on_nodes(state, nodes, [])
    asked: list[str] = []
    one = c.executor.node
    c.executor.node = lambda name: asked.append(name) or one(name)  # type: ignore[method-assign]
    c.executor.nodes = lambda: pytest.fail("the whole inventory was built")  # type: ignore[method-assign]
    with c.atomic():
        c.core(events.NodeUp(Node("m0000", (0,)), c.clock.now()))
    c._pass()
    c.store.close()
    return asked


def test_a_start_asks_the_hosts_of_its_nodes_only(tmp_path: Path) -> None:
    """The pass that starts a job looks up the hosts of the nodes it takes, not of every
    node (``Coordinator.act`` built a host map over the whole inventory)."""
    assert hosts_asked(tmp_path / "small", 10) == hosts_asked(tmp_path / "large", 1000) == ["m0000"]


def test_a_reply_is_checked_at_a_few_bytecodes_a_value() -> None:
    """The client checks every value of every reply (``bounds.check_value``): a listing of
    12,000 jobs holds about 500,000. Level by level it runs under 32 bytecodes a value (the
    stack of (value, depth) tuples fed by a generator ran 48, and twice the time)."""
    values = [{"a": 1, "b": 2.5, "c": None, "d": "x", "e": [1, 2], "f": {"g": True}}] * 100
    count, _ = counted(lambda: bounds.check_value("reply", values))
    assert count < 32 * (1 + 100 * 10), count


def behind_the_running(state: Path, running: int, policy: str = "tiresias-l") -> Coordinator:
    """``running`` 1-GPU jobs running on ``running // 10`` nodes of 10 GPUs, then 20 waiting
    behind them."""
    opts = Options(bind=f"ipc://{state}/c.sock", state=state, manual_clock=True,
                   allow_root_jobs=True, snapshot_every=10**9,
                   settings=Settings(policy=policy))  # fmt: skip
    c = Coordinator(opts)
    c.peer = Peer(user="alice", admin=True)
    with c.atomic():
        for k in range(running // 10):
            c.core(events.NodeUp(Node(f"n{k}", tuple(range(10))), c.clock.now()))
        for i in range(running + 20):
            requests.enqueue(c, Request(["train.py", str(i)], 1, "alice", key=f"k{i}"), 1)
    c._pass()
    return c


@pytest.mark.parametrize("policy", ["tiresias-l", "best-effort"])
def test_a_waiting_job_deep_in_line_costs_the_same_behind_1000_running(
    tmp_path: Path, policy: str
) -> None:
    """Who is ahead of a waiting job is indexed once per decision (``AheadIndex``, kept until
    the scheduler changes), so a view of a job behind 1,000 running jobs bisects it: it
    walked every running job ahead, at each request. Under a policy that does not preempt,
    every job that holds GPUs is ahead: the policy counts them (it walked every active job
    once a page)."""
    small = behind_the_running(tmp_path / "small", 10, policy)
    large = behind_the_running(tmp_path / "large", 1000, policy)
    costs, views = [], []
    for c in (small, large):
        last = c.sched.policy.waiting_order()[-1][-1]  # the last in line
        requests.status(c, b"", {"job_id": last})  # the first view builds the index
        cost, reply = work(c, requests.status, {"job_id": last})
        costs.append(cost)
        views.append(reply["job"]["pending"])
        c.store.close()
    assert [v["ahead"] for v in views] == [10, 1000]
    assert costs[1] <= SLACK * costs[0], costs


def test_the_first_screen_costs_the_same_behind_1000_running(tmp_path: Path) -> None:
    """The first screen reads each queue's running count and GPUs, and its first running
    jobs in submission order, from the policy (``Policy.holding_per_queue``): it counted
    every running job, one by one, at each request."""
    small = behind_the_running(tmp_path / "small", 10)
    large = behind_the_running(tmp_path / "large", 1000)
    costs, replies, first_running = [], [], []
    for c in (small, large):
        requests.queue(c, b"", {"heads": 10})  # the first view builds the ahead index
        cost, reply = work(c, requests.queue, {"heads": 10})
        costs.append(cost)
        replies.append(reply)
        running = [j.job_id for j in c.sched.jobs() if j.state is JobState.RUNNING]
        first_running.append(running[:10])  # the jobs walked in submission order
        c.store.close()
    assert [r["queues"][0]["running"] for r in replies] == [10, 1000]
    assert [r["queues"][0]["running_gpus"] for r in replies] == [10, 1000]
    heads = [[j["job_id"] for j in r["jobs"] if j["state"] == "running"] for r in replies]
    assert heads == first_running
    assert costs[1] <= SLACK * costs[0], costs
