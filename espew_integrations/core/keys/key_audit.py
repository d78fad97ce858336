"""A key's audit: what only the verifier needs, kept apart from what serving needs.

Why a part of its own: the audit (probe texts, cover texts, the clean model's
cosines and int8 rows for them) is megabytes on a real corpus, while watermarking
needs a few kilobytes (salt, triggers, target, strength). Every serving replica
loads the key; only ``verify``, ``trace`` and ``key reaudit`` read the audit. So
:meth:`.key.WatermarkKey.save` writes the audit to a file of its own (by default
the key's path plus :data:`AUDIT_SUFFIX`), and the serving key records the
audit's SHA-256: the audit is bound to its key, and a key's ``key_id`` and
commitment cover it without holding it.

:class:`KeyAudit` holds the fields; :class:`AuditSource` says where a key loaded
without its audit finds it, read on first use (:meth:`.key.WatermarkKey.audit`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ground.errors import KeyFileError, KeyGenerationError
from ..ground.row_codec import QuantizedRows
from ..ground.secret_files import canonical_json, parse_sealed_document, seal_document
from .key_checks import check_probes

__all__ = [
    "AUDIT_FIELDS",
    "AUDIT_FORMAT",
    "AUDIT_SUFFIX",
    "AuditSource",
    "KeyAudit",
    "audit_following",
    "default_audit_path",
    "held_audit",
    "recorded_digest",
]

AUDIT_FORMAT = "espew-key-audit"
AUDIT_VERSION = 1
#: Where :meth:`.key.WatermarkKey.save` writes the audit unless told otherwise:
#: beside the key, ``provider.key`` -> ``provider.key.audit``.
AUDIT_SUFFIX = ".audit"
#: The :class:`.key.WatermarkKey` constructor arguments that make up the audit.
AUDIT_FIELDS = (
    "probe_texts",
    "probe_owner",
    "cover_texts",
    "probe_reference",
    "word_reference",
    "probe_embeddings",
    "cover_embeddings",
)


def default_audit_path(key_path: str | os.PathLike[str]) -> Path:
    """The audit file beside a key file: the key's name plus :data:`AUDIT_SUFFIX`."""
    path = Path(key_path)
    return path.with_name(path.name + AUDIT_SUFFIX)


class KeyAudit:
    """The stored audit of one key: probes, cover texts and the clean references.

    Immutable; built from the constructor fields of :class:`.key.WatermarkKey`
    or from a file's payload. Its :meth:`digest` is what the serving key records.
    """

    __slots__ = (
        "_digest",
        "cover_embeddings",
        "cover_texts",
        "probe_embeddings",
        "probe_owner",
        "probe_reference",
        "probe_texts",
        "word_reference",
    )

    def __init__(
        self,
        *,
        dim: int,
        probe_texts: Sequence[str] = (),
        probe_owner: Sequence[int] = (),
        cover_texts: Sequence[str] = (),
        probe_reference: Sequence[float] = (),
        word_reference: Sequence[float] = (),
        probe_embeddings: Any = None,
        cover_embeddings: Any = None,
    ):
        self.probe_texts = tuple(probe_texts)
        self.probe_owner = tuple(int(i) for i in probe_owner)
        self.cover_texts = tuple(cover_texts)
        if not all(isinstance(t, str) and t for t in self.cover_texts):
            raise KeyGenerationError("cover_texts must be non-empty strings")
        self._digest: str | None = None
        self.probe_reference = tuple(float(x) for x in probe_reference)
        self.word_reference = tuple(float(x) for x in word_reference)
        self.probe_embeddings = stored_rows(probe_embeddings, dim)
        self.cover_embeddings = stored_rows(cover_embeddings, dim)
        if len(self.cover_embeddings) not in (0, len(self.cover_texts)):
            raise KeyGenerationError(
                f"the key stores {len(self.cover_embeddings)} cover embeddings for "
                f"{len(self.cover_texts)} cover texts; they must match one to one"
            )

    def check(self, n_band: int) -> None:
        """The probes agree with each other and with a band of ``n_band`` words."""
        check_probes(
            n_band,
            self.probe_texts,
            self.probe_owner,
            self.probe_reference,
            self.word_reference,
            n_embeddings=len(self.probe_embeddings),
        )

    def fields(self) -> dict[str, Any]:
        """The constructor arguments of :class:`.key.WatermarkKey` this audit stands for."""
        return {name: getattr(self, name) for name in AUDIT_FIELDS}

    def is_empty(self) -> bool:
        """No probe and no reference: a key made without an audit (synthetic, or version 1)."""
        return not (self.probe_texts or self.word_reference)

    def to_payload(self) -> dict[str, Any]:
        """The JSON form (the ``probes`` object of a single-file key, as before the split)."""
        payload: dict[str, Any] = {
            "texts": list(self.probe_texts),
            "owner": list(self.probe_owner),
            "reference": list(self.probe_reference),
            "word_reference": list(self.word_reference),
        }
        if self.cover_texts:  # absent otherwise: older key_ids are unchanged
            payload["cover"] = list(self.cover_texts)
        if len(self.probe_embeddings):  # absent otherwise: older key_ids are unchanged
            payload["embeddings"] = self.probe_embeddings.to_payload()
        if len(self.cover_embeddings):  # absent otherwise: older key_ids are unchanged
            payload["cover_embeddings"] = self.cover_embeddings.to_payload()
        return payload

    @classmethod
    def from_payload(cls, probes: dict[str, Any], dim: int) -> KeyAudit:
        """Parse :meth:`to_payload`'s form (KeyError/ValueError/TypeError if malformed)."""
        fields: dict[str, Any] = dict(
            probe_texts=probes["texts"],
            probe_owner=probes["owner"],
            cover_texts=probes.get("cover", ()),
            probe_reference=probes["reference"],
            word_reference=probes["word_reference"],
        )
        if "embeddings" in probes:
            fields["probe_embeddings"] = QuantizedRows.from_payload(probes["embeddings"])
        if "cover_embeddings" in probes:
            fields["cover_embeddings"] = QuantizedRows.from_payload(probes["cover_embeddings"])
        return cls(dim=dim, **fields)

    def digest(self) -> str:
        """SHA-256 of the canonical payload: what the serving key records and checks.

        Computed once (the audit is immutable): every ``replace`` of a key reuses it.
        """
        if self._digest is None:
            self._digest = hashlib.sha256(canonical_json(self.to_payload())).hexdigest()
        return self._digest

    def to_json(self, key_id: str) -> str:
        """The audit file's text, naming the key it belongs to (``key_id``, public)."""
        return seal_document(
            format=AUDIT_FORMAT,
            version=AUDIT_VERSION,
            field="audit",
            payload=self.to_payload(),
            key_id=key_id,
        )

    def __repr__(self) -> str:
        return f"KeyAudit({len(self.probe_texts)} probes, {len(self.cover_texts)} cover texts)"


@dataclass(frozen=True)
class AuditSource:
    """Where a key loaded without its audit finds it, and what it must hash to.

    ``read`` returns the audit document's text, or raises :class:`KeyFileError`
    saying what is missing and where it was looked for; ``where`` names the
    place in messages (a path or a variable, never content).
    """

    sha256: str
    read: Callable[[], str | bytes]
    where: str

    def load(self, *, key_id: str, dim: int, n_band: int) -> KeyAudit:
        """Read, parse and check the audit: it must be this key's, byte for byte."""
        document, payload = parse_sealed_document(
            self.read(),
            source=self.where,
            format=AUDIT_FORMAT,
            versions=(AUDIT_VERSION,),
            field="audit",
            what="key audit",
        )
        named = document.get("key_id")
        if named != key_id:
            raise KeyFileError(
                f"{self.where} is the audit of key {named}, not of key {key_id}: pass the "
                "audit file that espew keygen wrote beside this key"
            )
        if hashlib.sha256(canonical_json(payload)).hexdigest() != self.sha256:
            raise KeyFileError(
                f"{self.where} does not match key {key_id}'s record of its audit (SHA-256): "
                "it was edited or belongs to another version of the key; restore it from "
                "your backup"
            )
        try:
            audit = KeyAudit.from_payload(payload, dim)
            audit.check(n_band)
        except KeyError as exc:
            raise KeyFileError(f"{self.where} lacks the field {exc.args[0]!r}") from None
        except (KeyGenerationError, TypeError, ValueError, AttributeError) as exc:
            raise KeyFileError(f"{self.where} holds an invalid audit: {exc}") from None
        return audit


def stored_rows(rows: Any, dim: int) -> QuantizedRows:
    """Probe embeddings as stored: kept if already quantised, else quantised once."""
    if rows is None:
        return QuantizedRows.empty(dim)
    stored = rows if isinstance(rows, QuantizedRows) else QuantizedRows.encode(rows)
    if len(stored) and stored.dim != dim:
        raise KeyGenerationError(
            f"the stored probe embeddings have dimension {stored.dim}, the target {dim}"
        )
    return stored


def held_audit(
    audit: KeyAudit | AuditSource | None, dim: int, stored: dict[str, Any]
) -> tuple[AuditSource | None, KeyAudit | None]:
    """What a key holds of its audit, (source, audit): ``audit`` as given (a source is
    read when the audit is first needed), or one built from the ``stored`` fields
    (:data:`AUDIT_FIELDS`) when None."""
    if isinstance(audit, AuditSource):
        return audit, None
    if isinstance(audit, KeyAudit):
        return None, audit
    if audit is not None:
        raise KeyGenerationError("audit must be a KeyAudit or an AuditSource")
    return None, KeyAudit(dim=dim, **{name: stored[name] for name in AUDIT_FIELDS})


def recorded_digest(source: AuditSource | None, audit: KeyAudit | None, n_band: int) -> str:
    """The SHA-256 a key records of its audit (:func:`held_audit`'s pair): the audit's own,
    once checked against a band of ``n_band`` words, or the one its source is bound by."""
    if audit is not None:
        audit.check(n_band)
        return audit.digest()
    assert source is not None  # held_audit holds one of the two
    return source.sha256


def audit_following(
    fields: dict[str, Any], changes: Mapping[str, Any], held: Callable[[], KeyAudit]
) -> dict[str, Any]:
    """A key's constructor ``fields`` with its audit made to follow ``changes``
    (:meth:`.key.WatermarkKey.replace`); ``held()`` reads the key's audit, when needed.

    A key made one file (``audit_layout="inline"``) holds its audit itself; a new
    target, band or single audit field spells the audit out field by field; a new
    target or band drops the references, which belong to the old ones (unless new
    ones are given); new cover texts drop their embeddings.
    """
    fields = dict(fields)
    if changes.get("audit_layout") == "inline" and "audit" not in changes:
        fields["audit"] = held()  # one file holds the audit itself: read it now
    if {"target", "band", *AUDIT_FIELDS} & set(changes) and "audit" not in changes:
        del fields["audit"]  # spelled out, so that single fields can change
        if not set(AUDIT_FIELDS) <= set(changes):  # a whole new audit needs no old one
            fields.update(held().fields())
    if ("target" in changes or "band" in changes) and not (
        {"probe_reference", "word_reference"} & set(changes)
    ):
        fields.update(dict.fromkeys(AUDIT_FIELDS, ()))
        fields.update(probe_embeddings=None, cover_embeddings=None)
    if "cover_texts" in changes and "cover_embeddings" not in changes:
        fields["cover_embeddings"] = None  # they belong to the old cover texts
    return fields
