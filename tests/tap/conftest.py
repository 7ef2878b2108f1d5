"""Fixtures for the ibverbs-tap tests (helpers live in helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ibverbs_tap

from .helpers import ScheduleServers


@pytest.fixture
def servers() -> Iterator[ScheduleServers]:
    srv = ScheduleServers(2)
    yield srv
    srv.close()


@pytest.fixture(scope="session")
def tap_lib() -> str:
    return ibverbs_tap.library_path()
