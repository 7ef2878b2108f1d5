"""The model registry: names, size checks, and parameter counts against the literature."""

from __future__ import annotations

import pytest

import models

# Parameters at the paper's image size with 1000 classes. Literature: AlexNet 61.1M
# (single-tower, as torchvision), VGG16 138.4M, ResNet50 25.6M, Inception-v4 42.7M,
# GoogLeNet 7.0M (no auxiliary heads; 6.8M in the paper is with 3×3 in place of one 5×5).
EXPECTED_PARAMS = {
    "alexnet": 61_100_840,
    "vgg16": 138_357_544,
    "resnet50": 25_636_712,
    "inception_v4": 42_711_400,
    "googlenet": 6_998_552,
}


def test_names_cover_the_paper_models_and_the_test_models() -> None:
    assert set(models.PAPER_NAMES) == {
        "alexnet",
        "vgg16",
        "vgg19",
        "resnet50",
        "resnet101",
        "resnet152",
        "inception_v3",
        "inception_v4",
        "googlenet",
    }
    assert set(models.NAMES) == set(models.PAPER_NAMES) | {"mlp", "cnn"}


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown model 'lenet'.*resnet50"):
        models.build("lenet")


def test_too_small_image_is_refused_before_building() -> None:
    with pytest.raises(ValueError, match="inception_v3 needs image_size >= 75"):
        models.build("inception_v3", image_size=64)


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMS))
def test_parameter_count_matches_the_literature(name: str) -> None:
    import tensorflow as tf

    model = models.build(name)
    assert model.count_params() == EXPECTED_PARAMS[name]
    tf.keras.backend.clear_session()


# vgg19, resnet101 and resnet152 take the same keras.applications path as vgg16/resnet50 and
# only cost time here.
@pytest.mark.parametrize(
    "name", [n for n in models.NAMES if n not in ("vgg19", "resnet101", "resnet152")]
)
def test_model_runs_at_its_smallest_size(name: str) -> None:
    import tensorflow as tf

    size = models.spec(name).min_size
    model = models.build(name, image_size=size, num_classes=7)
    logits = model(tf.zeros((2, size, size, 3)), training=False)
    assert logits.shape == (2, 7)
    tf.keras.backend.clear_session()
