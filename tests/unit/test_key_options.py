"""Key options declared once, defaults in one module, no circle between the key and keygen."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import itertools
import zlib
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import KeyGenerationError, KeyRing, WatermarkKey
from espew_integrations.core.ground import defaults
from espew_integrations.core.keys import key, keygen, keyring
from espew_integrations.core.keys.key_options import KeyOptions
from tests.support import make_key

CORE = Path(key.__file__).parent


def toy_embed(texts):
    """A deterministic hashed bag of words (CRC-32: the same in every process)."""
    out = np.zeros((len(texts), 32))
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, zlib.crc32(word.encode("utf-8")) % 32] += 1.0
        out[i, 0] += 0.5
    return out


def words_corpus(n_texts=1000, n_band=80, seed=0):
    """Each band word appears in about 0.7% of the texts; the filler words in all."""
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    band = [f"zz{letters[i // 26]}{letters[i % 26]}" for i in range(n_band)]
    return [
        " ".join(["the", "common", "words", *rng.choice(band, size=rng.integers(0, 2))])
        for _ in range(n_texts)
    ]


SMALL = dict(
    target_text="t",
    marking="words",
    n_triggers=10,
    freq_band=(0.005, 0.02),
    twin_check=False,
    seed=3,
)


# ---------------------------------------------------------------------- one declaration
def test_every_option_has_a_docstring_and_its_default_from_the_defaults_module():
    source = Path(CORE / "key_options.py").read_text(encoding="utf-8")
    body = next(
        node.body
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == "KeyOptions"
    )
    documented = {
        statement.target.id
        for statement, after in itertools.pairwise(body)
        if isinstance(statement, ast.AnnAssign)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    }
    assert documented == set(KeyOptions.names())
    assert KeyOptions.default("alpha") == defaults.DEFAULT_ALPHA
    assert KeyOptions.default("n_triggers") == defaults.DEFAULT_N_TRIGGERS
    assert KeyOptions.default("min_cosine") == defaults.DEFAULT_MIN_COSINE
    assert KeyOptions.default("twin_level") == defaults.DEFAULT_TWIN_LEVEL
    assert KeyOptions.default("probe_mix") == defaults.DEFAULT_PROBE_MIX
    assert KeyOptions.default("audit_budget") == defaults.DEFAULT_PROBE_BUDGET
    with pytest.raises(KeyError, match="no default"):
        KeyOptions.default("target_text")


def test_the_generate_methods_declare_no_option_of_their_own():
    """Options reach keygen only through KeyOptions: no signature repeats them."""
    import inspect

    declared = set(KeyOptions.names())
    for function in (WatermarkKey.generate, keygen.generate, KeyRing.generate):
        parameters = set(inspect.signature(function).parameters)
        assert not parameters & declared, function


def test_each_key_module_exports_only_what_it_defines():
    """One address per name: a key module's ``__all__`` lists no name it imports (the
    defaults live in the defaults module alone, not also in key, keygen and keyring)."""
    for path in sorted(CORE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.asname or alias.name
            for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        }
        module = importlib.import_module(f"{key.__package__}.{path.stem}")
        exported = set(getattr(module, "__all__", ()))
        assert not exported & imported, f"{path.name} re-exports {sorted(exported & imported)}"
        assert all(hasattr(module, name) for name in exported), path.name
    assert "DEFAULT_ALPHA" not in key.__all__ and "DEFAULT_PROBE_BUDGET" not in keygen.__all__
    assert "DEFAULT_RING_FREQ_BAND" not in keyring.__all__


def test_the_constructor_marks_with_keygens_alpha_and_selection_by_default():
    made = make_key(64)
    fields = {k: getattr(made, k) for k in ("triggers", "target", "target_text", "band", "salt")}
    plain = WatermarkKey(**fields)
    assert plain.alpha == defaults.DEFAULT_ALPHA and plain.selection == defaults.DEFAULT_SELECTION


# ---------------------------------------------------------------------- building options
def test_options_check_their_values_and_normalise_a_band_and_a_none_budget():
    options = KeyOptions(
        target_text="t", marking="words", freq_band=[0.01, 0.02], audit_budget=None
    )
    assert options.freq_band == (0.01, 0.02) and options.audit_budget == 1950
    with pytest.raises(KeyGenerationError, match="0 < alpha < 1"):
        KeyOptions(target_text="t", alpha=2.0)
    with pytest.raises(KeyGenerationError, match="not both None"):
        KeyOptions(target_text="t", min_cosine=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.alpha = 0.5  # type: ignore[misc]


def test_the_default_key_is_a_map_key_and_field_and_words_stay_options():
    texts = words_corpus()
    made = WatermarkKey.generate(texts, toy_embed, target_text="t", seed=3, audit_budget=300)
    assert KeyOptions.default("marking") == defaults.DEFAULT_MARKING == "map"
    assert made.marking == "map" and made.design.mark.units == defaults.DEFAULT_FIELD_UNITS
    field = WatermarkKey.generate(
        texts, toy_embed, target_text="t", seed=3, audit_budget=300, marking="field"
    )
    assert field.marking == "field" and field.design.field is not None
    words = WatermarkKey.generate(texts, toy_embed, **SMALL)
    assert words.marking == "words" and words.design.payload() is None and len(words.triggers) == 10


@pytest.mark.parametrize(
    "word_option",
    [
        {"n_triggers": 10},
        {"freq_band": (0.005, 0.02)},
        {"min_cosine": 0.999},
        {"max_band_words": 40},
        {"probes_per_word": 4},
        {"probe_mix": "single"},
        {"cover_traffic": False},
    ],
)
def test_a_word_option_without_marking_words_is_refused_not_ignored(word_option):
    """The map is the default: a word option left with it would be silently dropped."""
    (name,) = word_option
    with pytest.raises(KeyGenerationError, match=rf"{name} only apply to a word key.*'words'"):
        KeyOptions(target_text="t", **word_option)
    with pytest.raises(KeyGenerationError, match=name):
        WatermarkKey.generate(words_corpus(), toy_embed, target_text="t", **word_option)
    assert KeyOptions(target_text="t", marking="words", **word_option).marking == "words"


def test_a_map_key_takes_a_strength_without_a_quality_budget():
    options = KeyOptions(target_text="t", strength=0.5, min_cosine=None)
    assert options.marking == "map" and options.strength == 0.5


def test_the_repr_of_options_shows_neither_the_target_text_nor_the_seed():
    shown = repr(KeyOptions(target_text="our secret target sentence", seed=123456789))
    assert "secret" not in shown and "123456789" not in shown


def test_an_unknown_or_missing_option_is_a_type_error_naming_the_options():
    texts = words_corpus()
    with pytest.raises(TypeError, match=r"unknown key option\(s\) \['n_trigger'\].*n_triggers"):
        WatermarkKey.generate(texts, toy_embed, target_text="t", n_trigger=10)
    with pytest.raises(TypeError, match="target_text"):
        WatermarkKey.generate(texts, toy_embed, n_triggers=10)
    with pytest.raises(TypeError, match="KeyOptions"):
        WatermarkKey.generate(texts, toy_embed, {"target_text": "t"})


def test_an_options_object_and_keyword_arguments_make_the_same_key():
    texts = words_corpus()
    by_words = WatermarkKey.generate(texts, toy_embed, **SMALL)
    by_object = WatermarkKey.generate(texts, toy_embed, KeyOptions(**SMALL))
    overridden = WatermarkKey.generate(
        texts, toy_embed, KeyOptions(**{**SMALL, "alpha": 0.3}), alpha=defaults.DEFAULT_ALPHA
    )
    for other in (by_object, overridden):
        assert other.salt == by_words.salt and other.triggers == by_words.triggers
        assert other.alpha == by_words.alpha == defaults.DEFAULT_ALPHA
        assert other.probe_texts == by_words.probe_texts
    assert isinstance(by_object, WatermarkKey)


def test_a_word_ring_takes_its_own_band_and_audit_defaults_through_the_same_options():
    texts = words_corpus(n_texts=1500, n_band=120)
    ring = KeyRing.generate(
        texts,
        toy_embed,
        target_text="t",
        seed=1,
        n_shared_triggers=6,
        n_tenant_triggers=6,
        freq_band=(0.003, 0.02),
        twin_check=False,
        strength=0.5,
        marking="words",
    )
    assert ring.shared_key.info["audit_budget"] == defaults.DEFAULT_RING_AUDIT_BUDGET
    assert ring.shared_key.freq_band == (0.003, 0.02) and len(ring.shared_key.triggers) == 6
    with pytest.raises(TypeError, match="n_shared_triggers"):
        KeyRing.generate(texts, toy_embed, target_text="t", n_triggers=5)


# ---------------------------------------------------------------------- no circle
def _imported_modules(path: Path) -> set[str]:
    """Every core module ``path`` imports, wherever the import sits (type hints included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module)
            else:
                found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize(
    "module", ["keygen", "key_quality", "key_types", "key_options", "key_storage", "inject"]
)
def test_what_the_key_is_built_from_never_imports_the_key(module):
    path = next(CORE.parent.glob(f"*/{module}.py"))
    assert not [m for m in _imported_modules(path) if m.split(".")[-1] == "key"]


def test_no_key_module_imports_another_modules_underscore_names():
    for path in [*CORE.glob("key*.py"), CORE.parent / "ground" / "defaults.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"


def test_the_key_modules_stay_below_600_lines():
    for path in [*CORE.glob("key*.py"), CORE.parent / "ground" / "defaults.py"]:
        assert len(path.read_text(encoding="utf-8").splitlines()) < 600, path.name
