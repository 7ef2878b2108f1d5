"""Gang planning: turn a job request and its GPU allocation into the exact processes to spawn.

The planner decides everything (roles, TF_CONFIG, ports, Horovod rendezvous, the variables
``torchrun`` gives) so that node agents only spawn what they are given. Scripts always start through
``python -m tiresias_launch.exec`` so that unmodified Keras scripts become preemptible and
Horovod rank 0 can host the Gloo rendezvous before the script runs.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiresias_launch import contract as C
from tiresias_launch.contract import RENDEZVOUS_WAIT_SECONDS


@dataclass(frozen=True)
class GangRequest:
    """A job's shape, validated once: what ``tiresias-run --workers N|MIN:MAX [--ps M]
    [--horovod] script.py args…`` asks for. Every worker gets one GPU, so ``gpus`` (the
    core's W_J) is ``workers``; parameter servers and a PS job's chief get none.
    ``min_workers`` makes an elastic gang: each run gets any world in [min_workers,
    workers] the core decides (None: rigid). The submit path builds it (``from_submit``),
    the planner and ``tiresias-run`` read it; nothing else re-checks it."""

    argv: tuple[str, ...]  # script path, then its arguments
    workers: int = 1
    ps: int = 0
    horovod: bool = False
    min_workers: int | None = None

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("'argv' must name a script")
        if self.workers < 1:
            raise ValueError(
                f"'workers' must be >= 1, got {self.workers}: a job needs at least one worker"
            )
        if self.ps < 0:
            raise ValueError(f"'ps' must be >= 0, got {self.ps}")
        if self.ps and self.horovod:
            raise ValueError("'ps' and 'horovod' are exclusive (Horovod is all-reduce)")
        if self.min_workers is not None:
            if not 1 <= self.min_workers <= self.workers:
                raise ValueError(
                    f"'min_workers' must be 1 to 'workers' ({self.workers}), got {self.min_workers}"
                )
            if self.ps and self.min_workers < self.workers:
                raise ValueError(ELASTIC_PS)

    @classmethod
    def from_submit(cls, msg: Mapping[str, Any], max_size: int | None = None) -> GangRequest:
        """The request of a ``submit`` message whose field types the protocol checked; raises
        ValueError naming the field. ``gpus``, when given, must equal ``workers``;
        ``max_size`` caps workers and parameter servers (``--max-job-size``)."""
        low = msg.get("min_workers")
        request = cls(
            tuple(msg["argv"]),
            msg["workers"],
            msg.get("ps") or 0,
            bool(msg.get("horovod")),
            None if low == msg["workers"] else low,  # MIN == MAX: a fixed count
        )
        if msg.get("gpus") not in (None, request.gpus):
            raise ValueError(
                f"'gpus' ({msg['gpus']}) must equal 'workers' ({request.workers}); "
                f"every worker gets one GPU"
            )
        for what, n in (("workers", request.workers), ("ps", request.ps)):
            if max_size is not None and n > max_size:
                raise ValueError(
                    f"'{what}' is {n}, over this coordinator's limit of {max_size} per job "
                    f"(tiresias-coordinator --max-job-size)"
                )
        return request

    @property
    def gpus(self) -> int:
        """GPUs the job holds while it runs at its largest (W_J): one per worker."""
        return self.workers

    @property
    def elastic(self) -> bool:
        """Whether its runs may differ in size (a range with MIN < MAX)."""
        return self.min_workers is not None and self.min_workers < self.workers

    @property
    def mode(self) -> str:
        """How its processes meet; an elastic gang's is its largest world's at every size,
        so its script takes the same path on one worker as on many."""
        if self.horovod:
            return "horovod"
        if self.ps:
            return "ps"
        return "allreduce" if self.workers > 1 else "single"


#: Why a parameter-server job's range is refused: no runtime here resumes one at another size.
ELASTIC_PS = (
    "a parameter-server job takes a fixed number of workers: elastic ranges are for "
    "all-reduce jobs (PyTorch DDP/FSDP2, Lightning, Keras MultiWorkerMirrored, Horovod)"
)


@dataclass(frozen=True)
class ProcessSpec:
    """One process to spawn on ``node``: run ``argv`` with ``env`` layered over the agent's."""

    node: str
    role: str  # chief | worker | ps
    task_index: int
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    gpus: tuple[int, ...] = ()


PortSource = Callable[[str], int]


def free_local_port(_node: str = "localhost") -> int:
    """A port the OS says is free right now on this machine (tests, single-node setups)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plan(
    request: GangRequest,
    job_id: str,
    placement: Mapping[str, Sequence[int]],
    coordinator: str | None,
    checkpoint_root: str | Path,
    restart: int,
    ports: PortSource,
    *,
    hosts: Mapping[str, str] | None = None,
    python: str = sys.executable,
    job_key: str | None = None,
) -> list[ProcessSpec]:
    """Processes for one (re)start of ``job_id``, chief first.

    ``placement`` maps node name → GPU indices (``Allocation.to_wire()``) and must hold
    ``request.gpus``, or for an elastic gang the world the core decided for this run, within
    its range; ``ports(node)`` returns a free TCP port on ``node``;
    ``hosts`` maps node name → address peers use (default: the node name); ``job_key`` is
    the job's identity unique across coordinators (default ``job_id``), which names its
    checkpoint directory ``checkpoint_root/job_key``.
    """
    slots = [(node, gpu) for node in sorted(placement) for gpu in placement[node]]
    low = request.min_workers or request.gpus
    if not low <= len(slots) <= request.gpus:
        asked = f"{low} to {request.gpus}" if request.elastic else f"{request.gpus}"
        raise ValueError(f"placement has {len(slots)} GPUs but the request asks for {asked}")
    if restart < 0:
        raise ValueError(f"restart={restart}: must be >= 0")
    hosts = hosts or {}
    job_key = job_key or job_id
    base = {
        C.JOB_ID: job_id,
        C.JOB_KEY: job_key,
        C.MODE: request.mode,
        C.NUM_WORKERS: str(len(slots)),
        C.NUM_PS: str(request.ps),
        C.CHECKPOINT_DIR: str(Path(checkpoint_root) / job_key),
        C.RESTART_COUNT: str(restart),
        "PYTHONUNBUFFERED": "1",
    }
    if request.elastic:  # absent: rigid (the runtime tells the two apart by it)
        base[C.MAX_WORKERS] = str(request.workers)
    if coordinator:
        base[C.COORDINATOR] = coordinator
    script = (python, "-m", "tiresias_launch.exec", *request.argv)
    server = (python, "-m", "tiresias_launch.server")

    def spec(
        node: str,
        role: str,
        index: int,
        argv: tuple[str, ...],
        gpus: tuple[int, ...],
        extra: Mapping[str, str],
    ) -> ProcessSpec:
        env = {
            **base,
            C.ROLE: role,
            C.TASK_INDEX: str(index),
            C.GPUS: str(len(gpus)),
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)),
            **extra,
        }
        return ProcessSpec(node, role, index, argv, env, gpus)

    def address(node: str) -> str:
        return f"{hosts.get(node, node)}:{ports(node)}"

    if request.mode == "single":
        node, gpu = slots[0]
        [torchrun] = _torchrun(slots, hosts, ports, job_id, restart)
        return [spec(node, "chief", 0, script, (gpu,), torchrun)]

    if request.mode == "horovod":
        return _horovod(request, slots, hosts, ports, spec, script, job_id, restart)

    if request.mode == "allreduce":
        workers = [address(node) for node, _ in slots]
        cluster = {"worker": workers}
        torchruns = _torchrun(slots, hosts, ports, job_id, restart)
        return [
            spec(
                node,
                "chief" if i == 0 else "worker",
                i,
                script,
                (gpu,),
                {"TF_CONFIG": _tf_config(cluster, "worker", i), **torchruns[i]},
            )
            for i, (node, gpu) in enumerate(slots)
        ]

    # Parameter server: the chief (no GPU) drives training; ps and workers only serve.
    nodes = sorted(placement)
    chief_node = slots[0][0]
    ps_nodes = [nodes[j % len(nodes)] for j in range(request.ps)]
    cluster = {
        "chief": [address(chief_node)],
        "ps": [address(n) for n in ps_nodes],
        "worker": [address(n) for n, _ in slots],
    }
    specs = [
        spec(chief_node, "chief", 0, script, (), {"TF_CONFIG": _tf_config(cluster, "chief", 0)})
    ]
    specs += [
        spec(n, "ps", j, server, (), {"TF_CONFIG": _tf_config(cluster, "ps", j)})
        for j, n in enumerate(ps_nodes)
    ]
    specs += [
        spec(n, "worker", i, server, (g,), {"TF_CONFIG": _tf_config(cluster, "worker", i)})
        for i, (n, g) in enumerate(slots)
    ]
    return specs


def _tf_config(cluster: Mapping[str, list[str]], task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def _node_layout(slots: list[tuple[str, int]]) -> dict[str, list[int]]:
    """Each node's GPUs of the gang in rank order; nodes in the order their first rank has
    (a rank's local rank is its GPU's index in its node's list)."""
    per_node: dict[str, list[int]] = {}
    for node, gpu in slots:
        per_node.setdefault(node, []).append(gpu)
    return per_node


def _torchrun(
    slots: list[tuple[str, int]],
    hosts: Mapping[str, str],
    ports: PortSource,
    job_id: str,
    restart: int,
) -> list[dict[str, str]]:
    """What ``torchrun`` gives each rank, so ``init_process_group()`` with its defaults
    works: rank 0's node hosts the store (MASTER_ADDR, MASTER_PORT)."""
    per_node = _node_layout(slots)
    nodes = list(per_node)
    master = slots[0][0]
    common = {
        "WORLD_SIZE": str(len(slots)),
        "MASTER_ADDR": hosts.get(master, master),
        "MASTER_PORT": str(ports(master)),
        "GROUP_WORLD_SIZE": str(len(nodes)),
        "ROLE_NAME": "default",
        "ROLE_WORLD_SIZE": str(len(slots)),
        "TORCHELASTIC_RUN_ID": job_id,
        "TORCHELASTIC_RESTART_COUNT": str(restart),
    }
    return [
        {
            **common,
            "RANK": str(rank),
            "ROLE_RANK": str(rank),
            "LOCAL_RANK": str(per_node[node].index(gpu)),
            "LOCAL_WORLD_SIZE": str(len(per_node[node])),
            "GROUP_RANK": str(nodes.index(node)),
        }
        for rank, (node, gpu) in enumerate(slots)
    ]


def _horovod(
    request: GangRequest,
    slots: list[tuple[str, int]],
    hosts: Mapping[str, str],
    ports: PortSource,
    spec: Callable[..., ProcessSpec],
    script: tuple[str, ...],
    job_id: str,
    restart: int,
) -> list[ProcessSpec]:
    """Horovod ranks with the env ``horovod.runner.gloo_run`` would give them.

    Rank 0's ``tiresias_launch.exec`` hosts the Gloo HTTP rendezvous on the planned port (it
    reads the host layout from TIRESIAS_HOROVOD_HOSTS), so no extra process is needed.
    """
    per_node = _node_layout(slots)
    nodes = list(per_node)
    rendezvous_node = slots[0][0]
    common = {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": hosts.get(rendezvous_node, rendezvous_node),
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(ports(rendezvous_node)),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        # Gloo's default 30 s is shorter than a loaded node's TensorFlow import: ranks that
        # start 40 s apart abort with gloo::IoException (measured here).
        "HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(RENDEZVOUS_WAIT_SECONDS)),
        "HOROVOD_SIZE": str(len(slots)),
        C.HOROVOD_HOSTS: ",".join(f"{hosts.get(n, n)}:{len(per_node[n])}" for n in nodes),
    }
    torchrun = _torchrun(slots, hosts, ports, job_id, restart)
    specs = []
    for rank, (node, gpu) in enumerate(slots):
        local_rank = per_node[node].index(gpu)
        peers = [n for n in nodes if len(per_node[n]) > local_rank]  # same local rank elsewhere
        extra = {
            **common,
            "HOROVOD_RANK": str(rank),
            "HOROVOD_LOCAL_RANK": str(local_rank),
            "HOROVOD_LOCAL_SIZE": str(len(per_node[node])),
            "HOROVOD_CROSS_RANK": str(peers.index(node)),
            "HOROVOD_CROSS_SIZE": str(len(peers)),
            "HOROVOD_HOSTNAME": hosts.get(node, node),
            **torchrun[rank],
        }
        specs.append(spec(node, "chief" if rank == 0 else "worker", rank, script, (gpu,), extra))
    return specs
