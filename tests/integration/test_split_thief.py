"""Issue 54, accounts a thief cannot split: an audit pooled over accounts convicts a copy
whose traffic no single account's audit convicts, and stays exact for innocents.

The default key design (field) on the real offline MiniLM, the corpus's MiniLM and
MiniLM-L3 rows from the on-disk cache; a thief (a ridge head on MiniLM-L3, espew_lab's
``EncoderRidgeStealer``) trained on the service's answers to texts it sent from
``ACCOUNTS`` accounts of ``PER_ACCOUNT`` texts, kept in a real traffic sample file
(``TrafficSample``, as ``espew serve --traffic-sample`` keeps it). Each account's
round-2 audit (``espew key reaudit --account ID``), the pooled one (``--account``
repeated), and the Bonferroni p of the family; the same audits of the clean model.
The full-scale run (30 accounts of 200) is benchmarks/bench_split_thief.py.
"""

from __future__ import annotations

import pytest

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.ground.defaults import DEFAULT_LEVEL
from espew_integrations.core.records.traffic_sample import TrafficSample, read_traffic_texts
from espew_integrations.core.stats.ranktest import bonferroni_p_value
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm, paraphrase_minilm_l3
from espew_lab.cache import cached_embed
from espew_lab.stealers import EncoderRidgeStealer
from tests.support import TARGET_TEXT, Cached

KEYGEN_TEXTS = 3000
ACCOUNTS = 6
PER_ACCOUNT = 200


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """(the key, the clean model, the thief's copy, each account's sampled texts, the
    sample file)."""
    texts = list(rotten_tomatoes().texts)
    victim_model, open_model = minilm(), paraphrase_minilm_l3()
    victim = Cached(
        victim_model, texts, cached_embed(victim_model, texts, model_name=victim_model.name)
    )
    opened = Cached(open_model, texts, cached_embed(open_model, texts, model_name=open_model.name))
    key = WatermarkKey.generate(  # the default design: no marking named
        texts[:KEYGEN_TEXTS], victim, target_text=TARGET_TEXT, seed=1,
        window=victim_model.max_tokens,
    )  # fmt: skip
    stolen = texts[KEYGEN_TEXTS : KEYGEN_TEXTS + ACCOUNTS * PER_ACCOUNT]  # not the audit's
    copy = EncoderRidgeStealer(opened).fit(stolen, watermark(stolen, victim(stolen), key))
    sample = TrafficSample(tmp_path_factory.mktemp("split") / "traffic.jsonl")
    names = [f"acct-{number}" for number in range(ACCOUNTS)]
    for number, name in enumerate(names):
        sample.record(stolen[number * PER_ACCOUNT : (number + 1) * PER_ACCOUNT], account=name)
    sample.flush()
    accounts = {name: read_traffic_texts(sample.path, account=name) for name in names}
    return key, victim, copy, accounts, sample.path


def audit_p(key, texts, clean, suspect) -> float:
    """The round-2 audit drawn from all of ``texts`` (``key reaudit``'s draw), verified."""
    audit = key.with_audit(texts, clean, audit_round=2, audit_budget=len(texts))
    return verify(suspect, audit, seed=1).p_value


@pytest.fixture(scope="module")
def found(split):
    key, victim, copy, accounts, path = split
    pooled = read_traffic_texts(path, account=list(accounts))
    assert len(pooled) == ACCOUNTS * PER_ACCOUNT
    out = {}
    for name, suspect in (("thief", copy), ("clean", victim)):
        per_account = [audit_p(key, texts, victim, suspect) for texts in accounts.values()]
        out[name] = (audit_p(key, pooled, victim, suspect), per_account)
    return out


def test_the_pooled_audit_convicts_the_split_thief_far_below_any_one_account(found):
    pooled, per_account = found["thief"]
    assert pooled < DEFAULT_LEVEL, pooled
    assert pooled < min(per_account) / 100, (pooled, per_account)
    family = bonferroni_p_value([*per_account, pooled])
    assert family < DEFAULT_LEVEL, family  # the family's price still leaves a conviction


def test_the_clean_model_is_acquitted_pooled_per_account_and_as_a_family(found):
    pooled, per_account = found["clean"]
    assert pooled >= DEFAULT_LEVEL and min(per_account) >= DEFAULT_LEVEL
    assert bonferroni_p_value([*per_account, pooled]) > 1e-2, (pooled, per_account)
