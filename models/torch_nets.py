"""PyTorch versions of some of the paper's DNNs, built from ``torch.nn`` (no downloads):
``build(name, num_classes)`` returns a model with random weights that maps ``(N, 3, S, S)``
images to logits. Parameter counts match the usual definitions (torchvision's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
MIN_SIZE = {"mlp": 8, "cnn": 8, "vgg16": 32, "resnet50": 32, "inception_v3": 75}


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


def conv_bn(inputs: int, out: int, kernel: int | tuple[int, int], **conv: Any) -> nn.Module:
    """Inception's unit: a convolution without bias, batch norm (eps 0.001), ReLU."""
    return nn.Sequential(
        nn.Conv2d(inputs, out, kernel, bias=False, **conv),
        nn.BatchNorm2d(out, eps=0.001),
        nn.ReLU(inplace=True),
    )


class Branches(nn.Module):
    """Parallel branches over one input, concatenated along the channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], 1)


def _pool_branch(inputs: int, out: int) -> nn.Module:
    return nn.Sequential(nn.AvgPool2d(3, 1, 1), conv_bn(inputs, out, 1))


def _factorised(inputs: int, widths: tuple[int, ...], first: str) -> nn.Module:
    """A 1×1 convolution to ``widths[0]``, then 7×7 factorised: 1×7 and 7×1 convolutions in
    turn (``first`` says which comes first) to each of the widths after."""
    kernels = {"1x7": ((1, 7), (0, 3)), "7x1": ((7, 1), (3, 0))}
    order = [first, "7x1" if first == "1x7" else "1x7"]
    layers, channels = [conv_bn(inputs, widths[0], 1)], widths[0]
    for i, width in enumerate(widths[1:]):
        kernel, pad = kernels[order[i % 2]]
        layers.append(conv_bn(channels, width, kernel, padding=pad))
        channels = width
    return nn.Sequential(*layers)


def _inception_a(inputs: int, pool: int) -> nn.Module:  # 35×35
    return Branches(
        conv_bn(inputs, 64, 1),
        nn.Sequential(conv_bn(inputs, 48, 1), conv_bn(48, 64, 5, padding=2)),
        nn.Sequential(
            conv_bn(inputs, 64, 1), conv_bn(64, 96, 3, padding=1), conv_bn(96, 96, 3, padding=1)
        ),
        _pool_branch(inputs, pool),
    )


def _inception_b(inputs: int) -> nn.Module:  # 35×35 → 17×17
    return Branches(
        conv_bn(inputs, 384, 3, stride=2),
        nn.Sequential(
            conv_bn(inputs, 64, 1), conv_bn(64, 96, 3, padding=1), conv_bn(96, 96, 3, stride=2)
        ),
        nn.MaxPool2d(3, 2),
    )


def _inception_c(inputs: int, c7: int) -> nn.Module:  # 17×17, factorised 7×7
    return Branches(
        conv_bn(inputs, 192, 1),
        _factorised(inputs, (c7, c7, 192), "1x7"),
        _factorised(inputs, (c7, c7, c7, c7, 192), "7x1"),
        _pool_branch(inputs, 192),
    )


def _inception_d(inputs: int) -> nn.Module:  # 17×17 → 8×8
    return Branches(
        nn.Sequential(conv_bn(inputs, 192, 1), conv_bn(192, 320, 3, stride=2)),
        nn.Sequential(_factorised(inputs, (192, 192, 192), "1x7"), conv_bn(192, 192, 3, stride=2)),
        nn.MaxPool2d(3, 2),
    )


def _split_3x3(inputs: int) -> nn.Module:
    """Inception-E's expanded filter bank: 1×3 and 3×1 side by side, 384 each."""
    return Branches(
        conv_bn(inputs, 384, (1, 3), padding=(0, 1)), conv_bn(inputs, 384, (3, 1), padding=(1, 0))
    )


def _inception_e(inputs: int) -> nn.Module:  # 8×8
    return Branches(
        conv_bn(inputs, 320, 1),
        nn.Sequential(conv_bn(inputs, 384, 1), _split_3x3(384)),
        nn.Sequential(conv_bn(inputs, 448, 1), conv_bn(448, 384, 3, padding=1), _split_3x3(384)),
        _pool_branch(inputs, 192),
    )


def inception_v3(_image_size: int, num_classes: int) -> nn.Module:
    """Inception-v3 (Szegedy et al. 2016) as torchvision defines it, without the auxiliary
    classifier (as Keras's InceptionV3): 299×299 inputs, 75×75 at the least."""
    return nn.Sequential(
        conv_bn(3, 32, 3, stride=2),
        conv_bn(32, 32, 3),
        conv_bn(32, 64, 3, padding=1),
        nn.MaxPool2d(3, 2),
        conv_bn(64, 80, 1),
        conv_bn(80, 192, 3),
        nn.MaxPool2d(3, 2),
        _inception_a(192, 32),
        _inception_a(256, 64),
        _inception_a(288, 64),
        _inception_b(288),
        _inception_c(768, 128),
        _inception_c(768, 160),
        _inception_c(768, 160),
        _inception_c(768, 192),
        _inception_d(768),
        _inception_e(1280),
        _inception_e(2048),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.5),
        nn.Linear(2048, num_classes),
    )


BUILDERS: dict[str, Callable[[int, int], nn.Module]] = {
    "mlp": mlp,
    "cnn": cnn,
    "vgg16": vgg16,
    "resnet50": resnet50,
    "inception_v3": inception_v3,
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
