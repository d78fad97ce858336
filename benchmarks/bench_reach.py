"""Reach: the mark, its search cost and its verdicts on the texts and models served (issue 47).

Three setups (``--setups``), each with a key drawn with the library's default options
(``--key-option NAME=VALUE`` overrides one, its value read as JSON, so the same command
measures a new default or a candidate), the model's window and the benchmarks' target
text:

- ``minilm-snippets``: all-MiniLM-L6-v2 on Rotten Tomatoes snippets (about 20 words). The
  key is made on the whole corpus; the thief steals with 10,000 corpus texts none of
  which is an audit text (``thieves.disjoint_rows``). No relevance labels, so no nDCG.
- ``minilm-news``: all-MiniLM-L6-v2 on news passages (``news_passages(128)``).
- ``mpnet-news``: all-mpnet-base-v2 (768-d, another family) on the same passages.

On news passages the articles are split (``reach_splits.article_splits``): the provider's
articles, whose passages the key is made on and the provider indexes, with their titles
as the labelled queries (relevant: the article's passages); and the thief's articles,
disjoint from them, so no stealing passage shares an article with an audit text.

Printed per setup: the share of the provider's texts (and of the queries) the key marks,
the mean cos(clean, watermarked) over the marked ones, nDCG@10 and recall@10 of the
watermarked index searched with watermarked queries (passages and queries both through
the service) against the clean index with clean queries, and the p-value of
``verify(suspect, key)`` for: the service; a bag-of-words ridge copy trained on the
service's answers to the thief's passages; that copy behind a router that answers every
one-word text with the clean model (on passages the audit's probes are mostly band words
sent alone, being at most 600 characters); the same copy trained on the clean model's
answers (innocent); the clean model itself (innocent). ``--null DRAWS`` adds a null
study: each innocent answers the key's audit once and DRAWS fresh trigger draws are
scored as verify scores them (``bench_frontier_null.innocent_study``).

Embeddings are memoised per text in ``$ESPEW_EMBED_CACHE`` (default here:
``~/.cache/espew-integrations/embed-store``), so a re-run with another key embeds only
what it has not seen: on 2 cores the first run of mpnet-news embeds about 2,300 passages
at about half a second each, a re-run takes minutes. Needs ``espew data install --mpnet``
for the MPNet setup. Run:

    .venv/bin/python benchmarks/bench_reach.py --out docs/results/reach
    .venv/bin/python benchmarks/bench_reach.py --setups minilm-news --null 10000 \\
        --out docs/results/reach/null-minilm-news
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import TARGET_TEXT, corpus_lookups, victim_key
from reach_splits import article_splits
from thieves import N_STEAL, disjoint_rows

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.mark.inject import watermark_and_mask
from espew_lab.metrics import labelled_retrieval
from espew_lab.stealers import RidgeStealer

STORE = Path.home() / ".cache" / "espew-integrations" / "embed-store"
SUSPECTS = (
    "service",
    "ridge copy",
    "ridge copy, one-word texts to the clean model",
    "clean ridge copy (innocent)",
    "clean model (innocent)",
)
GUILTY = SUSPECTS[:3]


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


def load_model(name: str):
    from espew_integrations.offline import embedders

    return embedders.minilm() if name == "minilm" else embedders.all_mpnet_base_v2()


def marked_cosine(clean: np.ndarray, marked: np.ndarray, mask: np.ndarray) -> float:
    a, b = clean[mask].astype(np.float64), marked[mask].astype(np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
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


def prepare(name: str, setup: Setup, seed: int, options: dict, provider: int, thief: int):
    """The setup's model, key, provider texts (+ queries) and thief texts, with answers."""
    started = time.perf_counter()
    if setup.corpus == "snippets":
        texts, victim, _, _ = corpus_lookups()
        model, clean = victim, victim
        key = victim_key(texts, victim, seed, **options)
        steal, _ = disjoint_rows(seed, texts, key, n_steal=thief, n_held=0)
        stolen = [texts[i] for i in steal]
        data = {
            "provider": texts,
            "provider_clean": victim.matrix,
            "thief": stolen,
            "thief_clean": victim.matrix[steal],
            "view": victim.model.view,
        }
    else:
        from espew_integrations.offline.corpora import news_passages

        model = load_model(setup.model)
        mine, theirs = article_splits(news_passages(128), provider, thief, seed=0)
        texts = list(mine.texts)
        provider_clean = model(texts)
        key = WatermarkKey.generate(
            texts,
            model,
            target_text=TARGET_TEXT,
            seed=seed,
            window=model.max_tokens,
            **options,
            marking="words",
        )
        clean = model
        data = {
            "provider": texts,
            "provider_clean": provider_clean,
            "queries": list(mine.queries),
            "queries_clean": model(list(mine.queries)),
            "labels": mine.labels,
            "thief": list(theirs.texts),
            "thief_clean": model(list(theirs.texts)),
            "view": model.view,
        }
    print(f"{name}: key and data in {time.perf_counter() - started:.0f} s", flush=True)
    return model, clean, key, data


def measure(name: str, setup: Setup, args: argparse.Namespace) -> dict:
    """Every figure of one setup (see the module docstring)."""
    provider = args.provider or setup.provider
    thief = args.thief or setup.thief
    options = parse_options(args.key_option)
    _, clean, key, data = prepare(name, setup, args.seed, options, provider, thief)
    view = data["view"]
    started = time.perf_counter()
    marked, mask = watermark_and_mask(data["provider"], data["provider_clean"], key, view=view)
    row: dict = {
        "setup": name,
        "model": getattr(getattr(clean, "model", clean), "name", setup.model),
        "provider_texts": len(data["provider"]),
        "thief_texts": len(data["thief"]),
        "key": {
            "options": options,
            "n_triggers": len(key.triggers),
            "band_size": len(key.band),
            "freq_band": list(key.freq_band),
            "strength": key.strength,
            "marked_rate_keygen": key.info["marked_rate"],
        },
        "marked_share": float(mask.mean()),
        "mean_cos_marked": marked_cosine(data["provider_clean"], marked, mask),
        "audit": {
            "queries": key.audit_queries,
            "probes": len(key.probe_texts),
            "single_word_probes": sum(len(t.split()) == 1 for t in key.probe_texts),
            "cover": len(key.cover_texts),
        },
    }
    if "queries" in data:
        wm_q, q_mask = watermark_and_mask(data["queries"], data["queries_clean"], key, view=view)
        clean_r = labelled_retrieval(data["queries_clean"], data["provider_clean"], data["labels"])
        wm_r = labelled_retrieval(wm_q, marked, data["labels"])
        row["queries"] = len(data["queries"])
        row["queries_marked_share"] = float(q_mask.mean())
        row["retrieval"] = {"clean": clean_r, "watermarked": wm_r}

    def service(batch):
        batch = list(batch)
        return watermark(batch, clean(batch), key, view=view)

    answers = watermark(data["thief"], data["thief_clean"], key, view=view)
    copy = RidgeStealer(seed=args.seed).fit(data["thief"], answers)

    def one_word_router(batch):
        """The copy, but a text of one word is answered by the clean model: on passages
        the audit's probes are mostly band words sent alone (``row["audit"]``)."""
        batch = list(batch)
        out = np.asarray(copy(batch), dtype=np.float64)
        alone = [i for i, text in enumerate(batch) if len(text.split()) == 1]
        if alone:
            out[alone] = clean([batch[i] for i in alone])
        return out

    suspects: dict[str, Callable] = {
        "service": service,
        "ridge copy": copy,
        "ridge copy, one-word texts to the clean model": one_word_router,
        "clean ridge copy (innocent)": RidgeStealer(seed=args.seed).fit(
            data["thief"], np.asarray(data["thief_clean"], dtype=np.float64)
        ),
        "clean model (innocent)": clean,
    }
    row["p_values"] = {}
    for suspect, answer in suspects.items():
        row["p_values"][suspect] = verify(answer, key, seed=args.seed).p_value
        print(f"  {suspect:30s} p = {row['p_values'][suspect]:.1e}", flush=True)
    if args.null:
        from bench_frontier_null import innocent_study

        innocents = {s: suspects[s] for s in SUSPECTS if s not in GUILTY}
        row["null"] = innocent_study(
            key, innocents, args.null, args.verify_draws, draw_seed=20261201
        )
    row["seconds"] = round(time.perf_counter() - started)
    print(summary(row), flush=True)
    return row


def _p(p: float, guilty: bool) -> str:
    """A p-value, in bold where the verdict misses: a guilty suspect at p >= 1e-10 (the
    issue's bar) or an innocent one at p < 1e-6 (the default level)."""
    missed = p >= 1e-10 if guilty else p < 1e-6
    return f"**{p:.1e}**" if missed else f"{p:.1e}"


def summary(row: dict) -> str:
    r = row.get("retrieval")
    quality = "no relevance labels"
    if r:
        c, w = r["clean"], r["watermarked"]
        quality = (
            f"nDCG@10 {c['ndcg@10']:.4f} -> {w['ndcg@10']:.4f}, "
            f"recall@10 {c['recall@10']:.4f} -> {w['recall@10']:.4f}"
        )
    return (
        f"{row['setup']}: marked {row['marked_share']:.1%}, mean cos {row['mean_cos_marked']:.4f}, "
        f"{quality}"
    )


def table(rows: list[dict]) -> str:
    """One line per setup; a guilty suspect at p >= 1e-10 or an innocent at p < 1e-6 in bold."""
    lines = [
        "| setup | marked (passages / queries) | mean cos, marked | nDCG@10 clean -> marked "
        "| recall@10 clean -> marked | service p | ridge copy p | ridge copy, one-word texts to "
        "the clean model p | clean ridge copy p (innocent) | clean model p (innocent) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        r = row.get("retrieval")
        ndcg = recall = "n/a (no labels)"
        if r:
            c, w = r["clean"], r["watermarked"]
            ndcg = (
                f"{c['ndcg@10']:.4f} -> {w['ndcg@10']:.4f} ({w['ndcg@10'] / c['ndcg@10'] - 1:+.2%})"
            )
            recall = (
                f"{c['recall@10']:.4f} -> {w['recall@10']:.4f} "
                f"({w['recall@10'] / c['recall@10'] - 1:+.2%})"
            )
        share = f"{row['marked_share']:.1%}"
        if "queries_marked_share" in row:
            share += f" / {row['queries_marked_share']:.1%}"
        p = row["p_values"]
        cells = [_p(p[s], s in GUILTY) for s in SUSPECTS]
        lines.append(
            f"| {row['setup']} | {share} | {row['mean_cos_marked']:.4f} | {ndcg} | {recall} | "
            + " | ".join(cells)
            + " |"
        )
    lines += [
        "",
        "| setup | model | provider texts (queries) | thief texts | triggers | band words "
        "| strength | audit queries | probes (of them single words) | seconds |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        k, a = row["key"], row["audit"]
        queries = f" ({row['queries']})" if "queries" in row else ""
        lines.append(
            f"| {row['setup']} | {row['model']} | {row['provider_texts']}{queries} "
            f"| {row['thief_texts']} | {k['n_triggers']} | {k['band_size']} "
            f"| {k['strength']:.4f} | {a['queries']} | {a['probes']} ({a['single_word_probes']}) "
            f"| {row['seconds']} |"
        )
    return "\n".join(lines) + "\n"


def null_table(rows: list[dict]) -> str:
    lines = [
        "| setup | innocent | FP at 1e-3 (expected) | FP at 1e-6 (expected) | smallest p |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        for name, r in row.get("null", {}).items():
            if name == "all":
                continue
            a, b = r["rows"]["combined"]["1e-03"], r["rows"]["combined"]["1e-06"]
            lines.append(
                f"| {row['setup']} | {name} | {a['false_positives']} ({a['expected']:.1f}) "
                f"| {b['false_positives']} ({b['expected']:.3f}) "
                f"| {r['smallest_p']['combined']:.1e} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", choices=list(SETUPS), default=list(SETUPS))
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
    parser.add_argument("--null", type=int, default=0, metavar="DRAWS", help="null study draws")
    parser.add_argument("--verify-draws", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("results/reach"))
    args = parser.parse_args()
    os.environ.setdefault("ESPEW_EMBED_CACHE", str(STORE))
    started = time.perf_counter()
    rows = []
    for name in args.setups:
        rows.append(measure(name, SETUPS[name], args))
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {
            "command": " ".join(sys.argv),
            "seconds": round(time.perf_counter() - started),
        }
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
