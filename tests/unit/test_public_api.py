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


# ---------------------------------------------------------------------- one address per name
import pkgutil  # noqa: E402
import types  # noqa: E402
from collections import defaultdict  # noqa: E402

#: At most this many modules export one object under one name: the module that owns it,
#: and the package root where users import it (tests/unit/test_addresses.py checks the
#: rest of the rule by reading the sources).
MAX_ADDRESSES = 2


def _modules() -> list[types.ModuleType]:
    """Every importable module of the package but the lab (moving to its own
    distribution) and the ``__main__`` entry points."""
    found = [espew_integrations]
    for info in pkgutil.walk_packages(espew_integrations.__path__, "espew_integrations."):
        if ".lab" in info.name or info.name.endswith("__main__"):
            continue
        try:
            found.append(importlib.import_module(info.name))
        except ImportError:  # an extra that is not installed
            continue
    return found


def test_no_public_name_is_exported_from_more_than_two_modules():
    addresses: dict[tuple[str, int], list[str]] = defaultdict(list)
    for module in _modules():
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name, None)
            if value is not None and not isinstance(value, types.ModuleType):
                addresses[(name, id(value))].append(module.__name__)
    crowded = {
        name: sorted(where) for (name, _), where in addresses.items() if len(where) > MAX_ADDRESSES
    }
    assert not crowded, f"names exported from more than {MAX_ADDRESSES} modules: {crowded}"


def test_a_package_binds_no_name_over_its_submodules():
    """``core.verify`` is the module, not the function ``verify`` bound over it."""
    for module in _modules():
        if not hasattr(module, "__path__"):
            continue
        for info in pkgutil.iter_modules(module.__path__):
            bound = vars(module).get(info.name)
            assert bound is None or isinstance(bound, types.ModuleType), (
                f"{module.__name__}.{info.name} is a {type(bound).__name__}, not its submodule"
            )


def test_the_core_re_exports_nothing_and_suspect_fn_has_one_definition():
    from espew_integrations import core, suspects
    from espew_integrations.core.audit import settings
    from espew_integrations.core.records import requery

    bound = [n for n, v in vars(core).items() if not isinstance(v, types.ModuleType)]
    assert not [n for n in bound if not n.startswith("_")]
    assert suspects.SuspectFn is settings.SuspectFn is requery.SuspectFn
