"""KeyRing: one master secret, one key per API customer, a copy traced to its account.

A provider serving many customers gives each of them a different key, derived
from the ring, so that a stolen copy names the account whose answers trained
it (:func:`..trace.trace_callable`). Every tenant key is an ordinary
:class:`~.key.WatermarkKey` (same target, band, probes, alpha and strength as
the ring), so :func:`~..mark.inject.watermark`, the framework wrappers and
``espew serve`` use it unchanged. Its triggers are two layers
(:mod:`.layers`): the ring's *shared layer*, which proves a copy, plus the
tenant's own layer, drawn from ``HMAC(master, tenant_id)``. A tenant key holds
the shared salt and its own tenant salt, never the master secret, so it
reveals neither the master nor another tenant's layer.

The ring is stored like a key: JSON with a checksum, mode 0600, atomic write,
validated on load (the shared key through :meth:`WatermarkKey.from_json`, so
its trigger draw is re-derived), and neither ``repr`` nor any error shows the
master secret; a ring refuses to be pickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, SupportsIndex

import numpy as np

from ..ground.defaults import (
    DEFAULT_FIELD_SHARED_UNITS,
    DEFAULT_FIELD_TENANT_UNITS,
    DEFAULT_MARKING,
    DEFAULT_SHARED_TRIGGERS,
    DEFAULT_TENANT_TRIGGERS,
)
from ..ground.errors import InputTypeError, KeyFileError, KeyGenerationError
from ..ground.sealed import refuse_pickle
from ..ground.secret_files import (
    MAX_RING_FILE_BYTES,
    canonical_json,
    parse_sealed_document,
    read_secret_file,
    seal_document,
    write_secret_file,
)
from ..mark.design import design_class
from ..mark.field import FieldMark, drawn_mask, field_vector
from ..mark.inject import watermark
from ..mark.key_types import EmbedFn
from ..mark.probes import row_cosines
from .key import WatermarkKey
from .key_options import KeyOptions, check_marking, checked_corpus
from .key_quality import FIT_SAMPLE, embed_marked, fit_strength_on, mean_cosine
from .key_storage import KeyFileWarning
from .layers import SALT_BYTES, TenantLayer, draw_layer_indices, tenant_salt, universe

__all__ = [
    "RING_FORMAT",
    "RING_VERSION",
    "KeyRing",
    "field_ring_options",
    "tenant_field",
    "word_ring_options",
]

RING_FORMAT = "espew-keyring"
RING_VERSION = 1
#: Tenants whose keys' marked texts the strength is fitted on (their union
#: covers most of the band, so the fit speaks for any tenant).
_QUALITY_SAMPLE_TENANTS = 8


class KeyRing:
    """A master secret plus the shared-layer key every tenant key is built on.

    >>> ring = KeyRing.generate(texts, model, target_text="...", seed=7)  # doctest: +SKIP
    >>> key = ring.key_for("customer-42")                                  # doctest: +SKIP
    """

    __slots__ = ("_gaussian", "_master", "_n_tenant", "_ring_id", "_shared", "_universe")

    def __init__(self, *, master: bytes, shared_key: WatermarkKey, n_tenant_triggers: int):
        if not isinstance(master, (bytes, bytearray)) or len(master) != SALT_BYTES:
            raise KeyGenerationError(f"the ring's master secret must be {SALT_BYTES} bytes")
        if not isinstance(shared_key, WatermarkKey):
            raise KeyGenerationError("shared_key must be a WatermarkKey")
        if shared_key.tenant is not None:
            raise KeyGenerationError("a tenant's key cannot be the shared key of a ring")
        if not shared_key.verifiable:
            raise KeyGenerationError(
                "the shared key's triggers are not the draw its salt dictates; a ring needs a "
                "key made by WatermarkKey.generate"
            )
        words = universe(shared_key.salt, shared_key.band, len(shared_key.triggers))
        _check_tenant_count(n_tenant_triggers, len(words))
        self._master = bytes(master)
        self._shared = shared_key
        self._n_tenant = int(n_tenant_triggers)
        self._universe = words
        payload = canonical_json(self._payload())
        self._ring_id = hashlib.sha256(b"espew-ring-id\x00" + payload).hexdigest()[:16]

    # ------------------------------------------------------------------ fields
    @property
    def ring_id(self) -> str:
        """Public fingerprint of the whole ring (16 hex digits). Safe to log."""
        return self._ring_id

    @property
    def shared_key(self) -> WatermarkKey:
        """The shared layer alone, as a key: ``verify(suspect, ring.shared_key)`` convicts
        a copy trained on any tenant's answers (it is what :func:`~..trace.trace_callable` decides
        *copied* on).
        """
        return self._shared

    @property
    def marking(self) -> str:
        """``"words"`` (layers of trigger words) or ``"field"`` (layers of field units)."""
        return self._shared.marking

    @property
    def n_shared_triggers(self) -> int:
        """Size of the shared layer every tenant key carries (words, or field units)."""
        return len(self._shared.triggers)

    @property
    def n_tenant_triggers(self) -> int:
        """Size of each tenant's own layer (words, or field units)."""
        return self._n_tenant

    @property
    def universe(self) -> tuple[str, ...]:
        """The band words (a field ring: the units) tenant layers are drawn from: the band
        minus the shared layer. Secret."""
        return self._universe

    def with_audit(self, corpus: Iterable[str], embed: EmbedFn, **options: Any) -> KeyRing:
        """This ring with its audit drawn from ``corpus`` (:meth:`WatermarkKey.with_audit`).

        Why: :func:`~..trace.trace_callable` asks a suspect the shared key's audit texts; drawn from
        what the accounts sent (``espew serve --traffic-sample``), a copy trained
        on an account's own traffic is asked about texts it learned from. The
        master secret, the triggers and every tenant's key are unchanged: only
        the audit (and so the ring id) is new. ``options`` are ``with_audit``'s
        (``audit_round=2`` for a later round, which verify and trace pay for).
        """
        return KeyRing(
            master=self._master,
            shared_key=self._shared.with_audit(corpus, embed, **options),
            n_tenant_triggers=self._n_tenant,
        )

    # ------------------------------------------------------------------ tenants
    def tenant_layer(self, tenant_id: str) -> TenantLayer:
        """The derivation record a tenant key carries (its salt is secret)."""
        return TenantLayer(
            tenant_id=tenant_id,
            salt=tenant_salt(self._master, tenant_id),
            n_shared=self.n_shared_triggers,
        )

    def key_for(self, tenant_id: str) -> WatermarkKey:
        """The key to serve ``tenant_id`` with: shared layer plus the tenant's own layer.

        Deterministic: the same ring and id always give the same key (same
        ``key_id``). It carries the ring's shared salt and the tenant's derived
        salt, never the master secret.
        """
        layer = self.tenant_layer(tenant_id)
        picked = draw_layer_indices([layer.salt], len(self._universe), self._n_tenant)[0]
        triggers = self._shared.triggers | {self._universe[i] for i in picked}
        info = self._shared.info
        info.update(
            tenant_id=tenant_id,
            ring_id=self._ring_id,
            shared_triggers=self.n_shared_triggers,
            tenant_triggers=self._n_tenant,
        )
        design = self._shared.design.with_triggers(self._shared.salt, triggers)
        return self._shared.replace(triggers=triggers, tenant=layer, info=info, design=design)

    def layer_indices(self, tenant_ids: Sequence[str]) -> np.ndarray:
        """For each tenant, the indices in :attr:`universe` of its layer: ``(n, m)`` int64.

        What :func:`~..trace.trace_callable` tests; vectorised over tenants (one HMAC and one
        SHAKE call per id in Python).
        """
        salts = [tenant_salt(self._master, t) for t in tenant_ids]
        return draw_layer_indices(salts, len(self._universe), self._n_tenant)

    # ------------------------------------------------------------------ hygiene
    def __repr__(self) -> str:
        return (
            f"KeyRing(ring_id={self._ring_id!r}, shared_triggers={self.n_shared_triggers}, "
            f"tenant_triggers={self._n_tenant}, key_id={self._shared.key_id!r})"
        )

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyRing):
            return NotImplemented
        return self._payload() == other._payload()

    def __hash__(self) -> int:
        return hash(self._ring_id)

    # A ring holds a secret (:mod:`..ground.sealed`): copies are the ring itself, no pickle.
    def __copy__(self) -> KeyRing:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> KeyRing:
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        refuse_pickle(
            f"KeyRing {self._ring_id}",
            "the master secret",
            "Save it with ring.save(path) and load it with KeyRing.load(path).",
        )

    # ------------------------------------------------------------------ storage
    def _payload(self) -> dict[str, Any]:
        return {
            "master": self._master.hex(),
            "tenant_triggers": self._n_tenant,
            "key": json.loads(self._shared.to_json()),
        }

    def to_json(self) -> str:
        """The whole ring, master secret included, as the JSON :meth:`save` writes."""
        return seal_document(
            format=RING_FORMAT,
            version=RING_VERSION,
            field="ring",
            payload=self._payload(),
            ring_id=self._ring_id,
        )

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the ring with mode 0600, atomically; refuses to overwrite unless asked."""
        return write_secret_file(
            path,
            self.to_json().encode("utf-8"),
            overwrite=overwrite,
            what="key ring file",
            keep_hint="the old ring is needed to trace anything served with its keys",
        )

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "key ring data") -> KeyRing:
        """Parse and validate a ring from :meth:`to_json`'s text (KeyFileError if invalid)."""
        document, payload = parse_sealed_document(
            text,
            source=source,
            format=RING_FORMAT,
            versions=(RING_VERSION,),
            field="ring",
            what="key ring",
        )
        try:
            master = bytes.fromhex(payload["master"])
            key = WatermarkKey.from_json(json.dumps(payload["key"]), source=f"{source}'s key")
            ring = cls(master=master, shared_key=key, n_tenant_triggers=payload["tenant_triggers"])
        except KeyError as exc:
            raise KeyFileError(f"{source} lacks the field {exc.args[0]!r} (corrupt)") from None
        except (KeyGenerationError, TypeError, ValueError) as exc:
            raise KeyFileError(f"{source} holds an invalid key ring: {exc}") from None
        if document.get("ring_id") != ring.ring_id:
            raise KeyFileError(f"{source} names a ring_id that does not match its content")
        return ring

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> KeyRing:
        """Load and validate a ring file written by :meth:`save` (warns if others can read it).

        Only a regular file of at most :data:`..ground.secret_files.MAX_RING_FILE_BYTES` is read.
        """
        data = read_secret_file(
            path, what="key ring file", warning=KeyFileWarning, limit=MAX_RING_FILE_BYTES
        )
        return cls.from_json(data, source=f"key ring file {Path(path)}")

    # ------------------------------------------------------------------ generation
    @classmethod
    def generate(
        cls,
        corpus: Iterable[str],
        embed: EmbedFn,
        *,
        n_shared_triggers: int | None = None,
        n_tenant_triggers: int | None = None,
        **key_options: Any,
    ) -> KeyRing:
        """A fresh ring: the shared key from :meth:`WatermarkKey.generate` plus a master secret.

        ``key_options`` are those of :class:`.key_options.KeyOptions` (``target_text``,
        required; ``seed``, ``window``, ``marking``...), but for ``n_triggers`` and
        ``field_marked``: the shared layer has ``n_shared_triggers`` units (a word
        ring: words) and each tenant layer ``n_tenant_triggers`` more, drawn from the
        rest. ``seed`` makes the ring reproducible (experiments only); ``None`` takes
        the master and the salt from the OS.

        **A map ring** (the default, as for a single key) **or a field ring**
        (``marking="field"``): the layers are units (defaults
        :data:`..ground.defaults.DEFAULT_FIELD_SHARED_UNITS` and
        :data:`..ground.defaults.DEFAULT_FIELD_TENANT_UNITS`), the band and word options do
        not apply, and the audit is the single key's (``audit_budget``): every audit
        text scores every unit, so a tenant layer gets no fewer texts than the shared
        one.

        **A word ring** (``marking="words"``): the layers are trigger words (defaults
        :data:`..ground.defaults.DEFAULT_SHARED_TRIGGERS` and
        :data:`..ground.defaults.DEFAULT_TENANT_TRIGGERS`); the band defaults to
        :data:`..ground.defaults.DEFAULT_RING_FREQ_BAND` and the audit to
        :data:`..ground.defaults.DEFAULT_RING_AUDIT_BUDGET` texts, not the single key's.

        **Quality budget.** Customers are served tenant keys, not the shared
        key, and a tenant key marks other texts (those with a word of either
        layer). So unless ``strength`` is given, the strength is fitted again
        after keygen, to ``min_cosine`` over the corpus texts that the keys of
        a sample of tenants mark (:mod:`.key_quality`, the same fit keygen
        uses); the result is in ``ring.shared_key.info``.
        """
        marking, n_tenant, options = _ring_options(
            key_options, n_shared_triggers, n_tenant_triggers
        )
        _check_tenant_count(n_tenant, 2 * n_tenant)  # before any slow work
        texts = checked_corpus(corpus)
        shared = WatermarkKey.generate(texts, embed, options)
        seed = options.seed
        if seed is None:
            master = secrets.token_bytes(SALT_BYTES)
        else:  # a stream of its own, not the one the key's salt came from
            master = np.random.default_rng([int(seed), 0x72696E67]).bytes(SALT_BYTES)
        ring = cls(master=master, shared_key=shared, n_tenant_triggers=n_tenant)
        if options.strength is not None:
            return ring
        rng = np.random.default_rng(None if seed is None else [int(seed), 0x66697421])
        return design_class(marking).refit_ring(ring, texts, embed, rng, options)

    def refit_word_tenants(
        self, texts: list[str], embed: EmbedFn, rng: np.random.Generator, budget: float
    ) -> KeyRing:
        """The same ring with the strength fitted on the texts tenant keys mark.

        Every key of a ring moves a marked text the same way (same positions,
        target and strength), so a text's cosine does not depend on which
        tenant's key marked it; tenants differ only in *which* texts they
        mark. The fit embeds a sample of the texts any of 8 sample tenants
        marks, finds the tenant whose texts lose the most at keygen's
        strength, and fits to the budget on that tenant's texts: a margin
        for the tenants not in the sample.
        """
        keys = [self.key_for(f"quality-sample-{i}") for i in range(_QUALITY_SAMPLE_TENANTS)]
        union = self._shared.replace(triggers=frozenset().union(*(k.triggers for k in keys)))
        sample, clean = embed_marked(embed, texts, union.contains_trigger(texts), rng, union.dim)
        members = [np.flatnonzero(k.contains_trigger(sample)) for k in keys]
        members = [rows for rows in members if rows.size]
        cosines = row_cosines(clean, watermark(sample, clean, union))
        worst = min(members, key=lambda rows: float(cosines[rows].mean()))
        worst_texts, worst_clean = [sample[i] for i in worst], clean[worst]
        strength = fit_strength_on(union, worst_texts, worst_clean, budget)
        fitted_on = (
            f"the texts of the worst of {len(keys)} sample tenants' keys "
            f"({worst.size} of {len(sample)} sampled marked texts)"
        )
        return self._with_strength(strength, budget, fitted_on, union, sample, clean)

    def refit_field_tenants(
        self, texts: list[str], embed: EmbedFn, rng: np.random.Generator, budget: float
    ) -> KeyRing:
        """A field ring with the strength fitted on its tenants' fields.

        Every tenant key marks every text, but each moves it by its own gain, so a
        text's cosine depends on the tenant. The fit embeds a sample of the corpus
        once, finds which of 8 sample tenants' keys costs the most at keygen's
        strength, and fits to the budget with that tenant's key: a margin for the
        tenants not in the sample, as for a word ring.
        """
        keys = [self.key_for(f"quality-sample-{i}") for i in range(_QUALITY_SAMPLE_TENANTS)]
        nonblank = np.fromiter((bool(t.strip()) for t in texts), dtype=bool, count=len(texts))
        sample, clean = embed_marked(embed, texts, nonblank, rng, self._shared.dim)
        worst = min(keys, key=lambda key: mean_cosine(key, sample, clean))
        strength = fit_strength_on(worst, sample, clean, budget)
        fitted_on = (
            f"the field of the worst of {len(keys)} sample tenants' keys "
            f"({len(sample)} sampled corpus texts, at most {FIT_SAMPLE})"
        )
        return self._with_strength(strength, budget, fitted_on, worst, sample, clean)

    def _with_strength(
        self,
        strength: float,
        budget: float,
        fitted_on: str,
        measured: WatermarkKey,
        sample: list[str],
        clean: np.ndarray,
    ) -> KeyRing:
        """The same ring at the fitted ``strength``, its shared key's info saying what the
        fit used and the mean cosine ``measured`` (the key the fit ran on) then keeps."""
        info = self._shared.info
        info.update(
            strength=strength,
            strength_fitted_to_min_cosine=budget,
            strength_fitted_on=fitted_on,
            mean_cosine_marked=mean_cosine(measured.replace(strength=strength), sample, clean),
            cosine_sample_texts=len(sample),
        )
        shared = self._shared.replace(strength=strength, info=info)
        return KeyRing(master=self._master, shared_key=shared, n_tenant_triggers=self._n_tenant)


def tenant_field(field: FieldMark, gaussian: np.ndarray, triggers: frozenset[str]) -> FieldMark:
    """A field ring's tenant field: the shared field's centre, scales and amplitude, with the
    gain vector of every drawn unit of both layers (``triggers``).

    ``q = amplitude * sum_{j in shared | tenant} G[:, j] / sigma_j / sqrt(K_shared + K_tenant)``
    (:func:`..mark.field.field_vector`): the two fields add, each unit with the same weight,
    and the square root keeps the gain's spread at the amplitude, so a tenant key costs
    what a single field key of as many units costs. It is what
    :meth:`..mark.field.FieldMark.matches` re-derives from the salt and the key's triggers, so
    a tenant key loads as verifiable.
    """
    q = field_vector(gaussian, field.sigma, drawn_mask(field.units, triggers), field.amplitude)
    return FieldMark(
        units=field.units,
        amplitude=field.amplitude,
        mu=field.mu,
        sigma=field.sigma,
        q=q,
        compact=field.compact,
    )


def _check_tenant_count(n_tenant: object, n_universe: int) -> None:
    if isinstance(n_tenant, bool) or not isinstance(n_tenant, int) or n_tenant < 1:
        raise KeyGenerationError(f"n_tenant_triggers must be a positive integer, got {n_tenant!r}")
    if n_universe < 2 * n_tenant:
        raise KeyGenerationError(
            f"tenant layers of {n_tenant} words need at least {2 * n_tenant} band words outside "
            f"the shared layer, but there are {n_universe}; widen freq_band or use fewer triggers"
        )


def _ring_options(
    key_options: dict[str, Any], n_shared: int | None, n_tenant: int | None
) -> tuple[str, int, KeyOptions]:
    """The ring's marking, its tenant layers' size and the shared key's options (which
    carry the shared layer's): the design's (:meth:`..mark.design.MarkingDesign.ring_options`).
    """
    for name in ("n_triggers", "field_marked"):
        if name in key_options:
            raise InputTypeError(f"pass n_shared_triggers and n_tenant_triggers, not {name}")
    # A ring marks as a single key does unless told otherwise: a map ring's trace names
    # the account of a ridge copy far below the default level (docs/results/map/README.md).
    marking = key_options.get("marking", DEFAULT_MARKING)
    check_marking(marking)
    tenant, options = design_class(marking).ring_options(key_options, n_shared, n_tenant)
    return marking, tenant, options


def field_ring_options(
    key_options: dict[str, Any], n_shared: int | None, n_tenant: int | None
) -> tuple[int, KeyOptions]:
    """A field ring's tenant layer size and shared key's options: its layers are field units."""
    shared = DEFAULT_FIELD_SHARED_UNITS if n_shared is None else n_shared
    tenant = DEFAULT_FIELD_TENANT_UNITS if n_tenant is None else n_tenant
    return tenant, KeyOptions.of(None, {**key_options, "field_marked": shared})


def word_ring_options(
    key_options: dict[str, Any], n_shared: int | None, n_tenant: int | None
) -> tuple[int, KeyOptions]:
    """A word ring's tenant layer size and shared key's options: trigger words (over the
    ring's own band and audit when ``key_options`` carry the word design's
    :meth:`~..mark.design.MarkingDesign.ring_defaults`)."""
    shared = DEFAULT_SHARED_TRIGGERS if n_shared is None else n_shared
    tenant = DEFAULT_TENANT_TRIGGERS if n_tenant is None else n_tenant
    options = KeyOptions.of(None, {**key_options, "marking": "words", "n_triggers": shared})
    return tenant, options
