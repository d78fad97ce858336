"""Reach: the mark, its search cost and its verdicts on the texts and models served (issue 47).

Three setups (``--setups``), each with a key of ``--marking`` (``field``, the default
key design, or ``words``) drawn with the library's other default options
(``--key-option NAME=VALUE`` overrides one, its value read as JSON, so the same command
measures a new default or a candidate), the model's window and the benchmarks' target
text:

- ``minilm-snippets``: all-MiniLM-L6-v2 on Rotten Tomatoes snippets (about 20 words). The
  key is made on the whole corpus; the thief steals with 10,000 corpus texts, and the
  stolen value is judged on 500 others, none of them an audit text
  (``thieves.disjoint_rows``). No relevance labels, so no nDCG.
- ``minilm-news``: all-MiniLM-L6-v2 on news passages (``news_passages(128)``).
- ``mpnet-news``: all-mpnet-base-v2 (768-d, another family) on the same passages.

On news passages the articles are split (``reach_splits.article_splits``): the provider's
articles, whose passages the key is made on and the provider indexes, with their titles
as the labelled queries (relevant: the article's passages); and the thief's articles,
disjoint from them, so no stealing passage shares an article with an audit text. The
stolen value is judged on 500 of the provider's passages (seeded), which the thief never
sent.

Printed per setup: the share of the provider's texts (and of the queries) the key marks,
the mean cos(clean, watermarked) over the marked ones, nDCG@10 and recall@10 of the
watermarked index searched with watermarked queries (passages and queries both through
the service) against the clean index with clean queries, and per suspect the p-value of
``verify`` with the key's own audit (keygen) and with a round-2 audit of at most
``--traffic`` texts drawn from what the suspect's thief sent (``key.with_audit``, the
traffic audit of a provider that samples its traffic), and its stolen value
(``thieves.stolen_value``: top-10 neighbour overlap with the clean service on the held-out
texts, less that of the thief's open model, paraphrase-MiniLM-L3). The suspects:

- the service itself;
- ``ridge copy``: a bag-of-words ridge (``RidgeStealer``) trained on the service's answers
  to the thief's texts;
- ``encoder-head copy``: a ridge head on paraphrase-MiniLM-L3 (``EncoderRidgeStealer``)
  trained on the same answers;
- the ridge copy behind a router that answers every one-word text with the clean model
  (a word key probes passages mostly by band words sent alone);
- the informed thieves of ``bench_unavoidable`` (the thief knows the design, not the
  key), each an encoder-head copy: ``drop-30% refit`` fits, drops the 30% of answers it
  fits worst and refits; ``band-deleting thief`` deletes every word of the public
  frequency range on its own texts (with a 20% margin) before it queries, and is
  traffic-audited on what it sent;
- innocents: the ridge copy and the encoder-head copy trained on the clean model's
  answers, and the clean model itself.

``--null KEYS`` adds a null study. For a field key: fresh salts, each drawing a new field
(matrix and units), score fixed innocent answers exactly as ``verify`` scores a field
key (``reach_null``, checked against ``bench_field_null.study``), on the keygen and the
traffic audit; the key's own salt
through the same code is checked against ``verify()``. For a word key: fresh trigger
draws (``bench_frontier_null.innocent_study``). ``--null-only`` judges no suspect,
``--null-workers N`` scores the salts in N processes (``reach_null``).

Embeddings are memoised per text in ``$ESPEW_EMBED_CACHE`` (default here:
``~/.cache/espew-integrations/embed-store``), so a re-run with another key embeds only
what it has not seen (on 2 cores MPNet embeds a 128-word passage in about half a
second). Needs ``espew data install --mpnet`` for the MPNet setup. Run:

    .venv/bin/python benchmarks/bench_reach.py --out docs/results/reach
    .venv/bin/python benchmarks/bench_reach.py --setups minilm-news --null 10000 --null-only \\
        --null-workers 3 --out docs/results/reach/field-null-minilm-news
    .venv/bin/python benchmarks/bench_reach.py --marking words --out docs/results/reach/words
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import TARGET_TEXT, corpus_lookups
from bench_strip_band import row_cosines, strip_words
from bench_unavoidable import DROP, public_band
from reach_splits import article_splits
from thieves import N_HELD_OUT, N_STEAL, Thief, disjoint_rows, stolen_value

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.ground.defaults import DEFAULT_MARKING
from espew_integrations.core.mark.design import design_names
from espew_integrations.core.mark.inject import watermark_and_mask
from espew_lab.metrics import labelled_retrieval
from espew_lab.stealers import EncoderRidgeStealer, RidgeStealer

STORE = Path.home() / ".cache" / "espew-integrations" / "embed-store"
ROUTER = "ridge copy, one-word texts to the clean model"
#: Each suspect: whether it is guilty, and which traffic its thief sent.
SUSPECTS = {
    "service": (True, "untouched"),
    "ridge copy": (True, "untouched"),
    "encoder-head copy": (True, "untouched"),
    ROUTER: (True, "untouched"),
    "drop-30% refit (informed)": (True, "untouched"),
    "band-deleting thief (informed)": (True, "deleted"),
    "clean ridge copy (innocent)": (False, "untouched"),
    "clean encoder-head copy (innocent)": (False, "untouched"),
    "clean model (innocent)": (False, "untouched"),
}


#: Open encoders beside L3 that a thief's ridge head may sit on (``--mpnet-head``).
EXTRA_HEADS: dict[str, Known] = {}


@dataclass(frozen=True)
class Setup:
    model: str  # "minilm" or "mpnet"
    corpus: str  # "snippets" or "news"
    provider: int  # passages in the provider's articles (news)
    thief: int  # the thief's stealing texts


SETUPS = {
    "minilm-snippets": Setup("minilm", "snippets", 0, N_STEAL),
    "minilm-news": Setup("minilm", "news", 3000, 2000),
    "mpnet-news": Setup("mpnet", "news", 1000, 1000),
}


class Known:
    """``model`` with every answer it gave kept by text for this run (one per model: a
    text's answer under one model is no answer under another)."""

    def __init__(self, model: Callable, texts: Sequence[str] = (), rows=None):
        self.model = model
        self.rows: dict[str, np.ndarray] = {}
        if rows is not None:
            self.rows.update(zip(texts, np.asarray(rows, dtype=np.float32), strict=True))

    def __call__(self, batch: Sequence[str]) -> np.ndarray:
        batch = list(batch)
        missing = list(dict.fromkeys(t for t in batch if t not in self.rows))
        if missing:
            answers = np.asarray(self.model(missing), dtype=np.float32)
            self.rows.update(zip(missing, answers, strict=True))
        return np.stack([self.rows[t] for t in batch])


@dataclass
class Data:
    """One setup's texts: the provider's corpus (its index), the thief's stealing texts,
    the held-out texts stolen value is judged on, and the labelled queries (news)."""

    provider: list[str]
    thief: list[str]
    held: list[str]
    clean: Known  # the provider's clean model
    own: Known  # the thief's open model (paraphrase-MiniLM-L3)
    view: Callable
    queries: list[str] | None = None
    labels: np.ndarray | None = None


def load_model(name: str):
    from espew_integrations.offline import embedders

    return embedders.minilm() if name == "minilm" else embedders.all_mpnet_base_v2()


def marked_cosine(clean: np.ndarray, marked: np.ndarray, mask: np.ndarray) -> float:
    cos = row_cosines(clean[mask], marked[mask])
    return float(cos.mean()) if len(cos) else float("nan")


def parse_options(pairs: list[str]) -> dict:
    """``NAME=VALUE`` pairs as key options, each value read as JSON (else as a string)."""
    options = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            options[name] = json.loads(value)
        except json.JSONDecodeError:
            options[name] = value
    return options


def prepare(setup: Setup, args: argparse.Namespace, options: dict) -> tuple[WatermarkKey, Data]:
    """The setup's key and texts, with the clean and the open model's answers at hand."""
    provider = args.provider or setup.provider
    thief = args.thief or setup.thief
    if setup.corpus == "snippets":
        texts, victim, standard, _ = corpus_lookups()
        clean = Known(victim.model, texts, victim.matrix)
        model = victim.model
        key = WatermarkKey.generate(
            texts,
            clean,
            target_text=TARGET_TEXT,
            seed=args.seed,
            window=model.max_tokens,
            **options,
        )
        steal, held = disjoint_rows(args.seed, texts, key, n_steal=thief, n_held=N_HELD_OUT)
        own = Known(standard.model, texts, standard.matrix)
        data = Data(
            texts, [texts[i] for i in steal], [texts[i] for i in held], clean, own, model.view
        )
        return key, data
    from espew_integrations.offline.corpora import news_passages
    from espew_integrations.offline.embedders import paraphrase_minilm_l3

    model = load_model(setup.model)
    mine, theirs = article_splits(news_passages(128), provider, thief, seed=0)
    texts, clean = list(mine.texts), Known(model)
    clean(texts)
    key = WatermarkKey.generate(
        texts, clean, target_text=TARGET_TEXT, seed=args.seed, window=model.max_tokens, **options
    )
    rng = np.random.default_rng(args.seed + 200)
    held = np.sort(rng.choice(len(texts), min(N_HELD_OUT, len(texts)), replace=False))
    data = Data(
        texts,
        list(theirs.texts),
        [texts[i] for i in held],
        clean,
        Known(paraphrase_minilm_l3()),
        model.view,
        list(mine.queries),
        mine.labels,
    )
    return key, data


def describe(name: str, key: WatermarkKey, data: Data, options: dict) -> dict:
    """What the key marks, at what cost, and what search keeps (labelled queries)."""
    provider_clean = data.clean(data.provider)
    marked, mask = watermark_and_mask(data.provider, provider_clean, key, view=data.view)
    probes = list(key.probe_texts)
    row: dict = {
        "setup": name,
        "model": getattr(data.clean.model, "name", name),
        "provider_texts": len(data.provider),
        "thief_texts": len(data.thief),
        "held_texts": len(data.held),
        "key": {
            "options": options,
            "marking": key.info.get("marking", key.marking),
            "n_triggers": len(key.triggers),
            "band_size": len(key.band),
            "strength": key.strength,
            "marked_rate_keygen": key.info.get("marked_rate"),
        },
        "marked_share": float(mask.mean()),
        "mean_cos_marked": marked_cosine(provider_clean, marked, mask),
        "audit": {
            "queries": key.audit_queries,
            "probes": len(probes),
            "single_word_probes": sum(len(t.split()) == 1 for t in probes),
            "mean_probe_words": float(np.mean([len(t.split()) for t in probes])),
            "cover": len(key.cover_texts),
        },
    }
    if data.queries is not None:
        queries_clean = data.clean(data.queries)
        wm_q, q_mask = watermark_and_mask(data.queries, queries_clean, key, view=data.view)
        row["queries"] = len(data.queries)
        row["queries_marked_share"] = float(q_mask.mean())
        row["retrieval"] = {
            "clean": labelled_retrieval(queries_clean, provider_clean, data.labels),
            "watermarked": labelled_retrieval(wm_q, marked, data.labels),
        }
    return row


def head(own: Known, texts: list[str], answers: np.ndarray) -> EncoderRidgeStealer:
    """A ridge head on the thief's open model, fitted to ``answers``."""
    return EncoderRidgeStealer(own, features=own(texts)).fit(texts, answers)


def refit_dropping_worst(own: Known, texts: list[str], answers: np.ndarray) -> EncoderRidgeStealer:
    """The drop-30% thief: fit, drop the answers fitted worst, refit on the rest."""
    misfit = 1.0 - row_cosines(head(own, texts, answers)(texts), answers)
    keep = misfit <= np.quantile(misfit, 1.0 - DROP)
    return head(own, [t for t, k in zip(texts, keep, strict=True) if k], answers[keep])


def build_suspects(key: WatermarkKey, data: Data, seed: int) -> tuple[dict, dict]:
    """Every suspect of :data:`SUSPECTS` by name, and the texts each thief sent."""
    clean, own, view = data.clean, data.own, data.view

    def service(batch: Sequence[str]) -> np.ndarray:
        batch = list(batch)
        return watermark(batch, clean(batch), key, view=view)

    thief = data.thief
    answers = np.asarray(service(thief), dtype=np.float64)
    clean_answers = clean(thief).astype(np.float64)
    deleted = strip_words(thief, public_band(thief))
    ridge = RidgeStealer(seed=seed).fit(thief, answers)

    def one_word_router(batch: Sequence[str]) -> np.ndarray:
        """The ridge copy, but a text of one word is answered by the clean model."""
        batch = list(batch)
        out = np.asarray(ridge(batch), dtype=np.float64)
        alone = [i for i, text in enumerate(batch) if len(text.split()) == 1]
        if alone:
            out[alone] = clean([batch[i] for i in alone])
        return out

    suspects = {
        "service": service,
        "ridge copy": ridge,
        "encoder-head copy": head(own, thief, answers),
        ROUTER: one_word_router,
        "drop-30% refit (informed)": refit_dropping_worst(own, thief, answers),
        "band-deleting thief (informed)": head(
            own, deleted, np.asarray(service(deleted), dtype=np.float64)
        ),
        "clean ridge copy (innocent)": RidgeStealer(seed=seed).fit(thief, clean_answers),
        "clean encoder-head copy (innocent)": head(own, thief, clean_answers),
        "clean model (innocent)": clean,
    }
    for name, base in EXTRA_HEADS.items():  # --mpnet-head: a larger open encoder as the base
        suspects[f"{name}-head copy"] = head(base, thief, answers)
        suspects[f"clean {name}-head copy (innocent)"] = head(base, thief, clean_answers)
    kept = np.mean([len(d.split()) / len(t.split()) for d, t in zip(deleted, thief, strict=True)])
    sent = {"untouched": thief, "deleted": deleted, "deleted_words_kept": float(kept)}
    return suspects, sent


def traffic_key(key: WatermarkKey, texts: list[str], clean: Known, budget: int):
    """A round-2 audit of at most ``budget`` texts drawn from ``texts`` (None if refused)."""
    try:
        return key.with_audit(texts, clean, audit_round=2, audit_budget=budget)
    except ValueError as exc:  # a word key whose band the thief kept away: nothing to ask
        print(f"  traffic audit refused: {str(exc)[:160]}", flush=True)
        return None


def judge(key, suspects: dict, traffic: dict, held: Thief, seed: int) -> dict:
    """Each suspect's keygen and traffic p-values and its stolen value."""
    out = {}
    for name, suspect in suspects.items():
        round_two = traffic[SUSPECTS[name][1]]
        value = stolen_value(suspect, held)
        out[name] = {
            "guilty": SUSPECTS[name][0],
            "keygen_p": verify(suspect, key, seed=seed).p_value,
            "traffic_p": None
            if round_two is None
            else verify(suspect, round_two, seed=seed).p_value,
            "stolen": value["stolen"],
            "top10": value["top10"],
        }
        r = out[name]
        traffic_p = "refused" if r["traffic_p"] is None else f"{r['traffic_p']:.1e}"
        print(
            f"  {name:36s} keygen p {r['keygen_p']:.1e}  traffic p {traffic_p}  "
            f"stolen {r['stolen']:+.3f}",
            flush=True,
        )
    return out


def measure(name: str, setup: Setup, args: argparse.Namespace) -> dict:
    """Every figure of one setup (see the module docstring)."""
    options = {"marking": args.marking, **parse_options(args.key_option)}
    started = time.perf_counter()
    key, data = prepare(setup, args, options)
    print(f"{name}: key and data in {time.perf_counter() - started:.0f} s", flush=True)
    row = describe(name, key, data, options)
    print(summary(row), flush=True)
    suspects, sent = build_suspects(key, data, args.seed)
    traffic = {
        s: traffic_key(key, sent[s], data.clean, args.traffic) for s in ("untouched", "deleted")
    }
    row["traffic_audit"] = {s: None if k is None else k.audit_queries for s, k in traffic.items()}
    row["deleted_words_kept"] = sent["deleted_words_kept"]
    held = Thief(
        split="reach",
        steal=data.thief,
        held=data.held,
        clean_steal=data.clean(data.thief).astype(np.float64),
        clean_held=data.clean(data.held).astype(np.float64),
        own_held=data.own(data.held).astype(np.float64),
    )
    row["suspects"] = {} if args.null_only else judge(key, suspects, traffic, held, args.seed)
    if args.null:
        innocents = {s: suspects[s] for s, (guilty, _) in SUSPECTS.items() if not guilty}
        row["null"] = null_study(key, traffic["untouched"], innocents, args)
    row["seconds"] = round(time.perf_counter() - started)
    return row


def null_study(key, round_two, innocents: dict, args: argparse.Namespace) -> dict:
    """False positives over ``args.null`` fresh keys (see the module docstring)."""
    if key.marking == "words":
        from bench_frontier_null import innocent_study

        return {
            "keygen": innocent_study(
                key, innocents, args.null, args.verify_draws, draw_seed=20261201
            )
        }
    from reach_null import counts, null_p_values, own_salt_check, plain_check, scored_audit

    started = time.perf_counter()
    audited = {"keygen": key, "traffic": round_two}
    audited = {name: k for name, k in audited.items() if k is not None}
    answers = {
        name: {
            n: np.asarray(f(list(k.probe_texts)), dtype=np.float64) for n, f in innocents.items()
        }
        for name, k in audited.items()
    }
    audits = [scored_audit(name, key, k, answers[name]) for name, k in audited.items()]
    seed = 1000 * args.seed
    p_values = null_p_values(key, audits, args.null, seed, workers=args.null_workers)
    out = {}
    for audit, p in zip(audits, p_values, strict=True):
        k = audited[audit.name]
        out[audit.name] = {
            "audit_texts": audit.texts,
            "audit_round": audit.rounds,
            "keys": args.null,
            "own_salt_check": own_salt_check(key, k, answers[audit.name], innocents, args.seed),
            "plain_check_max_log10_gap": plain_check(
                key, k, answers[audit.name], audit.rounds, p[: args.null_check], seed
            ),
            "innocents": {n: counts(p[:, j]) for j, n in enumerate(audit.innocents)},
        }
        print(f"  null study, {audit.name} audit: {out[audit.name]}", flush=True)
    out["seconds"] = round(time.perf_counter() - started)
    return out


def _p(p: float | None, guilty: bool) -> str:
    """A p-value, in bold where the verdict misses: a guilty suspect at p >= 1e-10 (the
    issue's bar) or an innocent one at p < 1e-6 (the default level)."""
    if p is None:
        return "refused"
    missed = p >= 1e-10 if guilty else p < 1e-6
    return f"**{p:.1e}**" if missed else f"{p:.1e}"


def _change(clean: float, marked: float) -> str:
    return f"{clean:.4f} -> {marked:.4f} ({marked / clean - 1:+.2%})"


def summary(row: dict) -> str:
    r = row.get("retrieval")
    quality = "no relevance labels"
    if r:
        c, w = r["clean"], r["watermarked"]
        quality = (
            f"nDCG@10 {_change(c['ndcg@10'], w['ndcg@10'])}, "
            f"recall@10 {_change(c['recall@10'], w['recall@10'])}"
        )
    return (
        f"{row['setup']}: marked {row['marked_share']:.1%}, mean cos {row['mean_cos_marked']:.4f}, "
        f"{quality}"
    )


def table(rows: list[dict]) -> str:
    """Quality per setup, then one line per setup and suspect, then the keys."""
    lines = [
        "| setup | marked (passages / queries) | mean cos, marked | nDCG@10 clean -> marked "
        "| recall@10 clean -> marked |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        r = row.get("retrieval")
        ndcg = recall = "n/a (no labels)"
        if r:
            c, w = r["clean"], r["watermarked"]
            ndcg, recall = (_change(c[m], w[m]) for m in ("ndcg@10", "recall@10"))
        share = f"{row['marked_share']:.1%}"
        if "queries_marked_share" in row:
            share += f" / {row['queries_marked_share']:.1%}"
        lines.append(
            f"| {row['setup']} | {share} | {row['mean_cos_marked']:.4f} | {ndcg} | {recall} |"
        )
    lines += [
        "",
        "| setup | suspect | keygen audit p | traffic audit p | stolen value |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        for name, s in row["suspects"].items():
            lines.append(
                f"| {row['setup']} | {name} | {_p(s['keygen_p'], s['guilty'])} "
                f"| {_p(s['traffic_p'], s['guilty'])} | {s['stolen']:+.3f} |"
            )
    lines += [
        "",
        "| setup | model | marking | provider texts (queries) | thief texts | triggers or units "
        "| strength | keygen audit queries | probes (single words; mean words) "
        "| traffic audit queries (untouched / deleted) | seconds |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        k, a, t = row["key"], row["audit"], row["traffic_audit"]
        queries = f" ({row['queries']})" if "queries" in row else ""
        lines.append(
            f"| {row['setup']} | {row['model']} | {k['marking']} "
            f"| {row['provider_texts']}{queries} | {row['thief_texts']} "
            f"| {k['n_triggers']} of {k['band_size']} | {k['strength']:.4f} "
            f"| {a['queries']} | {a['probes']} ({a['single_word_probes']}; "
            f"{a['mean_probe_words']:.0f}) | {t['untouched']} / {t['deleted']} | {row['seconds']} |"
        )
    return "\n".join(lines) + "\n"


def null_table(rows: list[dict]) -> str:
    lines = [
        "| setup | audit | innocent | fresh keys | p <= 1e-2 (expected at most) "
        "| p <= 1e-3 (expected at most) | p <= 1e-6 (expected at most) | smallest p |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        for audit, r in row.get("null", {}).items():
            if audit == "seconds":
                continue
            if "innocents" not in r:  # a word key's study: bench_frontier_null's rows
                for name, w in r.items():
                    if name != "all":
                        c = w["rows"]["combined"]
                        lines.append(
                            f"| {row['setup']} | {audit} | {name} | | "
                            f"| {c['1e-03']['false_positives']} ({c['1e-03']['expected']:.1f}) "
                            f"| {c['1e-06']['false_positives']} ({c['1e-06']['expected']:.3f}) "
                            f"| {w['smallest_p']['combined']:.1e} |"
                        )
                continue
            n = r["keys"] / r["audit_round"]  # a round-k p-value is k times the round's own
            for name, v in r["innocents"].items():
                c = v["at_or_below"]
                lines.append(
                    f"| {row['setup']} | {audit} ({r['audit_texts']} texts) | {name} | {r['keys']} "
                    f"| {c['0.01']} ({n * 1e-2:.0f}) | {c['0.001']} ({n * 1e-3:.0f}) "
                    f"| {c['1e-06']} ({n * 1e-6:.3f}) | {v['smallest_p']:.1e} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", choices=list(SETUPS), default=list(SETUPS))
    parser.add_argument("--marking", choices=design_names(), default=DEFAULT_MARKING)
    parser.add_argument("--seed", type=int, default=1, help="the key's seed")
    parser.add_argument(
        "--key-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a key option over the library's default, VALUE as JSON (repeatable)",
    )
    parser.add_argument("--provider", type=int, default=None, help="provider passages (news)")
    parser.add_argument("--thief", type=int, default=None, help="the thief's texts")
    parser.add_argument(
        "--traffic", type=int, default=1950, help="most texts of a traffic audit (round 2)"
    )
    parser.add_argument("--null", type=int, default=0, metavar="KEYS", help="null study keys")
    parser.add_argument("--verify-draws", type=int, default=20, help="word null: verify() checks")
    parser.add_argument(
        "--null-workers", type=int, default=1, help="field null: processes scoring salts"
    )
    parser.add_argument(
        "--null-only", action="store_true", help="the null study alone, no suspect judged"
    )
    parser.add_argument(
        "--null-check", type=int, default=20, help="field null: salts also scored the plain way"
    )
    parser.add_argument(
        "--mpnet-head",
        action="store_true",
        help="also a thief whose ridge head sits on all-mpnet-base-v2, and its innocent twin",
    )
    parser.add_argument("--out", type=Path, default=Path("results/reach"))
    args = parser.parse_args()
    if args.mpnet_head:
        from espew_integrations.offline.embedders import all_mpnet_base_v2

        EXTRA_HEADS["MPNet"] = Known(all_mpnet_base_v2())
        SUSPECTS["MPNet-head copy"] = (True, "untouched")
        SUSPECTS["clean MPNet-head copy (innocent)"] = (False, "untouched")
    os.environ.setdefault("ESPEW_EMBED_CACHE", str(STORE))
    started = time.perf_counter()
    rows = []
    for name in args.setups:
        rows.append(measure(name, SETUPS[name], args))
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {"command": " ".join(sys.argv), "seconds": round(time.perf_counter() - started)}
        (args.out / "results.json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
        (args.out / "table.md").write_text(
            table(rows) + ("\n" + null_table(rows) if args.null else "")
        )
    print(table(rows))
    if args.null:
        print(null_table(rows))
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
