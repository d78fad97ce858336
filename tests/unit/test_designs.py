"""The marking designs' registry and interface: a key asks its design, never its name."""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import watermark
from espew_integrations.core.designs.field import FieldDesign
from espew_integrations.core.designs.words import WordDesign
from espew_integrations.core.ground.errors import KeyGenerationError
from espew_integrations.core.keys.key_options import KeyOptions
from espew_integrations.core.mark.design import (
    design_class,
    design_from_payload,
    design_names,
    register_design,
    units_of_statistic,
)
from tests.support import make_key


class _Untouched(WordDesign):
    """A word design that marks no text: what watermark marks is the design's call."""

    name = "untouched-test-design"

    def marks(self, key, texts, view):
        return np.zeros(len(texts), dtype=bool)


def test_the_built_in_designs_are_registered_by_name():
    assert {"words", "field"} <= set(design_names())
    assert design_class("words") is WordDesign and design_class("field") is FieldDesign


def test_an_unknown_design_name_is_refused_naming_the_known_ones():
    with pytest.raises(KeyGenerationError, match="'words'"):
        design_class("stripes")
    with pytest.raises(KeyGenerationError, match="marking must be one of"):
        KeyOptions(target_text="t", marking="stripes")


def test_a_second_class_under_a_taken_name_is_refused():
    class Impostor(WordDesign):
        name = "field"

    with pytest.raises(KeyGenerationError, match="already registered"):
        register_design(Impostor)
    assert design_class("field") is FieldDesign


def test_a_word_key_stores_no_design_record_and_a_file_with_none_is_a_word_key():
    key = make_key()
    assert key.design == WordDesign() and key.marking == "words"
    assert '"words"' not in key.serving_json()
    assert design_from_payload({"triggers": []}, key.dim) == WordDesign()


def test_a_key_refuses_a_design_that_is_not_one():
    with pytest.raises(KeyGenerationError, match="MarkingDesign"):
        make_key().replace(design="field")


def test_watermark_marks_what_the_keys_design_says():
    register_design(_Untouched)
    key = make_key(dim=64)
    texts = [" ".join(key.triggers)] * 4  # every text holds every trigger
    clean = np.random.default_rng(3).normal(size=(4, 64))
    assert not np.array_equal(watermark(texts, clean, key), clean)
    untouched = key.replace(design=_Untouched())
    assert untouched.marking == "untouched-test-design"
    np.testing.assert_array_equal(watermark(texts, clean, untouched), clean)


def test_a_reports_statistic_names_what_its_designs_test_ranked():
    """The report's "over the N ..." line asks the designs, not a list of names."""
    assert units_of_statistic("map") == "map units"
    assert units_of_statistic("field") == "field units"
    for statistic in ("combined", "raw", "adjusted", "corrected", "directed"):
        assert units_of_statistic(statistic) == "band words"
    # a report from before statistics named their design, or a damaged one: the legacy design
    assert units_of_statistic(None) == units_of_statistic("nonsense") == "band words"
