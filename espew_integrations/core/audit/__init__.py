"""The audit: plan, ask, score, decide; the report and what of it is public (no file).

One audit, whatever front end runs it (:func:`~espew_integrations.core.verify.verify`,
:func:`~espew_integrations.core.trace.trace`, the lab's null studies)::

    AuditOptions -> design.plan -> record_start -> interrogate -> score -> design.decide
                      (plan)        (subject)      (asking,       (scores)  (decision,
                                                    suspect_calls,           field_decision;
                                                    alignment)               trace: tenant_layers)

Each step is a module with one job:

- :mod:`.options`: :class:`~.options.AuditOptions`, every option, its default and its one check;
- :mod:`.settings`: the option types, the widest answer, the suspect's check;
- :mod:`.word_probes`: the legacy word probes (a band word in templates);
- :mod:`.plan`: :class:`~.plan.AuditPlan`, what to ask and how to score it (cached band sets);
- :mod:`.subject`: who is asked, and its recorder;
- :mod:`.recorder`: :class:`~.recorder.Recorder`, what the audit tells whoever records it (the
  transcript is one; the audit writes no file itself);
- :mod:`.suspect_calls`: calling the suspect in batches under a stall guard (and a
  deadline when asked);
- :mod:`.asking`: :func:`~.asking.interrogate`, the shuffled asking and the answers put back;
- :mod:`.alignment`: answers mapped into the key's coordinates (:mod:`..stats.align`);
- :mod:`.scores`: :class:`~.scores.WordScores`, each band word's raw, adjusted and directed score;
- :mod:`.fields` and :mod:`.decision`: the report's common fields, the verdict or
  why there is none; :mod:`.paper_metrics`: the paper's figures, never deciding;
- :mod:`.tenant_layers`: each tenant layer's exact test, for ``trace``;
- :mod:`.pipeline`: :func:`~.pipeline.run_audit`, the steps above in order, the key's
  design deciding (:meth:`..mark.design.MarkingDesign.decide`).

Every step but the asking is a function of the key and the answers alone, so a
null study can score fixed answers exactly as an audit does.
"""

from .alignment import align_answers
from .asking import Answers, first_answered, interrogate
from .decision import decide
from .field_decision import decide_field, unit_scores
from .fields import DECISION_RULE, common_fields, inconclusive
from .plan import AuditPlan, band_sets, check_statistic, maps_answers, plan_audit
from .recorder import Recorder
from .scores import (
    WordScores,
    adjusted_scores,
    mean_per_word,
    probe_cosines,
    reference_slope,
    score_words,
    word_scores,
)
from .settings import (
    MAX_ANSWER_DIM,
    STATISTICS,
    ProbeKind,
    Statistic,
    SuspectFn,
    TargetMode,
    check_suspect,
)
from .subject import (
    REPLAYED_SETTINGS,
    Subject,
    audit_subject,
    record_start,
    recorded,
)
from .suspect_calls import Deadline, DeadlinePassed, query_suspect
from .tenant_layers import layer_p_values, tenant_p_values
from .word_probes import DEFAULT_TEMPLATES, build_probes, check_templates

__all__ = [
    "DECISION_RULE",
    "DEFAULT_TEMPLATES",
    "MAX_ANSWER_DIM",
    "REPLAYED_SETTINGS",
    "STATISTICS",
    "Answers",
    "AuditPlan",
    "Deadline",
    "DeadlinePassed",
    "ProbeKind",
    "Recorder",
    "Statistic",
    "Subject",
    "SuspectFn",
    "TargetMode",
    "WordScores",
    "adjusted_scores",
    "align_answers",
    "audit_subject",
    "band_sets",
    "build_probes",
    "check_statistic",
    "check_suspect",
    "check_templates",
    "common_fields",
    "decide",
    "decide_field",
    "first_answered",
    "inconclusive",
    "interrogate",
    "layer_p_values",
    "maps_answers",
    "mean_per_word",
    "plan_audit",
    "probe_cosines",
    "query_suspect",
    "record_start",
    "recorded",
    "reference_slope",
    "score_words",
    "tenant_p_values",
    "unit_scores",
    "word_scores",
]
