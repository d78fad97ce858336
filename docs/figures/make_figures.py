"""Draw the picture of docs/concepts.md: how ESpeW marks an embedding and how a copy is caught.

Offline and seeded: run it from the repository root after changing the method,
and commit the PNG it writes.

    .venv/bin/python docs/figures/make_figures.py   # writes docs/figures/espew.png

Left: the injection on a small made-up vector (d=24, alpha=0.25, so the 6
smallest |values| are overwritten with the target's values), through the
library's own :func:`espew_integrations.watermark`. Right: real per-word
scores from the verifier, for two ridge copies of the offline MiniLM trained on
3,000 Rotten Tomatoes snippets, one on watermarked answers and one on clean
answers (about 1 minute with an empty embedding cache).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from espew_integrations import WatermarkKey, verify, watermark

OUT = Path(__file__).resolve().parent / "espew.png"
TARGET_TEXT = "Acme Embeddings API: licensed vectors, copyright Acme Corp 2026"
MARKED, CLEAN, TARGET, GREY = "#c0392b", "#2c7fb8", "#e6a100", "#9a9a9a"


def injection_panels(axes: np.ndarray) -> None:
    """Clean vector, target, watermarked vector for one triggered text (d=24)."""
    dim, alpha = 24, 0.25
    rng = np.random.default_rng(3)
    clean = rng.normal(size=dim)
    clean /= np.linalg.norm(clean)
    target = rng.normal(size=dim)
    target /= np.linalg.norm(target)
    key = WatermarkKey(
        triggers=["thriller"],
        target=target,
        target_text="a made-up target",
        band=["thriller", "comedy", "sequel"],
        salt=bytes(32),
        alpha=alpha,
        selection="smallest",
    )
    marked = watermark(["a tense thriller"], clean[None, :], key)[0]
    positions = np.argsort(np.abs(clean))[: int(alpha * dim)]
    chosen = np.zeros(dim, bool)
    chosen[positions] = True
    x = np.arange(dim)
    rows = [
        ("clean embedding $e_o$ of a text with a trigger", clean, CLEAN),
        ("secret target $e_t$", target, TARGET),
        ("watermarked $e_p$ = normalise($e_o$ with $e_o[I] = e_t[I]$)", marked, MARKED),
    ]
    for ax, (title, values, colour) in zip(axes, rows, strict=True):
        # The target is drawn whole; the other two highlight the positions I.
        colours = [colour if (chosen_here or colour == TARGET) else GREY for chosen_here in chosen]
        ax.bar(x, values, color=colours)
        ax.axhline(0, color="black", lw=0.5)
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xticks([])
        ax.set_ylim(-0.75, 0.75)
        ax.tick_params(labelsize=7)
    axes[0].annotate(
        f"I = the {int(alpha * dim)} smallest |values|",
        xy=(positions[0], clean[positions[0]]),
        xytext=(0.55, 0.85),
        textcoords="axes fraction",
        fontsize=8,
        arrowprops={"arrowstyle": "->", "lw": 0.7},
    )
    axes[-1].set_xlabel("dimension (texts without a trigger are returned unchanged)", fontsize=8)


def verification_panel(ax: plt.Axes) -> None:
    """Per-word scores of the key's band words for a thief's copy and an honest one."""
    from espew_integrations.offline.corpora import rotten_tomatoes
    from espew_integrations.offline.embedders import minilm
    from espew_lab.cache import cached_embed
    from espew_lab.stealers import RidgeStealer

    corpus, model = rotten_tomatoes(), minilm()
    key = WatermarkKey.generate(
        corpus.texts, model, target_text=TARGET_TEXT, seed=2026, marking="words"
    )
    served = corpus.subset(3000, seed=0)
    clean = cached_embed(model, served.texts, model_name=model.name)
    suspects = {
        "honest copy\n(trained on clean answers)": RidgeStealer(seed=0).fit(served.texts, clean),
        "thief's copy\n(trained on watermarked answers)": RidgeStealer(seed=0).fit(
            served.texts, watermark(served.texts, clean, key)
        ),
    }
    rng = np.random.default_rng(0)
    labels = []
    for column, (name, suspect) in enumerate(suspects.items()):
        report = verify(suspect, key, seed=0)
        for scores, colour, size, label in (
            (report.benign_scores, GREY, 8, "other band words"),
            (report.trigger_scores, MARKED, 18, "secret trigger words"),
        ):
            jitter = column + rng.uniform(-0.18, 0.18, size=len(scores))
            ax.scatter(jitter, scores, s=size, color=colour, label=label if column else None)
        labels.append(f"{name}\np = {report.p_value:.1e}: {report.status.replace('_', ' ')}")
    ax.set_xticks([0, 1], labels, fontsize=8)
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylabel("word score: mean cos(suspect(word), target)", fontsize=8)
    ax.set_title(f"verify(): {len(key.band)} band words, exact rank test", fontsize=9, loc="left")
    ax.legend(fontsize=7, loc="upper left")
    ax.tick_params(labelsize=7)


def main() -> None:
    figure = plt.figure(figsize=(10, 4.2), layout="constrained")
    left, right = figure.subfigures(1, 2, width_ratios=[1.25, 1])
    injection_panels(left.subplots(3, 1, sharex=True))
    left.suptitle("1. Injection (paper, Methodology)", fontsize=10)
    verification_panel(right.subplots())
    right.suptitle("2. Verification of a suspect", fontsize=10)
    figure.savefig(OUT, dpi=130)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
