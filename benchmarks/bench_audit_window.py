"""Can a router tell the whole audit from an ordinary client's traffic?

``bench_audit_shape.py`` asks whether a router can pick the audit's texts out
one by one; it cannot (ROC AUC 0.50-0.52). A thief can also look at a client's
traffic as a whole: an audit arrives from one account, thousands of texts in
a short time, and the thief can compare that window with what an ordinary
client of the same size sends. A statistic that is unremarkable per text can
be decisive over 4,000 texts. If the window is flagged, the thief answers the
whole client from an honest model and the audit measures an innocent.

The ordinary client here is a uniform sample of the corpus, as many texts as
the audit (the thief's reference is the corpus itself, which is generous:
it knows the band's words and their frequencies exactly). For each key the
benchmark draws ``--windows`` such clients and reports, for each window
statistic, the audit's value, the clients' mean and standard deviation, the
z-score, and the share of clients at least as extreme (two-sided):

- the share of texts with fewer than 4 words, and with more than 600
  characters (the probes' length filters);
- the mean number of words;
- the share of texts holding a band word, and of those the share holding two
  or more (the cover texts are chosen to match both);
- the band words' counts against their frequencies: a chi-square, and the
  slope of log(count / expected) on log(frequency) (an audit that gives every
  band word the same number of probes over-represents the rarer ones);
- the share of texts that repeat an earlier text of the window.

The window router flags a client when any statistic is beyond the 0.1%
two-sided tail of the ordinary clients (so it flags about 0.1% times the
number of statistics of them, ``routed clients`` below). Run:

    .venv/bin/python benchmarks/bench_audit_window.py > docs/results/faithful/audit-window.txt

Rotten Tomatoes repeats no text. ``--repeat N`` makes traffic that does: N of
its texts, drawn at random, each sent 2 to 4 more times (the key is made on
that traffic, and the ordinary clients sample its rows). Each key also prints
the z-score its audit's repeat share would have had if the audit asked each
distinct text once, as it did before it sampled rows.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import TARGET_TEXT, corpus_lookups

from espew_integrations import WatermarkKey
from espew_integrations.core.mark.probes import MAX_PROBE_CHARS, MIN_PROBE_WORDS
from espew_integrations.core.mark.words import tokenize

STATISTICS = (
    f"share < {MIN_PROBE_WORDS} words",
    f"share > {MAX_PROBE_CHARS} chars",
    "mean words",
    "band-word share",
    "several of those",
    "band counts chi2",
    "band counts slope",
    "repeat share",
)
TAIL = 1e-3


class TrafficTable:
    """Per-text facts of a corpus, so a window's statistics are a few sums over rows."""

    def __init__(self, texts: list[str], band: tuple[str, ...]) -> None:
        tokens = [tokenize(text) for text in texts]
        index = {word: i for i, word in enumerate(band)}
        self.words = np.array([len(t) for t in tokens], dtype=np.float64)
        self.chars = np.array([len(text) for text in texts], dtype=np.float64)
        self.holds = np.zeros((len(texts), len(band)), dtype=bool)
        for row, words in enumerate(tokens):
            self.holds[row, [index[w] for w in set(words) if w in index]] = True
        self.frequency = self.holds.mean(axis=0)
        _, self.text_id = np.unique(np.asarray(texts, dtype=object), return_inverse=True)

    def statistics(self, rows: np.ndarray) -> np.ndarray:
        """:data:`STATISTICS` of the window made of ``rows`` (indices into the corpus)."""
        holds = self.holds[rows]
        n_band = holds.sum(axis=1)
        counts = holds.sum(axis=0)
        expected = self.frequency * len(rows)
        slope = np.polyfit(np.log(self.frequency), np.log((counts + 0.5) / expected), 1)[0]
        repeats = 1.0 - len(np.unique(self.text_id[rows])) / len(rows)
        return np.array(
            [
                np.mean(self.words[rows] < MIN_PROBE_WORDS),
                np.mean(self.chars[rows] > MAX_PROBE_CHARS),
                np.mean(self.words[rows]),
                np.mean(n_band > 0),
                np.sum(n_band > 1) / max(np.sum(n_band > 0), 1),
                np.sum((counts - expected) ** 2 / expected),
                slope,
                repeats,
            ]
        )


def audit_rows(key: WatermarkKey, row_of: dict[str, int]) -> np.ndarray:
    """The corpus rows of every text the audit sends (a word-alone probe has none)."""
    sent = [*key.probe_texts, *key.cover_texts]
    return np.array([row_of[text] for text in sent if text in row_of])


def two_sided_share(value: float, null: np.ndarray) -> float:
    """Share of ``null`` at least as far from its median as ``value``, on that side."""
    median = np.median(null)
    if value >= median:
        return float(np.mean(null >= value))
    return float(np.mean(null <= value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--windows", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=0, help="texts the traffic repeats")
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, _, _ = corpus_lookups()
    if args.repeat:
        draw = np.random.default_rng(12)
        popular = draw.choice(len(texts), args.repeat, replace=False)
        texts = texts + [texts[i] for i in popular for _ in range(draw.integers(2, 5))]
    row_of = {text: i for i, text in enumerate(texts)}
    rng = np.random.default_rng(0)
    print(
        f"Ordinary clients: {args.windows} uniform samples of the corpus ({len(texts)} texts), "
        "each as large as the audit. 'as extreme': their two-sided share at least as far out."
    )
    for seed in args.seeds:
        key = WatermarkKey.generate(
            texts,
            victim,
            target_text=TARGET_TEXT,
            seed=seed,
            window=victim.model.max_tokens,
            marking="words",
        )
        table = TrafficTable(texts, key.band)
        rows = audit_rows(key, row_of)
        audit = table.statistics(rows)
        null = np.array(
            [
                table.statistics(rng.choice(len(texts), len(rows), replace=False))
                for _ in range(args.windows)
            ]
        )
        print(f"\nkey {seed}: {len(rows)} audit texts ({key.audit_queries} queries)")
        print(f"  {'statistic':20s} {'audit':>9s} {'clients':>19s} {'z':>6s} {'as extreme':>10s}")
        flags = []
        for name, value, column in zip(STATISTICS, audit, null.T, strict=True):
            spread = column.std()
            z = (value - column.mean()) / spread if spread > 0 else 0.0
            share = two_sided_share(value, column)
            low, high = np.quantile(column, [TAIL / 2, 1 - TAIL / 2])
            flags.append(value < low or value > high)
            print(
                f"  {name:20s} {value:9.4f} {column.mean():9.4f} ± {spread:7.4f} {z:6.1f} "
                f"{share:10.4f}{'  flagged' if flags[-1] else ''}"
            )
        if args.repeat:
            column = null[:, STATISTICS.index("repeat share")]
            print(
                f"  an audit asking each text once (repeat share 0) would be at z = "
                f"{-column.mean() / column.std():.1f}"
            )
        lows, highs = np.quantile(null, [TAIL / 2, 1 - TAIL / 2], axis=0)
        routed_clients = np.mean(np.any((null < lows) | (null > highs), axis=1))
        verdict = "FLAGGED: the whole audit goes to the honest model" if any(flags) else "passes"
        print(f"  window router: {verdict} (it routes {routed_clients:.2%} of ordinary clients)")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
