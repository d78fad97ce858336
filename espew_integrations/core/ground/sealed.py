"""The behaviour every object that holds a secret shares (keys, key rings).

Copies return the object itself (it is immutable, and a copy would be one
more place the secret lives), and pickling is refused with a message that says
how to move the secret instead: a pickle would carry it into caches, queues,
logs and object stores that were never meant to hold it.
"""

from __future__ import annotations

from typing import Any

from .errors import InputTypeError

__all__ = ["Sealed"]


class Sealed:
    """Mixin: ``copy``/``deepcopy`` give ``self``; ``pickle`` raises TypeError.

    Subclasses say what they are and how to move them by overriding
    :meth:`_pickle_refusal`.
    """

    __slots__ = ()

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict) -> Any:
        return self

    def __reduce_ex__(self, protocol: object) -> Any:
        raise InputTypeError(self._pickle_refusal())

    def _pickle_refusal(self) -> str:
        return (
            f"{type(self).__name__} refuses to be pickled: a pickle would carry its secret. "
            "Save it to a file and load it where it is needed."
        )
