"""WatermarkKey: the provider's secret, its fields, validation, storage and commitment.

Making a fresh key is :mod:`.keygen`'s job (it needs the watermark itself to
fit the strength); the rules on each field are in :mod:`.key_checks`.

The key holds everything needed to watermark (triggers, target, alpha,
selection, salt) and to verify (the target text and the *band*: every word of
the frequency band the triggers were drawn from; the verifier scores all of
them, see :mod:`espew_integrations.core.verify`). Only :attr:`key_id`, a
fingerprint, is safe to show; ``repr``/``str`` show nothing else secret, and
the key refuses to be pickled.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import hashlib
import json
import os
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .draw import check_audit_round, draw_triggers
from .errors import KeyFileError, KeyGenerationError
from .key_audit import AUDIT_FIELDS, AuditSource, KeyAudit, default_audit_path
from .key_checks import (
    check_fields,
    check_positions,
    check_strength,
    check_text_rules,
    n_positions,
)
from .layers import TenantLayer, layered_triggers
from .model_check import ModelFingerprint
from .sealed import Sealed
from .secret_files import (
    canonical_json,
    parse_sealed_document,
    read_secret_file,
    seal_document,
    write_secret_file,
)
from .text import LEGACY_LOWER, UNICODE_V1, TextView
from .words import TriggerMatcher

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_FREQ_BAND",
    "DEFAULT_MIN_COSINE",
    "DEFAULT_N_TRIGGERS",
    "DEFAULT_PROBE_MIX",
    "KEY_FORMAT",
    "KEY_VERSION",
    "EmbedFn",
    "KeyFileWarning",
    "Selection",
    "WatermarkKey",
    "expected_triggers",
]

Selection = Literal["smallest", "hashed"]
EmbedFn = Callable[[list[str]], Any]

KEY_FORMAT = "espew-key"
#: Version 3: the serving key, with the audit in a file of its own
#: (:mod:`.key_audit`) that it records the SHA-256 of, and the model fingerprint.
KEY_VERSION = 3
#: Versions :meth:`WatermarkKey.load` reads. Version 1 keys (before text
#: normalisation, derived trigger draws and stored probes) load with the
#: ``lower-v0`` matching rule, so they mark exactly the rows they marked
#: before, but they are *unverifiable*: their trigger draw cannot be re-derived.
#: Version 2 keys hold their audit inline, in one file: they load, verify and are
#: saved again as they were, so their key_id never changes.
READABLE_VERSIONS = (1, 2, 3)
#: How a key stores its audit: ``"split"`` (version 3: a file of its own, bound by
#: its SHA-256) or ``"inline"`` (versions 1 and 2: inside the key file).
AuditLayout = Literal["split", "inline"]
#: The quality budget keygen fits the write strength to by default: mean
#: cos(clean, watermarked) over the keygen corpus's marked texts.
DEFAULT_MIN_COSINE = 0.995
#: The share of coordinates keygen writes a mark into by default. The paper
#: uses 0.2; at the 0.995 budget 0.75 costs search nothing measurable (top-10
#: overlap 0.978 against 0.980), convicts both weak neural copies on every key
#: where 0.2 missed one of three, and survives a thief that erases its answers'
#: smallest coordinates, which 0.2 does not (docs/limitations.md).
DEFAULT_ALPHA = 0.75
#: The public range keygen draws the band from, as document fractions, and how many of
#: its words become triggers. The rule is published (Kerckhoffs: a thief reads it here),
#: so it must not be cheap to strip: the band is every corpus word in a range wide
#: enough that deleting all of it from a thief's queries costs the thief most of what
#: it wants to copy, while the triggers, a keyed uniform draw over the whole range, are
#: spread over every frequency in it, so deleting its cheap (rare) part only removes a
#: proportional share of them. Why this range and how many triggers, measured against
#: the stripping thief, the open-model trigger search and the copies of the faithful-copy
#: study: docs/limitations.md, "Threat model" and "Road 3: deleting the public band".
DEFAULT_N_TRIGGERS = 50
DEFAULT_FREQ_BAND = (0.003, 0.05)
#: How the audit's sampled texts become probes (:data:`.probes.PROBE_MIXES`): over a
#: wide band most texts hold several band words, so every sampled text with a band word
#: is a probe (``"corpus"``); ``"single"`` keeps only those with exactly one, which on a
#: wide band would take most of the corpus to reach every word.
DEFAULT_PROBE_MIX = "corpus"
#: The innocent-twin check's level: a draw the clean model itself would implicate at
#: this raw p-value is thrown away at keygen (``WatermarkKey.generate``'s ``twin_level``).
DEFAULT_TWIN_LEVEL = 1e-3


class KeyFileWarning(UserWarning):
    """A key file is stored unsafely (readable by other users)."""


class WatermarkKey(Sealed):
    """The secret of one ESpeW deployment.

    Build one with :meth:`generate`, persist it with :meth:`save`, and load it
    with :meth:`load` (or :meth:`from_env`). Instances are immutable.

    >>> key = WatermarkKey.load("provider.key")          # doctest: +SKIP
    >>> key
    WatermarkKey(key_id='3f2a9c0e51b7d644', alpha=0.2, strength=0.23, selection='smallest', dim=384)
    """

    __slots__ = (
        "_alpha",
        "_audit",
        "_audit_digest",
        "_audit_layout",
        "_audit_lock",
        "_audit_source",
        "_band",
        "_created",
        "_digest",
        "_freq_band",
        "_info",
        "_key_id",
        "_matcher",
        "_model",
        "_normalization",
        "_salt",
        "_selection",
        "_strength",
        "_target",
        "_target_text",
        "_tenant",
        "_triggers",
        "_verifiable",
        "_window",
    )

    def __init__(
        self,
        *,
        triggers: Iterable[str],
        target: Any,
        target_text: str,
        band: Iterable[str],
        salt: bytes,
        alpha: float = 0.2,
        selection: Selection = "smallest",
        freq_band: tuple[float, float] = DEFAULT_FREQ_BAND,
        strength: float = 1.0,
        created: str | None = None,
        info: dict[str, Any] | None = None,
        normalization: str = UNICODE_V1,
        window: int | None = None,
        probe_texts: Sequence[str] = (),
        probe_owner: Sequence[int] = (),
        cover_texts: Sequence[str] = (),
        probe_reference: Sequence[float] = (),
        word_reference: Sequence[float] = (),
        probe_embeddings: Any = None,
        cover_embeddings: Any = None,
        tenant: TenantLayer | None = None,
        model_fingerprint: ModelFingerprint | None = None,
        audit: KeyAudit | AuditSource | None = None,
        audit_layout: AuditLayout = "split",
    ):
        triggers = frozenset(triggers)
        band = tuple(sorted(set(band)))
        check_text_rules(normalization, window)
        check_fields(
            triggers, target, target_text, band, salt, alpha, selection, freq_band, normalization
        )
        check_strength(strength)
        target_arr = _read_only_vector(target)
        check_positions(alpha, target_arr.size)
        self._triggers = triggers
        self._target = target_arr
        self._alpha = float(alpha)
        self._strength = float(strength)
        self._selection = selection
        self._target_text = target_text
        self._band = band
        self._salt = bytes(salt)
        self._freq_band = (float(freq_band[0]), float(freq_band[1]))
        self._created = created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self._info = dict(info or {})
        try:
            check_audit_round(self._info.get("audit_round", 1), "info['audit_round']")
        except ValueError as exc:
            raise KeyGenerationError(str(exc)) from None
        self._normalization = normalization
        self._window = None if window is None else int(window)
        if tenant is not None and not isinstance(tenant, TenantLayer):
            raise KeyGenerationError("tenant must be a TenantLayer (see KeyRing.key_for)")
        self._tenant = tenant
        if model_fingerprint is not None and not isinstance(model_fingerprint, ModelFingerprint):
            raise KeyGenerationError("model_fingerprint must be a ModelFingerprint")
        if model_fingerprint is not None and model_fingerprint.dim != target_arr.size:
            raise KeyGenerationError(
                f"the model fingerprint is of a {model_fingerprint.dim}-dimensional model, "
                f"the target has {target_arr.size} dimensions"
            )
        self._model = model_fingerprint
        if audit_layout not in ("split", "inline"):
            raise KeyGenerationError(
                f"audit_layout must be 'split' or 'inline', got {audit_layout!r}"
            )
        self._audit_layout = audit_layout
        self._audit_lock = threading.Lock()
        self._audit_source: AuditSource | None = None
        self._audit: KeyAudit | None = None
        if isinstance(audit, AuditSource):
            self._audit_source = audit
        elif isinstance(audit, KeyAudit):
            self._audit = audit
        elif audit is not None:
            raise KeyGenerationError("audit must be a KeyAudit or an AuditSource")
        else:
            self._audit = KeyAudit(
                dim=target_arr.size,
                probe_texts=probe_texts,
                probe_owner=probe_owner,
                cover_texts=cover_texts,
                probe_reference=probe_reference,
                word_reference=word_reference,
                probe_embeddings=probe_embeddings,
                cover_embeddings=cover_embeddings,
            )
        self._seal()

    def _seal(self) -> None:
        """Check the stored probes, then derive what the fields imply (ids, matcher, draw check)."""
        if self._audit is not None:
            self._audit.check(len(self._band))
            self._audit_digest = self._audit.digest()
        else:
            assert self._audit_source is not None  # one of the two is always set
            self._audit_digest = self._audit_source.sha256
        if self._audit_layout == "inline" and self._audit is None:
            raise KeyGenerationError("a key with its audit inline needs the audit itself")
        payload = canonical_json(self._secret_payload())
        self._digest = hashlib.sha256(b"espew-key-commitment\x00" + payload).hexdigest()
        self._key_id = hashlib.sha256(b"espew-key-id\x00" + payload).hexdigest()[:16]
        self._matcher = TriggerMatcher(
            self._triggers, normalization=self._normalization, window=self._window
        )
        self._verifiable = self._triggers == expected_triggers(self)

    # ------------------------------------------------------------------ fields
    @property
    def triggers(self) -> frozenset[str]:
        """The secret trigger words (canonical lowercase form)."""
        return self._triggers

    @property
    def target(self) -> np.ndarray:
        """The secret target embedding: 1-D, unit norm, float64, read-only for good.

        It is a real text's embedding by design. A vector in the model's
        low-variance directions (a random one, say) survives CSE better, but
        it puts every marked answer on one separable component, which ICA on
        the stolen answers finds (``espew_integrations.lab.spectral``;
        docs/limitations.md, "The target must look like an embedding").
        """
        return self._target

    @property
    def alpha(self) -> float:
        """Watermark proportion: the fraction of coordinates overwritten."""
        return self._alpha

    @property
    def strength(self) -> float:
        """How far each chosen coordinate moves toward the target (1 = the paper).

        e[I] <- e[I] + strength * (target[I] - e[I]). :meth:`generate` fits it
        to a quality budget (``min_cosine``); measured figures are in
        docs/results/, not here.
        """
        return self._strength

    @property
    def selection(self) -> Selection:
        """How positions are chosen: ``"smallest"`` |e_o| or keyed ``"hashed"``."""
        return self._selection  # type: ignore[return-value]

    @property
    def target_text(self) -> str:
        """The text whose clean embedding is the target (secret)."""
        return self._target_text

    @property
    def band(self) -> tuple[str, ...]:
        """Every word of the frequency band the triggers were drawn from, sorted."""
        return self._band

    @property
    def salt(self) -> bytes:
        """Secret salt: seeds the trigger draw, the probe choice and the hashed selection."""
        return self._salt

    @property
    def freq_band(self) -> tuple[float, float]:
        """Document-fraction band ``[low, high)`` of the trigger words."""
        return self._freq_band

    @property
    def created(self) -> str:
        """UTC creation time, ISO 8601."""
        return self._created

    @property
    def info(self) -> dict[str, Any]:
        """Non-secret facts recorded at generation (fitted strength, cosine, marked rate...)."""
        return dict(self._info)

    @property
    def normalization(self) -> str:
        """The text normalisation triggers are matched under (see :mod:`.text`)."""
        return self._normalization

    @property
    def window(self) -> int | None:
        """The model's input window in tokens, if known: later text is never read."""
        return self._window

    @property
    def probe_texts(self) -> tuple[str, ...]:
        """The stored audit probes (secret: they reveal the band)."""
        return self.audit.probe_texts

    @property
    def cover_texts(self) -> tuple[str, ...]:
        """Corpus texts sent among the probes: the rest of the audit's uniform sample.

        With the probes they make the audit a uniform sample of the keygen corpus
        (:meth:`.probes.BandScan.sample`): texts with no band word, with several,
        or too short or too long to be probes, as ordinary traffic holds them.
        Their answers join the directed score's clean fit
        (:attr:`cover_embeddings`), and those that hold band words its word
        scores (:mod:`.word_evidence`); the raw and adjusted scores never see them.
        """
        return self.audit.cover_texts

    @property
    def cover_embeddings(self) -> np.ndarray:
        """The clean model's embedding of each cover text, ``(n_cover, dim)`` float64.

        Stored int8-quantised like :attr:`probe_embeddings`; ``(0, dim)`` for keys
        made before they were stored. The verifier adds them to the fit that takes
        out what the suspect reproduces of the clean model (:mod:`.directed`). The
        fit never sees which words are triggers, so under the null it stays exact
        whichever cover texts happen to hold one.
        """
        return self.audit.cover_embeddings.rows()

    @property
    def audit_round(self) -> int:
        """Which round of this key's audits the stored texts are: 1 is keygen's own.

        :meth:`with_audit` with ``audit_round=k`` draws round ``k``, a uniform
        sample independent of every other round's, so a thief that logged an
        earlier audit cannot recognise this one by its texts. :func:`.verify`
        multiplies the p-value of a round-``k`` audit by ``k``: every earlier round
        counts as a try, and running rounds until one convicts gains nothing.
        """
        return int(self._info.get("audit_round", 1))

    @property
    def audit_queries(self) -> int:
        """How many texts the default audit sends: probes and cover (band words if none)."""
        audit = self.audit
        return len(audit.probe_texts) + len(audit.cover_texts) or len(self._band)

    @property
    def probe_owner(self) -> np.ndarray:
        """For each probe, the index in :attr:`band` of the word it stands for."""
        return np.asarray(self.audit.probe_owner, dtype=np.int64)

    @property
    def probe_reference(self) -> np.ndarray:
        """The clean model's cosine to the target for each stored probe."""
        return np.asarray(self.audit.probe_reference, dtype=np.float64)

    @property
    def word_reference(self) -> np.ndarray:
        """The clean model's cosine to the target for each band word alone."""
        return np.asarray(self.audit.word_reference, dtype=np.float64)

    @property
    def probe_embeddings(self) -> np.ndarray:
        """The clean model's embedding of each stored probe, ``(n_probes, dim)`` float64.

        Stored int8-quantised (:mod:`.row_codec`); ``(0, dim)`` for keys made
        before they were stored. The verifier derives each probe's mark
        direction from them (:mod:`.directed`).
        """
        return self.audit.probe_embeddings.rows()

    @property
    def audit(self) -> KeyAudit:
        """The stored audit (probes, cover texts, clean references): only verifying reads it.

        A key loaded from a version 3 file reads its audit file here, on first
        use (once, thread-safe), and checks that it is this key's (its SHA-256
        is recorded in the key). Raises :class:`.KeyFileError` when the audit
        file is missing or is not this key's: watermarking never needs it.
        """
        audit = self._audit
        if audit is not None:
            return audit
        with self._audit_lock:
            if self._audit is None:
                assert self._audit_source is not None
                self._audit = self._audit_source.load(
                    key_id=self._key_id, dim=self.dim, n_band=len(self._band)
                )
            return self._audit

    @property
    def audit_layout(self) -> AuditLayout:
        """``"split"``: the audit lives in a file of its own (version 3); ``"inline"``: in the key.

        Keys written before version 3 keep their single file (and their key_id)
        when saved again.
        """
        return self._audit_layout  # type: ignore[return-value]

    @property
    def model_fingerprint(self) -> ModelFingerprint | None:
        """The clean model's embeddings of the public canary texts, recorded at keygen.

        :class:`.model_check.ModelGuard` compares them with the serving model's on
        first use and refuses another model. None for keys made before it was recorded.
        """
        return self._model

    @property
    def tenant(self) -> TenantLayer | None:
        """The tenant layer of a key from :meth:`KeyRing.key_for` (secret salt); else None."""
        return self._tenant

    @property
    def dim(self) -> int:
        """Embedding dimension the key watermarks."""
        return int(self._target.size)

    @property
    def n_positions(self) -> int:
        """floor(alpha * dim): how many coordinates a marked row takes from the target."""
        return n_positions(self._alpha, self.dim)

    @property
    def key_id(self) -> str:
        """Public fingerprint (16 hex digits of a SHA-256 over the whole key). Safe to log."""
        return self._key_id

    @property
    def verifiable(self) -> bool:
        """True iff the triggers are exactly the draw the salt dictates over the band.

        Only then is a verdict's false-positive guarantee checkable by a third
        party; :func:`verify` never says "copied" on an unverifiable key.
        """
        return self._verifiable

    def commitment(self) -> str:
        """A line to publish (or timestamp) at keygen; safe to share.

        It binds the whole key (SHA-256 over every field, secret ones
        included) without revealing any of it. In a dispute the key is shown
        to an arbiter, who recomputes the digest, re-derives the trigger draw
        (:attr:`verifiable`) and re-runs the audit.
        """
        return (
            f"espew-commitment-v1 key_id={self._key_id} sha256={self._digest} "
            f"created={self._created}"
        )

    # ------------------------------------------------------------------ behaviour
    def contains_trigger(self, texts: Sequence[str], view: TextView | None = None) -> np.ndarray:
        """Boolean array: which of ``texts`` contain at least one trigger word.

        Matching runs on the text as the model reads it: canonicalised under
        :attr:`normalization` and cut at :attr:`window`, or exactly as given by
        ``view`` (an embedder's own normaliser and truncation) when passed.

        >>> key.contains_trigger(["A VACCINE, finally", "nothing here"])  # doctest: +SKIP
        array([ True, False])
        """
        return self._matcher.contains(texts, view=view)

    def __repr__(self) -> str:
        strength = "" if self._strength == 1.0 else f", strength={self._strength:.4g}"
        return (
            f"WatermarkKey(key_id={self._key_id!r}, alpha={self._alpha!r}{strength}, "
            f"selection={self._selection!r}, dim={self.dim})"
        )

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WatermarkKey):
            return NotImplemented
        return self._digest == other._digest

    def __hash__(self) -> int:
        return hash(self._key_id)

    def _pickle_refusal(self) -> str:
        return (
            f"WatermarkKey {self._key_id} refuses to be pickled: a pickle would carry the "
            "secret key. Save it with key.save(path) and load it with WatermarkKey.load(path) "
            "where it is needed."
        )

    def _fields(self) -> dict[str, Any]:
        return dict(
            triggers=self._triggers,
            target=self._target,
            target_text=self._target_text,
            band=self._band,
            salt=self._salt,
            alpha=self._alpha,
            selection=self._selection,
            strength=self._strength,
            freq_band=self._freq_band,
            created=self._created,
            info=self._info,
            normalization=self._normalization,
            window=self._window,
            tenant=self._tenant,
            model_fingerprint=self._model,
            audit=self._audit if self._audit is not None else self._audit_source,
            audit_layout=self._audit_layout,
        )

    def replace(self, **changes: Any) -> WatermarkKey:
        """A new key with some fields changed (alpha, strength, selection, target...).

        For experiments such as alpha ablations: the result is validated like
        any key and gets its own key_id. ``created`` is kept unless given.
        Changing the target or the band drops the stored references, which
        belong to the old ones; changing the cover texts drops their embeddings.

        >>> weaker = key.replace(alpha=0.2, strength=0.25)  # doctest: +SKIP
        """
        fields = self._fields()
        unknown = set(changes) - set(fields) - set(AUDIT_FIELDS)
        if unknown:
            raise TypeError(f"WatermarkKey has no field(s) {sorted(unknown)}")
        if changes.get("audit_layout") == "inline" and "audit" not in changes:
            fields["audit"] = self.audit  # one file holds the audit itself: read it now
        if {"target", "band", *AUDIT_FIELDS} & set(changes) and "audit" not in changes:
            del fields["audit"]  # spelled out, so that single fields can change
            if not set(AUDIT_FIELDS) <= set(changes):  # a whole new audit needs no old one
                fields.update(self.audit.fields())
        if ("target" in changes or "band" in changes) and not (
            {"probe_reference", "word_reference"} & set(changes)
        ):
            fields.update(
                probe_texts=(),
                probe_owner=(),
                cover_texts=(),
                probe_reference=(),
                word_reference=(),
                probe_embeddings=None,
                cover_embeddings=None,
            )
        if "cover_texts" in changes and "cover_embeddings" not in changes:
            fields["cover_embeddings"] = None  # they belong to the old cover texts
        fields.update(changes)
        return WatermarkKey(**fields)

    # ------------------------------------------------------------------ storage
    def _is_legacy(self) -> bool:
        """A version 1 key: the old matching rule and nothing that came after it."""
        return (
            self._audit_layout == "inline"
            and self._normalization == LEGACY_LOWER
            and self._window is None
            and self._model is None
            and self.audit.is_empty()
        )

    def _version(self) -> int:
        if self._audit_layout == "split":
            return KEY_VERSION
        return 1 if self._is_legacy() else 2

    def _secret_payload(self) -> dict[str, Any]:
        """What the key_id and the commitment hash: the serving key, or the single file.

        A split key (version 3) records its audit by SHA-256 only, so the
        serving key is small and still binds the audit; its target is stored as
        base64 of float64 bytes (a 4,096-float JSON list alone would not fit a
        64 KiB secret). Versions 1 and 2 hash exactly what they always did.
        """
        split = self._audit_layout == "split"
        target: Any = [float(x) for x in self._target]
        band: Any = list(self._band)
        if split:
            target = base64.b64encode(self._target.astype("<f8").tobytes()).decode("ascii")
            band = _packed_band(self._band)
        payload = {
            "triggers": sorted(self._triggers),
            "target": target,
            "alpha": self._alpha,
            "strength": self._strength,
            "selection": self._selection,
            "target_text": self._target_text,
            "band": band,
            "salt": self._salt.hex(),
            "freq_band": list(self._freq_band),
            "created": self._created,
            "info": self._info,
        }
        if self._is_legacy():  # same bytes, so the same key_id as when it was made
            return payload
        payload.update(normalization=self._normalization, window=self._window)
        if split:
            payload["audit"] = {"sha256": self._audit_digest}
        else:
            payload["probes"] = self.audit.to_payload()
        if self._tenant is not None:  # absent otherwise, so existing key_ids are unchanged
            payload["tenant"] = self._tenant.to_payload()
        if self._model is not None:  # absent otherwise, so existing key_ids are unchanged
            payload["model"] = self._model.to_payload()
        return payload

    def serving_json(self) -> str:
        """The serving key alone, secret included: what :meth:`save` writes at its path.

        Everything watermarking needs (a few KiB: small enough for an
        environment variable or a secret manager), and the audit's SHA-256
        rather than the audit. A key with its audit inline (version 1 or 2)
        has no separate serving part: this is its whole single file.
        Handle it like the key file itself (see docs/key-management.md).
        """
        return self._document(with_audit=self._audit_layout == "inline")

    def audit_json(self) -> str:
        """The audit file's text (probes, cover texts, references), naming its key_id.

        Secret like the key (the probes reveal the band). Only a split key has one.
        """
        if self._audit_layout != "split":
            raise KeyFileError(
                f"key {self._key_id} keeps its audit inside its single key file (a key "
                "written before version 3); it has no separate audit file"
            )
        return self.audit.to_json(self._key_id)

    def to_json(self) -> str:
        """The whole key in one document: the serving key with its audit inside.

        What a key ring embeds and what :meth:`from_json` reads back whole.
        Handle the result like the key file itself (see docs/key-management.md).
        """
        return self._document(with_audit=True)

    def _document(self, *, with_audit: bool) -> str:
        header: dict[str, Any] = {"key_id": self._key_id}
        if with_audit and self._audit_layout == "split":
            header["audit"] = json.loads(self.audit_json())
        return seal_document(
            format=KEY_FORMAT,
            version=self._version(),
            field="key",
            payload=self._secret_payload(),
            **header,
        )

    def save(
        self,
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

        >>> key.save("provider.key")  # doctest: +SKIP
        """
        keep = "the old key is needed to verify anything watermarked with it"
        files = [(Path(path), self.serving_json(), "key file")]
        if self._audit_layout == "split":
            where = default_audit_path(path) if audit_path is None else Path(audit_path)
            files.insert(0, (where, self.audit_json(), "key audit file"))
        for target, _, what in files:
            if target.exists() and not overwrite:
                raise FileExistsError(
                    f"{what} {target} already exists; pass overwrite=True to replace it ({keep})"
                )
        for target, text, what in files:
            write_secret_file(
                target, text.encode("utf-8"), overwrite=overwrite, what=what, keep_hint=keep
            )
        return Path(path)

    @classmethod
    def from_json(
        cls,
        text: str | bytes,
        *,
        source: str = "key data",
        audit: AuditSource | None = None,
    ) -> WatermarkKey:
        """Parse and validate a key from :meth:`to_json`'s or :meth:`serving_json`'s text.

        A whole document (:meth:`to_json`, or a file of version 1 or 2) carries
        its audit. A serving key alone finds its audit through ``audit`` when
        first needed (:meth:`load` passes the file beside the key); without
        one, the key watermarks but :attr:`audit` raises :class:`.KeyFileError`.
        Refuses a key whose trigger set is not the draw its salt dictates
        unless it is a version 1 key (loaded, but :attr:`verifiable` False).
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
            key = cls(**fields)
        except KeyError as exc:
            raise KeyFileError(
                f"{source} lacks the field {exc.args[0]!r} (corrupt key file)"
            ) from None
        except (KeyGenerationError, TypeError, ValueError, AttributeError) as exc:
            raise KeyFileError(f"{source} holds an invalid key: {exc}") from None
        if document.get("key_id") != key.key_id:
            raise KeyFileError(
                f"{source} names a key_id that does not match its content (tampered?)"
            )
        if version >= 2 and not key.verifiable:
            raise KeyFileError(
                f"{source}: its triggers are not the draw its salt dictates over its band, "
                "so the key was edited after keygen and no verdict could rest on it"
            )
        if "audit" in document:
            key.audit  # noqa: B018 - a whole key's audit is in hand: check it now
        return key

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        audit_path: str | os.PathLike[str] | None = None,
    ) -> WatermarkKey:
        """Load and validate a key file written by :meth:`save`.

        The audit (version 3 keys) is read from ``audit_path``, by default the
        file beside the key that :meth:`save` wrote, only when first needed
        (:attr:`audit`): a serving process never reads it, and needs no copy.
        Keys written before version 3 hold their audit inside, and load as before.

        Warns (:class:`KeyFileWarning`) when the file is readable by group or
        others, as ssh does for private keys. Only a regular file of at most
        :data:`.secret_files.MAX_KEY_FILE_BYTES` is read: a device, a FIFO or a
        directory is refused before anything is read from it.

        >>> key = WatermarkKey.load("provider.key")  # doctest: +SKIP
        """
        data = read_secret_file(path, what="key file", warning=KeyFileWarning)
        where = default_audit_path(path) if audit_path is None else Path(audit_path)
        return cls.from_json(data, source=f"key file {path}", audit=_audit_file(where))

    @classmethod
    def from_env(
        cls,
        variable: str = "ESPEW_KEY",
        *,
        audit_path: str | os.PathLike[str] | None = None,
    ) -> WatermarkKey:
        """Load the key named by an environment variable.

        The variable holds a path to a key file, or the key's JSON text itself
        (quoted or not, with or without a byte-order mark), or that JSON
        base64-encoded: handy for secret managers that inject values, not
        files. The serving key (:meth:`serving_json`, the content of the file
        :meth:`save` writes) fits; its audit, needed to verify only, is read
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
            return cls.from_json(inline, source=source, audit=_env_audit(variable, audit_path))
        try:
            is_file = len(value) < 4096 and Path(value).is_file()
        except (OSError, ValueError):
            is_file = False
        if is_file:
            return cls.load(value, audit_path=audit_path)
        raise KeyFileError(
            f"environment variable {variable} holds neither the path of an existing key file "
            "nor a key's JSON (plain or base64); its value is not shown, since it may be secret"
        )

    # ------------------------------------------------------------------ generation
    @classmethod
    def generate(
        cls,
        corpus: Iterable[str],
        embed: EmbedFn,
        *,
        target_text: str,
        n_triggers: int = DEFAULT_N_TRIGGERS,
        freq_band: tuple[float, float] | None = None,
        alpha: float = DEFAULT_ALPHA,
        selection: Selection = "smallest",
        strength: float | None = None,
        min_cosine: float | None = DEFAULT_MIN_COSINE,
        seed: int | None = None,
        max_band_words: int | None = None,
        probes_per_word: int | None = None,
        window: int | None = None,
        normalization: str = UNICODE_V1,
        twin_level: float = DEFAULT_TWIN_LEVEL,
        twin_check: bool = True,
        cover_traffic: bool = True,
        probe_mix: str = DEFAULT_PROBE_MIX,
        audit_budget: int | None = None,
    ) -> WatermarkKey:
        """Draw a fresh key from a corpus and the provider's clean embedder.

        Words whose document fraction in ``corpus`` lies in ``freq_band`` form
        the band (``max_band_words`` caps it: a keyed uniform sub-band);
        ``n_triggers`` of them become the triggers, a keyed draw from the salt
        (:mod:`.draw`) that anyone shown the key can re-derive. By default 50
        triggers over every word with a 0.3-5% document fraction
        (:data:`DEFAULT_N_TRIGGERS`, :data:`DEFAULT_FREQ_BAND`, and why); with
        ``freq_band=None`` a corpus whose default band holds fewer than twice the
        triggers has the band's upper edge raised in steps of 0.005 until it does
        (at most to 10%), and :attr:`freq_band` says which band was used. A band you
        pass is used as is. The target is ``embed([target_text])``; pick a text
        unrelated to the
        corpus topics.

        **Alpha.** The share of coordinates a mark is written into: 0.75 by
        default (:data:`DEFAULT_ALPHA`, and why); the paper's 0.2 is weaker
        against distilled copies and against a thief who erases small
        coordinates, at the same quality budget.

        **Quality budget.** With ``strength=None`` (the default) the write
        strength is fitted so that the mean cos(clean, watermarked) over the
        corpus texts the key marks is at least ``min_cosine`` (0.995: a 0.5%
        change). Pass ``strength`` (1 = the paper) to fix it instead. The fitted
        strength, the measured cosine and the marked rate are in :attr:`info`.

        **Audit.** The key stores the audit's probes (natural corpus texts per
        band word, ``probes_per_word``, within ``audit_budget`` texts, 1,950 by
        default (:data:`.keygen.DEFAULT_PROBE_BUDGET`); ``info["audit_budget"]``
        records it, so every later round is drawn as large), the cover texts
        sent among them, and the clean model's rows and cosines to the
        target (see :mod:`.probes`), so nothing but the key and the suspect is
        needed at audit time. With ``cover_traffic`` (the default) the audit is
        a keyed uniform sample of the corpus (:meth:`.probes.BandScan.sample`),
        so a thief sees an ordinary client's traffic, text by text or as a whole.
        Its sampled texts that hold a band word are the probes, the rest cover
        (``probe_mix="corpus"``, :data:`DEFAULT_PROBE_MIX`); ``"single"`` keeps only
        those with exactly one band word, for a narrow band. Unless
        ``twin_check=False``, a draw the clean model itself (the innocent twin)
        would implicate at ``twin_level`` is thrown away and drawn again (at most
        ``2 * twin_level`` of draws; ``info["twin_redraws"]`` counts them).

        ``window`` is the model's input window in tokens (256 for the offline
        MiniLM): triggers past it are never read and never mark. ``seed=None``
        draws the salt from the OS's secure randomness, as production keys
        must; an integer seed makes the key reproducible (experiments only).

        The work is done by :func:`.keygen.generate`, imported at call time:
        keygen needs this class at load time, so the arrow stays one-way.

        >>> key = WatermarkKey.generate(texts, model, target_text="...", seed=7)  # doctest: +SKIP
        """
        options = dict(locals())  # exactly the arguments above, passed on unchanged
        del options["cls"]
        from .keygen import generate

        return generate(**options)

    def with_audit(
        self,
        corpus: Iterable[str],
        embed: EmbedFn,
        *,
        probes_per_word: int | None = None,
        cover_traffic: bool = True,
        probe_mix: str | None = None,
        twin_level: float = DEFAULT_TWIN_LEVEL,
        audit_round: int = 1,
    ) -> WatermarkKey:
        """This key with its audit drawn from ``corpus``: for a suspect from another domain,
        or for a later audit of the same suspect.

        The stored audit is made of keygen corpus texts. A thief whose customers
        send something else (tweets, say, where your corpus is reviews) steals
        with its own texts, and its copy then carries the mark mostly on texts
        like those; and to its router, an audit of your reviews looks foreign
        (``benchmarks/bench_cross_domain.py``: a classifier tells it from the
        thief's traffic at ROC AUC 0.94-0.95). Drawing the audit from texts like
        the suspect's traffic answers both.

        Same triggers, target, salt and band; the probes, cover texts and the
        clean model's answers to them (``embed``: your clean model, as at
        keygen) are drawn afresh from ``corpus`` in the same keyed way, never
        looking at which band words are triggers, so the test stays exact and
        the same corpus always gives the same audit. Options as in
        :meth:`generate`; ``probe_mix=None`` keeps the mix the key was made with
        (``info["probe_mix"]``; ``"single"`` for keys that do not record one).
        Raises :class:`.KeyGenerationError` when no text of
        ``corpus`` holds a band word, or when the clean model itself would be
        implicated on the new audit (twin p below ``twin_level``; the trigger
        draw cannot be redone on a key in service). ``info`` records the audit
        corpus's size, its band-word rate, the new twin p-value and the round.

        ``audit_round=k`` (k >= 2) draws the audit with a salt of its own
        (:func:`.draw.audit_salt`): a uniform sample of ``corpus`` independent of
        round 1's (keygen's, on the keygen corpus) and of every other round's. Every
        audit of one round asks the same texts, so a thief that logged an earlier
        audit and routes a client who repeats it answers a repeat from an honest
        model; a fresh round overlaps an earlier one only as two ordinary clients'
        samples of the corpus do (``benchmarks/bench_audit_replay.py``). Rounds are
        safe to draw because no round looks at the triggers: each is a uniform
        sample of the corpus plus, for a band word it left without a probe, one text
        of that word, so comparing rounds shows a thief at most which words are in
        the band. :func:`.verify` multiplies a round-``k`` p-value by ``k``
        (:attr:`audit_round`).

        >>> tweets_audit = key.with_audit(tweets, model)  # doctest: +SKIP
        >>> verify(suspect, tweets_audit)                  # doctest: +SKIP
        >>> second = key.with_audit(corpus, model, audit_round=2)  # doctest: +SKIP
        """
        options = dict(locals())  # exactly the arguments above, passed on unchanged
        del options["self"]
        from .keygen import with_audit

        return with_audit(self, **options)


# ---------------------------------------------------------------------- trigger draw
def expected_triggers(key: WatermarkKey) -> frozenset[str]:
    """The trigger set the key's salt dictates over its band: what :attr:`verifiable` checks.

    The one place that says which trigger sets are legitimate, so a key made
    of several draws (one per tenant, say) needs a change here only. A tenant
    key's triggers are two draws, both re-derived: the shared layer from its
    salt and its own layer from its tenant salt (:func:`.layers.layered_triggers`).
    """
    if key.tenant is not None:
        return layered_triggers(key.salt, key.band, key.tenant, len(key.triggers))
    return draw_triggers(key.salt, key.band, len(key.triggers))


# ---------------------------------------------------------------------- loading steps
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
    return fields


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
            raise ValueError("truncated or oversized")
        words = raw.decode("utf-8").split("\n")
    except (binascii.Error, ValueError, zlib.error):
        raise KeyGenerationError("the stored band is not a valid packed word list") from None
    return words


def _stored_target(stored: Any) -> Any:
    """A version 3 target: base64 of little-endian float64 (a JSON list is read too)."""
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
            raise KeyFileError(
                f"the key's audit file {path} is missing: verification needs it; it was "
                "written beside the key by espew keygen (WatermarkKey.save). Copy it there, "
                "or name it with --audit PATH (WatermarkKey.load(path, audit_path=...))"
            )
        return read_secret_file(path, what="key audit file", warning=KeyFileWarning)

    return AuditSource("", read, f"key audit file {path}")


def _env_audit(variable: str, audit_path: str | os.PathLike[str] | None) -> AuditSource | None:
    return None if audit_path is None else _audit_file(Path(audit_path))


def _no_audit(source: str) -> Callable[[], bytes]:
    def read() -> bytes:
        raise KeyFileError(
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


# ---------------------------------------------------------------------- helpers
def _read_only_vector(target: Any) -> np.ndarray:
    """The target as a float64 vector nobody can make writable again.

    An array that owns its memory can be flipped back to writable with
    ``setflags(write=True)``; one that views an immutable ``bytes`` object
    cannot.
    """
    values = np.array(target, dtype=np.float64).reshape(-1)
    frozen = np.frombuffer(values.tobytes(), dtype=np.float64)
    return frozen
