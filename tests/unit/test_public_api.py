"""The package root exports what a user imports; building blocks stay in their modules."""

from __future__ import annotations

import importlib

import pytest

import espew_integrations
from espew_integrations import _MOVED


def test_the_root_exports_at_most_twenty_names_and_each_resolves():
    assert len(espew_integrations.__all__) <= 20
    for name in espew_integrations.__all__:
        assert getattr(espew_integrations, name) is not None


@pytest.mark.parametrize("name", sorted(_MOVED))
def test_a_building_block_is_imported_from_its_module_and_the_old_root_name_warns(name):
    assert name not in espew_integrations.__all__
    home = getattr(importlib.import_module(_MOVED[name]), name)
    with pytest.warns(DeprecationWarning, match=_MOVED[name]):
        assert getattr(espew_integrations, name) is home
