"""The published JSON Schemas (docs/schemas/) describe the real report.json and key files.

An arbiter validates the files handed over with any JSON Schema tool; these tests
validate reports written by the real ``verify`` (copied, not copied, inconclusive)
and real key files against them, keep the schemas' field lists equal to the code's
allow-list, and show that a changed file fails (issue 48).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from espew_integrations import WatermarkKey, verify
from espew_integrations.cli import main
from espew_integrations.cli.evidence import public_report_problem, report_schema
from espew_integrations.core.audit.evidence_files import (
    PUBLIC_P_KEYS,
    PUBLIC_REPORT_KEYS,
)
from espew_integrations.core.records.evidence import save_evidence
from espew_integrations.core.records.transcript import TRANSCRIPT_FILE
from tests.support import make_key

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schemas"
DIM = 32
KEY = make_key(DIM, n_band=80, n_triggers=10, seed=4)


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def suspect(pull: float):
    """Random embeddings, trigger words pulled toward the key's target by ``pull``."""
    triggers = set(KEY.triggers)
    axis = int(np.argmax(np.abs(KEY.target)))

    def embed(texts: list[str]) -> np.ndarray:
        rows = []
        for text in texts:
            rng = np.random.default_rng(int(hashlib.sha256(text.encode()).hexdigest()[:8], 16))
            row = rng.standard_normal(DIM)
            if text in triggers:
                row[axis] += np.sign(KEY.target[axis]) * pull * np.linalg.norm(row)
            rows.append(row)
        return np.asarray(rows)

    return embed


def down(texts: list[str]) -> np.ndarray:
    raise ConnectionError("endpoint down")


def test_the_package_ships_the_published_schemas_unchanged():
    for name in ("report.schema.json", "key.schema.json"):
        shipped = ROOT / "espew_integrations" / "schemas" / name
        assert shipped.read_bytes() == (SCHEMAS / name).read_bytes(), name
    assert report_schema() == json.loads((SCHEMAS / "report.schema.json").read_text())


def test_the_report_schema_lists_exactly_the_published_fields():
    properties = set(report_schema()["properties"])
    published = {*PUBLIC_REPORT_KEYS, *PUBLIC_P_KEYS, "public_p_floor"}
    published |= {f"{name}_below_floor" for name in PUBLIC_P_KEYS}
    assert properties == published
    assert report_schema()["additionalProperties"] is False


@pytest.mark.parametrize(
    ("embed", "status"),
    [(suspect(3.0), "copied"), (suspect(0.0), "not_copied"), (down, "inconclusive")],
)
def test_real_reports_follow_the_report_schema(embed, status, tmp_path):
    report = verify(embed, KEY, seed=0)
    assert report.status == status
    report.save(tmp_path, force=True)
    data = json.loads((tmp_path / "report.json").read_text())  # NaN allowed: no test ran
    errors = list(validator("report.schema.json").iter_errors(data))
    assert not errors, [e.message for e in errors]
    assert public_report_problem(tmp_path) is None


def test_a_changed_report_breaks_the_schema(tmp_path):
    save_evidence(verify(suspect(3.0), KEY, seed=0), tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    check = validator("report.schema.json")
    for changed in (
        {**data, "trigger_scores": [0.9, 0.8]},  # a withheld field
        {**data, "status": "guilty"},
        {**data, "key_id": "not-a-key-id"},
        {k: v for k, v in data.items() if k != "p_value"},
    ):
        assert list(check.iter_errors(changed)), changed.keys()
    (tmp_path / "report.json").write_text(json.dumps({**data, "trigger_scores": [0.9]}))
    assert "report.json at (the report): Additional properties" in public_report_problem(tmp_path)


def test_key_files_follow_the_key_schema(tmp_path):
    check = validator("key.schema.json")
    saved = json.loads(KEY.save(tmp_path / "provider.key").read_text())
    whole = json.loads(KEY.to_json())  # one document, the audit inside ($ESPEW_KEY)
    older = json.loads((ROOT / "tests" / "fixtures" / "key-v2-single-file.json").read_text())
    for document in (saved, whole, older):
        errors = list(check.iter_errors(document))
        assert not errors, [e.message for e in errors]
    assert WatermarkKey.load(tmp_path / "provider.key").key_id == saved["key_id"]
    for changed in ({**saved, "format": "pem"}, {**saved, "key_id": 7}, {**saved, "key": {}}):
        assert list(check.iter_errors(changed))


def test_evidence_check_refuses_a_public_report_that_breaks_the_schema(tmp_path, capsys):
    key_file = KEY.save(tmp_path / "provider.key")
    public, private = tmp_path / "public", tmp_path / "private"
    report = verify(suspect(3.0), KEY, seed=0, transcript=private)
    report.save(public)
    assert (private / TRANSCRIPT_FILE).is_file()
    check = ["evidence", "check", str(private), "--key", str(key_file), "--public", str(public)]
    assert main(check) == 0
    data = json.loads((public / "report.json").read_text())
    (public / "report.json").write_text(json.dumps({**data, "benign_scores": [0.1]}))
    assert main(check) == 1
    assert "does not follow the published schema" in capsys.readouterr().out
