"""The traffic sample's state and file: bottom-k reservoirs under byte caps, and their lines.

Why apart from :mod:`.traffic_sample`: the rule a sample keeps (which texts of an
account stay, how many bytes it may hold, which account gets room) must be the
same in a serving process, in a flush that merges workers, and in ``espew
traffic merge`` that merges replicas; :class:`SampleState` is that rule, once.

The rule, per account: the distinct texts sorted by priority, and the longest
prefix of that order that holds at most ``capacity`` texts and
``max_account_bytes`` bytes (as written in the file). The prefix stops at the
first text that does not fit, even if a smaller one after it would: that is what
keeps the rule a function of the *set* of texts, so that the sample of a union
is the sample of the parts' samples. A part that refused a text remembers the
priority it refused at (its ``cutoff``, written in the file), because a merge
must not let a later, smaller text into the gap. Whole file: at most
``max_file_bytes``; a new account gets a reservoir only while the file has room
for a full account besides, so an account, once in, never loses its texts to
another account's traffic.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import secrets
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..ground.errors import ESpeWError, InputError, InputTypeError
from ..ground.secret_files import replace_atomically
from ..keys.key_checks import SALT_BYTES

__all__ = [
    "ACCOUNT_OVERHEAD_BYTES",
    "MAX_RECORD_LINE_BYTES",
    "MAX_TEXT_BYTES_LIMIT",
    "RECORD_OVERHEAD_BYTES",
    "Reservoir",
    "SampleState",
    "TrafficSampleError",
    "exclusive_lock",
    "iter_records",
    "json_bytes",
    "load_or_create_salt",
    "read_salt",
    "salt_path",
    "today",
    "write_records",
]

#: What one record costs besides its text's and account's JSON: the field names,
#: the priority (a float's repr, at most 24 characters), the day (under 10 digits)
#: and the line's end. A bound, not an estimate: the byte caps hold on the file.
RECORD_OVERHEAD_BYTES = 96
#: What an account costs once: the ``cutoff`` field on its first record.
ACCOUNT_OVERHEAD_BYTES = 48
#: The longest line read back: a text at the largest text cap, escaped as JSON
#: (at most 6 bytes a byte), with its fields. Longer is a corrupt file, not a record.
MAX_TEXT_BYTES_LIMIT = 1 << 20
MAX_RECORD_LINE_BYTES = 6 * MAX_TEXT_BYTES_LIMIT + (1 << 16)
_NOTHING_REFUSED = 1.0  # priorities lie in [0, 1)


class TrafficSampleError(ESpeWError, ValueError):
    """A traffic sample file or its salt cannot be used (names the file and the problem)."""


def json_bytes(value: str) -> int:
    """Bytes of ``value`` as written in the file (JSON, UTF-8, not ASCII-escaped)."""
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


class Reservoir:
    """One account's kept texts: the lowest-priority prefix that fits its caps.

    ``cutoff`` is the lowest priority this reservoir ever refused or evicted
    (1.0: none): a text at or above it is never kept, whatever its size.
    """

    __slots__ = ("_capacity", "_entries", "_heap", "_max_bytes", "_record_bytes", "bytes", "cutoff")

    def __init__(self, capacity: int, max_bytes: int, account_json_bytes: int):
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._record_bytes = RECORD_OVERHEAD_BYTES + account_json_bytes
        self._entries: dict[str, tuple[float, int, int]] = {}  # text -> (priority, day, bytes)
        self._heap: list[tuple[float, str]] = []  # (-priority, text): the largest on top
        self.bytes = ACCOUNT_OVERHEAD_BYTES
        self.cutoff = _NOTHING_REFUSED

    def __len__(self) -> int:
        return len(self._entries)

    def offer(self, text: str, priority: float, day: int, room: int) -> int:
        """Keep ``text`` if the prefix rule does; ``room``: bytes the file has left.

        Returns the change in this reservoir's bytes (negative when it evicted more
        than it took).
        """
        held = self._entries.get(text)
        if held is not None:
            if day > held[1]:
                self._entries[text] = (held[0], day, held[2])
            return 0
        if priority >= self.cutoff:
            return 0
        before = self.bytes
        budget = min(self._max_bytes, before + max(room, 0))
        cost = self._record_bytes + json_bytes(text)
        heapq.heappush(self._heap, (-priority, text))
        self._entries[text] = (priority, day, cost)
        self.bytes += cost
        while len(self._entries) > self._capacity or self.bytes > budget:
            _, evicted = heapq.heappop(self._heap)
            evicted_priority, _, evicted_cost = self._entries.pop(evicted)
            self.bytes -= evicted_cost
            self.cutoff = evicted_priority  # popped largest first: the last is the lowest
        return self.bytes - before

    def lower_cutoff(self, cutoff: float) -> int:
        """Apply another part's cutoff: drop what lies at or above it; returns the byte change."""
        if cutoff >= self.cutoff:
            return 0
        self.cutoff = cutoff
        before = self.bytes
        while self._heap and -self._heap[0][0] >= cutoff:
            _, evicted = heapq.heappop(self._heap)
            self.bytes -= self._entries.pop(evicted)[2]
        return self.bytes - before

    def drop_older_than(self, oldest_day: float) -> int:
        """Drop texts last seen before ``oldest_day``; the sample then starts afresh above them.

        Returns the byte change. The cutoff is reset when anything left: what
        remains is the sample of the traffic still within the retention.
        """
        kept = {t: v for t, v in self._entries.items() if v[1] >= oldest_day}
        if len(kept) == len(self._entries):
            return 0
        before = self.bytes
        self._entries = kept
        self._heap = [(-p, t) for t, (p, _, _) in kept.items()]
        heapq.heapify(self._heap)
        self.bytes = ACCOUNT_OVERHEAD_BYTES + sum(c for _, _, c in kept.values())
        self.cutoff = _NOTHING_REFUSED
        return self.bytes - before

    def sorted(self) -> list[tuple[float, str, int]]:
        """(priority, text, last day seen), lowest priority first."""
        return sorted((p, t, d) for t, (p, d, _) in self._entries.items())


class SampleState:
    """Every account's reservoir, under the whole sample's byte cap.

    Not thread-safe: :class:`~.traffic_sample.TrafficSample` holds its lock around it.
    """

    def __init__(self, capacity: int, max_account_bytes: int, max_file_bytes: int | None):
        self.capacity = capacity
        self.max_account_bytes = max_account_bytes
        #: None: no whole-file cap (a merge checks the total instead of cutting to it).
        self.max_file_bytes = sys.maxsize if max_file_bytes is None else max_file_bytes
        self.accounts: dict[str | None, Reservoir] = {}
        self.bytes = 0
        #: Texts offered to an account refused a reservoir because the file was full.
        self.refused = 0

    def reservoir(self, account: str | None) -> Reservoir | None:
        """``account``'s reservoir, made if the file has room for one full account more."""
        found = self.accounts.get(account)
        if found is not None:
            return found
        if self.max_file_bytes - self.bytes < self.max_account_bytes:
            return None
        account_bytes = 0 if account is None else json_bytes(account) + 14  # `, "account": `
        made = self.accounts[account] = Reservoir(
            self.capacity, self.max_account_bytes, account_bytes
        )
        self.bytes += made.bytes
        return made

    def offer(
        self, account: str | None, items: Iterable[tuple[str, float, int]], count: int = 0
    ) -> None:
        """Offer ``(text, priority, day)`` items to ``account``; ``count`` for the refusal tally."""
        reservoir = self.reservoir(account)
        if reservoir is None:
            self.refused += count
            return
        for text, priority, day in items:
            self.bytes += reservoir.offer(text, priority, day, self.max_file_bytes - self.bytes)

    def lower_cutoff(self, account: str | None, cutoff: float) -> None:
        reservoir = self.accounts.get(account)
        if reservoir is not None:
            self.bytes += reservoir.lower_cutoff(cutoff)

    def add_records(self, records: Iterable[dict[str, Any]]) -> None:
        """Merge records read from a sample file (their cutoffs included)."""
        for record in records:
            account = record.get("account")
            self.offer(account, [(record["text"], record["priority"], record["last_seen"])], 1)
            if "cutoff" in record:
                self.lower_cutoff(account, record["cutoff"])

    def add_state(self, other: SampleState) -> None:
        """Merge another state's accounts into this one (accounts in sorted order)."""
        for account in _account_order(other.accounts):
            reservoir = other.accounts[account]
            self.offer(account, ((t, p, d) for p, t, d in reservoir.sorted()), len(reservoir))
            self.lower_cutoff(account, reservoir.cutoff)

    def drop_older_than(self, oldest_day: float) -> None:
        for reservoir in self.accounts.values():
            self.bytes += reservoir.drop_older_than(oldest_day)

    def records(self) -> Iterator[dict[str, Any]]:
        """The file's records: accounts in order, each lowest priority first."""
        for account in _account_order(self.accounts):
            reservoir = self.accounts[account]
            for position, (priority, text, day) in enumerate(reservoir.sorted()):
                record: dict[str, Any] = {"text": text}
                if account is not None:
                    record["account"] = account
                record["priority"] = priority
                record["last_seen"] = day
                if position == 0 and reservoir.cutoff < _NOTHING_REFUSED:
                    record["cutoff"] = reservoir.cutoff
                yield record


def _account_order(accounts: Iterable[str | None]) -> list[str | None]:
    return sorted(accounts, key=lambda a: (a is not None, a or ""))


# ---------------------------------------------------------------------- the file
def write_records(path: Path, records: Iterable[dict[str, Any]]) -> int:
    """Write ``records`` as JSON Lines to ``path`` atomically, mode 0600; returns its bytes.

    Streamed to a temporary file (never the whole sample in one buffer), fsynced,
    then renamed over ``path``, so a reader sees the old file or the new one.
    """
    lines = ((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8") for r in records)
    return replace_atomically(path, lines)


def iter_records(path: Path, *, missing_ok: bool = True) -> Iterator[dict[str, Any]]:
    """The records of a sample file, one line at a time, each checked.

    Streamed, so reading never holds more than one line besides what the caller
    keeps: a sample of any size can be flushed, merged and re-audited. A line
    longer than any record can be, or one that is not a record, is an error that
    names the line.
    """
    if not path.exists():
        if missing_ok:
            return
        raise TrafficSampleError(f"traffic sample {path} does not exist")
    if not path.is_file():
        raise TrafficSampleError(f"traffic sample {path} is not a regular file")
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, around the generator
    except OSError as exc:
        raise TrafficSampleError(f"cannot read traffic sample {path}: {exc}") from None
    with handle:
        number = 0
        while True:
            try:
                raw = handle.readline(MAX_RECORD_LINE_BYTES + 1)
            except OSError as exc:
                raise TrafficSampleError(f"cannot read traffic sample {path}: {exc}") from None
            if not raw:
                return
            number += 1
            if len(raw) > MAX_RECORD_LINE_BYTES:
                raise TrafficSampleError(
                    f"traffic sample {path} line {number} is longer than any record "
                    f"({MAX_RECORD_LINE_BYTES:,} bytes): not a sample file"
                )
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
                _check_record(record)
            except (ValueError, TypeError) as exc:
                raise TrafficSampleError(
                    f"traffic sample {path} line {number} is not a sample record ({exc})"
                ) from None
            yield record


def _check_record(record: Any) -> None:
    if not isinstance(record, dict):
        raise InputTypeError("not a JSON object")
    if not isinstance(record.get("text"), str) or not record["text"]:
        raise InputError("'text' must be a non-empty string")
    account = record.get("account")
    if account is not None and not isinstance(account, str):
        raise InputError("'account' must be a string")
    priority = record.get("priority")
    if isinstance(priority, bool) or not isinstance(priority, float | int):
        raise InputError("'priority' must be a number")
    if not 0.0 <= priority < 1.0:
        raise InputError("'priority' must be in [0, 1)")
    day = record.get("last_seen")
    if isinstance(day, bool) or not isinstance(day, int) or not 0 <= day < 10**9:
        raise InputError("'last_seen' must be an integer day (days since 1970)")
    if "cutoff" in record:
        cutoff = record["cutoff"]
        if isinstance(cutoff, bool) or not isinstance(cutoff, float | int):
            raise InputError("'cutoff' must be a number")
        if not priority < cutoff <= 1.0:
            raise InputError("'cutoff' must lie above the record's priority, at most 1")


# ---------------------------------------------------------------------- the salt and lock
def salt_path(path: Path) -> Path:
    """Where the salt of the sample at ``path`` lives: ``<file>.salt`` beside it."""
    return path.with_name(path.name + ".salt")


def load_or_create_salt(path: Path) -> bytes:
    """The sample's secret salt at ``path``, created once (0600) and shared by every process.

    Created whole before anyone can read it: the salt is written to a private
    temporary file and *linked* to its name, which fails if the name exists, so
    of many processes starting at once exactly one salt wins and no process ever
    reads a salt half written.
    """
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(secrets.token_hex(SALT_BYTES) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return read_salt(path)


def read_salt(path: Path) -> bytes:
    """An existing sample's salt; an error naming the file when it is missing or corrupt."""
    if not path.exists():
        raise TrafficSampleError(
            f"traffic sample salt {path} does not exist: a sample is read with the salt it "
            "was written with"
        )
    try:
        with open(path, "rb") as handle:
            data = handle.read(4097)
        if len(data) > 4096:
            raise InputError("too long")
        salt = bytes.fromhex(data.decode("ascii").strip())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TrafficSampleError(
            f"traffic sample salt {path} is unreadable or corrupt ({type(exc).__name__}); "
            "delete it together with the sample file to start a new sample"
        ) from None
    if len(salt) != SALT_BYTES:
        raise TrafficSampleError(
            f"traffic sample salt {path} holds {len(salt)} bytes, expected {SALT_BYTES}"
        )
    return salt


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
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


def today(clock: Any = time.time) -> int:
    """The day number (days since the epoch) ``clock`` says it is."""
    return int(clock() // 86_400)
