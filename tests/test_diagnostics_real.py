"""Diagnostics on real runs made by our trainer with deliberately bad harnesses (tests/fixtures/runs).

The fixtures were produced by `bench/pathological_runs.py` (seed 0, 40 steps each; see its docstring):
a healthy control and one run per pathology, with `archive.yaml` labelling what each really has.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from evotrainer.cli import app
from evotrainer.config.harness import load_harness
from evotrainer.core.domain import SEVERITY_RANK
from evotrainer.core.symptoms import SYMPTOMS
from evotrainer.diagnostics.gates import check_gate
from evotrainer.diagnostics.registry import Registry
from evotrainer.diagnostics.revision import Archive
from evotrainer.evidence.model import ROLLOUT_SCHEMA
from evotrainer.evidence.readers import load_evidence
from tests.conftest import BASELINE

FIXTURES = Path(__file__).parent / "fixtures" / "runs"
ARCHIVE = Archive.load(FIXTURES / "archive.yaml")


def _flagged(path: str) -> set[str]:
    return {f.symptom for f in Registry().run(load_evidence(path)) if SEVERITY_RANK[f.severity] >= 1}


def _explained(flagged: set[str]) -> set[str]:
    """What the flagged symptoms explain (the registry's ``explains``): truncation's all-wrong and reward-flat groups
    are graded as truncation's, not again as too_hard or dead_groups, so a label of either counts as found there."""
    return {e for s in flagged for e in SYMPTOMS[s].explains}


@pytest.mark.parametrize("run", ARCHIVE.runs, ids=lambda r: Path(r.path).name)
def test_each_real_run_gets_exactly_its_symptoms_at_warning_or_above(run):
    flagged = _flagged(run.path)
    assert set(run.labels) <= flagged | _explained(flagged), f"missed {set(run.labels) - flagged}"
    if not run.labels:
        assert flagged == set(), f"healthy run flagged {flagged}"


def test_gate_blocks_the_exploit_and_passes_the_healthy_run():
    reg = Registry(load_harness(BASELINE))
    exploit = next(r for r in ARCHIVE.runs if r.invalid)
    healthy = next(r for r in ARCHIVE.runs if not r.labels)
    blocked = check_gate(load_evidence(exploit.path), reg)
    assert not blocked.passed and any("answer_spraying" in r or "reward_hacking" in r for r in blocked.reasons)
    ok = check_gate(load_evidence(healthy.path), reg)
    assert ok.passed, ok.reasons


def test_diagnose_cli_json_and_fail_on(tmp_path):
    runner = CliRunner()
    exploit = next(r for r in ARCHIVE.runs if r.invalid).path
    res = runner.invoke(app, ["diagnose", exploit, "--json", "--fail-on", "warning", "--home", str(tmp_path)])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert doc["evidence"]["source"] == "evotrainer" and doc["evidence"]["rollouts"] > 0
    f0 = doc["findings"][0]
    assert set(f0) >= {"symptom", "diagnostic", "version", "severity", "confidence", "steps", "metrics", "examples",
                       "explanation"}
    assert f0["severity"] in ("critical", "warning")
    healthy = next(r for r in ARCHIVE.runs if not r.labels).path
    ok = runner.invoke(app, ["diagnose", healthy, "--fail-on", "warning", "--home", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    assert "no warning or critical finding" in ok.output
    bad = runner.invoke(app, ["diagnose", healthy, "--fail-on", "sometimes", "--home", str(tmp_path)])
    assert bad.exit_code == 2 and "warning" in bad.output
    missing = runner.invoke(app, ["diagnose", str(tmp_path / "nope"), "--home", str(tmp_path)])
    assert missing.exit_code == 2 and "nope" in missing.output


def test_rollout_text_is_shown_escaped_never_as_markup(tmp_path):
    run = tmp_path / "evil"
    (run / "rollouts").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"name": "evil", "run_id": "x"}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 0.0}) + "\n" for s in range(1, 11)))
    text = "[bold red]pwned[/bold red] <script>alert(1)</script>"
    rows = [{"run_id": "x", "step": s, "prompt_id": f"p{g}", "group_id": f"{s}:{g}", "prompt": "1+1=",
             "completion": text, "reward_correctness": 0.0, "reward_format": 0.0, "reward_overlong": None,
             "reward_repetition": None, "reward": 0.0, "correct": False, "well_formed": False, "n_candidates": 0,
             "length": 16, "truncated": True, "advantage": 0.0, "difficulty": 1}
            for s in range(1, 11) for g in range(4) for _ in range(4)]
    pq.write_table(pa.Table.from_pandas(pd.DataFrame(rows), schema=ROLLOUT_SCHEMA, preserve_index=False),
                   run / "rollouts" / "step_000001.parquet")
    res = CliRunner().invoke(app, ["diagnose", str(run), "--only", "truncation", "--home", str(tmp_path)],
                             env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert "[bold red]pwned[/bold red]" in res.output  # printed literally, not interpreted


def test_diagnostics_list_documents_every_builtin():
    res = CliRunner().invoke(app, ["diagnostics", "list", "--json"])
    docs = json.loads(res.stdout)["diagnostics"]
    names = {d["name"] for d in docs}
    assert {"dead_groups", "too_hard", "too_easy", "entropy_collapse", "entropy_blowup", "truncation",
            "length_collapse", "repetition", "echo", "reward_hacking", "answer_spraying", "kl_blowup",
            "grad_spike", "nan", "plateau", "forgetting", "overfitting"} <= names
    for d in docs:
        assert d["signal"] and d["literature"] and all(p["description"] for p in d["params"])


def test_revise_cli_rejects_a_revision_that_loses_invalid_recall_and_records_it(tmp_path):
    runner = CliRunner()
    args = ["diagnostics", "revise", "answer_spraying", "--archive", str(FIXTURES / "archive.yaml"),
            "--params", '{"warning": 0.99, "critical": 1.0}', "--home", str(tmp_path), "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["accepted"] is False and doc["before"]["invalid_recall"] == 1.0
    lines = (tmp_path / "diagnostics" / "history.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["diagnostic"] == "answer_spraying"
    bad = runner.invoke(app, args[:-3] + ["--params", "[1]", "--home", str(tmp_path)])
    assert bad.exit_code == 2 and "JSON object" in bad.output
