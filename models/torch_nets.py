"""PyTorch versions of some of the paper's DNNs, built from ``torch.nn`` (no downloads):
``build(name, num_classes)`` returns a model with random weights that maps ``(N, 3, S, S)``
images to logits. Parameter counts match the usual definitions (torchvision's)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

#: VGG-16's convolution widths, "M" for a 2×2 max-pool.
VGG16_WIDTHS = (
    64,
    64,
    "M",
    128,
    128,
    "M",
    256,
    256,
    256,
    "M",
    512,
    512,
    512,
    "M",
    512,
    512,
    512,
    "M",
)
#: Smallest image size each model accepts (the training script's default on CPU).
MIN_SIZE = {"mlp": 8, "cnn": 8, "vgg16": 32, "resnet50": 32}


def mlp(image_size: int, num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Flatten(), nn.Linear(3 * image_size**2, 64), nn.ReLU(), nn.Linear(64, num_classes)
    )


def cnn(_image_size: int, num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, num_classes),
    )


def vgg16(_image_size: int, num_classes: int) -> nn.Module:
    """VGG-16 (configuration D): 13 3×3 convolutions, 3 fully connected layers."""
    layers: list[nn.Module] = []
    channels = 3
    for width in VGG16_WIDTHS:
        if width == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(channels, int(width), 3, padding=1), nn.ReLU(inplace=True)]
            channels = int(width)
    return nn.Sequential(
        *layers,
        nn.AdaptiveAvgPool2d(7),
        nn.Flatten(),
        nn.Linear(512 * 7 * 7, 4096),
        nn.ReLU(inplace=True),
        nn.Dropout(),
        nn.Linear(4096, 4096),
        nn.ReLU(inplace=True),
        nn.Dropout(),
        nn.Linear(4096, num_classes),
    )


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: 1×1, 3×3 (strided), 1×1 ×4, with a projection shortcut."""

    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(inputs, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, out, 1, bias=False),
            nn.BatchNorm2d(out),
        )
        self.shortcut = (
            nn.Sequential(nn.Conv2d(inputs, out, 1, stride, bias=False), nn.BatchNorm2d(out))
            if stride != 1 or inputs != out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet50(_image_size: int, num_classes: int) -> nn.Module:
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    inputs = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(inputs, width, stride if i == 0 else 1))
            inputs = width * 4
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inputs, num_classes)
    )


BUILDERS: dict[str, Callable[[int, int], nn.Module]] = {
    "mlp": mlp,
    "cnn": cnn,
    "vgg16": vgg16,
    "resnet50": resnet50,
}
NAMES = tuple(BUILDERS)


def build(name: str, image_size: int | None = None, num_classes: int = 1000) -> nn.Module:
    """Model ``name`` for ``image_size``² RGB inputs (default: its smallest size)."""
    try:
        builder = BUILDERS[name]
    except KeyError:
        raise ValueError(
            f"unknown PyTorch model {name!r}; choose from {', '.join(NAMES)}"
        ) from None
    size = MIN_SIZE[name] if image_size is None else image_size
    if size < MIN_SIZE[name]:
        raise ValueError(f"{name} needs image_size >= {MIN_SIZE[name]}, got {size}")
    return builder(size, num_classes)
