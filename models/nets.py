"""Keras builders for the paper's reference DNNs.

Everything goes through ``tf.keras`` so the same code builds under Keras 3 and, with
``TF_USE_LEGACY_KERAS=1``, under tf_keras (which Horovod's Keras callbacks need). Every model
outputs logits (no softmax) so the training scripts can share one loss.

VGG, ResNet and InceptionV3 come from ``keras.applications`` with ``weights=None`` (nothing is
downloaded). AlexNet, GoogLeNet and InceptionV4 are not in ``keras.applications`` and are written
out here after their papers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

keras = tf.keras
layers = tf.keras.layers

Tensor = Any  # a symbolic Keras tensor


def _input(image_size: int) -> Tensor:
    return keras.Input(shape=(image_size, image_size, 3), name="image")


def mlp(image_size: int, num_classes: int) -> keras.Model:
    """Two hidden layers: a model that builds and steps in milliseconds, for tests."""
    x = inputs = _input(image_size)
    x = layers.Flatten()(x)
    x = layers.Dense(256, activation="relu")(x)
    x = layers.Dense(256, activation="relu")(x)
    outputs = layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, outputs, name="mlp")


def cnn(image_size: int, num_classes: int) -> keras.Model:
    """A small convnet: exercises convolutions and pooling at a test-friendly cost."""
    x = inputs = _input(image_size)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(128, activation="relu")(x)
    outputs = layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, outputs, name="cnn")


def alexnet(image_size: int, num_classes: int) -> keras.Model:
    """AlexNet, single-tower variant (Krizhevsky 2014, as in torchvision): 61.1M parameters."""
    x = inputs = _input(image_size)
    for filters, kernel, strides, pool in (
        (64, 11, 4, True),
        (192, 5, 1, True),
        (384, 3, 1, False),
        (256, 3, 1, False),
        (256, 3, 1, True),
    ):
        x = layers.Conv2D(filters, kernel, strides, padding="same", activation="relu")(x)
        if pool:
            x = layers.MaxPooling2D(3, 2)(x)
    x = layers.Flatten()(x)
    for _ in range(2):
        x = layers.Dropout(0.5)(x)
        x = layers.Dense(4096, activation="relu")(x)
    outputs = layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, outputs, name="alexnet")


def _inception_v1_block(
    x: Tensor, b1: int, b3r: int, b3: int, b5r: int, b5: int, pool: int
) -> Tensor:
    def conv(t: Tensor, filters: int, kernel: int) -> Tensor:
        return layers.Conv2D(filters, kernel, padding="same", activation="relu")(t)

    branches = [
        conv(x, b1, 1),
        conv(conv(x, b3r, 1), b3, 3),
        conv(conv(x, b5r, 1), b5, 5),
        conv(layers.MaxPooling2D(3, 1, padding="same")(x), pool, 1),
    ]
    return layers.Concatenate()(branches)


def googlenet(image_size: int, num_classes: int) -> keras.Model:
    """GoogLeNet / Inception v1 (Szegedy 2015) without the auxiliary heads or LRN: 7.0M."""
    x = inputs = _input(image_size)
    x = layers.Conv2D(64, 7, 2, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(3, 2, padding="same")(x)
    x = layers.Conv2D(64, 1, activation="relu")(x)
    x = layers.Conv2D(192, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(3, 2, padding="same")(x)
    stages = (
        ((64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64)),
        (
            (192, 96, 208, 16, 48, 64),
            (160, 112, 224, 24, 64, 64),
            (128, 128, 256, 24, 64, 64),
            (112, 144, 288, 32, 64, 64),
            (256, 160, 320, 32, 128, 128),
        ),
        ((256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)),
    )
    for i, stage in enumerate(stages):
        if i:
            x = layers.MaxPooling2D(3, 2, padding="same")(x)
        for widths in stage:
            x = _inception_v1_block(x, *widths)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.4)(x)
    outputs = layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, outputs, name="googlenet")


def _conv_bn(
    x: Tensor, filters: int, kernel: int | tuple[int, int], strides: int = 1, padding: str = "same"
) -> Tensor:
    """Conv + BN + ReLU as in TF-slim's Inception (no conv bias, BN without scale)."""
    x = layers.Conv2D(filters, kernel, strides, padding=padding, use_bias=False)(x)
    x = layers.BatchNormalization(scale=False)(x)
    return layers.Activation("relu")(x)


def _chain(x: Tensor, convs: Sequence[tuple[Any, ...]]) -> Tensor:
    for conv in convs:
        x = _conv_bn(x, *conv)
    return x


def _concat(x: Tensor, branches: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
    return layers.Concatenate()([branch(x) for branch in branches])


def _avgpool_conv(filters: int) -> Callable[[Tensor], Tensor]:
    return lambda t: _conv_bn(layers.AveragePooling2D(3, 1, padding="same")(t), filters, 1)


def _maxpool_s2(t: Tensor) -> Tensor:
    return layers.MaxPooling2D(3, 2)(t)


def _inception_v4_stem(x: Tensor) -> Tensor:
    x = _chain(x, [(32, 3, 2, "valid"), (32, 3, 1, "valid"), (64, 3)])
    x = _concat(x, [_maxpool_s2, lambda t: _conv_bn(t, 96, 3, 2, "valid")])
    x = _concat(
        x,
        [
            lambda t: _chain(t, [(64, 1), (96, 3, 1, "valid")]),
            lambda t: _chain(t, [(64, 1), (64, (1, 7)), (64, (7, 1)), (96, 3, 1, "valid")]),
        ],
    )
    return _concat(x, [lambda t: _conv_bn(t, 192, 3, 2, "valid"), _maxpool_s2])


def _inception_v4_a(x: Tensor) -> Tensor:
    return _concat(
        x,
        [
            lambda t: _conv_bn(t, 96, 1),
            lambda t: _chain(t, [(64, 1), (96, 3)]),
            lambda t: _chain(t, [(64, 1), (96, 3), (96, 3)]),
            _avgpool_conv(96),
        ],
    )


def _inception_v4_b(x: Tensor) -> Tensor:
    return _concat(
        x,
        [
            lambda t: _conv_bn(t, 384, 1),
            lambda t: _chain(t, [(192, 1), (224, (1, 7)), (256, (7, 1))]),
            lambda t: _chain(
                t, [(192, 1), (192, (7, 1)), (224, (1, 7)), (224, (7, 1)), (256, (1, 7))]
            ),
            _avgpool_conv(128),
        ],
    )


def _split_1x3_3x1(t: Tensor) -> Tensor:
    return layers.Concatenate()([_conv_bn(t, 256, (1, 3)), _conv_bn(t, 256, (3, 1))])


def _inception_v4_c(x: Tensor) -> Tensor:
    return _concat(
        x,
        [
            lambda t: _conv_bn(t, 256, 1),
            lambda t: _split_1x3_3x1(_conv_bn(t, 384, 1)),
            lambda t: _split_1x3_3x1(_chain(t, [(384, 1), (448, (3, 1)), (512, (1, 3))])),
            _avgpool_conv(256),
        ],
    )


def inception_v4(image_size: int, num_classes: int) -> keras.Model:
    """Inception-v4 (Szegedy 2016): 4×A, reduction A, 7×B, reduction B, 3×C; 42.7M."""
    x = inputs = _input(image_size)
    x = _inception_v4_stem(x)
    for _ in range(4):
        x = _inception_v4_a(x)
    x = _concat(
        x,
        [
            lambda t: _conv_bn(t, 384, 3, 2, "valid"),
            lambda t: _chain(t, [(192, 1), (224, 3), (256, 3, 2, "valid")]),
            _maxpool_s2,
        ],
    )
    for _ in range(7):
        x = _inception_v4_b(x)
    x = _concat(
        x,
        [
            lambda t: _chain(t, [(192, 1), (192, 3, 2, "valid")]),
            lambda t: _chain(t, [(256, 1), (256, (1, 7)), (320, (7, 1)), (320, 3, 2, "valid")]),
            _maxpool_s2,
        ],
    )
    for _ in range(3):
        x = _inception_v4_c(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.2)(x)
    outputs = layers.Dense(num_classes, name="logits")(x)
    return keras.Model(inputs, outputs, name="inception_v4")


def application(cls_name: str) -> Callable[[int, int], keras.Model]:
    """A builder for ``keras.applications.<cls_name>`` with random weights and logits out."""

    def build(image_size: int, num_classes: int) -> keras.Model:
        cls = getattr(keras.applications, cls_name)
        return cls(
            weights=None,
            input_shape=(image_size, image_size, 3),
            classes=num_classes,
            classifier_activation=None,
        )

    build.__name__ = cls_name
    return build
