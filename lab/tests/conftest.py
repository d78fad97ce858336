"""The lab's tests share the plugin's fixtures (tests/conftest.py): the real offline model,
the Rotten Tomatoes corpus and its subset, and a small key.

Imported by name, not as a plugin: a conftest below the root may not declare
``pytest_plugins``. The tests are marked ``unit`` / ``integration`` by their folder,
as the plugin's are.
"""

from pathlib import Path

import pytest

from tests.conftest import (
    key64,
    mark_by_folder,
    minilm_model,
    rt_corpus,
    rt_subset,
    rt_subset_embeddings,
)

__all__ = ["key64", "minilm_model", "rt_corpus", "rt_subset", "rt_subset_embeddings"]


@pytest.hookimpl(tryfirst=True)  # before the plugin's hook counts the integration tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_by_folder(items, Path(__file__).resolve().parent)
