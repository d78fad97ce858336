"""WatermarkKey: the provider's secret, its fields and their validation.

The key holds everything needed to watermark (triggers, target, alpha, selection,
salt, its design) and to verify (the target text and the *band* the triggers were
drawn from; :mod:`espew_integrations.core.verify`). Only :attr:`WatermarkKey.key_id`, a
fingerprint, is safe to show; ``repr``/``str`` show nothing else secret, and
the key refuses to be pickled.

What a key *is* lives here; the rest of what it does lives with its concern,
as functions of a key: making a fresh key (:func:`.keygen.generate`,
:func:`.keygen.with_audit`) in :mod:`.keygen`, with its options in
:mod:`.key_options`; saving and loading (:func:`.key_storage.save`,
:func:`.key_storage.load`...) in :mod:`.key_storage`; the rules on each field in
:mod:`.key_checks`; every default in :mod:`..ground.defaults`. The class inherits
nothing: its ``generate``, ``save``, ``load``... are one-line calls of those.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import inspect
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, SupportsIndex

import numpy as np

from ..ground.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_FREQ_BAND,
    DEFAULT_KEY_VARIABLE,
    DEFAULT_SELECTION,
)
from ..ground.draw import draw_triggers
from ..ground.errors import InputTypeError, KeyGenerationError
from ..ground.progress import Progress
from ..ground.sealed import refuse_pickle
from ..ground.secret_files import canonical_json
from ..ground.text import UNICODE_V1, TextView
from ..mark.design import MarkingDesign
from ..mark.key_types import EmbedFn, Selection
from ..mark.words import TriggerMatcher
from . import key_audit, key_checks, key_storage, keygen
from .key_audit import AUDIT_FIELDS, AuditSource, KeyAudit
from .key_options import KeyOptions
from .key_storage import AuditLayout, check_audit_layout
from .layers import TenantLayer, checked_tenant, layered_triggers
from .model_check import ModelFingerprint, check_fingerprint

__all__ = ["WatermarkKey", "expected_triggers"]


class WatermarkKey:
    """The secret of one ESpeW deployment.

    Build one with :meth:`generate` (its options: :class:`.key_options.KeyOptions`),
    persist it with :meth:`save`, and load it with :meth:`load` (or
    :meth:`from_env`). Instances are immutable. The constructor takes the fields
    themselves and the ``design`` (:attr:`design`; the word design when none is given);
    its defaults are keygen's (:mod:`..ground.defaults`), so a key built by hand marks like a
    generated one unless told otherwise.

    >>> WatermarkKey.load("provider.key")  # doctest: +SKIP
    WatermarkKey(key_id='3f2a9c0e51b7d644', alpha=0.75, strength=0.1016,
                 selection='smallest', dim=384)
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
        "_design",
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
        alpha: float = DEFAULT_ALPHA,
        selection: Selection = DEFAULT_SELECTION,
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
        design: MarkingDesign | None = None,
    ):
        stored = {name: value for name, value in locals().items() if name in AUDIT_FIELDS}
        triggers = frozenset(triggers)
        band = tuple(sorted(set(band)))
        key_checks.check_text_rules(normalization, window)
        key_checks.check_fields(
            triggers, target, target_text, band, salt, alpha, selection, freq_band, normalization
        )
        key_checks.check_strength(strength)
        target_arr = key_checks.read_only_vector(target)
        key_checks.check_positions(alpha, target_arr.size)
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
        self._info = key_checks.checked_info(info)
        self._normalization = normalization
        self._window = None if window is None else int(window)
        self._tenant = checked_tenant(tenant)
        self._model = check_fingerprint(model_fingerprint, target_arr.size)
        self._design = key_checks.checked_design(design, band, target_arr.size)
        self._audit_layout = check_audit_layout(audit_layout)
        self._audit_lock = threading.Lock()
        self._audit_source, self._audit = key_audit.held_audit(audit, target_arr.size, stored)
        self._seal()

    def _seal(self) -> None:
        """Check the stored probes, then derive what the fields imply (ids, matcher, draw check)."""
        self._audit_digest = key_audit.recorded_digest(
            self._audit_source, self._audit, len(self._band)
        )
        if self._audit_layout == "inline" and self._audit is None:
            raise KeyGenerationError("a key with its audit inline needs the audit itself")
        payload = canonical_json(key_storage.secret_payload(self))
        self._digest = hashlib.sha256(b"espew-key-commitment\x00" + payload).hexdigest()
        self._key_id = hashlib.sha256(b"espew-key-id\x00" + payload).hexdigest()[:16]
        self._matcher = TriggerMatcher(
            self._triggers, normalization=self._normalization, window=self._window
        )
        drawn = self._triggers == expected_triggers(self)
        self._verifiable = drawn and self._design.matches(self._salt, self._triggers)

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
        the stolen answers finds (``espew_lab.spectral``;
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
        return self._selection

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
        """The text normalisation triggers are matched under (see :mod:`..ground.text`)."""
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
        (:meth:`..mark.probes.BandScan.sample`): texts with no band word, with several,
        or too short or too long to be probes, as ordinary traffic holds them.
        Their answers join the directed score's clean fit
        (:attr:`cover_embeddings`), and those that hold band words its word
        scores (:mod:`..stats.word_evidence`); the raw and adjusted scores never see them.
        """
        return self.audit.cover_texts

    @property
    def cover_embeddings(self) -> np.ndarray:
        """The clean model's embedding of each cover text, ``(n_cover, dim)`` float64.

        Stored int8-quantised like :attr:`probe_embeddings`; ``(0, dim)`` for keys
        made before they were stored. The verifier adds them to the fit that takes
        out what the suspect reproduces of the clean model (:mod:`..audit.directed`). The
        fit never sees which words are triggers, so under the null it stays exact
        whichever cover texts happen to hold one.
        """
        return self.audit.cover_embeddings.rows()

    @property
    def audit_round(self) -> int:
        """Which round of this key's audits the stored texts are: 1 is keygen's own.

        :meth:`with_audit` with ``audit_round=k`` draws round ``k``, a uniform
        sample independent of every other round's, so a thief that logged an
        earlier audit cannot recognise this one by its texts. :func:`..verify.verify_callable`
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

        Stored int8-quantised (:mod:`..ground.row_codec`); ``(0, dim)`` for keys made
        before they were stored. The verifier derives each probe's mark
        direction from them (:mod:`..audit.directed`).
        """
        return self.audit.probe_embeddings.rows()

    @property
    def audit(self) -> KeyAudit:
        """The stored audit (probes, cover texts, clean references): only verifying reads it.

        A key loaded from a version 3 file reads its audit file here, on first
        use (once, thread-safe), and checks that it is this key's (its SHA-256
        is recorded in the key). Raises :class:`..ground.errors.KeyFileError` when the audit
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
        return self._audit_layout

    @property
    def audit_digest(self) -> str:
        """The audit's SHA-256: what a serving key (version 3) records in the audit's place."""
        return self._audit_digest

    @property
    def model_fingerprint(self) -> ModelFingerprint | None:
        """The clean model's embeddings of the public canary texts, recorded at keygen.

        :class:`.model_check.ModelGuard` compares them with the serving model's on
        first use and refuses another model. None for keys made before it was recorded.
        """
        return self._model

    @property
    def tenant(self) -> TenantLayer | None:
        """The tenant layer of a key from :meth:`.keyring.KeyRing.key_for`; else None."""
        return self._tenant

    @property
    def design(self) -> MarkingDesign:
        """How the key marks, is generated, stored and audited (:mod:`..mark.design`)."""
        return self._design

    @property
    def marking(self) -> str:
        """The design's name: ``"field"``, ``"words"`` (or another registered design's)."""
        return self._design.name

    @property
    def dim(self) -> int:
        """Embedding dimension the key watermarks."""
        return int(self._target.size)

    @property
    def n_positions(self) -> int:
        """floor(alpha * dim): how many coordinates a marked row takes from the target."""
        return key_checks.n_positions(self._alpha, self.dim)

    @property
    def key_id(self) -> str:
        """Public fingerprint (16 hex digits of a SHA-256 over the whole key). Safe to log."""
        return self._key_id

    @property
    def verifiable(self) -> bool:
        """True iff the triggers are exactly the draw the salt dictates over the band.

        Only then is a verdict's false-positive guarantee checkable by a third
        party; :func:`~..verify.verify_callable` never says "copied" on an unverifiable key.
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

    # ------------------------------------------------------------------ making, saving, loading
    @classmethod
    def generate(
        cls,
        corpus: Iterable[str],
        embed: EmbedFn,
        options: KeyOptions | None = None,
        *,
        progress: Progress | None = None,
        **overrides: Any,
    ) -> WatermarkKey:
        """A fresh key from a corpus and the provider's clean embedder: :func:`.keygen.generate`
        says how, and :class:`.key_options.KeyOptions` the options and their defaults.

        >>> key = WatermarkKey.generate(texts, model, target_text="...", seed=7)  # doctest: +SKIP
        """
        return keygen.generate(cls, corpus, embed, options, progress=progress, **overrides)

    def with_audit(self, corpus: Iterable[str], embed: EmbedFn, **options: Any) -> WatermarkKey:
        """This key with its audit drawn from ``corpus`` (a suspect from another domain, a
        later round): :func:`.keygen.with_audit`, which lists the options.

        >>> tweets_audit = key.with_audit(tweets, model)  # doctest: +SKIP
        >>> second = key.with_audit(corpus, model, audit_round=2)  # doctest: +SKIP
        """
        return keygen.with_audit(self, corpus, embed, **options)

    def serving_json(self) -> str:
        """The serving key alone, secret included: :func:`.key_storage.serving_json`."""
        return key_storage.serving_json(self)

    def audit_json(self) -> str:
        """The audit file's text, naming its key_id: :func:`.key_storage.audit_json`."""
        return key_storage.audit_json(self)

    def to_json(self) -> str:
        """The whole key, its audit inside, in one document: :func:`.key_storage.to_json`."""
        return key_storage.to_json(self)

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        audit_path: str | os.PathLike[str] | None = None,
    ) -> Path:
        """Write the serving key to ``path`` and its audit beside it, both mode 0600, never
        over a file unless ``overwrite=True``: :func:`.key_storage.save`.

        >>> key.save("provider.key")  # doctest: +SKIP
        """
        return key_storage.save(self, path, overwrite=overwrite, audit_path=audit_path)

    @classmethod
    def from_json(
        cls, text: str | bytes, *, source: str = "key data", audit: AuditSource | None = None
    ) -> WatermarkKey:
        """A key from :meth:`to_json`'s or :meth:`serving_json`'s text, validated:
        :func:`.key_storage.from_json`."""
        return key_storage.from_json(cls, text, source=source, audit=audit)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, audit_path: str | os.PathLike[str] | None = None
    ) -> WatermarkKey:
        """A key file written by :meth:`save`, validated; its audit is read from ``audit_path``
        (by default the file beside it) when first needed: :func:`.key_storage.load`.

        >>> key = WatermarkKey.load("provider.key")  # doctest: +SKIP
        """
        return key_storage.load(cls, path, audit_path=audit_path)

    @classmethod
    def from_env(
        cls,
        variable: str = DEFAULT_KEY_VARIABLE,
        *,
        audit_path: str | os.PathLike[str] | None = None,
    ) -> WatermarkKey:
        """The key an environment variable holds (a path, or the key's JSON, plain or
        base64), never shown in an error: :func:`.key_storage.from_env`."""
        return key_storage.from_env(cls, variable, audit_path=audit_path)

    # ------------------------------------------------------------------ behaviour
    def contains_trigger(self, texts: Sequence[str], view: TextView | None = None) -> np.ndarray:
        """Boolean array: which of ``texts`` contain at least one trigger word.

        Matching runs on the text as the model reads it: canonicalised under
        :attr:`normalization` and cut at :attr:`window`, or exactly as given by
        ``view`` (an embedder's own normaliser and truncation) when passed.

        >>> key.contains_trigger(["A VACCINE, finally", "nothing here"])  # doctest: +SKIP
        array([ True, False])

        The key's design answers: a field key raises :class:`..ground.errors.MarkingError`, for it
        marks every non-blank text by an amount only the clean embedding decides.
        """
        return self._design.trigger_texts(self, texts, view)

    @property
    def matcher(self) -> TriggerMatcher:
        """The trigger words' matcher under the key's normalisation and window (secret)."""
        return self._matcher

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

    # A key holds a secret (:mod:`..ground.sealed`): copies are the key itself, no pickle.
    def __copy__(self) -> WatermarkKey:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> WatermarkKey:
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        refuse_pickle(
            f"WatermarkKey {self._key_id}",
            "the secret key",
            "Save it with key.save(path) and load it with WatermarkKey.load(path) where it is "
            "needed.",
        )

    def _fields(self) -> dict[str, Any]:
        """The constructor's arguments that make this key again (its audit as held: unread)."""
        fields = {name: getattr(self, name) for name in _REBUILT_FIELDS}
        fields["audit"] = self._audit if self._audit is not None else self._audit_source
        return fields

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
            raise InputTypeError(f"WatermarkKey has no field(s) {sorted(unknown)}")
        fields = key_audit.audit_following(fields, changes, lambda: self.audit)
        fields.update(changes)
        return WatermarkKey(**fields)


#: What :meth:`WatermarkKey.replace` reads back from the key's properties of the same
#: names: every argument of the constructor but the audit (the key passes the one it holds).
_REBUILT_FIELDS = set(inspect.signature(WatermarkKey).parameters) - {"audit", *AUDIT_FIELDS}


# ---------------------------------------------------------------------- trigger draw
def expected_triggers(key: WatermarkKey) -> frozenset[str]:
    """The trigger set the key's salt dictates over its band (:attr:`WatermarkKey.verifiable`).

    The one place that says which trigger sets are legitimate, so a key made
    of several draws (one per tenant, say) needs a change here only. A tenant
    key's triggers are two draws, both re-derived: the shared layer from its
    salt and its own layer from its tenant salt (:func:`.layers.layered_triggers`).
    """
    if key.tenant is not None:
        return layered_triggers(key.salt, key.band, key.tenant, len(key.triggers))
    return draw_triggers(key.salt, key.band, len(key.triggers))
