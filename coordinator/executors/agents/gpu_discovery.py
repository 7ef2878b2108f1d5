"""A node's GPUs: NVML's, or a number of virtual ones where a machine has none."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("tiresias.agent")

#: Most virtual GPUs one node may declare.
MAX_VIRTUAL_GPUS = 1024


def discover_gpus(requested: str, dev: Path = Path("/dev")) -> list[dict[str, Any]]:
    """GPUs of this machine: NVML's (``auto``), else ``N`` virtual ones. ``auto`` on a
    machine without NVIDIA devices declares one virtual GPU, so a laptop can run an agent."""
    if requested != "auto":
        try:
            count = int(requested)
        except ValueError:
            raise ValueError(f"--gpus {requested!r}: expected a number or 'auto'") from None
        if not 1 <= count <= MAX_VIRTUAL_GPUS:
            raise ValueError(f"--gpus {count}: a node has 1 to {MAX_VIRTUAL_GPUS} GPUs")
        return [{"index": i, "uuid": f"virtual-{i}", "memory": None} for i in range(count)]
    nvml = nvml_gpus(dev)
    if nvml is None:
        log.warning("no NVIDIA GPU on this machine; declaring 1 virtual GPU (use --gpus N)")
        return discover_gpus("1")
    return nvml


def nvidia_devices(dev: Path = Path("/dev")) -> list[Path]:
    """The NVIDIA GPU device nodes (``/dev/nvidia0``, …): present whenever a driver is."""
    return sorted(p for p in dev.glob("nvidia*") if p.name.removeprefix("nvidia").isdigit())


def nvml_gpus(dev: Path = Path("/dev")) -> list[dict[str, Any]] | None:
    """The machine's GPUs from NVML; None on a machine without NVIDIA GPUs. A machine with
    NVIDIA device nodes but no working NVML is an error: counting its GPUs wrong would
    silently over- or under-commit them."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:
        devices = nvidia_devices(dev)
        if devices:
            raise ValueError(
                f"this machine has NVIDIA GPUs ({', '.join(map(str, devices))}) but NVML "
                f"cannot be loaded ({e}); install the driver's libnvidia-ml, or pass --gpus N"
            ) from None
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            gpus.append(
                {
                    "index": i,
                    "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                    "memory": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                }
            )
        return gpus or None
    finally:
        pynvml.nvmlShutdown()
