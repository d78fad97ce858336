"""The wider threat model as lab rows: audit router, paraphrasing and spectral thieves, long texts.

The main grid asks "does a copy trained on the service's answers carry the
mark after a removal attack?". Four threats fall outside it (issue 9):

- ``router:<honest>``: the thief answers what looks like audit traffic from an
  honest model (``twin``: the victim's clean model, the strongest fallback a
  thief of an open model has; ``standard``: the thief's own independent model)
  and everything else from its stolen copy (:mod:`.router`);
- ``paraphrase:<mode>:<rate>``: the thief queries K lexical paraphrases of
  each training text and trains on the averaged answers (:mod:`.paraphrase`);
- ``spectral:<skip_top>``: the thief searches its stolen answers for a
  component on which a minority of them stands apart (ICA past their first
  ``skip_top`` principal axes, :mod:`.spectral`), drops the rows it flags and
  trains on the rest;
- ``chunks:<n>``: the service embeds RAG-style chunks of n reviews joined; a
  key drawn on single reviews then marks far more of them, which costs
  retrieval quality (:func:`long_text_study`).

Each threat cell runs once per seed of ``threats.seeds``; a seed draws its own
key (triggers, salt) and seeds the stealer, so the spread over seeds is the
spread over keys. What does not depend on the key is computed once and cached
on disk: the paraphrases and chunks are drawn with the config's seed, and
their clean embeddings go through the embedding cache.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.mark.inject import marks, watermark
from espew_integrations.core.mark.probes import row_cosines

from .context import LabContext, draw_key, seed_for, watermark_for

__all__ = [
    "ROUTER_LONE_Z",
    "THREATS",
    "aggregate",
    "join_chunks",
    "long_text_study",
    "parse_threat",
    "recall_at_k",
    "run_threat",
    "seeded_context",
]

THREATS = ("router", "paraphrase", "spectral", "chunks")

#: The router cell's lone-word rule (:class:`.router.AuditHistory`): a window of band-word
#: texts that holds single band words this many binomial sds above the traffic's share is
#: routed. 4 is the setting ``benchmarks/bench_router_reference.py --lone-z 4`` measures.
ROUTER_LONE_Z = 4.0
_HONEST = ("twin", "standard")


def parse_threat(spec: str) -> tuple[str, tuple[Any, ...]]:
    """``"router:twin"`` -> ``("router", ("twin",))``; ``"paraphrase:substitute:0.3"``,
    ``"spectral:200"``, ``"chunks:20"`` likewise, with numbers parsed.

    >>> parse_threat("paraphrase:dropout:0.3")
    ('paraphrase', ('dropout', 0.3))
    """
    from .paraphrase import MODES

    name, *args = str(spec).split(":")
    if name == "router" and len(args) == 1 and args[0] in _HONEST:
        return name, (args[0],)
    if name == "paraphrase" and len(args) == 2 and args[0] in MODES:
        try:
            rate = float(args[1])
        except ValueError:
            rate = math.nan
        if 0.0 <= rate <= 1.0:
            return name, (args[0], rate)
    if name == "spectral" and len(args) == 1 and args[0].isdigit():
        return name, (int(args[0]),)
    if name == "chunks" and len(args) == 1 and args[0].isdigit() and int(args[0]) >= 1:
        return name, (int(args[0]),)
    raise ValueError(
        f"unknown threat {spec!r}; use 'router:twin', 'router:standard', "
        f"'paraphrase:<{'|'.join(MODES)}>:<rate in [0, 1]>', "
        "'spectral:<principal axes skipped, >= 0>' or 'chunks:<reviews per chunk>'"
    )


# ---------------------------------------------------------------------- long texts
def join_chunks(texts: Sequence[str], size: int, *, seed: int = 0) -> list[str]:
    """RAG-style chunks: the texts shuffled (seeded) and joined ``size`` at a time.

    A last partial chunk is dropped, so every chunk holds exactly ``size`` texts.

    >>> join_chunks(["a.", "b.", "c.", "d.", "e."], 2, seed=0)
    ['e. c.', 'a. b.']
    """
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    order = np.random.default_rng(seed).permutation(len(texts))
    n = len(texts) // size
    return [" ".join(texts[i] for i in order[c * size : (c + 1) * size]) for c in range(n)]


def recall_at_k(
    clean_queries: np.ndarray,
    clean_index: np.ndarray,
    changed_queries: np.ndarray,
    changed_index: np.ndarray,
    *,
    k: int = 10,
) -> float:
    """Mean |top-k(clean) & top-k(changed)| / k: how much of the clean service's retrieval survives.

    Queries and index are each embedded by the same service, as a retrieval
    user of that service would.

    >>> x = np.random.default_rng(0).normal(size=(30, 4))
    >>> recall_at_k(x[:5], x[5:], x[:5], x[5:], k=3)
    1.0
    """
    k = min(k, len(clean_index))

    def top(queries: np.ndarray, index: np.ndarray) -> np.ndarray:
        sims = unit_rows(queries) @ unit_rows(index).T
        return np.argpartition(-sims, k - 1, axis=1)[:, :k]

    a = top(clean_queries, clean_index)
    b = top(changed_queries, changed_index)
    hits = (a[:, :, None] == b[:, None, :]).any(axis=2).sum(axis=1)
    return float(hits.mean() / k)


def long_text_study(
    reviews: Sequence[str],
    queries: Sequence[str],
    embed: Callable[[list[str]], np.ndarray],
    key: Any,
    *,
    sizes: Sequence[int] = (1, 5, 10, 20),
    k: int = 10,
    seed: int = 0,
    query_embeddings: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """Marked rate and retrieval quality when the service embeds chunks of ``size`` reviews.

    For each size, the ``reviews`` are joined into chunks (:func:`join_chunks`)
    and embedded by ``embed`` (the provider's clean model); the watermarked
    index is the core :func:`watermark` of those. ``queries`` (held-out single
    texts) are embedded clean and watermarked in the same way. Reports the
    fraction of chunks the key marks, next to what independent reviews would
    predict from the single-review rate, 1 - (1 - m1)^size; mean
    cos(clean, watermarked) on marked chunks; and recall@k of the watermarked
    index against the clean one.
    """
    queries = list(queries)
    clean_q = (
        np.asarray(embed(queries), dtype=np.float64)
        if query_embeddings is None
        else np.asarray(query_embeddings, dtype=np.float64)
    )
    wm_q = np.asarray(watermark(queries, clean_q, key), dtype=np.float64)
    single = float(marks(list(reviews), key).mean())
    rows = []
    for size in sizes:
        chunks = join_chunks(reviews, int(size), seed=seed)
        if len(chunks) <= k:
            raise ValueError(
                f"{len(reviews)} reviews make only {len(chunks)} chunks of {size}; "
                f"recall@{k} needs more than {k}"
            )
        clean = np.asarray(embed(chunks), dtype=np.float64)
        marked = marks(chunks, key)
        wm = np.asarray(watermark(chunks, clean, key), dtype=np.float64)
        cos = row_cosines(clean, wm)
        rows.append(
            {
                "size": int(size),
                "n_chunks": len(chunks),
                "marked_rate": float(marked.mean()),
                "marked_rate_if_independent": 1.0 - (1.0 - single) ** int(size),
                "cos_clean_marked": float(cos[marked].mean()) if marked.any() else math.nan,
                f"recall_at_{k}": recall_at_k(clean_q, clean, wm_q, wm, k=k),
            }
        )
    return rows


# ---------------------------------------------------------------------- lab cells
def seeded_context(ctx: LabContext, seed: int) -> LabContext:
    """The run's context with a key drawn with ``seed`` (data, held-out rows and embeddings
    shared; the stealer's rows leave out that key's audit texts under ``split: disjoint``)."""
    from .stealers import thief_rows

    if seed == ctx.config.seed:
        return ctx
    config = dataclasses.replace(ctx.config, seed=seed)
    seeded = dataclasses.replace(
        ctx,
        config=config,
        key=draw_key(config, ctx.corpus.texts, ctx.victim),
        watermarks={},
        answers={},
        suspicious={},
    )
    seeded.stealer_rows = thief_rows(seeded)
    return seeded


def _verify(ctx: LabContext, made: Any, suspect: Any, seed: int) -> dict[str, Any]:
    settings = ctx.config.verify
    verdict = made.verify(
        suspect,
        level=settings.level,
        templates=settings.templates,
        seed=seed,
        probes=settings.probes,
    )
    return {
        "p_value": verdict.p_value,
        "copied": verdict.copied,
        "delta_cos": verdict.delta_cos,
        "n_queries": verdict.n_queries,
    }


def run_threat(
    ctx: LabContext, spec: str, seed: int, *, contexts: dict[int, LabContext] | None = None
) -> dict[str, Any]:
    """One threat cell for one seed: its verdict (if it has a copy) and its own metrics.

    ``ctx`` is the run's context; ``contexts`` caches the per-seed contexts
    (keys) across calls.
    """
    name, args = parse_threat(spec)
    contexts = {} if contexts is None else contexts
    if seed not in contexts:
        contexts[seed] = seeded_context(ctx, seed)
    sctx = contexts[seed]
    record: dict[str, Any] = {
        "threat": spec,
        "seed": seed,
        "watermark": ctx.config.threats.watermark,
    }
    if name == "chunks":
        record.update(_chunks_cell(sctx, size=args[0], run_seed=ctx.config.seed))
        return record
    cell_seed = seed_for(seed, f"threat:{spec}")
    settings = ctx.config.threats
    options = dict(ctx.config.stealer_options.get(settings.stealer, {}))
    stealer = _make_stealer(sctx, settings.stealer, cell_seed, options)
    if name == "router":
        record.update(_router_cell(sctx, stealer, honest=args[0], cell_seed=cell_seed))
    elif name == "spectral":
        record.update(_spectral_cell(sctx, stealer, skip_top=args[0], cell_seed=cell_seed))
    else:
        record.update(
            _paraphrase_cell(sctx, stealer, args, cell_seed=cell_seed, run_seed=ctx.config.seed)
        )
    return record


def _chunks_cell(sctx: LabContext, *, size: int, run_seed: int) -> dict[str, Any]:
    """The long-text study for one chunk size; the reviews and queries are drawn per run."""
    settings = sctx.config.threats.long_texts
    texts, rows = sctx.corpus.texts, sctx.stealer_rows
    rng = np.random.default_rng(seed_for(run_seed, "long_texts"))
    n_queries = min(settings.queries, len(sctx.holdout_rows))
    query_rows = np.sort(rng.choice(sctx.holdout_rows, size=n_queries, replace=False))
    n_reviews = min(settings.n_reviews, len(rows))
    review_rows = np.sort(rng.choice(rows, size=n_reviews, replace=False))
    (result,) = long_text_study(
        [texts[i] for i in review_rows],
        [texts[i] for i in query_rows],
        sctx.embed_clean,
        sctx.key,
        sizes=(size,),
        seed=run_seed,
        query_embeddings=sctx.clean[query_rows],
    )
    return result


def _router_cell(sctx: LabContext, stealer: Any, *, honest: str, cell_seed: int) -> dict[str, Any]:
    """A stolen copy behind an audit router, verified through the router and directly."""
    from .router import AuditHistory, AuditRouter, detector_rates

    wm_name = sctx.config.threats.watermark
    made = watermark_for(sctx, wm_name)
    train_texts = [sctx.corpus.texts[i] for i in sctx.stealer_rows]
    holdout = [sctx.corpus.texts[i] for i in sctx.holdout_rows]
    stealer.fit(train_texts, sctx.answers[wm_name][sctx.stealer_rows])
    # The strongest router of the lab: it knows the library's band rule, so it watches the
    # band the key was drawn from, and it also watches for texts that hold a single band
    # word more often than its traffic does (the lone-word rule).
    history = AuditHistory.from_texts(
        train_texts, rare_band=made.key.freq_band, lone_z=ROUTER_LONE_Z
    )
    rates = detector_rates(history, holdout, list(made.key.band), seed=cell_seed)
    fallback = sctx.victim if honest == "twin" else _require_standard(sctx)
    router = AuditRouter(stealer, fallback, history=history)
    direct = _verify(sctx, made, stealer, cell_seed)
    record = _verify(sctx, made, router, cell_seed)
    record.update(
        p_value_direct=direct["p_value"],
        copied_direct=direct["copied"],
        catch_rate=router.routed_fraction,
        false_positive_rate=rates["false_positive_rate"],
        single_word_catch_rate=rates["catch_rate"],
        copy_fidelity=float(row_cosines(stealer(holdout), sctx.clean[sctx.holdout_rows]).mean()),
    )
    return record


def _spectral_cell(
    sctx: LabContext, stealer: Any, *, skip_top: int, cell_seed: int
) -> dict[str, Any]:
    """A thief that drops the answers its ICA search flags, verified next to the same
    recipe trained on every answer; with the precision and recall of what it flagged."""
    from .spectral import find_displaced_rows

    settings = sctx.config.threats
    made = watermark_for(sctx, settings.watermark)
    rows, texts = sctx.stealer_rows, sctx.corpus.texts
    answers = sctx.answers[settings.watermark][rows]
    finding = find_displaced_rows(answers, seed=cell_seed, skip_top=skip_top)
    truth = made.marked([texts[i] for i in rows])
    flagged = finding.flagged
    hits = int(np.sum(flagged & truth))
    kept = rows[~flagged]
    options = dict(sctx.config.stealer_options.get(settings.stealer, {}))
    stealer.fit([texts[i] for i in rows], answers)  # the same recipe on every answer
    on_all = _verify(sctx, made, stealer, cell_seed)
    cleaned = _make_stealer(sctx, settings.stealer, cell_seed, options, rows=kept)
    cleaned.fit([texts[i] for i in kept], answers[~flagged])
    record = _verify(sctx, made, cleaned, cell_seed)
    held = sctx.holdout_rows
    served = cleaned([texts[i] for i in held])
    record.update(
        p_value_direct=on_all["p_value"],
        copied_direct=on_all["copied"],
        best_bimodality=finding.best_bimodality,
        flagged_rate=float(flagged.mean()),
        marked_rate=float(truth.mean()),
        # Of the flagged rows, the share the service marked (nan: nothing flagged),
        # and of the marked rows, the share flagged.
        precision=hits / int(flagged.sum()) if flagged.any() else math.nan,
        recall=hits / int(truth.sum()) if truth.any() else math.nan,
        copy_fidelity=float(row_cosines(served, sctx.clean[held]).mean()),
    )
    return record


def _paraphrase_cell(
    sctx: LabContext, stealer: Any, args: tuple[Any, ...], *, cell_seed: int, run_seed: int
) -> dict[str, Any]:
    """A thief that trains on K-averaged answers to lexical paraphrases (WET)."""
    from .paraphrase import NeighbourParaphraser, ParaphraseThief

    mode, rate = args
    made = watermark_for(sctx, sctx.config.threats.watermark)
    rows, texts = sctx.stealer_rows, sctx.corpus.texts
    train_texts = [texts[i] for i in rows]
    holdout = [texts[i] for i in sctx.holdout_rows]
    own = _require_standard(sctx)
    paraphraser = _paraphraser(sctx, own, train_texts, NeighbourParaphraser)

    def service(batch: list[str]) -> np.ndarray:
        return np.asarray(made.apply(batch, sctx.embed_clean(batch)), dtype=np.float64)

    thief = ParaphraseThief(
        service, paraphraser, stealer, rate=rate, mode=mode,
        k=sctx.config.threats.paraphrase_k,
        seed=run_seed,  # paraphrases do not depend on the key: cached once
    )  # fmt: skip
    thief.fit(train_texts)
    marked = made.marked(train_texts)
    kept = made.marked(thief.queries(train_texts)).reshape(thief.k, len(train_texts))[:, marked]
    record = _verify(sctx, made, thief, cell_seed)
    record.update(
        copy_fidelity=float(row_cosines(thief(holdout), sctx.clean[sctx.holdout_rows]).mean()),
        cos_clean_trained_on=float(row_cosines(thief.averaged, sctx.clean[rows]).mean()),
        trigger_kept_rate=float(kept.mean()) if kept.size else math.nan,
        service_queries=thief.n_queries,
    )
    return record


def _require_standard(ctx: Any) -> Any:
    if ctx.standard_model is None:
        raise ValueError("this threat needs the attacker's own model (config 'standard')")
    return ctx.standard_model


def _make_stealer(
    ctx: Any, name: str, seed: int, options: Mapping[str, Any], *, rows: np.ndarray | None = None
) -> Any:
    """The stealer ``name``, to be fitted on ``rows`` of the corpus (default: the stealer's)."""
    from .stealers import ENCODER_STEALERS, make_stealer

    rows = ctx.stealer_rows if rows is None else rows
    features = ctx.standard[rows] if name in ENCODER_STEALERS else None
    return make_stealer(name, seed=seed, encoder=ctx.standard_model, features=features, **options)


_PARAPHRASERS: dict[tuple[int, int], Any] = {}


def _paraphraser(ctx: Any, own: Any, train_texts: list[str], factory: Any) -> Any:
    """One paraphraser per run (its vocabulary embedding is the slow part; disk-cached too)."""
    from .cache import cached_embed
    from .context import model_name

    slot = (id(ctx.corpus), len(train_texts))
    if slot not in _PARAPHRASERS:
        name = model_name(own, ctx.config.standard)
        _PARAPHRASERS.clear()
        _PARAPHRASERS[slot] = factory(
            own,
            train_texts,
            embed_words=lambda words: cached_embed(own, words, model_name=name),
        )
    return _PARAPHRASERS[slot]


def aggregate(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per threat: mean and sd over seeds of every numeric field, verdict counts."""
    by_threat: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_threat.setdefault(str(r["threat"]), []).append(r)
    rows = []
    for threat, group in by_threat.items():
        row: dict[str, Any] = {"threat": threat, "n_seeds": len(group)}
        fields = [
            k
            for k, v in group[0].items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "seed"
        ]
        for f in fields:
            values = np.array([float(r[f]) for r in group], dtype=np.float64)
            if f.startswith("p_value"):
                f, values = f"log10_{f}", np.log10(np.maximum(values, 1e-300))
            row[f] = {
                "mean": float(np.mean(values)),
                "sd": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
            }
        for f in ("copied", "copied_direct"):
            if f in group[0]:
                row[f] = int(sum(bool(r[f]) for r in group))
        rows.append(row)
    return rows
