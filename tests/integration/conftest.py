"""Fixtures the integration tests share: the real key and the real texts the wrappers embed."""

from __future__ import annotations

import pytest

from espew_integrations import WatermarkKey
from tests.support import mixed_texts, real_key


@pytest.fixture(scope="session")
def key() -> WatermarkKey:
    """A key generated on real texts with the real offline model (once per process)."""
    return real_key()


@pytest.fixture(scope="session")
def texts() -> list[str]:
    """Real reviews, triggered and plain interleaved; one list for the session: never changed."""
    return list(mixed_texts())
