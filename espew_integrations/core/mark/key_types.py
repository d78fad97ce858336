"""The shapes a key is handled through, below the key class itself.

Watermarking (:mod:`.inject`) and key generation (:mod:`..keys.keygen`,
:mod:`..keys.key_quality`) work on a key, and :class:`~..keys.key.WatermarkKey` in turn
offers generation as a method (:meth:`~..keys.key.WatermarkKey.generate`). If those
modules named the class, the key and its generation would import each other.
So they name what they read of a key, here, as protocols that
:class:`~..keys.key.WatermarkKey` satisfies; the key module sits above them all and
the import graph stays one-way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, TypeVar

import numpy as np

from ..ground.text import TextView
from .design import MarkingDesign

__all__ = ["DrawnKey", "EmbedFn", "MarkingKey", "Selection"]

#: How a mark's coordinates are chosen: the row's smallest ``|e_o|``, or a keyed hash.
Selection = Literal["smallest", "hashed"]
#: A clean embedder: texts in, one row per text out (anything ``np.asarray`` reads).
EmbedFn = Callable[[list[str]], Any]

_Key = TypeVar("_Key", bound="DrawnKey")


class MarkingKey(Protocol):
    """What writing a mark reads of a key (:func:`.inject.watermark`)."""

    @property
    def target(self) -> np.ndarray: ...

    @property
    def salt(self) -> bytes: ...

    @property
    def strength(self) -> float: ...

    @property
    def selection(self) -> Selection: ...

    @property
    def dim(self) -> int: ...

    @property
    def n_positions(self) -> int: ...

    @property
    def design(self) -> MarkingDesign: ...

    def contains_trigger(
        self, texts: Sequence[str], view: TextView | None = None
    ) -> np.ndarray: ...


class DrawnKey(MarkingKey, Protocol):
    """What key generation reads of a key it drew, and how it derives the next one."""

    @property
    def triggers(self) -> frozenset[str]: ...

    @property
    def band(self) -> tuple[str, ...]: ...

    @property
    def info(self) -> dict[str, Any]: ...

    @property
    def normalization(self) -> str: ...

    @property
    def probe_owner(self) -> np.ndarray: ...

    @property
    def probe_reference(self) -> np.ndarray: ...

    @property
    def word_reference(self) -> np.ndarray: ...

    def replace(self: _Key, **changes: Any) -> _Key: ...
