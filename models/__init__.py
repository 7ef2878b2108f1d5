"""The paper's reference DNNs as Keras models, plus tiny ones for tests.

``models.build(name)`` returns an uncompiled ``tf.keras.Model`` with random weights that outputs
logits. TensorFlow is imported only when a model is built, so the registry itself is cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorflow as tf


@dataclass(frozen=True)
class Spec:
    """How to build one model: its builder in ``models.nets`` and the sizes it accepts.

    ``canonical_size`` is the image size of the model's paper (what parameter counts refer to);
    ``min_size`` is the smallest size it accepts, the training scripts' default for CPU runs.
    """

    builder: str
    canonical_size: int
    min_size: int
    application: bool = False


SPECS: dict[str, Spec] = {
    "mlp": Spec("mlp", 32, 8),
    "cnn": Spec("cnn", 32, 8),
    "alexnet": Spec("alexnet", 224, 64),
    "vgg16": Spec("VGG16", 224, 32, application=True),
    "vgg19": Spec("VGG19", 224, 32, application=True),
    "resnet50": Spec("ResNet50", 224, 32, application=True),
    "resnet101": Spec("ResNet101", 224, 32, application=True),
    "resnet152": Spec("ResNet152", 224, 32, application=True),
    "inception_v3": Spec("InceptionV3", 299, 75, application=True),
    "inception_v4": Spec("inception_v4", 299, 75),
    "googlenet": Spec("googlenet", 224, 32),
}
NAMES: tuple[str, ...] = tuple(SPECS)
PAPER_NAMES: tuple[str, ...] = tuple(n for n in NAMES if n not in ("mlp", "cnn"))


def spec(name: str) -> Spec:
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(NAMES)}") from None


def build(name: str, image_size: int | None = None, num_classes: int = 1000) -> tf.keras.Model:
    """Build model ``name`` for ``image_size``² RGB inputs (default: its paper's size)."""
    s = spec(name)
    size = s.canonical_size if image_size is None else image_size
    if size < s.min_size:
        raise ValueError(f"{name} needs image_size >= {s.min_size}, got {size}")
    from models import nets  # TensorFlow loads here, not on ``import models``

    builder = nets.application(s.builder) if s.application else getattr(nets, s.builder)
    return builder(size, num_classes)
