"""GPU discovery on a machine without NVML (this one): virtual GPUs where there are no NVIDIA
devices, and a refusal where device nodes say GPUs exist but NVML cannot count them."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.executors.agents.gpu_discovery import discover_gpus, nvidia_devices, nvml_gpus


def test_a_machine_without_nvidia_devices_declares_one_virtual_gpu(tmp_path: Path) -> None:
    (tmp_path / "nvidiactl").touch()  # control nodes alone are not GPUs
    assert nvidia_devices(tmp_path) == []
    assert nvml_gpus(tmp_path) is None
    assert discover_gpus("auto", tmp_path) == [{"index": 0, "uuid": "virtual-0", "memory": None}]


def test_nvidia_devices_without_nvml_are_an_error_not_a_guess(tmp_path: Path) -> None:
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert [p.name for p in nvidia_devices(tmp_path)] == ["nvidia0", "nvidia1"]
    with pytest.raises(ValueError, match=r"NVIDIA GPUs .*nvidia0.*nvidia1.* NVML cannot be loaded"):
        discover_gpus("auto", tmp_path)
    assert len(discover_gpus("2", tmp_path)) == 2  # an explicit count needs no NVML


def test_nvml_is_part_of_the_base_install() -> None:
    import pynvml

    assert pynvml.nvmlInit  # present, even where the driver library is not
