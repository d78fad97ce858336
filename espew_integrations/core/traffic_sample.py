"""A bounded, keyed sample of the texts a service answered, for audits drawn from traffic.

Why: a thief trains its copy on the texts it sent, not on the provider's keygen
corpus, and a copy is most faithful on its own training texts. The provider
knows what each account sent; an audit drawn from that (``espew key reaudit
--corpus SAMPLE.jsonl --account ID``) asks the suspect about the texts it
learned from.

The sample is a *bottom-k* sample per account: every distinct text gets a
priority, ``HMAC-SHA256(salt, account, text)``, and the ``capacity`` texts of
lowest priority are kept. Three properties follow, and each is a rule here:

- **Uniform and unsteerable.** The salt is random, secret and unrelated to
  the watermark key, so which of an account's distinct texts are kept is a
  uniform draw that no client can predict or steer, and that does not depend
  on the triggers or on which answers were marked. That is what keeps an
  audit drawn from the sample exact: for an innocent suspect, its texts are
  chosen without looking at the key.
- **Mergeable.** The bottom-k of a union is the bottom-k of the parts'
  bottom-k's: forked workers and restarts each keep their own sample and
  merge into one file under a lock, and the result is the sample of all
  traffic they served.
- **Bounded.** At most ``capacity`` texts per account, and texts not seen
  for ``retention_days`` are dropped at the next flush.

The file is JSON Lines, one object per kept text (``text``, ``account`` when
there is one, ``priority``, ``last_seen``), written atomically with mode 0600;
the salt sits beside it in ``<file>.salt`` (0600). It holds your customers'
texts: treat it like a log with their content in it (docs/key-management.md).
"""

from __future__ import annotations

import contextlib
import heapq
import hmac
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from hashlib import sha256
from pathlib import Path
from typing import Any

from .errors import ESpeWError
from .secret_files import read_bounded_file, write_secret_file

__all__ = [
    "DEFAULT_SAMPLE_CAPACITY",
    "DEFAULT_SAMPLE_FLUSH_SECONDS",
    "DEFAULT_SAMPLE_RETENTION_DAYS",
    "TrafficSample",
    "TrafficSampleError",
    "read_traffic_texts",
]

#: Texts kept per account: enough for several independent audit rounds of the
#: default audit size drawn from one account's traffic.
DEFAULT_SAMPLE_CAPACITY = 20_000
#: Texts not seen for this many days leave the sample at the next flush.
DEFAULT_SAMPLE_RETENTION_DAYS = 90
#: How often a serving process merges its sample into the file.
DEFAULT_SAMPLE_FLUSH_SECONDS = 60.0
#: The sample file is read whole; refuse anything larger than this.
MAX_SAMPLE_FILE_BYTES = 1 << 30
_SECONDS_PER_DAY = 86_400
_SALT_BYTES = 32


class TrafficSampleError(ESpeWError, ValueError):
    """A traffic sample file or its salt cannot be used (names the file and the problem)."""


class TrafficSample:
    """Keep a keyed bottom-k sample of served texts per account; merge it into a file.

    ``record(texts, account)`` is cheap (one HMAC per text) and safe from any
    thread; ``flush()`` merges with whatever the file holds (other workers,
    earlier runs) under an exclusive lock and rewrites it. Serving code calls
    :meth:`flush_due` after each request and flushes when it says so, and
    :meth:`flush` once more on shutdown.

    >>> sample = TrafficSample("traffic.jsonl", capacity=1000)  # doctest: +SKIP
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
        clock: Any = time.time,
    ):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise TrafficSampleError(f"capacity must be a positive integer, got {capacity!r}")
        if retention_days is not None and not retention_days > 0:
            raise TrafficSampleError(
                f"retention_days must be positive (or None: keep forever), got {retention_days!r}"
            )
        if not flush_seconds >= 0:
            raise TrafficSampleError(f"flush_seconds must be >= 0, got {flush_seconds!r}")
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise TrafficSampleError(f"traffic sample {self.path} exists and is not a file")
        if not self.path.parent.is_dir():
            raise TrafficSampleError(f"traffic sample folder {self.path.parent} does not exist")
        self.capacity = capacity
        self.retention_days = retention_days
        self.flush_seconds = flush_seconds
        self._clock = clock
        self._salt = _load_or_create_salt(_salt_path(self.path))
        self._lock = threading.Lock()
        self._kept: dict[str | None, _Reservoir] = {}
        self._last_flush = clock()
        self._dirty = False

    def __repr__(self) -> str:
        return f"TrafficSample({str(self.path)!r}, capacity={self.capacity})"

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError(
            "a TrafficSample is not picklable: it holds a sampling secret and customers' "
            "texts; build one per process from its path"
        )

    # ------------------------------------------------------------------ recording
    def record(self, texts: Sequence[str], account: str | None = None) -> None:
        """Offer each text to ``account``'s sample (kept if its priority is low enough)."""
        if account is not None and not isinstance(account, str):
            raise TrafficSampleError(f"account must be a string or None, got {account!r}")
        day = self._today()
        prefix = _account_prefix(account)
        with self._lock:
            reservoir = self._kept.get(account)
            if reservoir is None:
                reservoir = self._kept[account] = _Reservoir(self.capacity)
            for text in texts:
                if isinstance(text, str) and text:
                    priority = _priority(self._salt, prefix, text)
                    reservoir.offer(text, priority, day)
            self._dirty = True

    def flush_due(self) -> bool:
        """Whether ``flush_seconds`` have passed since the last flush with something new."""
        return self._dirty and self._clock() - self._last_flush >= self.flush_seconds

    def flush(self) -> Path:
        """Merge this process's sample with the file's, drop expired texts, rewrite it (0600)."""
        with self._lock:
            with _exclusive_lock(self.path):
                on_disk = _read_records(self.path)
                for record in on_disk:
                    account = record.get("account")
                    reservoir = self._kept.get(account)
                    if reservoir is None:
                        reservoir = self._kept[account] = _Reservoir(self.capacity)
                    reservoir.offer(record["text"], record["priority"], record["last_seen"])
                self._expire()
                data = "".join(
                    json.dumps(record, ensure_ascii=False) + "\n" for record in self._records()
                ).encode("utf-8")
                write_secret_file(
                    self.path, data, overwrite=True, what="traffic sample", keep_hint=""
                )
            self._last_flush = self._clock()
            self._dirty = False
        return self.path

    def texts(self, account: str | None = None) -> list[str]:
        """The texts this process holds for ``account``, lowest priority first."""
        with self._lock:
            reservoir = self._kept.get(account)
            return [] if reservoir is None else [t for _, t, _ in reservoir.sorted()]

    def _today(self) -> int:
        return int(self._clock() // _SECONDS_PER_DAY)

    def _expire(self) -> None:
        if self.retention_days is None:
            return
        oldest = self._today() - self.retention_days
        for reservoir in self._kept.values():
            reservoir.drop_older_than(oldest)

    def _records(self) -> Iterator[dict[str, Any]]:
        for account in sorted(self._kept, key=lambda a: (a is not None, a or "")):
            for priority, text, day in self._kept[account].sorted():
                record: dict[str, Any] = {"text": text}
                if account is not None:
                    record["account"] = account
                record["priority"] = priority
                record["last_seen"] = day
                yield record


class _Reservoir:
    """The ``capacity`` lowest-priority distinct texts seen, with the day each was last seen."""

    __slots__ = ("_capacity", "_entries", "_heap")

    def __init__(self, capacity: int):
        self._capacity = capacity
        self._entries: dict[str, tuple[float, int]] = {}
        self._heap: list[tuple[float, str]] = []  # (-priority, text): the largest on top

    def offer(self, text: str, priority: float, day: int) -> None:
        held = self._entries.get(text)
        if held is not None:
            self._entries[text] = (held[0], max(held[1], day))
            return
        if len(self._entries) < self._capacity:
            heapq.heappush(self._heap, (-priority, text))
        elif priority < -self._heap[0][0]:
            _, evicted = heapq.heapreplace(self._heap, (-priority, text))
            del self._entries[evicted]
        else:
            return
        self._entries[text] = (priority, day)

    def drop_older_than(self, oldest_day: float) -> None:
        kept = {t: v for t, v in self._entries.items() if v[1] >= oldest_day}
        if len(kept) != len(self._entries):
            self._entries = kept
            self._heap = [(-p, t) for t, (p, _) in kept.items()]
            heapq.heapify(self._heap)

    def sorted(self) -> list[tuple[float, str, int]]:
        return sorted((p, t, d) for t, (p, d) in self._entries.items())


def read_traffic_texts(path: str | os.PathLike[str], account: str | None = None) -> list[str]:
    """The texts of a traffic sample file: one account's, or every account's (``None``).

    Why a reader here and not the generic text-file reader: ``account`` must
    match exactly, and a sample that holds no text for it is an error that
    names the accounts it does hold.
    """
    path = Path(path)
    records = _read_records(path, missing_ok=False)
    if account is None:
        texts = [r["text"] for r in records]
    else:
        texts = [r["text"] for r in records if r.get("account") == account]
        if not texts:
            held = sorted({str(r.get("account")) for r in records if r.get("account")})
            shown = ", ".join(held[:10]) + (" ..." if len(held) > 10 else "")
            raise TrafficSampleError(
                f"traffic sample {path} holds no text for account {account!r}"
                + (f"; it holds accounts: {shown}" if held else "; it records no accounts")
            )
    if not texts:
        raise TrafficSampleError(f"traffic sample {path} holds no texts yet")
    return list(dict.fromkeys(texts))


def _priority(salt: bytes, prefix: bytes, text: str) -> float:
    digest = hmac.new(salt, prefix + text.encode("utf-8"), sha256).digest()
    return int.from_bytes(digest[:7], "big") / float(1 << 56)


def _account_prefix(account: str | None) -> bytes:
    if account is None:
        return b"\x00"
    encoded = account.encode("utf-8")
    return b"\x01" + len(encoded).to_bytes(4, "big") + encoded


def _salt_path(path: Path) -> Path:
    return path.with_name(path.name + ".salt")


def _load_or_create_salt(path: Path) -> bytes:
    """The sample's secret salt, created once (0600) and shared by every process after."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(secrets.token_hex(_SALT_BYTES) + "\n")
    try:
        data, _ = read_bounded_file(path, what="traffic sample salt", limit=4096)
        salt = bytes.fromhex(data.decode("ascii").strip())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TrafficSampleError(
            f"traffic sample salt {path} is unreadable or corrupt ({type(exc).__name__}); "
            "delete it together with the sample file to start a new sample"
        ) from None
    if len(salt) != _SALT_BYTES:
        raise TrafficSampleError(
            f"traffic sample salt {path} holds {len(salt)} bytes, expected {_SALT_BYTES}"
        )
    return salt


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock beside ``path``, so concurrent flushes merge, never race."""
    try:
        import fcntl
    except ImportError:  # no advisory locks: one process per sample file
        yield
        return
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _read_records(path: Path, *, missing_ok: bool = True) -> list[dict[str, Any]]:
    """The records of a sample file, each checked; a bad line is an error naming it."""
    if not path.exists():
        if missing_ok:
            return []
        raise TrafficSampleError(f"traffic sample {path} does not exist")
    try:
        data, _ = read_bounded_file(path, what="traffic sample", limit=MAX_SAMPLE_FILE_BYTES)
        lines = data.decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TrafficSampleError(f"cannot read traffic sample {path}: {exc}") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            _check_record(record)
        except (ValueError, TypeError) as exc:
            raise TrafficSampleError(
                f"traffic sample {path} line {number} is not a sample record ({exc})"
            ) from None
        records.append(record)
    return records


def _check_record(record: Any) -> None:
    if not isinstance(record, dict):
        raise TypeError("not a JSON object")
    if not isinstance(record.get("text"), str) or not record["text"]:
        raise ValueError("'text' must be a non-empty string")
    account = record.get("account")
    if account is not None and not isinstance(account, str):
        raise ValueError("'account' must be a string")
    priority = record.get("priority")
    if isinstance(priority, bool) or not isinstance(priority, float | int):
        raise ValueError("'priority' must be a number")
    if not 0.0 <= priority < 1.0:
        raise ValueError("'priority' must be in [0, 1)")
    day = record.get("last_seen")
    if isinstance(day, bool) or not isinstance(day, int):
        raise ValueError("'last_seen' must be an integer day")
