"""What the designs that mark every answer and rank keyed units share: the field and the map.

Both mark every non-blank text, draw their units as a word key draws triggers, take
the ``field_*`` options and refuse the word ones, audit with the stored texts alone
(every text a probe), decide with one statistic named after the design, re-audit by
drawing new texts, and build rings of unit layers. :class:`UnitDesign` holds that
once; :mod:`.field` and :mod:`.map` add how they mark, store, score and decide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..audit.plan import AuditPlan
from ..ground.errors import InputError
from ..ground.text import TextView
from ..keys.field_keygen import reaudited_field
from ..keys.key import WatermarkKey
from ..keys.key_options import KeyOptions, check_field_options
from ..keys.keygen import Reaudit
from ..keys.keyring import KeyRing, field_ring_options
from ..mark.design import MarkingDesign

__all__ = ["MIN_AUDIT_TEXTS", "UnitDesign"]

#: The fewest stored audit texts a unit key can be audited with, and answered ones scored.
MIN_AUDIT_TEXTS = 3


class UnitDesign(MarkingDesign):
    """A design that marks every answer and ranks its drawn units among all (abstract)."""

    summary = "every answer is marked"
    #: The report's ``decision_rule`` of a ring of this design's keys (``trace``).
    trace_rule: ClassVar[str]

    # ------------------------------------------------------------------ marking
    def marks(self, key: Any, texts: Sequence[str], view: TextView | None) -> np.ndarray:
        return np.ones(len(texts), dtype=bool)

    # ------------------------------------------------------------------ key generation
    @classmethod
    def check_options(cls, options: KeyOptions) -> None:
        """The unit options obey their rules (``field_units``, ``field_marked``,
        ``field_amplitude``, ``field_min_cosine``), and no word option is set (a caller
        who sets one means a word key)."""
        check_field_options(
            options.field_units,
            options.field_marked,
            options.field_amplitude,
            options.field_min_cosine,
        )
        options.refuse_word_options()

    def reaudit(self, key: Any, audit: Reaudit) -> Any:
        """Every sampled text is a probe: the audit's word options do not apply."""
        return reaudited_field(key, audit)

    @classmethod
    def ring_options(
        cls, key_options: Mapping[str, Any], n_shared: int | None, n_tenant: int | None
    ) -> tuple[int, KeyOptions]:
        return field_ring_options({**key_options, "marking": cls.name}, n_shared, n_tenant)

    @classmethod
    def refit_ring(
        cls,
        ring: KeyRing,
        texts: list[str],
        embed: Any,
        rng: np.random.Generator,
        options: KeyOptions,
    ) -> KeyRing:
        return ring.refit_field_tenants(texts, embed, rng, options.field_min_cosine)

    # ------------------------------------------------------------------ the audit
    def audited_rows(
        self, key: WatermarkKey, probes: str, templates: Sequence[str] | None, target_mode: str
    ) -> np.ndarray:
        """The key's stored clean audit rows, once the plan's options are those a unit key
        is audited with (its stored texts, in its own coordinates)."""
        if probes == "words" or templates is not None:
            raise InputError(
                f"a {self.name} key is audited with its stored texts, not with band words"
            )
        if target_mode != "key":
            raise InputError(
                f"a {self.name} key verifies in its own coordinates: use target_mode='key'"
            )
        clean_rows = key.probe_embeddings
        if len(clean_rows) < MIN_AUDIT_TEXTS:
            raise InputError(
                f"this {self.name} key stores no audit: re-audit it (WatermarkKey.with_audit)"
            )
        return clean_rows

    def check_statistic(self, plan: AuditPlan, statistic: str) -> None:
        if statistic not in ("combined", self.name):
            raise InputError(
                f"statistic={statistic!r} scores band words; a {self.name} key has one "
                f"statistic, '{self.name}' (the default 'combined' uses it)"
            )

    def statistic_used(self, plan: AuditPlan, statistic: str) -> str:
        return self.name

    def n_statistics(self, plan: AuditPlan, statistic: str) -> int:
        return 1

    def trace_fields(self) -> dict[str, Any]:
        return {"marking": self.name, "decision_rule": self.trace_rule}
