"""The TensorFlow and PyTorch stacks installed are the ones the extras (``tensorflow``,
``torch``, ``test``) pin, so the tests run against what users get."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
STACK = ("tensorflow-cpu", "keras", "tf_keras")
TORCH_STACK = ("torch", "lightning")


def extra(name: str) -> dict[str, Requirement]:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    return {r.name: r for r in map(Requirement, extras[name])}


@pytest.mark.parametrize("name", ["tensorflow", "test"])
def test_extras_pin_the_whole_tensorflow_stack(name: str) -> None:
    pinned = extra(name)
    assert set(STACK) <= pinned.keys()
    for package in STACK:  # bounded above: a new minor release is a choice, not an accident
        operators = {s.operator for s in pinned[package].specifier}
        assert operators & {"<", "<=", "==", "~="}, pinned[package]


@pytest.mark.parametrize("name", ["torch", "test"])
def test_extras_pin_torch_and_lightning_exactly(name: str) -> None:
    """Any other torch than the pinned one downloads the CUDA build (several GB)."""
    pinned = extra(name)
    assert [str(pinned[p].specifier)[:2] for p in TORCH_STACK] == ["==", "=="]
    assert pinned["torch"].specifier == extra("test")["torch"].specifier


def test_installed_versions_are_the_pinned_ones() -> None:
    for name, requirement in extra("test").items():
        if name in STACK + TORCH_STACK:
            installed = metadata.version(name)
            assert requirement.specifier.contains(installed), (name, installed)
