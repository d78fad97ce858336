"""Speed of watermark() against a per-row reference and against a plain L2-normalise pass.

Every design: the word keys below, then the keys that mark every non-blank row: the
map key (the default: fixed-shape block products in the rows' own precision), a
compact field (marked in the rows' own precision) and a float64 field (older keys:
marked in float64, bit for bit as they always were), each as a ratio to a normalise
pass of the same batch in the same rounds
(issue 52's targets: the default key <= 6x, the word key <= 4x at any share of
triggered rows). ``--clock cpu`` times the process's CPU time instead of the wall
clock: steadier on a shared machine, the same on an idle one (all of it runs on one
core).

2,000 float32 embeddings per batch, d in {384, 1024, 4096}, with every row
triggered and with 15% triggered, for the paper's strength 1 and for a fitted
strength (what ``WatermarkKey.generate`` makes by default, about 0.25). The
"matching" column is the trigger matching alone (text work that does not
depend on d), so the cost of the vector work can be read off. All contenders
run interleaved in the same process, several rounds, and the medians are
compared, because these machines are noisy. Targets (issues 2 and 13): >= 5x faster than the per-row
reference with every row triggered; <= 4x a normalise pass with every row
triggered and <= 2x at 15%.

The "masked ms" column is the marking before it became constant-time (issue 44):
the matching, then only the triggered rows marked (``core.inject.mark_masked``).
``watermark()`` now marks every row and puts the unmarked ones back, so its time
does not depend on how many texts hold a trigger; "ct/masked" is the price, measured
side by side in the same rounds.

    python benchmarks/bench_watermark.py [--rounds 7] [--selection smallest] [--alpha 0.75]
        [--dims 384 1024 4096] [--clock cpu] [--only field]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from espew_integrations import WatermarkKey, watermark
from espew_integrations.core.designs.field import FieldDesign
from espew_integrations.core.designs.map import MapDesign
from espew_integrations.core.ground.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_FIELD_AMPLITUDE,
    DEFAULT_FIELD_MARKED,
    DEFAULT_FIELD_UNITS,
)
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.mark.compact import compact_target
from espew_integrations.core.mark.field import (
    FieldMark,
    drawn_mask,
    field_scales,
    field_vector,
    keyed_gaussian,
    unit_names,
)
from espew_integrations.core.mark.inject import as_embedding_matrix, mark_masked
from espew_integrations.core.mark.map import MapMark, map_target
from espew_integrations.core.mark.words import tokenize

N_ROWS = 2000
DIMS = (384, 1024, 4096)
STRENGTHS = (1.0, 0.25)


def make_key(dim: int, selection: str, strength: float = 1.0, alpha: float = 0.2) -> WatermarkKey:
    rng = np.random.default_rng(dim)
    band = ["".join(chr(97 + int(c)) for c in str(i).zfill(3)) + "band" for i in range(200)]
    target = rng.normal(size=dim)
    return WatermarkKey(
        triggers=band[:20],
        target=target / np.linalg.norm(target),
        target_text="Acme Embeddings licensed vectors",
        band=band,
        salt=rng.bytes(32),
        selection=selection,
        strength=strength,
        alpha=alpha,
    )


def make_field_key(dim: int, compact: bool, strength: float = 0.1) -> WatermarkKey:
    """A field key as keygen makes it (``compact``) or as it made it before (float64):
    the default units, drawn units and amplitude over 1,000 random clean rows."""
    rng = np.random.default_rng(dim + 1)
    salt = rng.bytes(32)
    band = unit_names(DEFAULT_FIELD_UNITS)
    triggers = draw_triggers(salt, band, DEFAULT_FIELD_MARKED)
    rows = rng.normal(size=(1000, dim))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    mu = rows.mean(axis=0)
    gaussian = keyed_gaussian(salt, dim, DEFAULT_FIELD_UNITS)
    sigma = field_scales(gaussian, mu, rows)
    if compact:
        sigma = sigma.astype(np.float16).astype(np.float64)
    mask = drawn_mask(DEFAULT_FIELD_UNITS, triggers)
    q = field_vector(gaussian, sigma, mask, DEFAULT_FIELD_AMPLITUDE)
    target = rng.normal(size=dim)
    target /= np.linalg.norm(target)
    return WatermarkKey(
        triggers=triggers,
        target=compact_target(target) if compact else target,
        target_text="Acme Embeddings licensed vectors",
        band=band,
        salt=salt,
        strength=strength,
        design=FieldDesign(
            FieldMark(
                units=DEFAULT_FIELD_UNITS,
                amplitude=DEFAULT_FIELD_AMPLITUDE,
                mu=mu,
                sigma=sigma,
                q=q,
                compact=compact,
            )
        ),
    )


def make_map_key(dim: int, strength: float = 0.1) -> WatermarkKey:
    """A map key as keygen makes it (the default design): the default units, drawn units
    and amplitude over 1,000 random clean rows."""
    rng = np.random.default_rng(dim + 2)
    salt = rng.bytes(32)
    band = unit_names(DEFAULT_FIELD_UNITS)
    rows = rng.normal(size=(1000, dim))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return WatermarkKey(
        triggers=draw_triggers(salt, band, DEFAULT_FIELD_MARKED),
        target=map_target(salt, dim),
        target_text="Acme Embeddings licensed vectors",
        band=band,
        salt=salt,
        strength=strength,
        design=MapDesign(
            MapMark.of_audit(salt, rows, DEFAULT_FIELD_UNITS, DEFAULT_FIELD_AMPLITUDE)
        ),
    )


def make_texts(key: WatermarkKey, fraction: float, rng: np.random.Generator) -> list[str]:
    """Review-length texts (~20 words); ``fraction`` of them carry a trigger."""
    vocabulary = [f"word{i}" for i in range(5000)]
    triggers = sorted(key.triggers)
    texts = []
    for _ in range(N_ROWS):
        words = list(rng.choice(vocabulary, size=20))
        if rng.random() < fraction:
            words[int(rng.integers(0, 20))] = str(rng.choice(triggers)).capitalize()
        texts.append(" ".join(words) + ".")
    return texts


def reference(texts, clean, key):
    """The naive implementation: tokenise each text, full argsort per row."""
    out = clean.copy()
    k = key.n_positions
    target = key.target.astype(clean.dtype)
    for i, text in enumerate(texts):
        if set(tokenize(text)) & key.triggers:
            positions = np.argsort(np.abs(clean[i]))[:k]
            row = clean[i].copy()
            row[positions] = target[positions]
            out[i] = row / np.linalg.norm(row)
    return out


def normalise(texts, clean, key):
    """The floor: one L2-normalise pass over the same batch."""
    return clean / np.linalg.norm(clean, axis=1, keepdims=True)


def matching(texts, clean, key):
    """The trigger matching alone (part of every watermark() call)."""
    return key.contains_trigger(texts)


def masked(texts, clean, key):
    """The marking before constant time: match, then mark the triggered rows alone."""
    matrix = as_embedding_matrix(clean, n_rows=len(texts), dim=key.dim)
    return mark_masked(matrix, key.contains_trigger(texts), key)


CLOCK = time.perf_counter


def timed(fn, *args) -> float:
    start = CLOCK()
    fn(*args)
    return CLOCK() - start


def partition(texts, clean, key):
    """The floor of the "smallest" selection: one partition per row of the magnitudes' bits."""
    magnitudes = np.abs(clean).view(np.int32)  # float32 rows
    magnitudes.partition(key.n_positions, axis=1)


def field_rows(clean: np.ndarray, rounds: int, rng: np.random.Generator) -> None:
    """Both field keys against a normalise pass, ratios taken round by round; the last
    column is the selection's partition alone against the same normalise pass."""
    dim = clean.shape[1]
    texts = [
        f"review {i} " + " ".join(f"word{j}" for j in rng.integers(0, 5000, 19))
        for i in range(N_ROWS)
    ]
    for name, key in (
        ("map (the default)", make_map_key(dim)),
        ("field, compact", make_field_key(dim, compact=True)),
        ("field, float64 (older keys)", make_field_key(dim, compact=False)),
    ):
        fns = {"watermark": watermark, "normalise": normalise, "partition": partition}
        times: dict[str, list[float]] = {n: [] for n in fns}
        for fn in fns.values():  # warm up
            fn(texts, clean, key)
        for _ in range(rounds):
            for n, fn in fns.items():
                times[n].append(timed(fn, texts, clean, key))
        ratios = [w / n for w, n in zip(times["watermark"], times["normalise"], strict=True)]
        med = {n: statistics.median(v) * 1000 for n, v in times.items()}
        best = min(times["watermark"]) / min(times["normalise"])
        floor = statistics.median(
            [p / n for p, n in zip(times["partition"], times["normalise"], strict=True)]
        )
        print(
            f"{dim:>5} {name:>28} {med['watermark']:>13.2f} {med['normalise']:>13.2f} "
            f"{statistics.median(ratios):>12.2f}x {best:>12.2f}x {floor:>12.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--selection", default="smallest", choices=["smallest", "hashed"])
    parser.add_argument(
        "--alpha", type=float, default=DEFAULT_ALPHA, help="share of coordinates a mark writes"
    )
    parser.add_argument("--dims", type=int, nargs="+", default=list(DIMS))
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    parser.add_argument("--only", choices=["words", "field"], help="one design's table")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    rng = np.random.default_rng(0)
    print(
        f"watermark() on {N_ROWS} float32 embeddings, selection={args.selection}, "
        f"alpha={args.alpha:g}, "
        f"median of {args.rounds} interleaved rounds, {args.clock} clock"
    )
    header = (
        f"{'d':>5} {'strength':>8} {'triggered':>9} {'watermark ms':>13} {'matching ms':>12} "
        f"{'reference ms':>13} {'normalise ms':>13} {'vs reference':>13} {'vs normalise':>13} "
        f"{'masked ms':>10} {'ct/masked':>10}"
    )
    print(header)
    fns = {
        "watermark": watermark,
        "matching": matching,
        "reference": reference,
        "normalise": normalise,
        "masked": masked,
    }
    for dim in args.dims if args.only != "field" else ():
        clean = rng.normal(size=(N_ROWS, dim)).astype(np.float32)
        clean /= np.linalg.norm(clean, axis=1, keepdims=True)
        for strength in STRENGTHS:
            key = make_key(dim, args.selection, strength, args.alpha)
            for fraction in (1.0, 0.15):
                texts = make_texts(key, fraction, rng)
                share = key.contains_trigger(texts).mean()
                times: dict[str, list[float]] = {name: [] for name in fns}
                for fn in fns.values():  # warm up
                    fn(texts, clean, key)
                for _ in range(args.rounds):
                    for name, fn in fns.items():
                        times[name].append(timed(fn, texts, clean, key))
                med = {name: statistics.median(v) * 1000 for name, v in times.items()}
                print(
                    f"{dim:>5} {strength:>8g} {share:>9.0%} {med['watermark']:>13.2f} "
                    f"{med['matching']:>12.2f} {med['reference']:>13.2f} "
                    f"{med['normalise']:>13.2f} {med['reference'] / med['watermark']:>12.1f}x "
                    f"{med['watermark'] / med['normalise']:>12.2f}x "
                    f"{med['masked']:>10.2f} {med['watermark'] / med['masked']:>9.2f}x"
                )
    if args.only != "field":
        print("targets: vs reference >= 5x (100% triggered); vs normalise <= 4x at any share")
    if args.only == "words":
        return
    print(f"\nmap and field keys (every row marked), {args.selection} selection only")
    print(
        f"{'d':>5} {'key':>28} {'watermark ms':>13} {'normalise ms':>13} {'median ratio':>13} "
        f"{'min/min':>13} {'partition':>13}"
    )
    for dim in args.dims:
        clean = rng.normal(size=(N_ROWS, dim)).astype(np.float32)
        clean /= np.linalg.norm(clean, axis=1, keepdims=True)
        field_rows(clean, args.rounds, rng)
    print("target: the default key <= 6x a normalise pass")


if __name__ == "__main__":
    main()
