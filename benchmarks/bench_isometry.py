"""Does a thief that serves its answers through a secret isometry walk free?

A thief can serve ``Q @ copy(text)`` for a secret orthogonal ``Q``, or embed
its answers in more dimensions with orthonormal columns: every cosine between
its answers is unchanged, so its customers lose nothing. Before
``core/stats/align.py`` the default ``verify`` scored the answers in the key's
coordinates as they came, and the rotated service itself walked free (p = 1.0).

For each key (the default key at the 0.995 budget) this trains the copies once
and runs the default ``verify`` on each suspect behind each transform:

- none; a permutation of the dimensions with random sign flips; a random
  rotation; a partial rotation ``cos(t) I + sin(t) J`` (``J`` a random complex
  structure) at t = 0.45, where the answers keep about 0.9 of their cosine to
  the clean rows, just above where verify starts to map them (the thief that
  games the rule); an isometry into 768 dimensions; a projection onto 256
  random orthonormal directions (not an isometry: a thief that serves fewer
  dimensions);
- and three maps that are not isometries, so they change what the thief's
  customers see: a constant offset (0.3 of a unit vector, then renormalised),
  each dimension scaled by a factor in 0.5-2, and a rotation followed by that
  scaling.

It prints what each transform costs the thief's customers (the top-10
retrieval overlap of 200 queries among 2,000 watermarked corpus answers,
before and after it), then the verdict's p-value per suspect and transform,
and whether verify mapped the answers (``report.alignment``).

Offline MiniLM + Rotten Tomatoes. Run (about 2 minutes a key):

    .venv/bin/python benchmarks/bench_isometry.py > docs/results/threats/isometry.txt
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faithful_copy import corpus_lookups, frozen_mlp_after_cse, train_rows
from bench_spectral import make_key

from espew_integrations import verify, watermark
from espew_integrations.core.ground.rows import unit_rows
from espew_lab.stealers import RidgeStealer

PARTIAL_ANGLE = 0.45


def orthonormal(rows: int, cols: int, seed: int) -> np.ndarray:
    """A random ``rows x cols`` matrix with orthonormal columns (rows >= cols)."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((rows, cols)))
    return q


def transforms(d: int, seed: int) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Each thief's map, applied to a batch of answers (rows)."""
    rng = np.random.default_rng(seed)
    signs = rng.choice([-1.0, 1.0], size=d)
    permutation = np.eye(d)[rng.permutation(d)] * signs[:, None]
    basis = orthonormal(d, d, seed + 1)
    pairs = np.zeros((d, d))
    pairs[np.arange(0, d, 2), np.arange(1, d, 2)] = -1.0
    pairs[np.arange(1, d, 2), np.arange(0, d, 2)] = 1.0
    complex_structure = basis @ pairs @ basis.T
    rotation = orthonormal(d, d, seed + 2)
    offset = rng.standard_normal(d)
    offset *= 0.3 / np.linalg.norm(offset)
    scale = np.exp(rng.uniform(np.log(0.5), np.log(2.0), d))
    linear = {
        "none": np.eye(d),
        "permutation and signs": permutation,
        "rotation": rotation,
        f"partial rotation t={PARTIAL_ANGLE}": np.cos(PARTIAL_ANGLE) * np.eye(d)
        + np.sin(PARTIAL_ANGLE) * complex_structure,
        "isometry into 768 dims": orthonormal(2 * d, d, seed + 3),
        "256 of the dims": orthonormal(d, 256, seed + 4).T,
    }
    maps: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        name: (lambda x, m=m: x @ m.T) for name, m in linear.items()
    }
    maps["offset 0.3"] = lambda x: unit_rows(x + offset)
    maps["dims scaled 0.5-2"] = lambda x: unit_rows(x * scale)
    maps["rotation, then scaled"] = lambda x: unit_rows((x @ rotation.T) * scale)
    return maps


def behind(model: Callable, transform: Callable[[np.ndarray], np.ndarray]) -> Callable:
    """``model`` served through ``transform``."""
    return lambda batch: transform(np.asarray(model(batch), dtype=np.float64))


def customers_overlap(answers: np.ndarray, transform: Callable) -> float:
    """Top-10 overlap of 200 queries' neighbours among ``answers``, before and after."""
    before, after = unit_rows(answers), unit_rows(transform(answers))
    top = [np.argsort(-(rows[:200] @ rows.T), axis=1)[:, 1:11] for rows in (before, after)]
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(*top, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, standard, std_matrix = corpus_lookups()
    clean = victim.matrix.astype(np.float64)
    print("Default verify behind each transform: p-value of the verdict (* = answers mapped).")
    for seed in args.seeds:
        key = make_key("text", seed, texts, victim, clean)
        answers = watermark(texts, clean, key)
        train = train_rows(seed, texts, key)
        train_texts = [texts[i] for i in train]

        def service(batch, key=key):
            return watermark(list(batch), victim(batch), key)

        suspects: dict[str, tuple[Callable, bool]] = {
            "service itself": (service, True),
            "ridge copy": (RidgeStealer(seed=seed).fit(train_texts, answers[train]), True),
            "frozen-MLP + CSE K=50": (
                frozen_mlp_after_cse(seed, texts, answers, standard, std_matrix, key),
                True,
            ),
            "innocent twin": (victim, False),
            "clean ridge copy": (RidgeStealer(seed=seed).fit(train_texts, clean[train]), False),
            "independent model": (standard, False),
        }
        maps = transforms(key.dim, 100 * seed)
        print(f"\n### key {seed}\n")
        overlaps = (customers_overlap(answers[:2000], f) for f in maps.values())
        print(
            "customers' top-10 overlap: "
            + ", ".join(f"{name} {value:.3f}" for name, value in zip(maps, overlaps, strict=True))
            + "\n"
        )
        print("| suspect | " + " | ".join(maps) + " |")
        print("|---|" + "---:|" * len(maps))
        for name, (model, guilty) in suspects.items():
            cells = []
            for transform in maps.values():
                report = verify(behind(model, transform), key, seed=seed)
                mapped = "*" if report.alignment.startswith("applied") else ""
                wrong = report.copied != guilty
                cell = f"{report.p_value:.1e}{mapped}"
                cells.append(f"**{cell}**" if wrong else cell)
            label = name + ("" if guilty else " (innocent)")
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    print(
        "\nBold: a wrong verdict at 1e-6 (a copy not convicted, or an innocent convicted)."
        f"\n{time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
