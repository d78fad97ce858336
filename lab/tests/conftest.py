"""The lab's tests share the plugin's fixtures (tests/conftest.py): the real offline model,
the Rotten Tomatoes corpus and its subset, and a small key.

Imported by name, not as a plugin: a conftest below the root may not declare
``pytest_plugins``, and the plugin's hooks (the run's embedding store, the unit and
integration markers) already apply to the whole run from the root's ``tests/``.
"""

from tests.conftest import key64, minilm_model, rt_corpus, rt_subset, rt_subset_embeddings

__all__ = ["key64", "minilm_model", "rt_corpus", "rt_subset", "rt_subset_embeddings"]
