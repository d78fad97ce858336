"""Progress of the library's long calls: ``progress(done, total)`` callbacks.

Key generation and an audit each take minutes on a CPU, and a caller of the
Python API sees nothing meanwhile unless it is told how far along the call is.
:meth:`..keys.key.WatermarkKey.generate`, :meth:`..keys.key.WatermarkKey.with_audit`,
:func:`~..verify.verify_callable` and :func:`~..trace.trace_callable` therefore take
``progress=``: a callable that receives ``(done, total)`` after each step, in texts, with ``done``
never decreasing and ``done <= total``; the last call has ``done == total`` once the
work is done.
Hand it to a tqdm bar, a log line or a UI; it is never required.

A total may be an estimate made up front (keygen cannot know how many texts a
redrawn key embeds again): it grows rather than let ``done`` pass it, and the
last call reports the true count as both.

>>> seen = []
>>> embed = counting_texts(lambda texts: texts, 4, lambda done, total: seen.append((done, total)))
>>> _ = embed(["a", "b", "c"]); _ = embed(["d", "e"])
>>> seen
[(3, 4), (5, 5)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

from .errors import InputTypeError

__all__ = ["Progress", "TextCounter", "check_progress", "counting_texts"]

#: A progress callback: ``progress(done, total)``, both counts of texts.
Progress: TypeAlias = Callable[[int, int], None]


class TextCounter:
    """An embedder that counts the texts it embeds and reports them to a callback."""

    def __init__(self, embed: Callable[[list[str]], Any], total: int, progress: Progress) -> None:
        self._embed = embed
        self.total = max(int(total), 0)
        self.done = 0
        self._progress = progress

    def __call__(self, texts: list[str]) -> Any:
        out = self._embed(texts)
        self.done += len(texts)
        self.total = max(self.total, self.done)
        self._progress(self.done, self.total)
        return out

    def finish(self) -> None:
        """Report the true count as the total: the work is done."""
        if self.total != self.done:
            self.total = self.done
            self._progress(self.done, self.total)

    def __getattr__(self, name: str) -> Any:
        # The wrapped model's own attributes (its view, max_tokens, name...) stay visible.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._embed, name)


def counting_texts(
    embed: Callable[[list[str]], Any], total: int, progress: Progress | None
) -> Callable[[list[str]], Any]:
    """``embed`` reporting ``(texts embedded, estimated total)`` to ``progress``; as is if None."""
    if progress is None:
        return embed
    check_progress(progress)
    return TextCounter(embed, total, progress)


def check_progress(progress: object) -> None:
    """Refuse a ``progress`` that is neither None nor callable, before any work."""
    if progress is not None and not callable(progress):
        raise InputTypeError(
            f"progress must be a callable progress(done, total) or None, got "
            f"{type(progress).__name__}"
        )
