"""A stuck mainline (backtest.stuck_share): movement measured on recorded outcomes, and what a stuck round proposes.

The scenario is countdown seed 1 of bench/log/07-campaign-vs-static-baseline.md (session 22): round 0 refuted lr 1e-6 → 3e-6 and found
2.43e-4 inconclusive at +0.011; round 1's mainline, still at 1e-6, changed no answer, and the campaign backtested
`scale_rewards` and `top_entropy_quantile`, which measured +0.000 exactly. A stuck round must re-test the learning
rate instead, and a moving round (or one without a training signal) proposes as before.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from langgraph.runtime import Runtime

from evotrainer.agent.lessons import SEED_LIBRARY
from evotrainer.agent.movement import judge, segment_movement
from evotrainer.config.harness import HarnessSpec, enlarges_update
from evotrainer.core.domain import (
    BacktestStats,
    Campaign,
    Decision,
    Finding,
    Hypothesis,
    PolicyVersion,
    Proposal,
    ProposalDraft,
)
from evotrainer.training.evaluation import eval_steps, write_outcomes

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
BASE = [i % 10 < 3 for i in range(500)]  # 30 % right


def _flip(outcomes: list[bool], k: int) -> list[bool]:
    return [(not o) if j < k else o for j, o in enumerate(outcomes)]


def _run(home: Path, name: str, evals: dict[int, list[bool]], zero_std: float | None = None,
         steps: range | None = None) -> Path:
    run = home / "jobs" / name
    run.mkdir(parents=True)
    for step, outcomes in evals.items():
        write_outcomes(run, step, outcomes)
    if zero_std is not None:
        (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "frac_reward_zero_std": zero_std}) + "\n"
                                                   for s in steps))
    return run


def _pv(id_: str, run: str, step: int, parent: str | None = None, h: str = "h") -> PolicyVersion:
    return PolicyVersion(id=id_, campaign_id="c", parent_id=parent, harness_version=h, checkpoint=f"/ck/{id_}",
                         run_name=run, mlflow_run_id=None, eval_accuracy=0.3, step=step, created=NOW)


def test_what_enlarges_the_update():
    assert enlarges_update("optim.learning_rate", 1e-6, 2.43e-4)
    assert not enlarges_update("optim.learning_rate", 3e-4, 1.5e-4)  # lower-lr shrinks it
    assert not enlarges_update("grpo.num_iterations", 1, 2)  # same lr per optimiser step: no larger update
    assert not enlarges_update("optim.warmup_steps", 10, 0)  # a fork does not repeat its warm-up
    assert not enlarges_update("grpo.scale_rewards", "group", "none")
    assert not enlarges_update("grpo.top_entropy_quantile", 1.0, 0.2)
    assert not enlarges_update("optim.learning_rate", True, 2)  # a bool is no number here


def test_movement_compares_the_segment_end_with_its_parent_or_its_own_first_evaluation(tmp_path):
    # round 0: the segment evaluates its start (step 0) and its end (step 20)
    _run(tmp_path, "seg0", {0: BASE, 20: _flip(BASE, 2)})
    first = _pv("c:r00:segment", "seg0", 20)
    assert eval_steps(tmp_path / "jobs" / "seg0") == [0, 20]
    assert segment_movement(tmp_path, first, None) == {"moved": 0.004, "changed": 2, "n": 500, "steps": 20}
    # a later segment forks from a kept (merged) branch, whose decision scoring was recorded at its step
    _run(tmp_path, "merged", {50: BASE})
    _run(tmp_path, "seg1", {70: _flip(BASE, 60)})
    parent = _pv("c:r00:control", "merged", 50)
    assert segment_movement(tmp_path, _pv("c:r01:segment", "seg1", 70), parent)["moved"] == 0.12
    # a parent with no recorded outcomes (a run from before they were written): no verdict, not a guess
    assert segment_movement(tmp_path, _pv("c:r01:segment", "seg1", 70), _pv("old", "none", 50)) is None
    assert judge(tmp_path, _pv("c:r01:segment", "seg1", 70), _pv("old", "none", 50), 0.01)["stuck"] is False


def test_stuck_needs_a_training_signal(tmp_path):
    _run(tmp_path, "seg", {0: BASE, 20: _flip(BASE, 1)}, zero_std=0.5, steps=range(1, 21))
    v = judge(tmp_path, _pv("c:r00:segment", "seg", 20), None, 0.01)
    assert v["stuck"] and v["signal"] == 0.5 and "1 of 500 decision-split answers (0.2%)" in v["reason"]
    _run(tmp_path, "dead", {0: BASE, 20: BASE}, zero_std=0.97, steps=range(1, 21))
    v = judge(tmp_path, _pv("c:r00:segment", "dead", 20), None, 0.01)
    assert not v["stuck"] and "the signal is missing, not the step size" in v["reason"]
    _run(tmp_path, "moving", {0: BASE, 20: _flip(BASE, 90)}, zero_std=0.5, steps=range(1, 21))
    assert judge(tmp_path, _pv("c:r00:segment", "moving", 20), None, 0.01)["reason"].startswith("the mainline moves")


def test_the_share_is_flat_whatever_the_segment_length(tmp_path):
    """Movement saturates instead of growing with steps: countdown at lr 1e-6 changed 5 of 500 answers over a segment
    of 80 steps (a flat 1 % read that as moving), agentic 9 of 500 in 20 (1 % per 20 steps pro rata read that as
    moving); a working rate changed 110 over 140 steps (bench/log/07-campaign-vs-static-baseline.md, session 23)."""
    _run(tmp_path, "parent", {50: BASE})
    for name, end, flips, stuck in (("long", 130, 5, True), ("agentic", 70, 9, True), ("moving", 190, 110, False)):
        _run(tmp_path, name, {end: _flip(BASE, flips)}, zero_std=0.34, steps=range(51, end + 1))
        v = judge(tmp_path, _pv("s", name, end), _pv("p", "parent", 50), 0.05)
        assert v["stuck"] is stuck and v["threshold"] == 0.05, (name, v)
    assert "under backtest.stuck_share 5%" in judge(tmp_path, _pv("s", "long", 130), _pv("p", "parent", 50), 0.05)["reason"]


@pytest.fixture
def round_one(tmp_path):
    """A campaign at round 1 after countdown seed 1's round 0, with the round-1 segment's outcomes left to the test."""
    return _round_one(tmp_path)


def _round_one(tmp_path, history: bool = True, without: tuple[str, ...] = (), lr: float = 1e-6):
    """The ``round_one`` fixture; ``history`` False: round 0 decided nothing (no re-test, no Optuna history);
    ``without``: skills removed from the campaign's copy of the seed library; ``lr``: the mainline's rate."""
    from evotrainer.agent.brains.heuristic import HeuristicBrain
    from evotrainer.agent.state import CampaignContext
    from evotrainer.config.campaign import CampaignSpec
    from evotrainer.store import Store

    h = HarnessSpec().with_knob("optim.learning_rate", lr)
    spec = CampaignSpec(name="c", task="countdown", seed=1, screen=False,
                        budget={"total_steps": 880, "healthy_explore_share": None},
                        backtest={"branch_steps": 30, "seeds": 3, "max_proposals": 2, "min_effect": 0.0})
    store = Store.for_home(tmp_path)
    store.create_campaign("c", "c", spec.model_dump(mode="json"), h.version)
    store.add_harness_version(h.version, None, h.model_dump(mode="json"), [])
    library = tmp_path / "lib"
    shutil.copytree(SEED_LIBRARY, library)
    for slug in without:
        shutil.rmtree(library / slug)
    ctx = CampaignContext(campaign_id="c", spec=spec, home=Path(tmp_path), store=store, brain=HeuristicBrain(),
                          pool=None, tracker=None, library=library)
    hyp = Hypothesis(symptom="plateau", cause="the recipe is stuck", change="a change", expected_effect="accuracy up")
    round_zero = (("c:r00:p0", 3e-6, "reject", -0.002), ("c:r00:p1", 2.43e-4, "inconclusive", 0.011))
    for pid, new, outcome, effect in round_zero if history else ():
        store.add_proposal(Proposal(id=pid, campaign_id="c", round=0, knob="optim.learning_rate", old=1e-6, new=new,
                                    hypothesis=hyp, rationale="", cited_skills=[], brain="heuristic",
                                    status="pending_review", harness_version=h.version, created=NOW))
        store.add_decision(Decision(proposal_id=pid, outcome=outcome, at=NOW, reasons=["x"], stats=BacktestStats(
            n_pairs=3, effect=effect, ci_low=effect - 0.04, ci_high=effect + 0.04, confidence=0.8, method="t",
            control_mean=0.28, treatment_mean=0.28 + effect)))
    store.add_policy_version(_pv("c:r00:control", "merged", 50, h=h.version))
    _run(tmp_path, "merged", {50: BASE})
    store.add_policy_version(_pv("c:r01:segment", "seg1", 70, parent="c:r00:control", h=h.version))
    store.add_findings("c", 1, "seg1", [Finding(symptom="plateau", diagnostic="plateau", version="1", severity="info",
                                                confidence=0.8, explanation="flat")])

    def propose_round_one(changed: int, zero_std: float = 0.5):
        from evotrainer.agent.nodes import propose

        _run(tmp_path, "seg1", {70: _flip(BASE, changed)}, zero_std=zero_std, steps=range(51, 71))
        state = {"campaign_id": "c", "round": 1, "mainline": "c:r01:segment", "harness_version": h.version,
                 "segment_run": "seg1"}
        propose(state, Runtime(context=ctx))
        return [(p.knob, p.new) for p in store.list_proposals("c", round=1)], store

    propose_round_one.ctx = ctx
    return propose_round_one


def test_a_stuck_round_retests_the_learning_rate_instead_of_changes_that_cannot_act(round_one, tmp_path):
    proposals, store = round_one(changed=0)
    assert proposals == [("optim.learning_rate", 2.43e-4)]  # the re-test; the refuted ×3 raise stays refuted
    (m,) = [e.message for e in store.events("c", kind="movement")]
    assert m["stuck"] and m["moved"] == 0.0 and m["steps"] == 20 and m["round"] == 1
    # what `campaign status --json` prints validates against its shape
    from evotrainer.reports.shapes import Movement
    from evotrainer.reports.summaries import campaign_summary

    store.set_campaign("c", mainline_version="c:r01:segment")
    doc = campaign_summary(tmp_path, "c", store=store, read=lambda _p: __import__("pandas").DataFrame())
    assert Movement.model_validate(doc["movements"][0]).stuck
    from typer.testing import CliRunner

    from evotrainer.cli import app

    out = CliRunner().invoke(app, ["campaign", "status", "c", "--home", str(tmp_path)])
    said = " ".join(out.stdout.split())
    assert out.exit_code == 0 and "stuck round 1: the mainline is stuck: 0 of 500 decision-split answers" in said


def test_a_stuck_round_with_nothing_to_retest_backtests_the_raise_and_its_bracket(tmp_path):
    proposals, store = _round_one(tmp_path, history=False)(changed=0)
    assert proposals == [("optim.learning_rate", 3e-6), ("optim.learning_rate", 2.43e-4)]
    first, second = store.list_proposals("c", round=1)
    assert "bracket" not in first.rationale and "bracket" in second.rationale


def test_a_stuck_round_with_no_raise_in_the_library_backtests_the_built_in_one(tmp_path):
    """A user's library without ``raise-lr``: the stuck round still raises the step (×3, beside the ×243 bracket),
    drafted by the campaign, instead of backtesting nothing."""
    proposals, store = _round_one(tmp_path, history=False, without=("raise-lr",))(changed=0)
    assert proposals == [("optim.learning_rate", 3e-6), ("optim.learning_rate", 2.43e-4)]
    assert {p.brain for p in store.list_proposals("c", round=1)} == {"built-in"}
    (ev,) = store.events("c", kind="brain")
    assert any("no change that makes the update larger" in n for n in ev.message["notes"])


MISTAKE_NOTE = """---
name: 'Mistake: raising optim.learning_rate against plateau'
description: Raising optim.learning_rate (1e-06 → 0.000243) against plateau was refuted.
kind: mistake
triggers:
- symptom: plateau
  domains: [math]
intervention:
  knob: optim.learning_rate
  op: set
  arg: 0.000243
  available: true
evidence:
- campaign: c
  task: countdown
  proposal: c:r00:p1
  value: 0.000243
  effect: -0.000667
  ci_low: -0.033837
  ci_high: 0.032503
  seeds: [10007, 10008, 10009]
  outcome: reject
  date: 2026-11-28
counters: {helpful: 1, harmful: 0, uses: 1}
status: active
version: 1
sources: []
---
# Mistake: raising optim.learning_rate against plateau

## What was tried
Raising `optim.learning_rate` from `1e-06` to `0.000243` to treat **plateau**.

## What went wrong
The backtest refuted it: -0.001 (interval [-0.034, +0.033]).

## Correct approach
Prefer `difficulty-targeted`.

## Generalisable strategy
Treat a refuted direction as a strong prior, not a ban.

## Anti-patterns
- Re-proposing the same raise with a slightly different value.
"""


def test_a_stuck_round_whose_bracket_repeats_a_known_mistake_backtests_the_raise_alone(tmp_path):
    """Countdown seed 1 (bench/log/07-campaign-vs-static-baseline.md, session 32): round 0 promoted 2.7e-5 and refuted
    2.43e-4. At 2.7e-5 the mainline stayed stuck; the library's raise (×3, 8.1e-5) is backtested, and its bracket
    (1e-3) is refused as repeating the refuted raise."""
    propose_round_one = _round_one(tmp_path, history=False, lr=2.7e-5)
    note = propose_round_one.ctx.library / "mistake-optim-learning-rate-up-plateau"
    note.mkdir()
    (note / "SKILL.md").write_text(MISTAKE_NOTE)
    proposals, store = propose_round_one(changed=0)
    assert proposals == [("optim.learning_rate", 8.1e-5)]
    refused = [e.message["error"] for e in store.events("c", kind="invalid_draft")]
    assert len(refused) == 1 and "repeats the known mistake" in refused[0]
    (p,) = store.list_proposals("c", round=1)
    assert "bracket" not in p.rationale  # the draft itself


def test_a_round_that_can_propose_nothing_says_why(tmp_path):
    """A refuted raise to 8.1e-5 bars the library's raise: nothing is backtested, and the log says so with the
    brain's reason instead of going quiet (countdown seed 1 gave 12 silent rounds)."""
    propose_round_one = _round_one(tmp_path, history=False, lr=2.7e-5)
    note = propose_round_one.ctx.library / "mistake-optim-learning-rate-up-plateau"
    note.mkdir()
    (note / "SKILL.md").write_text(MISTAKE_NOTE.replace("0.000243", "8.1e-05"))
    logs: list[str] = []
    propose_round_one.ctx.log = logs.append
    proposals, store = propose_round_one(changed=0)
    assert proposals == []
    (said,) = [m for m in logs if "nothing to backtest" in m]
    assert said.startswith("round 1: nothing to backtest (skip raise-lr: optim.learning_rate=8.1e-05 was known "
                           "mistake mistake-optim-learning-rate-up-plateau")


def test_a_moving_round_proposes_from_the_whole_library(round_one):
    proposals, store = round_one(changed=60)
    knobs = {k for k, _ in proposals}
    assert knobs - {"optim.learning_rate"}, proposals  # reward, scaling and data changes are back in play
    assert not store.events("c", kind="movement")[0].message["stuck"]


def test_a_bracket_never_outranks_the_brains_first_draft_and_a_cut_draft_is_logged(tmp_path):
    """Groups of 2 (flaw suite, evaluation seeds 101-102): the brain ranked the recipe's outlier (4 generations) first
    and a lowered learning rate second; the rate's bracket must not push the outlier out of the round's two slots.
    The bracket, left without a slot, is logged as cut instead of vanishing."""
    from evotrainer.agent.brains.base import BrainResult
    from evotrainer.agent.proposing import _record

    ctx = _round_one(tmp_path, history=False).ctx
    h = HarnessSpec().with_knob("optim.learning_rate", 1e-6)
    hyp = Hypothesis(symptom="plateau", cause="a slow recipe", change="a change", expected_effect="accuracy up")
    drafts = [ProposalDraft(knob="grpo.num_generations", value=16, hypothesis=hyp, rationale="r",
                            cited_skills=["more-samples"]),
              ProposalDraft(knob="optim.learning_rate", value=3e-6, hypothesis=hyp, rationale="r",
                            cited_skills=["raise-lr"])]
    state = {"campaign_id": "c", "round": 1, "mainline": "c:r01:segment", "harness_version": h.version}
    _record(ctx, state, 1, h, BrainResult(drafts=drafts, brain="heuristic"), False)
    assert [p.knob for p in ctx.store.list_proposals("c", round=1)] == ["grpo.num_generations", "optim.learning_rate"]
    (cut,) = ctx.store.events("c", kind="drafts_cut")
    assert cut.message["round"] == 1 and cut.message["k"] == 2
    (bracket,) = cut.message["drafts"]
    assert bracket["knob"] == "optim.learning_rate" and bracket["value"] == pytest.approx(2.43e-4)
    assert bracket["skills"] == ["raise-lr"] and bracket["symptom"] == "plateau"


def test_a_round_without_a_training_signal_is_not_stuck(round_one):
    proposals, store = round_one(changed=0, zero_std=0.98)
    assert not store.events("c", kind="movement")[0].message["stuck"]
    assert {k for k, _ in proposals} - {"optim.learning_rate"}, proposals


# ------------------------------------------------------------------------------------------------- the stuck rule's own settings
def test_a_split_too_small_to_tell_is_never_judged_stuck(tmp_path):
    # 16 problems: 1 % of them is 0.16 answers; no change in 2 steps is what a learning policy shows there too
    small = [i % 2 == 0 for i in range(16)]
    _run(tmp_path, "tiny", {0: small, 2: small}, zero_std=0.5, steps=range(1, 3))
    v = judge(tmp_path, _pv("c:r00:segment", "tiny", 2), None, 0.01)
    assert not v["stuck"] and "too few problems to tell" in v["reason"]


def test_the_removed_stuck_rules_are_refused_in_a_spec_and_dropped_from_a_stored_one(tmp_path):
    """A user's spec that still switches on one of the removed stuck-round rules is refused with why and what to do;
    a campaign stored before they went (every default written out) resumes without them."""
    import yaml

    from evotrainer.config.campaign import BacktestSpec, load_campaign_spec, spec_of

    for key, value in (("stuck_margin", 0.02), ("stuck_interim", True), ("stuck_prefer_larger", True)):
        with pytest.raises(ValueError, match=f"backtest.{key}: removed; delete it.*Issue 59's ablation"):
            BacktestSpec(**{key: value})
    # the value that switched a rule off asks for what the campaign now does
    assert BacktestSpec(stuck_margin=None, stuck_interim=False, stuck_prefer_larger=False) == BacktestSpec()
    doc = yaml.safe_load((Path(__file__).parents[1] / "campaigns" / "arith-demo.yaml").read_text())
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec = load_campaign_spec(path)
    stored = {**spec.model_dump(mode="json"), "source_dir": str(tmp_path)}
    stored["backtest"] = {**stored["backtest"], "stuck_margin": 0.02, "stuck_interim": True, "stuck_prefer_larger": True}
    now = datetime.now(timezone.utc)
    again = spec_of(Campaign(id="c", name="c", spec=stored, status="created", mainline_version=None, thread_id="c",
                             mlflow_run_id=None, created=now, updated=now))
    assert again.backtest == spec.backtest
    bad = {**doc, "backtest": {**doc.get("backtest", {}), "stuck_margin": 0.02}}
    path.write_text(yaml.safe_dump(bad))
    from evotrainer.core.errors import ConfigError

    with pytest.raises((ConfigError, ValueError), match="stuck_margin: removed"):
        load_campaign_spec(path)


def test_a_campaign_without_stuck_rounds_reloads_from_its_stored_spec(tmp_path):
    # the store keeps spec.model_dump(mode="json"), every default written out; spec_of re-validates it on resume
    import yaml

    from evotrainer.config.campaign import load_campaign_spec, spec_of

    doc = yaml.safe_load((Path(__file__).parents[1] / "campaigns" / "arith-demo.yaml").read_text())
    doc.setdefault("backtest", {})["stuck_share"] = None
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec = load_campaign_spec(path)
    stored = {**spec.model_dump(mode="json"), "source_dir": str(tmp_path)}
    now = datetime.now(timezone.utc)
    again = spec_of(Campaign(id="c", name="c", spec=stored, status="created", mainline_version=None, thread_id="c",
                             mlflow_run_id=None, created=now, updated=now))
    assert again.backtest.stuck_share is None
