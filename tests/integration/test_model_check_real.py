"""The model check on the real offline models (the synthetic cases: tests/unit/test_model_check.py).

The unit tier measures its fingerprint on canary embeddings read from
``tests/data/minilm_canaries.json``; these tests prove that file is what the offline
MiniLM answers, and that a key made on it refuses another real 384-dimensional model.
"""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations.core.ground import errors
from espew_integrations.core.keys.model_check import CANARY_TEXTS, ModelGuard
from espew_integrations.offline.embedders import minilm, paraphrase_minilm_l3
from tests.unit.test_model_check import _canaries, _key


def test_the_recorded_canaries_are_what_the_offline_minilm_answers():
    rows = np.asarray(minilm()(list(CANARY_TEXTS)), dtype=np.float32)
    assert rows.shape == _canaries().shape == (len(CANARY_TEXTS), 384)
    # The same model, runtime and inputs; a tolerance only for another CPU's kernels.
    assert np.allclose(rows, _canaries(), atol=1e-5)
    ModelGuard(_key(), minilm()).check()  # the real model passes its own key's check


def test_another_384_dimensional_model_is_refused():
    """The issue's example: a key made on all-MiniLM-L6-v2 served with paraphrase-MiniLM-L3."""
    with pytest.raises(errors.KeyModelMismatchError, match="belongs to another model"):
        ModelGuard(_key(), paraphrase_minilm_l3()).check()
