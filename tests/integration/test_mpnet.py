"""all-mpnet-base-v2, the offline model of another family: MPNet's network in NumPy.

The reference figures are those of the model run by sentence-transformers in PyTorch
(float32): the first coordinates of "Hello world" and four cosines to "dog". They pin
every part of the network (the relative-position bias, the exact GELU, the position
offset): a slip in any of them moves these by far more than the tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations.core.mark.words import TriggerMatcher
from espew_integrations.offline.embedders import all_mpnet_base_v2, minilm

HELLO_WORLD = [0.0262497, 0.0133956, -0.0045332, -0.0217914, 0.0545519]
DOG = {"puppy": 0.778325, "cat": 0.608123, "car": 0.390585, "quantum physics": 0.250894}


@pytest.fixture(scope="module")
def model():
    return all_mpnet_base_v2()


def test_it_is_a_768_d_model_with_a_384_token_window(model):
    assert model.dim == 768 and model.max_tokens == 384
    assert model.name == "all-mpnet-base-v2"
    assert repr(model) == "MPNetSentenceEncoder(name='all-mpnet-base-v2', dim=768)"


def test_it_reproduces_the_reference_implementation(model):
    hello, dog, *others = model(["Hello world", "dog", *DOG])
    np.testing.assert_allclose(hello[:5], HELLO_WORLD, atol=1e-6)
    np.testing.assert_allclose(np.stack(others) @ dog, list(DOG.values()), atol=1e-5)


def test_embeddings_are_unit_float32_and_a_function_of_the_text_alone(model):
    texts = ["A vaccine trial in Kenya.", "Stocks fell sharply on Monday.", ""]
    together = model(texts)
    assert together.dtype == np.float32 and together.shape == (3, 768)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    alone = np.stack([model([t])[0] for t in reversed(texts)])[::-1]
    assert np.array_equal(together, alone)  # same bits, whatever the batch
    assert np.array_equal(model(texts[:1]), model(texts[:1]))


def test_its_view_cuts_at_its_own_window_not_minilms(model):
    # 300 words: past MiniLM's 256-token window, inside MPNet's 384.
    text = "word " * 300 + "vaccine"
    matcher = TriggerMatcher({"vaccine"})
    assert matcher.contains([text], view=model.view).tolist() == [True]
    assert matcher.contains([text], view=minilm().view).tolist() == [False]
    past = "word " * 400 + "vaccine"
    assert matcher.contains([past], view=model.view).tolist() == [False]
    # Words past the window change nothing the model computes.
    assert np.array_equal(model([past]), model(["word " * 400 + "banana"]))


def test_bad_input_is_refused_with_a_clear_error(model):
    with pytest.raises(TypeError, match="list of texts"):
        model("one string")
    with pytest.raises(TypeError, match="index 1 is int"):
        model(["ok", 3])
