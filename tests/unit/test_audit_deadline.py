"""The audit's clocks (issues 36 and 48): a suspect that answers and then stalls ends the
audit inconclusive, saying how many texts were answered, whatever its calls do. By default
the stall guard does it (no answer for ``stall_timeout`` seconds), so a slow suspect that
keeps answering is never cut; a total ``deadline`` applies only when one is set."""

from __future__ import annotations

import contextvars
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import verify
from espew_integrations.cli import main
from espew_integrations.cli.common import EXIT_INCONCLUSIVE, EXIT_USAGE
from espew_integrations.core.ground.defaults import DEFAULT_DEADLINE, DEFAULT_STALL_TIMEOUT
from espew_integrations.core.trace import trace_callable
from tests.support import make_key
from tests.unit.test_keyring import make_ring

ROOT = Path(__file__).resolve().parents[2]
N_BAND = 60
BATCH = 8


class Stalling:
    """Answers its first ``answered`` calls with random rows, then never returns again
    (or, with ``pause``, answers each later call only after ``pause`` seconds)."""

    def __init__(self, dim: int, answered: int = 1, pause: float | None = None) -> None:
        self.dim = dim
        self.answered = answered
        self.pause = pause
        self.calls = 0
        self.release = threading.Event()  # lets the tests end the stuck threads

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if self.calls > self.answered:
            self.release.wait(self.pause)
        return np.random.default_rng(self.calls).normal(size=(len(texts), self.dim))


@pytest.fixture
def key():
    return make_key(16, n_band=N_BAND, n_triggers=10)


@pytest.fixture
def stalling(key):
    suspect = Stalling(key.dim)
    yield suspect
    suspect.release.set()


def test_a_suspect_that_stalls_after_one_batch_ends_the_audit_inconclusive(key, stalling):
    report = verify(stalling, key, batch_size=BATCH, seed=0, deadline=1)
    assert report.status == "inconclusive" and not report.copied
    assert report.reason.startswith("the audit's deadline of 1 s passed")
    assert f"{BATCH} of its {N_BAND} texts answered" in report.reason
    assert "--deadline" in report.next_step
    assert stalling.calls == 2  # nothing is sent after the stuck batch
    assert report.n_queries == 2 * BATCH and report.n_failed_queries == BATCH


def test_a_suspect_that_answers_too_slowly_ends_the_audit_inconclusive(key):
    slow = Stalling(key.dim, answered=1, pause=0.4)
    report = verify(slow, key, batch_size=BATCH, seed=0, deadline=1)
    assert report.status == "inconclusive"
    assert "deadline of 1 s passed" in report.reason
    assert slow.calls < N_BAND / BATCH  # stopped before the end of the audit


def test_a_suspect_that_never_answers_at_all_is_inconclusive_naming_the_deadline(key):
    silent = Stalling(key.dim, answered=0)
    try:
        report = verify(silent, key, batch_size=BATCH, seed=0, deadline=0.5)
    finally:
        silent.release.set()
    assert report.status == "inconclusive"
    assert f"0 of its {N_BAND} texts answered" in report.reason


def test_trace_ends_inconclusive_at_its_deadline_and_names_nobody(stalling):
    ring = make_ring()
    stalling.dim = ring.shared_key.dim
    report = trace_callable(stalling, ring, ["alice", "bob"], batch_size=BATCH, seed=0, deadline=1)
    assert report.status == "inconclusive" and report.traced == ()
    assert "deadline of 1 s passed" in report.shared.reason
    assert "deadline of 1 s passed" in report.reason


def test_an_audit_within_its_deadline_is_unchanged(key):
    calls = Stalling(key.dim, answered=10**6)
    bounded = verify(calls, key, batch_size=BATCH, seed=0, deadline=60)
    again = Stalling(key.dim, answered=10**6)
    unbounded = verify(again, key, batch_size=BATCH, seed=0, deadline=None)
    assert bounded.status == unbounded.status != "inconclusive"
    assert bounded.p_value == unbounded.p_value


def test_faults_of_a_suspect_run_in_a_worker_thread_are_still_missing_data(key):
    def broken(texts):
        raise ConnectionError("suspect endpoint is down")

    report = verify(broken, key, batch_size=BATCH, deadline=60)
    assert report.status == "inconclusive"
    assert report.reason.startswith("every query to the suspect failed")
    assert any("suspect endpoint is down" in e for e in report.errors)


def test_with_a_clock_the_suspect_sees_the_callers_context_and_without_one_its_thread(key):
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")
    marker.set("the auditor's")
    seen: list[tuple[int, str]] = []

    def recording(texts):
        seen.append((threading.get_ident(), marker.get()))
        return np.random.default_rng(len(seen)).normal(size=(len(texts), key.dim))

    verify(recording, key, batch_size=N_BAND, deadline=60)
    verify(recording, key, batch_size=N_BAND, deadline=None, stall_timeout=None)
    (bounded_thread, bounded_context), (own_thread, own_context) = seen
    assert bounded_context == own_context == "the auditor's"
    assert own_thread == threading.get_ident() != bounded_thread


@pytest.mark.parametrize("deadline", [0, -1.0, float("nan"), float("inf")])
def test_a_deadline_must_be_a_positive_finite_number_of_seconds(key, deadline):
    with pytest.raises(ValueError, match="deadline must be a positive number of seconds"):
        verify(Stalling(key.dim), key, deadline=deadline)


@pytest.mark.parametrize("deadline", ["5", True])
def test_a_deadline_that_is_not_a_number_is_refused(key, deadline):
    with pytest.raises(TypeError, match="deadline must be a number of seconds or None"):
        verify(Stalling(key.dim), key, deadline=deadline)


def test_by_default_no_total_deadline_and_a_stall_guard_within_five_minutes():
    assert DEFAULT_DEADLINE is None
    assert 0 < DEFAULT_STALL_TIMEOUT < 300  # the stalled-suspect guarantee: within 5 minutes


# ---------------------------------------------------------------------- the stall guard
def test_a_suspect_that_stalls_after_one_batch_ends_at_the_stall_guard(key, stalling):
    report = verify(stalling, key, batch_size=BATCH, seed=0, stall_timeout=1)
    assert report.status == "inconclusive" and not report.copied
    assert report.reason.startswith("the suspect sent no answer for 1 s (the audit's stall")
    assert f"{BATCH} of its {N_BAND} texts answered" in report.reason
    assert "--stall-timeout" in report.next_step
    assert stalling.calls == 2  # nothing is sent after the stuck batch


def test_a_slow_suspect_that_keeps_answering_is_never_cut_by_the_stall_guard(key):
    """Each answer restarts the guard: 8 answers 0.3 s apart take 2.4 s, more than twice
    the 1 s guard, and the audit still ends with a verdict, as without any clock."""
    slow = Stalling(key.dim, answered=0, pause=0.3)
    report = verify(slow, key, batch_size=BATCH, seed=0, stall_timeout=1)
    assert slow.calls == -(-N_BAND // BATCH) and report.status != "inconclusive"
    unclocked = verify(Stalling(key.dim, answered=0, pause=0.0), key, batch_size=BATCH, seed=0,
                       stall_timeout=None)  # fmt: skip
    assert report.p_value == unclocked.p_value


def test_the_deadline_still_ends_a_slow_audit_when_one_is_set(key):
    slow = Stalling(key.dim, answered=0, pause=0.3)
    report = verify(slow, key, batch_size=BATCH, seed=0, stall_timeout=1, deadline=1)
    assert "the audit's deadline of 1 s passed" in report.reason
    assert slow.calls < -(-N_BAND // BATCH)


@pytest.mark.parametrize("value", [0, -1.0, float("inf")])
def test_a_stall_guard_must_be_a_positive_finite_number_of_seconds(key, value):
    with pytest.raises(ValueError, match="stall_timeout must be a positive number of seconds"):
        verify(Stalling(key.dim), key, stall_timeout=value)


def test_a_stuck_suspect_call_does_not_keep_the_process_alive_at_exit():
    script = textwrap.dedent(
        """
        import threading
        import numpy as np
        from espew_integrations import verify
        from tests.support import make_key

        key = make_key(16, n_band=60, n_triggers=10)
        calls = []

        def suspect(texts):
            calls.append(1)
            if len(calls) > 1:
                threading.Event().wait()  # never returns
            return np.ones((len(texts), 16)) + np.arange(len(texts))[:, None]

        report = verify(suspect, key, batch_size=8, deadline=0.5)
        print(report.status)
        """
    )
    # The timeout only guards the test run against a hang; the assertion is the exit itself.
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "inconclusive"


# ---------------------------------------------------------------------- the command line
def _stalling_spec(tmp_path: Path, dim: int) -> str:
    path = tmp_path / "stalling_suspect.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import threading
            import numpy as np

            calls = []

            def suspect(texts):
                calls.append(len(texts))
                if len(calls) > 1:
                    threading.Event().wait()  # never returns
                return np.random.default_rng(len(calls)).normal(size=(len(texts), {dim}))
            """
        )
    )
    return f"{path}:suspect"


def test_espew_verify_stops_at_its_deadline_with_exit_code_2(key, tmp_path, capsys):
    key_path = key.save(tmp_path / "provider.key")
    spec = _stalling_spec(tmp_path, key.dim)
    argv = ["verify", "--key", str(key_path), "--suspect", spec, "--no-progress"]
    code = main([*argv, "--batch-size", str(BATCH), "--deadline", "1", "--json"])
    assert code == EXIT_INCONCLUSIVE
    assert "deadline of 1 s passed" in capsys.readouterr().out


def test_espew_trace_stops_at_its_deadline_with_exit_code_2(tmp_path, capsys):
    ring = make_ring()
    ring_path = ring.save(tmp_path / "provider.ring")
    tenants = tmp_path / "tenants.txt"
    tenants.write_text("alice\nbob\n")
    spec = _stalling_spec(tmp_path, ring.shared_key.dim)
    argv = ["trace", "--ring", str(ring_path), "--tenants", str(tenants), "--suspect", spec]
    code = main([*argv, "--no-progress", "--batch-size", str(BATCH), "--deadline", "1"])
    assert code == EXIT_INCONCLUSIVE
    assert "deadline of 1 s passed" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "-3", "inf", "soon"])
def test_espew_verify_refuses_a_deadline_that_is_not_positive_seconds(key, tmp_path, value):
    key_path = key.save(tmp_path / "provider.key")
    argv = ["verify", "--key", str(key_path), "--suspect", "minilm", "--deadline", value]
    assert main(argv) == EXIT_USAGE


def test_espew_verify_stops_at_its_stall_guard_with_exit_code_2(key, tmp_path, capsys):
    key_path = key.save(tmp_path / "provider.key")
    spec = _stalling_spec(tmp_path, key.dim)
    argv = ["verify", "--key", str(key_path), "--suspect", spec, "--no-progress"]
    code = main([*argv, "--batch-size", str(BATCH), "--stall-timeout", "1", "--json"])
    assert code == EXIT_INCONCLUSIVE
    assert "no answer for 1 s (the audit's stall guard)" in capsys.readouterr().out


def test_espew_verify_warns_at_the_start_when_the_audit_will_not_fit_its_deadline(
    key, tmp_path, capsys
):
    """0.25 s a batch, 8 batches: about 2 s, past a 1.5 s deadline; said after the first."""
    path = tmp_path / "slow_suspect.py"
    path.write_text(
        "import time\nimport numpy as np\n"
        "def suspect(texts):\n"
        "    time.sleep(0.25)\n"
        f"    return np.random.default_rng(len(texts)).normal(size=(len(texts), {key.dim}))\n"
    )
    key_path = key.save(tmp_path / "provider.key")
    argv = ["verify", "--key", str(key_path), "--suspect", f"{path}:suspect", "--no-progress"]
    assert main([*argv, "--batch-size", str(BATCH), "--deadline", "1.5"]) == EXIT_INCONCLUSIVE
    err = capsys.readouterr().err
    assert "past its --deadline of 1.5 s, so it will end inconclusive" in err
    assert err.count("warning: at this pace") == 1
