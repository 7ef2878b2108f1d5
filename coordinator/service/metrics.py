"""Prometheus metrics of the coordinator, on their own registry so that several coordinators
(tests, embedded ``tiresias-run``) can live in one process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


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

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve /metrics over HTTP from a daemon thread."""
        start_http_server(port, addr=addr, registry=self.registry)
