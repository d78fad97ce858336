"""Generating and re-auditing a *field* key (:mod:`..mark.field`): the steps that differ from words.

Kept apart from :mod:`.keygen` (the field design, :mod:`..designs.field`, calls here)
because a field key's audit, its field and its innocent-twin check are made
differently, while the salt, the target, the model fingerprint and the strength
fit are shared. Like :mod:`.keygen`, this module never imports the key class: it
builds keys through the callable it is given and reads them through their fields.

The order matters for exactness: the salt draws the units (the key's triggers)
and the audit, a keyed uniform sample of the corpus; ``mu`` and ``sigma`` come
from the audit's clean rows as the key stores them (int8-quantised), so the
verifier recomputes them exactly; nothing but ``q`` looks at which units were
drawn.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ground.draw import draw_triggers
from ..ground.errors import KeyGenerationError
from ..ground.progress import Progress, counting_texts
from ..ground.row_codec import QuantizedRows
from ..ground.rows import unit_rows
from ..mark.compact import compact_target
from ..mark.field import (
    FieldMark,
    audit_sample,
    drawn_mask,
    field_scales,
    field_twin_scores,
    field_vector,
    keyed_gaussian,
    scoring_projections,
    unit_names,
)
from ..mark.inject import mark_all_rows
from ..mark.probes import cosines_to, embed_rows
from ..stats.ranktest import rank_sum_p_value
from .key_checks import SALT_BYTES, check_positions
from .key_options import KeyOptions, check_audit_budget
from .key_quality import fit_quality
from .keygen import MAX_DRAWS, Reaudit, corpus_digest, embed_target, finished_key, round_info
from .model_check import ModelFingerprint

__all__ = [
    "field_audit",
    "field_twin_p_value",
    "generate_field",
    "generate_field_key",
    "make_field",
    "reaudit_field",
    "reaudited_field",
]


#: Makes a drawn key's design from its salt, its audit's clean rows (as stored), its
#: drawn units and the options: a field design's :func:`make_field`, a map design's own.
DesignMaker = Callable[[bytes, np.ndarray, frozenset[str], KeyOptions], Any]
#: A key's target, given or derived from the salt and the model's dimension (a map key's).
TargetSource = np.ndarray | Callable[[bytes, int], np.ndarray]


def generate_field(
    make_key: Callable[..., Any],
    design: DesignMaker,
    texts: list[str],
    embed: Callable[[list[str]], Any],
    options: KeyOptions,
    target: TargetSource,
    rng: np.random.Generator,
    info: dict[str, Any],
    max_draws: int,
) -> Any:
    """A fresh key of a unit design (field or map): :func:`.keygen.generate`'s steps for it.

    ``design`` makes the key's design of the drawn salt, audit and units; ``target`` is
    the embedded target text (a field key) or how the salt derives one (a map key);
    ``info`` holds what keygen records of the corpus; a draw the clean model itself
    would implicate (the design's ``twin_p_value`` below ``twin_level``) is thrown away
    and drawn again, at most ``max_draws`` times, exactly as for a word key.
    """
    o = options
    if not callable(target):
        target = compact_target(target)  # what the compact serving key stores
    band = unit_names(o.field_units)
    fingerprint = ModelFingerprint.measure(embed)
    nonblank = np.fromiter((bool(t.strip()) for t in texts), dtype=bool, count=len(texts))
    refused: list[float] = []
    for _ in range(max_draws):
        salt = secrets.token_bytes(SALT_BYTES) if o.seed is None else rng.bytes(SALT_BYTES)
        triggers = draw_triggers(salt, band, o.field_marked)
        audit = field_audit(embed, texts, salt, target, o.audit_budget)
        drawn_target = audit.pop("target")
        made = design(salt, audit["probe_embeddings"].rows(), triggers, o)
        draft = make_key(
            **_key_options(o),
            triggers=triggers,
            band=band,
            salt=salt,
            target=drawn_target,
            model_fingerprint=fingerprint,
            design=made,
            **audit,
        )
        drawn = {**info, "band_size": len(band), "audit_budget": o.audit_budget}
        drawn.update(
            fit_quality(draft, embed, texts, rng, o.strength, o.field_min_cosine, nonblank)
        )
        key = draft.replace(strength=drawn["strength"], info=drawn)
        if not o.twin_check:
            return key
        twin_p = key.design.twin_p_value(key)
        if twin_p >= o.twin_level:
            return key.replace(info={**drawn, "twin_p_value": twin_p, "twin_redraws": len(refused)})
        refused.append(twin_p)
    raise KeyGenerationError(
        f"the clean model itself implicated the drawn field units in all {max_draws} draws "
        f"(twin p = {', '.join(f'{p:.2e}' for p in refused)}, each < {o.twin_level:g}); "
        "check the model and the corpus"
    )


def _key_options(o: KeyOptions) -> dict[str, Any]:
    """The key fields the options set as they are (the strength before its fit)."""
    return dict(
        target_text=o.target_text,
        alpha=o.alpha,
        selection=o.selection,
        strength=1.0 if o.strength is None else o.strength,
        normalization=o.normalization,
        window=o.window,
    )


def make_field(salt: bytes, rows: np.ndarray, triggers: frozenset[str], o: KeyOptions) -> FieldMark:
    """The field of the drawn units over the audit's clean ``rows`` (as the key stores them).

    Compact (:attr:`..mark.field.FieldMark.compact`): ``q`` is computed from the scales as
    stored (float16), so the verifier re-derives it from what the key holds."""
    mu = unit_rows(rows).mean(axis=0)
    gaussian = keyed_gaussian(salt, rows.shape[1], o.field_units)
    sigma = field_scales(gaussian, mu, rows).astype(np.float16).astype(np.float64)
    q = field_vector(gaussian, sigma, drawn_mask(o.field_units, triggers), o.field_amplitude)
    return FieldMark(
        units=o.field_units, amplitude=o.field_amplitude, mu=mu, sigma=sigma, q=q, compact=True
    )


def field_audit(
    embed: Callable[[list[str]], Any],
    texts: list[str],
    salt: bytes,
    target: TargetSource,
    budget: int,
) -> dict[str, Any]:
    """A unit key's audit as key fields: ``budget`` sampled texts, all probes, and the
    ``"target"`` (``target`` itself, or what it derives from the salt and the dimension).

    Every text is a probe of unit 0 (the owner is a formality: the unit statistic
    scores every unit from every text); the clean rows are stored quantised, and
    returned so, so that ``mu`` and ``sigma`` are computed from what is stored.
    """
    sample = audit_sample(texts, salt, budget)
    if len(sample) < 3:
        raise KeyGenerationError(
            f"a field key's audit needs at least 3 distinct texts, the corpus has {len(sample)}"
        )
    try:
        rows = embed_rows(embed, sample)
    except ValueError as exc:
        raise KeyGenerationError(f"embedding the audit texts failed: {exc}") from None
    if callable(target):
        target = target(salt, rows.shape[1])
    if rows.shape[1] != target.size:
        raise KeyGenerationError(
            f"the model embeds texts in {rows.shape[1]} dimensions, the target in {target.size}"
        )
    stored = QuantizedRows.encode(rows)
    return dict(
        target=target,
        probe_texts=tuple(sample),
        probe_owner=(0,) * len(sample),
        cover_texts=(),
        probe_reference=cosines_to(rows, target),
        word_reference=(),
        probe_embeddings=stored,
        cover_embeddings=None,
    )


def field_twin_p_value(key: Any, field: FieldMark) -> float:
    """The clean model's own exact p-value on the key's audit (keygen's innocent-twin check);
    ``field`` is the key's (its design's parameters)."""
    clean = unit_rows(key.probe_embeddings)
    directions = unit_rows(mark_all_rows(clean, key) - clean)
    z = scoring_projections(clean, field.mu, field.gaussian(key.salt))
    scores = field_twin_scores(directions, clean, z)
    return float(rank_sum_p_value(scores, drawn_mask(field.units, key.triggers)))


def reaudit_field(
    key: Any,
    texts: list[str],
    embed: Callable[[list[str]], Any],
    salt: bytes,
    info: dict[str, Any],
    twin_level: float,
) -> Any:
    """A field key with its audit drawn from ``texts`` (:func:`.keygen.with_audit`,
    which derives the round's ``salt`` and what ``info`` records of it).

    Every sampled text is a probe: no band word is needed. The design's parameters
    (``mu``, ``sigma``...) stay keygen's, which is what the service marks with.
    """
    budget = int(info["audit_budget"])
    fields = field_audit(embed, texts, salt, key.target, budget)
    del fields["target"]
    redrawn = key.replace(**fields, info=info)
    twin_p = redrawn.design.twin_p_value(redrawn)
    if twin_p < twin_level:
        raise KeyGenerationError(
            f"the clean model itself implicates the drawn field units on the audit drawn from "
            f"this corpus (twin p = {twin_p:.2e} < {twin_level:g}): audit with another corpus "
            "or another audit_round"
        )
    return redrawn.replace(info={**info, "audit_twin_p_value": twin_p})


def generate_field_key(
    make_key: Callable[..., Any],
    design: DesignMaker,
    texts: list[str],
    embed: Callable[[list[str]], Any],
    o: KeyOptions,
    progress: Progress | None,
    target: Callable[[bytes, int], np.ndarray] | None = None,
) -> Any:
    """A fresh unit key: the target (the target text's embedding, or ``target`` derived
    from the salt), then :func:`generate_field` (its audit, design and twin check);
    ``design`` makes the key's design (:func:`make_field` wrapped by :mod:`..designs.field`)."""
    rng = np.random.default_rng(o.seed)
    counted = counting_texts(embed, o.audit_budget + (target is None), progress)
    source: TargetSource
    if target is None:
        source = embed_target(counted, o.target_text)
        check_positions(o.alpha, source.size, error=KeyGenerationError)
    else:
        source = target
    corpus = {"corpus_texts": len(texts), "corpus_sha256": corpus_digest(texts)}
    key = generate_field(make_key, design, texts, counted, o, source, rng, corpus, MAX_DRAWS)
    return finished_key(key, counted)


def reaudited_field(key: Any, audit: Reaudit) -> Any:
    """A field key with its audit drawn again (:func:`.field_keygen.reaudit_field`)."""
    budget = audit.audit_budget
    if budget is None:  # the key's stored audit sizes a round by default
        budget = key.info.get("audit_budget", len(key.probe_texts))
    budget = check_audit_budget(budget)
    counted = counting_texts(audit.embed, budget, audit.progress)
    info = round_info(key, audit.texts, audit.audit_round, budget)
    redrawn = reaudit_field(key, audit.texts, counted, audit.salt, info, audit.twin_level)
    return finished_key(redrawn, counted)
