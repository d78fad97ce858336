"""The lab's grid: stealers x watermarks x attacks (and an alpha ablation), seeded and resumable.

A config (YAML or dict) names the data, the victim model, the attacker's
standard model, the key, and the grid. :func:`run_lab` computes everything
shared once (clean embeddings from the disk cache, the key, each watermark's
answers, CSE's suspicious set per watermark), then runs each cell and writes
``cells/<cell>.json`` as soon as it is done. Running again with the same
config skips finished cells, so an interrupted run resumes where it stopped;
a changed config in the same output directory is refused instead of mixed.
Every random choice derives from ``seed`` and the cell's name.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import platform
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .context import model_name, resolve_model

__all__ = ["DEFAULTS", "LabContext", "cell_id", "draw_key", "load_config", "run_lab"]

DEFAULTS: dict[str, Any] = {
    "name": "lab",
    "seed": 0,
    "output": "lab-results",
    "data": {"corpus": "rotten_tomatoes"},
    "limit": None,
    "victim": "minilm",
    "standard": "paraphrase_minilm_l3",
    "key": {
        "target_text": "Espew robustness lab: provider signature sample, 2026.",
        "n_triggers": 20,
        "freq_band": [0.005, 0.01],
        "alpha": 0.2,
        "max_band_words": None,
    },
    "watermarks": ["none", "espew_smallest", "espew_hashed", "embmarker", "warden"],
    "attacks": ["none", "cse:50"],
    "stealers": ["ridge"],
    "stealer_options": {},
    # probes "auto": the natural-text probes stored in the key (single words for keys
    # without them, such as the baselines'); templates force single-word probes.
    "verify": {"level": 1e-6, "probes": "auto", "templates": None},
    "metrics": {
        "accuracy": True,
        "n_train": 4000,
        "n_test": 2000,
        "holdout": 500,
        "retrieval_queries": 300,
    },
    "ablation": {"alphas": [], "attacks": ["none", "cse:50"], "watermark": "espew_smallest"},
    "plots": True,
    # The wider threat model (lab/threats.py): rows of their own, run once per seed.
    # Empty cells (the default) add nothing to a run.
    "threats": {
        "cells": [],
        "seeds": [0, 1, 2],
        "watermark": "espew_smallest",
        "stealer": "ridge",
        "paraphrase_k": 3,
        "long_texts": {"n_reviews": 2000, "queries": 200},
    },
}


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for name, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(name), dict):
            out[name] = _merge(out[name], value)
        else:
            out[name] = copy.deepcopy(value)
    return out


def load_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """A full config: a YAML file (or a mapping, or a packaged config's name) over the defaults.

    Packaged configs (``espew_integrations/lab/configs``): ``default``, ``smoke``, ``neural``,
    ``threats``.

    >>> load_config("smoke")["name"]
    'smoke'
    """
    if isinstance(source, Mapping):
        raw: Mapping[str, Any] = source
    else:
        import yaml

        path = Path(source)
        packaged = Path(__file__).parent / "configs" / f"{source}.yaml"
        if not path.exists() and packaged.is_file():
            path = packaged
        if not path.is_file():
            raise FileNotFoundError(f"lab config not found: {source}")
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(raw, Mapping):
            raise ValueError(f"lab config {path} must be a YAML mapping")
    unknown = set(raw) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown lab config keys {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    return _merge(DEFAULTS, raw)


def cell_id(stealer: str, watermark: str, attack: str) -> str:
    """File-safe name of one grid cell.

    >>> cell_id("ridge", "espew_smallest", "cse:50")
    'ridge__espew_smallest__cse-50'
    """
    return "__".join(p.replace(":", "-").replace("/", "-") for p in (stealer, watermark, attack))


def _seed_for(seed: int, name: str) -> int:
    return (int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2**32)


def _digest(config: Mapping[str, Any]) -> str:
    """What a cell's numbers depend on (not the grid, the output dir or the plots)."""
    relevant = {
        k: config[k]
        for k in (
            "seed",
            "data",
            "limit",
            "victim",
            "standard",
            "key",
            "verify",
            "metrics",
            "stealer_options",
        )
    }
    threats = config.get("threats") or {}
    if threats.get("cells"):
        # Only when threats run, so configs without them keep their digest; which
        # cells and seeds run is the grid's business, like the main grid's lists.
        relevant["threats"] = {k: v for k, v in threats.items() if k not in ("cells", "seeds")}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def public_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with the key's target text (secret key material) redacted."""
    out = copy.deepcopy(dict(config))
    text = str(out.get("key", {}).get("target_text", ""))
    if "key" in out:
        out["key"]["target_text"] = f"<secret: {len(text)} characters>"
    return out


@dataclass
class LabContext:
    """Everything a grid's cells share, computed once per run."""

    config: dict[str, Any]
    corpus: Any
    clean: np.ndarray
    standard: np.ndarray | None
    victim: Any
    standard_model: Any
    key: Any
    watermarks: dict[str, Any] = field(default_factory=dict)
    answers: dict[str, np.ndarray] = field(default_factory=dict)
    suspicious: dict[str, np.ndarray] = field(default_factory=dict)
    stealer_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    holdout_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    acc_train: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    acc_test: np.ndarray = field(default_factory=lambda: np.zeros(0, int))


def build_context(config: dict[str, Any], *, progress: bool = True) -> LabContext:
    """Load data, embed it (cached), draw the key, and build the watermarks."""
    from .cache import cached_embed
    from .data import load_data
    from .metrics import split_indices

    seed = int(config["seed"])
    corpus = load_data(config["data"], limit=config["limit"], seed=seed)
    texts = list(corpus.texts)
    victim = resolve_model(config["victim"])
    victim_name = model_name(victim, config["victim"])
    clean = cached_embed(victim, texts, model_name=victim_name, progress=progress)
    clean = clean.astype(np.float64)
    threats = config.get("threats") or {}
    threat_cells = [str(t) for t in threats.get("cells", [])]
    threat_needs = any(t.startswith("paraphrase") or t == "router:standard" for t in threat_cells)
    if threat_cells and threats.get("stealer") == "frozen_mlp":
        threat_needs = True
    needs_standard = (
        any(str(a).startswith("cse") for a in _all_attacks(config))
        or "frozen_mlp" in config["stealers"]
        or threat_needs
    )
    standard_model = standard = None
    if needs_standard:
        standard_model = resolve_model(config["standard"])
        standard = cached_embed(
            standard_model,
            texts,
            model_name=model_name(standard_model, config["standard"]),
            progress=progress,
        ).astype(np.float64)
    key = draw_key(config, texts, victim)
    metrics = config["metrics"]
    order = np.random.default_rng(_seed_for(seed, "split")).permutation(len(texts))
    n_holdout = min(int(metrics["holdout"]), len(texts) // 5)
    acc_train, acc_test = split_indices(
        len(texts), n_train=int(metrics["n_train"]), n_test=int(metrics["n_test"]), seed=seed
    )
    return LabContext(
        config=config,
        corpus=corpus,
        clean=clean,
        standard=standard,
        victim=victim,
        standard_model=standard_model,
        key=key,
        stealer_rows=np.sort(order[n_holdout:]),
        holdout_rows=np.sort(order[:n_holdout]),
        acc_train=acc_train,
        acc_test=acc_test,
    )


def draw_key(config: Mapping[str, Any], texts: Sequence[str], victim: Any):
    """The lab's ESpeW key for ``config["seed"]``: drawn from ``texts`` with the victim model."""
    from ..core.key import WatermarkKey

    key_cfg = config["key"]

    def embed_victim(batch: list[str]) -> np.ndarray:
        return np.asarray(victim(batch))

    return WatermarkKey.generate(
        texts,
        embed_victim,
        target_text=str(key_cfg["target_text"]),
        n_triggers=int(key_cfg["n_triggers"]),
        freq_band=tuple(key_cfg["freq_band"]),
        alpha=float(key_cfg["alpha"]),
        strength=float(key_cfg.get("strength", 1.0)),
        selection="smallest",
        seed=int(config["seed"]),
        max_band_words=key_cfg.get("max_band_words"),
    )


def _all_attacks(config: Mapping[str, Any]) -> list[str]:
    attacks = list(config["attacks"])
    if config["ablation"].get("alphas"):
        attacks += [a for a in config["ablation"]["attacks"] if a not in attacks]
    return attacks


def _parse_variant(name: str) -> tuple[str, dict[str, float]]:
    """Split ``espew_smallest-a0.2-s0.24`` into the method and its key changes."""
    base, *suffixes = name.split("-")
    fields = {"a": "alpha", "s": "strength"}
    variant: dict[str, float] = {}
    for suffix in suffixes:
        if suffix[:1] not in fields:
            raise ValueError(f"unknown watermark variant {suffix!r} in {name!r} (use -a, -s)")
        variant[fields[suffix[0]]] = float(suffix[1:])
    return base, variant


def watermark_for(ctx: LabContext, name: str):
    """The watermark called ``name``.

    ``espew_smallest-a0.05`` is an alpha variant and ``espew_smallest-a0.2-s0.24``
    an alpha and strength variant of the configured key.
    """
    if name in ctx.watermarks:
        return ctx.watermarks[name]
    from .watermarks import ESpeW, build_watermark

    base, variant = _parse_variant(name)
    made = build_watermark(
        base,
        texts=ctx.corpus.texts,
        clean=ctx.clean,
        espew_key=ctx.key,
        seed=int(ctx.config["seed"]),
        n_triggers=int(ctx.config["key"]["n_triggers"]),
    )
    if variant:
        made = ESpeW(made.key.replace(**variant))
        made.name = name
    ctx.watermarks[name] = made
    ctx.answers[name] = np.asarray(made.apply(ctx.corpus.texts, ctx.clean), dtype=np.float64)
    return made


def watermark_summary(ctx: LabContext, name: str) -> dict[str, Any]:
    """Quality of one watermark on the whole corpus (no stealer, no attack)."""
    from .metrics import mean_cosine, retrieval_overlap

    made = watermark_for(ctx, name)
    marked = made.marked(ctx.corpus.texts)
    answers = ctx.answers[name]
    metrics = ctx.config["metrics"]
    return {
        "watermark": name,
        "marked_fraction": float(marked.mean()),
        "cos_clean_all": mean_cosine(ctx.clean, answers),
        "cos_clean_marked": mean_cosine(ctx.clean, answers, marked),
        "top10_overlap": retrieval_overlap(
            ctx.clean,
            answers,
            n_queries=int(metrics["retrieval_queries"]),
            seed=int(ctx.config["seed"]),
        ),
    }


def run_cell(ctx: LabContext, stealer_name: str, wm_name: str, attack: str) -> dict[str, Any]:
    """Steal, attack, verify and measure one cell; returns its JSON-ready record."""
    from .attacks import apply_attack, cse_suspicious, parse_attack
    from .metrics import downstream_accuracy, mean_cosine, retrieval_overlap, row_cosines
    from .stealers import make_stealer

    started = time.perf_counter()
    name = cell_id(stealer_name, wm_name, attack)
    seed = _seed_for(int(ctx.config["seed"]), name)
    made = watermark_for(ctx, wm_name)
    answers = ctx.answers[wm_name]
    texts = ctx.corpus.texts
    suspicious = None
    if parse_attack(attack)[0] == "cse":
        if wm_name not in ctx.suspicious:
            ctx.suspicious[wm_name], _ = cse_suspicious(
                answers, ctx.standard, seed=_seed_for(int(ctx.config["seed"]), wm_name)
            )
        suspicious = ctx.suspicious[wm_name]
    attacked = apply_attack(
        attack, texts, answers, standard=ctx.standard, seed=seed, suspicious=suspicious
    )
    trained_on = attacked.embeddings
    metrics = ctx.config["metrics"]
    record: dict[str, Any] = {
        "cell": name,
        "stealer": stealer_name,
        "watermark": wm_name,
        "attack": attack,
        "alpha": getattr(getattr(made, "key", None), "alpha", None),
        "seed": seed,
        "attack_info": attacked.info,
        "cos_clean_trained_on": mean_cosine(ctx.clean, trained_on)
        if attacked.target_mode == "key"
        else None,
        "top10_overlap_trained_on": retrieval_overlap(
            ctx.clean, trained_on, n_queries=int(metrics["retrieval_queries"]), seed=seed
        ),
    }
    if metrics.get("accuracy", True):
        record["acc"] = downstream_accuracy(
            trained_on, ctx.corpus.labels, train=ctx.acc_train, test=ctx.acc_test, seed=seed
        )
    rows = ctx.stealer_rows
    options = dict(ctx.config["stealer_options"].get(stealer_name, {}))
    features = ctx.standard[rows] if stealer_name == "frozen_mlp" else None
    stealer = make_stealer(
        stealer_name, seed=seed, encoder=ctx.standard_model, features=features, **options
    )
    stealer.fit([texts[i] for i in rows], trained_on[rows])
    holdout = [texts[i] for i in ctx.holdout_rows]
    copy_out = np.asarray(stealer(holdout))
    record["copy_fidelity"] = float(row_cosines(copy_out, trained_on[ctx.holdout_rows]).mean())
    verify_cfg = ctx.config["verify"]
    verdict = made.verify(
        stealer,
        target_mode=attacked.target_mode,
        level=float(verify_cfg["level"]),
        templates=verify_templates(verify_cfg),
        seed=seed,
    )
    record["verification"] = verdict.to_dict()
    record.update(
        p_value=verdict.p_value,
        copied=verdict.copied,
        delta_cos=verdict.delta_cos,
        delta_l2=verdict.delta_l2,
        n_queries=verdict.n_queries,
        seconds=round(time.perf_counter() - started, 2),
    )
    return record


def verify_templates(verify_cfg: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The configured single-word probe templates, or None for the key's stored probes."""
    templates = verify_cfg.get("templates")
    return None if not templates else tuple(templates)


def grid(config: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Every (stealer, watermark, attack) the config asks for, main grid then ablation."""
    cells = [
        (s, w, a)
        for s in config["stealers"]
        for w in config["watermarks"]
        for a in config["attacks"]
    ]
    ablation = config["ablation"]
    base_alpha = float(config["key"]["alpha"])
    for alpha in ablation.get("alphas") or []:
        wm = ablation["watermark"]
        name = wm if float(alpha) == base_alpha else f"{wm}-a{float(alpha):g}"
        for attack in ablation["attacks"]:
            cell = (config["stealers"][0], name, attack)
            if cell not in cells:
                cells.append(cell)
    return cells


def run_lab(
    config: str | os.PathLike[str] | Mapping[str, Any],
    *,
    output: str | os.PathLike[str] | None = None,
    progress: bool = True,
    fresh: bool = False,
) -> dict[str, Any]:
    """Run (or resume) the lab grid; write results JSON, Markdown table and plots.

    Returns the results dict (also written to ``<output>/results.json``).

    >>> results = run_lab("smoke", output="lab-results/smoke")  # doctest: +SKIP
    >>> results["cells"][0]["copied"]                            # doctest: +SKIP
    False
    """
    from .report import write_report

    config = load_config(config)
    out = Path(output or config["output"])
    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    digest = _digest(config)
    stamp = out / "config.json"
    if stamp.exists() and not fresh:
        previous = json.loads(stamp.read_text(encoding="utf-8")).get("digest")
        if previous != digest:
            raise ValueError(
                f"{out} holds results of a different lab config (digest {previous}, now "
                f"{digest}); use another output directory or pass fresh=True (--fresh)"
            )
    if fresh:
        for old in cells_dir.glob("*.json"):
            old.unlink()
    stamp.write_text(
        json.dumps({"digest": digest, "config": public_config(config)}, indent=2),
        encoding="utf-8",
    )

    started = time.perf_counter()
    ctx = build_context(config, progress=progress)
    setup_seconds = time.perf_counter() - started
    todo = grid(config)
    iterator: Any = todo
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(todo, desc=f"lab {config['name']}", unit="cell")
    records = []
    n_resumed = 0
    for stealer_name, wm_name, attack in iterator:
        path = cells_dir / f"{cell_id(stealer_name, wm_name, attack)}.json"
        if path.exists():
            records.append(json.loads(path.read_text(encoding="utf-8")))
            n_resumed += 1
            continue
        record = run_cell(ctx, stealer_name, wm_name, attack)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1, default=_jsonable), encoding="utf-8")
        os.replace(tmp, path)
        records.append(record)
    threat_records, n_threats_resumed = _run_threats(ctx, cells_dir, progress=progress)
    n_resumed += n_threats_resumed
    records_seconds = sum(float(c.get("seconds", 0.0)) for c in records + threat_records)
    wm_names = list(dict.fromkeys([w for _, w, _ in todo]))
    results = {
        "name": config["name"],
        "config_digest": digest,
        "config": public_config(config),
        "key_id": ctx.key.key_id,
        "key": {
            "alpha": ctx.key.alpha,
            "n_triggers": len(ctx.key.triggers),
            "band_words": len(ctx.key.band),
            "twin_p_value": ctx.key.info.get("twin_p_value"),
        },
        "corpus": {
            "name": ctx.corpus.name,
            "n_texts": len(ctx.corpus),
            "label_names": list(ctx.corpus.label_names),
        },
        "victim": model_name(ctx.victim, config["victim"]),
        "standard": model_name(ctx.standard_model, config["standard"])
        if ctx.standard_model is not None
        else None,
        "watermarks": [watermark_summary(ctx, w) for w in wm_names],
        "cells": records,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "setup_seconds": round(setup_seconds, 1),
        # This invocation only (a resumed run reads finished cells back), and the
        # compute time of all cells whenever they ran.
        "total_seconds": round(time.perf_counter() - started, 1),
        "cells_seconds": round(records_seconds, 1),
        "cells_resumed": n_resumed,
    }
    if threat_records:
        from .threats import aggregate

        results["threats"] = {"records": threat_records, "rows": aggregate(threat_records)}
    write_report(results, out, ctx=ctx if config["plots"] else None)
    return results


def threat_cell_id(spec: str, seed: int) -> str:
    """File-safe name of one threat cell for one seed.

    >>> threat_cell_id("paraphrase:substitute:0.3", 1)
    'threat__paraphrase-substitute-0.3__s1'
    """
    return f"threat__{spec.replace(':', '-').replace('/', '-')}__s{int(seed)}"


def _run_threats(
    ctx: LabContext, cells_dir: Path, *, progress: bool
) -> tuple[list[dict[str, Any]], int]:
    """Run (or read back) every threat cell x seed; returns the records and how many resumed."""
    from .threats import parse_threat, run_threat

    threats = ctx.config.get("threats") or {}
    specs = [str(t) for t in threats.get("cells", [])]
    for spec in specs:
        parse_threat(spec)  # refuse a typo before any work
    todo = [(spec, int(seed)) for spec in specs for seed in threats.get("seeds", [0])]
    iterator: Any = todo
    if progress and todo:
        from tqdm.auto import tqdm

        iterator = tqdm(todo, desc=f"threats {ctx.config['name']}", unit="cell")
    records, n_resumed = [], 0
    contexts: dict[int, LabContext] = {}  # one key per seed, drawn once
    for spec, seed in iterator:
        path = cells_dir / f"{threat_cell_id(spec, seed)}.json"
        if path.exists():
            records.append(json.loads(path.read_text(encoding="utf-8")))
            n_resumed += 1
            continue
        started = time.perf_counter()
        record = run_threat(ctx, spec, seed, contexts=contexts)
        record["seconds"] = round(time.perf_counter() - started, 2)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1, default=_jsonable), encoding="utf-8")
        os.replace(tmp, path)
        records.append(record)
    return records, n_resumed


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
