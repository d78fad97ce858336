"""One rule for the key (issue 48): ``espew serve`` reads ``--key FILE``, ``--key env:VAR``
and ``$ESPEW_KEY`` as every other command does, and never serves unmarked vectors
because a key was given in a form it ignored. Unmarked serving is ``--no-watermark``.

Real processes, the real offline model and real HTTP for the vectors; the refusals run
in-process with the listener replaced (they exit before anything listens)."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import OpenAIEndpoint
from espew_integrations.cli import main
from espew_integrations.cli.common import EXIT_USAGE
from espew_integrations.offline.embedders import minilm
from tests.support import mixed_texts, real_key, stop

CLI = [sys.executable, "-m", "espew_integrations.cli"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def key_file(tmp_path_factory) -> Path:
    return real_key().save(tmp_path_factory.mktemp("serve-key") / "provider.key")


def _start(args: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    """``espew serve --embedder minilm ARGS`` on a free port: the process and its URL."""
    proc = subprocess.Popen(
        [*CLI, "serve", "--embedder", "minilm", "--port", "0", "--model-name", "m", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if selector.select(timeout=0.5):
            line = proc.stdout.readline()
            match = re.search(r"on (http://\S+/v1)", line)
            if match:
                return proc, line
    stop(proc)
    raise AssertionError(f"espew serve did not start:\n{log.read_text()}")


def test_espew_key_holding_the_key_json_serves_what_key_file_serves(key_file, tmp_path):
    key = real_key()
    texts = list(mixed_texts(1, 1))  # a real review with a trigger, one without
    assert key.contains_trigger(texts).tolist() == [True, False]
    base = {k: v for k, v in os.environ.items() if k != "ESPEW_KEY"}
    by_variable = {**base, "ESPEW_KEY": key_file.read_text()}  # the content, not a path
    started = [
        _start(["--key", str(key_file)], base, tmp_path / "file.log"),
        _start([], by_variable, tmp_path / "variable.log"),
    ]
    try:
        answers, announcements = [], []
        for _, line in started:
            announcements.append(line)
            url = re.search(r"on (http://\S+/v1)", line).group(1)
            with OpenAIEndpoint(url, "m") as endpoint:
                answers.append(np.asarray(endpoint(texts)))
    finally:
        for proc, _ in started:
            stop(proc)
    assert f"watermarked with key {key.key_id} (from key file" in announcements[0]
    assert "; marking=words: texts holding a trigger word are marked)" in announcements[0]
    assert f"watermarked with key {key.key_id} (from $ESPEW_KEY; marking=" in announcements[1]
    from_file, from_variable = answers
    np.testing.assert_array_equal(from_variable, from_file)
    clean = np.asarray(minilm()(texts), dtype=np.float64)
    cosines = np.sum(from_file * clean, axis=1) / (
        np.linalg.norm(from_file, axis=1) * np.linalg.norm(clean, axis=1)
    )
    assert cosines[0] < 0.9999  # the trigger text is marked
    np.testing.assert_allclose(from_file[1], clean[1], atol=1e-6)  # the other is not


@pytest.fixture
def no_listening(monkeypatch) -> list[dict]:
    from espew_integrations.http import serving

    calls: list[dict] = []
    monkeypatch.setattr(serving, "serve", lambda app, **kwargs: calls.append(kwargs))
    return calls


def test_serve_without_any_key_refuses_and_names_the_forms(no_listening, monkeypatch, capsys):
    monkeypatch.delenv("ESPEW_KEY", raising=False)
    assert main(["serve", "--embedder", "minilm", "--port", "0"]) == EXIT_USAGE
    err = capsys.readouterr().err
    for form in ("--key FILE", "--key env:VAR", "ESPEW_KEY", "--no-watermark"):
        assert form in err
    assert no_listening == []


@pytest.mark.parametrize(
    ("value", "message"),
    [("  ", "ESPEW_KEY is set but blank"), ("not-a-key-nor-a-file", "ESPEW_KEY holds neither")],
)
def test_serve_refuses_an_espew_key_it_cannot_use_rather_than_serve_unmarked(
    no_listening, monkeypatch, capsys, value, message
):
    monkeypatch.setenv("ESPEW_KEY", value)
    assert main(["serve", "--embedder", "minilm", "--port", "0"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and "not-a-key" not in err  # the value is never printed
    assert no_listening == []


def test_no_watermark_is_the_one_way_to_serve_unmarked(no_listening, key_file, monkeypatch, capsys):
    monkeypatch.setenv("ESPEW_KEY", str(key_file))
    assert main(["serve", "--embedder", "minilm", "--port", "0", "--no-watermark"]) == 0
    assert len(no_listening) == 1
    assert "$ESPEW_KEY is set and not used" in capsys.readouterr().err
    argv = ["serve", "--embedder", "minilm", "--no-watermark", "--key", str(key_file)]
    assert main(argv) == EXIT_USAGE
    assert "contradict" in capsys.readouterr().err
    assert len(no_listening) == 1
