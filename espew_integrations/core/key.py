"""WatermarkKey: the provider's secret, its generation, validation and storage.

The key holds everything needed to watermark (triggers, target, alpha,
selection, salt) and to verify (the target text and the *band*: every word of
the frequency band the triggers were drawn from; the verifier scores all of
them, see :mod:`espew_integrations.core.verify`). Only :attr:`key_id`, a
fingerprint, is safe to show; ``repr``/``str`` show nothing else secret, and
the key refuses to be pickled.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .errors import KeyFileError, KeyGenerationError
from .words import TriggerMatcher, band_words, document_frequencies, is_word

__all__ = ["KEY_FORMAT", "KEY_VERSION", "EmbedFn", "Selection", "WatermarkKey"]

Selection = Literal["smallest", "hashed"]
EmbedFn = Callable[[list[str]], Any]

KEY_FORMAT = "espew-key"
KEY_VERSION = 1
_SELECTIONS = ("smallest", "hashed")
_SALT_BYTES = 32
_UNIT_NORM_TOLERANCE = 1e-6


class WatermarkKey:
    """The secret of one ESpeW deployment.

    Build one with :meth:`generate`, persist it with :meth:`save`, and load it
    with :meth:`load` (or :meth:`from_env`). Instances are immutable.

    >>> key = WatermarkKey.load("provider.key")          # doctest: +SKIP
    >>> key
    WatermarkKey(key_id='3f2a9c0e51b7d644', alpha=0.2, selection='smallest', dim=384)
    """

    __slots__ = (
        "_alpha",
        "_band",
        "_created",
        "_freq_band",
        "_info",
        "_key_id",
        "_matcher",
        "_salt",
        "_selection",
        "_strength",
        "_target",
        "_target_text",
        "_triggers",
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
        freq_band: tuple[float, float] = (0.005, 0.01),
        strength: float = 1.0,
        created: str | None = None,
        info: dict[str, Any] | None = None,
    ):
        triggers = frozenset(triggers)
        band = tuple(sorted(set(band)))
        _check_fields(triggers, target, target_text, band, salt, alpha, selection, freq_band)
        _check_strength(strength)
        target_arr = np.array(target, dtype=np.float64).reshape(-1)
        target_arr.setflags(write=False)
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
        self._key_id = hashlib.sha256(
            b"espew-key-id\x00" + _canonical(self._secret_payload())
        ).hexdigest()[:16]
        self._matcher = TriggerMatcher(triggers)

    # ------------------------------------------------------------------ fields
    @property
    def triggers(self) -> frozenset[str]:
        """The secret trigger words (lowercase)."""
        return self._triggers

    @property
    def target(self) -> np.ndarray:
        """The secret target embedding: 1-D, unit norm, float64, read-only."""
        return self._target

    @property
    def alpha(self) -> float:
        """Watermark proportion: the fraction of coordinates overwritten."""
        return self._alpha

    @property
    def strength(self) -> float:
        """How far each chosen coordinate moves toward the target (1 = the paper).

        e[I] <- e[I] + strength * (target[I] - e[I]). The paper replaces the
        coordinates (strength 1). On isotropic models a weaker write over more
        coordinates buys more evidence per unit of quality lost: with MiniLM,
        alpha 0.2 at strength 0.236 keeps cos 0.995 on marked rows and is still
        detected at p = 7e-18 after CSE (K=50), where the paper's alpha 0.02 at
        the same cosine gives p = 2e-3 (benchmarks/bench_quality_budget.py).
        """
        return self._strength

    @property
    def selection(self) -> Selection:
        """How positions are chosen: ``"smallest"`` |e_o| or keyed ``"hashed"``."""
        return self._selection  # type: ignore[return-value]

    @property
    def target_text(self) -> str:
        """The text whose clean embedding is the target (may name the provider)."""
        return self._target_text

    @property
    def band(self) -> tuple[str, ...]:
        """Every word of the frequency band the triggers were drawn from, sorted."""
        return self._band

    @property
    def salt(self) -> bytes:
        """Secret salt of the ``"hashed"`` selection's HMAC."""
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
        """Non-secret facts recorded at generation (corpus size, twin p-value...)."""
        return dict(self._info)

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

    # ------------------------------------------------------------------ behaviour
    def contains_trigger(self, texts: Sequence[str]) -> np.ndarray:
        """Boolean array: which of ``texts`` contain at least one trigger word.

        >>> key.contains_trigger(["A VACCINE, finally", "nothing here"])  # doctest: +SKIP
        array([ True, False])
        """
        return self._matcher.contains(texts)

    def __repr__(self) -> str:
        strength = "" if self._strength == 1.0 else f", strength={self._strength!r}"
        return (
            f"WatermarkKey(key_id={self._key_id!r}, alpha={self._alpha!r}{strength}, "
            f"selection={self._selection!r}, dim={self.dim})"
        )

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WatermarkKey):
            return NotImplemented
        return self._key_id == other._key_id and _canonical(self._secret_payload()) == _canonical(
            other._secret_payload()
        )

    def __hash__(self) -> int:
        return hash(self._key_id)

    def __copy__(self) -> WatermarkKey:
        return self

    def __deepcopy__(self, memo: dict) -> WatermarkKey:
        return self

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError(
            f"WatermarkKey {self._key_id} refuses to be pickled: a pickle would carry the "
            "secret key. Save it with key.save(path) and load it with WatermarkKey.load(path) "
            "where it is needed."
        )

    def replace(self, **changes: Any) -> WatermarkKey:
        """A new key with some fields changed (alpha, strength, selection, target...).

        For experiments such as alpha ablations: the result is validated like
        any key and gets its own key_id. ``created`` is kept unless given.

        >>> weaker = key.replace(alpha=0.2, strength=0.25)  # doctest: +SKIP
        """
        fields: dict[str, Any] = dict(
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
        )
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"WatermarkKey has no field(s) {sorted(unknown)}")
        fields.update(changes)
        return WatermarkKey(**fields)

    # ------------------------------------------------------------------ storage
    def _secret_payload(self) -> dict[str, Any]:
        return {
            "triggers": sorted(self._triggers),
            "target": [float(x) for x in self._target],
            "alpha": self._alpha,
            "strength": self._strength,
            "selection": self._selection,
            "target_text": self._target_text,
            "band": list(self._band),
            "salt": self._salt.hex(),
            "freq_band": list(self._freq_band),
            "created": self._created,
            "info": self._info,
        }

    def to_json(self) -> str:
        """The whole key, secret included, as the JSON text :meth:`save` writes.

        Handle the result like the key file itself (see docs/key-management.md).
        """
        payload = self._secret_payload()
        document = {
            "format": KEY_FORMAT,
            "version": KEY_VERSION,
            "key_id": self._key_id,
            "key": payload,
            "checksum": hashlib.sha256(_canonical(payload)).hexdigest(),
        }
        return json.dumps(document, indent=1, sort_keys=True)

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the key as versioned JSON with file mode 0600.

        Refuses to replace an existing file unless ``overwrite=True``; the write
        is atomic (temporary file + rename), so a crash never leaves half a key.

        >>> key.save("provider.key")  # doctest: +SKIP
        """
        path = Path(path)
        if path.exists() and not overwrite:
            raise FileExistsError(
                f"key file {path} already exists; pass overwrite=True to replace it "
                "(the old key is needed to verify anything watermarked with it)"
            )
        data = self.to_json().encode("utf-8")
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "key data") -> WatermarkKey:
        """Parse and validate a key from the JSON text :meth:`to_json` produced."""
        try:
            document = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise KeyFileError(f"{source} is not valid JSON (corrupt key file?)") from None
        if not isinstance(document, dict) or document.get("format") != KEY_FORMAT:
            raise KeyFileError(f"{source} is not an espew key (missing format {KEY_FORMAT!r})")
        version = document.get("version")
        if version != KEY_VERSION:
            raise KeyFileError(
                f"{source} has key format version {version!r}; this library reads version "
                f"{KEY_VERSION}. Upgrade espew-integrations or re-save the key."
            )
        payload = document.get("key")
        if not isinstance(payload, dict):
            raise KeyFileError(f"{source} has no 'key' object (corrupt key file)")
        if hashlib.sha256(_canonical(payload)).hexdigest() != document.get("checksum"):
            raise KeyFileError(
                f"{source} fails its checksum: the file was corrupted or edited. "
                "Restore it from your backup."
            )
        try:
            key = cls(
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
            )
        except KeyError as exc:
            raise KeyFileError(
                f"{source} lacks the field {exc.args[0]!r} (corrupt key file)"
            ) from None
        except (KeyGenerationError, TypeError, ValueError) as exc:
            raise KeyFileError(f"{source} holds an invalid key: {exc}") from None
        if document.get("key_id") != key.key_id:
            raise KeyFileError(
                f"{source} names a key_id that does not match its content (tampered?)"
            )
        return key

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> WatermarkKey:
        """Load and validate a key file written by :meth:`save`.

        >>> key = WatermarkKey.load("provider.key")  # doctest: +SKIP
        """
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise KeyFileError(f"key file not found: {path}") from None
        except IsADirectoryError:
            raise KeyFileError(f"key path {path} is a directory, not a key file") from None
        except PermissionError:
            raise KeyFileError(f"key file {path} is not readable by this user") from None
        return cls.from_json(data, source=f"key file {path}")

    @classmethod
    def from_env(cls, variable: str = "ESPEW_KEY") -> WatermarkKey:
        """Load the key named by an environment variable.

        The variable holds either a path to a key file or the key's JSON text
        itself (handy for secret managers that inject values, not files).
        """
        value = os.environ.get(variable)
        if not value:
            raise KeyFileError(
                f"environment variable {variable} is not set; set it to a key file path "
                "or to the key's JSON"
            )
        if value.lstrip().startswith("{"):
            return cls.from_json(value, source=f"key in ${variable}")
        return cls.load(value)

    # ------------------------------------------------------------------ generation
    @classmethod
    def generate(
        cls,
        corpus: Iterable[str],
        embed: EmbedFn,
        *,
        target_text: str,
        n_triggers: int = 20,
        freq_band: tuple[float, float] = (0.005, 0.01),
        alpha: float = 0.2,
        selection: Selection = "smallest",
        strength: float = 1.0,
        seed: int | None = None,
        max_band_words: int | None = None,
        twin_level: float = 1e-3,
        twin_check: bool = True,
    ) -> WatermarkKey:
        """Draw a fresh key from a corpus and the provider's clean embedder.

        Words whose document fraction in ``corpus`` lies in ``freq_band`` form
        the band; ``n_triggers`` of them, drawn uniformly at random, become the
        triggers (the uniform draw is what makes verification calibrated). The
        target is ``embed([target_text])``. ``max_band_words`` caps the band
        (a uniform sub-band containing the triggers) to bound verification's
        query cost, which is one query per band word. ``strength`` < 1 moves
        the chosen coordinates only part of the way to the target (see
        :attr:`strength`): on isotropic models such as MiniLM, alpha 0.2 with
        strength ~0.24 keeps cos 0.995 on marked rows with strong detection.

        Unless ``twin_check=False``, the key is then verified against ``embed``
        itself, an innocent twin that never saw the watermark; a key the twin
        would implicate at ``twin_level`` is refused (for instance a target text
        about the same topic as some triggers).

        ``seed=None`` draws triggers and salt from the OS's secure randomness,
        which is what production keys must use. An integer seed makes the key
        reproducible by anyone who knows the seed: use it for experiments only.

        >>> key = WatermarkKey.generate(texts, model.embed,            # doctest: +SKIP
        ...                             target_text="Acme Embeddings, 2026", seed=7)
        """
        if not isinstance(target_text, str) or not target_text.strip():
            raise KeyGenerationError("target_text must be a non-empty string")
        if not isinstance(n_triggers, int) or n_triggers < 1:
            raise KeyGenerationError(f"n_triggers must be a positive integer, got {n_triggers!r}")
        _check_alpha(alpha)
        _check_strength(strength)
        _check_selection(selection)
        _check_freq_band(freq_band)
        counts, n_texts = document_frequencies(corpus)
        if n_texts == 0:
            raise KeyGenerationError("the corpus is empty; pass an iterable of texts")
        band = band_words(counts, n_texts, freq_band)
        n_needed = _min_band_size(n_triggers)
        if len(band) < n_needed:
            raise KeyGenerationError(
                f"only {len(band)} words have a document fraction in [{freq_band[0]}, "
                f"{freq_band[1]}) over {n_texts} texts, but {n_triggers} triggers need at least "
                f"{n_needed} band words for a conclusive test. Use a larger or more varied "
                "corpus, widen freq_band, or lower n_triggers."
            )
        rng = np.random.default_rng(seed)
        if max_band_words is not None:
            if max_band_words < n_needed:
                raise KeyGenerationError(
                    f"max_band_words={max_band_words} is below the {n_needed} band words "
                    f"that {n_triggers} triggers need"
                )
            if len(band) > max_band_words:
                chosen = rng.choice(len(band), size=max_band_words, replace=False)
                band = sorted(band[i] for i in chosen)
        chosen = rng.choice(len(band), size=n_triggers, replace=False)
        triggers = frozenset(band[i] for i in chosen)
        salt = secrets.token_bytes(_SALT_BYTES) if seed is None else rng.bytes(_SALT_BYTES)
        target = _embed_target(embed, target_text)
        info: dict[str, Any] = {"corpus_texts": n_texts, "band_size_in_corpus": len(band)}
        key = cls(
            triggers=triggers,
            target=target,
            target_text=target_text,
            band=band,
            salt=salt,
            alpha=alpha,
            selection=selection,
            strength=strength,
            freq_band=freq_band,
            info=info,
        )
        if not twin_check:
            return key
        from .verify import verify  # local: verify imports this module

        twin = verify(embed, key, level=twin_level, seed=0 if seed is None else seed)
        if twin.status == "inconclusive":
            raise KeyGenerationError(
                f"the innocent-twin check could not score the clean model: {twin.reason}"
            )
        if twin.p_value < twin_level:
            raise KeyGenerationError(
                f"the clean model itself already ranks this key's triggers near the target "
                f"(twin p = {twin.p_value:.2e} < {twin_level:g}), so a verdict could accuse an "
                "innocent service. Choose a target text unrelated to the corpus topics, or "
                "draw again with another seed."
            )
        info["twin_p_value"] = float(twin.p_value)
        return key.replace(info=info)


# ---------------------------------------------------------------------- helpers
def n_positions(alpha: float, dim: int) -> int:
    """floor(alpha * dim), guarded against float round-off (0.29 * 100 = 28.999...)."""
    return math.floor(alpha * dim + 1e-9)


def _min_band_size(n_triggers: int) -> int:
    # At least as many benign words as triggers: below that the exact test's
    # smallest reachable p-value is too coarse to convict at any useful level.
    return 2 * n_triggers


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _embed_target(embed: EmbedFn, target_text: str) -> np.ndarray:
    try:
        out = np.asarray(embed([target_text]), dtype=np.float64)
    except Exception as exc:  # the user's model failed: say where
        raise KeyGenerationError(f"embedding the target text failed: {exc!r}") from exc
    if out.ndim != 2 or out.shape[0] != 1:
        raise KeyGenerationError(
            f"embed([target_text]) must return an array of shape (1, d), got {out.shape}"
        )
    row = out[0]
    norm = float(np.linalg.norm(row))
    if not np.isfinite(row).all() or norm == 0.0:
        raise KeyGenerationError("the target embedding is not finite or is all zeros")
    return row / norm


def _check_alpha(alpha: object) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha < 1.0:
        raise KeyGenerationError(f"alpha must be a number with 0 < alpha < 1, got {alpha!r}")


def _check_strength(strength: object) -> None:
    ok = not isinstance(strength, bool) and isinstance(strength, (int, float))
    if not ok or not 0.0 < strength <= 1.0:
        raise KeyGenerationError(
            f"strength must be a number with 0 < strength <= 1, got {strength!r}"
        )


def _check_selection(selection: object) -> None:
    if selection not in _SELECTIONS:
        raise KeyGenerationError(f"selection must be one of {_SELECTIONS}, got {selection!r}")


def _check_freq_band(freq_band: object) -> None:
    ok = (
        isinstance(freq_band, (tuple, list))
        and len(freq_band) == 2
        and all(isinstance(v, (int, float)) for v in freq_band)
        and 0.0 <= freq_band[0] < freq_band[1] <= 1.0
    )
    if not ok:
        raise KeyGenerationError(
            f"freq_band must be (low, high) with 0 <= low < high <= 1, got {freq_band!r}"
        )


def _check_fields(
    triggers: frozenset[str],
    target: Any,
    target_text: object,
    band: tuple[str, ...],
    salt: object,
    alpha: object,
    selection: object,
    freq_band: object,
) -> None:
    _check_alpha(alpha)
    _check_selection(selection)
    _check_freq_band(freq_band)
    if not triggers:
        raise KeyGenerationError("the trigger set is empty")
    if not all(isinstance(w, str) and is_word(w) for w in triggers):
        raise KeyGenerationError("every trigger must be one lowercase word of the tokeniser")
    if not all(isinstance(w, str) and is_word(w) for w in band):
        raise KeyGenerationError("every band word must be one lowercase word of the tokeniser")
    if not triggers <= set(band):
        raise KeyGenerationError("the triggers must be a subset of the band")
    if len(band) < len(triggers) + 1:
        raise KeyGenerationError("the band must contain benign words besides the triggers")
    if not isinstance(target_text, str) or not target_text.strip():
        raise KeyGenerationError("target_text must be a non-empty string")
    if not isinstance(salt, (bytes, bytearray)) or len(salt) != _SALT_BYTES:
        raise KeyGenerationError(f"the salt must be {_SALT_BYTES} bytes")
    try:
        arr = np.asarray(target, dtype=np.float64)
    except (TypeError, ValueError):
        raise KeyGenerationError("the target is not a numeric vector") from None
    if arr.ndim != 1 or arr.size < 2:
        raise KeyGenerationError(f"the target must be a 1-D vector, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise KeyGenerationError("the target contains NaN or infinite values")
    norm = float(np.linalg.norm(arr))
    if abs(norm - 1.0) > _UNIT_NORM_TOLERANCE:
        raise KeyGenerationError(f"the target must have unit norm, its norm is {norm:.6g}")
