"""WatermarkKey.generate on the real model and corpus: the innocent-twin redraw.

The rest of the key's tests run on synthetic embedders in tests/unit/test_key.py.
"""

from __future__ import annotations

from espew_integrations import WatermarkKey
from espew_integrations.core.keys import keygen


def test_generate_redraws_a_key_its_innocent_twin_would_convict(minilm_model, rt_subset):
    kwargs = dict(seed=11, marking="words", n_triggers=20, freq_band=(0.01, 0.015))
    first = WatermarkKey.generate(
        rt_subset.texts, minilm_model, target_text="an unrelated text", twin_check=False, **kwargs
    )
    # A target text made of the (same-seed) first draw's triggers sits close to them in
    # the clean model: that draw fails the twin check, and keygen draws again.
    target_text = " ".join(sorted(first.triggers))
    unchecked = WatermarkKey.generate(
        rt_subset.texts, minilm_model, target_text=target_text, twin_check=False, **kwargs
    )
    assert unchecked.triggers == first.triggers
    assert keygen.twin_p_value(unchecked) < 1e-3
    key = WatermarkKey.generate(rt_subset.texts, minilm_model, target_text=target_text, **kwargs)
    assert key.info["twin_redraws"] >= 1
    assert key.salt != first.salt and key.triggers != first.triggers
    assert key.info["twin_p_value"] == keygen.twin_p_value(key) >= 1e-3
    again = WatermarkKey.generate(rt_subset.texts, minilm_model, target_text=target_text, **kwargs)
    assert again.salt == key.salt  # the redraw is seeded too
    ok = WatermarkKey.generate(
        rt_subset.texts, minilm_model, target_text="Acme Embeddings, licensed vectors", **kwargs
    )
    assert ok.info["twin_p_value"] > 1e-3 and ok.info["twin_redraws"] == 0
