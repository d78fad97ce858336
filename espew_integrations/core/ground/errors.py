"""Exceptions the library raises. Each message says what was wrong and what to do.

All of them derive from :class:`ESpeWError`, and the input errors also from
``ValueError``/``TypeError`` so code that already catches those keeps working.
So do the errors defined beside the code that raises them
(``textfiles.TextFileError``, ``models.ModelSpecError``,
``http.upstream.UpstreamError``...): ``except ESpeWError``
catches everything the library raises on purpose.
No message ever contains trigger words, target values or the salt.
"""

from __future__ import annotations

__all__ = [
    "ESpeWError",
    "EmbeddingInputError",
    "InputError",
    "InputTypeError",
    "KeyAuditMissingError",
    "KeyFileError",
    "KeyGenerationError",
    "KeyModelMismatchError",
    "ListenError",
    "MarkingError",
    "MissingExtraError",
    "NotADirectoryPathError",
    "OptionsError",
    "OptionsTypeError",
    "PathExistsError",
    "PathMissingError",
    "ServingError",
    "StateError",
    "SuspectError",
]


class ESpeWError(Exception):
    """Base class of every error raised by espew-integrations."""


class InputError(ESpeWError, ValueError):
    """An argument's value is one the library cannot use (the message names it).

    The family's plain input error: raised where no more specific class below says
    more, so that ``except ESpeWError`` and the ``except ValueError`` callers wrote
    before the family existed both catch it.
    """


class InputTypeError(ESpeWError, TypeError):
    """An argument is of a type the library cannot use (the message names the type
    it takes); a ``TypeError`` too, as Python's own wrong-type errors are."""


class OptionsError(InputError):
    """An option of an audit (:class:`..audit.options.AuditOptions`) or of key
    generation is out of its range or not one of its choices.

    Raised by the one validator of each options object, before any slow work and
    before a single text is sent to a suspect.
    """


class OptionsTypeError(OptionsError, TypeError):
    """An option is of the wrong type (a deadline that is no number, a progress that
    is not callable): both an :class:`OptionsError` and a ``TypeError``."""


class StateError(ESpeWError, RuntimeError):
    """An object was used out of its order (a recorder written twice, a commit before
    its batches): a bug of the caller's, never of the data."""


class EmbeddingInputError(ESpeWError, ValueError):
    """Texts or embeddings handed to :func:`~..mark.inject.watermark` are unusable."""


class KeyFileError(ESpeWError, ValueError):
    """A key file is missing, unreadable, corrupt or tampered with."""


class KeyAuditMissingError(KeyFileError):
    """A serving key's audit file is not where it was looked for.

    Only verifying reads the audit, so a serving key without it is a complete
    serving key; ``espew key check`` says so rather than fail.
    """


class KeyGenerationError(ESpeWError, ValueError):
    """A key could not be generated from the given corpus, model and settings."""


class KeyModelMismatchError(ESpeWError, ValueError):
    """A key is used with a model other than the one it was made with.

    Its model fingerprint (:mod:`..keys.model_check`) does not match the model's
    embeddings of the public canary texts: the marks would land in the wrong space.
    """


class SuspectError(ESpeWError, RuntimeError):
    """A suspect embedding service answered in a way that cannot be scored."""


class MarkingError(ESpeWError, ValueError):
    """A key of one marking design (``"words"`` or ``"field"``) was used where only the other works.

    A field key marks every text by where its clean embedding lies, so nothing
    that decides from the text alone (which texts hold a trigger) applies to it;
    key rings and ``trace`` work with word keys only.
    """


class PathExistsError(ESpeWError, FileExistsError):
    """A file or directory the library would write is already there (nothing is
    replaced without being told to); a ``FileExistsError`` too."""


class PathMissingError(ESpeWError, FileNotFoundError):
    """A file the library must read is not there (the message says how to get it);
    a ``FileNotFoundError`` too."""


class NotADirectoryPathError(ESpeWError, NotADirectoryError):
    """A path that must be a private directory is a file, a link or another's; a
    ``NotADirectoryError`` too."""


class ListenError(ESpeWError, OSError):
    """The server cannot listen on the address asked (in use, not this machine's,
    not allowed); an ``OSError`` too."""


class ServingError(ESpeWError, RuntimeError):
    """The server, or the model it serves, cannot do what was asked of it (a model
    that answers the wrong shape, a server that did not start, metrics that are not
    counted); a ``RuntimeError`` too."""


class MissingExtraError(ESpeWError, ModuleNotFoundError):
    """A feature needs a package that is not installed; the message ends with the install line.

    A ``ModuleNotFoundError`` still, so code that already catches ``ImportError``
    keeps working.
    """
