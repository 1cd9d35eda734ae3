"""Fixtures of the library's tests."""

from __future__ import annotations

import pytest
from parties import World, make_world


@pytest.fixture(scope="session")
def world() -> World:
    return make_world()
