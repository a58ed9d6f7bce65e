"""What the engine tests share: the int4 path's C library, built here (engine/native.py)."""

from __future__ import annotations

import pytest

from playground.engine import native


@pytest.fixture(scope="session")
def lib():
    """The C library as the engine loads it; the test is skipped where it cannot be built here."""
    library, problem = native.load()
    if library is None:
        pytest.skip(f"no C library here: {problem}")
    return library
