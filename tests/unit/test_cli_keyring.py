"""``espew keyring`` and ``espew trace`` (issue 12): exit codes as ``verify``, files as keys."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

import numpy as np
import pytest

from espew_integrations import KeyRing, WatermarkKey
from espew_integrations.cli import main
from espew_integrations.cli.keyring import read_tenants
from tests.unit.test_keyring import make_ring


@pytest.fixture
def ring_file(tmp_path):
    ring = make_ring(n_band=200, n_shared=20, n_tenant=20)
    return ring, ring.save(tmp_path / "provider.ring")


def _suspect_module(tmp_path, monkeypatch, key, pull):
    """A Python suspect spec (module:attr) that embeds like a copy of ``key``'s service."""
    (tmp_path / "ring_copy.py").write_text(
        textwrap.dedent(
            f"""
            from espew_integrations import WatermarkKey
            from tests.unit.test_verify import WordSpace
            suspect = WordSpace(WatermarkKey.load({str(tmp_path / "served.key")!r}), pull={pull})
            """
        )
    )
    key.save(tmp_path / "served.key")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("ring_copy", None)
    return "ring_copy:suspect"


def test_keyring_key_writes_the_tenants_key(ring_file, tmp_path):
    ring, path = ring_file
    out = tmp_path / "c42.key"
    assert main(["keyring", "key", "--ring", str(path), "--tenant", "c42", "--out", str(out)]) == 0
    assert WatermarkKey.load(out) == ring.key_for("c42")
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    again = ["keyring", "key", "--ring", str(path), "--tenant", "c42", "--out", str(out)]
    assert main(again) == 3  # never overwrites silently


@pytest.mark.parametrize("guilty, code", [("acct-3", 1), (None, 0)])
def test_trace_exit_codes_and_evidence(ring_file, tmp_path, monkeypatch, capsys, guilty, code):
    ring, path = ring_file
    key = ring.key_for(guilty) if guilty else ring.shared_key
    spec = _suspect_module(tmp_path, monkeypatch, key, 1.0 if guilty else 0.0)
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({f"sk-{i}": f"acct-{i}" for i in range(10)}))
    argv = ["trace", "--ring", str(path), "--tenants", str(tenants), "--suspect", spec]
    argv += ["--seed", "0", "--no-progress", "--report-dir", str(tmp_path / "evidence")]
    assert main(argv) == code
    out = capsys.readouterr().out
    assert "sk-" not in out  # API keys are never printed
    shared = json.loads((tmp_path / "evidence" / "trace.json").read_text())
    assert shared["traced"] == ([guilty] if guilty else [])
    assert "tenant_p_values" not in shared  # only traced accounts in shareable evidence
    assert (tmp_path / "evidence" / "report.json").exists()


def test_trace_usage_errors_exit_3(ring_file, tmp_path):
    _, path = ring_file
    empty = tmp_path / "none.txt"
    empty.write_text("# nobody\n\n")
    base = ["trace", "--ring", str(path), "--suspect", "minilm", "--no-progress"]
    assert main([*base, "--tenants", str(empty)]) == 3
    assert main([*base, "--tenants", str(tmp_path / "missing.txt")]) == 3
    bad_ring = tmp_path / "bad.ring"
    bad_ring.write_text("{}")
    bad_ring.chmod(0o600)
    assert main(["trace", "--ring", str(bad_ring), "--tenants", str(empty), "--suspect", "x"]) == 3


def test_tenants_files_lines_lists_and_maps(tmp_path):
    lines = tmp_path / "t.txt"
    lines.write_text("# accounts\nalice\n\nbob\nalice\n")
    assert read_tenants(str(lines)) == ["alice", "bob"]
    as_list = tmp_path / "t.json"
    as_list.write_text('["carol", "dave"]')
    assert read_tenants(str(as_list)) == ["carol", "dave"]
    as_map = tmp_path / "m.json"
    as_map.write_text('{"sk-1": "erin", "sk-2": "erin", "sk-3": "frank"}')
    assert read_tenants(str(as_map)) == ["erin", "frank"]


def test_keyring_generate_on_a_tiny_embedder(tmp_path, monkeypatch):
    """The generate command end to end, with a fast deterministic embedder module."""
    (tmp_path / "tiny_model.py").write_text(
        textwrap.dedent(
            """
            import hashlib
            import numpy as np

            def embed(texts):
                rows = []
                for text in texts:
                    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
                    rows.append(np.random.default_rng(seed).normal(size=32))
                return np.array(rows)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [f"word{letters[i // 26]}{letters[i % 26]}" for i in range(300)]
    rng = np.random.default_rng(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(words, 8)) for _ in range(2000)))
    out = tmp_path / "r.ring"
    argv = ["keyring", "generate", "--corpus", str(corpus), "--embedder", "tiny_model:embed"]
    argv += ["--target-text", "zzz target", "--out", str(out), "--seed", "1", "--no-progress"]
    argv += ["--freq-band", "0.02", "0.04", "--n-shared-triggers", "5", "--n-tenant-triggers", "5"]
    argv += ["--marking", "words"]  # a word ring: its band and trigger layers
    assert main(argv) == 0, "keyring generate failed"
    ring = KeyRing.load(out)
    assert ring.n_shared_triggers == 5 and ring.n_tenant_triggers == 5
    assert ring.shared_key.info["mean_cosine_marked"] >= 0.995
    # The target text from a file (out of shell history) gives the same shared key.
    (tmp_path / "target.txt").write_text("zzz target\n", encoding="utf-8")
    from_file = tmp_path / "f.ring"
    argv_file = [a if a != "zzz target" else str(tmp_path / "target.txt") for a in argv]
    argv_file[argv_file.index("--target-text")] = "--target-text-file"
    argv_file[argv_file.index(str(out))] = str(from_file)
    assert main(argv_file) == 0, "keyring generate --target-text-file failed"
    assert KeyRing.load(from_file).shared_key.target_text == "zzz target"
    assert np.array_equal(KeyRing.load(from_file).shared_key.target, ring.shared_key.target)


def test_keyring_reaudit_from_one_accounts_traffic_then_trace(
    ring_file, tmp_path, monkeypatch, capsys
):
    """``keyring reaudit --corpus SAMPLE --account``: trace asks the copy about the texts that
    account sent, and still names the account whose layer the copy carries."""
    from espew_integrations.core.records.traffic_sample import TrafficSample

    ring, path = ring_file
    (tmp_path / "ring_clean_model.py").write_text(
        "from tests.fake_upstream import vectors\n\ndef embed(texts):\n"
        "    return vectors(texts, 64)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    words = sorted(ring.shared_key.band)
    sample = TrafficSample(tmp_path / "traffic.jsonl")
    sample.record([f"acct-3 asks {i} about {words[i % len(words)]}" for i in range(900)], "acct-3")
    sample.record([f"someone else on {w}" for w in words], "acct-4")
    sample.flush()
    out = tmp_path / "round-2.ring"
    argv = ["keyring", "reaudit", str(path), "--corpus", str(sample.path), "--text-column"]
    argv += ["text", "--account", "acct-3", "--embedder", "ring_clean_model:embed", "--round"]
    argv += ["2", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert "drawn from 900 texts" in capsys.readouterr().out
    moved = KeyRing.load(out)
    asked = {*moved.shared_key.probe_texts, *moved.shared_key.cover_texts} - set(words)
    assert asked and all(t.startswith("acct-3 asks") for t in asked)
    assert main(argv) == 3  # an existing ring is never overwritten silently
    spec = _suspect_module(tmp_path, monkeypatch, ring.key_for("acct-3"), 1.0)
    tenants = tmp_path / "tenants.txt"
    tenants.write_text("\n".join(f"acct-{i}" for i in range(10)))
    trace = ["trace", "--ring", str(out), "--tenants", str(tenants), "--suspect", spec]
    assert main([*trace, "--seed", "0", "--no-progress", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["traced"] == ["acct-3"]


def test_a_field_ring_from_the_command_line_traces_its_account(tmp_path, monkeypatch, capsys):
    """``keyring generate --marking field``, ``keyring key`` and ``trace`` on a field ring."""
    from tests.unit.test_field import CORPUS

    (tmp_path / "field_model.py").write_text(
        "from tests.unit.test_field import embed, innocent\n"
        "from espew_integrations import WatermarkKey, watermark\n"
        "def served(texts):\n"
        f"    key = WatermarkKey.load({str(tmp_path / 'acct-3.key')!r})\n"
        "    return watermark(texts, embed(texts), key)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("field_model", None)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS))
    out = tmp_path / "field.ring"
    argv = ["keyring", "generate", "--corpus", str(corpus), "--embedder", "field_model:embed"]
    argv += ["--target-text", "zzz target", "--out", str(out), "--seed", "1", "--no-progress"]
    argv += ["--marking", "field", "--field-units", "128"]
    argv += ["--n-shared-triggers", "16", "--n-tenant-triggers", "16"]
    assert main(argv) == 0, "keyring generate --marking field failed"
    assert "16 shared + 16 per-customer field units" in capsys.readouterr().out
    ring = KeyRing.load(out)
    assert ring.marking == "field" and len(ring.shared_key.band) == 128
    key = tmp_path / "acct-3.key"
    assert (
        main(["keyring", "key", "--ring", str(out), "--tenant", "acct-3", "--out", str(key)]) == 0
    )
    assert WatermarkKey.load(key) == ring.key_for("acct-3")
    tenants = tmp_path / "tenants.txt"
    tenants.write_text("\n".join(f"acct-{i}" for i in range(10)))
    trace = ["trace", "--ring", str(out), "--tenants", str(tenants), "--seed", "0"]
    trace += ["--no-progress", "--json", "--level", "1e-3"]
    capsys.readouterr()
    assert main([*trace, "--suspect", "field_model:served"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["traced"] == ["acct-3"] and report["marking"] == "field"
    assert main([*trace, "--suspect", "field_model:innocent"]) == 0
    assert json.loads(capsys.readouterr().out)["traced"] == []
