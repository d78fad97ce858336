"""A mark with no direction to strip: the keyed map, measured against informed thieves (issue 53).

Today's field mark moves every answer along one secret vector (the target), so a
thief that estimates that vector from its own stolen answers projects it out and
keeps what it stole (``bench_informed_thieves.py``). This study measures a design
with no fixed target, the *keyed map*: every answer is moved by a keyed linear map
of its own clean embedding,

    marked(e) = unit(e + a * sum_{j in D} clip(z_j(e), -3, 3) h_j / sqrt(|D|)),
    z_j(e)    = (e - mu) . g_j / sigma_j,

with ``g_j`` (input units) and ``h_j`` (orthonormal output directions) drawn from
the salt, ``D`` a secret 64 of 256 units, ``mu`` and ``sigma_j`` the keygen audit's
clean mean and unit scales, ``a`` the amplitude. The mark is spread over 64 output
directions that no text, phrase or answer reveals; it is linear in the clean row, so
a copy learns it exactly as well as it learns the embedding itself.

The audit scores every unit j by how the suspect's answers lean along ``h_j`` in
step with ``z_j`` (each unit's lean adjusted for what the clean row already has
along ``h_j``, snapped as in ``core/ground/stable.py``, correlated with the
whitened input projections), and ranks the drawn units among all 256 with the
library's exact rank test: nothing in the scores depends on which units were
drawn, so the false-positive rate holds by construction.

Setup: Rotten Tomatoes with the offline MiniLM as the service; a 2,000-text keygen
audit; each thief steals 6,000 other texts; 500 held-out texts judge what a copy
kept (top-10 neighbour overlap with the clean service, less that of the thief's own
open model paraphrase-MiniLM-L3; ``benchmarks/thieves.py``). Suspects: the service,
a ridge head on L3 and a hashed bag-of-words ridge, each trained on the marked
answers (copies) or on clean answers (innocents), the clean model and L3 itself.
Thieves (all Kerckhoffs: they know this design, not the key): project out the top k
principal directions of the copy's residuals (answers less its own predictions), or
of the stolen answers themselves.

    python benchmarks/bench_keyed_map.py --amplitudes 0.05 0.03 --seeds 1 2 3 \
        --out docs/results/keyed-map
    python benchmarks/bench_keyed_map.py --seeds --null-keys 2000 \
        --out docs/results/keyed-map/null
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups
from thieves import top_k_overlap

from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.ground.stable import snap_residual
from espew_integrations.core.stats.ranktest import rank_sum_p_value

UNITS, DRAWN = 256, 64
N_AUDIT, N_STEAL, N_HELD = 2_000, 6_000, 500
RIDGE = 1.0


class KeyedMap:
    """The keyed map mark of one seed (the prototype of a design, not the library's key)."""

    def __init__(self, seed: int, audit_clean: np.ndarray, amplitude: float) -> None:
        dim = audit_clean.shape[1]
        self.inputs = np.random.default_rng([seed, 1]).standard_normal((dim, UNITS))
        q, _ = np.linalg.qr(np.random.default_rng([seed, 2]).standard_normal((dim, UNITS)))
        self.outputs = q[:, :UNITS]
        self.mu = audit_clean.mean(axis=0)
        self.sigma = ((audit_clean - self.mu) @ self.inputs).std(axis=0)
        chosen = np.random.default_rng([seed, 3]).choice(UNITS, DRAWN, replace=False)
        self.drawn = np.zeros(UNITS, dtype=bool)
        self.drawn[chosen] = True
        self.amplitude = amplitude

    def mark(self, clean: np.ndarray) -> np.ndarray:
        z = np.clip(
            ((clean - self.mu) @ self.inputs[:, self.drawn]) / self.sigma[self.drawn], -3, 3
        )
        return unit_rows(
            clean + self.amplitude * z @ self.outputs[:, self.drawn].T / np.sqrt(DRAWN)
        )

    def p_value(self, answers: np.ndarray, clean: np.ndarray) -> float:
        """The exact rank test of the drawn units among all (the audit's statistic)."""
        lean = unit_rows(answers) @ self.outputs
        ref = clean @ self.outputs
        lean, ref = lean - lean.mean(axis=0), ref - ref.mean(axis=0)
        slope = (lean * ref).sum(axis=0) / (ref * ref).sum(axis=0)
        adjusted = snap_residual(lean - slope * ref)
        z = whitened(clean, self.mu) @ self.inputs
        z = (z - z.mean(axis=0)) / z.std(axis=0)
        norms = np.sqrt((adjusted * adjusted).sum(axis=0))
        scores = np.divide((adjusted * z).sum(axis=0), norms, out=np.zeros(UNITS), where=norms > 0)
        return rank_sum_p_value(scores, self.drawn)


def whitened(clean: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """``(e - mu) (C + lambda I)^-1/2`` with ``lambda`` the mean eigenvalue (as the field's)."""
    centred = clean - clean.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred / (len(centred) - 1))
    values = np.maximum(values, 0.0)
    return (clean - mu) @ ((vectors / np.sqrt(values + values.mean())) @ vectors.T)


def bag_of_words(texts: list[str], steal: np.ndarray):
    """A hashed tf-idf ridge fitter on the stolen texts (dual form: 6,000 x 6,000)."""
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

    hashing = HashingVectorizer(n_features=2**18, ngram_range=(1, 2), alternate_sign=False)
    tfidf = TfidfTransformer().fit(hashing.transform([texts[i] for i in steal]))
    features = tfidf.transform(hashing.transform(texts))
    train = features[steal]
    inverse = np.linalg.inv((train @ train.T).toarray() + RIDGE * np.eye(len(steal)))
    cross = (features @ train.T).toarray()

    def fit(targets: np.ndarray) -> np.ndarray:
        mean = targets.mean(axis=0)
        return cross @ (inverse @ (targets - mean)) + mean

    return fit


def ridge_head(features: np.ndarray, steal: np.ndarray):
    """A ridge head on the thief's open-model features, fitted on the stolen rows."""
    x = features[steal]
    mean = x.mean(axis=0)
    gram = (x - mean).T @ (x - mean) + RIDGE * np.eye(x.shape[1])

    def fit(targets: np.ndarray) -> np.ndarray:
        y_mean = targets.mean(axis=0)
        weights = np.linalg.solve(gram, (x - mean).T @ (targets - y_mean))
        return (features - mean) @ weights + y_mean

    return fit


def projected_out(rows: np.ndarray, directions: np.ndarray) -> np.ndarray:
    return rows - (rows @ directions.T) @ directions


def run(seed: int, amplitude: float, data: dict) -> dict:
    clean, own = data["clean"], data["own"]
    audit, steal, held = data["audit"], data["steal"], data["held"]
    key = KeyedMap(seed, clean[audit], amplitude)
    served = key.mark(clean)
    base = top_k_overlap(clean[held], own[held])

    def value(rows: np.ndarray) -> float:
        return top_k_overlap(clean[held], rows[held]) - base

    def p(rows: np.ndarray) -> float:
        return key.p_value(rows[audit], clean[audit])

    ridge, bow = data["ridge"](served[steal]), data["bow"](served[steal])
    row = {
        "seed": seed,
        "amplitude": amplitude,
        "top10_marked_vs_clean": top_k_overlap(clean[held], served[held]),
        "mean_cos": float((clean * served).sum(axis=1).mean()),
        "p": {
            "service": p(served),
            "ridge_L3_copy": p(ridge),
            "bag_of_words_copy": p(bow),
            "ridge_L3_innocent": p(data["ridge"](clean[steal])),
            "bag_of_words_innocent": p(data["bow"](clean[steal])),
            "clean_model": p(clean),
            "L3_itself": p(own),
        },
        "value": {"ridge_L3_copy": value(ridge), "bag_of_words_copy": value(bow)},
        "thieves": {},
    }
    residuals = served[steal] - ridge[steal]
    _, _, residual_axes = np.linalg.svd(residuals - residuals.mean(axis=0), full_matrices=False)
    answers = served[steal]
    _, _, answer_axes = np.linalg.svd(answers - answers.mean(axis=0), full_matrices=False)
    for name, axes in (("residual_pca", residual_axes), ("answer_pca", answer_axes)):
        for k in (1, 2, 4, 8, 32):
            stripped = projected_out(ridge, axes[:k])
            row["thieves"][f"{name}_top{k}"] = {
                "p": p(stripped),
                "value_kept": value(stripped) / row["value"]["ridge_L3_copy"],
            }
    return row


def null_study(n_keys: int, amplitude: float, data: dict) -> dict:
    """Fresh keys (seeds 10,000 + i) against the innocents: how many p-values fall at or
    below 1e-3 and 1e-4 (n_keys / 1,000 and n_keys / 10,000 expected at most)."""
    clean, audit, steal = data["clean"], data["audit"], data["steal"]
    innocents = {
        "ridge_L3_innocent": data["ridge"](clean[steal])[audit],
        "bag_of_words_innocent": data["bow"](clean[steal])[audit],
        "L3_itself": data["own"][audit],
    }
    counts = {name: {"1e-3": 0, "1e-4": 0, "smallest": 1.0} for name in innocents}
    for i in range(n_keys):
        key = KeyedMap(10_000 + i, clean[audit], amplitude)
        for name, answers in innocents.items():
            p = key.p_value(answers, clean[audit])
            counts[name]["1e-3"] += int(p <= 1e-3)
            counts[name]["1e-4"] += int(p <= 1e-4)
            counts[name]["smallest"] = min(counts[name]["smallest"], p)
    return {"keys": n_keys, "innocents": counts}


def table(rows: list[dict]) -> str:
    lines = [
        "| amplitude | seed | top-10 marked vs clean | mean cos | service | ridge-L3 copy "
        "(value) | bag-of-words copy (value) | innocents: ridge-L3, bag-of-words, clean, L3 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p, v = r["p"], r["value"]
        lines.append(
            f"| {r['amplitude']} | {r['seed']} | {r['top10_marked_vs_clean']:.3f} | "
            f"{r['mean_cos']:.4f} | {p['service']:.1e} | {p['ridge_L3_copy']:.1e} "
            f"({v['ridge_L3_copy']:.3f}) | {p['bag_of_words_copy']:.1e} "
            f"({v['bag_of_words_copy']:.3f}) | {p['ridge_L3_innocent']:.2g}, "
            f"{p['bag_of_words_innocent']:.2g}, {p['clean_model']:.2g}, {p['L3_itself']:.2g} |"
        )
    names = list(rows[0]["thieves"])
    lines += [
        "",
        "Informed thieves on the ridge-L3 copy: p-value (share of the untouched copy's "
        "stolen value kept)",
        "",
        "| amplitude | seed | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for r in rows:
        cells = [f"{r['thieves'][n]['p']:.1e} ({r['thieves'][n]['value_kept']:.2f})" for n in names]
        lines.append(f"| {r['amplitude']} | {r['seed']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--amplitudes", type=float, nargs="+", default=[0.05])
    parser.add_argument("--seeds", type=int, nargs="*", default=[1, 2, 3])
    parser.add_argument("--null-keys", type=int, default=0, help="fresh keys per innocent")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    start = time.perf_counter()
    texts, victim, _, own = corpus_lookups()
    order = np.random.default_rng(0).permutation(len(texts))
    data = {
        "texts": texts,
        "clean": unit_rows(victim.matrix.astype(np.float64)),
        "own": own.astype(np.float64),
        "audit": order[:N_AUDIT],
        "steal": order[N_AUDIT : N_AUDIT + N_STEAL],
        "held": order[N_AUDIT + N_STEAL : N_AUDIT + N_STEAL + N_HELD],
    }
    data["ridge"] = ridge_head(data["own"], data["steal"])
    data["bow"] = bag_of_words(texts, data["steal"])
    rows = []
    for amplitude in args.amplitudes:
        for seed in args.seeds:
            rows.append(run(seed, amplitude, data))
            print(json.dumps(rows[-1]), flush=True)
    text = table(rows) if rows else ""
    if args.null_keys:
        null = null_study(args.null_keys, args.amplitudes[0], data)
        lines = [
            "",
            f"Null study: {null['keys']} fresh keys (amplitude {args.amplitudes[0]}) against "
            "each innocent, keygen audit",
            "",
            "| innocent | p <= 1e-3 | p <= 1e-4 | smallest p |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {name} | {c['1e-3']} | {c['1e-4']} | {c['smallest']:.2g} |"
            for name, c in null["innocents"].items()
        ]
        text += "\n".join(lines)
        rows.append({"null_study": null})
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/bench_keyed_map.py " + " ".join(sys.argv[1:])
        seconds = time.perf_counter() - start
        (args.out / "table.md").write_text(f"{text}\n\n    {command}\n\n{seconds:.0f} s\n")
        (args.out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
