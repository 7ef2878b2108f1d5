"""PACKLIMIT learned from (skew, placement, iteration time) history by logistic regression."""

from __future__ import annotations

import pytest

from coordinator.core.packlimit import (
    Observation,
    PackLimit,
    fit_logistic,
    learn_packlimit,
    samples,
)
from coordinator.core.placement import DEFAULT_PACKLIMIT


def _history(points: list[tuple[float, float]]) -> list[Observation]:
    """One job per (skew, spread/packed iteration-time ratio), seen both ways."""
    obs = []
    for i, (skew, ratio) in enumerate(points):
        obs.append(Observation(f"job{i}", skew, "packed", 1.0))
        obs.append(Observation(f"job{i}", skew, "spread", ratio))
    return obs


def test_samples_pair_placements_of_the_same_key() -> None:
    obs = [
        Observation("vgg", 0.9, "packed", 1.0),
        Observation("vgg", 0.9, "spread", 1.6),
        Observation("vgg", 0.9, "spread", 1.4),
        Observation("resnet", 0.3, "packed", 1.0),
        Observation("resnet", 0.3, "spread", 1.02),  # within the margin: packing did not help
        Observation("alone", 0.5, "packed", 1.0),  # never spread: no sample
    ]
    assert samples(obs) == [(0.3, False), (0.9, True)]


def test_threshold_separates_the_classes() -> None:
    obs = _history(
        [
            (0.2, 1.0),
            (0.3, 1.01),
            (0.45, 0.99),
            (0.55, 1.0),
            (0.75, 1.3),
            (0.8, 1.5),
            (0.9, 1.8),
            (0.95, 2.0),
        ]
    )
    limit = learn_packlimit(obs)
    assert 0.55 < limit < 0.75
    w, b = fit_logistic(samples(obs))
    assert w > 0 and -b / w == pytest.approx(limit)


def test_overlapping_classes_give_the_p_half_point() -> None:
    # Symmetric overlap around 0.6: the fitted p = 0.5 crossing sits at 0.6.
    obs = _history([(0.4, 1.0), (0.5, 1.0), (0.55, 1.5), (0.65, 1.0), (0.7, 1.5), (0.8, 1.5)])
    assert learn_packlimit(obs) == pytest.approx(0.6, abs=0.01)


def test_default_until_history_can_tell() -> None:
    assert learn_packlimit([]) == DEFAULT_PACKLIMIT
    few = _history([(0.2, 1.0), (0.9, 2.0), (0.3, 1.0)])
    assert learn_packlimit(few) == DEFAULT_PACKLIMIT  # 3 < min_samples
    one_class = _history([(0.2, 2.0), (0.5, 2.0), (0.7, 2.0), (0.9, 2.0)])
    assert learn_packlimit(one_class, default=0.42) == 0.42
    backwards = _history([(0.2, 2.0), (0.3, 2.0), (0.8, 1.0), (0.9, 1.0)])
    assert learn_packlimit(backwards) == DEFAULT_PACKLIMIT  # contradicts the model


def test_running_packlimit() -> None:
    pl = PackLimit(default=0.5, min_samples=2)
    assert pl.value == 0.5
    for key, skew, packed, spread in (("a", 0.3, 1.0, 1.0), ("b", 0.9, 1.0, 2.0)):
        pl.observe(key, skew, "packed", packed)
        pl.observe(key, skew, "spread", spread)
    assert 0.3 < pl.value < 0.9


def test_observation_validation() -> None:
    with pytest.raises(ValueError, match="placement"):
        Observation("a", 0.5, "diagonal", 1.0)
    with pytest.raises(ValueError, match="skew"):
        Observation("a", 1.5, "packed", 1.0)
    with pytest.raises(ValueError, match="iter_time"):
        Observation("a", 0.5, "packed", 0.0)
