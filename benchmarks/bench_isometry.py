"""Does a thief that serves its answers through a secret isometry walk free?

A thief can serve ``Q @ copy(text)`` for a secret orthogonal ``Q``, or embed
its answers in more dimensions with orthonormal columns: every cosine between
its answers is unchanged, so its customers lose nothing. Before
``core/align.py`` the default ``verify`` scored the answers in the key's
coordinates as they came, and the rotated service itself walked free (p = 1.0).

For each key (the default key at the 0.995 budget) this trains the copies once
and runs the default ``verify`` on each suspect behind each transform:

- none; a permutation of the dimensions with random sign flips; a random
  rotation; a partial rotation ``cos(t) I + sin(t) J`` (``J`` a random complex
  structure) at t = 0.45, where the answers keep about 0.9 of their cosine to
  the clean rows, just above where verify starts to map them (the thief that
  games the rule); an isometry into 768 dimensions; and a projection onto 256
  random orthonormal directions (not an isometry: a thief that serves fewer
  dimensions).

It prints the verdict's p-value per suspect and transform, and whether verify
mapped the answers (``report.alignment``).

Offline MiniLM + Rotten Tomatoes. Run (about 3 minutes a key):

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

from bench_faithful_copy import corpus_lookups, frozen_mlp_after_cse
from bench_spectral import make_key

from espew_integrations import verify, watermark
from espew_integrations.lab.stealers import RidgeStealer

PARTIAL_ANGLE = 0.45


def orthonormal(rows: int, cols: int, seed: int) -> np.ndarray:
    """A random ``rows x cols`` matrix with orthonormal columns (rows >= cols)."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((rows, cols)))
    return q


def transforms(d: int, seed: int) -> dict[str, np.ndarray]:
    """Each thief's map, applied to an answer ``x`` as ``m @ x``."""
    rng = np.random.default_rng(seed)
    signs = rng.choice([-1.0, 1.0], size=d)
    permutation = np.eye(d)[rng.permutation(d)] * signs[:, None]
    basis = orthonormal(d, d, seed + 1)
    pairs = np.zeros((d, d))
    pairs[np.arange(0, d, 2), np.arange(1, d, 2)] = -1.0
    pairs[np.arange(1, d, 2), np.arange(0, d, 2)] = 1.0
    complex_structure = basis @ pairs @ basis.T
    return {
        "none": np.eye(d),
        "permutation and signs": permutation,
        "rotation": orthonormal(d, d, seed + 2),
        f"partial rotation t={PARTIAL_ANGLE}": np.cos(PARTIAL_ANGLE) * np.eye(d)
        + np.sin(PARTIAL_ANGLE) * complex_structure,
        "isometry into 768 dims": orthonormal(2 * d, d, seed + 3),
        "256 of the dims": orthonormal(d, 256, seed + 4).T,
    }


def behind(model: Callable, matrix: np.ndarray) -> Callable:
    """``model`` served through ``matrix``."""
    return lambda batch: np.asarray(model(batch), dtype=np.float64) @ matrix.T


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
        train = np.sort(np.random.default_rng(seed).permutation(len(texts))[:-500])
        train_texts = [texts[i] for i in train]

        def service(batch, key=key):
            return watermark(list(batch), victim(batch), key)

        suspects: dict[str, tuple[Callable, bool]] = {
            "service itself": (service, True),
            "ridge copy": (RidgeStealer(seed=seed).fit(train_texts, answers[train]), True),
            "frozen-MLP + CSE K=50": (
                frozen_mlp_after_cse(seed, texts, answers, standard, std_matrix),
                True,
            ),
            "innocent twin": (victim, False),
            "clean ridge copy": (RidgeStealer(seed=seed).fit(train_texts, clean[train]), False),
            "independent model": (standard, False),
        }
        maps = transforms(key.dim, 100 * seed)
        print(f"\n### key {seed}\n")
        print("| suspect | " + " | ".join(maps) + " |")
        print("|---|" + "---:|" * len(maps))
        for name, (model, guilty) in suspects.items():
            cells = []
            for matrix in maps.values():
                report = verify(behind(model, matrix), key, seed=seed)
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
