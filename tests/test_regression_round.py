"""A regressed round (agent/regression.py): a segment the campaign rolled back gets a ``regression`` finding, and the
round backtests only a smaller update.

The scenario is agentic seed 2 from its tuned start (bench/log/07-campaign-vs-static-baseline.md, session 26): lr 3e-4 took the policy
from 0.25 to 0.002 in its first 20 steps, the diagnosis named only the consequence (every group all wrong), and the
campaign backtested a data filter and the leak trap, then retrained the same recipe into the ground. On seed 0 a
segment that fell 8 points made it backtest a *higher* learning rate.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

from langgraph.runtime import Runtime

from evotrainer.agent.brains.base import BrainResult
from evotrainer.agent.lessons import SEED_LIBRARY
from evotrainer.config.harness import HarnessSpec, shrinks_update
from evotrainer.core.domain import Hypothesis, PolicyVersion, ProposalDraft

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _campaign(home: Path, cid: str, selection: float, brain=None, without: tuple[str, ...] = (),
              levels: list[int] | None = None, task: str = "countdown"):
    """Round 0 of campaign ``cid`` after a first segment that ended at ``selection`` on the selection split (the base
    policy scored 0.25), its rollouts all wrong; returns a function that diagnoses and proposes as the graph does.
    ``without``: skills removed from the campaign's copy of the seed library (a user's library that lacks them);
    ``levels``: the recipe's training levels (both tasks are scored on level 3), recorded in the segment's job
    record."""
    from evotrainer.agent.brains.heuristic import HeuristicBrain
    from evotrainer.agent.mainline import _keep_best
    from evotrainer.agent.nodes import diagnose, propose
    from evotrainer.agent.state import CampaignContext
    from evotrainer.config.campaign import CampaignSpec
    from evotrainer.store import Store

    h = HarnessSpec().with_knob("optim.learning_rate", 3e-4).with_knob("data.difficulty", levels)
    spec = CampaignSpec(name=cid, task=task, seed=2, screen=False, eval={"every": 0, "n": 500, "k": 1},
                        budget={"total_steps": 400},
                        backtest={"branch_steps": 10, "seeds": 3, "max_proposals": 2, "min_effect": 0.01})
    store = Store.for_home(home)
    store.create_campaign(cid, cid, {**spec.model_dump(mode="json"), "initial_harness_version": h.version}, h.version)
    store.add_harness_version(h.version, None, h.model_dump(mode="json"), [])
    library = home / f"lib-{cid}"
    shutil.copytree(SEED_LIBRARY, library)
    for slug in without:
        shutil.rmtree(library / slug)
    ctx = CampaignContext(campaign_id=cid, spec=spec, home=home, store=store, brain=brain or HeuristicBrain(),
                          pool=None, tracker=None, library=library)
    store.log_event(cid, "explore_start", {"policy": "/policies/base", "accuracy": 0.25})
    run = home / "jobs" / f"{cid}__r00__segment"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.0, "frac_reward_zero_std": 1.0})
                                               + "\n" for s in range(1, 21)))
    (run / "meta.json").write_text(json.dumps({"harness": h.model_dump(mode="json"),
                                               "spec": {"task": task, "eval": {"difficulty": None}}}))
    seg = store.add_policy_version(PolicyVersion(
        id=f"{cid}:r00:segment", campaign_id=cid, parent_id=None, harness_version=h.version, checkpoint="/ck/seg",
        run_name=run.name, mlflow_run_id=None, eval_accuracy=selection, step=20, created=NOW,
        selection_accuracy=selection))
    keep = _keep_best(ctx, 0, seg)  # what train_segment does before the round is diagnosed
    state = {"campaign_id": cid, "round": 0, "mainline": keep.id, "harness_version": h.version,
             "segment_run": run.name}
    runtime = Runtime(context=ctx)

    def diagnose_and_propose():
        diagnose(state, runtime)
        propose(state, runtime)
        return store.list_findings(cid, round=0), [(p.knob, p.new) for p in store.list_proposals(cid, round=0)]

    diagnose_and_propose.store, diagnose_and_propose.mainline, diagnose_and_propose.ctx = store, keep.id, ctx
    return diagnose_and_propose


def test_a_rolled_back_segment_is_diagnosed_as_a_regression_and_only_a_smaller_step_is_backtested(tmp_path):
    run = _campaign(tmp_path, "c", selection=0.002)
    assert run.mainline == "c:base"
    findings, proposals = run()
    first = findings[0]
    assert (first.symptom, first.diagnostic, first.severity) == ("regression", "rollback", "critical")
    assert first.metrics["drop"] == 0.248 and "below c:base (0.250)" in first.explanation
    assert {"too_hard", "dead_groups"} & {f.symptom for f in findings if f.severity != "info"}  # still on record
    # halving (the lower-lr skill) and its bracket (×1/32): no data filter for the discarded policy's dead groups
    assert proposals == [("optim.learning_rate", 1.5e-4), ("optim.learning_rate", 9.37e-6)]
    assert all(shrinks_update(k, 3e-4, v) for k, v in proposals)
    # a re-run after kill -9 adds neither a second finding nor a second round of proposals
    again, proposals_again = run()
    assert [f.symptom for f in again].count("regression") == 1 and proposals_again == proposals


def test_a_regressed_round_backtests_the_recipes_outlier_ahead_of_a_smaller_step(tmp_path):
    """Training on level 1 when scored on level 3 is a remedy the rollback does not make moot (the recipe stays):
    the harder curriculum and its two-level bracket take the round's slots, ahead of the halving."""
    run = _campaign(tmp_path, "r", selection=0.002, levels=[1, 1], task="arith")
    findings, proposals = run()
    assert {"regression", "unusual_recipe"} <= {f.symptom for f in findings if f.severity != "info"}
    assert proposals == [("data.difficulty", [2, 2]), ("data.difficulty", [3, 3])]
    (p0, p1) = run.store.list_proposals("r", round=0)
    assert p0.cited_skills == ["harder-curriculum"] and "twice" not in p0.rationale
    assert "a bracket of [2, 2] (2× the step)" in p1.hypothesis.change


def test_only_a_knob_the_recipe_check_found_far_off_is_spared_and_never_the_step_size():
    from evotrainer.agent.lessons import brain_inputs
    from evotrainer.agent.regression import recipe_remedies
    from evotrainer.core.domain import Finding

    h = HarnessSpec().with_knob("optim.learning_rate", 1e-7).with_knob("data.difficulty", [1, 1])
    metrics = {"optim.learning_rate/below": 9.0, "optim.learning_rate/above": 0.0, "data.difficulty/below": 1.0,
               "data.difficulty/above": 0.0, "grpo.beta/above": 0.2, "grpo.beta/below": 0.0}
    found = Finding(symptom="unusual_recipe", diagnostic="unusual_recipe", version="2", severity="warning",
                    confidence=0.6, explanation="the recipe sets ...", metrics=metrics)
    candidates = brain_inputs(SEED_LIBRARY, h, [found], "arith")[0]
    assert {"raise-lr", "harder-curriculum"} <= {c.id for c in candidates}
    # the learning rate is the regression's own knob; beta lies nearer than the warning distance (0.5)
    assert recipe_remedies(candidates, [found], h) == {"data.difficulty": "up"}
    assert recipe_remedies(candidates, [found.model_copy(update={"severity": "info"})], h) == {}


def test_a_draft_beyond_the_tasks_levels_is_refused_before_it_is_backtested(tmp_path):
    import pytest

    from evotrainer.agent.arms import _check_draft
    from evotrainer.core.errors import ConfigError
    from evotrainer.tasks import get_task

    run = _campaign(tmp_path, "t", selection=0.25, levels=[4, 4])
    h, top = HarnessSpec(), get_task("countdown").max_difficulty
    _check_draft(run.ctx, h, "data.difficulty", [top, top], "too_easy", None)
    with pytest.raises(ConfigError, match=f"outside task 'countdown' levels 2..{top}"):
        _check_draft(run.ctx, h, "data.difficulty", [top + 1, top + 1], "too_easy", None)


def test_a_decline_within_noise_is_no_regression(tmp_path):
    findings, proposals = _campaign(tmp_path, "d", selection=0.24)()
    assert "regression" not in {f.symptom for f in findings}
    assert proposals and ("optim.learning_rate", 1.5e-4) not in proposals


class _Raiser:
    """A brain (an LLM, say) that drafts a larger step and a data filter after the fall."""

    name = "raiser"

    def propose(self, ctx):
        hyp = Hypothesis(symptom="too_hard", cause="groups all wrong", change="a change", expected_effect="accuracy up")
        return BrainResult(brain=self.name, drafts=[
            ProposalDraft(knob="optim.learning_rate", value=9e-4, hypothesis=hyp, rationale="r", cited_skills=[]),
            ProposalDraft(knob="data.drop_all_wrong", value=True, hypothesis=hyp, rationale="r", cited_skills=[]),
            ProposalDraft(knob="optim.learning_rate", value=1e-4, hypothesis=hyp, rationale="r", cited_skills=[])])


def test_a_brain_that_drafts_a_larger_step_after_a_regression_is_overruled(tmp_path):
    run = _campaign(tmp_path, "e", selection=0.002, brain=_Raiser())
    _, proposals = run()
    assert proposals[0] == ("optim.learning_rate", 1e-4)
    assert all(shrinks_update(k, 3e-4, v) for k, v in proposals)
    (ev,) = run.store.events("e", kind="brain")
    assert any("the mainline regressed: dropped optim.learning_rate=0.0009, data.drop_all_wrong=True" in n
               for n in ev.message["notes"])


def test_the_regression_finding_is_no_diagnostic_verdict_for_the_revision_rule(tmp_path):
    """A fall that no diagnostic warned of is what diagnostic revision looks for (a false negative): the campaign's
    own finding must not count as a diagnostic having warned."""
    from evotrainer.agent.revise import flags

    run = _campaign(tmp_path, "f", selection=0.002)
    findings, _ = run()
    assert "regression" in {f.symptom for f in findings}
    assert "regression" not in flags(findings) and flags(findings)  # the rollout diagnostics' own warnings stay


def test_a_library_without_a_smaller_step_gets_the_built_in_one(tmp_path):
    """A user's library that lacks ``lower-lr``: the round still backtests a halving (and its bracket), drafted by the
    campaign itself and labelled so, instead of proposing nothing and retraining the recipe that undid the policy."""
    run = _campaign(tmp_path, "g", selection=0.002, without=("lower-lr",))
    _, proposals = run()
    assert proposals == [("optim.learning_rate", 1.5e-4), ("optim.learning_rate", 9.37e-6)]
    props = run.store.list_proposals("g", round=0)
    assert {p.brain for p in props} == {"built-in"} and props[0].hypothesis.symptom == "regression"
    assert props[0].cited_skills == [] and "built-in step-size draft" in props[0].rationale
    (ev,) = run.store.events("g", kind="brain")
    assert any("the library has no change that makes the update smaller: the built-in optim.learning_rate → 0.00015"
               in n for n in ev.message["notes"])


def test_the_built_in_step_also_stands_in_when_the_brain_drafts_only_what_the_rule_drops(tmp_path):
    class _Filter(_Raiser):
        def propose(self, ctx):
            drafted = super().propose(ctx)
            return drafted.model_copy(update={"drafts": drafted.drafts[1:2]})  # only the data filter

    run = _campaign(tmp_path, "h", selection=0.002, brain=_Filter(), without=("lower-lr",))
    _, proposals = run()
    assert proposals[0] == ("optim.learning_rate", 1.5e-4) and ("data.drop_all_wrong", True) not in proposals


def test_a_brain_that_declines_the_librarys_smaller_step_is_not_overruled(tmp_path):
    class _Silent:
        name = "silent"

        def propose(self, ctx):
            assert [c.id for c in ctx.candidates] == ["lower-lr"]  # offered, and declined
            return BrainResult(brain=self.name, drafts=[])

    _, proposals = _campaign(tmp_path, "i", selection=0.002, brain=_Silent())()
    assert proposals == []


def test_the_built_in_step_skips_refuted_values_and_stops_at_the_bounds():
    from evotrainer.agent.brains.base import RefutedChange
    from evotrainer.agent.fallback import step_draft

    h = HarnessSpec().with_knob("optim.learning_rate", 3e-4)
    refuted = [RefutedChange(knob="optim.learning_rate", value=1.5e-4, outcome="reject")]
    assert step_draft(h, "smaller", refuted).value == 7.5e-5
    assert step_draft(h, "larger", refuted).value == 9e-4
    assert step_draft(h, "larger", [*refuted, RefutedChange(knob="optim.learning_rate", value=9e-4,
                                                            outcome="reject")]).value == 2.7e-3
    every = [RefutedChange(knob="optim.learning_rate", value=v, outcome="reject") for v in (1.5e-4, 7.5e-5, 3.75e-5)]
    assert step_draft(h, "smaller", every) is None
    near_top = HarnessSpec().with_knob("optim.learning_rate", 0.05)  # the knob's bound is 0.1
    assert step_draft(near_top, "larger", []) is None  # ×3 leaves the bounds: no draft
