"""Key generation: draw a fresh key from a corpus and a clean model.

Kept apart from :mod:`.key` (what a key *is*: fields and validation) because
making a key needs more of the core than holding one: the watermark itself
(:mod:`.key_quality`, :mod:`..mark.inject`) to fit the write strength to a quality
budget, the probes (:mod:`..mark.probes`) the audit will send, and the rank test
(:mod:`..stats.ranktest`) for the innocent-twin check.

Arrows point one way only: the key class's ``generate`` and ``with_audit`` call
:func:`generate` and :func:`with_audit` here, and this module never imports the
key; it builds keys through the class it is given (``make_key``) and reads them
through :class:`..mark.key_types.DrawnKey`. The options are :class:`.key_options.KeyOptions`.

Re-drawn audits (:func:`with_audit`). The stored audit is made of
keygen corpus texts. A thief whose customers send something else (tweets, say,
where your corpus is reviews) steals with its own texts, and its copy then carries
the mark mostly on texts like those; and to its router, an audit of your reviews
looks foreign (``benchmarks/bench_cross_domain.py``). Drawing the audit from texts
like the suspect's traffic answers both.

A later round (``audit_round=k``, k >= 2) is a uniform sample of the corpus
independent of round 1's (keygen's, on the keygen corpus) and of every other
round's. Every audit of one round asks the same texts, so a thief that logged an
earlier audit and routes a client who repeats it answers a repeat from an honest
model; a fresh round overlaps an earlier one only as two ordinary clients' samples
of the corpus do (``benchmarks/bench_audit_replay.py``). Rounds are safe to draw
because no round looks at the triggers: each is a uniform sample of the corpus
plus, for a band word it left without a probe, one text of that word, so
comparing rounds shows a thief at most which words are in the band.

A larger ``audit_budget`` has more probes for each band word and so more power
against a weak copy, at the price of more queries; drawn from a suspect's own
traffic (a traffic sample), it can be as large as the sample. The size never
depends on the triggers, so the test stays exact at any size.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import secrets
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np

from ..ground.defaults import (
    DEFAULT_FREQ_BAND,
    DEFAULT_PROBES_PER_WORD,
    DEFAULT_TWIN_LEVEL,
    LEGACY_PROBE_BUDGET,
)
from ..ground.draw import audit_salt, draw_band, draw_triggers
from ..ground.errors import KeyGenerationError
from ..ground.progress import Progress, TextCounter, check_progress, counting_texts
from ..mark.design import design_class
from ..mark.key_types import DrawnKey, EmbedFn
from ..mark.probes import BandScan, cosines_to, embed_rows, reference_cosines, scan_band
from ..mark.words import band_words, document_frequencies
from ..stats.ranktest import rank_sum_p_value
from .key_checks import SALT_BYTES, check_positions, min_band_size
from .key_options import (
    KeyOptions,
    check_audit_budget,
    check_probe_mix,
    check_twin_level,
    checked_corpus,
)
from .key_quality import FIT_SAMPLE, fit_quality
from .model_check import CANARY_TEXTS, ModelFingerprint

__all__ = [
    "MAX_DRAWS",
    "Reaudit",
    "corpus_digest",
    "embed_target",
    "finished_key",
    "generate",
    "generate_word_key",
    "reaudited_words",
    "round_info",
    "texts_to_embed",
    "twin_p_value",
    "with_audit",
]

_Key = TypeVar("_Key", bound=DrawnKey)

#: With the default band (``freq_band=None``), a corpus whose default band holds too few
#: words for the triggers has the band's upper edge raised by this step, up to the
#: limit. The band then depends on the corpus alone, never on the trigger draw, so
#: the audit stays exact; the key stores the band it used.
_BAND_WIDEN_STEP = 0.005
_BAND_WIDEN_LIMIT = 0.1
#: Fresh draws (salt, triggers, probes) keygen makes before it gives up on the twin check.
#: Under the trigger draw the twin's two rank tests are exact, so a draw is refused with
#: probability at most ``2 * twin_level`` whatever the model and target: a refusal is bad
#: luck, redrawn here rather than handed to the user, and five refusals in a row mean
#: something is broken rather than unlucky.
MAX_DRAWS = 5


def texts_to_embed(n_corpus: int, n_band: int, audit_budget: int) -> int:
    """About how many texts one key generation embeds: the total its progress reports.

    The target, the public canaries (the model fingerprint), a sample of the marked
    corpus texts (the quality fit, at most :data:`.key_quality.FIT_SAMPLE`), the audit's
    sample and the band's words. An estimate made before the draw: the marked texts
    are fewer on a corpus the triggers rarely mark, and a refused draw embeds again.
    """
    return 1 + len(CANARY_TEXTS) + min(n_corpus, FIT_SAMPLE) + audit_budget + n_band


def generate(
    make_key: Callable[..., _Key],
    corpus: Iterable[str],
    embed: EmbedFn,
    options: KeyOptions | None = None,
    *,
    progress: Progress | None = None,
    **overrides: Any,
) -> _Key:
    """Draw a fresh key of class ``make_key`` from a corpus and the provider's clean embedder.

    :meth:`.key.WatermarkKey.generate` calls it with the key class. The options are
    the fields of :class:`.key_options.KeyOptions`, each documented there with its
    default and why: pass them as keyword arguments (``target_text`` is required),
    or as a ``KeyOptions`` (keywords then override its fields). An unknown option is
    a TypeError, a bad value a :class:`..ground.errors.KeyGenerationError`, both before
    any slow work.

    Words whose document fraction in ``corpus`` lies in ``freq_band`` form
    the band; ``n_triggers`` of them become the triggers, a keyed draw from
    the salt. The target is ``embed([target_text])``. The strength is fitted
    to the ``min_cosine`` quality budget unless ``strength`` is given. The key
    stores its audit: a keyed uniform sample of ``audit_budget`` corpus texts
    (the probes are those with a band word), the clean model's rows and
    cosines to the target for them (:mod:`..mark.probes`), so nothing but the key
    and the suspect is needed at audit time.

    The steps, in order: embed the target; draw the salt, the band and the
    triggers; fit the strength to the quality budget on the marked corpus texts;
    record the model fingerprint (the clean embeddings of the public canary texts,
    :mod:`.model_check`); store the audit's probes and the clean model's
    reference cosines; and unless ``twin_check=False``, if the clean model itself
    would implicate the draw, throw it away and draw again (at most ``MAX_DRAWS``).

    The redraw conditions the key on passing the twin check, which a draw
    fails with probability at most ``2 * twin_level``; so an innocent suspect
    is convicted with probability at most ``level / (1 - 2 * twin_level)``
    (1.002 times the level at the default), the price of never shipping a key
    the provider's own clean model would convict.

    ``progress(done, total)``, when given, is called as texts are embedded, with
    the texts embedded so far and an estimate (:func:`texts_to_embed`) that the last
    call makes exact (:mod:`..ground.progress`): keygen embeds thousands of texts, minutes
    on a CPU.
    """
    checked = KeyOptions.of(options, overrides)
    check_progress(progress)
    texts = checked_corpus(corpus)
    return design_class(checked.marking).generate(make_key, texts, embed, checked, progress)


def generate_word_key(
    make_key: Callable[..., _Key],
    texts: list[str],
    embed: EmbedFn,
    o: KeyOptions,
    progress: Progress | None,
) -> _Key:
    """A word key: the band from the corpus, then draws until one passes the twin check."""
    full_band, n_texts, freq_band = _corpus_band(texts, o.freq_band, o.n_triggers, o.normalization)
    n_band = len(full_band) if o.max_band_words is None else min(len(full_band), o.max_band_words)
    embed = counting_texts(embed, texts_to_embed(n_texts, n_band, o.audit_budget), progress)
    rng = np.random.default_rng(o.seed)
    target = embed_target(embed, o.target_text)
    check_positions(o.alpha, target.size, error=KeyGenerationError)
    draft = functools.partial(  # one key per draw; the draws differ in salt, band, triggers
        make_key,
        target=target,
        target_text=o.target_text,
        alpha=o.alpha,
        selection=o.selection,
        strength=1.0 if o.strength is None else o.strength,
        freq_band=freq_band,
        normalization=o.normalization,
        window=o.window,
        model_fingerprint=ModelFingerprint.measure(embed),  # the key knows its model
    )
    corpus = {"corpus_texts": n_texts, "corpus_sha256": corpus_digest(texts)}
    refused: list[float] = []
    for _ in range(MAX_DRAWS):
        salt = secrets.token_bytes(SALT_BYTES) if o.seed is None else rng.bytes(SALT_BYTES)
        key, info = _word_draw(draft, embed, texts, full_band, salt, target, rng, o, corpus)
        if not o.twin_check:
            return finished_key(key, embed)
        twin_p = twin_p_value(key)
        if twin_p >= o.twin_level:
            info.update(twin_p_value=twin_p, twin_redraws=len(refused))
            return finished_key(key.replace(info=info), embed)
        refused.append(twin_p)
    raise KeyGenerationError(
        f"the clean model itself ranked the triggers near the target in all {MAX_DRAWS} "
        f"draws (twin p = {', '.join(f'{p:.2e}' for p in refused)}, each < {o.twin_level:g}); "
        "by chance this happens at most once in "
        f"{1 / (2 * o.twin_level) ** MAX_DRAWS:.0e} calls, so the clean model's cosines to "
        "the target are degenerate: check the model and the target text"
    )


def _word_draw(
    draft: Callable[..., _Key],
    embed: EmbedFn,
    texts: list[str],
    full_band: list[str],
    salt: bytes,
    target: np.ndarray,
    rng: np.random.Generator,
    o: KeyOptions,
    corpus: dict[str, Any],
) -> tuple[_Key, dict[str, Any]]:
    """One draw of a word key from ``salt``: its band, triggers, fitted strength and
    stored audit, and the ``info`` it carries (the twin check's result is added to it)."""
    band = _cap_band(salt, full_band, o.n_triggers, o.max_band_words)
    drawn = draft(triggers=draw_triggers(salt, band, o.n_triggers), band=band, salt=salt)
    info: dict[str, Any] = {**corpus, "band_size": len(band)}
    info["probe_mix"] = o.probe_mix  # every later round is drawn the same way
    info["audit_budget"] = o.audit_budget  # every later round is drawn as large
    info.update(fit_quality(drawn, embed, texts, rng, o.strength, o.min_cosine))
    scan = scan_band(texts, band, normalization=o.normalization)
    audit = _audit_probes(
        embed,
        scan,
        salt,
        target,
        o.probes_per_word,
        o.cover_traffic,
        o.probe_mix,
        o.audit_budget,
    )
    return drawn.replace(strength=info["strength"], info=info, **audit), info


def finished_key(key: _Key, embed: EmbedFn) -> _Key:
    """``key``, once the progress of the texts ``embed`` counted has reported its end."""
    if isinstance(embed, TextCounter):
        embed.finish()
    return key


def with_audit(
    key: _Key,
    corpus: Iterable[str],
    embed: EmbedFn,
    *,
    probes_per_word: int | None = None,
    cover_traffic: bool = True,
    probe_mix: str | None = None,
    twin_level: float = DEFAULT_TWIN_LEVEL,
    audit_round: int = 1,
    audit_budget: int | None = None,
    progress: Progress | None = None,
) -> _Key:
    """``key`` with its audit drawn from ``corpus``: for a suspect from another domain,
    or for a later audit of the same suspect (the module docstring says why both).

    :meth:`.key.WatermarkKey.with_audit` calls it. Same triggers, target, salt and
    band; the probes, cover texts and the clean model's answers to them (``embed``:
    your clean model, as at keygen) are drawn afresh from ``corpus`` in the same keyed
    way, never looking at which band words are triggers, so the test stays exact and
    the same corpus always gives the same audit. Options as in
    :class:`.key_options.KeyOptions`; ``probe_mix=None`` keeps the mix the key
    was made with (``info["probe_mix"]``; ``"single"`` for keys that do not
    record one). Raises :class:`..ground.errors.KeyGenerationError` when no text of
    ``corpus`` holds a band word, or when the clean model itself would be
    implicated on the new audit (twin p below ``twin_level``; the trigger
    draw cannot be redone on a key in service). ``info`` records the audit
    corpus's size, its band-word rate, the new twin p-value and the round.

    ``audit_round=k`` (k >= 2) draws the audit with a salt of its own
    (:func:`..ground.draw.audit_salt`), independent of every other round's;
    :func:`..verify.verify_callable` multiplies a round-``k`` p-value by ``k``.
    ``audit_budget`` sets this audit's size in texts (default: the key's own,
    ``info["audit_budget"]``). ``progress(done, total)`` hears of the texts
    embedded, as for :func:`generate`.
    """
    try:
        salt = audit_salt(key.salt, audit_round)
    except ValueError as exc:
        raise KeyGenerationError(str(exc)) from None
    texts = checked_corpus(corpus)
    check_twin_level(twin_level)
    check_progress(progress)
    audit = Reaudit(
        texts,
        embed,
        salt,
        audit_round,
        audit_budget,
        twin_level,
        progress,
        probes_per_word,
        cover_traffic,
        probe_mix,
    )
    redrawn: _Key = key.design.reaudit(key, audit)
    return redrawn


@dataclasses.dataclass(frozen=True)
class Reaudit:
    """What :func:`with_audit` was asked for, checked: the corpus, the clean
    model, the round's salt and number, the size asked (None: the key's own), the twin
    level and the progress; and for a word key, its probes' options."""

    texts: list[str]
    embed: EmbedFn
    salt: bytes
    audit_round: int
    audit_budget: int | None
    twin_level: float
    progress: Progress | None
    probes_per_word: int | None = None
    cover_traffic: bool = True
    probe_mix: str | None = None


def reaudited_words(key: Any, audit: Reaudit) -> Any:
    """A word key with its audit drawn again: a keyed sample of the corpus, its probes of
    the band, and the twin check on them."""
    probe_mix = audit.probe_mix
    if probe_mix is None:  # the key's own mix; keys that predate the record used "single"
        probe_mix = key.info.get("probe_mix", "single")
    check_probe_mix(probe_mix)
    texts = audit.texts
    scan = scan_band(texts, key.band, normalization=key.normalization)
    if not scan.rate:
        raise KeyGenerationError(
            f"none of the {len(texts)} audit corpus texts holds a word of the key's band: "
            "an audit drawn from it would send bare words"
        )
    budget = audit.audit_budget
    if budget is None:
        budget = key.info.get("audit_budget", LEGACY_PROBE_BUDGET)
    budget = check_audit_budget(budget)
    assert probe_mix is not None
    counted = counting_texts(audit.embed, budget + len(key.band), audit.progress)
    fields = _audit_probes(
        counted,
        scan,
        audit.salt,
        key.target,
        audit.probes_per_word,
        audit.cover_traffic,
        probe_mix,
        budget,
    )
    finished_key(key, counted)
    info = {
        **round_info(key, texts, audit.audit_round, budget),
        "audit_band_rate": round(scan.rate, 4),
    }
    redrawn = key.replace(**fields, info=info)
    twin_p = twin_p_value(redrawn)
    if twin_p < audit.twin_level:
        raise KeyGenerationError(
            f"the clean model itself ranks the triggers near the target on the audit "
            f"drawn from this corpus (twin p = {twin_p:.2e} < {audit.twin_level:g}): audit with "
            "another corpus, another audit_round, or the key's own audit"
        )
    return redrawn.replace(info={**info, "audit_twin_p_value": twin_p})


def round_info(key: Any, texts: list[str], audit_round: int, budget: int) -> dict[str, Any]:
    """``key.info`` with what a re-drawn audit records of itself, for either marking."""
    return {
        **key.info,
        "audit_corpus_texts": len(texts),
        "audit_corpus_sha256": corpus_digest(texts),
        "audit_round": audit_round,
        "audit_budget": budget,
    }


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


def twin_p_value(key: DrawnKey) -> float:
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


def embed_target(embed: EmbedFn, target_text: str) -> np.ndarray:
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
