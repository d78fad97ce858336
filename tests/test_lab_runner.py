"""The lab end to end on the smoke config: outputs, resume, seeded reproducibility, data files."""

from __future__ import annotations

import json
import math

import pytest

from espew_integrations.lab import load_config, load_data, run_lab
from espew_integrations.lab import runner as lab_runner
from espew_integrations.lab.cli import main as lab_main
from espew_integrations.lab.data import load_file


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    return out, run_lab("smoke", output=out, progress=False)


def _no_plots():
    config = load_config("smoke")
    config["plots"] = False  # plots do not change the numbers (nor the config digest)
    return config


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
    secret = load_config("smoke")["key"]["target_text"]
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
    config = load_config("smoke")
    config["key"]["alpha"] = 0.3
    with pytest.raises(ValueError, match="different lab config"):
        run_lab(config, output=out, progress=False)


def test_cli_lab_command_runs_from_a_yaml_file(smoke, tmp_path, capsys):
    out, _ = smoke
    assert lab_main(["lab", "--config", "smoke", "--out", str(out), "--quiet"]) == 0
    assert "7 cells" in capsys.readouterr().out
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
    assert config["key"]["alpha"] == 0.2 and config["attacks"] == ["none"]
    assert math.isclose(load_config("default")["verify"]["level"], 1e-6)
    with pytest.raises(ValueError, match="unknown lab config keys"):
        load_config({"atacks": ["none"]})
