"""``espew`` guides a newcomer (issue 40): a bare URL suspect, a missing key, repeated
errors, progress steps and missing extras each end with what to type next.

Synthetic keys only (tests/support.py): no corpus is embedded here.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from espew_integrations._optional import LAB_INSTALL, require
from espew_integrations.cli import main
from espew_integrations.cli.common import (
    EXIT_INCONCLUSIVE,
    EXIT_USAGE,
    UsageError,
    announcing_last,
    counting,
    suspect_spec,
)
from espew_integrations.core.ground.errors import ESpeWError, MissingExtraError
from espew_integrations.core.ground.untrusted import tally
from espew_integrations.models import ModelSpecError, resolve_embedder
from tests.support import REPO, free_port, make_key
from tests.unit.test_keyring import make_ring

ESPEW = str(Path(sys.executable).with_name("espew"))


@pytest.fixture
def key_file(tmp_path) -> Path:
    """A small synthetic key (200 band words) and its audit, beside each other."""
    path = tmp_path / "k.key"
    make_key(64, n_band=200, n_triggers=20).save(path)
    return path


def _espew(*argv: str, cwd: Path, env: dict[str, str] | None = None):
    return subprocess.run(
        [ESPEW, *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


# ---------------------------------------------------------------------- --suspect URL
def test_a_bare_url_suspect_shows_both_right_forms_and_exits_3(key_file, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listening
    done = _espew("verify", "--key", str(key_file), "--suspect", url, cwd=tmp_path)
    assert done.returncode == EXIT_USAGE
    assert f"--suspect openai:{url}#MODEL" in done.stderr
    assert f"--suspect {url} --model MODEL" in done.stderr
    assert "cannot import module" not in done.stderr + done.stdout


def test_a_url_with_model_is_queried_and_an_unreachable_one_is_inconclusive(key_file, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    argv = ["--key", str(key_file), "--suspect", url, "--model", "m", "--retries", "0"]
    done = _espew("verify", *argv, "--batch-size", "40", cwd=tmp_path)
    assert done.returncode == EXIT_INCONCLUSIVE, done.stderr
    # 200 probes in 5 batches fail alike: one cause line, counted, not five lines
    for stream in (done.stdout, done.stderr):
        causes = [line for line in stream.splitlines() if "EndpointUnreachableError" in line]
        assert len(causes) == 1 and causes[0].endswith("(x5)"), stream


def test_trace_takes_the_same_suspect_forms(tmp_path):
    ring = tmp_path / "r.ring"
    make_ring(n_band=200, n_shared=20, n_tenant=20).save(ring)
    tenants = tmp_path / "t.txt"
    tenants.write_text("acct-1\n")
    base = ["trace", "--ring", str(ring), "--tenants", str(tenants), "--no-progress"]
    assert main([*base, "--suspect", "https://h.example/v1"]) == EXIT_USAGE
    url = f"http://127.0.0.1:{free_port()}/v1"
    code = main([*base, "--suspect", url, "--model", "m", "--retries", "0"])
    assert code == EXIT_INCONCLUSIVE


@pytest.mark.parametrize(
    "suspect, model, spec",
    [
        ("http://h/v1", "m", "openai:http://h/v1#m"),
        ("HTTPS://h/v1", "m", "openai:HTTPS://h/v1#m"),
        ("openai:http://h/v1", "m", "openai:http://h/v1#m"),
        ("openai:http://h/v1#m", None, "openai:http://h/v1#m"),
        ("minilm", None, "minilm"),
    ],
)
def test_suspect_spec_combines_url_and_model(suspect, model, spec):
    assert suspect_spec(argparse.Namespace(suspect=suspect, model=model)) == spec


@pytest.mark.parametrize(
    "suspect, model", [("minilm", "m"), ("openai:http://h/v1#a", "b"), ("http://h/v1", "a#b")]
)
def test_model_that_cannot_apply_is_a_usage_error(suspect, model):
    with pytest.raises(UsageError, match="--model"):
        suspect_spec(argparse.Namespace(suspect=suspect, model=model))


def test_the_registry_refuses_a_bare_url_with_the_openai_form():
    with pytest.raises(ModelSpecError, match=r"openai:http://h:1/v1#<model>") as caught:
        resolve_embedder("http://h:1/v1")
    assert "cannot import" not in str(caught.value)


# ---------------------------------------------------------------------- missing key
def test_no_key_names_the_key_flag_first(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ESPEW_KEY"}
    done = _espew("verify", "--suspect", "minilm", cwd=tmp_path, env=env)
    assert done.returncode == EXIT_USAGE
    assert "no key given: pass --key PATH" in done.stderr and "ESPEW_KEY" in done.stderr


def test_espew_key_still_works_without_the_flag(key_file, monkeypatch, capsys):
    monkeypatch.setenv("ESPEW_KEY", str(key_file))
    argv = ["verify", "--suspect", "http://127.0.0.1:9/v1", "--model", "m", "--retries", "0"]
    assert main([*argv, "--no-progress"]) == EXIT_INCONCLUSIVE
    assert "no key given" not in capsys.readouterr().err


# ---------------------------------------------------------------------- repeats, progress
def test_tally_counts_repeats_in_first_seen_order():
    assert tally(["a", "b", "a", "a"]) == ["a (x3)", "b"]
    assert tally([]) == []


class _Bar:
    def __init__(self, total: int | None) -> None:
        self.total, self.n, self.desc = total, 0, "querying"

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_description_str(self, desc: str) -> None:
        self.desc = desc


def test_the_bar_names_the_scoring_step_once_every_query_is_in():
    bar = _Bar(total=10)
    update = announcing_last(bar, "scoring: running the rank test")
    update(6, 10)  # progress(done, total), as the library calls it
    assert (bar.n, bar.desc) == (6, "querying")
    update(10, 10)
    assert (bar.n, bar.desc) == (10, "scoring: running the rank test")


def test_an_estimated_total_grows_instead_of_overflowing():
    bar = _Bar(total=5)
    embed = counting(lambda texts: texts, bar)
    embed(["a"] * 4)
    embed(["b"] * 4)
    assert bar.n == 8 and bar.total == 8


# ---------------------------------------------------------------------- optional extras
def test_a_missing_optional_module_names_its_purpose_and_extra(monkeypatch):
    real_find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "httpx" else real_find(name)
    )
    with pytest.raises(MissingExtraError) as caught:
        require("httpx", "http", "the HTTP client")
    error = caught.value
    assert isinstance(error, ESpeWError) and isinstance(error, ImportError)
    assert str(error) == (
        "httpx is needed for the HTTP client: pip install '.[http]' in a checkout of "
        "espew-integrations; once published, pip install 'espew-integrations[http]'"
    )


def test_the_lab_thief_without_sklearn_names_the_lab_install_line(monkeypatch):
    from espew_lab.stealers import RidgeStealer

    real_find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sklearn" else real_find(name)
    )
    with pytest.raises(MissingExtraError, match=r"scikit-learn is needed .* pip install \./lab"):
        RidgeStealer(seed=0).fit(["a text"], [[1.0, 0.0]])


@pytest.mark.parametrize("hidden", ["sklearn", "espew_lab"])
def test_the_demo_fails_at_once_without_the_lab_naming_its_install_line(tmp_path, hidden):
    """Run as make demo runs it, the lab (or its sklearn) hidden: no bare ModuleNotFoundError."""
    hide = tmp_path / "sitecustomize.py"
    hide.write_text(
        "import importlib.util as u\n_real = u.find_spec\n"
        f"u.find_spec = lambda n, *a: None if n == {hidden!r} else _real(n, *a)\n"
    )
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "demo.py"), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode != 0
    assert "the demo's thief (a tf-idf + ridge copy of the service) is the lab's" in done.stderr
    assert LAB_INSTALL in done.stderr
    assert not (tmp_path / "o").exists()  # it stopped before any work


def _demo_module():
    spec = importlib.util.spec_from_file_location("espew_demo", REPO / "examples" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_writes_to_demo_output_and_its_summary_links_the_evidence(tmp_path):
    demo = _demo_module()
    assert demo._parser().parse_args([]).out == "demo-output"
    assert "/demo-output/" in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    report = types.SimpleNamespace(status="not_copied")
    path = demo.write_summary(tmp_path, {"honest": report}, [("1", 2.0)])
    assert path == tmp_path / "summary.md"
    text = path.read_text(encoding="utf-8")
    assert "**not copied**" in text and str(tmp_path / "evidence-honest" / "summary.md") in text
