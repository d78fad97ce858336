"""The rule every object that holds a secret follows (keys, key rings): no copies, no pickles.

Copies return the object itself (it is immutable, and a copy would be one
more place the secret lives), and pickling is refused with a message that says
how to move the secret instead: a pickle would carry it into caches, queues,
logs and object stores that were never meant to hold it.

Each such class spells the rule out in its own ``__copy__``, ``__deepcopy__``
(both return ``self``) and ``__reduce_ex__``, which calls :func:`refuse_pickle`
with what the object is and how to move it.
"""

from __future__ import annotations

from typing import NoReturn

from .errors import InputTypeError

__all__ = ["refuse_pickle"]


def refuse_pickle(what: str, secret: str, how: str) -> NoReturn:
    """Raise the :class:`.errors.InputTypeError` (a TypeError) that stands for a pickle.

    ``what`` names the object by its public id, ``secret`` says what a pickle
    would carry, ``how`` how to move the object instead.
    """
    raise InputTypeError(f"{what} refuses to be pickled: a pickle would carry {secret}. {how}")
