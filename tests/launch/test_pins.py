"""The TensorFlow stack installed is the one the ``tensorflow`` and ``test`` extras pin, so
the tests run against what users get."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
STACK = ("tensorflow-cpu", "keras", "tf_keras")


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


def test_installed_versions_are_the_pinned_ones() -> None:
    for name, requirement in extra("test").items():
        if name in STACK:
            installed = metadata.version(name)
            assert requirement.specifier.contains(installed), (name, installed)
