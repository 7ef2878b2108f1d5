"""A small TF ParameterServerStrategy job (in-process cluster: 2 PS, 2 workers, loopback gRPC)
training a VGG-like model (one dominant tensor) and a ResNet-like one (many similar tensors).

Run under ``ibverbs-tap run``, it measures its own per-PS bytes for each model from the tap's
profile and prints S_J next to the value predicted from the variable sizes; without the tap it
only reports steps/s (tools/bench/tap_bench.py runs it both ways).

    ibverbs-tap run -- python tools/bench/tap_tf_job.py --steps 10 --out result.json

With ``TF_CONFIG`` in its environment it serves that cluster's ``worker`` and ``ps`` tasks
(so ``ibverbs-tap profile``/``skew`` can name its peers ps0, ps1 from /proc/PID/environ);
``--hold`` keeps it alive after the results, until its stdin closes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

import ibverbs_tap

# (name, shape) in creation order, which is the order ParameterServerStrategy assigns
# variables to parameter servers round-robin.
VGG_LIKE = [
    ("conv1/kernel", (64, 64)),
    ("conv1/bias", (64,)),
    ("conv2/kernel", (64, 64)),
    ("conv2/bias", (64,)),
    ("fc6/kernel", (64, 4096)),
    ("fc6/bias", (4096,)),
    ("fc8/kernel", (4096, 10)),
    ("fc8/bias", (10,)),
]
RESNET_LIKE = [
    (f"block{k}/{part}", shape)
    for k in range(8)
    for part, shape in (("kernel", (128, 128)), ("gamma", (128,)), ("beta", (128,)))
]
MODELS = {"vgg": VGG_LIKE, "resnet": RESNET_LIKE}
BATCH = 16


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cluster_spec(workers: int, ps: int) -> dict[str, list[str]]:
    """TF_CONFIG's worker and ps tasks if it has them, else free loopback ports."""
    if "TF_CONFIG" in os.environ:
        cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
        return {"worker": list(cluster["worker"]), "ps": list(cluster["ps"])}
    ports = _free_ports(workers + ps)
    return {
        "worker": [f"127.0.0.1:{p}" for p in ports[:workers]],
        "ps": [f"127.0.0.1:{p}" for p in ports[workers:]],
    }


def start_cluster(spec: dict[str, list[str]]) -> tuple[Any, list[str]]:
    workers = len(spec["worker"])
    cluster = tf.train.ClusterSpec(spec)
    # In-process workers share one inter-op pool; with fewer cores than workers + 1 the
    # scheduled functions deadlock waiting for threads (the TF tutorial's setting).
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=workers + 1)
    for job in ("worker", "ps"):
        for i in range(len(spec[job])):
            tf.distribute.Server(
                cluster, job_name=job, task_index=i, config=config, protocol="grpc", start=True
            )
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc")
    return resolver, spec["ps"]


def _forward(kind: str, variables: list[tf.Variable], x: tf.Tensor) -> tf.Tensor:
    if kind == "vgg":
        h = x
        for i in range(0, len(variables), 2):
            h = tf.nn.relu(h @ variables[i] + variables[i + 1])
        return tf.reduce_mean(h)
    h = x
    for i in range(0, len(variables), 3):
        w, gamma, beta = variables[i : i + 3]
        h = h + tf.nn.relu((h @ w) * gamma + beta)
    return tf.reduce_mean(h)


def train(strategy: Any, coordinator: Any, kind: str, steps: int) -> tuple[list[int], float]:
    """Creates the model's variables, runs ``steps`` steps; returns tensor bytes and steps/s."""
    layers = MODELS[kind]
    with strategy.scope():
        variables = [
            tf.Variable(tf.random.normal(shape, stddev=0.01), name=name) for name, shape in layers
        ]
    in_dim = layers[0][1][0]

    @tf.function
    def step() -> tf.Tensor:
        x = tf.random.normal([BATCH, in_dim])
        with tf.GradientTape() as tape:
            loss = _forward(kind, variables, x)
        for v, g in zip(variables, tape.gradient(loss, variables), strict=True):
            v.assign_sub(0.01 * g)
        return loss

    coordinator.schedule(step)  # trace and warm up outside the timed window
    coordinator.join()
    start = time.perf_counter()
    for _ in range(steps):
        coordinator.schedule(step)
    coordinator.join()
    rate = steps / (time.perf_counter() - start)
    return [v.shape.num_elements() * v.dtype.size for v in variables], rate


def _own_profile() -> ibverbs_tap.ProcessProfile | None:
    try:
        return ibverbs_tap.read_process(os.getpid())
    except ibverbs_tap.NotTracedError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--models", default="vgg,resnet")
    parser.add_argument("--out", help="write the results as JSON")
    parser.add_argument("--hold", action="store_true", help="after the results, wait for EOF")
    args = parser.parse_args(argv)

    resolver, ps = start_cluster(cluster_spec(workers=2, ps=2))
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    results: dict[str, Any] = {
        "pid": os.getpid(),
        "ps": ps,
        "traced": _own_profile() is not None,
        "models": {},
    }
    for kind in args.models.split(","):
        before = _own_profile()
        sizes, rate = train(strategy, coordinator, kind, args.steps)
        entry: dict[str, Any] = {
            "tensor_bytes": sizes,
            "steps_per_s": rate,
            "predicted_skew": ibverbs_tap.skew_from_tensor_sizes(sizes, len(ps)),
        }
        after = _own_profile()
        if before is not None and after is not None:
            per_ps = ibverbs_tap.bytes_per_ps([after.since(before)], ps)
            entry["bytes_per_ps"] = per_ps
            entry["measured_skew"] = ibverbs_tap.skew(per_ps)
        results["models"][kind] = entry
        print(
            f"{kind}: {rate:.1f} steps/s, predicted S_J {entry['predicted_skew']:.3f}, "
            f"measured {entry.get('measured_skew', float('nan')):.3f}",
            flush=True,
        )
    final = _own_profile()
    if final is not None:
        results["bytes_per_ps"] = ibverbs_tap.bytes_per_ps([final], ps)  # since the start
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    if args.hold:
        print("holding until stdin closes", flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
