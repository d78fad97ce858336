"""The combined rule holds its level over hundreds of fresh keys against an innocent copy.

A level study (hundreds of whole audits on synthetic keys), so it runs in the
integration tier: the unit tier keeps tests of a second or less.
"""

from __future__ import annotations

import numpy as np

from espew_integrations import verify
from espew_integrations.core.ground.draw import draw_triggers
from tests.unit.test_directed import FaintCopy, sentence_key


def test_fresh_keys_hold_the_level_against_an_innocent_with_the_combined_rule():
    key = sentence_key()
    innocent = FaintCopy(key, carry=0.0, noise=0.1)
    rng = np.random.default_rng(7)
    p_values = []
    for _ in range(150):
        salt = rng.bytes(32)
        draw = key.replace(salt=salt, triggers=draw_triggers(salt, key.band, len(key.triggers)))
        p_values.append(verify(innocent, draw, seed=0).p_value)
    p_values = np.array(p_values)
    # Binomial(150, 0.05) exceeds 17 with probability < 1e-3.
    assert (p_values < 0.05).sum() <= 17 and (p_values < 1e-4).sum() == 0
    assert 0.15 < (p_values < 0.5).mean() < 0.6  # not a test that never rejects
