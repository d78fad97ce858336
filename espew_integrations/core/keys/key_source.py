"""Where a key comes from: one rule for every command and every wrapper.

A provider gives a key in one of three forms, and each means the same wherever
a key is read (``espew serve``, ``embed``, ``verify``, ``key check``, the
LangChain, LlamaIndex and Chroma wrappers):

- a key file's path (``--key provider.key``, ``key_path="provider.key"``);
- ``env:VAR`` (``--key env:VAR``, ``key_env="VAR"``): the variable holds a key
  file's path or the key's JSON (plain or base64), as :meth:`WatermarkKey.from_env`
  reads it;
- nothing: then :data:`~..ground.defaults.DEFAULT_KEY_VARIABLE` (``ESPEW_KEY``) is read
  when it is set.

Why one function: before it, ``espew serve`` ignored a set ``ESPEW_KEY`` and
served unmarked vectors, while ``verify`` and ``embed`` used it and the wrappers
read it only when named. A key given in any of these forms is now used, or
refused with an error that names the form, everywhere. A variable that is set
but blank is refused rather than taken for "no key": a provider who meant to set
it must not get unmarked vectors.

>>> KeySource.parse("env:MY_KEY")
KeySource(variable='MY_KEY')
>>> KeySource.parse("keys/provider.key")
KeySource(path='keys/provider.key')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..ground.defaults import DEFAULT_KEY_VARIABLE
from ..ground.errors import InputError, InputTypeError, KeyFileError
from .key import WatermarkKey

__all__ = ["KeySource", "find_key_source", "resolve_key_source"]

_ENV_PREFIX = "env:"


@dataclass(frozen=True, repr=False)
class KeySource:
    """Where one key is: a file (``path``) or an environment variable (``variable``).

    Holds a location, never the key; ``repr`` shows the location only (a path or a
    variable's name is not secret, the variable's value may be).
    """

    path: str | None = None
    variable: str | None = None

    def __post_init__(self) -> None:
        if (self.path is None) == (self.variable is None):
            raise InputError("a KeySource is exactly one of a path or a variable")

    @classmethod
    def parse(cls, source: str | os.PathLike[str]) -> KeySource:
        """``"env:VAR"`` names a variable; any other string, or a path object, a file.

        A path object is always a file, even one named ``env:...``: only the
        command line's text form is parsed.
        """
        if isinstance(source, os.PathLike):
            return cls(path=os.fspath(source))
        if not isinstance(source, str) or not source:
            raise InputTypeError(
                f"a key source is a key file's path or 'env:VAR', got {type(source).__name__}"
            )
        if source.startswith(_ENV_PREFIX):
            return cls(variable=source[len(_ENV_PREFIX) :] or DEFAULT_KEY_VARIABLE)
        return cls(path=source)

    @property
    def location(self) -> dict[str, str]:
        """What a wrapper may persist instead of the key: ``{"key_path": <the path as
        given>}`` or ``{"key_env": <variable name>}``. A path is never made absolute, so
        a persisted collection or pipeline that names a relative path moves with it."""
        if self.variable is not None:
            return {"key_env": self.variable}
        assert self.path is not None
        return {"key_path": Path(self.path).as_posix()}

    def describe(self) -> str:
        """The source as a message names it (never a variable's value)."""
        if self.variable is not None:
            return f"${self.variable}"
        return f"key file {self.path}"

    def load(self, *, audit_path: str | os.PathLike[str] | None = None) -> WatermarkKey:
        """The key this source names, loaded and checked; KeyFileError if it cannot be."""
        if self.variable is not None:
            return WatermarkKey.from_env(self.variable, audit_path=audit_path)
        assert self.path is not None
        return WatermarkKey.load(self.path, audit_path=audit_path)

    def __repr__(self) -> str:
        if self.variable is not None:
            return f"KeySource(variable={self.variable!r})"
        return f"KeySource(path={self.path!r})"


def find_key_source(source: str | os.PathLike[str] | None) -> KeySource | None:
    """Where the key is: ``source`` as given, else ``$ESPEW_KEY``, else None.

    ``None`` means nothing was given and ``ESPEW_KEY`` is unset; the caller says
    what it needs (a command names ``--key``, a wrapper its arguments). A set but
    blank ``ESPEW_KEY`` is a :class:`KeyFileError`, never "no key".
    """
    if source is not None:
        return KeySource.parse(source)
    value = os.environ.get(DEFAULT_KEY_VARIABLE)
    if value is None:
        return None
    if not value.strip():
        raise KeyFileError(
            f"environment variable {DEFAULT_KEY_VARIABLE} is set but blank; set it to a key "
            "file path or to the key's JSON, or unset it"
        )
    return KeySource(variable=DEFAULT_KEY_VARIABLE)


def resolve_key_source(
    source: str | os.PathLike[str] | None,
    *,
    audit_path: str | os.PathLike[str] | None = None,
) -> tuple[WatermarkKey, KeySource] | None:
    """The key ``source`` names (or ``$ESPEW_KEY``) and where it was, or None if neither.

    The one resolver every command and wrapper calls (module docstring).
    """
    found = find_key_source(source)
    if found is None:
        return None
    return found.load(audit_path=audit_path), found
