"""Per-model facts the simulator's optional cost models need: skew and checkpoint/restore time.

Philly rows name no model, so these only matter for traces that do (the Tiresias CSV). The
numbers are derived, not measured, so anyone can check them:

- ``skew``: share of the parameters held by the model's largest tensor. With one tensor per
  parameter server this is the share of aggregation traffic on the busiest server, the
  paper's S_J (§3.3). The VGG family and AlexNet are dominated by their first fully
  connected layer; ResNets and Inceptions are not.
- checkpoint and restore time: a fixed part (writing metadata, rebuilding the graph and the
  input pipeline on resume) plus the fp32 parameter bytes at ``STORAGE_MB_S``.
"""

from __future__ import annotations

from dataclasses import dataclass

STORAGE_MB_S = 200.0  # shared-storage bandwidth assumed for checkpoint writes and reads
CHECKPOINT_FIXED_S = 1.0
RESTORE_FIXED_S = 5.0


@dataclass(frozen=True)
class ModelProfile:
    params_m: float  # parameters, millions
    largest_tensor_m: float  # parameters of the largest single tensor, millions

    @property
    def skew(self) -> float:
        return self.largest_tensor_m / self.params_m

    @property
    def size_mb(self) -> float:
        return self.params_m * 4.0  # fp32, 10^6 bytes

    @property
    def checkpoint_s(self) -> float:
        return CHECKPOINT_FIXED_S + self.size_mb / STORAGE_MB_S

    @property
    def restore_s(self) -> float:
        return RESTORE_FIXED_S + self.size_mb / STORAGE_MB_S


# Parameter counts of the standard ImageNet definitions (1000 classes).
PROFILES: dict[str, ModelProfile] = {
    "alexnet": ModelProfile(61.1, 37.7),
    "vgg11": ModelProfile(132.9, 102.8),
    "vgg16": ModelProfile(138.4, 102.8),
    "vgg19": ModelProfile(143.7, 102.8),
    "googlenet": ModelProfile(6.8, 1.0),
    "inception3": ModelProfile(23.8, 2.0),
    "inception4": ModelProfile(42.7, 1.5),
    "resnet50": ModelProfile(25.6, 2.0),
    "resnet101": ModelProfile(44.5, 2.0),
    "resnet152": ModelProfile(60.2, 2.0),
}

# Used for the cost model when a job names no model (every Philly row): a ResNet-50-sized job.
DEFAULT_PROFILE = PROFILES["resnet50"]


def profile(model: str | None) -> ModelProfile | None:
    """The profile of ``model`` (case-insensitive), or None when unknown."""
    return PROFILES.get(model.lower()) if model else None
