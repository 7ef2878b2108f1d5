"""Prometheus metrics of the coordinator, on their own registry so that several coordinators
(tests, embedded ``tiresias-run``) can live in one process."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from coordinator.core.model import JobState
from coordinator.core.scheduler import Scheduler
from coordinator.service.executor import NodeInfo


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_length = Gauge(
            "tiresias_queue_length", "Waiting jobs per priority queue", ["queue"], registry=r
        )
        self.running_jobs = Gauge("tiresias_running_jobs", "Jobs running or preempting", registry=r)
        self.gpus_in_use = Gauge("tiresias_gpus_in_use", "GPUs held by jobs", registry=r)
        self.gpus_total = Gauge("tiresias_gpus_total", "GPUs of nodes that are up", registry=r)
        self.nodes_up = Gauge("tiresias_nodes_up", "Registered live nodes", registry=r)
        self.preemptions = Counter("tiresias_preemptions", "Preemptions decided", registry=r)
        self.lost_gpu_seconds = Counter(
            "tiresias_lost_gpu_seconds",
            "GPU-seconds of work preempted without a checkpoint (run again on restart)",
            registry=r,
        )
        self.starts = Counter("tiresias_starts", "Job starts and resumes decided", registry=r)
        self.pass_latency = Histogram(
            "tiresias_scheduling_pass_seconds",
            "Duration of one scheduling pass",
            buckets=(1e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.5, 1.0),
            registry=r,
        )
        self.messages = Counter(
            "tiresias_messages", "Valid messages received", ["type"], registry=r
        )
        self.bad_messages = Counter(
            "tiresias_bad_messages",
            "Messages refused (malformed, unknown type or job…)",
            registry=r,
        )

        self._by_type: dict[str, Counter] = {}

    def count(self, msg_type: str) -> None:
        """Count one valid message (label children cached: this runs per message)."""
        child = self._by_type.get(msg_type)
        if child is None:
            child = self._by_type[msg_type] = self.messages.labels(msg_type)
        child.inc()

    def update(self, sched: Scheduler, nodes: Iterable[NodeInfo]) -> None:
        """Set the gauges from the core's jobs and the executor's nodes."""
        queues: dict[int, int] = {}
        running = used = 0
        for job in sched.jobs():  # active jobs come first
            if job.state.finished:
                break
            if job.state is JobState.WAITING:
                queues[job.queue] = queues.get(job.queue, 0) + 1
            elif job.state in (JobState.RUNNING, JobState.PREEMPTING):
                running += 1
                used += job.gpus
        for q in range(sched.config.queues):
            self.queue_length.labels(str(q)).set(queues.get(q, 0))
        self.running_jobs.set(running)
        self.gpus_in_use.set(used)
        up = [n for n in nodes if n.connected]
        self.nodes_up.set(len(up))
        self.gpus_total.set(sum(len(n.gpus) for n in up))

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve /metrics over HTTP from a daemon thread."""
        start_http_server(port, addr=addr, registry=self.registry)
