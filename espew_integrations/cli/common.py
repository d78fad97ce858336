"""What every ``espew`` command shares: exit codes, usage errors, key loading,
argument types, progress bars and the ``openai:`` endpoint flags."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from typing import Any

from .._optional import install_line
from ..core.ground.defaults import DEFAULT_BATCH_SIZE, DEFAULT_KEY_VARIABLE
from ..core.ground.errors import ESpeWError
from ..models import resolve_embedder

__all__ = [
    "EXIT_COPIED",
    "EXIT_INCONCLUSIVE",
    "EXIT_NOT_COPIED",
    "EXIT_USAGE",
    "Parser",
    "UsageError",
    "add_audit_argument",
    "add_endpoint_flags",
    "add_suspect_arguments",
    "advancing",
    "announcing_last",
    "counting",
    "endpoint_options",
    "load_key",
    "log_level",
    "port",
    "positive_int",
    "positive_seconds",
    "progress",
    "require_extra",
    "suspect_spec",
]

EXIT_NOT_COPIED = 0
EXIT_COPIED = 1
EXIT_INCONCLUSIVE = 2
EXIT_USAGE = 3


class UsageError(ESpeWError):
    """The command line, a file or a spec is wrong; ``espew`` exits with 3."""


class Parser(argparse.ArgumentParser):
    """argparse that reports usage errors with exit code 3 (argparse's own is 2,
    which ``espew verify`` uses for "inconclusive")."""

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        raise UsageError(f"{self.prog}: {message}")


def load_key(source: str | None, *, audit: str | None = None, need_audit: bool = False) -> Any:
    """A key from a file path, or from an environment variable with ``env:VAR``.

    The rule of :mod:`~espew_integrations.core.keys.key_source`, shared with ``espew
    serve`` and the wrappers: ``source`` is ``None`` when ``--key`` was not given,
    and then ``$ESPEW_KEY`` is read; if it is unset the error names ``--key``
    first, since a newcomer who forgot the flag has never heard of the variable.
    ``audit`` names the key's audit file (``--audit``; by default the file
    beside the key). With ``need_audit`` (verify) the audit is read at once, so
    a missing or mismatched audit is one clear error before any query is sent.

    >>> load_key("provider.key")       # doctest: +SKIP
    >>> load_key("env:ESPEW_KEY", audit="provider.key.audit", need_audit=True)  # doctest: +SKIP
    """
    from ..core.keys.key_source import resolve_key_source

    resolved = resolve_key_source(source, audit_path=audit)
    if resolved is None:
        raise UsageError(
            f"no key given: pass --key PATH (or --key env:VAR), or set {DEFAULT_KEY_VARIABLE} "
            "to a key file path or the key's JSON"
        )
    key = resolved[0]
    if need_audit:
        key.audit  # noqa: B018 - reads and checks the audit file now
    return key


def add_audit_argument(parser: argparse.ArgumentParser) -> None:
    """``--audit PATH``: where the key's audit file is, when not beside the key."""
    parser.add_argument(
        "--audit",
        metavar="PATH",
        default=None,
        help="the key's audit file (default: beside the key file, KEY.audit, as espew "
        "keygen writes it; needed with --key env:VAR)",
    )


def require_extra(extra: str, modules: dict[str, str], command: str) -> None:
    """Fail at once, naming the pip line, when ``command`` needs packages that are missing.

    ``modules`` maps import names to package names; they are looked up, never
    imported, so the check costs nothing and runs before any slow work.
    """
    missing = [
        package for name, package in modules.items() if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise UsageError(f"{command} needs {', '.join(missing)}: {install_line(extra)}")


class _NoBar:
    """What :func:`progress` returns without tqdm: the same calls, nothing shown."""

    n = 0
    total: int | None = None

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int = 1) -> None:
        return None

    def set_description_str(self, desc: str) -> None:
        return None


#: Seconds between two progress lines when stderr is a log, not a terminal.
LOG_INTERVAL_S = 10.0


def _plural(unit: str) -> str:
    return unit[:-1] + "ies" if unit.endswith("y") else unit + "s"


class _LogBar:
    """What :func:`progress` returns when stderr is not a terminal (a log file, a pipe,
    CI): a plain line at the start, one every ``interval`` seconds and one at the end,
    instead of a bar redrawn in place, so that a long step is never silent in a log.

    >>> import io
    >>> log = io.StringIO()
    >>> with _LogBar(3, "embedding with minilm", "text", stream=log) as bar:
    ...     bar.update(3)
    >>> print(log.getvalue().splitlines()[0])
    espew: embedding with minilm: 0 of about 3 texts
    """

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str,
        *,
        stream: Any = None,
        clock: Callable[[], float] = time.monotonic,
        interval: float = LOG_INTERVAL_S,
    ) -> None:
        self.total, self.n = total, 0
        self._desc, self._units = desc, _plural(unit)
        self._stream = stream if stream is not None else sys.stderr
        self._clock, self._interval = clock, interval
        self._start = self._last = clock()

    def _line(self, tail: str = "") -> None:
        count = f"{self.n:,}" + ("" if self.total is None else f" of about {self.total:,}")
        share = f" ({self.n / self.total:.0%})" if self.total and self.n else ""
        print(f"espew: {self._desc}: {count} {self._units}{share}{tail}", file=self._stream)
        self._stream.flush()

    def __enter__(self) -> _LogBar:
        self._line()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = self._clock() - self._start
        ended = "done" if exc[0] is None else "stopped"
        print(
            f"espew: {self._desc}: {self.n:,} {self._units}, {ended} in {elapsed:,.0f} s",
            file=self._stream,
            flush=True,
        )

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self._clock()
        if now - self._last >= self._interval:
            self._last = now
            self._line(f", {now - self._start:,.0f} s")

    def set_description_str(self, desc: str) -> None:
        self._desc = desc
        print(f"espew: {desc}", file=self._stream, flush=True)


def progress(total: int | None, desc: str, unit: str, enabled: bool) -> Any:
    """A tqdm bar on stderr with a total (so an ETA) on a terminal; in a log, lines.

    On a terminal the bar redraws in place; when stderr is a file, a pipe or a CI log,
    a bar would fill it with redraws, so a line is written at the start, every
    :data:`LOG_INTERVAL_S` seconds and at the end instead (:class:`_LogBar`).
    ``enabled`` is False with ``--no-progress``: nothing is shown. Without tqdm (it
    comes with the ``[cli]`` extra) a terminal gets no bar; the command still runs.
    """
    if enabled and not getattr(sys.stderr, "isatty", lambda: False)():
        return _LogBar(total, desc, unit)
    if importlib.util.find_spec("tqdm") is None:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(
        total=total, desc=desc, unit=unit, file=sys.stderr, disable=None if enabled else True
    )


def counting(embed: Callable[[list[str]], Any], bar: Any) -> Callable[[list[str]], Any]:
    """``embed`` that advances ``bar`` by the number of texts of each call.

    A bar's total may be an estimate (keygen cannot know its redraws ahead): it
    grows rather than overflow, so the bar never shows more than 100%.
    """

    def wrapped(texts: list[str]) -> Any:
        out = embed(texts)
        if bar.total is not None and bar.n + len(texts) > bar.total:
            bar.total = bar.n + len(texts)
        bar.update(len(texts))
        return out

    return wrapped


def advancing(bar: Any) -> Callable[[int, int], None]:
    """The library's ``progress(done, total)`` callback, shown on ``bar`` (total and all)."""

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return update


def announcing_last(bar: Any, step: str) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` that moves ``bar`` and names ``step`` once done.

    The audit scores the answers after its last query; without this the bar
    sits silent at 100% while the rank test runs.
    """
    advance = advancing(bar)

    def update(done: int, total: int) -> None:
        advance(done, total)
        if done >= total:
            bar.set_description_str(step)

    return update


def warning_past_deadline(
    progress: Callable[[int, int], None], deadline: float | None, *, clock: Callable[[], float]
) -> Callable[[int, int], None]:
    """``progress`` that warns once, after the first answers, when the audit will not
    fit in ``deadline`` at the pace they came: it would end inconclusive.

    The estimate is the elapsed time scaled to the whole audit; it is printed on
    stderr, with what to do (raise or drop ``--deadline``), not acted on.
    """
    if deadline is None:
        return progress
    start = clock()
    warned = False

    def update(done: int, total: int) -> None:
        nonlocal warned
        progress(done, total)
        if warned or done <= 0 or done >= total:
            return
        warned = True
        estimate = (clock() - start) * total / done
        if estimate > deadline:
            print(
                f"warning: at this pace the audit needs about {estimate:,.0f} s, past its "
                f"--deadline of {deadline:g} s, so it will end inconclusive; raise --deadline "
                "or drop it (the stall guard alone stops a suspect that stops answering)",
                file=sys.stderr,
                flush=True,
            )

    return update


# ---------------------------------------------------------------------- argument types
def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be from 0 to 65535 (0 picks a free port), got {value}"
        )
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def log_level(text: str) -> str:
    from ..http.listen import LOG_LEVELS

    level = text.lower()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return level


# ---------------------------------------------------------------------- openai: endpoints
def add_endpoint_flags(parser: argparse.ArgumentParser, *, verify: bool) -> None:
    """The flags of an ``openai:`` embedder or suspect (timeouts, retries, budget)."""
    group = parser.add_argument_group("openai: endpoint options")
    if verify:
        group.add_argument(
            "--api-key-env",
            metavar="VAR",
            help="environment variable holding the suspect's API key (never pass keys as flags)",
        )
    group.add_argument("--encoding-format", choices=("float", "base64"), default="float")
    group.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    group.add_argument("--retries", type=int, default=4, help="retries on 429/5xx/connection")
    group.add_argument(
        "--backoff",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="first retry delay, doubled at each retry (a Retry-After header wins)",
    )
    group.add_argument(
        "--rate-limit", type=float, default=None, metavar="RPS", help="max requests per second"
    )
    group.add_argument(
        "--max-queries",
        type=int,
        default=None,
        metavar="N",
        help="query budget: never send more than N texts (retries count)",
    )


def endpoint_options(args: argparse.Namespace) -> dict[str, Any]:
    """OpenAIEndpoint settings from the shared endpoint flags."""
    return {
        "api_key_env": getattr(args, "api_key_env", None),
        "encoding_format": getattr(args, "encoding_format", "float"),
        "batch_size": getattr(args, "batch_size", DEFAULT_BATCH_SIZE),
        "timeout": getattr(args, "timeout", 30.0),
        "max_retries": getattr(args, "retries", 4),
        "backoff": getattr(args, "backoff", 0.5),
        "requests_per_second": getattr(args, "rate_limit", None),
        "max_queries": getattr(args, "max_queries", None),
    }


_URL_SCHEMES = ("http://", "https://")


def add_suspect_arguments(parser: argparse.ArgumentParser) -> None:
    """``--suspect SPEC`` and ``--model NAME``, shared by verify and trace.

    ``--suspect http://host/v1 --model NAME`` is the spelling people try first
    for an OpenAI-compatible endpoint; it means ``openai:http://host/v1#NAME``.
    """
    parser.add_argument(
        "--suspect",
        required=True,
        metavar="SPEC",
        help="what to audit: openai:URL#MODEL, an http(s) URL with --model, module:attr, "
        "file.py:attr or minilm",
    )
    parser.add_argument(
        "--model",
        default=None,
        metavar="NAME",
        help="the model to ask for, when --suspect is an OpenAI-compatible endpoint's URL "
        "(--suspect http://host/v1 --model NAME is openai:http://host/v1#NAME)",
    )


def suspect_spec(args: argparse.Namespace) -> str:
    """The registry spec of ``--suspect`` (with ``--model``), or a UsageError showing the forms.

    A bare URL is refused before anything is read or sent: resolved as a
    module it would fail with a baffling import error.

    >>> suspect_spec(argparse.Namespace(suspect="http://h/v1", model="m"))
    'openai:http://h/v1#m'
    """
    suspect: str = args.suspect
    model = getattr(args, "model", None)
    if model is None:
        if suspect.lower().startswith(_URL_SCHEMES):
            raise UsageError(
                f"--suspect {suspect} is a URL but names no model; write "
                f"--suspect openai:{suspect}#MODEL or --suspect {suspect} --model MODEL"
            )
        return suspect
    if not model or "#" in model:
        raise UsageError(f"--model must be a non-empty model name without '#', got {model!r}")
    if suspect.lower().startswith(_URL_SCHEMES):
        return f"openai:{suspect}#{model}"
    if suspect.startswith("openai:") and "#" not in suspect:
        return f"{suspect}#{model}"
    raise UsageError(
        "--model goes with an endpoint URL (--suspect http://host/v1 --model MODEL); "
        f"--suspect {suspect} names its model itself or is no endpoint"
    )


def audit_suspect(
    args: argparse.Namespace,
    audit: Callable[..., Any],
    n_queries: int,
    *audit_args: Any,
    **options: Any,
) -> Any:
    """Resolve ``--suspect``, run ``audit(suspect, *audit_args, ...)`` with a bar, then close it.

    The one query step of ``espew verify`` and ``espew trace``: both pass their
    audit flags as an ``AuditOptions`` among ``audit_args`` (:mod:`.audit_flags`),
    and an HTTP suspect's connections are closed whatever the audit raised. The bar
    names the deadline when one is set and warns when the audit will not fit.
    """
    suspect, name = resolve_embedder(suspect_spec(args), **endpoint_options(args))
    deadline = getattr(args, "deadline", None)
    shown = f"querying {name}" + ("" if deadline is None else f" (deadline {deadline:g} s)")
    try:
        with progress(n_queries, shown, "query", not args.no_progress) as bar:
            advance = announcing_last(bar, f"scoring {name}'s answers: running the rank test")
            return audit(
                suspect,
                *audit_args,
                progress=warning_past_deadline(advance, deadline, clock=time.monotonic),
                **options,
            )
    finally:
        close = getattr(suspect, "close", None)
        if callable(close):
            close()
