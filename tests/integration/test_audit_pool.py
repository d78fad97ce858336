"""Issue 54: a traffic audit's texts fixed before any answer, with the real model.

The cherry-picking auditor asks an innocent (the clean offline MiniLM) thousands of
texts, keeps those whose answers lean its way, and runs the round-2 audit on them
(``key.with_audit(picked, ..., audit_round=2)``). With this innocent (the clean model
itself) the twin check of ``with_audit`` already refuses the picked corpus; with the
twin check turned off the p-value falls far below the honest one, and ``espew
evidence check`` refuses the audit and says why (nothing ties
its corpus to a pool committed before the suspect was asked), unless told to take the
auditor's word. An honest round-2 audit of the same innocent, drawn by
:func:`with_committed_audit` from the pool the traffic sample committed as it
collected it, passes the check, which names the commitment record.
"""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import WatermarkKey, verify
from espew_integrations.cli import main
from espew_integrations.core.ground.errors import KeyGenerationError
from espew_integrations.core.records.traffic_commitments import commitments_path
from espew_integrations.core.records.traffic_sample import TrafficSample, with_committed_audit
from espew_integrations.core.records.transcript import TRANSCRIPT_FILE, read_transcript
from espew_integrations.evidence import check_evidence
from tests.support import RT_SUBSET_SIZE

ACCOUNT = "innocent-co"
#: Texts the innocent's account sent (the committed pool) and the auditor asked.
N_POOL, N_ASKED = 1500, 3000


@pytest.fixture(scope="module")
def traffic(rt_corpus, tmp_path_factory):
    """Reviews the keygen subset does not hold: the innocent's traffic, and more."""
    keygen = set(rt_corpus.subset(RT_SUBSET_SIZE, seed=0).texts)
    fresh = [text for text in rt_corpus.texts if text not in keygen]
    return tmp_path_factory.mktemp("pool"), fresh[:N_ASKED]


@pytest.fixture(scope="module")
def committed(traffic):
    """The traffic sample ``espew serve`` keeps, with the account's pool committed."""
    root, texts = traffic
    sample = TrafficSample(root / "traffic.jsonl")
    sample.record(texts[:N_POOL], account=ACCOUNT)
    sample.flush()
    return sample.path


def test_an_honest_round_2_audit_from_the_committed_pool_passes(committed, key, minilm_model):
    honest = with_committed_audit(key, committed, ACCOUNT, minilm_model, audit_round=2)
    assert honest.audit_round == 2 and honest.info["audit_pool"]["account"] == ACCOUNT
    private = committed.parent / "honest"
    report = verify(minilm_model, honest, transcript=private)
    assert report.status == "not_copied"
    header = read_transcript(private / TRANSCRIPT_FILE).header
    assert header["audit_pool"] == honest.info["audit_pool"]

    check = check_evidence(private, honest, pool_log=commitments_path(committed))
    assert check.holds, str(check)
    assert any(f"account {ACCOUNT!r}'s traffic pool, committed at" in p for p in check.proved)
    assert any("an anchor of its head" in line for line in check.not_proved)
    unlogged = check_evidence(private, honest)
    assert not unlogged.holds and "no commitment log was given" in unlogged.reason


def test_the_cherry_picking_auditor_is_refused(traffic, committed, key, minilm_model, capsys):
    root, texts = traffic
    answers = np.asarray(minilm_model(texts), dtype=np.float64)  # it asked the innocent
    lean = answers @ key.target / np.linalg.norm(answers, axis=1)
    triggered = key.contains_trigger(texts)
    # keep the texts with a trigger whose answers sit nearest the target, and the others
    # farthest from it: what an auditor that read the answers would keep
    keep = np.where(triggered, lean >= np.median(lean[triggered]), lean <= np.median(lean))
    picked = [text for text, kept in zip(texts, keep, strict=True) if kept]
    # the library's own path refuses: on the picked texts the clean model itself (this
    # innocent) ranks the triggers near the target, and the twin check sees it
    with pytest.raises(KeyGenerationError, match="the clean model itself ranks the triggers"):
        key.with_audit(picked, minilm_model, audit_round=2)
    # an auditor that turns the twin check off gets its audit...
    framed = key.with_audit(picked, minilm_model, audit_round=2, twin_level=1e-300)
    private = root / "picked"
    report = verify(minilm_model, framed, transcript=private)
    honest = verify(minilm_model, key.with_audit(texts[:N_POOL], minilm_model, audit_round=2))
    assert report.p_value < honest.p_value * 1e-3, (report.p_value, honest.p_value)
    print(f"picked: {report.status} p={report.p_value:.3g}; honest p={honest.p_value:.3g}")

    # ...and the arbiter refuses it
    check = check_evidence(private, framed, pool_log=commitments_path(committed))
    assert not check.holds and check.replayed_status == report.status
    assert "the audit's texts are not tied to a commitment" in check.reason
    assert "names no committed pool" in check.reason
    taken = check_evidence(private, framed, accept_auditor_pool=True)
    assert taken.holds
    assert any("taken on the auditor's word" in line for line in taken.not_proved)

    framed.save(root / "framed.key")
    argv = ["evidence", "check", str(private), "--key", str(root / "framed.key")]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "EVIDENCE DOES NOT HOLD: the audit's texts are not tied to a commitment" in out
    assert "--accept-auditor-pool" in out
    assert main([*argv, "--accept-auditor-pool"]) == 0
    assert "taken on the auditor's word" in capsys.readouterr().out


def test_key_reaudit_of_one_account_draws_from_its_committed_pool(
    committed, key, minilm_model, tmp_path, capsys
):
    """``espew key reaudit --account`` on a committed sample is the honest path: the key
    names the pool record, so ``evidence check --pool-log`` can tie the audit to it."""
    key.save(tmp_path / "k.key")
    out = tmp_path / "round2.key"
    argv = ["key", "reaudit", str(tmp_path / "k.key"), "--corpus", str(committed)]
    argv += ["--account", ACCOUNT, "--round", "2", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"drawn from account {ACCOUNT!r}'s pool committed at" in printed
    reaudited = WatermarkKey.load(out)
    direct = with_committed_audit(key, committed, ACCOUNT, minilm_model, audit_round=2)
    assert reaudited.info["audit_pool"] == direct.info["audit_pool"]
    assert reaudited.probe_texts == direct.probe_texts  # the same public draw
