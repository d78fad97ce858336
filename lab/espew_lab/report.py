"""The lab's outputs: results JSON, a Markdown table shaped like the paper's Table 1, plots.

Plots (matplotlib, Agg backend, PNG):

- ``cos_distributions.png``: cos(clean, watermarked) on marked rows per
  method, and cos(embedding, target) of marked vs unmarked rows for ESpeW
  (the paper's "Distribution of Cosine Similarities with Target Embedding": on MiniLM at
  alpha = 0.2 the two overlap far less than in the paper);
- ``alpha_ablation.png``: p-value and cos(clean, watermarked) against alpha,
  without attack and after CSE (the paper's ablation figure);
- ``pca.png``: 2-D PCA of the service's embeddings for each alpha, marked rows
  highlighted (the paper's Fig. 6, "Embedding Visualization").
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.mark.probes import row_cosines

from ._optional import require
from .context import LabContext, watermark_for

__all__ = [
    "METHOD_LABELS",
    "json_default",
    "markdown_table",
    "threat_table",
    "unexpected_cells",
    "verdict_label",
    "watermark_summary",
    "write_report",
]

METHOD_LABELS = {
    "none": "Original",
    "espew_smallest": "ESpeW (smallest)",
    "espew_hashed": "ESpeW (hashed)",
    "embmarker": "EmbMarker",
    "warden": "WARDEN",
}


def _attack_label(attack: str, info: Mapping[str, Any] | None = None) -> str:
    name, _, value = attack.partition(":")
    if name == "none":
        return "No attack"
    if name == "cse":
        used = (info or {}).get("k_used")
        suffix = f" (K={used} used)" if used is not None and str(used) != value else ""
        return f"CSE K={value}{suffix}"
    return {
        "dropout": f"dropout {value}",
        "quant4": "4-bit quantisation",
        "permutation": "permutation",
        "saa": f"SAA N_T={value or 10}",
    }.get(name, attack)


def _p(p: float) -> str:
    if p is None or not math.isfinite(p):
        return "n/a"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{100 * value:.2f}"


def verdict_label(cell: Mapping[str, Any], expected_escapes: Sequence[str] = ()) -> str:
    """``right``, ``expected escape`` or ``WRONG`` for one cell's COPY verdict.

    A watermarked cell is right when its copy is convicted, the Original row
    when it is not; a cell listed in the config's ``expected_escapes``
    (``"<watermark>@<attack>"``) is a known escape, not a wrong verdict.

    >>> verdict_label({"watermark": "embmarker", "attack": "cse:50", "copied": False},
    ...               ["embmarker@cse:50"])
    'expected escape'
    """
    watermarked = cell["watermark"] != "none"
    if cell["copied"] == watermarked:
        return "right"
    if watermarked and f"{cell['watermark']}@{cell['attack']}" in expected_escapes:
        return "expected escape"
    return "WRONG"


def unexpected_cells(results: Mapping[str, Any]) -> list[str]:
    """The cells whose verdict is wrong and not a declared escape."""
    escapes = results["config"].get("expected_escapes", [])
    return [c["cell"] for c in results["cells"] if verdict_label(c, escapes) == "WRONG"]


def markdown_table(results: Mapping[str, Any]) -> str:
    """The Table-1-shaped Markdown table (one block per attack, one row per method)."""
    lines = [*_main_table(results), *_ablation_table(results), *_quality_table(results)]
    if results.get("threats"):
        level = float(results["config"]["verify"]["level"])
        lines += ["", *threat_table(results["threats"]["rows"], level)]
    return "\n".join(lines) + "\n"


def _main_table(results: Mapping[str, Any]) -> list[str]:
    level = float(results["config"]["verify"]["level"])
    escapes = results["config"].get("expected_escapes", [])
    summary = {w["watermark"]: w for w in results["watermarks"]}
    lines = [
        f"Corpus `{results['corpus']['name']}` ({results['corpus']['n_texts']} texts), victim "
        f"`{results['victim']}`, CSE standard model `{results['standard']}`, key alpha "
        f"{results['key']['alpha']}, {results['key']['n_triggers']} triggers in a band of "
        f"{results['key']['band_words']} words. COPY verdict: core word-level rank test, "
        f"copied iff p < {level:g}; a check mark means the verdict is right (copied for a "
        "watermark, not copied for Original); an expected escape is one the config declares "
        "(a removal attack known to defeat that watermark).",
        "",
        "| Attack | Stealer | Method | ACC (%) | p-value | Δcos (%) | Δl2 (%) | COPY? "
        "| cos(clean, wm) marked | top-10 overlap | copy fidelity | queries |",
        "|---|---|---|---:|---:|---:|---:|:---:|---:|---:|---:|---:|",
    ]
    order = {w: i for i, w in enumerate(results["config"]["watermarks"])}
    for attack in dict.fromkeys(c["attack"] for c in results["cells"]):
        rows = [c for c in results["cells"] if c["attack"] == attack and c["watermark"] in order]
        rows.sort(key=lambda c: (c["stealer"], order[c["watermark"]]))
        for c in rows:
            wm = summary.get(c["watermark"], {})
            lines.append(
                f"| {_attack_label(attack, c.get('attack_info'))} | {c['stealer']} | "
                f"{METHOD_LABELS.get(c['watermark'], c['watermark'])} | {_pct(c.get('acc'))} | "
                f"{_p(c['p_value'])} | {_pct(c['delta_cos'])} | {_pct(c['delta_l2'])} | "
                f"{'✔' if c['copied'] else '✘'} ({verdict_label(c, escapes)}) | "
                f"{wm.get('cos_clean_marked', float('nan')):.4f} | "
                f"{c['top10_overlap_trained_on']:.3f} | {c['copy_fidelity']:.3f} | "
                f"{c['n_queries']} |"
            )
    return lines


def _ablation_table(results: Mapping[str, Any]) -> list[str]:
    ablation_cfg = results["config"]["ablation"]
    if not ablation_cfg.get("alphas"):
        return []
    order = set(results["config"]["watermarks"])
    base_wm = ablation_cfg.get("watermark", "espew_smallest")
    cells = [c for c in results["cells"] if c["watermark"] not in order]
    cells += [
        c
        for c in results["cells"]
        if c["watermark"] == base_wm and c["attack"] in ablation_cfg.get("attacks", [])
    ]
    summary = {w["watermark"]: w for w in results["watermarks"]}
    lines = [
        "",
        f"Alpha ablation ({METHOD_LABELS.get(base_wm, base_wm)}):",
        "",
        "| alpha | Attack | cos(clean, wm) marked | p-value | Δcos (%) | COPY? |",
        "|---:|---|---:|---:|---:|:---:|",
    ]
    for c in sorted(cells, key=lambda c: (c["attack"], c["alpha"] or 0)):
        wm = summary.get(c["watermark"], {})
        lines.append(
            f"| {c['alpha']:g} | {_attack_label(c['attack'], c.get('attack_info'))} | "
            f"{wm.get('cos_clean_marked', float('nan')):.4f} | {_p(c['p_value'])} | "
            f"{_pct(c['delta_cos'])} | {'✔' if c['copied'] else '✘'} |"
        )
    return lines


def _quality_table(results: Mapping[str, Any]) -> list[str]:
    lines = [
        "",
        "Watermark quality on the whole corpus (no stealer):",
        "",
        "| Method | marked rows | cos(clean, wm) all | cos(clean, wm) marked | top-10 overlap |",
        "|---|---:|---:|---:|---:|",
    ]
    for w in results["watermarks"]:
        lines.append(
            f"| {METHOD_LABELS.get(w['watermark'], w['watermark'])} | "
            f"{100 * w['marked_fraction']:.1f}% | {w['cos_clean_all']:.4f} | "
            f"{w['cos_clean_marked']:.4f} | {w['top10_overlap']:.3f} |"
        )
    return lines


def _ms(row: Mapping[str, Any], name: str, fmt: str = ".3f") -> str:
    """``mean ± sd`` of an aggregated field, or n/a."""
    value = row.get(name)
    if not value or not math.isfinite(value["mean"]):
        return "n/a"
    return f"{value['mean']:{fmt}} ± {value['sd']:{fmt}}"


def _threat_label(spec: str) -> str:
    name, *args = spec.split(":")
    if name == "router":
        return f"audit router (honest: {args[0]})"
    if name == "paraphrase":
        return f"paraphrase, {args[0]} {float(args[1]):.0%}, K-averaged"
    if name == "chunks":
        return f"chunks of {args[0]} reviews"
    if name == "spectral":
        skipped = int(args[0])
        where = f"past the first {skipped} principal axes" if skipped else "over every direction"
        return f"spectral thief (ICA {where})"
    return spec


def threat_table(rows: Sequence[Mapping[str, Any]], level: float) -> list[str]:
    """The wider-threat-model rows (mean ± sd over seeds; p-values as log10)."""
    n = max((int(r["n_seeds"]) for r in rows), default=0)
    lines = [f"Wider threat model ({n} seeds per row, mean ± sd; each seed draws its own key):"]
    copies = [r for r in rows if r["threat"].split(":")[0] in ("router", "paraphrase")]
    if copies:
        lines += [
            "",
            f"| Threat | log10 p | COPY? (p < {level:g}) | log10 p, copy verified directly "
            "| audit queries routed | ordinary texts routed | copy fidelity "
            "| cos(clean, trained on) | triggers kept in paraphrases |",
            "|---|---:|:---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in copies:
            lines.append(
                f"| {_threat_label(r['threat'])} | {_ms(r, 'log10_p_value', '.1f')} | "
                f"{r.get('copied', 0)}/{r['n_seeds']} | "
                f"{_ms(r, 'log10_p_value_direct', '.1f')} | {_ms(r, 'catch_rate')} | "
                f"{_ms(r, 'false_positive_rate')} | {_ms(r, 'copy_fidelity')} | "
                f"{_ms(r, 'cos_clean_trained_on', '.4f')} | {_ms(r, 'trigger_kept_rate')} |"
            )
    spectral = [r for r in rows if r["threat"].startswith("spectral")]
    if spectral:
        lines += [
            "",
            f"| Threat | log10 p, copy of the unflagged answers | COPY? (p < {level:g}) "
            "| log10 p, copy of every answer | best bimodality | answers flagged "
            "| answers marked | precision | recall | copy fidelity |",
            "|---|---:|:---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in spectral:
            lines.append(
                f"| {_threat_label(r['threat'])} | {_ms(r, 'log10_p_value', '.1f')} | "
                f"{r.get('copied', 0)}/{r['n_seeds']} | "
                f"{_ms(r, 'log10_p_value_direct', '.1f')} | {_ms(r, 'best_bimodality', '.2f')} | "
                f"{_ms(r, 'flagged_rate')} | {_ms(r, 'marked_rate')} | {_ms(r, 'precision')} | "
                f"{_ms(r, 'recall')} | {_ms(r, 'copy_fidelity')} |"
            )
    chunks = sorted(
        (r for r in rows if r["threat"].startswith("chunks")),
        key=lambda r: int(r["threat"].split(":")[1]),
    )
    if chunks:
        lines += [
            "",
            "| Served texts | chunks | marked | marked if reviews were independent "
            "| cos(clean, wm) marked | recall@10 of the watermarked index |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in chunks:
            lines.append(
                f"| {_threat_label(r['threat'])} | {_ms(r, 'n_chunks', '.0f')} | "
                f"{_ms(r, 'marked_rate')} | {_ms(r, 'marked_rate_if_independent')} | "
                f"{_ms(r, 'cos_clean_marked', '.4f')} | {_ms(r, 'recall_at_10')} |"
            )
    return lines


def watermark_summary(ctx: LabContext, name: str) -> dict[str, Any]:
    """Quality of one watermark on the whole corpus (no stealer, no attack)."""
    from .metrics import mean_cosine, retrieval_overlap

    made = watermark_for(ctx, name)
    marked = made.marked(ctx.corpus.texts)
    answers = ctx.answers[name]
    return {
        "watermark": name,
        "marked_fraction": float(marked.mean()),
        "cos_clean_all": mean_cosine(ctx.clean, answers),
        "cos_clean_marked": mean_cosine(ctx.clean, answers, marked),
        "top10_overlap": retrieval_overlap(
            ctx.clean,
            answers,
            n_queries=ctx.config.metrics.retrieval_queries,
            seed=ctx.config.seed,
        ),
    }


def write_report(
    results: Mapping[str, Any], out: str | Path, *, ctx: LabContext | None = None
) -> list[Path]:
    """Write ``results.json``, ``table.md`` and (given the run's context) the plots."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "table.md"]
    text = json.dumps(results, indent=1, default=json_default) + "\n"
    written[0].write_text(text, encoding="utf-8")
    written[1].write_text(markdown_table(results), encoding="utf-8")
    if ctx is not None:
        written += _plots(results, out, ctx)
    return written


def json_default(value: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars and arrays (the lab's records hold them)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _plots(results: Mapping[str, Any], out: Path, ctx: LabContext) -> list[Path]:
    matplotlib = require("matplotlib", "lab", "the lab's plots")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for name, draw in (
        ("cos_distributions.png", _plot_cosines),
        ("alpha_ablation.png", _plot_ablation),
        ("pca.png", _plot_pca),
    ):
        fig = draw(plt, results, ctx)
        if fig is None:
            continue
        fig.tight_layout()
        paths.append(out / name)
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def _plot_cosines(plt: Any, results: Mapping[str, Any], ctx: LabContext) -> Any:
    """cos(clean, watermarked) per method; ESpeW's marked vs unmarked cos to the target."""
    texts = ctx.corpus.texts
    methods = [w["watermark"] for w in results["watermarks"] if w["watermark"] != "none"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name in methods:
        marked = watermark_for(ctx, name).marked(texts)
        if marked.any():
            cos = row_cosines(ctx.clean[marked], ctx.answers[name][marked])
            axes[0].hist(cos, bins=60, histtype="step", label=METHOD_LABELS.get(name, name))
    axes[0].set(
        xlabel="cos(clean, watermarked), marked rows",
        ylabel="rows",
        title="Quality: how far marking moves an embedding",
    )
    axes[0].legend(fontsize=8)
    espew = next((m for m in methods if m.startswith("espew")), None)
    if espew is not None:
        made = watermark_for(ctx, espew)
        marked = made.marked(texts)
        to_target = unit_rows(ctx.answers[espew]) @ made.key.target
        axes[1].hist(to_target[~marked], bins=60, density=True, alpha=0.6, label="unmarked rows")
        axes[1].hist(to_target[marked], bins=60, density=True, alpha=0.6, label="marked rows")
        axes[1].set(
            xlabel="cos(service embedding, target)",
            ylabel="density",
            title=f"{METHOD_LABELS.get(espew, espew)}: similarity to the secret target",
        )
        axes[1].legend(fontsize=8)
    return fig


def _variant(base: str, alpha: float, base_alpha: float) -> str:
    return base if alpha == base_alpha else f"{base}-a{alpha:g}"


def _plot_ablation(plt: Any, results: Mapping[str, Any], ctx: LabContext) -> Any:
    """p-value (per attack) and cos(clean, watermarked) against alpha (None: no ablation)."""
    ablation = results["config"]["ablation"]
    alphas = sorted({float(a) for a in ablation.get("alphas") or []})
    if not alphas:
        return None
    base, base_alpha = ablation["watermark"], float(results["config"]["key"]["alpha"])
    cells = {(c["watermark"], c["attack"]): c for c in results["cells"]}
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax2 = ax.twinx()
    for attack in ablation["attacks"]:
        found = [(a, cells.get((_variant(base, a, base_alpha), attack))) for a in alphas]
        points = [(a, max(c["p_value"], 1e-300)) for a, c in found if c and _finite(c)]
        ax.plot(*zip(*points, strict=True), marker="o", label=f"p-value, {_attack_label(attack)}")
    summary = {w["watermark"]: w for w in results["watermarks"]}
    cos = [
        summary.get(_variant(base, a, base_alpha), {}).get("cos_clean_marked", math.nan)
        for a in alphas
    ]
    ax2.plot(
        alphas, cos, color="black", linestyle="--", marker="s", label="cos(clean, wm), marked rows"
    )
    ax.set_yscale("log")
    ax.axhline(float(results["config"]["verify"]["level"]), color="red", linewidth=0.8)
    ax.set(xlabel="alpha (watermark proportion)", ylabel="p-value (log)")
    ax2.set_ylabel("cos(clean, watermarked)")
    handles, more = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], fontsize=8, loc="center right")
    ax.set_title("Alpha ablation: detection vs quality")
    return fig


def _finite(cell: Mapping[str, Any]) -> bool:
    return math.isfinite(cell["p_value"])


def _plot_pca(plt: Any, results: Mapping[str, Any], ctx: LabContext) -> Any:
    """2-D PCA of the service's embeddings per alpha, marked rows in red (the paper's Fig. 6)."""
    variants = _pca_variants(results)
    if not variants:
        return None
    texts = ctx.corpus.texts
    rng = np.random.default_rng(ctx.config.seed)
    rows = rng.choice(len(texts), size=min(3000, len(texts)), replace=False)
    fig, axes = plt.subplots(1, len(variants), figsize=(3.6 * len(variants), 3.6))
    axes = np.atleast_1d(axes)
    for ax, (name, alpha) in zip(axes, variants, strict=False):
        marked = watermark_for(ctx, name).marked([texts[i] for i in rows])
        points = ctx.answers[name][rows]
        centred = points - points.mean(axis=0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        xy = centred @ vt[:2].T
        ax.scatter(*xy[~marked].T, s=3, alpha=0.4, label="benign")
        ax.scatter(*xy[marked].T, s=3, alpha=0.6, color="red", label="watermarked")
        ax.set_title(f"alpha = {alpha:g}")
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0].legend(fontsize=8, markerscale=3)
    fig.suptitle("PCA of the service's embeddings (ESpeW smallest)")
    return fig


def _pca_variants(results: Mapping[str, Any]) -> Sequence[tuple[str, float]]:
    ablation = results["config"]["ablation"]
    base = ablation.get("watermark", "espew_smallest")
    base_alpha = float(results["config"]["key"]["alpha"])
    alphas = sorted({float(a) for a in ablation.get("alphas") or []} | {base_alpha})
    if base not in results["config"]["watermarks"] and not ablation.get("alphas"):
        return []
    return [(_variant(base, a, base_alpha), a) for a in alphas]
