"""The extras are cut so that a provider who serves and verifies installs no plotting
stack (issue 55): ``[cli]`` brings no matplotlib, ``[plots]`` does, and ``[all]`` and
``[dev]`` still bring everything."""

from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the copy pip carries
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "espew-integrations"
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


def extras() -> dict[str, list[str]]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)["project"]["optional-dependencies"]


def closure(extra: str, table: dict[str, list[str]] | None = None) -> set[str]:
    """The distributions an extra installs directly, its own extras expanded."""
    table = extras() if table is None else table
    names: set[str] = set()
    for requirement in table[extra]:
        match = REQUIREMENT.match(requirement)
        assert match, requirement
        name = match[1].lower().replace("_", "-")
        if name == PROJECT:
            for inner in (match[2] or "").split(","):
                names |= closure(inner.strip(), table)
        else:
            names.add(name)
    return names


def test_cli_brings_no_plotting_stack():
    cli = closure("cli")
    assert {"tqdm", "onnxruntime", "starlette", "uvicorn", "prometheus-client"} <= cli
    assert not {"matplotlib", "fonttools", "pillow"} & cli, sorted(cli)


def test_plots_bring_matplotlib_and_all_and_dev_bring_every_extra():
    table = extras()
    assert "matplotlib" in closure("plots")
    everything = set().union(
        *(closure(name) for name in table if name not in ("all", "dev", "docs", "ray"))
    )
    assert everything <= closure("all"), sorted(everything - closure("all"))
    assert closure("all") | closure("docs") | closure("ray") <= closure("dev")


def test_a_missing_plot_package_names_the_plots_extra():
    source = (ROOT / "espew_integrations" / "evidence.py").read_text(encoding="utf-8")
    assert 'require("matplotlib", "plots",' in source
    assert 'require("matplotlib", "cli"' not in source


def test_the_closure_reader_expands_nested_extras():
    table = {"a": ["x>=1", f"{PROJECT}[b,c]"], "b": ["Y_z[extra]>=2"], "c": ["w"]}
    assert closure("a", table) == {"x", "y-z", "w"}
