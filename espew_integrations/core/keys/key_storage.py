"""Saving and loading a key: its file formats, the split audit, environment variables.

Kept apart from :mod:`.key` (what a key *is*) because storage is a concern of
its own with rules of its own: key files must stay byte-compatible across
releases (a key's ``key_id`` and commitment hash its stored form), three
versions are read, a version 3 key keeps its audit in a second file bound by
its SHA-256, and a key may arrive through an environment variable.
The functions here take a key (:class:`StoredKey`: what they read of it) or
build one through the key class they are given; :class:`~.key.WatermarkKey`'s
``save``, ``load``, ``to_json``... are one-line calls of them.

Versions: 1 (before text normalisation: loaded with the ``lower-v0`` rule,
unverifiable), 2 (one file, audit inline; saved again as it was, so its key_id
never changes), 3 (the serving key, with the audit in a file of its own).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import numpy as np

from ..ground.defaults import DEFAULT_KEY_VARIABLE
from ..ground.errors import (
    InputError,
    KeyAuditMissingError,
    KeyFileError,
    KeyGenerationError,
    PathExistsError,
)
from ..ground.secret_files import (
    parse_sealed_document,
    read_secret_file,
    seal_document,
    write_secret_file,
)
from ..ground.text import LEGACY_LOWER
from ..mark.compact import unpacked_target
from ..mark.design import design_from_payload, design_names
from ..mark.key_types import DrawnKey
from .key_audit import AuditSource, KeyAudit, default_audit_path
from .layers import TenantLayer
from .model_check import ModelFingerprint

__all__ = [
    "KEY_FORMAT",
    "KEY_VERSION",
    "READABLE_VERSIONS",
    "AuditLayout",
    "KeyFileWarning",
    "StoredKey",
    "audit_json",
    "check_audit_layout",
    "from_env",
    "from_json",
    "key_version",
    "load",
    "save",
    "secret_payload",
    "serving_json",
    "to_json",
]

KEY_FORMAT = "espew-key"
#: Version 3: the serving key, with the audit in a file of its own
#: (:mod:`.key_audit`) that it records the SHA-256 of, and the model fingerprint.
KEY_VERSION = 3
#: Versions :func:`load` reads. Version 1 keys (before text
#: normalisation, derived trigger draws and stored probes) load with the
#: ``lower-v0`` matching rule, so they mark exactly the rows they marked
#: before, but they are *unverifiable*: their trigger draw cannot be re-derived.
#: Version 2 keys hold their audit inline, in one file: they load, verify and are
#: saved again as they were, so their key_id never changes.
READABLE_VERSIONS = (1, 2, 3)
#: How a key stores its audit: ``"split"`` (version 3: a file of its own, bound by
#: its SHA-256) or ``"inline"`` (versions 1 and 2: inside the key file).
AuditLayout = Literal["split", "inline"]


def check_audit_layout(layout: object) -> AuditLayout:
    """``layout`` if it is ``"split"`` (the audit in its own file) or ``"inline"``."""
    if layout not in ("split", "inline"):
        raise KeyGenerationError(f"audit_layout must be 'split' or 'inline', got {layout!r}")
    return layout


class KeyFileWarning(UserWarning):
    """A key file is stored unsafely (readable by other users)."""


class StoredKey(DrawnKey, Protocol):
    """What storing a key reads of it: its fields, its audit and the audit's SHA-256.

    :class:`~.key.WatermarkKey` is the key there is. It calls this module (for its
    key_id, and in its ``save``/``load`` methods), so this module names what it
    reads of a key rather than the class, and builds keys through the class it is
    given (``make_key``), as :mod:`.keygen` does.
    """

    @property
    def target_text(self) -> str: ...

    @property
    def alpha(self) -> float: ...

    @property
    def freq_band(self) -> tuple[float, float]: ...

    @property
    def created(self) -> str: ...

    @property
    def window(self) -> int | None: ...

    @property
    def tenant(self) -> TenantLayer | None: ...

    @property
    def model_fingerprint(self) -> ModelFingerprint | None: ...

    @property
    def audit(self) -> KeyAudit: ...

    @property
    def audit_layout(self) -> AuditLayout: ...

    @property
    def audit_digest(self) -> str: ...

    @property
    def key_id(self) -> str: ...

    @property
    def verifiable(self) -> bool: ...


_Key = TypeVar("_Key", bound=StoredKey)


def _is_legacy(key: StoredKey) -> bool:
    """A version 1 key: the old matching rule and nothing that came after it."""
    return (
        key.audit_layout == "inline"
        and key.normalization == LEGACY_LOWER
        and key.window is None
        and key.model_fingerprint is None
        and key.audit.is_empty()
    )


def key_version(key: StoredKey) -> int:
    """The version of the file ``key`` is written as, whose form its key_id hashes."""
    if key.audit_layout == "split":
        return KEY_VERSION
    return 1 if _is_legacy(key) else 2


def secret_payload(key: StoredKey) -> dict[str, Any]:
    """What the key_id and the commitment hash: the serving key, or the single file.

    A split key (version 3) records its audit by SHA-256 only, so the
    serving key is small and still binds the audit; its target is stored as
    base64 of float64 bytes (a 4,096-float JSON list alone would not fit a
    64 KiB secret), or, for a compact field key, of the float16 values it
    marks with. Versions 1 and 2 hash exactly what they always did.
    """
    split = key.audit_layout == "split"
    target: Any = [float(x) for x in key.target]
    band: Any = list(key.band)
    if split:
        target = base64.b64encode(key.target.astype("<f8").tobytes()).decode("ascii")
        band = _packed_band(key.band)
        target = key.design.stored_target(key.target) or target
    payload = {
        "triggers": sorted(key.triggers),
        "target": target,
        "alpha": key.alpha,
        "strength": key.strength,
        "selection": key.selection,
        "target_text": key.target_text,
        "band": band,
        "salt": key.salt.hex(),
        "freq_band": list(key.freq_band),
        "created": key.created,
        "info": key.info,
    }
    if _is_legacy(key):  # same bytes, so the same key_id as when it was made
        return payload
    payload.update(normalization=key.normalization, window=key.window)
    if split:
        payload["audit"] = {"sha256": key.audit_digest}
    else:
        payload["probes"] = key.audit.to_payload()
    if key.tenant is not None:  # absent otherwise, so existing key_ids are unchanged
        payload["tenant"] = key.tenant.to_payload()
    if key.model_fingerprint is not None:  # absent otherwise, so existing key_ids are unchanged
        payload["model"] = key.model_fingerprint.to_payload()
    design = key.design.payload()
    if design is not None:  # absent for word keys, so their key_ids are unchanged
        payload[key.design.name] = design
    return payload


def serving_json(key: StoredKey) -> str:
    """The serving key alone, secret included: what :func:`save` writes at its path.

    Everything watermarking needs (a few KiB: small enough for an
    environment variable or a secret manager), and the audit's SHA-256
    rather than the audit. A key with its audit inline (version 1 or 2)
    has no separate serving part: this is its whole single file.
    Handle it like the key file itself (see docs/key-management.md).
    """
    return _document(key, with_audit=key.audit_layout == "inline")


def audit_json(key: StoredKey) -> str:
    """The audit file's text (probes, cover texts, references), naming its key_id.

    Secret like the key (the probes reveal the band). Only a split key has one.
    """
    if key.audit_layout != "split":
        raise KeyFileError(
            f"key {key.key_id} keeps its audit inside its single key file (a key "
            "written before version 3); it has no separate audit file"
        )
    return key.audit.to_json(key.key_id)


def to_json(key: StoredKey) -> str:
    """The whole key in one document: the serving key with its audit inside.

    What a key ring embeds and what :func:`from_json` reads back whole.
    Handle the result like the key file itself (see docs/key-management.md).
    """
    return _document(key, with_audit=True)


def _document(key: StoredKey, *, with_audit: bool) -> str:
    header: dict[str, Any] = {"key_id": key.key_id}
    if with_audit and key.audit_layout == "split":
        header["audit"] = json.loads(audit_json(key))
    return seal_document(
        format=KEY_FORMAT,
        version=key_version(key),
        field="key",
        payload=secret_payload(key),
        **header,
    )


def save(
    key: StoredKey,
    path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    audit_path: str | os.PathLike[str] | None = None,
) -> Path:
    """Write the serving key to ``path`` and its audit beside it, both mode 0600.

    The audit goes to ``audit_path``, by default ``path`` plus ``.audit``
    (:func:`.key_audit.default_audit_path`): serving processes need only
    ``path``; verifying needs both. A key written before version 3 is
    written again as its one file. Refuses to replace either file unless
    ``overwrite=True`` (checked for both before either is written); each
    write is atomic (temporary file + rename), so a crash never leaves
    half a key. Returns the key's path.
    """
    keep = "the old key is needed to verify anything watermarked with it"
    files = [(Path(path), serving_json(key), "key file")]
    if key.audit_layout == "split":
        where = default_audit_path(path) if audit_path is None else Path(audit_path)
        files.insert(0, (where, audit_json(key), "key audit file"))
    for target, _, what in files:
        if target.exists() and not overwrite:
            raise PathExistsError(
                f"{what} {target} already exists; pass overwrite=True to replace it ({keep})"
            )
    for target, text, what in files:
        write_secret_file(
            target, text.encode("utf-8"), overwrite=overwrite, what=what, keep_hint=keep
        )
    return Path(path)


def from_json(
    make_key: Callable[..., _Key],
    text: str | bytes,
    *,
    source: str = "key data",
    audit: AuditSource | None = None,
) -> _Key:
    """Parse and validate a key from :func:`to_json`'s or :func:`serving_json`'s text,
    built by ``make_key`` (the key class).

    A whole document (:func:`to_json`, or a file of version 1 or 2) carries
    its audit. A serving key alone finds its audit through ``audit`` when
    first needed (:func:`load` passes the file beside the key); without
    one, the key watermarks but its ``audit`` raises :class:`..ground.errors.KeyFileError`.
    Refuses a key whose trigger set is not the draw its salt dictates
    unless it is a version 1 key (loaded, but ``verifiable`` False).
    """
    document, payload = parse_sealed_document(
        text,
        source=source,
        format=KEY_FORMAT,
        versions=READABLE_VERSIONS,
        field="key",
        what="key",
    )
    version = document["version"]
    try:
        fields = _fields_from_payload(payload, version)
        if version >= 3:
            fields["audit"] = _audit_source(document, payload, source, audit)
        key = make_key(**fields)
    except KeyError as exc:
        raise KeyFileError(f"{source} lacks the field {exc.args[0]!r} (corrupt key file)") from None
    except (KeyGenerationError, TypeError, ValueError, AttributeError) as exc:
        raise KeyFileError(f"{source} holds an invalid key: {exc}") from None
    if document.get("key_id") != key.key_id:
        raise KeyFileError(f"{source} names a key_id that does not match its content (tampered?)")
    if version >= 2 and not key.verifiable:
        raise KeyFileError(
            f"{source}: its triggers are not the draw its salt dictates over its band, "
            "so the key was edited after keygen and no verdict could rest on it"
        )
    if "audit" in document:
        key.audit  # noqa: B018 - a whole key's audit is in hand: check it now
    return key


def load(
    make_key: Callable[..., _Key],
    path: str | os.PathLike[str],
    *,
    audit_path: str | os.PathLike[str] | None = None,
) -> _Key:
    """Load and validate a key file written by :func:`save`, built by ``make_key``.

    The audit (version 3 keys) is read from ``audit_path``, by default the
    file beside the key that :func:`save` wrote, only when first needed
    (the key's ``audit``): a serving process never reads it, and needs no copy.
    Keys written before version 3 hold their audit inside, and load as before.

    Warns (:class:`KeyFileWarning`) when the file is readable by group or
    others, as ssh does for private keys. Only a regular file of at most
    :data:`..ground.secret_files.MAX_KEY_FILE_BYTES` is read: a device, a FIFO or a
    directory is refused before anything is read from it.
    """
    # The warning names the line that called WatermarkKey.load, which calls this.
    data = read_secret_file(path, what="key file", warning=KeyFileWarning, stacklevel=4)
    where = default_audit_path(path) if audit_path is None else Path(audit_path)
    return from_json(make_key, data, source=f"key file {path}", audit=_audit_file(where))


def from_env(
    make_key: Callable[..., _Key],
    variable: str = DEFAULT_KEY_VARIABLE,
    *,
    audit_path: str | os.PathLike[str] | None = None,
) -> _Key:
    """Load the key named by an environment variable, built by ``make_key``.

    The variable holds a path to a key file, or the key's JSON text itself
    (quoted or not, with or without a byte-order mark), or that JSON
    base64-encoded: handy for secret managers that inject values, not
    files. The serving key (:func:`serving_json`, the content of the file
    :func:`save` writes) fits; its audit, needed to verify only, is read
    from ``audit_path`` (or, for a path, from the file beside it).
    No error message ever contains the variable's value.
    """
    value = os.environ.get(variable)
    if not value or not value.strip():
        raise KeyFileError(
            f"environment variable {variable} is not set; set it to a key file path "
            "or to the key's JSON"
        )
    source = f"the key in ${variable}"
    inline = _inline_key_text(value)
    if inline is not None:
        audit = None if audit_path is None else _audit_file(Path(audit_path))
        return from_json(make_key, inline, source=source, audit=audit)
    try:
        is_file = len(value) < 4096 and Path(value).is_file()
    except (OSError, ValueError):
        is_file = False
    if is_file:
        return load(make_key, value, audit_path=audit_path)
    raise KeyFileError(
        f"environment variable {variable} holds neither the path of an existing key file "
        "nor a key's JSON (plain or base64); its value is not shown, since it may be secret"
    )


def _fields_from_payload(payload: dict[str, Any], version: int) -> dict[str, Any]:
    fields: dict[str, Any] = dict(
        triggers=payload["triggers"],
        target=payload["target"],
        target_text=payload["target_text"],
        band=payload["band"],
        salt=bytes.fromhex(payload["salt"]),
        alpha=payload["alpha"],
        strength=payload["strength"],
        selection=payload["selection"],
        freq_band=tuple(payload["freq_band"]),
        created=payload["created"],
        info=payload.get("info") or {},
        audit_layout="split" if version >= 3 else "inline",
    )
    if version >= 3:
        fields["target"] = _stored_target(payload["target"])
        fields["band"] = _unpacked_band(payload["band"])
    if version == 1:  # before normalisation: exactly the old str.lower() rule
        fields["normalization"] = LEGACY_LOWER
        return fields
    fields.update(normalization=payload["normalization"], window=payload["window"])
    if version == 2:
        dim = np.asarray(fields["target"], dtype=np.float64).size
        fields["audit"] = KeyAudit.from_payload(payload["probes"], dim)
    if "tenant" in payload:
        fields["tenant"] = TenantLayer.from_payload(payload["tenant"])
    if "model" in payload:
        fields["model_fingerprint"] = ModelFingerprint.from_payload(payload["model"])
    unknown = sorted(set(payload) - _KEY_FIELDS - set(design_names()))
    if unknown:  # a design's record this process has not registered (or a newer field)
        raise KeyFileError(
            f"the key file records {unknown}, which this process does not know: import "
            "the module that registers its marking design, or upgrade espew-integrations"
        )
    dim = np.asarray(fields["target"], dtype=np.float64).size
    fields["design"] = design_from_payload(payload, dim)
    return fields


#: The fields a key file's payload holds besides its design's record.
_KEY_FIELDS = frozenset(
    {"triggers", "target", "target_text", "band", "salt", "alpha", "strength", "selection"}
    | {"freq_band", "created", "info", "normalization", "window", "audit", "probes"}
    | {"tenant", "model"}
)


#: A packed band unpacks to at most this many bytes: far more than any real band's
#: words, so a hostile key file cannot make the loader inflate a bomb.
_MAX_BAND_BYTES = 1 << 24


def _packed_band(band: Sequence[str]) -> str:
    """A version 3 band: base64 of the zlib-compressed, newline-joined sorted words.

    The band is every word of a wide frequency range (hundreds of words), most
    of a serving key's size as a JSON list; packed, the key fits a secret
    manager's or an environment variable's limit.
    """
    return base64.b64encode(zlib.compress("\n".join(band).encode("utf-8"), 9)).decode("ascii")


def _unpacked_band(stored: Any) -> Any:
    """A version 3 band back as words (a JSON list is read too, and validated as any band)."""
    if not isinstance(stored, str):
        return stored
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(stored, validate=True), _MAX_BAND_BYTES)
        if inflate.unconsumed_tail or not inflate.eof:
            raise InputError("truncated or oversized")
        words = raw.decode("utf-8").split("\n")
    except (binascii.Error, ValueError, zlib.error):
        raise KeyGenerationError("the stored band is not a valid packed word list") from None
    return words


def _stored_target(stored: Any) -> Any:
    """A version 3 target: base64 of little-endian float64, or a compact key's float16
    (:func:`..mark.compact.packed_target`); a JSON list is read too."""
    if isinstance(stored, dict):
        return unpacked_target(stored)
    if not isinstance(stored, str):
        return stored  # validated by the constructor like any target
    try:
        raw = base64.b64decode(stored, validate=True)
    except (binascii.Error, ValueError):
        raise KeyGenerationError("the stored target is not valid base64") from None
    if not raw or len(raw) % 8:
        raise KeyGenerationError("the stored target is not a whole number of float64 values")
    return np.frombuffer(raw, dtype="<f8")


def _audit_source(
    document: dict[str, Any], payload: dict[str, Any], source: str, given: AuditSource | None
) -> KeyAudit | AuditSource:
    """Where a version 3 key's audit comes from: inside the document, or ``given``."""
    recorded = payload["audit"]
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sha256"), str):
        raise KeyGenerationError("the record of the key's audit is malformed")
    digest = recorded["sha256"]
    if "audit" in document:  # a whole key (to_json): the audit rides along
        text = json.dumps(document["audit"])
        return AuditSource(digest, lambda: text, f"{source}'s audit")
    if given is not None:
        return AuditSource(digest, given.read, given.where)
    return AuditSource(digest, _no_audit(source), f"{source}'s audit")


def _audit_file(path: Path) -> AuditSource:
    """An audit read from ``path`` on first use (:func:`_audit_source` adds the digest)."""

    def read() -> bytes:
        if not path.exists():
            raise KeyAuditMissingError(
                f"the key's audit file {path} is missing: verification needs it; it was "
                "written beside the key by espew keygen (WatermarkKey.save). Copy it there, "
                "or name it with --audit PATH (WatermarkKey.load(path, audit_path=...))"
            )
        return read_secret_file(path, what="key audit file", warning=KeyFileWarning)

    return AuditSource("", read, f"key audit file {path}")


def _no_audit(source: str) -> Callable[[], bytes]:
    def read() -> bytes:
        raise KeyAuditMissingError(
            f"{source} is a serving key without its audit: verification needs the audit "
            "file espew keygen wrote beside the key; name it with --audit PATH "
            "(WatermarkKey.load(path, audit_path=...) or from_env(audit_path=...))"
        )

    return read


def _inline_key_text(value: str) -> str | None:
    """The key JSON inside an environment value (BOM, quotes, base64 tolerated), or None."""
    text = value.strip().lstrip("\ufeff").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1].strip()
    if text.startswith("{"):
        return text
    if len(text) < 64:
        return None
    try:
        decoded = base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    decoded = decoded.lstrip("\ufeff").strip()
    return decoded if decoded.startswith("{") else None
