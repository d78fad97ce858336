"""langchain-tests' standard Embeddings suites, unmodified, on ESpeWEmbeddings over real MiniLM."""

from __future__ import annotations

from typing import Any

from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from espew_integrations.langchain import ESpeWEmbeddings
from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings
from tests.support import real_key


class TestESpeWEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[ESpeWEmbeddings]:
        return ESpeWEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embeddings": MiniLMEmbeddings(), "key": real_key()}

    @property
    def init_from_env_params(self) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
        # key_env names the variable to read (here it holds the key's JSON); the
        # wrapper never reads the environment unless a variable is named.
        key = real_key()
        return (
            {"ESPEW_KEY": key.to_json()},
            {"embeddings": MiniLMEmbeddings(), "key_env": "ESPEW_KEY"},
            {"key_id": key.key_id},
        )


class TestESpeWEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[ESpeWEmbeddings]:
        return ESpeWEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embeddings": MiniLMEmbeddings(), "key": real_key()}
