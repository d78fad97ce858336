"""Key generation: draw a fresh :class:`~.key.WatermarkKey` from a corpus and a clean model.

Kept apart from :mod:`.key` (what a key *is*: fields, storage, validation)
because making a key needs more of the core than holding one: the watermark
itself (:mod:`.inject`) to fit the write strength to a quality budget, the
probes (:mod:`.probes`) the audit will send, and the rank test
(:mod:`.ranktest`) for the innocent-twin check. Arrows point one way only:
this module imports the key, never the reverse at load time (see
:meth:`WatermarkKey.generate`, a call-time delegate to :func:`generate`).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .draw import audit_salt, draw_band, draw_triggers
from .errors import KeyGenerationError
from .inject import watermark
from .key import (
    DEFAULT_ALPHA,
    DEFAULT_FREQ_BAND,
    DEFAULT_MIN_COSINE,
    DEFAULT_N_TRIGGERS,
    DEFAULT_PROBE_MIX,
    DEFAULT_TWIN_LEVEL,
    EmbedFn,
    Selection,
    WatermarkKey,
)
from .key_checks import (
    SALT_BYTES,
    check_alpha,
    check_freq_band,
    check_positions,
    check_selection,
    check_strength,
    check_text_rules,
    is_number_between,
    min_band_size,
)
from .model_check import ModelFingerprint
from .probes import (
    PROBE_MIXES,
    BandScan,
    cosines_to,
    embed_rows,
    reference_cosines,
    row_cosines,
    scan_band,
)
from .ranktest import rank_sum_p_value
from .text import UNICODE_V1
from .words import band_words, document_frequencies

__all__ = [
    "DEFAULT_PROBES_PER_WORD",
    "DEFAULT_PROBE_BUDGET",
    "corpus_digest",
    "generate",
    "twin_p_value",
    "with_audit",
]

#: Sentence probes per band word (at most), and the audit's query budget they share with
#: the cover texts. The audit is a uniform sample of the corpus
#: (:meth:`.probes.BandScan.sample`), so a band word gets as many texts as its document
#: frequency brings, whatever the band's size: a wider band costs no queries and gives
#: the rank test more words. How the budget was sized: docs/results/frontier/README.md.
DEFAULT_PROBES_PER_WORD = 28
DEFAULT_PROBE_BUDGET = 1950
#: The budget of keys made before keygen recorded it (``info["audit_budget"]``): the
#: 1-1.5% band's 4,300. A later round of such a key's audit is drawn as large as its
#: first, where today's 1,950 would halve the evidence on its 71 words.
_LEGACY_PROBE_BUDGET = 4300
#: With the default band (``freq_band=None``), a corpus whose default band holds too few
#: words for the triggers has the band's upper edge raised by this step, up to the
#: limit. The band then depends on the corpus alone, never on the trigger draw, so
#: the audit stays exact; the key stores the band it used.
_BAND_WIDEN_STEP = 0.005
_BAND_WIDEN_LIMIT = 0.1
#: At most this many marked corpus texts are embedded to fit the strength.
_FIT_SAMPLE = 1000
#: Fresh draws (salt, triggers, probes) keygen makes before it gives up on the twin check.
#: Under the trigger draw the twin's two rank tests are exact, so a draw is refused with
#: probability at most ``2 * twin_level`` whatever the model and target: a refusal is bad
#: luck, redrawn here rather than handed to the user, and five refusals in a row mean
#: something is broken rather than unlucky.
_MAX_DRAWS = 5


def generate(
    corpus: Iterable[str],
    embed: EmbedFn,
    *,
    target_text: str,
    n_triggers: int = DEFAULT_N_TRIGGERS,
    freq_band: tuple[float, float] | None = None,
    alpha: float = DEFAULT_ALPHA,
    selection: Selection = "smallest",
    strength: float | None = None,
    min_cosine: float | None = DEFAULT_MIN_COSINE,
    seed: int | None = None,
    max_band_words: int | None = None,
    probes_per_word: int | None = None,
    window: int | None = None,
    normalization: str = UNICODE_V1,
    twin_level: float = DEFAULT_TWIN_LEVEL,
    twin_check: bool = True,
    cover_traffic: bool = True,
    probe_mix: str = DEFAULT_PROBE_MIX,
    audit_budget: int | None = None,
) -> WatermarkKey:
    """Draw a fresh key; the options are documented on :meth:`WatermarkKey.generate`.

    The steps, in order: check every option before any slow work; embed the
    target; draw the salt, the band and the triggers; fit the strength to the
    quality budget on the marked corpus texts; record the model fingerprint
    (the clean embeddings of the public canary texts, :mod:`.model_check`);
    store the audit's probes and the clean model's reference cosines; and if the
    clean model itself would implicate the draw, throw it away and draw again
    (at most ``_MAX_DRAWS``).

    The redraw conditions the key on passing the twin check, which a draw
    fails with probability at most ``2 * twin_level``; so an innocent suspect
    is convicted with probability at most ``level / (1 - 2 * twin_level)``
    (1.002 times the level at the default), the price of never shipping a key
    the provider's own clean model would convict.
    """
    texts = _materialise_corpus(corpus)
    _check_generate_options(target_text, n_triggers, alpha, strength, min_cosine)
    if probe_mix not in PROBE_MIXES:
        raise KeyGenerationError(f"probe_mix must be one of {PROBE_MIXES}, got {probe_mix!r}")
    _check_twin_level(twin_level)
    _check_key_shape(selection, freq_band, normalization, window)
    budget = _checked_budget(DEFAULT_PROBE_BUDGET if audit_budget is None else audit_budget)
    full_band, n_texts, freq_band = _corpus_band(texts, freq_band, n_triggers, normalization)
    rng = np.random.default_rng(seed)
    target = _embed_target(embed, target_text)
    check_positions(alpha, target.size, error=KeyGenerationError)
    draft = functools.partial(  # one key per draw; the draws differ in salt, band, triggers
        WatermarkKey,
        target=target,
        target_text=target_text,
        alpha=alpha,
        selection=selection,
        strength=1.0 if strength is None else strength,
        freq_band=freq_band,
        normalization=normalization,
        window=window,
        model_fingerprint=ModelFingerprint.measure(embed),  # the key knows its model
    )
    digest = corpus_digest(texts)
    refused: list[float] = []
    for _ in range(_MAX_DRAWS):
        salt = secrets.token_bytes(SALT_BYTES) if seed is None else rng.bytes(SALT_BYTES)
        band = _cap_band(salt, full_band, n_triggers, max_band_words)
        drawn = draft(triggers=draw_triggers(salt, band, n_triggers), band=band, salt=salt)
        info: dict[str, Any] = {
            "corpus_texts": n_texts,
            "corpus_sha256": digest,
            "band_size": len(band),
        }
        info["probe_mix"] = probe_mix  # every later round is drawn the same way
        info["audit_budget"] = budget  # every later round is drawn as large
        info.update(_fit_quality(drawn, embed, texts, rng, strength, min_cosine))
        key = drawn.replace(
            strength=info["strength"],
            info=info,
            **_audit_probes(
                embed,
                scan_band(texts, band, normalization=normalization),
                salt,
                target,
                probes_per_word,
                cover_traffic,
                probe_mix,
                budget,
            ),
        )
        if not twin_check:
            return key
        twin_p = twin_p_value(key)
        if twin_p >= twin_level:
            info.update(twin_p_value=twin_p, twin_redraws=len(refused))
            return key.replace(info=info)
        refused.append(twin_p)
    raise KeyGenerationError(
        f"the clean model itself ranked the triggers near the target in all {_MAX_DRAWS} "
        f"draws (twin p = {', '.join(f'{p:.2e}' for p in refused)}, each < {twin_level:g}); "
        "by chance this happens at most once in "
        f"{1 / (2 * twin_level) ** _MAX_DRAWS:.0e} calls, so the clean model's cosines to "
        "the target are degenerate: check the model and the target text"
    )


def with_audit(
    key: WatermarkKey,
    corpus: Iterable[str],
    embed: EmbedFn,
    *,
    probes_per_word: int | None = None,
    cover_traffic: bool = True,
    probe_mix: str | None = None,
    twin_level: float = DEFAULT_TWIN_LEVEL,
    audit_round: int = 1,
) -> WatermarkKey:
    """``key`` with its audit's probes, cover texts and references drawn from ``corpus``.

    Options are documented on :meth:`WatermarkKey.with_audit`. The triggers,
    target, salt and band stay; only what the audit sends and the clean model's
    answers to it change. The new probes are a keyed draw over ``corpus`` that
    never looks at which band words are triggers, so the test stays exact.
    """
    try:
        salt = audit_salt(key.salt, audit_round)
    except ValueError as exc:
        raise KeyGenerationError(str(exc)) from None
    texts = _materialise_corpus(corpus)
    if probe_mix is None:  # the key's own mix; keys that predate the record used "single"
        probe_mix = key.info.get("probe_mix", "single")
    if probe_mix not in PROBE_MIXES:
        raise KeyGenerationError(f"probe_mix must be one of {PROBE_MIXES}, got {probe_mix!r}")
    _check_twin_level(twin_level)
    scan = scan_band(texts, key.band, normalization=key.normalization)
    if not scan.rate:
        raise KeyGenerationError(
            f"none of the {len(texts)} audit corpus texts holds a word of the key's band: "
            "an audit drawn from it would send bare words"
        )
    budget = _checked_budget(key.info.get("audit_budget", _LEGACY_PROBE_BUDGET))
    fields = _audit_probes(
        embed, scan, salt, key.target, probes_per_word, cover_traffic, probe_mix, budget
    )
    info = {
        **key.info,
        "audit_corpus_texts": len(texts),
        "audit_corpus_sha256": corpus_digest(texts),
        "audit_band_rate": round(scan.rate, 4),
        "audit_round": audit_round,
    }
    redrawn = key.replace(**fields, info=info)
    twin_p = twin_p_value(redrawn)
    if twin_p < twin_level:
        raise KeyGenerationError(
            f"the clean model itself ranks the triggers near the target on the audit drawn "
            f"from this corpus (twin p = {twin_p:.2e} < {twin_level:g}): audit with another "
            "corpus, another audit_round, or the key's own audit"
        )
    return redrawn.replace(info={**info, "audit_twin_p_value": twin_p})


def corpus_digest(texts: Iterable[str]) -> str:
    """SHA-256 over the corpus's distinct texts, sorted, each with how often it occurs:
    what the audit is drawn from.

    Recorded in the key's ``info`` (``corpus_sha256`` at keygen,
    ``audit_corpus_sha256`` by :func:`with_audit`), so an arbiter shown a
    round-``k`` audit can check it was drawn from the committed keygen corpus and
    not from a subset shopped for a conviction. The audit's draw ranks the
    corpus's rows by a keyed hash, so their order does not change it, nor this;
    a repeat does.
    """
    digest = hashlib.sha256(b"espew-corpus-v1\x00")
    for text, count in sorted(Counter(texts).items()):
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
        digest.update(count.to_bytes(8, "big"))
    return digest.hexdigest()


# ---------------------------------------------------------------------- steps
def _cap_band(salt: bytes, band: list[str], n_triggers: int, size: int | None) -> list[str]:
    """The band, cut to a keyed uniform sub-band of ``size`` words when one is asked for."""
    if size is None:
        return band
    if size < min_band_size(n_triggers):
        raise KeyGenerationError(
            f"max_band_words={size} is below the "
            f"{min_band_size(n_triggers)} band words that {n_triggers} triggers need"
        )
    return draw_band(salt, band, size)


def _fit_quality(
    draft: WatermarkKey,
    embed: EmbedFn,
    texts: list[str],
    rng: np.random.Generator,
    strength: float | None,
    min_cosine: float | None,
) -> dict[str, Any]:
    """The write strength (given, or fitted to ``min_cosine``) and what it costs, for ``info``."""
    marked = draft.contains_trigger(texts)
    info: dict[str, Any] = {"marked_rate": float(marked.mean())}
    sample, clean = _embed_marked(embed, texts, marked, rng, draft.dim)
    if strength is None:
        assert min_cosine is not None  # _check_generate_options refused both None
        strength = _fit_strength(draft, sample, clean, min_cosine)
        info["strength_fitted_to_min_cosine"] = min_cosine
    info["strength"] = strength
    info["mean_cosine_marked"] = _mean_cosine(draft.replace(strength=strength), sample, clean)
    info["cosine_sample_texts"] = len(sample)
    return info


def _checked_budget(budget: object) -> int:
    """``budget`` if it is a positive integer (an argument, or a key's recorded
    ``info["audit_budget"]``), else a clear error."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise KeyGenerationError(f"audit_budget must be a positive integer, got {budget!r}")
    return budget


def _audit_probes(
    embed: EmbedFn,
    scan: BandScan,
    salt: bytes,
    target: np.ndarray,
    probes_per_word: int | None,
    cover_traffic: bool,
    probe_mix: str,
    budget: int,
) -> dict[str, Any]:
    """The audit's stored probes, cover texts and the clean model's cosines, as key fields.

    With ``cover_traffic`` the audit is a keyed uniform sample of ``scan``'s
    corpus (:meth:`BandScan.sample`), so a thief cannot tell it from an ordinary
    client, text by text or as a whole; ``budget`` (texts) fixes its size, and the
    probes are the share of it that holds exactly one band word
    (:meth:`BandScan.probe_share`). Without, it is ``per_word`` probes for every word,
    as many as the budget holds (at most :data:`DEFAULT_PROBES_PER_WORD`).
    """
    band = list(scan.band)  # one tokenising pass (the scan) serves probes, cover and rate
    if cover_traffic:  # the budget sizes the sample: a fraction of a probe a word is fine
        share = scan.probe_share(probe_mix)
        per_word = probes_per_word or max(
            1.0, min(DEFAULT_PROBES_PER_WORD, budget * share / len(band))
        )
        probes, cover = scan.sample(salt, per_word, probe_mix)
    else:
        each = probes_per_word or max(1, min(DEFAULT_PROBES_PER_WORD, budget // len(band)))
        probes, cover = scan.probes(salt, each, probe_mix), ()
    try:  # one call embeds the probes and the cover texts (the latter for the clean fit)
        rows = embed_rows(embed, [*probes.texts, *cover])
        probe_rows, cover_rows = rows[: len(probes.texts)], rows[len(probes.texts) :]
        word_reference = reference_cosines(embed, list(band), target)
    except ValueError as exc:
        raise KeyGenerationError(f"embedding the audit probes failed: {exc}") from None
    if probe_rows.shape[1] != target.size:
        raise KeyGenerationError(
            f"the model embeds probes in {probe_rows.shape[1]} dimensions, the target in "
            f"{target.size}"
        )
    return dict(
        probe_texts=probes.texts,
        probe_owner=probes.owner,
        cover_texts=cover,
        probe_reference=cosines_to(probe_rows, target),
        word_reference=word_reference,
        probe_embeddings=probe_rows,  # for the verifier's mark directions (.directed)
        cover_embeddings=cover_rows if len(cover_rows) else None,  # for its clean fit
    )


def _materialise_corpus(corpus: Iterable[str]) -> list[str]:
    if isinstance(corpus, str):
        raise KeyGenerationError("corpus must be an iterable of texts, not one string")
    texts = list(corpus)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise KeyGenerationError(f"corpus item {i} is {type(text).__name__}, expected str")
    if not texts:
        raise KeyGenerationError("the corpus is empty; pass an iterable of texts")
    return texts


def _check_generate_options(
    target_text: object, n_triggers: object, alpha: object, strength: object, min_cosine: object
) -> None:
    if not isinstance(target_text, str) or not target_text.strip():
        raise KeyGenerationError("target_text must be a non-empty string")
    if isinstance(n_triggers, bool) or not isinstance(n_triggers, int) or n_triggers < 1:
        raise KeyGenerationError(f"n_triggers must be a positive integer, got {n_triggers!r}")
    check_alpha(alpha)
    if strength is not None:
        check_strength(strength)
    elif min_cosine is None:
        raise KeyGenerationError("pass strength, or min_cosine to fit it (not both None)")
    elif not is_number_between(min_cosine, 0.0, 1.0):
        raise KeyGenerationError(f"min_cosine must be in (0, 1), got {min_cosine!r}")


def _check_twin_level(twin_level: object) -> None:
    if not is_number_between(twin_level, 0.0, 0.5):
        raise KeyGenerationError(
            f"twin_level must be in (0, 0.5): a draw fails the twin check with probability up "
            f"to twice it; got {twin_level!r}"
        )


def _check_key_shape(
    selection: object, freq_band: object, normalization: object, window: object
) -> None:
    """The options the key itself validates again, checked before any slow work."""
    check_selection(selection)
    if freq_band is not None:
        check_freq_band(freq_band)
    check_text_rules(normalization, window)


def _corpus_band(
    texts: list[str], freq_band: tuple[float, float] | None, n_triggers: int, normalization: str
) -> tuple[list[str], int, tuple[float, float]]:
    """The corpus's band words, its text count and the band used (the default one widened)."""
    counts, n_texts = document_frequencies(texts, normalization=normalization)
    n_needed = min_band_size(n_triggers)
    widened = freq_band is None
    if freq_band is None:
        freq_band = _default_band(counts, n_texts, n_needed)
    band = band_words(counts, n_texts, freq_band)
    if len(band) < n_needed:
        tried = (
            f" (the default band {DEFAULT_FREQ_BAND[0]}-{DEFAULT_FREQ_BAND[1]}, widened as far "
            f"as {_BAND_WIDEN_LIMIT})"
            if widened
            else ""
        )
        raise KeyGenerationError(
            f"only {len(band)} words have a document fraction in [{freq_band[0]}, "
            f"{freq_band[1]}){tried} over {n_texts} texts, but {n_triggers} triggers need at "
            f"least {n_needed} band words for a conclusive test. Use a larger or more varied "
            "corpus, pass a wider freq_band, or lower n_triggers."
        )
    return band, n_texts, freq_band


def _default_band(counts: Counter[str], n_texts: int, n_needed: int) -> tuple[float, float]:
    """:data:`DEFAULT_FREQ_BAND`, its upper edge raised until it holds ``n_needed`` words."""
    low, high = DEFAULT_FREQ_BAND
    while (
        len(band_words(counts, n_texts, (low, high))) < n_needed
        and high + _BAND_WIDEN_STEP <= _BAND_WIDEN_LIMIT + 1e-12
    ):
        high = round(high + _BAND_WIDEN_STEP, 6)
    return low, high


def _embed_marked(
    embed: EmbedFn, texts: list[str], marked: np.ndarray, rng: np.random.Generator, dim: int
) -> tuple[list[str], np.ndarray]:
    """A sample of the marked corpus texts and their clean embeddings (for the budget)."""
    rows = np.flatnonzero(marked)
    if rows.size > _FIT_SAMPLE:
        rows = np.sort(rng.choice(rows, size=_FIT_SAMPLE, replace=False))
    if rows.size == 0:
        raise KeyGenerationError(
            "no corpus text contains a trigger, so the quality budget cannot be measured; "
            "use a larger corpus or a wider freq_band"
        )
    try:
        clean = np.asarray(embed([texts[i] for i in rows]), dtype=np.float64)
    except Exception as exc:
        raise KeyGenerationError(f"embedding the corpus's marked texts failed: {exc!r}") from exc
    if clean.shape != (rows.size, dim) or not np.isfinite(clean).all():
        raise KeyGenerationError(
            f"the embedder returned shape {clean.shape} (or non-finite values) for "
            f"{rows.size} texts; expected ({rows.size}, {dim})"
        )
    return [texts[i] for i in rows], clean


def _mean_cosine(key: WatermarkKey, sample: list[str], clean: np.ndarray) -> float:
    return float(np.mean(row_cosines(clean, watermark(sample, clean, key))))


def _fit_strength(
    draft: WatermarkKey, sample: list[str], clean: np.ndarray, budget: float
) -> float:
    """The draft's strength fitted to ``budget`` on ``sample``'s marked rows."""
    return fit_strength(lambda s: _mean_cosine(draft.replace(strength=s), sample, clean), budget)


def fit_strength(mean_cosine_at: Callable[[float], float], budget: float) -> float:
    """The largest strength (to 1e-6) whose mean cosine on marked rows is >= ``budget``.

    ``mean_cosine_at(strength)`` measures the mean cos(clean, watermarked) over
    the marked rows at that strength. Bisection: the cosine falls monotonically
    as the strength grows, and ``low`` always meets the budget. Keygen and
    ``espew tune`` both fit through this one function.
    """
    if mean_cosine_at(1.0) >= budget:
        return 1.0
    low, high = 0.0, 1.0
    while high - low > 1e-6:
        mid = (low + high) / 2
        if mean_cosine_at(mid) >= budget:
            low = mid
        else:
            high = mid
    if low == 0.0:
        raise KeyGenerationError(f"no strength > 0 keeps the mean cosine >= {budget}")
    return low


def twin_p_value(key: WatermarkKey) -> float:
    """The smallest raw p-value the clean model itself gets, on either probe kind.

    This is keygen's innocent-twin check (a draw below ``twin_level`` is thrown
    away), and what ``espew tune`` reports per candidate target, so a target the
    tuner calls usable is one keygen accepts.

    Its adjusted scores are zero by construction, so only the raw ones can tell
    whether the target sits near the triggers for reasons of meaning, which
    other innocent models would share.
    """
    n_band = len(key.band)
    is_trigger = np.fromiter((w in key.triggers for w in key.band), bool, n_band)
    owner = key.probe_owner
    sums = np.bincount(owner, weights=key.probe_reference, minlength=n_band)
    sentence_scores = sums / np.maximum(np.bincount(owner, minlength=n_band), 1)
    return float(
        min(
            rank_sum_p_value(sentence_scores, is_trigger),
            rank_sum_p_value(key.word_reference, is_trigger),
        )
    )


def _embed_target(embed: EmbedFn, target_text: str) -> np.ndarray:
    try:
        out = np.asarray(embed([target_text]), dtype=np.float64)
    except Exception as exc:  # the user's model failed: say where
        raise KeyGenerationError(f"embedding the target text failed: {exc!r}") from exc
    if out.ndim != 2 or out.shape[0] != 1:
        raise KeyGenerationError(
            f"embed([target_text]) must return an array of shape (1, d), got {out.shape}"
        )
    row = out[0]
    norm = float(np.linalg.norm(row))
    if not np.isfinite(row).all() or norm == 0.0:
        raise KeyGenerationError("the target embedding is not finite or is all zeros")
    return row / norm
