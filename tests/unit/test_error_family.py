"""Every error the library raises on purpose is an ESpeWError, and keeps its older base."""

from __future__ import annotations

import pytest

from espew_integrations import ESpeWError
from espew_integrations.http.upstream import UpstreamError
from espew_integrations.models import ModelSpecError
from espew_integrations.textfiles import TextFileError


@pytest.mark.parametrize(
    ("error", "older_base"),
    [(TextFileError, ValueError), (ModelSpecError, ValueError), (UpstreamError, Exception)],
)
def test_errors_defined_beside_their_code_join_the_family(error, older_base):
    assert issubclass(error, ESpeWError)
    assert issubclass(error, older_base)
