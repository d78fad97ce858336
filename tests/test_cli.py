"""``espew`` command line: exit codes, worked examples in --help, usage errors."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import WatermarkKey, watermark
from espew_integrations.cli import (
    EXIT_COPIED,
    EXIT_INCONCLUSIVE,
    EXIT_NOT_COPIED,
    EXIT_USAGE,
    build_parser,
    main,
    read_texts,
)
from espew_integrations.embedders import minilm

TARGET_TEXT = "Acme Embeddings service, 2026 edition"


@pytest.fixture(scope="module")
def key_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("key") / "provider.key"
    code = main(
        [
            "keygen",
            "--corpus",
            "rotten_tomatoes",
            "--target-text",
            TARGET_TEXT,
            "--seed",
            "3",
            "--max-band-words",
            "60",
            "--out",
            str(path),
            "--no-progress",
        ]
    )
    assert code == 0
    return path


@pytest.fixture(scope="module")
def key(key_path) -> WatermarkKey:
    return WatermarkKey.load(key_path)


@pytest.fixture(scope="module")
def suspects(tmp_path_factory, key_path) -> Path:
    """A Python file with a copied, a clean and a broken suspect."""
    path = tmp_path_factory.mktemp("suspects") / "suspects.py"
    path.write_text(
        "from espew_integrations import WatermarkKey, watermark\n"
        "from espew_integrations.embedders import minilm\n"
        f"_key = WatermarkKey.load({str(key_path)!r})\n"
        "def marked(texts):\n"
        "    return watermark(texts, minilm()(texts), _key)\n"
        "def broken(texts):\n"
        "    raise ConnectionError('suspect endpoint is down')\n"
        "class Factory:\n"
        "    def __call__(self, texts):\n"
        "        return minilm()(texts)\n"
    )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------- keygen / embed
def test_keygen_writes_a_private_key_and_prints_only_its_id(tmp_path, capsys):
    out = tmp_path / "k.key"
    code = main(
        [
            "keygen",
            "--corpus",
            "rotten_tomatoes",
            "--target-text",
            TARGET_TEXT,
            "--seed",
            "4",
            "--max-band-words",
            "50",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    key = WatermarkKey.load(out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    printed = capsys.readouterr()
    assert key.key_id in printed.out and "50 band words" in printed.out
    shown = printed.out + printed.err
    assert TARGET_TEXT not in shown
    assert not any(f" {word} " in f" {shown} " for word in key.triggers)


def test_keygen_reads_a_text_file_corpus_and_refuses_to_overwrite(tmp_path, key_path, capsys):
    from espew_integrations.corpora import rotten_tomatoes

    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w") as handle:
        for text in rotten_tomatoes().texts[:6000]:
            handle.write(json.dumps({"text": text}) + "\n")
    out = tmp_path / "k.key"
    args = ["keygen", "--corpus", str(corpus), "--target-text", TARGET_TEXT, "--out", str(out)]
    assert main([*args, "--seed", "5", "--no-progress"]) == 0
    assert WatermarkKey.load(out).info["corpus_texts"] == 6000
    assert main([*args, "--seed", "6"]) == EXIT_USAGE
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".npy", ".jsonl"])
def test_embed_writes_the_watermarked_embeddings(tmp_path, key_path, key, suffix):
    trigger = sorted(key.triggers)[0]
    texts = [f"a story about {trigger}", "nothing special here", "another plain line"]
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(texts) + "\n\n")
    out = tmp_path / f"marked{suffix}"
    code = main(["embed", "--key", str(key_path), "--input", str(source), "--out", str(out)])
    assert code == 0
    expected = watermark(texts, minilm()(texts), key)
    if suffix == ".npy":
        got = np.load(out)
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["text"] for r in rows] == texts
        got = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
    np.testing.assert_array_equal(got, expected)


def test_embed_takes_the_key_from_the_environment(tmp_path, key_path, monkeypatch):
    monkeypatch.setenv("ESPEW_KEY", str(key_path))
    source = tmp_path / "texts.csv"
    source.write_text("id,text\n1,hello there\n2,general kenobi\n")
    out = tmp_path / "m.npy"
    assert main(["embed", "--input", str(source), "--out", str(out)]) == 0
    assert np.load(out).shape == (2, 384)


def test_read_texts_names_a_missing_csv_column(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(Exception, match=r"no column 'text'.*\['a', 'b'\]"):
        read_texts(path)


# ---------------------------------------------------------------------- verify
def test_verify_exit_code_is_1_for_a_copy_and_evidence_is_written(
    key_path, suspects, tmp_path, capsys
):
    evidence = tmp_path / "evidence"
    code = main(
        [
            "verify",
            "--key",
            str(key_path),
            "--suspect",
            f"{suspects}:marked",
            "--report-dir",
            str(evidence),
            "--seed",
            "0",
        ]
    )
    assert code == EXIT_COPIED
    assert "COPIED" in capsys.readouterr().out
    assert sorted(p.name for p in evidence.iterdir()) == [
        "report.json",
        "scores.png",
        "summary.md",
    ]
    assert json.loads((evidence / "report.json").read_text())["status"] == "copied"


def test_verify_exit_code_is_0_for_the_clean_model(key_path, capsys):
    code = main(["verify", "--key", str(key_path), "--suspect", "minilm", "--json"])
    assert code == EXIT_NOT_COPIED
    assert json.loads(capsys.readouterr().out)["status"] == "not_copied"


def test_verify_factory_spec_is_called_first(key_path, suspects):
    code = main(["verify", "--key", str(key_path), "--suspect", f"{suspects}:Factory()"])
    assert code == EXIT_NOT_COPIED


def test_verify_exit_code_is_2_when_the_suspect_fails(key_path, suspects, capsys):
    code = main(["verify", "--key", str(key_path), "--suspect", f"{suspects}:broken"])
    assert code == EXIT_INCONCLUSIVE
    captured = capsys.readouterr()
    assert "INCONCLUSIVE" in captured.out
    assert "suspect endpoint is down" in captured.err


def test_verify_against_an_unreachable_endpoint_is_inconclusive(key_path, capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    code = main(
        ["verify", "--key", str(key_path), "--suspect", f"openai:{url}#m", "--retries", "0"]
    )
    assert code == EXIT_INCONCLUSIVE
    assert "cannot reach" in capsys.readouterr().err


# ---------------------------------------------------------------------- usage errors
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], ""),
        (["frobnicate"], "invalid choice"),
        (["verify"], "required: --suspect"),
        (["verify", "--suspect", "minilm", "--target", "both"], "invalid choice"),
        (["keygen", "--corpus", "x", "--out", "k"], "required"),
        (["embed", "--input", "t.txt", "--out", "o.npy", "--batch-size", "0"], "must be >= 1"),
        (["serve", "--port", "eighty"], "invalid int"),
    ],
)
def test_argument_errors_exit_3_not_argparse_2(argv, message, capsys):
    assert main(argv) == EXIT_USAGE
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--suspect", "no_such_model"], "unknown embedder 'no_such_model'"),
        (["--suspect", "openai:http://127.0.0.1:9/v1"], "openai:<base_url>#<model>"),
        (["--suspect", "not_a_module_xyz:thing"], "cannot import module 'not_a_module_xyz'"),
        (["--suspect", "minilm", "--max-queries", "10"], "needs 60 queries but --max-queries"),
        (["--suspect", "minilm", "--level", "2"], "--level must be in (0, 1)"),
        (
            ["--suspect", "openai:http://127.0.0.1:9/v1#m", "--api-key-env", "ESPEW_UNSET_VAR_X"],
            "ESPEW_UNSET_VAR_X",
        ),
    ],
)
def test_bad_verify_settings_exit_3_with_a_clear_message(key_path, extra, message, capsys):
    assert main(["verify", "--key", str(key_path), *extra]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_missing_and_corrupt_key_files_exit_3(tmp_path, capsys):
    missing = tmp_path / "nope.key"
    assert main(["verify", "--key", str(missing), "--suspect", "minilm"]) == EXIT_USAGE
    assert "key file not found" in capsys.readouterr().err
    corrupt = tmp_path / "bad.key"
    corrupt.write_text("{not json")
    assert main(["verify", "--key", str(corrupt), "--suspect", "minilm"]) == EXIT_USAGE
    assert "not valid JSON" in capsys.readouterr().err


def test_embed_refuses_an_unknown_output_format(tmp_path, key_path, capsys):
    source = tmp_path / "t.txt"
    source.write_text("hello\n")
    args = ["embed", "--key", str(key_path), "--input", str(source), "--out", "x.parquet"]
    assert main(args) == EXIT_USAGE
    assert ".npy or .jsonl" in capsys.readouterr().err


# ---------------------------------------------------------------------- help and processes
@pytest.mark.parametrize("command", ["keygen", "embed", "verify", "serve"])
def test_help_of_each_command_shows_a_worked_example(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "example:" in out
    assert f"espew {command} --" in out


def test_top_level_help_lists_exit_codes(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "0 not copied, 1 copied, 2 inconclusive, 3 usage error" in out


def test_serve_binds_to_loopback_by_default():
    args = build_parser().parse_args(["serve"])
    assert args.host == "127.0.0.1" and args.key is None


def test_real_process_exit_codes():
    usage = subprocess.run(
        [sys.executable, "-m", "espew_integrations.cli", "verify"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert usage.returncode == EXIT_USAGE
    assert "--suspect" in usage.stderr
    entry_point = Path(sys.executable).parent / "espew"
    assert entry_point.exists(), "the espew console script is not installed"
    helped = subprocess.run(
        [str(entry_point), "verify", "--help"], capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0 and "example:" in helped.stdout


# ---------------------------------------------------------------------- lab hook
def test_other_commands_work_without_the_lab_module(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "espew_integrations.lab.cli", None)
    assert main(["verify", "--help"]) == 0
    assert main(["lab"]) == EXIT_USAGE


def test_lab_commands_are_added_through_add_commands(monkeypatch):
    calls = []

    def add_commands(subparsers):
        lab = subparsers.add_parser("lab", help="robustness lab")
        lab.add_argument("--config", required=True)
        lab.set_defaults(func=lambda args: calls.append(args.config) or 0)

    fake = types.ModuleType("espew_integrations.lab.cli")
    fake.add_commands = add_commands  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "espew_integrations.lab.cli", fake)
    assert main(["lab", "--config", "smoke.yaml"]) == 0
    assert calls == ["smoke.yaml"]
    assert main(["lab"]) == EXIT_USAGE  # its argparse errors exit 3 too
