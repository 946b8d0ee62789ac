"""The symptom registry is the one place a symptom's meaning lives: every record complete, every link known."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from evotrainer.agent.brains.heuristic import EXPLAINS
from evotrainer.core.symptoms import EXPLOIT_SYMPTOMS, SYMPTOMS, Symptom, check_symptom
from evotrainer.diagnostics.registry import builtin_diagnostics


def test_every_symptom_is_complete():
    for name, s in SYMPTOMS.items():
        assert s.name == name
        assert s.description.endswith(".") and s.description[0].isupper(), name
        assert len(s.cause) >= 10 and not s.cause.endswith("."), name  # a clause: "…because {cause}"
        assert all(o in SYMPTOMS and o != name for o in s.explains), name


def test_every_builtin_diagnostic_names_a_registered_symptom_and_every_exploit_has_a_detector():
    emitted = {cls.symptom for cls in builtin_diagnostics().values()}
    assert emitted <= set(SYMPTOMS)
    # an exploit no built-in diagnostic can see could never be gated
    assert EXPLOIT_SYMPTOMS <= emitted, EXPLOIT_SYMPTOMS - emitted


def test_the_brain_and_the_revision_rule_read_the_registry():
    assert EXPLAINS == {"truncation": ("too_hard", "dead_groups"), "too_hard": ("dead_groups",),
                        "too_easy": ("dead_groups",)}
    assert EXPLOIT_SYMPTOMS == {"reward_hacking", "answer_spraying", "echo", "length_collapse", "hardcoding",
                                "answer_leak"}


def test_a_record_is_strict_and_an_unknown_symptom_names_what_exists():
    with pytest.raises(ValidationError):
        Symptom(name="x", description="Something happened.", cause="a reason for it", colour="red")
    with pytest.raises(ValueError, match="unknown symptom 'no_such'; known symptoms: answer_leak, answer_spraying"):
        check_symptom("no_such")
