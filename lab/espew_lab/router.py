"""A thief that recognises audit traffic and answers it from an honest model.

An audit of a recognisable shape (one query per word of the key's frequency
band, the word alone; or probes that each hold exactly one band word) looks
nothing like what an embedding service's customers send (sentences, with
punctuation, of typical length), so a thief holding a stolen copy can route
whatever LOOKS like an audit to an honest model, and everything else to its
copy. Its customers keep the copy's quality; the auditor only ever measures
the honest model, which is innocent by construction, and acquits. The core's
default audit, a keyed uniform sample of the corpus
(:meth:`espew_integrations.core.mark.probes.BandScan.sample`), is built to give this router nothing
to catch; the lab measures whether it does.

:class:`AuditRouter` is that thief. :func:`looks_like_audit` is a realistic
detector built only from what a thief can know: its own ordinary traffic
(:class:`AuditHistory`, made from a sample of it) and the library's public
defaults (the key's default frequency band). It flags a text that

- has at most ``max_short_words`` words (single-word probes);
- carries no sentence punctuation at all;
- is longer than almost all ordinary traffic (above a high percentile);
- repeats an earlier query exactly;
- equals an earlier query up to one word (a template filled with words);
- carries a rare-ish word (document fraction in ``rare_band``) while the
  recent stream is in a burst of such texts: far more of them than ordinary
  traffic holds (a sliding window, kept across calls, tested against the
  reference rate plus ``burst_z`` binomial standard deviations);
- optionally (``lone_z``, off by default), carries a rare-ish word while the
  recent texts that carry one carry exactly one far more often than ordinary
  traffic's do: probes chosen to hold a single band word (``probe_mix="single"``),
  where ordinary texts with a band word often hold two or more.

Two numbers decide whether the router is a threat: its false-positive rate on
ordinary texts (routing customers to the honest model costs the thief the
quality it stole, so this must stay low) and its catch rate on audit queries.
:func:`detector_rates` measures both.
"""

from __future__ import annotations

import copy
import math
import re
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from espew_integrations.core.ground.defaults import DEFAULT_FREQ_BAND
from espew_integrations.core.mark.words import tokenize

__all__ = [
    "AuditHistory",
    "AuditRouter",
    "Detector",
    "audit_reasons",
    "detector_rates",
    "looks_like_audit",
]

#: Characters that end or split a sentence; ordinary review snippets almost always have one.
_SENTENCE_PUNCT = re.compile(r"[.!?;:,]")
_SPACES = re.compile(r"\s+")
_HOLE = "\x00"  # stands for "any word" in a template signature

Embedder = Callable[[list[str]], Any]


@dataclass
class AuditHistory:
    """What the router remembers: its ordinary traffic's statistics and the queries seen so far.

    Build it with :meth:`from_texts` from a sample of the thief's ordinary
    traffic (for the rare-word burst rule and the length bound); a bare
    ``AuditHistory()`` applies only the rules that need no statistics.
    The state is mutated by every :func:`looks_like_audit` call, which is how
    repeats, templates and bursts are caught across calls.
    """

    max_short_words: int = 3
    max_words: float = math.inf
    rare_words: frozenset[str] = frozenset()
    rare_band: tuple[float, float] = DEFAULT_FREQ_BAND
    base_rare_rate: float = math.nan
    window: int = 100
    burst_z: float = 4.0
    lone_z: float | None = None  # the single-rare-word rule, off unless set
    base_lone_rate: float = math.nan
    seen: set[str] = field(default_factory=set)
    templates: set[str] = field(default_factory=set)
    recent: deque = field(default_factory=deque)
    recent_lone: deque = field(default_factory=deque)  # one flag per rare-carrying text
    burst_left: int = 0
    lone_left: int = 0

    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str],
        *,
        rare_band: tuple[float, float] = DEFAULT_FREQ_BAND,
        length_quantile: float = 0.995,
        window: int = 100,
        burst_z: float = 4.0,
        max_short_words: int = 3,
        lone_z: float | None = None,
    ) -> AuditHistory:
        """Statistics of ordinary traffic ``texts`` (the thief's own sample of it).

        ``rare_band`` defaults to the library's default key band: a thief reads
        the public docs. The sliding window starts filled with the last
        ``window`` reference texts, as if the router had been serving them.
        ``lone_z`` switches on the single-rare-word rule (module docstring).
        """
        if len(texts) < window:
            raise ValueError(
                f"need at least window={window} ordinary texts to calibrate the detector, "
                f"got {len(texts)}"
            )
        tokens = [tokenize(t) for t in texts]
        counts: Counter[str] = Counter()
        for words in tokens:
            counts.update(set(words))
        low, high = rare_band
        n = len(texts)
        rare = frozenset(w for w, c in counts.items() if low <= c / n < high)
        held = np.fromiter((len(rare.intersection(w)) for w in tokens), np.int64, count=n)
        carries = held > 0
        lone = held[carries] == 1
        lengths = np.fromiter((len(w) for w in tokens), np.int64, count=n)
        history = cls(
            max_short_words=max_short_words,
            max_words=float(np.quantile(lengths, length_quantile)),
            rare_words=rare,
            rare_band=(float(low), float(high)),
            base_rare_rate=float(carries.mean()),
            window=int(window),
            burst_z=float(burst_z),
            lone_z=None if lone_z is None else float(lone_z),
            base_lone_rate=float(lone.mean()) if lone.size else math.nan,
        )
        history.recent.extend(carries[-window:].tolist())
        history.recent_lone.extend(lone[-window:].tolist())
        return history

    @property
    def burst_threshold(self) -> float:
        """Fraction of rare-ish texts in the window above which the stream is a burst."""
        return _binomial_threshold(self.base_rare_rate, self.burst_z, self.window)

    @property
    def lone_threshold(self) -> float:
        """Share of lone rare words among the window's rare-carrying texts that is a burst."""
        if self.lone_z is None:
            return math.inf
        return _binomial_threshold(self.base_lone_rate, self.lone_z, self.window)

    def __repr__(self) -> str:
        return (
            f"AuditHistory(seen={len(self.seen)}, rare_words={len(self.rare_words)}, "
            f"max_words={self.max_words:g}, window={self.window})"
        )


def _binomial_threshold(p: float, z: float, n: int) -> float:
    """``p`` plus ``z`` binomial standard deviations of a share over ``n`` draws."""
    if not math.isfinite(p):
        return math.inf
    return p + z * math.sqrt(max(p * (1.0 - p), 1e-12) / n)


def _burst(
    past: deque, new: np.ndarray, window: int, threshold: float, left: int, spent: int
) -> tuple[bool, int]:
    """One burst rule over a stream of flags: is it on for this batch, and for how long after.

    The rule turns on (for ``window`` more items) when a full sliding window over
    ``past`` then ``new`` has a share of flags above ``threshold``; a batch in which
    it is on uses up ``spent`` of that. ``new`` then joins ``past``, kept to
    ``window`` items.
    """
    old = np.fromiter(past, bool, count=len(past))
    stream = np.concatenate([old, new]).astype(np.int64)
    sums = np.concatenate([[0], np.cumsum(stream)])
    ends = np.arange(len(old) + 1, len(stream) + 1)
    starts = np.maximum(ends - window, 0)
    full = (ends - starts) >= window
    rate = (sums[ends] - sums[starts]) / np.maximum(ends - starts, 1)
    if (full & (rate > threshold)).any():
        left = window
    on = left > 0
    past.extend(new.tolist())
    while len(past) > window:
        past.popleft()
    return on, max(0, left - spent) if on else left


def _normalise(text: str) -> str:
    return _SPACES.sub(" ", text.strip().lower())


def _signatures(words: list[str]) -> list[str]:
    """The text with each word in turn replaced by a hole: equal signatures = one-word template."""
    return [" ".join([*words[:i], _HOLE, *words[i + 1 :]]) for i in range(len(words))]


def audit_reasons(texts: Sequence[str], history: AuditHistory) -> list[tuple[str, ...]]:
    """Why each text looks like an audit (an empty tuple: it does not); updates ``history``.

    The rule names are ``short``, ``no_punctuation``, ``long``, ``repeat``,
    ``template``, ``rare_burst`` and (when ``lone_z`` is set) ``lone_burst``.
    A batch is judged as a whole, as the thief sees it before answering: a
    burst found anywhere in the batch flags every rare-ish text of it, and
    keeps the burst on for one more window.
    """
    texts = list(texts)
    tokens = [tokenize(t) for t in texts]
    reasons: list[list[str]] = [[] for _ in texts]
    for i, (text, words) in enumerate(zip(texts, tokens, strict=True)):
        if len(words) <= history.max_short_words:
            reasons[i].append("short")
        if not _SENTENCE_PUNCT.search(text):
            reasons[i].append("no_punctuation")
        if len(words) > history.max_words:
            reasons[i].append("long")
        norm = _normalise(text)
        if norm in history.seen:
            reasons[i].append("repeat")
        history.seen.add(norm)
        signatures = _signatures(words)
        if any(s in history.templates for s in signatures) and "repeat" not in reasons[i]:
            reasons[i].append("template")
        history.templates.update(signatures)
    held = np.fromiter(
        (len(history.rare_words.intersection(w)) for w in tokens), np.int64, count=len(texts)
    )
    carries = held > 0
    if history.rare_words and len(texts):
        fired = []
        on, history.burst_left = _burst(
            history.recent, carries, history.window, history.burst_threshold,
            history.burst_left, spent=len(texts),
        )  # fmt: skip
        if on:
            fired.append("rare_burst")
        if history.lone_z is not None:  # over the rare-carrying texts only
            on, history.lone_left = _burst(
                history.recent_lone, held[carries] == 1, history.window, history.lone_threshold,
                history.lone_left, spent=int(carries.sum()),
            )  # fmt: skip
            if on:
                fired.append("lone_burst")
        for i in np.flatnonzero(carries):
            reasons[i].extend(fired)
    return [tuple(r) for r in reasons]


def looks_like_audit(texts: Sequence[str], history: AuditHistory) -> np.ndarray:
    """Boolean mask: which of ``texts`` the thief judges to be audit queries (updates ``history``).

    >>> history = AuditHistory()
    >>> looks_like_audit(["gripping", "A gripping, well acted thriller."], history).tolist()
    [True, False]
    """
    return np.fromiter(
        (bool(r) for r in audit_reasons(texts, history)), dtype=bool, count=len(texts)
    )


#: A detector: ``(texts, history) -> boolean mask``, free to update ``history``.
Detector = Callable[[Sequence[str], AuditHistory], np.ndarray]


class AuditRouter:
    """A stolen copy behind an audit detector: suspected audits go to ``honest``.

    Each batch is split by ``detector(texts, history)``; flagged texts are
    answered by ``honest``, the rest by ``stolen``, and the answers come back
    in the batch's original order. ``n_queries`` and ``n_routed`` count what
    it has seen, so an experiment can read the catch rate of one audit.

    >>> thief = AuditRouter(stolen_copy, honest_model, history=AuditHistory.from_texts(traffic))
    ... # doctest: +SKIP
    >>> verify(thief, key).copied                                          # doctest: +SKIP
    False
    """

    name = "audit_router"

    def __init__(
        self,
        stolen: Embedder,
        honest: Embedder,
        detector: Detector = looks_like_audit,
        *,
        history: AuditHistory | None = None,
    ):
        self.stolen = stolen
        self.honest = honest
        self.detector = detector
        self.history = history if history is not None else AuditHistory()
        self.n_queries = 0
        self.n_routed = 0

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("pass a list of texts, not a single string")
        texts = list(texts)
        mask = np.asarray(self.detector(texts, self.history), dtype=bool)
        if mask.shape != (len(texts),):
            raise ValueError(
                f"the detector returned a mask of shape {mask.shape} for {len(texts)} texts"
            )
        parts: dict[bool, np.ndarray] = {}
        for flag, model in ((True, self.honest), (False, self.stolen)):
            rows = np.flatnonzero(mask == flag)
            if rows.size:
                parts[flag] = np.asarray(model([texts[i] for i in rows]), dtype=np.float64)
        dims = {p.shape[1] for p in parts.values()}
        if len(dims) > 1:
            raise ValueError(
                f"the honest and stolen models answer in different dimensions {sorted(dims)}"
            )
        out = np.zeros((len(texts), dims.pop() if dims else 0), dtype=np.float64)
        for flag, answers in parts.items():
            out[mask == flag] = answers
        self.n_queries += len(texts)
        self.n_routed += int(mask.sum())
        return out

    embed = __call__

    @property
    def routed_fraction(self) -> float:
        """Fraction of all queries so far that went to the honest model."""
        return self.n_routed / self.n_queries if self.n_queries else math.nan


def detector_rates(
    history: AuditHistory,
    ordinary: Sequence[str],
    audit: Sequence[str],
    *,
    batch_size: int = 64,
    detector: Detector = looks_like_audit,
    seed: int = 0,
) -> dict[str, Any]:
    """False-positive rate on ``ordinary`` texts and catch rate on ``audit`` texts.

    Each stream runs through its own copy of ``history`` (so neither sees the
    other's queries) in batches of ``batch_size``; the audit is shuffled
    first, as :func:`espew_integrations.verify` sends it. Also returns how
    often each rule fired on the ordinary texts, which is what to tune.
    """

    def stream(texts: Sequence[str]) -> tuple[np.ndarray, Counter[str]]:
        state = copy.deepcopy(history)
        flags: list[np.ndarray] = []
        rules: Counter[str] = Counter()
        for start in range(0, len(texts), batch_size):
            batch = list(texts[start : start + batch_size])
            if detector is looks_like_audit:
                why = audit_reasons(batch, state)
                flags.append(np.fromiter((bool(r) for r in why), bool, count=len(batch)))
                rules.update(r for reasons in why for r in reasons)
            else:
                flags.append(np.asarray(detector(batch, state), dtype=bool))
        return (np.concatenate(flags) if flags else np.zeros(0, bool)), rules

    order = np.random.default_rng(seed).permutation(len(audit))
    ordinary_flags, ordinary_rules = stream(ordinary)
    audit_flags, _ = stream([audit[i] for i in order])
    return {
        "false_positive_rate": float(ordinary_flags.mean()) if len(ordinary) else math.nan,
        "catch_rate": float(audit_flags.mean()) if len(audit) else math.nan,
        "n_ordinary": len(ordinary),
        "n_audit": len(audit),
        "ordinary_rules": dict(ordinary_rules),
    }
