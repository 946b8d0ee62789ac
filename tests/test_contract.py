"""The evidence contract: derived from the diagnostics' declarations, honest about them, and published as a file.

Honest means: every diagnostic decides exactly as before when the evidence is cut down to the fields its
declaration names (so the contract cannot leave out a field a diagnostic reads), and says "not enough evidence",
naming what would supply it, when one of its needs is missing. Published means: the JSON Schema in
``docs/evidence-contract.schema.json`` is what ``evotrainer evidence contract --json`` prints.
"""

from __future__ import annotations

import fnmatch
import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from evotrainer.cli import app
from evotrainer.diagnostics.base import Diagnostic
from evotrainer.diagnostics.builtin import BUILTIN_DIAGNOSTICS
from evotrainer.diagnostics.contract import CONTRACT_VERSION, build_contract, declared_fields, metric_fields
from evotrainer.evidence.model import ROLLOUT_COLUMNS, ROLLOUT_DOCS, Evidence
from evotrainer.evidence.readers import load_evidence
from tests.conftest import REPO
from tests.test_diagnostics_builtin import VARIANTS, build

PUBLISHED = REPO / "docs" / "evidence-contract.schema.json"
FIXTURES = REPO / "tests" / "fixtures" / "runs"


def project(ev: Evidence, fields: list[str]) -> Evidence:
    """The evidence with only ``step`` and the given 'metric:…' / 'rollout:…' / 'meta:…' fields (metric patterns
    allowed)."""
    mets = [f.split(":", 1)[1] for f in fields if f.startswith("metric:")]
    rols = {f.split(":", 1)[1] for f in fields if f.startswith("rollout:")}
    mcols = [c for c in ev.metrics.columns if c == "step" or any(fnmatch.fnmatchcase(str(c), p) for p in mets)]
    rcols = [c for c in ev.rollouts.columns if c == "step" or c in rols]
    keys = {f.split(":", 1)[1] for f in fields if f.startswith("meta:")}
    return Evidence(metrics=ev.metrics[mcols], rollouts=ev.rollouts[rcols], source=ev.source, run=ev.run,
                    meta={k: v for k, v in (ev.meta or {}).items() if k in keys})


def verdicts(findings) -> list[tuple]:
    """What a diagnostic decided, without the examples it shows (those may come from any column)."""
    return sorted((f.symptom, f.severity, f.steps, tuple(sorted(f.metrics.items())), f.explanation) for f in findings)


@pytest.fixture(scope="module")
def evidence_sets() -> dict[str, Evidence]:
    out = {f"synthetic:{name}": build(**kw) for name, (kw, _) in VARIANTS.items()}
    for d in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        out[f"real:{d.name}"] = load_evidence(d)
    return out


@pytest.mark.parametrize("name", sorted(BUILTIN_DIAGNOSTICS))
def test_a_diagnostic_decides_the_same_on_its_declared_fields_alone(name, evidence_sets):
    diag = BUILTIN_DIAGNOSTICS[name]()
    needed, read = declared_fields(diag)
    assert needed, f"{name} declares no need"
    decided = 0
    for label, ev in evidence_sets.items():
        full = diag.run(ev)
        cut = diag.run(project(ev, [*needed, *read]))
        assert verdicts(cut) == verdicts(full), f"{name} on {label}: reads a field its declaration does not name"
        decided += not any(Diagnostic.insufficient(f) for f in full)
    assert decided, f"{name} never had enough evidence here, so the projection proved nothing"


@pytest.mark.parametrize("name", sorted(BUILTIN_DIAGNOSTICS))
def test_a_missing_need_is_not_enough_evidence_naming_it(name, evidence_sets):
    diag = BUILTIN_DIAGNOSTICS[name]()
    ev = evidence_sets[f"synthetic:{name}"]
    needed, read = declared_fields(diag)
    for n in diag.declared_needs():  # everything declared but this need's fields (a pattern would bring them back)
        out = diag.run(project(ev, [f for f in [*needed, *read] if f not in n.fields() and "*" not in f]))
        assert len(out) == 1 and Diagnostic.insufficient(out[0]), (name, n.what, out)
        assert n.what in out[0].explanation and all(f.split(":", 1)[1] in out[0].explanation for f in n.fields())


def test_correctness_gaps_say_how_to_supply_it(evidence_sets):
    ev = evidence_sets["synthetic:overfitting"]
    cut = Evidence(metrics=ev.metrics.drop(columns=["accuracy"]), rollouts=ev.rollouts.drop(columns=["correct"]))
    [f] = BUILTIN_DIAGNOSTICS["overfitting"]().run(cut)
    assert Diagnostic.insufficient(f) and "train accuracy" in f.explanation
    assert "--correctness NAME" in f.explanation and "--map correct=COLUMN" in f.explanation


def test_contract_lists_every_field_and_need():
    doc = build_contract()
    assert doc["x-contract-version"] == CONTRACT_VERSION
    roll = doc["$defs"]["rollout"]["properties"]
    assert set(roll) == set(ROLLOUT_COLUMNS) == set(ROLLOUT_DOCS)
    assert all(p["description"] for p in roll.values())
    assert doc["$defs"]["rollout"]["required"] == ["step", "prompt", "completion"]
    mets = {**doc["$defs"]["metric_step"]["properties"],
            **{v["x-pattern"]: v for v in doc["$defs"]["metric_step"]["patternProperties"].values()}}
    assert set(mets) == {"step", *metric_fields()}
    assert all(p["description"] for p in mets.values())
    # which diagnostic needs which field, both ways round
    by_name = {d["diagnostic"]: d for d in doc["x-diagnostics"]}
    assert set(by_name) == set(BUILTIN_DIAGNOSTICS)
    assert "overfitting" in roll["correct"]["x-needed-by"] and "reward_hacking" in mets["accuracy"]["x-needed-by"]
    assert "plateau" in mets["eval/greedy_accuracy"]["x-read-by"]
    assert mets["entropy"]["x-aliases"]["verl"] == "actor/entropy"
    assert roll["prompt"]["x-aliases"]["verl"] == "input"
    hack = by_name["reward_hacking"]["needs"]
    assert [n["what"] for n in hack] == ["a reward", "strict correctness or held-out accuracy"]
    assert ["rollout:correct"] in hack[1]["any_of"][1] or [["rollout:correct"]] in hack[1]["any_of"]


def test_published_schema_is_what_the_command_prints():
    r = CliRunner().invoke(app, ["evidence", "contract", "--json"])
    assert r.exit_code == 0, r.output
    printed = json.loads(r.stdout)
    assert PUBLISHED.is_file(), "write it: evotrainer evidence contract --json > docs/evidence-contract.schema.json"
    assert json.loads(PUBLISHED.read_text()) == printed, (
        "the contract changed: regenerate docs/evidence-contract.schema.json with `evotrainer evidence contract "
        "--json` (and bump CONTRACT_VERSION when a field was added, removed or changed meaning)")


def test_contract_text_names_the_diagnostics_and_fields():
    r = CliRunner().invoke(app, ["evidence", "contract"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for word in ("frac_reward_zero_std", "reward_hacking", "strict correctness", "--correctness", "actor/entropy"):
        assert word in r.stdout, word


def test_projection_really_removes_fields():
    """The projection test above would pass vacuously if project() kept everything."""
    ev = build()
    cut = project(ev, ["metric:reward", "rollout:correct"])
    assert list(cut.metrics.columns) == ["step", "reward"] and list(cut.rollouts.columns) == ["step", "correct"]
    assert pd.api.types.is_bool_dtype(cut.rollouts["correct"])
