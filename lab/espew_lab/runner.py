"""The lab's grid: stealers x watermarks x attacks (and an alpha ablation), seeded and resumable.

A config (:class:`~.config.LabConfig`, from YAML or a dict) names the data,
the victim model, the attacker's standard model, the key, and the grid.
:func:`run_lab` first checks that everything the run needs is installed
(:func:`preflight`), then computes everything shared once (clean embeddings
from the disk cache, the key, each watermark's answers, CSE's suspicious set
per watermark), then runs each cell and writes ``cells/<cell>.json`` as soon
as it is done. Running again with the same config skips finished cells, so an
interrupted run resumes where it stopped; a changed config in the same output
directory is refused instead of mixed. Every random choice derives from
``seed`` and the cell's name.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from espew_integrations.models import check_available

from ._optional import LAB_INSTALL, install_line
from .config import LabConfig, load_config
from .context import (
    LabContext,
    build_context,
    model_name,
    model_specs,
    resolve_models,
    seed_for,
    watermark_for,
)
from .report import json_default, write_report
from .stealers import ENCODER_STEALERS, thief_rows

__all__ = [
    "LabDependencyError",
    "cell_id",
    "grid",
    "preflight",
    "run_cell",
    "run_lab",
    "threat_cell_id",
]


class LabDependencyError(ModuleNotFoundError):
    """Something the run needs is not installed; the message has the exact install line."""


def cell_id(stealer: str, watermark: str, attack: str) -> str:
    """File-safe name of one grid cell.

    >>> cell_id("ridge", "espew_smallest", "cse:50")
    'ridge__espew_smallest__cse-50'
    """
    return "__".join(p.replace(":", "-").replace("/", "-") for p in (stealer, watermark, attack))


def threat_cell_id(spec: str, seed: int) -> str:
    """File-safe name of one threat cell for one seed.

    >>> threat_cell_id("paraphrase:substitute:0.3", 1)
    'threat__paraphrase-substitute-0.3__s1'
    """
    return f"threat__{spec.replace(':', '-').replace('/', '-')}__s{int(seed)}"


# ---------------------------------------------------------------------- preflight
def _needed_modules(config: LabConfig, progress: bool) -> dict[str, str]:
    """Import name -> the install line that brings it, for this config's cells."""
    needed = {"sklearn": LAB_INSTALL}  # the ridge stealer, CSE's k-means, the accuracy MLP
    if config.plots:
        needed["matplotlib"] = LAB_INSTALL
    if progress:
        needed["tqdm"] = LAB_INSTALL
    if "torch_encoder" in config.stealers or config.threats.stealer == "torch_encoder":
        needed["torch"] = (
            "pip install torch --index-url https://download.pytorch.org/whl/cpu && "
            + install_line("torch")
        )
    return needed


def preflight(config: LabConfig, *, progress: bool = True) -> tuple[Any, Any]:
    """Check, before any embedding work, that the run can finish; returns the models.

    Refuses a threat cell typo, names the first missing package with its exact
    ``pip install`` line, and loads the victim (and, where a cell needs it,
    the attacker's standard model), whose own errors name their packages.
    """
    from .threats import parse_threat

    for spec in config.threats.cells:
        parse_threat(spec)
    for module, install in _needed_modules(config, progress).items():
        if importlib.util.find_spec(module) is None:
            raise LabDependencyError(
                f"the lab config {config.name!r} needs the Python package {module!r}, which is "
                f"not installed: {install}"
            )
    for spec in model_specs(config):
        try:
            check_available(spec)  # looks packages up without loading anything
        except ModuleNotFoundError as exc:
            message = f"a model of lab config {config.name!r} is not installed: {exc}"
            raise LabDependencyError(message) from None
    return resolve_models(config)


# ---------------------------------------------------------------------- one cell
def _attacked(ctx: LabContext, wm_name: str, attack: str, seed: int) -> Any:
    """The watermark's answers after ``attack`` (CSE's suspicious set: once per watermark).

    The thief attacks the answers it holds: under ``split: disjoint`` those of the
    stealer's rows only (the other rows keep the service's answers, which no stealer
    trains on); under ``overlap`` every row's.
    """
    from .attacks import AttackResult, apply_attack, cse_suspicious, parse_attack

    answers = ctx.answers[wm_name]
    texts = ctx.corpus.texts
    rows = np.arange(len(texts)) if ctx.config.split == "overlap" else ctx.stealer_rows
    held = answers[rows]
    standard = None if ctx.standard is None else ctx.standard[rows]
    suspicious = None
    if parse_attack(attack)[0] == "cse":
        if wm_name not in ctx.suspicious:
            ctx.suspicious[wm_name], _ = cse_suspicious(
                held, standard, seed=seed_for(ctx.config.seed, wm_name)
            )
        suspicious = ctx.suspicious[wm_name]
    result = apply_attack(
        attack, [texts[i] for i in rows], held, standard=standard, seed=seed, suspicious=suspicious
    )
    if len(rows) == len(texts):
        return result
    embeddings = np.array(answers, dtype=np.float64)
    embeddings[rows] = result.embeddings
    return AttackResult(embeddings, result.target_mode, result.info)


def _training_metrics(ctx: LabContext, attacked: Any, seed: int) -> dict[str, Any]:
    """Quality of what the stealer trains on: cos to clean, retrieval overlap, accuracy."""
    from .metrics import downstream_accuracy, mean_cosine, retrieval_overlap

    trained_on = attacked.embeddings
    metrics = ctx.config.metrics
    record: dict[str, Any] = {
        "cos_clean_trained_on": mean_cosine(ctx.clean, trained_on)
        if attacked.target_mode == "key"
        else None,
        "top10_overlap_trained_on": retrieval_overlap(
            ctx.clean, trained_on, n_queries=metrics.retrieval_queries, seed=seed
        ),
    }
    if metrics.accuracy:
        record["acc"] = downstream_accuracy(
            trained_on, ctx.corpus.labels, train=ctx.acc_train, test=ctx.acc_test, seed=seed
        )
    return record


def _train_copy(ctx: LabContext, stealer_name: str, trained_on: np.ndarray, seed: int) -> Any:
    """The stealer trained on every text but the held-out ones."""
    from .stealers import make_stealer

    rows = ctx.stealer_rows
    options = dict(ctx.config.stealer_options.get(stealer_name, {}))
    features = ctx.standard[rows] if stealer_name in ENCODER_STEALERS else None
    stealer = make_stealer(
        stealer_name, seed=seed, encoder=ctx.standard_model, features=features, **options
    )
    return stealer.fit([ctx.corpus.texts[i] for i in rows], trained_on[rows])


def run_cell(ctx: LabContext, stealer_name: str, wm_name: str, attack: str) -> dict[str, Any]:
    """Steal, attack, verify and measure one cell; returns its JSON-ready record."""
    from espew_integrations.core.mark.probes import row_cosines

    started = time.perf_counter()
    name = cell_id(stealer_name, wm_name, attack)
    seed = seed_for(ctx.config.seed, name)
    made = watermark_for(ctx, wm_name)
    attacked = _attacked(ctx, wm_name, attack, seed)
    record: dict[str, Any] = {
        "cell": name,
        "stealer": stealer_name,
        "watermark": wm_name,
        "attack": attack,
        "alpha": getattr(getattr(made, "key", None), "alpha", None),
        "seed": seed,
        "attack_info": attacked.info,
        **_training_metrics(ctx, attacked, seed),
    }
    stealer = _train_copy(ctx, stealer_name, attacked.embeddings, seed)
    holdout = [ctx.corpus.texts[i] for i in ctx.holdout_rows]
    copy_out = np.asarray(stealer(holdout))
    held_out = attacked.embeddings[ctx.holdout_rows]
    record["copy_fidelity"] = float(row_cosines(copy_out, held_out).mean())
    verify = ctx.config.verify
    verdict = made.verify(
        stealer,
        target_mode=attacked.target_mode,
        level=verify.level,
        templates=verify.templates,
        seed=seed,
        probes=verify.probes,
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


def grid(config: LabConfig) -> list[tuple[str, str, str]]:
    """Every (stealer, watermark, attack) the config asks for, main grid then ablation."""
    cells = [(s, w, a) for s in config.stealers for w in config.watermarks for a in config.attacks]
    ablation = config.ablation
    for alpha in ablation.alphas:
        wm = ablation.watermark
        name = wm if float(alpha) == config.key.alpha else f"{wm}-a{float(alpha):g}"
        for attack in ablation.attacks:
            cell = (config.stealers[0], name, attack)
            if cell not in cells:
                cells.append(cell)
    return cells


# ---------------------------------------------------------------------- the run
def _claim_output(config: LabConfig, out: Path, *, fresh: bool) -> Path:
    """Create ``out/cells``; refuse a directory that holds another config's cells."""
    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    digest = config.digest()
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
        json.dumps({"digest": digest, "config": config.public_dict()}, indent=2),
        encoding="utf-8",
    )
    return cells_dir


def _store(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=json_default), encoding="utf-8")
    os.replace(tmp, path)


def _run_cells(
    todo: list[Any],
    cells_dir: Path,
    file_name: Callable[[Any], str],
    compute: Callable[[Any], dict[str, Any]],
    *,
    desc: str,
    progress: bool,
) -> tuple[list[dict[str, Any]], int]:
    """Compute (or read back) each cell; returns the records and how many were read back."""
    iterator: Any = todo
    if progress and todo:
        from tqdm.auto import tqdm

        iterator = tqdm(todo, desc=desc, unit="cell")
    records, n_resumed = [], 0
    for cell in iterator:
        path = cells_dir / f"{file_name(cell)}.json"
        if path.exists():
            records.append(json.loads(path.read_text(encoding="utf-8")))
            n_resumed += 1
            continue
        record = compute(cell)
        _store(path, record)
        records.append(record)
    return records, n_resumed


def _run_threats(
    ctx: LabContext, cells_dir: Path, *, progress: bool
) -> tuple[list[dict[str, Any]], int]:
    """Run (or read back) every threat cell x seed; returns the records and how many resumed."""
    from .threats import run_threat

    threats = ctx.config.threats
    todo = [(spec, seed) for spec in threats.cells for seed in threats.seeds]
    contexts: dict[int, LabContext] = {}  # one key per seed, drawn once

    def compute(cell: tuple[str, int]) -> dict[str, Any]:
        started = time.perf_counter()
        record = run_threat(ctx, cell[0], cell[1], contexts=contexts)
        record["seconds"] = round(time.perf_counter() - started, 2)
        return record

    return _run_cells(
        todo, cells_dir, lambda cell: threat_cell_id(*cell), compute,
        desc=f"threats {ctx.config.name}", progress=progress,
    )  # fmt: skip


def _results(
    ctx: LabContext, records: list[dict[str, Any]], threat_records: list[dict[str, Any]]
) -> dict[str, Any]:
    """The run's results dict (what ``results.json`` holds), timings added by the caller."""
    from .report import watermark_summary

    config = ctx.config
    wm_names = list(dict.fromkeys(w for _, w, _ in grid(config)))
    results: dict[str, Any] = {
        "name": config.name,
        "config_digest": config.digest(),
        "config": config.public_dict(),
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
        "victim": model_name(ctx.victim, config.victim),
        "standard": model_name(ctx.standard_model, config.standard)
        if ctx.standard_model is not None
        else None,
        "watermarks": [watermark_summary(ctx, w) for w in wm_names],
        "cells": records,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    if threat_records:
        from .threats import aggregate

        results["threats"] = {"records": threat_records, "rows": aggregate(threat_records)}
    return results


def run_lab(
    config: str | os.PathLike[str] | Mapping[str, Any] | LabConfig,
    *,
    output: str | os.PathLike[str] | None = None,
    progress: bool = True,
    fresh: bool = False,
) -> dict[str, Any]:
    """Run (or resume) the lab grid; write results JSON, Markdown table and plots.

    Returns the results dict (also written to ``<output>/results.json``).
    Raises :class:`LabDependencyError` (with the install line) before any
    embedding work when the config needs something that is not installed.

    >>> results = run_lab("smoke", output="lab-results/smoke")  # doctest: +SKIP
    >>> results["cells"][0]["copied"]                            # doctest: +SKIP
    False
    """
    config = load_config(config)
    models = preflight(config, progress=progress)
    out = Path(output or config.output)
    cells_dir = _claim_output(config, out, fresh=fresh)
    started = time.perf_counter()
    ctx = build_context(config, progress=progress, models=models)
    ctx.stealer_rows = thief_rows(ctx)
    setup_seconds = time.perf_counter() - started
    records, n_resumed = _run_cells(
        grid(config), cells_dir, lambda cell: cell_id(*cell), lambda cell: run_cell(ctx, *cell),
        desc=f"lab {config.name}", progress=progress,
    )  # fmt: skip
    threat_records, n_threats_resumed = _run_threats(ctx, cells_dir, progress=progress)
    results = _results(ctx, records, threat_records)
    results.update(
        setup_seconds=round(setup_seconds, 1),
        # This invocation only (a resumed run reads finished cells back), and the
        # compute time of all cells whenever they ran.
        total_seconds=round(time.perf_counter() - started, 1),
        cells_seconds=round(sum(float(c.get("seconds", 0.0)) for c in records + threat_records), 1),
        cells_resumed=n_resumed + n_threats_resumed,
    )
    write_report(results, out, ctx=ctx if config.plots else None)
    return results
