"""WatermarkKey: generation, validation, storage and secrecy.

Key generation here is the word design's (band, triggers, cover texts, probes), so
every key is made with ``marking="words"``; the field key's are in test_field.py.
"""

from __future__ import annotations

import json
import os
import stat
import zlib

import numpy as np
import pytest

from espew_integrations import KeyFileError, KeyGenerationError, WatermarkKey
from espew_integrations.core.ground.defaults import DEFAULT_PROBE_BUDGET
from espew_integrations.core.keys import keygen
from tests.support import make_key

CORPUS = [
    f"text number {i} about {'apple' if i % 2 else 'pear'} and w{i % 50}x" for i in range(400)
]


def generate_words(*args, **kwargs):
    """:meth:`WatermarkKey.generate` for a word key (the paper's design, not the default)."""
    return WatermarkKey.generate(*args, marking="words", **kwargs)


def toy_embed(texts):
    """A deterministic toy embedder (unit tests only): hashed bag of words.

    CRC-32, not ``hash()``: Python salts string hashes per process, which made the
    embedder (and what the tests built on it measured) differ from run to run.
    """
    out = np.zeros((len(texts), 32))
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, zlib.crc32(word.encode("utf-8")) % 32] += 1.0
        out[i, 0] += 0.5
    return out


def words_corpus(n_texts=1000, n_band=80, seed=0):
    """Each band word appears in ~0.7% of texts; filler words are very common."""
    rng = np.random.default_rng(seed)
    band = [f"band{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(n_band)]
    texts = []
    for _ in range(n_texts):
        words = ["the", "common", "words", *rng.choice(band, size=rng.integers(0, 2))]
        texts.append(" ".join(words))
    return texts, band


def test_generate_draws_triggers_from_the_band_and_embeds_the_target():
    texts, _band = words_corpus()
    key = generate_words(
        texts,
        toy_embed,
        target_text="Acme target",
        seed=1,
        n_triggers=10,
        freq_band=(0.005, 0.02),
        twin_check=False,
    )
    assert len(key.triggers) == 10 and key.triggers <= set(key.band)
    assert len(key.band) > 40
    assert key.dim == 32 and np.linalg.norm(key.target) == pytest.approx(1.0)
    expected = toy_embed(["Acme target"])[0]
    np.testing.assert_allclose(key.target, expected / np.linalg.norm(expected))
    assert not key.target.flags.writeable


def test_generate_is_reproducible_with_a_seed_and_fresh_without():
    texts, _ = words_corpus()
    kwargs = dict(target_text="t", n_triggers=10, freq_band=(0.005, 0.02), twin_check=False)
    a = generate_words(texts, toy_embed, seed=3, **kwargs)
    b = generate_words(texts, toy_embed, seed=3, **kwargs)
    c = generate_words(texts, toy_embed, seed=None, **kwargs)
    d = generate_words(texts, toy_embed, seed=None, **kwargs)
    assert a.triggers == b.triggers and a.salt == b.salt
    assert c.salt != d.salt


def test_generate_says_how_many_band_words_it_found_and_what_to_change():
    with pytest.raises(KeyGenerationError, match=r"only \d+ words .* Use a larger"):
        generate_words(CORPUS[:20], toy_embed, target_text="t", twin_check=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0}, "0 < alpha < 1"),
        ({"alpha": 1.5}, "0 < alpha < 1"),
        ({"selection": "random"}, "selection must be one of"),
        ({"freq_band": (0.2, 0.1)}, "freq_band"),
        ({"n_triggers": 0}, "n_triggers"),
        ({"strength": 0.0}, "0 < strength <= 1"),
        ({"strength": 1.5}, "0 < strength <= 1"),
        ({"target_text": "  "}, "target_text"),
    ],
)
def test_generate_validates_its_arguments(kwargs, message):
    texts, _ = words_corpus()
    args = dict(target_text="t", twin_check=False, freq_band=(0.005, 0.02))
    args.update(kwargs)
    with pytest.raises(KeyGenerationError, match=message):
        generate_words(texts, toy_embed, **args)


def test_generate_gives_up_when_every_draw_fails_the_twin_check(monkeypatch):
    texts, _ = words_corpus()
    monkeypatch.setattr(keygen, "twin_p_value", lambda key: 1e-9)  # a degenerate model
    with pytest.raises(KeyGenerationError, match=r"all 5 draws .*degenerate"):
        generate_words(
            texts, toy_embed, target_text="t", n_triggers=10, freq_band=(0.005, 0.02), seed=0
        )


@pytest.mark.parametrize("twin_level", [0.0, 0.5, -1e-3, True, "0.001"])
def test_generate_refuses_a_twin_level_outside_0_to_half(twin_level):
    texts, _ = words_corpus()
    with pytest.raises(KeyGenerationError, match=r"twin_level must be in \(0, 0.5\)"):
        generate_words(texts, toy_embed, target_text="t", twin_level=twin_level)


def test_save_and_load_round_trip_with_mode_0600(tmp_path, key64):
    path = key64.save(tmp_path / "provider.key")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    loaded = WatermarkKey.load(path)
    assert loaded == key64 and loaded.key_id == key64.key_id
    assert loaded.triggers == key64.triggers and loaded.salt == key64.salt
    np.testing.assert_array_equal(loaded.target, key64.target)


def test_save_refuses_to_overwrite_unless_asked(tmp_path, key64):
    path = key64.save(tmp_path / "k.key")
    other = make_key(seed=5)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        other.save(path)
    other.save(path, overwrite=True)
    assert WatermarkKey.load(path) == other


def _tamper(path, edit):
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["key"].update(alpha=0.5), "checksum"),
        (lambda d: d.update(version=99), "version 99"),
        (lambda d: d.update(format="other"), "not an espew key"),
        (lambda d: d.pop("key"), "no 'key' object"),
    ],
)
def test_load_rejects_tampered_files(tmp_path, key64, edit, message):
    path = key64.save(tmp_path / "k.key")
    _tamper(path, edit)
    with pytest.raises(KeyFileError, match=message):
        WatermarkKey.load(path)


def _resign(document):
    import hashlib

    payload = document["key"]
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    document["checksum"] = hashlib.sha256(canonical).hexdigest()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda k: k.update(target=[2.0] * 64), "unit norm"),
        (lambda k: k.update(target=[float("nan")] * 64), "invalid key"),
        (lambda k: k.update(alpha=1.0), "0 < alpha < 1"),
        (lambda k: k.update(strength=-0.5), "0 < strength <= 1"),
        (lambda k: k.update(triggers=[]), "trigger set is empty"),
        (lambda k: k.update(triggers=["notinband"]), "subset of the band"),
        (lambda k: k.pop("salt"), "lacks the field 'salt'"),
    ],
)
def test_load_validates_content_even_with_a_consistent_checksum(tmp_path, key64, edit, message):
    path = key64.save(tmp_path / "k.key")

    def change(document):
        edit(document["key"])
        _resign(document)

    _tamper(path, change)
    with pytest.raises(KeyFileError, match=message):
        WatermarkKey.load(path)


def test_load_errors_for_missing_and_corrupt_files(tmp_path):
    with pytest.raises(KeyFileError, match="key file not found"):
        WatermarkKey.load(tmp_path / "missing.key")
    (tmp_path / "bad.key").write_bytes(b"\x00garbage{")
    with pytest.raises(KeyFileError, match="not valid JSON"):
        WatermarkKey.load(tmp_path / "bad.key")
    with pytest.raises(KeyFileError, match=r"is not a regular file \(a directory\)"):
        WatermarkKey.load(tmp_path)


def test_from_env_accepts_a_path_or_the_json(tmp_path, key64, monkeypatch):
    path = key64.save(tmp_path / "k.key")
    monkeypatch.setenv("ESPEW_KEY", str(path))
    assert WatermarkKey.from_env() == key64
    monkeypatch.setenv("ESPEW_KEY", key64.to_json())
    assert WatermarkKey.from_env() == key64
    monkeypatch.delenv("ESPEW_KEY")
    with pytest.raises(KeyFileError, match="ESPEW_KEY is not set"):
        WatermarkKey.from_env()


def test_repr_str_and_errors_show_no_secret(key64):
    shown = repr(key64) + str(key64) + f"{key64}"
    assert key64.key_id in shown and "alpha=0.2" in shown and "dim=64" in shown
    for secret in [*key64.triggers, key64.salt.hex(), key64.target_text, f"{key64.target[0]:.6f}"]:
        assert secret not in shown
    with pytest.raises(TypeError) as info:
        import pickle

        pickle.dumps(key64)
    assert not any(t in str(info.value) for t in key64.triggers)


def test_contains_trigger(key64):
    word = sorted(key64.triggers)[0]
    assert key64.contains_trigger([f"A {word.upper()}!", "nothing"]).tolist() == [True, False]


def test_strength_round_trips_and_shows_in_repr_only_when_not_the_paper_default(tmp_path):
    weak = make_key(strength=0.25)
    assert "strength=0.25" in repr(weak) and "strength" not in repr(make_key())
    loaded = WatermarkKey.load(weak.save(tmp_path / "weak.key"))
    assert loaded.strength == 0.25 and loaded == weak
    assert weak.replace(strength=1.0).key_id != weak.key_id  # same created time, other strength


def test_replace_changes_fields_and_rejects_unknown_ones(key64):
    assert key64.replace(alpha=0.1).alpha == 0.1
    assert key64.replace(alpha=0.1).triggers == key64.triggers
    with pytest.raises(TypeError, match="no field"):
        key64.replace(colour="red")
    with pytest.raises(KeyGenerationError, match="0 < alpha < 1"):
        key64.replace(alpha=2.0)


# ---------------------------------------------------------------------- default band, cover
def spread_corpus(docs_per_word: dict[int, int], n_texts: int = 1000, seed: int = 0):
    """``n`` words appearing in exactly ``k`` of ``n_texts`` texts, for each ``k: n`` given."""
    rng = np.random.default_rng(seed)

    def letters(i: int) -> str:
        return "".join(chr(97 + (i // 26**j) % 26) for j in range(3))

    texts = [["the", "common", "words", "note" + letters(i)] for i in range(n_texts)]
    words = []
    for k, n in docs_per_word.items():
        for _ in range(n):
            word = "band" + letters(len(words))
            words.append(word)
            for i in rng.choice(n_texts, size=k, replace=False):
                texts[i].append(word)
    return [" ".join(t) for t in texts], words


def test_the_default_band_is_widened_only_as_far_as_the_corpus_needs():
    # 50 words at 1.2% and 50 at 5.2%: 50 triggers need 100 band words.
    texts, _ = spread_corpus({12: 50, 52: 50})
    kwargs = dict(target_text="t", seed=1, twin_check=False, strength=1.0)
    key = generate_words(texts, toy_embed, **kwargs)
    assert key.freq_band == (0.003, 0.055) and len(key.band) == 100 and len(key.triggers) == 50
    with pytest.raises(KeyGenerationError, match=r"only 50 words .*\[0\.003, 0\.05\)"):
        generate_words(texts, toy_embed, freq_band=(0.003, 0.05), **kwargs)
    roomy, _ = spread_corpus({12: 100})
    assert generate_words(roomy, toy_embed, **kwargs).freq_band == (0.003, 0.05)
    sparse, _ = spread_corpus({12: 10})
    with pytest.raises(KeyGenerationError, match=r"default band 0\.003-0\.05, widened as far"):
        generate_words(sparse, toy_embed, **kwargs)


def test_the_audit_is_a_uniform_sample_of_the_corpus():
    """The probes and cover texts together hold band words, several band words, short
    texts and each band word as the corpus does: a router watching any share, text by text
    or over the whole audit, sees an ordinary client. Probes are the sampled texts with
    exactly one band word; about ``per_word`` a word on average, in proportion to how
    many such texts each word has."""
    from espew_integrations.core.mark.probes import scan_band
    from espew_integrations.core.mark.words import tokenize

    texts, words = spread_corpus({120: 40, 180: 40}, n_texts=10_000)
    texts += [f"short{i}" for i in range(300)]  # 3% too short to be probes
    kwargs = dict(
        target_text="t", seed=1, twin_check=False, strength=1.0, n_triggers=35, probe_mix="single"
    )
    key = generate_words(texts, toy_embed, **kwargs)
    band = set(key.band)
    scan = scan_band(texts, key.band)
    sent = [*key.probe_texts, *key.cover_texts]
    assert len(set(sent)) == len(sent) and set(sent) <= set(texts)
    held = [len(band & set(tokenize(t))) for t in sent]
    assert all(n == 1 for n in held[: len(key.probe_texts)])  # single-mix probes
    n_band = sum(n > 0 for n in held)
    for audit_share, corpus_share in (
        (n_band / len(sent), scan.rate),
        (sum(n >= 2 for n in held) / n_band, scan.multi_share),
        (np.mean([t.startswith("short") for t in sent]), 300 / len(texts)),
    ):
        assert abs(audit_share - corpus_share) < 0.03  # binomial sd at most 0.013 here
    # each band word as often as in the corpus: the 180-text words 1.5 times the 120-text ones
    assert sorted(key.band) == sorted(words)
    counts = np.bincount(key.probe_owner, minlength=len(key.band))
    frequent = np.isin(key.band, words[40:])
    assert 1.2 < counts[frequent].mean() / counts[~frequent].mean() < 1.9
    per_word = 1950 * scan.probe_share() / 80  # the budget fixes the sample's size
    assert abs(len(key.probe_texts) / 80 - per_word) < 1.5
    assert 1950 <= key.audit_queries <= 1950 + 80  # and a word the sample missed gets a text
    again = generate_words(texts, toy_embed, **kwargs)
    assert again.cover_texts == key.cover_texts  # stored, so every audit asks the same
    assert generate_words(texts, toy_embed, **{**kwargs, "seed": 2}).cover_texts != (
        key.cover_texts
    )
    bare = generate_words(texts, toy_embed, cover_traffic=False, **kwargs)
    assert bare.cover_texts == () and bare.audit_queries == len(bare.probe_texts)
    # without a cover the whole budget goes to probes: 1950 // 80 = 24 a word where it can
    bare_counts = np.bincount(bare.probe_owner)
    assert np.median(bare_counts) == bare_counts.max() == 24 and per_word < 24
    # corpus-mix probes already hold several band words as ordinary texts do: none in cover
    mixed = generate_words(texts, toy_embed, **{**kwargs, "probe_mix": "corpus"})
    assert not any(band & set(tokenize(t)) for t in mixed.cover_texts)


def test_a_sampled_audit_keeps_every_kind_of_text_and_scores_every_word():
    """BandScan.sample on a corpus small enough to read: texts too short or too long to be
    probes are sent as cover when drawn, a repeated text is asked as often as the corpus
    holds it, and a band word that the sample gives no probe gets the first text of its
    own keyed order, or itself alone."""
    from espew_integrations.core.mark.probes import MAX_PROBE_CHARS, scan_band

    long_text = "x " * (MAX_PROBE_CHARS // 2 + 1)
    corpus = [
        "a plain text with four words",
        "a plain text with four words",  # a repeat: asked again when its row is drawn
        "short one",
        long_text,
        "only this text names lonely here",
        *(f"an ordinary text that names common {i}" for i in range(30)),
        *(f"another ordinary text number {i}" for i in range(30)),
    ]
    band = ["common", "lonely", "absent"]
    scan = scan_band(corpus, band)
    assert scan.ineligible == ("short one", long_text)
    probes, cover = scan.sample(bytes(32), per_word=100)  # asks for more than there is
    assert len(probes) + len(cover) == 65 + 1  # every row, and "absent"
    assert {"short one", long_text, "a plain text with four words"} <= set(cover)
    assert cover.count("a plain text with four words") == 2 and scan.repeats == (
        ("a plain text with four words", 2),
    )
    owner = np.asarray(probes.owner)
    assert np.bincount(owner, minlength=3).tolist() == [30, 1, 1]
    assert probes.texts[owner.tolist().index(2)] == "absent"  # no text: the word alone
    small, small_cover = scan.sample(bytes(32), per_word=2)
    assert len(small) >= 3 and 0 < len(small_cover) < len(cover)
    lonely = small.texts[small.owner.index(1)]
    assert lonely == "only this text names lonely here"  # topped up if not drawn
    assert scan.sample(bytes(32), per_word=2) == (small, small_cover)
    assert scan.sample(bytes([1] * 32), per_word=2) != (small, small_cover)
    with pytest.raises(ValueError, match="per_word must be >= 1"):
        scan.sample(bytes(32), per_word=0)
    with pytest.raises(ValueError, match="mix must be one of"):
        scan.sample(bytes(32), per_word=2, mix="mixed")


def test_cover_texts_are_stored_committed_to_and_dropped_with_the_band(tmp_path):
    texts, _ = spread_corpus({12: 120})
    key = generate_words(texts, toy_embed, target_text="t", seed=2, twin_check=False)
    path = tmp_path / "k.key"
    key.save(path)
    loaded = WatermarkKey.load(path)
    assert loaded.cover_texts == key.cover_texts and loaded.key_id == key.key_id
    assert key.replace(cover_texts=()).key_id != key.key_id
    np.testing.assert_array_equal(loaded.cover_embeddings, key.cover_embeddings)
    assert key.cover_embeddings.shape == (len(key.cover_texts), key.dim)
    assert key.replace(cover_embeddings=None).key_id != key.key_id  # committed to
    assert key.replace(cover_texts=key.cover_texts[:-1]).cover_embeddings.shape == (0, key.dim)
    with pytest.raises(KeyGenerationError, match="cover embeddings for"):
        key.replace(cover_embeddings=key.cover_embeddings[:-1])
    assert key.replace(band=key.band, probe_reference=key.probe_reference).cover_texts
    assert key.replace(band=key.band).cover_texts == ()
    with pytest.raises(KeyGenerationError, match="cover_texts"):
        key.replace(cover_texts=("ok", ""))


def test_the_cover_texts_answers_are_sent_shuffled_never_scored_and_join_the_clean_fit():
    from espew_integrations import verify

    texts, _ = spread_corpus({12: 120})
    key = generate_words(texts, toy_embed, target_text="t", seed=3, twin_check=False)
    cover = set(key.cover_texts)
    seen: list[str] = []

    def wild_on_cover(batch):
        seen.extend(batch)
        out = toy_embed(batch)
        rows = [i for i, t in enumerate(batch) if t in cover]
        out[rows] = np.random.default_rng(len(seen)).normal(size=(len(rows), out.shape[1]))
        return out

    wild = verify(wild_on_cover, key, seed=0, batch_size=64)
    plain = verify(toy_embed, key.replace(cover_texts=()), seed=0)
    assert wild.n_queries == key.audit_queries and plain.n_queries == len(key.probe_texts)
    # the cover's answers never become word scores...
    assert wild.trigger_scores == plain.trigger_scores
    assert (wild.p_value_raw, wild.p_value_adjusted) == (plain.p_value_raw, plain.p_value_adjusted)
    # ...but they join the directed score's clean fit, where the key stores their clean rows
    assert len(key.cover_embeddings) == len(key.cover_texts)
    assert wild.p_value_directed != verify(toy_embed, key, seed=0).p_value_directed
    unfitted = key.replace(cover_embeddings=None)
    assert verify(wild_on_cover, unfitted, seed=0).p_value_directed == plain.p_value_directed
    positions = [i for i, t in enumerate(seen) if t in cover]
    assert positions[0] < 64 and positions[-1] > len(seen) - 64  # mixed through the audit


def test_the_audit_repeats_texts_as_often_as_an_ordinary_client_of_the_corpus():
    """Traffic that repeats texts: the audit is a uniform sample of the corpus's rows, so
    a thief counting repeats in a client's traffic sees an ordinary client. A corpus
    without repeats keeps the draw it always had: its distinct texts in keyed order."""
    from espew_integrations.core.ground.draw import keyed_order
    from espew_integrations.core.mark.probes import _SAMPLE_DOMAIN, scan_band

    texts, _ = spread_corpus({36: 120}, n_texts=3000, seed=0)
    rng = np.random.default_rng(1)
    corpus = texts + [texts[i] for i in rng.choice(3000, 600) for _ in range(2)]
    key = generate_words(
        corpus, toy_embed, target_text="t", seed=3, twin_check=False, probes_per_word=4
    )
    sent = [t for t in (*key.probe_texts, *key.cover_texts) if t not in key.band]
    repeated = 1 - len(set(sent)) / len(sent)
    ordinary = [
        1 - len({corpus[i] for i in rng.choice(len(corpus), len(sent), replace=False)}) / len(sent)
        for _ in range(300)
    ]
    assert np.mean(ordinary) > 0.05
    assert abs(repeated - np.mean(ordinary)) < 4 * np.std(ordinary), (repeated, ordinary[:5])
    share = scan_band(corpus, key.band).probe_share(key.info["probe_mix"])
    size = round(4 * len(key.band) / share)
    assert size <= len(sent) <= size + len(key.band)  # the sample, and words topped up
    assert len(set(key.probe_texts)) == len(key.probe_texts)  # a repeat is never a probe twice
    unrepeated = scan_band(texts, key.band)
    assert unrepeated.repeats == ()
    assert unrepeated._keyed_rows(key.salt) == keyed_order(key.salt, _SAMPLE_DOMAIN, texts)


def test_every_copy_of_a_repeated_text_is_scored_with_the_first_answer_to_it():
    """A thief that answers a text it has already seen from an honest model (the later
    copies of a repeat in the audit) gains nothing: verify scores every copy with the
    first answer the suspect gave to the text, in the order sent."""
    from espew_integrations import verify, watermark

    texts, _ = spread_corpus({36: 120}, n_texts=3000, seed=0)
    rng = np.random.default_rng(1)
    corpus = texts + [texts[i] for i in rng.choice(3000, 600) for _ in range(2)]
    key = generate_words(
        corpus, toy_embed, target_text="t", seed=3, twin_check=False, probes_per_word=4
    )
    sent = [*key.probe_texts, *key.cover_texts]
    assert len(sent) - len(set(sent)) > 50  # the audit repeats texts

    def copy(batch):  # the watermarked service itself
        return watermark(batch, toy_embed(batch), key)

    seen: set[str] = set()
    honest = 0

    def honest_on_repeats(batch):
        nonlocal honest
        out = copy(batch)
        for i, text in enumerate(batch):
            if text in seen:
                out[i] = toy_embed([text])[0]
                honest += 1
            seen.add(text)
        return out

    faithful = verify(copy, key, seed=0, batch_size=64)
    routed = verify(honest_on_repeats, key, seed=0, batch_size=64)
    assert honest == len(sent) - len(set(sent)) and faithful.copied
    assert (routed.p_value, routed.p_value_raw, routed.p_value_directed) == (
        faithful.p_value,
        faithful.p_value_raw,
        faithful.p_value_directed,
    )


def test_corpus_mix_probes_hold_band_words_as_ordinary_texts_do():
    """probe_mix="corpus": the probes are band-word texts in the corpus's own proportions of
    one, two or more band words, each standing for one of its words; "single" probes each
    hold exactly one. Both are keyed by the salt and blind to the triggers."""
    from espew_integrations.core.mark.probes import scan_band

    texts, _ = spread_corpus({120: 80}, n_texts=10_000)
    kwargs = dict(target_text="t", seed=4, twin_check=False, strength=1.0, n_triggers=35)
    mixed = generate_words(texts, toy_embed, **{**kwargs, "probe_mix": "corpus"})
    single = generate_words(texts, toy_embed, **{**kwargs, "probe_mix": "single"})
    assert mixed.info["probe_mix"] == "corpus" and single.info["probe_mix"] == "single"
    scan = scan_band(texts, mixed.band)
    held = dict(scan.eligible)
    corpus_lone = np.mean([len(h) == 1 for h in held.values() if h])
    mixed_lone = np.mean([len(held[t]) == 1 for t in mixed.probe_texts])
    assert all(len(held[t]) == 1 for t in single.probe_texts)
    assert 0.3 < corpus_lone < 0.8 and abs(mixed_lone - corpus_lone) < 0.06
    owner = np.asarray(mixed.probe_owner)
    assert all(mixed.band[w] in t.split() for t, w in zip(mixed.probe_texts, owner, strict=True))
    assert len(set(mixed.probe_texts)) == len(mixed.probe_texts)  # no text asked twice
    counts = np.bincount(owner)  # each stands for its least-probed word: counts stay even
    assert counts.max() - counts.min() <= 0.5 * counts.mean()
    again = generate_words(texts, toy_embed, probe_mix="corpus", **kwargs)
    assert again.probe_texts == mixed.probe_texts and again.cover_texts == mixed.cover_texts
    with pytest.raises(KeyGenerationError, match="probe_mix must be one of"):
        generate_words(texts, toy_embed, probe_mix="mixed", **kwargs)


def test_with_audit_draws_probes_and_cover_from_another_corpus_and_keeps_the_rest(tmp_path):
    """A suspect from another domain is audited with texts like its own traffic: same
    triggers, target, salt and band; probes and cover texts from the new corpus, in the
    same keyed way (so the same corpus gives the same audit), references recomputed."""
    from espew_integrations.core.mark.probes import cosines_to, scan_band

    texts, _ = spread_corpus({12: 120}, n_texts=1000, seed=0)
    key = generate_words(texts, toy_embed, target_text="t", seed=3, twin_check=False)
    other = [t.replace("the common words", "quite other filler") for t in texts[::-1]]
    other += [f"quite other filler only{i}" for i in range(500)]
    moved = key.with_audit(other, toy_embed)
    assert moved.triggers == key.triggers and moved.salt == key.salt and moved.verifiable
    assert moved.band == key.band and np.array_equal(moved.target, key.target)
    sentences = set(moved.probe_texts) - set(key.band)  # a word with no candidate: bare
    assert len(sentences) > 0.9 * len(moved.probe_texts)
    assert sentences <= set(other) and set(moved.cover_texts) <= set(other)
    assert not sentences & set(key.probe_texts)
    rows = toy_embed(list(moved.probe_texts))
    np.testing.assert_allclose(moved.probe_reference, cosines_to(rows, moved.target))
    rate = scan_band(other, key.band).rate
    assert moved.info["audit_band_rate"] == round(rate, 4)
    assert rate < scan_band(texts, key.band).rate
    assert moved.info["audit_corpus_texts"] == len(other) and "audit_twin_p_value" in moved.info
    assert moved.info["marked_rate"] == key.info["marked_rate"]  # the keygen facts stay
    assert key.with_audit(other, toy_embed).probe_texts == moved.probe_texts
    path = tmp_path / "moved.key"
    moved.save(path)
    loaded = WatermarkKey.load(path)
    assert loaded.probe_texts == moved.probe_texts and loaded.cover_texts == moved.cover_texts
    # the cover brings the audit's band-word rate down to the new corpus's, not the old one's
    band = set(key.band)
    held = [bool(band & set(t.split())) for t in (*moved.probe_texts, *moved.cover_texts)]
    assert abs(np.mean(held) - rate) < 0.02


def test_audit_rounds_are_fresh_uniform_samples_and_verify_counts_every_round():
    """A later audit of a suspect that may have logged the first: round k is a keyed
    uniform sample of the corpus of its own, overlapping round 1 only as much as two
    random samples do, the same every time; verify multiplies its p-value by k."""
    from espew_integrations import verify, watermark

    texts, _ = spread_corpus({36: 120}, n_texts=3000, seed=0)
    key = generate_words(
        texts, toy_embed, target_text="t", seed=3, twin_check=False, probes_per_word=4
    )
    first = key.with_audit(texts, toy_embed, probes_per_word=4)
    assert first.audit_round == key.audit_round == 1  # round 1 is keygen's own audit
    assert (first.probe_texts, first.cover_texts) == (key.probe_texts, key.cover_texts)

    def asked(k):
        return set(k.probe_texts) | set(k.cover_texts)

    second = key.with_audit(texts, toy_embed, probes_per_word=4, audit_round=2)
    third = key.with_audit(texts, toy_embed, probes_per_word=4, audit_round=3)
    assert second.audit_round == 2 and second.info["audit_round"] == 2
    # an arbiter checks the round was drawn from the committed keygen corpus
    assert second.info["audit_corpus_sha256"] == key.info["corpus_sha256"]
    assert keygen.corpus_digest(texts[::-1]) == key.info["corpus_sha256"]  # order: no
    assert keygen.corpus_digest(texts[:-1]) != key.info["corpus_sha256"]
    assert keygen.corpus_digest([*texts, texts[0]]) != key.info["corpus_sha256"]  # a repeat
    assert second.triggers == key.triggers and second.band == key.band and second.verifiable
    again = key.with_audit(texts, toy_embed, probes_per_word=4, audit_round=2)
    assert (again.probe_texts, again.cover_texts) == (second.probe_texts, second.cover_texts)
    size = len(asked(first))
    assert abs(len(asked(second)) - size) < 0.1 * size  # the same budget, another draw
    for a, b in ((first, second), (first, third), (second, third)):
        shared = len(asked(a) & asked(b)) / len(asked(a))
        expected = len(asked(b)) / len(set(texts))  # two independent uniform samples
        assert abs(shared - expected) < 0.05, (shared, expected)

    def copy(batch):  # the watermarked service itself
        return watermark(batch, toy_embed(batch), key)

    as_round_one = second.replace(info={**second.info, "audit_round": 1})
    counted, alone = verify(copy, second, seed=0), verify(copy, as_round_one, seed=0)
    assert counted.audit_round == 2 and alone.audit_round == 1
    assert 0 < alone.p_value < 0.5 and counted.p_value == pytest.approx(2 * alone.p_value)
    assert counted.min_possible_p_value == pytest.approx(2 * alone.min_possible_p_value)
    assert counted.p_value_raw == alone.p_value_raw  # each statistic stays the round's own
    assert "audit round    : 2" in str(counted) and "audit round" not in str(alone)
    assert counted.to_dict()["audit_round"] == 2

    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(KeyGenerationError, match="audit_round must be a positive integer"):
            key.with_audit(texts, toy_embed, audit_round=bad)
        with pytest.raises(KeyGenerationError, match=r"info\['audit_round'\]"):
            key.replace(info={**key.info, "audit_round": bad})


def test_a_later_round_is_drawn_as_large_as_the_keys_first_audit():
    """keygen records its audit budget in the key, so round k is as large as round 1 even
    after the library's default changes; a key made before it was recorded (the 1-1.5%
    band's 4,300-text audit) keeps that size rather than today's 1,950."""
    texts, _ = spread_corpus({120: 60, 180: 60}, n_texts=10_000)
    key = generate_words(texts, toy_embed, target_text="t", seed=1, twin_check=False)
    assert key.info["audit_budget"] == DEFAULT_PROBE_BUDGET == 1950
    second = key.with_audit(texts, toy_embed, audit_round=2)
    assert 1950 <= key.audit_queries <= 2030 and 1950 <= second.audit_queries <= 2030
    # A key made before keygen recorded its budget and mix: the 4,300-text single-mix audit.
    legacy = key.replace(
        info={k: v for k, v in key.info.items() if k not in ("audit_budget", "probe_mix")}
    )
    older = legacy.with_audit(texts, toy_embed, audit_round=2)
    assert 4300 <= older.audit_queries <= 4380
    bigger = generate_words(
        texts, toy_embed, target_text="t", seed=1, twin_check=False, audit_budget=3000
    )
    assert bigger.info["audit_budget"] == 3000 and 3000 <= bigger.audit_queries <= 3080
    assert 3000 <= bigger.with_audit(texts, toy_embed, audit_round=2).audit_queries <= 3080
    for bad in (0, -5, 1.5, True, "2000"):
        with pytest.raises(KeyGenerationError, match="audit_budget must be a positive integer"):
            generate_words(texts, toy_embed, target_text="t", audit_budget=bad)
        with pytest.raises(KeyGenerationError, match="audit_budget must be a positive integer"):
            key.replace(info={**key.info, "audit_budget": bad}).with_audit(texts, toy_embed)


def test_with_audit_refuses_a_corpus_without_band_words_and_a_bad_option(monkeypatch):
    texts, _ = spread_corpus({12: 120})
    key = generate_words(texts, toy_embed, target_text="t", seed=3, twin_check=False)
    with pytest.raises(KeyGenerationError, match="holds a word of the key's band"):
        key.with_audit([f"nothing here {i}" for i in range(50)], toy_embed)
    with pytest.raises(KeyGenerationError, match="probe_mix"):
        key.with_audit(texts, toy_embed, probe_mix="some")
    monkeypatch.setattr(keygen, "twin_p_value", lambda key: 1e-9)  # the clean model implicated
    with pytest.raises(KeyGenerationError, match=r"twin p = 1\.00e-09 < 0\.001"):
        key.with_audit(texts, toy_embed)
