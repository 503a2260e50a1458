"""Fixtures for the Fleet plugin tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_helpers import HttpBookings, HttpShapes


@pytest.fixture
def http_bookings(tmp_path: Path) -> Iterator[HttpBookings]:
    (tmp_path / "bookings").mkdir()
    server = HttpBookings(tmp_path / "bookings")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def http_shapes() -> Iterator[HttpShapes]:
    server = HttpShapes()
    try:
        yield server
    finally:
        server.stop()
