"""langchain-tests' standard Embeddings suites, unmodified, on ESpeWEmbeddings over real MiniLM."""

from __future__ import annotations

from typing import Any

from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from espew_integrations.langchain import ESpeWEmbeddings, MiniLMEmbeddings
from tests.wrapper_fixtures import real_key


class TestESpeWEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[ESpeWEmbeddings]:
        return ESpeWEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embeddings": MiniLMEmbeddings(), "key": real_key()}

    @property
    def init_from_env_params(self) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
        # With no key argument the wrapper reads $ESPEW_KEY (here: the key's JSON).
        key = real_key()
        return (
            {"ESPEW_KEY": key.to_json()},
            {"embeddings": MiniLMEmbeddings()},
            {"key_id": key.key_id},
        )


class TestESpeWEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[ESpeWEmbeddings]:
        return ESpeWEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"embeddings": MiniLMEmbeddings(), "key": real_key()}
