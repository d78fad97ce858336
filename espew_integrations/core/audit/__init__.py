"""The audit: plan, ask, score, decide; the report and what of it is public (no file).

One audit, whatever front end runs it (:func:`~espew_integrations.core.verify.verify_callable`,
:func:`~espew_integrations.core.trace.trace_callable`, the lab's null studies)::

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
