"""Exceptions the library raises. Each message says what was wrong and what to do.

All of them derive from :class:`ESpeWError`, and the input errors also from
``ValueError``/``TypeError`` so code that already catches those keeps working.
So do the errors defined beside the code that raises them
(``textfiles.TextFileError``, ``models.ModelSpecError``,
``http.upstream.UpstreamError``, ``MissingExtraError``...): ``except ESpeWError``
catches everything the library raises on purpose.
No message ever contains trigger words, target values or the salt.
"""

from __future__ import annotations

__all__ = [
    "ESpeWError",
    "EmbeddingInputError",
    "KeyAuditMissingError",
    "KeyFileError",
    "KeyGenerationError",
    "KeyModelMismatchError",
    "MarkingError",
    "SuspectError",
]


class ESpeWError(Exception):
    """Base class of every error raised by espew-integrations."""


class EmbeddingInputError(ESpeWError, ValueError):
    """Texts or embeddings handed to :func:`watermark` are unusable."""


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

    Its model fingerprint (:mod:`.model_check`) does not match the model's
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
