"""The frameworks: the user extras (``tensorflow``, ``torch``) declare the version ranges
``tools/compat.py`` has run (docs/launcher.md), the ``test`` extra pins the set CI runs, and
the installed versions are those pins."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
#: tf_keras is no extra's: it depends on the GPU ``tensorflow`` wheel, which pip would install
#: beside tensorflow-cpu; it is installed with --no-deps at the version this script names.
INSTALL_SCRIPT = REPO / "tools" / "install-test-deps.sh"
STACK = ("tensorflow-cpu", "keras")
TORCH_STACK = ("torch", "lightning")


def extra(name: str) -> dict[str, Requirement]:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    return {r.name: r for r in map(Requirement, extras[name])}


@pytest.mark.parametrize(("name", "stack"), [("tensorflow", STACK), ("torch", TORCH_STACK)])
def test_user_extras_declare_bounded_ranges_holding_the_pins(
    name: str, stack: tuple[str, ...]
) -> None:
    declared, pins = extra(name), extra("test")
    for package in stack:  # bounded above: a new minor release is a choice, not an accident
        operators = {s.operator for s in declared[package].specifier}
        assert operators & {"<", "<=", "==", "~="}, declared[package]
        pinned = next(s.version for s in pins[package].specifier if s.operator in ("==", ">="))
        assert declared[package].specifier.contains(pinned), (package, pinned)


def test_the_test_extra_pins_what_ci_runs() -> None:
    """CI runs one set: each framework at one version (Keras: one minor release)."""
    pins = extra("test")
    for package in ("tensorflow-cpu", "torch", "lightning"):
        assert str(pins[package].specifier).startswith("=="), pins[package]
    assert {s.operator for s in pins["keras"].specifier} == {">=", "<"}


def test_torch_is_pinned_exactly() -> None:
    """Any other torch than the pinned one downloads the CUDA build (several GB)."""
    assert extra("torch")["torch"].specifier == extra("test")["torch"].specifier


def test_installed_versions_are_the_pinned_ones() -> None:
    for name, requirement in extra("test").items():
        if name in STACK + TORCH_STACK:
            installed = metadata.version(name)
            assert requirement.specifier.contains(installed), (name, installed)


def test_tf_keras_comes_without_a_second_tensorflow() -> None:
    pinned = re.search(r"tf_keras==([0-9.]+)", INSTALL_SCRIPT.read_text())
    assert pinned is not None
    assert "tf_keras" not in extra("tensorflow") and "tf_keras" not in extra("test")
    assert metadata.version("tf_keras") == pinned.group(1)


def test_one_tensorflow_is_installed() -> None:
    """Only tensorflow-cpu: no GPU ``tensorflow`` wheel (615 MB) beside it on a CPU machine.
    A virtualenv made before tf_keras left the extras has both: make it again."""
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("tensorflow")
