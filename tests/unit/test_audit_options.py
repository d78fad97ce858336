"""AuditOptions: every audit option written once, read by verify, trace, the replay and the CLI."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from espew_integrations import AuditOptions, ESpeWError, verify
from espew_integrations.cli.audit_flags import (
    FLAGS,
    add_audit_flags,
    add_target_flag,
    audit_options_from,
)
from espew_integrations.cli.common import UsageError
from espew_integrations.core.audit.subject import REPLAYED_SETTINGS
from espew_integrations.core.ground import defaults
from espew_integrations.core.ground.errors import OptionsError, OptionsTypeError
from tests.support import make_key


def _silent(texts):  # a suspect that must never be asked
    raise AssertionError("the suspect was asked before the options were checked")


def test_every_default_is_a_line_of_defaults():
    options = AuditOptions()
    assert options.level == defaults.DEFAULT_LEVEL
    assert options.batch_size == defaults.DEFAULT_BATCH_SIZE
    assert options.min_coverage == defaults.DEFAULT_MIN_COVERAGE
    assert options.stall_timeout == defaults.DEFAULT_STALL_TIMEOUT
    assert options.deadline == defaults.DEFAULT_DEADLINE
    assert AuditOptions.names() == REPLAYED_SETTINGS
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.level = 0.5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("level", 2, OptionsError),
        ("level", 0.0, OptionsError),
        ("level", float("nan"), OptionsError),
        ("batch_size", 0, OptionsError),
        ("min_coverage", 1.5, OptionsError),
        ("target_mode", "nearest", OptionsError),
        ("probes", "all", OptionsError),
        ("statistic", "best", OptionsError),
        ("deadline", -1.0, OptionsError),
        ("stall_timeout", "soon", OptionsTypeError),
        ("seed", 1.5, OptionsTypeError),
    ],
)
def test_verify_refuses_a_bad_option_with_the_family_error_before_asking(option, value, error):
    key = make_key(16, n_band=40, n_triggers=5)
    with pytest.raises(error, match=option) as caught:
        verify(_silent, key, **{option: value})
    assert isinstance(caught.value, ESpeWError) and isinstance(caught.value, ValueError)
    with pytest.raises(error, match=option):
        AuditOptions(**{option: value})


def test_keyword_arguments_replace_the_fields_of_options():
    base = AuditOptions(level=1e-9, seed=3)
    assert AuditOptions.of(base, {"seed": 4}) == AuditOptions(level=1e-9, seed=4)
    assert AuditOptions.of(base) is base
    assert AuditOptions.of(None, {"templates": ["a {w}"]}).templates == ("a {w}",)
    with pytest.raises(TypeError, match=r"unknown audit option\(s\) \['levle'\]"):
        AuditOptions.of(None, {"levle": 0.1})
    with pytest.raises(OptionsTypeError, match="options must be an AuditOptions"):
        AuditOptions.of({"level": 0.1})  # type: ignore[arg-type]


def test_an_audit_with_options_equals_the_audit_with_the_same_keywords():
    from tests.unit.test_verify import WordSpace

    key = make_key(64, n_band=200, n_triggers=20)
    by_keywords = verify(WordSpace(key, pull=1.0), key, seed=1, level=1e-4, batch_size=17)
    by_options = verify(
        WordSpace(key, pull=1.0), key, AuditOptions(seed=1, level=1e-4, batch_size=17)
    )
    same = {name: value for name, value in by_keywords.to_dict().items() if name != "timestamp"}
    assert {n: v for n, v in by_options.to_dict().items() if n != "timestamp"} == same
    assert by_options.status == "copied"
    assert by_options.level == 1e-4


def test_the_command_line_flags_are_built_from_the_fields():
    parser = argparse.ArgumentParser()
    add_target_flag(parser)
    add_audit_flags(parser)
    args = parser.parse_args([])
    assert audit_options_from(args) == AuditOptions()
    for name, flag in FLAGS.items():
        shown = next(a for a in parser._actions if flag in a.option_strings)
        assert shown.default == AuditOptions.default(name), flag
    assert audit_options_from(parser.parse_args(["--level", "1e-9"])).level == 1e-9
    with pytest.raises(UsageError, match=r"^--level must be in \(0, 1\), got 2\.0$"):
        audit_options_from(parser.parse_args(["--level", "2"]))
    with pytest.raises(UsageError, match=r"^--min-coverage must be in \(0, 1\]"):
        audit_options_from(parser.parse_args(["--min-coverage", "0"]))
