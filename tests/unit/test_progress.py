"""``progress(done, total)`` of the library's long calls (issue 48): key generation, a new
audit, verify and trace report how far along they are, never going back, and end with
``done == total``."""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import WatermarkKey, verify
from espew_integrations.core.trace import trace_callable
from tests.support import make_key
from tests.unit.test_key import toy_embed, words_corpus
from tests.unit.test_keyring import make_ring


class Recorder:
    """A progress callback that keeps every (done, total) it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))

    def assert_well_formed(self) -> tuple[int, int]:
        """Counts never decrease, done never passes total; returns the last call."""
        assert self.calls, "progress was never called"
        done = [d for d, _ in self.calls]
        assert done == sorted(done) and done[0] > 0
        assert all(0 < d <= t for d, t in self.calls)
        last = self.calls[-1]
        assert last[0] == last[1], last  # the work is done: the total is exact
        return last


def counted(embed):
    """``embed`` and the number of texts it was asked, for comparing with the reports."""
    seen = [0]

    def wrapped(texts):
        seen[0] += len(texts)
        return embed(texts)

    return wrapped, seen


KEYGEN = dict(
    target_text="Acme target", seed=1, marking="words", n_triggers=10, freq_band=(0.005, 0.02)
)


def test_keygen_reports_every_text_it_embeds_ending_at_the_true_total():
    texts, _ = words_corpus()
    progress = Recorder()
    embed, seen = counted(toy_embed)
    key = WatermarkKey.generate(texts, embed, progress=progress, twin_check=False, **KEYGEN)
    assert progress.assert_well_formed() == (seen[0], seen[0])
    assert len(progress.calls) > 3  # one call per embedding step, not one at the end
    again = WatermarkKey.generate(texts, toy_embed, twin_check=False, **KEYGEN)
    assert again.triggers == key.triggers and again.salt == key.salt  # progress changes nothing


def test_a_new_audit_reports_its_texts_too():
    texts, _ = words_corpus()
    key = WatermarkKey.generate(texts, toy_embed, twin_check=False, **KEYGEN)
    progress = Recorder()
    embed, seen = counted(toy_embed)
    key.with_audit(texts, embed, audit_round=2, twin_level=1e-12, progress=progress)
    assert progress.assert_well_formed() == (seen[0], seen[0])


def test_verify_reports_the_texts_asked_against_the_audits_total():
    key = make_key(16, n_band=60, n_triggers=10)

    def suspect(texts):
        return np.random.default_rng(len(texts)).normal(size=(len(texts), 16))

    progress = Recorder()
    report = verify(suspect, key, batch_size=8, seed=0, progress=progress)
    _, total = progress.assert_well_formed()
    assert total == report.n_queries == 60
    assert [d for d, _ in progress.calls] == [*range(8, 60, 8), 60]  # after each batch


def test_trace_reports_like_verify():
    ring = make_ring()

    def suspect(texts):
        return np.random.default_rng(len(texts)).normal(size=(len(texts), ring.shared_key.dim))

    progress = Recorder()
    trace_callable(suspect, ring, ["alice"], batch_size=16, seed=0, progress=progress)
    _, total = progress.assert_well_formed()
    assert total == ring.shared_key.audit_queries


@pytest.mark.parametrize("call", ["generate", "verify"])
def test_a_progress_that_is_not_callable_is_refused_before_any_work(call):
    embed, seen = counted(toy_embed)
    with pytest.raises(TypeError, match=r"progress must be a callable progress\(done, total\)"):
        if call == "generate":
            WatermarkKey.generate(words_corpus()[0], embed, progress=5, **KEYGEN)
        else:
            verify(embed, make_key(32), progress="bar")
    assert seen[0] == 0


def test_a_field_key_reports_its_keygen_and_its_new_audit():
    from tests.unit.test_field import CORPUS
    from tests.unit.test_field import embed as field_embed

    progress = Recorder()
    embed, seen = counted(field_embed)
    options = dict(target_text="acme licensed vectors", seed=3, marking="field", audit_budget=800)
    key = WatermarkKey.generate(CORPUS, embed, progress=progress, **options)
    assert progress.assert_well_formed() == (seen[0], seen[0])
    again = WatermarkKey.generate(CORPUS, field_embed, **options)  # progress changes nothing
    assert (again.triggers, again.salt, again.probe_texts) == (
        key.triggers,
        key.salt,
        key.probe_texts,
    )
    assert np.array_equal(again.design.field.q, key.design.field.q)
    progress, (embed, seen) = Recorder(), counted(field_embed)
    round_two = key.with_audit(CORPUS[:1200], embed, audit_round=2, progress=progress)
    assert progress.assert_well_formed() == (seen[0], seen[0])
    assert len(round_two.probe_texts) == 800
