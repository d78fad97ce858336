"""espew-lab mounts `espew lab` and `espew tune` through the plugin's entry-point group."""

from __future__ import annotations

import argparse
import importlib.util
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from espew_integrations._optional import LAB_INSTALL as PLUGIN_LAB_INSTALL
from espew_integrations.cli import main, plugins
from espew_integrations.cli.common import EXIT_USAGE, UsageError
from espew_lab import plugin
from espew_lab._optional import LAB_INSTALL, install_line

LAB = Path(__file__).resolve().parents[2]


def test_the_lab_declares_its_register_under_the_plugins_entry_point_group():
    project = (LAB / "pyproject.toml").read_text(encoding="utf-8")
    declared = f'[project.entry-points."{plugins.GROUP}"]\nlab = "espew_lab.plugin:register"\n'
    assert declared in project
    point = EntryPoint("lab", "espew_lab.plugin:register", plugins.GROUP)
    assert point.load() is plugin.register


def test_with_the_lab_installed_espew_lab_and_tune_run_as_before(monkeypatch, capsys, tmp_path):
    point = EntryPoint("lab", "espew_lab.plugin:register", plugins.GROUP)
    monkeypatch.setattr(plugins, "plugin_entry_points", lambda: [point])
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert "lab" in listed and "tune" in listed and "robustness" in listed
    assert main(["lab", "--help"]) == 0
    assert "--config" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("no_such_key: 1\n")
    out = tmp_path / "out"
    assert main(["lab", "--config", str(bad), "--out", str(out), "--quiet"]) == EXIT_USAGE
    assert "unknown lab config keys" in capsys.readouterr().err


def test_a_lab_without_its_packages_hides_its_commands_and_names_the_lab_install_line(
    monkeypatch,
):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "sklearn" else real_find_spec(name, *a),
    )
    parser = argparse.ArgumentParser(prog="espew")
    plugin.register(parser.add_subparsers(dest="command", metavar="COMMAND"))
    assert "tune" not in parser.format_help()
    args = parser.parse_args(["tune", "--model", "minilm", "--help"])
    with pytest.raises(UsageError, match="missing: scikit-learn") as caught:
        args.func(args)
    assert str(caught.value).endswith(LAB_INSTALL)


def test_the_plugin_and_the_lab_spell_the_lab_install_line_alike():
    assert LAB_INSTALL == PLUGIN_LAB_INSTALL == install_line("lab")
    assert install_line("torch").endswith("once published, pip install 'espew-lab[torch]'")
