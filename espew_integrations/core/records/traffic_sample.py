"""A bounded, keyed sample of the texts a service answered, for audits drawn from traffic.

Why: a thief trains its copy on the texts it sent, not on the provider's keygen
corpus, and a copy is most faithful on its own training texts. The provider
knows what each account sent; an audit drawn from that (``espew key reaudit
--corpus SAMPLE.jsonl --account ID``) asks the suspect about the texts it
learned from.

The sample is a *bottom-k* sample per account: every distinct text gets a
priority, ``HMAC-SHA256(salt, account, text)``, and the lowest are kept, as many
as fit the account's caps (:mod:`.traffic_store` states the rule). Each
property below is a rule here:

- **Uniform and unsteerable.** The salt is random, secret and unrelated to
  the watermark key, so which of an account's distinct texts are kept is a
  uniform draw that no client can predict or steer, and that does not depend
  on the triggers or on which answers were marked. That is what keeps an
  audit drawn from it exact: for an innocent suspect, its texts are chosen
  without looking at the key.
- **One account's traffic never touches another's sample.** Each account has
  its own reservoir with its own caps; a server with no key ring derives the
  account from the client's credential (:meth:`TrafficSample.account_for`, a
  keyed hash: the credential is never stored), and requests without one share
  :data:`ANONYMOUS_ACCOUNT`.
- **What the model read, bounded.** A text is stored as far as the model
  reads it (cut at its ``window``) and at most ``max_text_bytes``; an account
  holds at most ``capacity`` texts and ``max_account_bytes``, the whole sample
  ``max_file_bytes``; files are read and written a line at a time. So no
  client input can make a flush, a merge or a re-audit fail or exhaust memory.
- **Mergeable.** The sample of a union is the sample of the parts' samples:
  forked workers and restarts merge into one file under a lock, and replicas
  with the same salt merge with :func:`merge_traffic_samples` (``espew
  traffic merge``) into exactly the sample one process would have kept.

The file is JSON Lines, one object per kept text (``text``, ``account`` when
there is one, ``priority``, ``last_seen``, and ``cutoff`` on an account's first
line once it refused a text), written atomically with mode 0600; the salt sits
beside it in ``<file>.salt`` (0600). It holds your customers' texts: treat it
like a log with their content in it (docs/key-management.md).
"""

from __future__ import annotations

import hmac
import os
import shutil
import threading
import time
from collections.abc import Sequence
from hashlib import sha256
from pathlib import Path
from typing import Any, NamedTuple

from ..audit.recorder import utc_now
from ..ground.defaults import (
    DEFAULT_SAMPLE_ACCOUNT_BYTES,
    DEFAULT_SAMPLE_FILE_BYTES,
    DEFAULT_SAMPLE_TEXT_BYTES,
)
from ..ground.errors import InputTypeError
from ..ground.text import window_prefix
from ..keys.keygen import corpus_digest
from .traffic_commitments import (
    CommitmentError,
    append_commitments,
    commitments_path,
    latest_pool,
    read_commitments,
)
from .traffic_store import (
    MAX_TEXT_BYTES_LIMIT,
    SampleState,
    TrafficSampleError,
    exclusive_lock,
    iter_records,
    load_or_create_salt,
    read_salt,
    salt_path,
    today,
    write_records,
)

__all__ = [
    "ANONYMOUS_ACCOUNT",
    "DEFAULT_SAMPLE_CAPACITY",
    "DEFAULT_SAMPLE_FLUSH_SECONDS",
    "DEFAULT_SAMPLE_RETENTION_DAYS",
    "MergedSample",
    "TrafficSample",
    "merge_traffic_samples",
    "read_traffic_texts",
    "stored_text",
    "traffic_account_id",
    "traffic_accounts",
    "with_committed_audit",
]

#: Texts kept per account: enough for several independent audit rounds of the
#: default audit size drawn from one account's traffic.
DEFAULT_SAMPLE_CAPACITY = 20_000
#: Texts not seen for this many days leave the sample at the next flush.
DEFAULT_SAMPLE_RETENTION_DAYS = 90
#: How often a serving process merges its sample into the file.
DEFAULT_SAMPLE_FLUSH_SECONDS = 60.0
#: The account of requests that carry no credential.
ANONYMOUS_ACCOUNT = "anonymous"
_ACCOUNT_DOMAIN = b"espew traffic account\x00"
_SECONDS_PER_DAY = 86_400


class TrafficSample:
    """Keep a keyed bottom-k sample of served texts per account; merge it into a file.

    ``record(texts, account)`` is cheap (one HMAC per text) and safe from any
    thread; ``flush()`` merges with whatever the file holds (other workers,
    earlier runs) under an exclusive lock and rewrites it. Serving code calls
    :meth:`flush_due` after each request and flushes when it says so, and
    :meth:`flush` once more on shutdown.

    ``window`` is the model's input window in tokens (``model.max_tokens``, or
    the key's ``window``): a text is stored only as far as the model reads it.
    ``max_text_bytes``, ``max_account_bytes`` and ``max_file_bytes`` bound a
    stored text, one account and the whole sample (file and memory) in bytes.

    >>> sample = TrafficSample("traffic.jsonl", window=256)  # doctest: +SKIP
    >>> sample.record(["a text a client sent"], account="acme")  # doctest: +SKIP
    >>> sample.flush()  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        capacity: int = DEFAULT_SAMPLE_CAPACITY,
        retention_days: float | None = DEFAULT_SAMPLE_RETENTION_DAYS,
        flush_seconds: float = DEFAULT_SAMPLE_FLUSH_SECONDS,
        window: int | None = None,
        max_text_bytes: int = DEFAULT_SAMPLE_TEXT_BYTES,
        max_account_bytes: int = DEFAULT_SAMPLE_ACCOUNT_BYTES,
        max_file_bytes: int = DEFAULT_SAMPLE_FILE_BYTES,
        clock: Any = time.time,
    ):
        _check_caps(capacity, max_text_bytes, max_account_bytes, max_file_bytes)
        if retention_days is not None and not retention_days > 0:
            raise TrafficSampleError(
                f"retention_days must be positive (or None: keep forever), got {retention_days!r}"
            )
        if not flush_seconds >= 0:
            raise TrafficSampleError(f"flush_seconds must be >= 0, got {flush_seconds!r}")
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 3
        ):
            raise TrafficSampleError(
                f"window must be the model's window in tokens (an int >= 3) or None, got {window!r}"
            )
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise TrafficSampleError(f"traffic sample {self.path} exists and is not a file")
        if not self.path.parent.is_dir():
            raise TrafficSampleError(f"traffic sample folder {self.path.parent} does not exist")
        self.capacity = capacity
        self.retention_days = retention_days
        self.flush_seconds = flush_seconds
        self.window = window
        self.max_text_bytes = max_text_bytes
        self.max_account_bytes = max_account_bytes
        self.max_file_bytes = max_file_bytes
        self._clock = clock
        self._salt = load_or_create_salt(salt_path(self.path))
        self._lock = threading.Lock()
        self._state = self._new_state()
        self._last_flush = clock()
        self._dirty = False

    def __repr__(self) -> str:
        return f"TrafficSample({str(self.path)!r}, capacity={self.capacity})"

    def __reduce_ex__(self, protocol: object) -> Any:
        raise InputTypeError(
            "a TrafficSample is not picklable: it holds a sampling secret and customers' "
            "texts; build one per process from its path"
        )

    # ------------------------------------------------------------------ recording
    def account_for(self, credential: str | None) -> str:
        """The account of a request that sent ``credential`` (its API key), never the key.

        A keyed hash under this sample's salt (:func:`traffic_account_id`), so
        replicas that share the salt agree; no credential: :data:`ANONYMOUS_ACCOUNT`.
        """
        return _account_id(self._salt, credential)

    def record(self, texts: Sequence[str], account: str | None = None) -> None:
        """Offer each text, as the model read it, to ``account``'s sample."""
        if account is not None and not isinstance(account, str):
            raise TrafficSampleError(f"account must be a string or None, got {account!r}")
        day = self._today()
        prefix = _account_prefix(account)
        offered = []
        for text in texts:
            if isinstance(text, str) and text:
                stored = stored_text(text, window=self.window, max_bytes=self.max_text_bytes)
                if stored:
                    offered.append((stored, _priority(self._salt, prefix, stored), day))
        if not offered:
            return
        with self._lock:
            self._state.offer(account, offered, len(offered))
            self._dirty = True

    @property
    def stored_bytes(self) -> int:
        """Bytes the sample this process holds takes in its file (at most ``max_file_bytes``)."""
        with self._lock:
            return self._state.bytes

    @property
    def refused(self) -> int:
        """Texts not sampled because the whole sample was full (their account had no room)."""
        with self._lock:
            return self._state.refused

    def account_bytes(self, account: str | None = None) -> int:
        """Bytes ``account``'s sample takes in the file (at most ``max_account_bytes``)."""
        with self._lock:
            reservoir = self._state.accounts.get(account)
            return 0 if reservoir is None else reservoir.bytes

    def flush_due(self) -> bool:
        """Whether ``flush_seconds`` have passed since the last flush with something new."""
        return self._dirty and self._clock() - self._last_flush >= self.flush_seconds

    def flush(self) -> Path:
        """Merge this process's sample with the file's, drop expired texts, rewrite it (0600),
        and commit each account's pool that changed to the chained log beside it
        (:mod:`.traffic_commitments`: what a traffic audit's texts are tied to).

        The file's accounts are merged first, so at the whole-file cap an account
        already in the file keeps its place.
        """
        with self._lock:
            with exclusive_lock(self.path):
                merged = self._new_state()
                merged.add_records(iter_records(self.path))
                merged.add_state(self._state)
                merged.refused += self._state.refused
                if self.retention_days is not None:
                    merged.drop_older_than(self._today() - self.retention_days)
                write_records(self.path, merged.records())
                pools = [
                    (account, [text for _, text, _ in reservoir.sorted()])
                    for account, reservoir in merged.accounts.items()
                ]
                append_commitments(commitments_path(self.path), pools, utc_now())
            self._state = merged
            self._last_flush = self._clock()
            self._dirty = False
        return self.path

    def texts(self, account: str | None = None) -> list[str]:
        """The texts this process holds for ``account``, lowest priority first."""
        with self._lock:
            reservoir = self._state.accounts.get(account)
            return [] if reservoir is None else [t for _, t, _ in reservoir.sorted()]

    def _new_state(self) -> SampleState:
        return SampleState(self.capacity, self.max_account_bytes, self.max_file_bytes)

    def _today(self) -> int:
        return today(self._clock)


# ---------------------------------------------------------------------- reading, merging
def read_traffic_texts(
    path: str | os.PathLike[str], account: str | Sequence[str] | None = None
) -> list[str]:
    """The texts of a traffic sample file: one account's, several accounts' pooled, or
    every account's (``None``), each distinct text once.

    Why a reader here and not the generic text-file reader: an account must match
    exactly, a named account that holds no text is an error that names the
    accounts the sample does hold, and the file is read a line at a time, so only
    the named accounts' texts are held in memory.

    Why pooling is exact: each account's sample is a keyed draw that never looks at
    the watermark key, so their union is too, and one audit drawn from it
    (``espew key reaudit --account A --account B``, ``--all-accounts``) is one
    exact test, not one per account: a thief that splits its traffic over many
    accounts is judged on all of it at once.

    >>> read_traffic_texts("traffic.jsonl", ["acme", "globex"])  # doctest: +SKIP
    """
    path = Path(path)
    wanted = _wanted_accounts(account)
    texts: list[str] = []
    found: set[str | None] = set()
    held: set[str] = set()
    any_record = False
    for record in iter_records(path, missing_ok=False):
        any_record = True
        owner = record.get("account")
        if wanted is None or owner in wanted:
            texts.append(record["text"])
            found.add(owner)
        elif owner is not None and len(held) <= 10:
            held.add(owner)
    absent = [] if wanted is None else [name for name in wanted if name not in found]
    if absent and any_record:
        shown = ", ".join(sorted(held)[:10]) + (" ..." if len(held) > 10 else "")
        names = ", ".join(repr(name) for name in absent[:10])
        raise TrafficSampleError(
            f"traffic sample {path} holds no text for account{'s' * (len(absent) > 1)} {names}"
            + (f"; it holds accounts: {shown}" if held else "; it records no accounts")
        )
    if not texts:
        raise TrafficSampleError(f"traffic sample {path} holds no texts yet")
    return list(dict.fromkeys(texts))


def traffic_accounts(path: str | os.PathLike[str]) -> dict[str | None, int]:
    """How many texts each account of a traffic sample file holds, in the file's order
    (``None``: texts recorded without an account).

    >>> traffic_accounts("traffic.jsonl")  # doctest: +SKIP
    {'acme': 200, 'globex': 200}
    """
    counts: dict[str | None, int] = {}
    for record in iter_records(Path(path), missing_ok=False):
        owner = record.get("account")
        counts[owner] = counts.get(owner, 0) + 1
    return counts


def _wanted_accounts(account: str | Sequence[str] | None) -> list[str] | None:
    """The accounts asked for, each once, in order; None for every account."""
    if account is None:
        return None
    names = [account] if isinstance(account, str) else list(account)
    if not names or not all(isinstance(name, str) and name for name in names):
        raise InputTypeError(f"accounts are non-empty strings, got {account!r}")
    return list(dict.fromkeys(names))


class MergedSample(NamedTuple):
    """What :func:`merge_traffic_samples` wrote: the file, its accounts, texts and bytes."""

    path: Path
    accounts: int
    texts: int
    bytes: int


def merge_traffic_samples(
    paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    capacity: int = DEFAULT_SAMPLE_CAPACITY,
    max_account_bytes: int = DEFAULT_SAMPLE_ACCOUNT_BYTES,
    max_file_bytes: int = DEFAULT_SAMPLE_FILE_BYTES,
    overwrite: bool = False,
) -> MergedSample:
    """Merge samples written by replicas that share one salt into one sample at ``out``.

    Why it is exact: each account keeps the lowest-priority prefix of its texts
    that fits its caps, and a part remembers where it refused (its cutoff), so
    the merge of the parts is the sample of all their traffic: exactly what one
    process would have kept with the same ``capacity`` and ``max_account_bytes``
    (pass what the replicas ran with). Nothing expires here; each replica already
    dropped what its retention did. The whole-file cap is a check, not a rule:
    a merge that needs more than ``max_file_bytes`` is refused, never cut in an
    order-dependent way. ``out.salt`` gets the parts' salt, so the result is
    itself a sample (``--account`` works on it, and it merges again).
    Parts with different salts are refused: their priorities are unrelated, so
    no merge of them is anyone's sample.
    """
    _check_caps(capacity, None, max_account_bytes, max_file_bytes)
    parts = [Path(p) for p in paths]
    if not parts:
        raise TrafficSampleError("merge needs at least one traffic sample")
    out = Path(out)
    if out.exists() and not overwrite:
        raise TrafficSampleError(f"{out} already exists; pass overwrite to replace it")
    if not out.parent.is_dir():
        raise TrafficSampleError(f"folder {out.parent} does not exist")
    salt = _common_salt(parts)
    state = SampleState(capacity, max_account_bytes, None)
    for part in parts:
        state.add_records(iter_records(part, missing_ok=False))
    if state.bytes > max_file_bytes:
        raise TrafficSampleError(
            f"the merged sample takes {state.bytes:,} bytes, more than the cap of "
            f"{max_file_bytes:,}: pass a larger max_file_bytes (--max-file-bytes) for it"
        )
    out_salt = salt_path(out)
    if out_salt.exists():
        if read_salt(out_salt) != salt:
            raise TrafficSampleError(
                f"{out_salt} holds another salt than the samples merged; write the merge elsewhere"
            )
    else:
        shutil.copyfile(salt_path(parts[0]), out_salt)
        os.chmod(out_salt, 0o600)
    written = write_records(out, state.records())
    texts = sum(len(r) for r in state.accounts.values())
    return MergedSample(out, len(state.accounts), texts, written)


def traffic_account_id(path: str | os.PathLike[str], credential: str | None) -> str:
    """The account id the sample at ``path`` gives requests that send ``credential``.

    For ``--account`` when the server has no key ring: the account is a keyed
    hash of the client's API key under the sample's salt, so only who holds the
    salt can tell which id is whose.
    """
    return _account_id(read_salt(salt_path(Path(path))), credential)


def stored_text(text: str, *, window: int | None, max_bytes: int) -> str:
    """What the sample stores of ``text``: as far as a model with ``window`` tokens reads
    it (the sound cut of :func:`..ground.text.window_prefix`), then at most
    ``max_bytes`` UTF-8 bytes.

    The result is a prefix of ``text``; cutting it never changes what the model read
    within the byte cap, so two texts the model reads alike up to there are one text.
    """
    # A prefix of max_bytes characters holds every byte the cap keeps: cut it first,
    # so that a huge input costs no more than a short one.
    text = text[:max_bytes]
    if window is not None:
        text = window_prefix(text, window)
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: no model reads them; store a marker
        encoded = text.encode("utf-8", "replace")
        text = encoded.decode("utf-8")
    if len(encoded) > max_bytes:
        text = encoded[:max_bytes].decode("utf-8", "ignore")
    return text


def _common_salt(parts: list[Path]) -> bytes:
    salts = [read_salt(salt_path(p)) for p in parts]
    for part, salt in zip(parts[1:], salts[1:], strict=True):
        if not hmac.compare_digest(salt, salts[0]):
            raise TrafficSampleError(
                f"traffic samples {parts[0]} and {part} were written with different salts: "
                "their priorities are unrelated, so no merge is the sample of their traffic. "
                "Give every replica the same salt file before it starts (docs/deployment.md)"
            )
    return salts[0]


def _check_caps(
    capacity: object, max_text_bytes: object, max_account_bytes: object, max_file_bytes: object
) -> None:
    """Each cap a positive integer, and they nest; ``max_text_bytes`` None: not checked."""
    for name, value in (
        ("capacity", capacity),
        ("max_text_bytes", 1 if max_text_bytes is None else max_text_bytes),
        ("max_account_bytes", max_account_bytes),
        ("max_file_bytes", max_file_bytes),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TrafficSampleError(f"{name} must be a positive integer, got {value!r}")
    assert isinstance(max_account_bytes, int) and isinstance(max_file_bytes, int)
    if isinstance(max_text_bytes, int):
        if max_text_bytes > MAX_TEXT_BYTES_LIMIT:
            raise TrafficSampleError(
                f"max_text_bytes must be at most {MAX_TEXT_BYTES_LIMIT:,}, got {max_text_bytes:,}"
            )
        # An account must hold a few texts of the largest size, escaped as JSON.
        if max_account_bytes < 8 * max_text_bytes:
            raise TrafficSampleError(
                f"max_account_bytes ({max_account_bytes:,}) must be at least 8 x "
                f"max_text_bytes ({8 * max_text_bytes:,}): room for a few texts of the "
                "largest size"
            )
    if max_file_bytes < max_account_bytes:
        raise TrafficSampleError(
            f"max_file_bytes ({max_file_bytes:,}) must be at least max_account_bytes "
            f"({max_account_bytes:,})"
        )


def _account_id(salt: bytes, credential: str | None) -> str:
    if credential is None or not credential.strip():
        return ANONYMOUS_ACCOUNT
    data = credential.strip().encode("utf-8", "surrogatepass")
    return "key-" + hmac.new(salt, _ACCOUNT_DOMAIN + data, sha256).hexdigest()[:32]


def _priority(salt: bytes, prefix: bytes, text: str) -> float:
    digest = hmac.new(salt, prefix + text.encode("utf-8"), sha256).digest()
    return int.from_bytes(digest[:7], "big") / float(1 << 56)


def _account_prefix(account: str | None) -> bytes:
    if account is None:
        return b"\x00"
    encoded = account.encode("utf-8", "surrogatepass")
    return b"\x01" + len(encoded).to_bytes(4, "big") + encoded


def with_committed_audit(
    key: Any,
    sample: str | os.PathLike[str],
    account: str | None,
    embed: Any,
    *,
    audit_round: int = 2,
    **options: Any,
) -> Any:
    """``key`` with its round-``audit_round`` audit drawn from ``account``'s latest
    committed pool in the traffic sample at ``sample``
    (:meth:`~..keys.key.WatermarkKey.with_audit`'s keyed draw over exactly that pool;
    ``options`` as ``with_audit`` takes them, ``embed`` your clean model). The key's
    ``info["audit_pool"]`` names the entry.

    Raises :class:`CommitmentError` when the log's chain is broken, holds no
    commitment for ``account``, or when the sample's texts for it are not the
    committed pool (the sample changed since: flush it, which commits it).
    """
    log = commitments_path(sample)
    if not log.exists():
        raise CommitmentError(
            f"no commitment log beside the traffic sample {sample} ({log.name}): its pools "
            "were never committed (espew serve --traffic-sample writes it at each flush)"
        )
    entry = latest_pool(read_commitments(log), account)
    if entry is None:
        raise CommitmentError(f"the commitment log {log} holds no pool of account {account!r}")
    texts = read_traffic_texts(sample, account)
    if corpus_digest(texts) != entry["pool_sha256"]:
        raise CommitmentError(
            f"account {account!r}'s texts in {sample} are not its last committed pool (record "
            f"{entry['index']}): the sample changed since; flush it (which commits it) first"
        )
    drawn = key.with_audit(texts, embed, audit_round=audit_round, **options)
    pool = {name: entry[name] for name in ("index", "time", "account", "n_texts", "digest")}
    return drawn.replace(info={**drawn.info, "audit_pool": pool})
