"""Campaign pieces that need no training: spec validation, library candidates, heuristic brain, decision rule."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from evotrainer.agent.brains.base import BrainContext, RefutedChange
from evotrainer.agent.brains.heuristic import HeuristicBrain
from evotrainer.agent.lessons import SEED_LIBRARY, brain_inputs
from evotrainer.config.campaign import BacktestSpec, load_campaign_spec
from evotrainer.config.harness import HarnessSpec
from evotrainer.core.domain import BranchResult, Candidate, Finding
from evotrainer.core.errors import ConfigError
from evotrainer.stats.backtest import decide
from tests.conftest import REPO, small_context


def _finding(symptom: str, severity: str = "warning", confidence: float = 0.8) -> Finding:
    return Finding(symptom=symptom, diagnostic=symptom, version="1", severity=severity, confidence=confidence,
                   explanation="test")


def resolve(h: HarnessSpec, findings=()):
    return brain_inputs(SEED_LIBRARY, h, list(findings), "arith")[0]


def _ctx(findings, refuted=(), harness=None, **kw) -> BrainContext:
    h = harness or HarnessSpec()
    return BrainContext(harness=h, findings=findings, candidates=kw.pop("candidates", resolve(h)),
                        refuted=list(refuted), **kw)


def test_demo_spec_is_valid_and_errors_name_file_and_field(tmp_path):
    spec = load_campaign_spec(REPO / "campaigns" / "arith-demo.yaml")
    assert spec.harness_path().is_file() and spec.autonomy == "auto"
    bad = tmp_path / "c.yaml"
    bad.write_text("name: x\nbudget: {total_steps: 10}\nbackground: true\n")
    with pytest.raises(ConfigError) as info:
        load_campaign_spec(bad)
    msg = str(info.value)
    assert "c.yaml" in msg and "background: unknown key" in msg and "cannot fit one round" not in msg
    bad.write_text("name: x\nbudget: {total_steps: 10}\n")
    with pytest.raises(ConfigError, match="cannot fit one round"):
        load_campaign_spec(bad)
    bad.write_text("name: x\nbudget: {total_steps: 1000}\nbrain: {kind: llm}\n")
    with pytest.raises(ConfigError, match="brain.llm"):
        load_campaign_spec(bad)
    # a start harness whose completion budget fills the policy's context is refused before anything is made
    from evotrainer.agent.campaign import start_campaign

    (tmp_path / "long.yaml").write_text("grpo: {max_completion_length: 256}\n")
    bad.write_text("name: x\nbudget: {total_steps: 1000}\nharness: long.yaml\n")
    with pytest.raises(ConfigError, match=r"long\.yaml: grpo\.max_completion_length=256 .* at most 255"):
        start_campaign(bad, tmp_path / "home")
    assert not (tmp_path / "home" / "campaigns").exists() and not (tmp_path / "home" / "state.db").exists()
    import multiprocessing

    # its worker began importing the training stack once the spec parsed; refusing the spec ended it
    assert multiprocessing.active_children() == []


def test_library_candidates_resolve_against_the_harness_and_drop_no_ops_and_inert_knobs():
    h = HarnessSpec()
    ids = {c.id: c for c in resolve(h)}
    assert ids["longer-completions"].value == 32 and ids["lower-lr"].value == pytest.approx(1.5e-4)
    assert "token-level-loss" not in ids  # dapo is already the default: a no-op
    assert "median-baseline" not in ids  # the harness cannot express it (marked unavailable)
    assert "clip-higher" not in ids  # inert on-policy: num_iterations 1 makes the ratio 1
    off_policy = h.with_knob("grpo.num_iterations", 2)
    assert resolve(off_policy) and "clip-higher" in {c.id for c in resolve(off_policy)}
    for c in resolve(h):
        h.with_knob(c.knob, c.value)  # every candidate is a valid single-knob change
    # ordered by retrieval: a truncation finding puts a truncation remedy first
    first = resolve(h, [_finding("truncation", "critical")])[0]
    assert "truncation" in first.symptoms


def test_a_scale_knob_proposal_gets_a_bracket_arm_further_out_and_others_move_down_a_slot():
    from evotrainer.agent.arms import _bracketed
    from evotrainer.agent.values import LOG_KNOBS, bracket_value

    h = HarnessSpec().with_knob("optim.learning_rate", 1e-6)
    drafts = HeuristicBrain().propose(_ctx([_finding("plateau", "info")], harness=h, max_proposals=4)).drafts
    lr = next(d for d in drafts if d.knob == "optim.learning_rate")
    others = [d for d in drafts if d is not lr]
    out, brackets = _bracketed(h, [lr, *others], 2)
    assert brackets == {1: "bracket"} and [d.knob for d in out[:2]] == ["optim.learning_rate"] * 2
    assert out[0].value == pytest.approx(3e-6) and out[1].value == pytest.approx(2.43e-4)  # ×3 and ×243
    assert out[2:] == others and "bracket" in out[1].rationale and "0.000243" in out[1].hypothesis.change
    # backtest.bracket_factor sets how far the bracket goes: 4 makes ×3 into ×81
    assert _bracketed(h, [lr, *others], 2, 4.0)[0][1].value == pytest.approx(8.1e-5)
    assert _bracketed(h, [lr, *others], 1) == ([lr, *others], {})  # one slot: no room for a bracket
    # a scale knob the round would backtest gets its bracket right after it, never ahead of a draft the brain ranked
    # first (which keeps its slot; the bracket runs only if an earlier draft is screened out); one the round would
    # not reach gets none
    assert others[0].knob not in LOG_KNOBS
    assert _bracketed(h, [others[0], lr, *others[1:]], 2) == ([others[0], *out[:2], *others[1:]], {2: "bracket"})
    assert _bracketed(h, [*others[:2], lr], 2) == ([*others[:2], lr], {})
    # not a scale knob, a move the bound leaves no room to extend, a lowered rate (bracketed downwards)
    assert bracket_value(h, "grpo.temperature", 1.0, 1.2) is None
    assert bracket_value(h, "optim.learning_rate", 0.1, 0.01) == pytest.approx(1e-6)
    assert bracket_value(h.with_knob("optim.learning_rate", 0.05), "optim.learning_rate", 0.05, 0.1) is None
    # backtest.bracket_range: from a rate already in the usual band (the tuned 3e-4) there is no bracket, and the
    # next draft takes the second slot; from 1e-5 the bracket stops at the band's top, 1e-3 (×100, not ×243 000)
    tuned = h.with_knob("optim.learning_rate", 3e-4)
    lr_t = next(d for d in HeuristicBrain().propose(_ctx([_finding("plateau", "info")], harness=tuned,
                                                         max_proposals=4)).drafts if d.knob == lr.knob)
    assert lr_t.value > 3e-4 and bracket_value(tuned, lr.knob, 3e-4, lr_t.value) == pytest.approx(0.0729)
    assert _bracketed(tuned, [lr_t, *others], 2) == ([lr_t, *others], {})
    assert _bracketed(tuned, [lr_t, *others], 2, bands={})[1] == {1: "bracket"}  # no band: bracketed within the bounds
    slow = h.with_knob("optim.learning_rate", 1e-5)
    lr_s = lr.model_copy(update={"value": 3e-5})
    out_s, _ = _bracketed(slow, [lr_s, *others], 2)
    assert out_s[1].value == pytest.approx(1e-3) and "1e-3" not in out_s[1].hypothesis.change
    assert "0.001" in out_s[1].hypothesis.change and "4.19×" in out_s[1].hypothesis.change  # the clipped move
    spec = load_campaign_spec(REPO / "campaigns" / "arith-demo.yaml")
    assert spec.backtest.bracket and spec.backtest.project_futility
    assert spec.backtest.bracket_range["optim.learning_rate"] == (1e-7, 1e-3)
    for bad, says in (({"grpo.temperature": (0.5, 2.0)}, "not a scale knob"),
                      ({"optim.learning_rate": (1e-3, 1e-4)}, "0 < low < high")):
        with pytest.raises(ValueError, match=says):
            BacktestSpec(bracket_range=bad)


def test_a_shift_of_the_training_levels_gets_a_bracket_twice_as_far_inside_the_levels():
    from evotrainer.agent.arms import _bracketed
    from evotrainer.agent.values import bracket_value
    from evotrainer.core.domain import Hypothesis, ProposalDraft

    h = HarnessSpec().with_knob("data.difficulty", [5, 5])
    hyp = Hypothesis(symptom="unusual_recipe", cause="levels above the scored ones", change="one level down",
                     expected_effect="accuracy up")
    drafts = [ProposalDraft(knob="data.difficulty", value=[4, 4], hypothesis=hyp, rationale="r",
                            cited_skills=["easier-curriculum"]),
              ProposalDraft(knob="grpo.num_generations", value=16, hypothesis=hyp, rationale="r", cited_skills=[])]
    out, fixed = _bracketed(h, drafts, 2)
    assert fixed == {1: "bracket"} and [d.value for d in out[:2]] == [[4, 4], [3, 3]] and out[2:] == drafts[1:]
    assert "a bracket of [4, 4] (2× the step)" in out[1].hypothesis.change
    assert bracket_value(h, "data.difficulty", [2, 3], [1, 2]) is None  # below level 1: no bracket
    assert bracket_value(h, "data.difficulty", [2, 3], [2, 4]) is None  # not a shift of both ends
    assert bracket_value(h, "data.difficulty", [1, 2], [2, 3]) == [3, 4]  # the task's last level is checked per draft


def test_the_prompt_pool_is_a_scale_knob_bracketed_within_what_rl_prompt_sets_hold():
    from evotrainer.agent.values import bracket_value
    from evotrainer.config.campaign import BRACKET_RANGE

    h, band = HarnessSpec().with_knob("data.pool_size", 64), BRACKET_RANGE["data.pool_size"]
    assert bracket_value(h, "data.pool_size", 64, 256, 5.0, band) == 65_536  # ×4 beside the band's top, an int
    assert bracket_value(h.with_knob("data.pool_size", 8192), "data.pool_size", 8192, 32_768, 5.0, band) is None


def test_heuristic_brain_maps_findings_to_relevant_single_knob_changes():
    brain = HeuristicBrain()
    res = brain.propose(_ctx([_finding("truncation", "critical")], max_proposals=2))
    assert len(res.drafts) == 2 and res.brain == "heuristic"
    knobs = {d.knob for d in res.drafts}
    assert knobs <= {"grpo.max_completion_length", "grpo.mask_truncated_completions", "reward.overlong.weight"}
    assert all(d.hypothesis.symptom == "truncation" for d in res.drafts)
    again = brain.propose(_ctx([_finding("truncation", "critical")], max_proposals=2))
    assert [d.knob for d in again.drafts] == [d.knob for d in res.drafts]  # seeded: a resume proposes the same


def test_a_finding_without_evidence_makes_no_symptom_present_for_the_heuristic_brain():
    """Round 0's 20 steps are too few for the plateau diagnostic ("not enough evidence"); that says nothing of a
    plateau, so a plateau-only remedy is no answer beside a critical truncation, on any draw."""
    none = Finding(symptom="plateau", diagnostic="plateau", version="1", severity="info", confidence=0.0,
                   explanation="not enough evidence: needs at least 30 steps of reward")
    for seed in range(8):
        ctx = _ctx([_finding("truncation", "critical"), none], max_proposals=4)
        drafts = HeuristicBrain().propose(ctx.model_copy(update={"seed": seed})).drafts
        assert drafts and all(d.hypothesis.symptom == "truncation" for d in drafts), (seed, drafts)


def test_heuristic_brain_prefers_recorded_winners_and_skips_refuted_without_new_evidence():
    h = HarnessSpec()
    cands = [c for c in resolve(h) if "truncation" in c.symptoms]
    good = next(c for c in cands if c.id == "mask-truncated")
    boosted = [c.model_copy(update={"effects": [0.08, 0.1, 0.09]}) if c.id == good.id else
               c.model_copy(update={"effects": [-0.05, -0.04]}) for c in cands]
    wins = sum(HeuristicBrain().propose(_ctx([_finding("truncation")], candidates=boosted, max_proposals=1, round=r))
               .drafts[0].knob == good.knob for r in range(20))
    assert wins >= 18
    refuted = [RefutedChange(knob=good.knob, value=True, outcome="reject", symptoms=["truncation"])]
    res = HeuristicBrain().propose(_ctx([_finding("truncation")], refuted=refuted, candidates=boosted, max_proposals=3))
    assert good.knob not in {d.knob for d in res.drafts} and any("no new symptom" in n for n in res.notes)
    res = HeuristicBrain().propose(_ctx([_finding("truncation"), _finding("plateau", "info")], refuted=refuted,
                                        candidates=boosted, max_proposals=3))
    assert good.knob not in {d.knob for d in res.drafts}  # an info-level plateau is not new evidence
    res = HeuristicBrain().propose(_ctx([_finding("truncation"), _finding("repetition")], refuted=refuted,
                                        candidates=boosted, max_proposals=3))
    assert good.knob in {d.knob for d in res.drafts}  # a new symptom is new evidence


def test_a_blocked_trap_is_not_proposed_again_while_the_findings_of_its_round_persist(tmp_path):
    """Round 1 sees the same critical findings as round 0: none of them is new evidence for the blocked trap."""
    from datetime import datetime, timezone

    from evotrainer.agent.arms import _refuted
    from evotrainer.core.domain import Decision, Hypothesis, Proposal
    from evotrainer.store import Store

    h = HarnessSpec()
    round0 = [_finding("dead_groups", "critical"), _finding("too_hard", "critical"), _finding("truncation"),
              _finding("plateau", "info")]
    with Store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        store.create_campaign("c", "c", {}, "t")
        store.add_findings("c", 0, "c__r00__segment", round0)
        store.add_proposal(Proposal(
            id="c:r00:p0", campaign_id="c", round=0, knob="data.drop_all_wrong", old=False, new=True,
            hypothesis=Hypothesis(symptom="too_hard", cause="no signal", change="drop unsolved",
                                  expected_effect="held-out up"),
            rationale="", cited_skills=[], brain="heuristic", status="approved", harness_version=h.version,
            created=datetime.now(timezone.utc)))
        store.add_decision(Decision(proposal_id="c:r00:p0", outcome="blocked", reasons=["gate"],
                                    gate_reasons=["answer_leak"], at=datetime.now(timezone.utc)))
        (ref,) = _refuted(small_context(store, home=tmp_path))
    # every serious symptom of its round, the cited one first; the info-level plateau is not evidence
    assert ref.symptoms == ["too_hard", "dead_groups", "truncation"] and ref.outcome == "blocked"
    cands = [c for c in resolve(h, round0) if c.knob == "data.drop_all_wrong"]
    assert cands, "the seed library offers data.drop_all_wrong for dead groups"
    for r in range(5):
        res = HeuristicBrain().propose(_ctx(round0[:3], refuted=[ref], candidates=cands, round=r))
        assert not res.drafts and any("no new symptom" in n for n in res.notes)
    res = HeuristicBrain().propose(_ctx(round0[:3] + [_finding("repetition")], refuted=[ref], candidates=cands))
    assert [d.knob for d in res.drafts] == ["data.drop_all_wrong"]  # a new symptom reopens it


def test_truncation_remedies_are_as_urgent_as_the_dead_groups_truncation_may_explain(monkeypatch):
    """Cut-off answers score as failures: a critical too_hard must not bury the budget fix beside it."""
    from evotrainer.agent.brains import heuristic

    h = HarnessSpec()
    findings = [_finding("too_hard", "critical"), _finding("truncation", "warning")]
    # equal, well-measured effects: the draws barely differ, so the findings' urgency decides the order
    cands = [c.model_copy(update={"effects": [0.02] * 30}) for c in resolve(h, findings)]
    cut = {c.knob for c in cands if "truncation" in c.symptoms and "too_hard" not in c.symptoms}
    assert cut and any("too_hard" in c.symptoms for c in cands)

    def firsts() -> int:
        return sum(HeuristicBrain().propose(_ctx(findings, candidates=cands, max_proposals=1, round=r)).drafts[0].knob
                   in cut for r in range(40))

    assert 8 <= firsts() <= 40
    monkeypatch.setattr(heuristic, "EXPLAINS", {})
    assert firsts() == 0  # without the link the critical finding's remedies always come first


def test_a_consequence_is_not_counted_as_a_second_finding_for_the_change_that_answers_its_cause(monkeypatch):
    """Every all-wrong group is a dead group: a change answering too_hard and dead_groups has one finding behind it, so
    a change answering too_hard and a recipe finding (two) comes first; counting the same groups twice buried it."""
    from evotrainer.agent.brains import heuristic
    from evotrainer.core.domain import Candidate

    findings = [_finding("too_hard", "critical"), _finding("dead_groups", "critical"), _finding("unusual_recipe", "warning", 0.6)]
    dead = Candidate(id="drop", symptoms=["dead_groups", "too_hard"], weights={"too_hard": 0.9}, knob="data.drop_all_wrong",
                     value=True, description="drop unsolved", effects=[0.02] * 30)
    levels = Candidate(id="easier", symptoms=["too_hard", "unusual_recipe"], weights={"too_hard": 0.9, "unusual_recipe": 0.9},
                       knob="data.difficulty", value=[2, 2], description="one level down", effects=[0.02] * 30)

    def firsts() -> int:
        return sum(HeuristicBrain().propose(_ctx(findings, candidates=[dead, levels], max_proposals=1, round=r))
                   .drafts[0].knob == "data.difficulty" for r in range(40))

    assert firsts() == 40
    monkeypatch.setattr(heuristic, "EXPLAINS", {})
    assert firsts() == 0


def test_a_hypothesis_cites_what_training_showed_before_a_reading_of_the_recipe():
    """Four generations answer the recipe's group of 2 (trigger weight 0.9) and the dead groups round 0 saw (0.8):
    the hypothesis names the dead groups, and a change only the recipe reading calls for still names the reading."""
    from evotrainer.core.domain import Candidate

    findings = [_finding("dead_groups", "warning", 0.6), _finding("unusual_recipe", "warning", 0.9)]
    more = Candidate(id="more-samples", symptoms=["dead_groups", "unusual_recipe"],
                     weights={"dead_groups": 0.8, "unusual_recipe": 0.9}, knob="grpo.num_generations", value=4,
                     description="more samples")
    pool = Candidate(id="larger-pool", symptoms=["unusual_recipe"], weights={"unusual_recipe": 0.9},
                     knob="data.pool_size", value=256, description="larger pool")
    drafts = HeuristicBrain().propose(_ctx(findings, candidates=[more, pool], max_proposals=2)).drafts
    assert {d.knob: d.hypothesis.symptom for d in drafts} == {"grpo.num_generations": "dead_groups",
                                                              "data.pool_size": "unusual_recipe"}
    # an info-level plateau (always around) is no observation a warning-level reading gives way to
    rate = Candidate(id="raise-lr", symptoms=["plateau", "unusual_recipe"], weights={"unusual_recipe": 0.9},
                     knob="optim.learning_rate", value=3e-6, description="raise the rate")
    (d,) = HeuristicBrain().propose(_ctx([_finding("plateau", "info", 0.5), _finding("unusual_recipe", "warning")],
                                         candidates=[rate], max_proposals=1)).drafts
    assert d.hypothesis.symptom == "unusual_recipe"


def test_heuristic_brain_stops_exploring_when_the_record_says_changes_do_not_help():
    h = HarnessSpec()
    plateau = [_finding("plateau", "info")]
    cands = [c for c in resolve(h, plateau) if "plateau" in c.symptoms]
    assert len(cands) >= 4
    brain = HeuristicBrain(explore_threshold=0.3)
    # a neutral record: untried changes have P(gain > 0.01) ~ 0.42, so they are explored
    res = brain.propose(_ctx(plateau, candidates=cands, max_proposals=2, min_effect=0.01))
    assert len(res.drafts) == 2
    # most changes tried so far were refuted: untried ones inherit a negative prior and are not worth a backtest
    tried, untried = cands[:3], cands[3:]
    record = [c.model_copy(update={"effects": [-0.04, -0.03]}) for c in tried] + untried
    assert brain.prior_mean(record) < -0.015
    res = brain.propose(_ctx(plateau, candidates=record, max_proposals=2, min_effect=0.01))
    assert res.drafts == [] and any("trains the mainline" in n for n in res.notes)
    assert any(n.startswith(f"skip {untried[0].id}: P(effect > +0.010)") for n in res.notes)
    # ... unless one of them has its own good record
    star = untried[0].model_copy(update={"effects": [0.06]})
    res = brain.propose(_ctx(plateau, candidates=[*record[:3], star, *untried[1:]], max_proposals=2, min_effect=0.01))
    assert res.drafts[0].knob == star.knob  # (its +0.06 also lifts the prior of the other untried ones)
    # a remedy for a present warning is tried whatever the record (a present problem is evidence enough)
    trunc = [c.model_copy(update={"effects": []}) for c in resolve(h, [_finding("truncation")]) if "truncation" in c.symptoms]
    res = brain.propose(_ctx([_finding("truncation")], candidates=record + trunc, max_proposals=1, min_effect=0.01))
    assert res.drafts and res.drafts[0].hypothesis.symptom == "truncation"
    # threshold 0 (the class default) explores everything not refuted
    assert HeuristicBrain().propose(_ctx(plateau, candidates=record, max_proposals=2, min_effect=0.01)).drafts


def _branches(role, accs, pid=None, gate_ok=True, rewards=None):
    rewards = rewards or [None] * len(accs)
    return [BranchResult(backtest_id="b", proposal_id=pid, role=role, seed=i, run_name=f"{role}{i}",
                         status="finished" if a is not None else "failed", error=None if a is not None else "boom",
                         eval_accuracy=a, gate_passed=gate_ok if role == "treatment" else None, train_reward=r,
                         gate_reasons=[] if gate_ok else ["answer_spraying: warning"])
            for i, (a, r) in enumerate(zip(accs, rewards))]


@pytest.mark.parametrize(
    ("control", "treatment", "gate_ok", "outcome"),
    [
        ([0.50, 0.52, 0.49], [0.60, 0.63, 0.61], True, "promote"),
        ([0.50, 0.52, 0.49], [0.45, 0.47, 0.46], True, "reject"),
        ([0.50, 0.52, 0.49], [0.60, 0.45, 0.52], True, "inconclusive"),
        ([0.50, 0.52, 0.49], [0.70, 0.72, 0.71], False, "blocked"),
        ([0.50, 0.52, 0.49], [0.40, 0.41, 0.42], False, "reject"),
        ([0.50, 0.52, 0.49], [0.60, None, None], True, "failed"),
    ],
)
def test_decision_rule(control, treatment, gate_ok, outcome):
    d = decide("p", _branches("control", control), _branches("treatment", treatment, "p", gate_ok), 0.0, 0.8)
    assert d.outcome == outcome, d.reasons
    if outcome == "blocked":
        assert d.gate_reasons and "tripped the gate" in d.reasons[-1]
    if outcome == "failed":
        assert "boom" in " ".join(d.reasons)


def test_a_trap_that_raises_the_training_reward_is_blocked_even_when_held_out_accuracy_drops():
    ctrl = _branches("control", [0.50, 0.52, 0.49], rewards=[0.40, 0.42, 0.41])
    leak = _branches("treatment", [0.45, 0.47, 0.46], "p", gate_ok=False, rewards=[0.90, 0.88, 0.93])
    d = decide("p", ctrl, leak, 0.0, 0.8)
    assert d.outcome == "blocked" and "training reward (+0.493)" in d.reasons[-1]
    # the same gate trip without any gain is only a reject
    worse = _branches("treatment", [0.45, 0.47, 0.46], "p", gate_ok=False, rewards=[0.30, 0.31, 0.29])
    assert decide("p", ctrl, worse, 0.0, 0.8).outcome == "reject"


def test_regression_margin_is_eval_noise_with_the_backtest_floor():
    from evotrainer.stats.backtest import regression_margin

    m = regression_margin(0.2, 0.14, 200, 0.9, 0.01)  # 1.2816 * sqrt((.16 + .1204) / 200)
    assert m == pytest.approx(0.04799, abs=1e-4)
    assert regression_margin(0.2, 0.14, 20_000, 0.9, 0.01) == 0.01  # many problems: the floor decides
    assert regression_margin(0.2, 0.14, 200, 0.99, 0.0) > m
    with pytest.raises(ValueError, match="n >= 1"):
        regression_margin(0.2, 0.1, 0, 0.9, 0.0)


def test_a_mainline_that_falls_below_its_best_version_goes_back_to_it_once(tmp_path):
    """Noise keeps the current version; a real decline returns the best one, recorded once per declined version."""
    from datetime import datetime, timedelta, timezone

    from evotrainer.agent.mainline import _keep_best
    from evotrainer.config.campaign import CampaignSpec
    from evotrainer.core.domain import PolicyVersion
    from evotrainer.reports.summaries import campaign_summary
    from evotrainer.store import Store

    h = HarnessSpec()
    spec = CampaignSpec(name="c", eval={"every": 0, "n": 200, "k": 1}, backtest={"min_effect": 0.01},
                        budget={"total_steps": 1000})
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with Store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        store.create_campaign("c", "c", spec.model_dump(mode="json"), "t")
        store.add_harness_version(h.version, None, h.model_dump(mode="json"), [])
        ctx = small_context(store, spec, home=tmp_path)
        versions = {}

        def add(i, acc, parent):
            pv = PolicyVersion(id=f"c:v{i}", campaign_id="c", parent_id=parent, harness_version=h.version,
                               checkpoint=f"/ck/{i}", run_name=f"run{i}", mlflow_run_id=None, eval_accuracy=acc,
                               step=20 * i, created=t0 + timedelta(minutes=i))
            versions[i] = store.add_policy_version(pv)
            return versions[i]

        assert _keep_best(ctx, 0, add(1, 0.200, None)).id == "c:v1"  # nothing earlier
        assert _keep_best(ctx, 0, add(2, 0.165, "c:v1")).id == "c:v2"  # 0.035 down: within noise (margin 0.049)
        assert _keep_best(ctx, 1, add(3, None, "c:v2")).id == "c:v3"  # no held-out accuracy: nothing to compare
        declined = add(4, 0.140, "c:v3")
        for _ in range(2):  # a node re-run after kill -9 decides the same and writes no second event
            assert _keep_best(ctx, 2, declined).id == "c:v1"
        (ev,) = store.events("c", kind="regression_rollback")
        assert ev.message["from"] == "c:v4" and ev.message["to"] == "c:v1" and ev.message["round"] == 2
        assert ev.message["margin"] == pytest.approx(0.04799, abs=1e-4)

        store.set_campaign("c", mainline_version="c:v1")
        doc = campaign_summary(tmp_path, "c", store=store, read=lambda _p: __import__("pandas").DataFrame())
        assert doc["accuracy"]["end"] == 0.2  # what the campaign hands over, not the last version trained
        assert [(r["from"], r["to"], r["auto"]) for r in doc["rollbacks"]] == [("c:v4", "c:v1", True)]

        off = replace(ctx, spec=spec.model_copy(update={"rollback": spec.rollback.model_copy(update={"enabled": False})}))
        assert _keep_best(off, 3, add(5, 0.0, "c:v4")).id == "c:v5"
        assert len(store.events("c", kind="regression_rollback")) == 1

        # only ancestors: a better version off the current line (one a person rolled back from) is no target
        add(6, 0.9, None)
        assert _keep_best(ctx, 4, add(7, 0.1, "c:v1")).id == "c:v1"
        # only the same completion budget: each accuracy was played within its own harness's budget
        short = h.with_knob("grpo.max_completion_length", h.grpo.max_completion_length // 2)
        store.add_harness_version(short.version, h.version, short.model_dump(mode="json"), [])
        pv = PolicyVersion(id="c:v8", campaign_id="c", parent_id="c:v7", harness_version=short.version,
                           checkpoint="/ck/8", run_name="run8", mlflow_run_id=None, eval_accuracy=0.0, step=160,
                           created=t0 + timedelta(minutes=8))
        assert _keep_best(ctx, 5, store.add_policy_version(pv)).id == "c:v8"


def test_a_first_segment_that_wrecks_the_policy_goes_back_to_the_base_policy(tmp_path):
    """The base policy is the first ancestor: a first segment far below it returns the mainline to the base (a
    version of no run, whose checkpoint is the base's directory and from which jobs start new), once; a decline
    within noise, or a mainline played within another budget, keeps going."""
    from datetime import datetime, timedelta, timezone

    from evotrainer.agent.mainline import _fork_of, _keep_best
    from evotrainer.config.campaign import CampaignSpec
    from evotrainer.core.domain import PolicyVersion
    from evotrainer.reports.summaries import spend
    from evotrainer.store import Store

    h = HarnessSpec()
    spec = CampaignSpec(name="c", eval={"every": 0, "n": 500, "k": 1}, backtest={"min_effect": 0.01},
                        budget={"total_steps": 400})
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with Store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        store.add_harness_version(h.version, None, h.model_dump(mode="json"), [])
        ctxs = {}
        for cid in ("c", "d"):
            store.create_campaign(cid, cid, {**spec.model_dump(mode="json"), "initial_harness_version": h.version}, cid)
            store.log_event(cid, "explore_start", {"policy": "/policies/base", "accuracy": 0.25})
            ctxs[cid] = small_context(store, spec, home=tmp_path, campaign_id=cid)

        def add(cid, i, acc, parent, step, harness=h):
            return store.add_policy_version(PolicyVersion(
                id=f"{cid}:v{i}", campaign_id=cid, parent_id=parent, harness_version=harness.version,
                checkpoint=f"/ck/{i}", run_name=f"run{i}", mlflow_run_id=None, eval_accuracy=None, step=step,
                created=t0 + timedelta(minutes=i), selection_accuracy=acc))

        wrecked = add("c", 1, 0.002, None, 20)
        for _ in range(2):  # a node re-run after kill -9 goes back to the same version, with one event
            base = _keep_best(ctxs["c"], 0, wrecked)
            assert (base.id, base.run_name, base.step, base.checkpoint) == ("c:base", None, 0, "/policies/base")
            assert base.selection_accuracy == 0.25 and base.parent_id is None
        (ev,) = store.events("c", kind="regression_rollback")
        assert (ev.message["from"], ev.message["to"]) == ("c:v1", "c:base")
        assert _fork_of(base) is None and _fork_of(wrecked) == "run1@20"  # a job from the base starts new
        # ... from the campaign's base policy: a branch of another seed must not warm-start a policy of its own
        from evotrainer.agent.runs import JobAsk, _request

        job_ctx = ctxs["c"]
        branch = _request(job_ctx, JobAsk("c__r00__control__s10001", h, 30, spec.seed + 10001, None, 10, {}, 10))
        segment = _request(job_ctx, JobAsk("c__r01__segment", h, 30, spec.seed, None, 10, {"evotrainer.role": "segment"}))
        forked = _request(job_ctx, JobAsk("c__r02__control__s10001", h, 30, spec.seed + 10001, "run2@20", 10, {}, 30))
        assert branch.job.policy.seed == spec.seed and branch.job.seed == spec.seed + 10001
        # only the segment evaluates its start (movement compares with it); a branch is judged at its looks
        assert segment.job.eval.at_start and not branch.job.eval.at_start
        assert segment.job.policy == forked.job.policy == spec.policy  # as before

        # the next segment trains from the base; the base is then an ordinary ancestor, never added twice
        v2 = add("c", 2, 0.30, "c:base", 20)
        assert _keep_best(ctxs["c"], 1, v2).id == "c:v2"
        assert _keep_best(ctxs["c"], 2, add("c", 3, 0.0, "c:v2", 320)).id == "c:v2"  # the best of v2 and the base
        store.set_campaign("c", mainline_version="c:v2")
        doc = spend(store, "c", store.get_campaign("c"), store.policy_lineage("c"), [])
        assert doc["mainline_segments"] == 20  # the base trained nothing; v2 its 20 steps

        assert _keep_best(ctxs["d"], 0, add("d", 1, 0.22, None, 20)).id == "d:v1"  # 0.03 down: noise at n 500
        assert [pv.id for pv in store.policy_lineage("d")] == ["d:v1"]  # the base is stored only when gone back to
        short = h.with_knob("grpo.max_completion_length", h.grpo.max_completion_length // 2)
        store.add_harness_version(short.version, h.version, short.model_dump(mode="json"), [])
        other = add("d", 2, 0.0, None, 20, harness=short)  # played within another budget than the base was
        assert _keep_best(ctxs["d"], 0, other).id == "d:v2"
        assert not store.events("d", kind="regression_rollback")


def test_a_completion_budget_that_fills_the_policy_context_is_no_candidate(tmp_path):
    """longer-completions doubles 192 to 384; a 256-position policy cannot run that, so it is not proposed."""
    from evotrainer.agent.lessons import overflows_context
    from evotrainer.config.policy import PolicySpec

    h = HarnessSpec().with_knob("grpo.max_completion_length", 192)
    trunc = [_finding("truncation")]
    doubled = [c for c in brain_inputs(SEED_LIBRARY, h, trunc, "arith")[0] if c.knob == "grpo.max_completion_length"]
    assert doubled and doubled[0].value == 384  # without a context the library's doubling stands
    fits = [c for c in brain_inputs(SEED_LIBRARY, h, trunc, "arith", context=512)[0] if c.knob == "grpo.max_completion_length"]
    assert [c.value for c in fits] == [384]
    assert not [c for c in brain_inputs(SEED_LIBRARY, h, trunc, "arith", context=256)[0]
                if c.knob == "grpo.max_completion_length"]
    assert "at most 255" in overflows_context("grpo.max_completion_length", 384, 256)
    assert overflows_context("grpo.max_completion_length", 255, 256) is None
    assert overflows_context("optim.learning_rate", 1e9, 256) is None

    assert PolicySpec().context_length() == 256
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 1024}')
    assert PolicySpec(path=str(tmp_path)).context_length() == 1024
    (tmp_path / "config.json").write_text("not json")
    assert PolicySpec(path=str(tmp_path)).context_length() is None


@pytest.mark.parametrize("task_name", ["arith", "countdown", "code", "agentic"])
def test_the_decision_selection_and_confirmation_splits_are_disjoint(task_name):
    from evotrainer.tasks import get_task
    from evotrainer.training.evaluation import SPLITS, EvalSpec, heldout_problems, split_problems

    task = get_task(task_name)
    lo = task.default_difficulty
    ev = EvalSpec(n=50, k=1, difficulty=(lo, lo), seed=7)
    ids = {s: [p.id for p in split_problems(task, ev, s)] for s in SPLITS}
    for s in SPLITS:
        assert len(ids[s]) == len(set(ids[s])) == 50, s
    assert not set(ids["decision"]) & set(ids["selection"])
    assert not set(ids["decision"]) & set(ids["confirmation"])
    assert not set(ids["selection"]) & set(ids["confirmation"])
    assert ids["decision"] == [p.id for p in heldout_problems(task, ev)]  # what every job evaluates
    # all held-out problems, none from the train split, all at the levels asked for
    for s in SPLITS:
        assert all(p.difficulty == lo and task.split_of(p) == "heldout" for p in split_problems(task, ev, s))
    # another confirmation seed (campaign confirm --seed) stays clear of the decision and selection splits
    other = {p.id for p in split_problems(task, ev, "confirmation", seed=99)}
    assert not other & (set(ids["decision"]) | set(ids["selection"]))


@pytest.mark.parametrize("task_name", ["arith", "countdown"])
def test_a_wider_confirmation_stays_outside_the_other_splits_and_begins_with_the_default_one(task_name):
    from evotrainer.tasks import get_task
    from evotrainer.training.evaluation import EvalSpec, split_problems

    task = get_task(task_name)
    ev = EvalSpec(n=50, k=1, seed=7)
    chosen_on = {p.id for s in ("decision", "selection") for p in split_problems(task, ev, s)}
    default = [p.id for p in split_problems(task, ev, "confirmation")]
    wide = [p.id for p in split_problems(task, ev, "confirmation", n=170)]
    assert len(wide) == len(set(wide)) == 170 and not set(wide) & chosen_on
    assert wide[:50] == default  # prefix-consistent draws: the wider split extends the default one
    assert [p.id for p in split_problems(task, ev, "confirmation", n=50)] == default
    other = [p.id for p in split_problems(task, ev, "confirmation", seed=99, n=120)]
    assert len(other) == 120 and not set(other) & chosen_on


def test_a_confirmations_paired_standard_error():
    from evotrainer.agent.confirm import Confirmation, paired_se

    # 10 problems: 3 gained, 1 lost, 6 unchanged -> d has mean 0.2 and s.d. sqrt((3*0.64 + 0.04*6 + 1.44)/9)
    start = [False] * 3 + [True] + [True] * 3 + [False] * 3
    end = [True] * 3 + [False] + [True] * 3 + [False] * 3
    assert paired_se(start, end) == round(((3 * 0.64 + 6 * 0.04 + 1.44) / 9) ** 0.5 / 10 ** 0.5, 4)
    assert paired_se(start, start) == 0.0 and paired_se([True], [False]) is None
    c = Confirmation(seed=1, n=10, difficulty=(2, 2), mainline="v", start=0.4, end=0.6, budgets=(16, 16), gain_se=0.2)
    assert "start 0.400 → end 0.600 (+0.200, s.e. 0.200)" in c.describe()
    assert "s.e." not in c.model_copy(update={"gain_se": None}).describe()  # records made before it existed


def test_split_errors_name_what_to_change():
    from evotrainer.tasks import get_task
    from evotrainer.training.evaluation import EvalSpec, split_problems

    task = get_task("arith")
    ev = EvalSpec(n=50, k=1, difficulty=(2, 2), seed=7)
    with pytest.raises(ConfigError, match="eval.seed"):
        split_problems(task, ev, "confirmation", seed=7)
    with pytest.raises(ConfigError, match="lower eval.n"):  # one-digit sums: far fewer than 3 × 2000 held-out problems
        split_problems(task, EvalSpec(n=2000, k=1, difficulty=(1, 1), seed=7), "selection")
    with pytest.raises(ConfigError, match="splits: decision, selection, confirmation"):
        split_problems(task, ev, "training")
    with pytest.raises(ConfigError, match="only the confirmation split takes its own size"):
        split_problems(task, ev, "selection", n=100)
    with pytest.raises(ConfigError, match="give 1 or more"):
        split_problems(task, ev, "confirmation", n=0)
    with pytest.raises(ConfigError, match="lower the confirmation's n"):  # more than all two-digit sums
        split_problems(task, ev, "confirmation", n=20000)


# ---------------------------------------------------------------------------------------------- sequential looks
def _look_branches(accs: list[float], role: str, pid: str | None = None) -> list[BranchResult]:
    return [BranchResult(backtest_id="b", proposal_id=pid, role=role, seed=i, run_name=f"{role}{i}", status="finished",
                         eval_accuracy=a, gate_passed=True if role == "treatment" else None) for i, a in enumerate(accs)]


def _simulate(rng, n_seeds: int, n_problems: int, looks: int, effect: float, correlated: bool, seed_sd: float = 0.01):
    """Per look, a control and a treatment correctness table (seeds × problems): problems differ in difficulty,
    seeds in how far training moved (a random walk over looks when ``correlated``; the paired per-seed effects
    of the demo's branches spread by 0.005-0.02), the treatment by ``effect``."""
    import numpy as np

    q = rng.beta(2, 2, size=n_problems)
    walk_c, walk_t = np.zeros(n_seeds), np.zeros(n_seeds)
    out = []
    for _ in range(looks):
        step_c, step_t = rng.normal(0, seed_sd, n_seeds), rng.normal(0, seed_sd, n_seeds)
        walk_c = walk_c + step_c if correlated else step_c
        walk_t = walk_t + step_t if correlated else step_t
        pc = np.clip(q[None, :] + walk_c[:, None], 0, 1)
        pt = np.clip(q[None, :] + walk_t[:, None] + effect, 0, 1)
        u = rng.random((n_seeds, n_problems))  # shared uniforms: the two arms agree on most problems, as they do
        out.append(((u < pc).astype(int), (u < pt).astype(int)))
    return out


def _run_sequential(tables, looks: int, confidence: float, min_effect: float = 0.0, stop_at: int | None = None):
    """The looks in order until one decides; ``stop_at``: the budget ends the backtest at that look."""
    for j, (c, t) in enumerate(tables, start=1):
        outcomes = {**{("control", s): list(c[s]) for s in range(len(c))}, **{("p", s): list(t[s]) for s in range(len(t))}}
        d = decide("p", _look_branches(list(c.mean(axis=1)), "control"), _look_branches(list(t.mean(axis=1)), "treatment", "p"),
                   min_effect, confidence, look=j, looks=looks, outcomes=outcomes, last=j == stop_at,
                   undecided="inconclusive" if j == stop_at else None)
        if d is not None:
            return d, j
    raise AssertionError("the last look must decide")


@pytest.mark.parametrize("correlated,stop_at", [(True, None), (False, None), (True, 2), (False, 1)])
def test_sequential_looks_keep_false_promotions_within_the_configured_level(correlated, stop_at):
    """Also when the budget ends the backtest early (``stop_at``) and that look spends the error left unspent."""
    import numpy as np

    rng = np.random.default_rng((7 if correlated else 8) + 10 * (stop_at or 0))
    confidence, looks, sims = 0.8, 3, 600
    promoted = naive = 0
    for _ in range(sims):
        tables = _simulate(rng, 3, 300, looks, effect=0.0, correlated=correlated)
        d, _ = _run_sequential(tables, looks, confidence, stop_at=stop_at)
        promoted += d.outcome == "promote"
        # the same data tested at every look at the full level, without spending: what the spending prevents
        naive += any(decide("p", _look_branches(list(c.mean(axis=1)), "control"),
                            _look_branches(list(t.mean(axis=1)), "treatment", "p"), 0.0, confidence,
                            outcomes={**{("control", s): list(c[s]) for s in range(3)},
                                      **{("p", s): list(t[s]) for s in range(3)}}).outcome == "promote"
                     for c, t in tables)
    level = (1 - confidence) / 2  # the one-sided error of the fixed-horizon rule
    slack = 2.5 * (level * (1 - level) / sims) ** 0.5
    assert promoted / sims <= level + slack, promoted / sims
    if not correlated and stop_at is None:  # independent looks: uncorrected repeated testing inflates the error
        assert naive / sims > level + slack, naive / sims


def test_a_sequential_backtest_stops_early_on_a_large_effect_and_on_a_null_one():
    import numpy as np

    rng = np.random.default_rng(3)
    big = _simulate(rng, 3, 1000, 3, effect=0.15, correlated=True)
    d, at = _run_sequential(big, 3, 0.8, min_effect=0.01)
    assert (d.outcome, at) == ("promote", 1) and "stopped early" in d.reasons[-1]
    assert d.stats.look == 1 and d.stats.looks == 3 and d.stats.confidence == pytest.approx(1 - 0.2 / 27, abs=1e-6)
    # a change that changes nothing: with common random numbers both arms make the same run
    same = [(c, c.copy()) for c, _ in _simulate(rng, 3, 1000, 3, effect=0.0, correlated=True)]
    d, at = _run_sequential(same, 3, 0.8, min_effect=0.01)
    assert (d.outcome, at) == ("reject", 1) and d.reasons[-1].startswith("futility")
    # promotion may ask only for significance (min_effect 0) while futility still stops changes too small to matter
    c = same[0][0]
    outcomes = {**{("control", s): list(c[s]) for s in range(3)}, **{("p", s): list(c[s]) for s in range(3)}}
    args = (_look_branches(list(c.mean(axis=1)), "control"), _look_branches(list(c.mean(axis=1)), "treatment", "p"))
    assert decide("p", *args, 0.0, 0.8, look=1, looks=3, outcomes=outcomes) is None  # 0 is not below 0: go on
    d = decide("p", *args, 0.0, 0.8, look=1, looks=3, outcomes=outcomes, futility_effect=0.01)
    assert d.outcome == "reject" and "not worth having" in d.reasons[-1]
    # a real but modest effect is not stopped for futility: it gets to later looks
    modest = _simulate(rng, 3, 1000, 3, effect=0.03, correlated=True)
    d, at = _run_sequential(modest, 3, 0.8, min_effect=0.01)
    assert at > 1 or d.outcome == "promote"


def _flip_branches(flips: list[int], n: int = 500):
    """A control that solves none of ``n`` problems and a treatment whose seed ``s`` solves the first ``flips[s]``:
    (control branches, treatment branches, per-problem outcomes)."""
    seeds = len(flips)
    outcomes = {("control", s): [0] * n for s in range(seeds)}
    outcomes |= {("p", s): [1] * f + [0] * (n - f) for s, f in enumerate(flips)}
    return _look_branches([0.0] * seeds, "control"), _look_branches([f / n for f in flips], "treatment", "p"), outcomes


def test_a_look_the_budget_makes_the_last_spends_the_error_later_looks_would_have():
    """Countdown, seed 0: the ×81 bracket measured +0.025 at look 2 of 3 and the budget had no room for look 3.
    Judged as an interim look (94.8 %) its interval straddled 0; as the final analysis it spends the error look 3
    would have had (80.7 %). A null change there is still not promoted, and a harmful one is not refuted by it."""
    c, t, outcomes = _flip_branches([4, 13, 20])  # +0.025, spread over seeds
    interim = decide("p", c, t, 0.0, 0.8, look=2, looks=3, outcomes=outcomes, undecided="inconclusive")
    assert interim.outcome == "inconclusive" and interim.stats.confidence == pytest.approx(1 - 0.2 * 7 / 27, abs=1e-6)
    d = decide("p", c, t, 0.0, 0.8, look=2, looks=3, outcomes=outcomes, undecided="inconclusive", last=True)
    assert d.outcome == "promote", d.reasons
    assert d.stats.confidence == pytest.approx(1 - 0.2 * 26 / 27, abs=1e-6) and "last look" in d.reasons[-1]
    assert d.stats.ci_low > 0 > interim.stats.ci_low
    # the planned last look is unchanged: it spends its own share, which is all that is left
    planned = decide("p", c, t, 0.0, 0.8, look=3, looks=3, outcomes=outcomes)
    assert planned.stats.confidence == pytest.approx(1 - 0.2 * 19 / 27, abs=1e-6)
    c, t, outcomes = _flip_branches([0, 0, 0])
    d = decide("p", c, t, 0.0, 0.8, look=2, looks=3, outcomes=outcomes, futility_effect=0.01, last=True)
    assert d.outcome == "reject"  # nothing at all: futility, as at an interim look
    c, t, outcomes = _flip_branches([1, 0, 2])  # small and undecided: inconclusive, not refuted, without ``undecided``
    d = decide("p", c, t, 0.0, 0.8, look=1, looks=3, outcomes=outcomes, futility_effect=0.001, last=True)
    assert d.outcome == "inconclusive"


def test_a_look_the_budget_makes_the_last_is_decided_on_the_estimate_when_the_spec_says_so():
    """``backtest.spent_estimate``: where the budget ended the backtest, nothing later can re-test what it left open,
    so a positive estimate is adopted (rule ``estimate``) and anything else is judged as before; a planned last look,
    where a later round may re-test, is unchanged."""
    c, t, outcomes = _flip_branches([1, 0, 2])  # +0.002: inconclusive by the interval
    kw = dict(look=1, looks=3, outcomes=outcomes, futility_effect=0.001, last=True)
    assert decide("p", c, t, 0.0, 0.8, **kw).outcome == "inconclusive"
    d = decide("p", c, t, 0.0, 0.8, **kw, by_estimate=True)
    assert d.outcome == "promote" and d.stats.rule == "estimate" and "spent_estimate" in d.reasons[-1]
    assert decide("p", c, t, 0.005, 0.8, **kw, by_estimate=True).outcome != "promote"  # not above min_effect
    planned = decide("p", c, t, 0.0, 0.8, look=3, looks=3, outcomes=outcomes, by_estimate=True)
    assert planned.outcome == "inconclusive"
    gated = [t[0].model_copy(update={"gate_passed": False, "gate_reasons": ["hardcoding"]}), *t[1:]]
    assert decide("p", c, gated, 0.0, 0.8, **kw, by_estimate=True).outcome != "promote"


def test_futility_projects_a_slow_acting_change_to_the_last_look_instead_of_refuting_it_early():
    """An effect that builds up with the steps trained (a raised learning rate: +0.005 after 10 of 30 steps, +0.01
    after 20) reads 'not worth having' on the first look's own interval; projected to the last look it goes on,
    and is promoted at the second. Without the projection it is refuted at the first look."""
    n, seeds, looks = 1000, 3, 3
    control = [0] * n

    def look(j):
        treat = [1] * (5 * j) + [0] * (n - 5 * j)  # the same problems flip for every seed, 5 more each look
        outcomes = {**{("control", s): control for s in range(seeds)}, **{("p", s): treat for s in range(seeds)}}
        return (_look_branches([0.0] * seeds, "control"), _look_branches([5 * j / n] * seeds, "treatment", "p"),
                outcomes)

    def run(project):
        for j in range(1, looks + 1):
            c, t, outcomes = look(j)
            d = decide("p", c, t, 0.0, 0.8, look=j, looks=looks, outcomes=outcomes, futility_effect=0.01,
                       project_futility=project)
            if d is not None:
                return d, j
        raise AssertionError("the last look must decide")

    d, at = run(project=False)
    assert (d.outcome, at) == ("reject", 1) and d.reasons[-1].startswith("futility")
    d, at = run(project=True)
    assert (d.outcome, at) == ("promote", 2), d.reasons
    # an effect of exactly nothing still stops at once, the projection in its reason; a harmful one too
    c, _, _ = look(1)
    same = {**{("control", s): control for s in range(seeds)}, **{("p", s): control for s in range(seeds)}}
    d = decide("p", c, _look_branches([0.0] * seeds, "treatment", "p"), 0.0, 0.8, look=1, looks=looks,
               outcomes=same, futility_effect=0.01)
    assert d.outcome == "reject" and "at most +0.000 by the last look, after 3× the steps" in d.reasons[-1]
    worse = {**{("control", s): [1] * 20 + [0] * (n - 20) for s in range(seeds)},
             **{("p", s): [0] * n for s in range(seeds)}}
    d = decide("p", _look_branches([0.02] * seeds, "control"), _look_branches([0.0] * seeds, "treatment", "p"), 0.0,
               0.8, look=1, looks=looks, outcomes=worse, futility_effect=0.01)
    assert d.outcome == "reject" and d.reasons[-1].startswith("futility")


def test_effect_interval_adds_the_problem_sample_to_the_seed_spread():
    from evotrainer.stats.backtest import effect_interval

    # every seed shows the same +0.1 on 10 problems: no seed spread, but which problems were drawn still matters
    rows = [[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]] * 3
    effect, se, df, half = effect_interval(rows, 0.8)
    assert effect == pytest.approx(0.1) and se == pytest.approx((0.1 * 0.9 / 9) ** 0.5, rel=1e-6) and df == pytest.approx(9)
    # seeds only (one value per seed): the paired t interval
    effect, se, df, half = effect_interval([[0.1], [0.2], [0.3]], 0.9)
    assert (effect, df) == (pytest.approx(0.2), 2) and half == pytest.approx(0.1686, abs=1e-3)
    # identical arms: a zero-width interval at zero
    assert effect_interval([[0, 0], [0, 0]], 0.8)[1:] == (0.0, 1.0, 0.0)


def _spent_30_of_100(tmp_path, cid: str, **spec_fields):
    """A campaign of 100 steps (segments of 10, one look of 5 steps × 2 seeds, explore_share 0.4) that has ledgered a
    10-step segment and 20 branch steps: (context, spec, now)."""
    from datetime import datetime, timezone
    from pathlib import Path

    from evotrainer.agent.state import CampaignContext
    from evotrainer.config.campaign import CampaignSpec
    from evotrainer.core.domain import LedgerEntry
    from evotrainer.store import Store

    now = datetime.now(timezone.utc)
    spec = CampaignSpec(name=cid, segment_steps=10, budget={"total_steps": 100, "explore_share": 0.4},
                        backtest={"branch_steps": 5, "seeds": 2}, **spec_fields)
    store = Store.for_home(tmp_path)
    store.create_campaign(cid, cid, spec.model_dump(mode="json"), cid)
    ctx = CampaignContext(campaign_id=cid, spec=spec, home=Path(tmp_path), store=store, brain=None, pool=None,
                          tracker=None)
    store.ledger_add(LedgerEntry(campaign_id=cid, key="seg", kind="segment", run_name="seg", steps=10, at=now))
    store.ledger_add(LedgerEntry(campaign_id=cid, key="br@15", kind="branch", run_name="br", steps=20, at=now))
    return ctx, spec, now


def test_a_backtest_look_runs_only_within_the_budget_and_the_exploration_share(tmp_path):
    from evotrainer.agent.budget import _explore_spent, _look_budget
    from evotrainer.core.domain import PolicyVersion

    ctx, spec, now = _spent_30_of_100(tmp_path, "b")
    mainline = PolicyVersion(id="v", campaign_id="b", parent_id=None, harness_version="h", checkpoint="c", run_name="seg",
                             mlflow_run_id=None, eval_accuracy=None, step=10, created=now)
    # 20 steps already outside the mainline; control + 1 proposal could discard 2 × 2 × 5 − 5 = 15 more: 35 ≤ 40
    assert _look_budget(ctx, 0, mainline, 2, []) is None
    # control + 2 proposals could discard 25: 45 > 0.4 × 100
    why = _look_budget(ctx, 0, mainline, 3, [])
    assert why and "explore_share 0.4 × 100 = 40" in why and "discard 25 steps beside the 20" in why
    assert not _explore_spent(ctx, mainline)
    # and never more than the budget left: 70 remain, 5 arms need 50 but 9 need 90
    ctx.spec = spec.model_copy(update={"budget": spec.budget.model_copy(update={"explore_share": 1.0})})
    assert _look_budget(ctx, 0, mainline, 5, []) is None
    assert "needs 90 steps and 70 remain" in _look_budget(ctx, 0, mainline, 9, [])
    # later looks count the legs the earlier ones planned (not the ledger's partial state after a kill): three
    # looks of 10 steps, 3 arms at the first look: 60 planned, 10 left for the second look's 40
    ctx.spec = ctx.spec.model_copy(update={"backtest": ctx.spec.backtest.model_copy(update={"branch_steps": 30,
                                                                                          "looks": 3})})
    assert "needs 40 steps and 10 remain" in _look_budget(ctx, 0, mainline, 2, [3])
    # the exploration share spent: not one look of one proposal fits, the mainline trains the rest
    ctx.spec = ctx.spec.model_copy(update={"budget": spec.budget.model_copy(update={"explore_share": 0.3})})
    assert _explore_spent(ctx, mainline)  # 20 + 2 × 2 × 10 − 10 = 50 > 30


def test_a_merged_average_is_scored_on_the_decision_split_only_when_something_will_read_it(tmp_path):
    """distill scores a merged average's decision split (its movement baseline, the stop rules' accuracy) unless no
    round follows: no segment fits, or the next trains the rest (train_segment's own tests), and neither
    ``stop.target_accuracy`` nor ``stop.plateau_rounds`` reads it now."""
    from evotrainer.agent.budget import _last_round
    from evotrainer.agent.state import CampaignContext
    from evotrainer.core.domain import LedgerEntry, PolicyVersion

    ctx, spec, now = _spent_30_of_100(tmp_path, "m", stop={"plateau_rounds": 3})
    store = ctx.store
    merged = PolicyVersion(id="m:r00:control", campaign_id="m", parent_id=None, harness_version="h", checkpoint="c",
                           run_name="merged", mlflow_run_id=None, eval_accuracy=None, step=15, created=now)
    # 70 steps left and a look still fits the 40-step share (15 outside the mainline): a round follows the segment
    assert not _last_round(ctx, merged, True, 0)
    # the share spent (0.2 × 100 = 20 < 15 + 2 × 2 × 5 − 5): the next segment trains the 70 left, and nothing follows
    ctx.spec = spec.model_copy(update={"budget": spec.budget.model_copy(update={"explore_share": 0.2})})
    assert _last_round(ctx, merged, True, 0)
    # ... unless a stop rule reads the accuracy now: a target, or a plateau this round may complete
    assert _last_round(ctx, merged, False, 1) and not _last_round(ctx, merged, False, 2)
    target = ctx.spec.model_copy(update={"stop": ctx.spec.stop.model_copy(update={"target_accuracy": 0.9})})
    assert not _last_round(CampaignContext(**{**vars(ctx), "spec": target}), merged, True, 0)
    # fewer steps left than a segment: no segment, no round
    store.ledger_add(LedgerEntry(campaign_id="m", key="seg2", kind="segment", run_name="seg2", steps=65, at=now))
    ctx.spec = spec
    assert _last_round(ctx, merged, True, 0)


def test_an_inconclusive_gain_is_offered_once_more_while_its_knob_is_where_it_was_tested_from(tmp_path):
    from datetime import datetime, timezone
    from pathlib import Path

    from evotrainer.agent.arms import _bracketed, _retests
    from evotrainer.agent.state import CampaignContext
    from evotrainer.config.campaign import CampaignSpec
    from evotrainer.core.domain import BacktestStats, Decision, Hypothesis, Proposal
    from evotrainer.store import Store

    now = datetime.now(timezone.utc)
    spec = CampaignSpec(name="r", budget={"total_steps": 1000})
    store = Store.for_home(tmp_path)
    store.create_campaign("r", "r", spec.model_dump(mode="json"), "h")
    ctx = CampaignContext(campaign_id="r", spec=spec, home=Path(tmp_path), store=store, brain=None, pool=None,
                          tracker=None)
    hyp = Hypothesis(symptom="plateau", cause="the recipe is stuck", change="a change", expected_effect="accuracy up")

    def decided(pid, rnd, knob, old, new, outcome, effect):
        store.add_proposal(Proposal(id=pid, campaign_id="r", round=rnd, knob=knob, old=old, new=new, hypothesis=hyp,
                                    rationale="", cited_skills=[], brain="heuristic", status="pending_review",
                                    harness_version="h", created=now))
        store.add_decision(Decision(proposal_id=pid, outcome=outcome, at=now, reasons=["x"], stats=BacktestStats(
            n_pairs=3, effect=effect, ci_low=effect - 0.02, ci_high=effect + 0.02, confidence=0.8, method="t",
            control_mean=0.3, treatment_mean=0.3 + effect)))

    decided("r:r00:p0", 0, "optim.learning_rate", 1e-6, 3e-6, "reject", -0.002)
    decided("r:r00:p1", 0, "optim.learning_rate", 1e-6, 2.7e-5, "inconclusive", 0.011)
    decided("r:r00:p2", 0, "grpo.temperature", 1.0, 1.2, "inconclusive", -0.004)  # no gain measured: not again
    h = HarnessSpec().with_knob("optim.learning_rate", 1e-6)
    (c,) = _retests(ctx, h)
    assert (c.knob, c.value, c.effects, c.symptoms) == ("optim.learning_rate", 2.7e-5, [0.011], ["plateau"])
    assert "inconclusive in round 0 at +0.011" in c.description
    # the heuristic brain may draft it, and then it is backtested as it was: no bracket beside it
    drafts = HeuristicBrain().propose(_ctx([_finding("plateau", "info")], harness=h, candidates=[c],
                                           max_proposals=2)).drafts
    assert drafts[0].value == 2.7e-5 and _bracketed(h, drafts, 2) == (drafts, {})
    # the refuted ×3 raise wrote a mistake note that marks every larger raise; the re-test's own gain outweighs it
    import shutil

    from evotrainer.agent.arms import _check_draft
    from evotrainer.library.curation import record_outcome

    ctx.library = tmp_path / "lib"
    shutil.copytree(SEED_LIBRARY, ctx.library)
    record_outcome(ctx.library, symptom="plateau", knob="optim.learning_rate", old=1e-6, value=3e-6, outcome="reject",
                   evidence={"campaign": "r", "task": "arith", "proposal": "r:r00:p0", "effect": -0.002,
                             "ci_low": -0.007, "ci_high": 0.003, "seeds": [0, 1, 2], "date": now.date()},
                   actor="campaign:r", cited=["raise-lr"])
    with pytest.raises(ConfigError, match="repeats the known mistake"):
        _check_draft(ctx, h, "optim.learning_rate", 2.7e-5, "plateau", None)
    _check_draft(ctx, h, "optim.learning_rate", 2.7e-5, "plateau", None, retest=True)
    assert _retests(ctx, h.with_knob("optim.learning_rate", 2.7e-5)) == []  # the knob moved since: it means else
    decided("r:r01:p0", 1, "optim.learning_rate", 1e-6, 2.7e-5, "inconclusive", 0.009)
    assert _retests(ctx, h) == []  # tried twice: the record stands
    # a re-test answers what its cited skill answers now, beside the one symptom its hypothesis named: the pool of 64
    # keeps its re-test when the overfitting it was proposed for goes quiet while the recipe check still reads it
    decided("r:r01:p1", 1, "data.pool_size", 64, 256, "inconclusive", 0.01)
    store.add_proposal(store.get_proposal("r:r01:p1").model_copy(update={"id": "r:r01:p2", "new": 1024,
                                                                          "cited_skills": ["larger-pool"]}))
    store.add_decision(store.get_decisions(["r:r01:p1"])["r:r01:p1"].model_copy(update={"proposal_id": "r:r01:p2"}))
    pool = Candidate(id="larger-pool", symptoms=["overfitting", "unusual_recipe"], knob="data.pool_size", value=256,
                     description="more prompts")
    got = {c.value: c.symptoms for c in _retests(ctx, h.with_knob("data.pool_size", 64), [pool])}
    assert got == {256: ["plateau"], 1024: ["plateau", "overfitting", "unusual_recipe"]}


def test_loading_a_campaign_spec_and_its_harness_does_not_import_torch():
    # validating a spec (CLI start-up, the dashboard, `campaign start` before its worker) must not pay torch's import
    code = ("import sys\nfrom evotrainer.config.campaign import load_campaign_spec\nfrom evotrainer.config.harness import load_harness\n"
            "load_campaign_spec('campaigns/arith-demo.yaml'); load_harness('harnesses/demo-start.yaml')\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules)\nprint(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", out.stdout


def test_a_bad_task_option_names_the_campaign_file_and_the_options_allowed(tmp_path):
    from evotrainer.agent.campaign import create_campaign

    spec = tmp_path / "bad-options.yaml"
    spec.write_text(f"name: x\ntask: arith\ntask_options: {{bogus: 1}}\nharness: {REPO / 'harnesses' / 'demo-start.yaml'}\n"
                    "segment_steps: 20\nbudget: {total_steps: 1000}\n")
    with pytest.raises(ConfigError) as err:
        create_campaign(spec, tmp_path / "home")
    assert "bad-options.yaml" in str(err.value) and "bogus" in str(err.value) and "n_operands" in str(err.value)
    assert not (tmp_path / "home" / "state.db").exists()  # nothing written for an invalid spec
    # a confirmation wider than the held-out pool is refused at the start, not after the whole budget
    spec.write_text(f"name: x\ntask: arith\nharness: {REPO / 'harnesses' / 'demo-start.yaml'}\n"
                    "segment_steps: 20\nbudget: {total_steps: 1000}\neval: {n: 50, difficulty: [2, 2]}\nconfirm_n: 20000\n")
    with pytest.raises(ConfigError, match=r"bad-options\.yaml: eval / confirm_n: .*lower the confirmation's n"):
        create_campaign(spec, tmp_path / "home")
    assert not (tmp_path / "home" / "state.db").exists()


def test_a_removed_knob_is_refused_with_what_to_do_instead():
    from evotrainer.config.campaign import CampaignSpec

    with pytest.raises(ValueError, match=r"budget.improving_z was removed.*delete it"):
        CampaignSpec(name="c", budget={"total_steps": 400, "improving_z": 2.0})
    # a spec stored before it went carries its old default (off): still resumable
    assert CampaignSpec(name="c", budget={"total_steps": 400, "improving_z": None}).budget.total_steps == 400
    with pytest.raises(ValueError, match=r"budget.final_checks=0 .*1 checks only the last segment's end"):
        CampaignSpec(name="c", budget={"total_steps": 400, "final_checks": 0})


def test_a_healthy_round_explores_within_the_healthy_share_and_a_troubled_one_within_the_full_share(tmp_path):
    """budget.healthy_explore_share: a round with no warning finding whose mainline beats the base policy by more
    than 2 s.e. on the selection split gets the smaller share; a warning, or a mainline no better than the start,
    gets explore_share. The verdict is an event written once per round, which the look budget reads."""
    from datetime import datetime, timezone
    from pathlib import Path

    from evotrainer.agent.budget import _allowance, _explore_mode, _explore_spent, _look_budget
    from evotrainer.config.campaign import CampaignSpec
    from evotrainer.core.domain import LedgerEntry, PolicyVersion
    from evotrainer.store import Store

    h = HarnessSpec()
    spec = CampaignSpec(name="c", eval={"every": 0, "n": 500, "k": 1},
                        budget={"total_steps": 400, "healthy_explore_share": 0.1},
                        backtest={"branch_steps": 30, "seeds": 3})
    assert CampaignSpec(name="d", budget={"total_steps": 400}).budget.healthy_explore_share == 0.1
    with pytest.raises(ValueError, match="healthy_explore_share=0.5 is above budget.explore_share=0.4"):
        CampaignSpec(name="e", budget={"total_steps": 400, "healthy_explore_share": 0.5})
    # the default follows a smaller explore_share down instead of refusing a spec that never named it
    assert CampaignSpec(name="f", budget={"total_steps": 400, "explore_share": 0.05}).budget.healthy_explore_share == 0.05
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with Store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        store.create_campaign("c", "c", spec.model_dump(mode="json"), "t")
        store.add_harness_version(h.version, None, h.model_dump(mode="json"), [])
        ctx = small_context(store, spec, home=Path(tmp_path))
        store.log_event("c", "explore_start", {"policy": "/base", "accuracy": 0.262})  # the base policy, scored once

        def mainline(i, sel, step):
            pv = store.add_policy_version(PolicyVersion(
                id=f"c:v{i}", campaign_id="c", parent_id=None, harness_version=h.version, checkpoint=f"/ck/{i}",
                run_name=f"run{i}", mlflow_run_id=None, eval_accuracy=sel, step=step, created=now))
            return store.set_version_accuracy(pv.id, sel)

        def mode(rnd):
            return next(e.message for e in store.events("c", kind="explore_mode") if e.message["round"] == rnd)

        learns, flat = mainline(0, 0.368, 20), mainline(1, 0.27, 20)
        _explore_mode(ctx, {"mainline": learns.id}, 0, [_finding("plateau", "info")], h)  # +3.6 s.e.: healthy
        assert mode(0)["healthy"] and mode(0)["allowance"] == 40 and "learns" in mode(0)["reason"]
        assert _allowance(ctx, 0) == (40.0, "budget.healthy_explore_share 0.1 × 400 (a healthy round)")
        _explore_mode(ctx, {"mainline": flat.id}, 0, [], h)  # a resumed round keeps its verdict
        assert len(store.events("c", kind="explore_mode")) == 1
        _explore_mode(ctx, {"mainline": learns.id}, 1, [_finding("truncation", "warning")], h)
        assert not mode(1)["healthy"] and "truncation" in mode(1)["reason"] and mode(1)["allowance"] == 160
        _explore_mode(ctx, {"mainline": flat.id}, 2, [], h)  # +0.3 s.e.: the demo's flat start is explored in full
        assert not mode(2)["healthy"] and "has not learned" in mode(2)["reason"] and _allowance(ctx, 2)[0] == 160
        assert _allowance(ctx, 5)[0] == 160  # a round with no verdict (null share, or not proposed yet)
        # the look budget: round 0's first look of control + 2 proposals could discard 3 × 3 × 10 − 10 = 80 > 40
        store.ledger_add(LedgerEntry(campaign_id="c", key="seg", kind="segment", run_name="run0", steps=20, at=now))
        why = _look_budget(ctx, 0, learns, 3, [])
        assert why and "healthy_explore_share 0.1 × 400 (a healthy round) = 40" in why
        assert _look_budget(ctx, 2, flat, 3, []) is None  # the troubled round may: 80 ≤ 160
        # the latest verdict sets when exploration is spent (then the mainline trains the rest): after a healthy
        # round, 50 steps discarded + one look of one proposal (2 × 3 × 10 − 10 = 50) > 40; after a troubled one, ≤ 160
        store.ledger_add(LedgerEntry(campaign_id="c", key="br", kind="branch", run_name="br", steps=50, at=now))
        assert not _explore_spent(ctx, learns)  # round 2 (troubled) is the latest
        _explore_mode(ctx, {"mainline": learns.id}, 3, [], h)
        assert mode(3)["healthy"] and _explore_spent(ctx, learns)
        # null: no verdict is made, every round has the full share
        null = replace(ctx, spec=spec.model_copy(
            update={"budget": spec.budget.model_copy(update={"healthy_explore_share": None})}))
        _explore_mode(null, {"mainline": learns.id}, 4, [], h)
        assert not any(e.message["round"] == 4 for e in store.events("c", kind="explore_mode"))
        # `campaign status` lists the verdicts, in the shape its --json prints
        from evotrainer.reports.shapes import ExploreMode
        from evotrainer.reports.summaries import campaign_summary

        store.set_campaign("c", mainline_version=learns.id)
        doc = campaign_summary(tmp_path, "c", store=store, read=lambda _p: __import__("pandas").DataFrame())
        modes = [ExploreMode.model_validate(m) for m in doc["explore_modes"]]
        assert [(m.round, m.healthy, m.allowance) for m in modes] == [(0, True, 40), (1, False, 160), (2, False, 160),
                                                                      (3, True, 40)]


def test_a_moving_mainline_is_healthy_unless_it_is_below_the_start_and_a_stuck_one_is_troubled(tmp_path):
    """The verdict's second way to healthy: a segment that changed a quarter of the decision split's answers while
    the selection split stayed flat (countdown's tuned recipe after 20 steps, bench/log/07-campaign-vs-static-baseline.md session 29) is a
    recipe that trains, not one to explore; a stuck one (under stuck_share changed: the demo's 1e-6) stays troubled,
    and so does a moving one more than 2 s.e. below the start, or one with a warning."""
    from datetime import datetime, timezone
    from pathlib import Path

    from evotrainer.agent.budget import _explore_mode
    from evotrainer.agent.state import segment_id
    from evotrainer.config.campaign import CampaignSpec
    from evotrainer.core.domain import PolicyVersion
    from evotrainer.reports.shapes import ExploreMode
    from evotrainer.store import Store
    from evotrainer.training.evaluation import write_outcomes

    h = HarnessSpec()
    spec = CampaignSpec(name="c", eval={"every": 0, "n": 500, "k": 1}, budget={"total_steps": 400})
    assert spec.backtest.stuck_share == 0.05
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    base = [i % 10 < 3 for i in range(500)]  # the segment's first evaluation: 30 % right

    with Store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        store.create_campaign("c", "c", spec.model_dump(mode="json"), "t")
        store.add_harness_version(h.version, None, h.model_dump(mode="json"), [])
        ctx = small_context(store, spec, home=Path(tmp_path))
        store.log_event("c", "explore_start", {"policy": "/base", "accuracy": 0.300})

        def segment(rnd, sel, changed):
            run = tmp_path / "jobs" / f"seg{rnd}"
            (run / "eval").mkdir(parents=True)
            write_outcomes(run, 0, base)
            write_outcomes(run, 20, [(not o) if j < changed else o for j, o in enumerate(base)])
            pv = store.add_policy_version(PolicyVersion(
                id=segment_id("c", rnd), campaign_id="c", parent_id=None, harness_version=h.version,
                checkpoint=f"/ck/{rnd}", run_name=f"seg{rnd}", mlflow_run_id=None, eval_accuracy=sel, step=20,
                created=now))
            return {"mainline": store.set_version_accuracy(pv.id, sel).id}

        def mode(rnd):
            return ExploreMode.model_validate(
                next(e.message for e in store.events("c", kind="explore_mode") if e.message["round"] == rnd))

        _explore_mode(ctx, segment(0, 0.264, 118), 0, [], h)  # −1.3 s.e., 23.6 % of the answers changed
        assert mode(0).healthy and mode(0).moved == 0.236 and mode(0).allowance == 40
        assert "moves, not 2 s.e. below the start" in mode(0).reason and "23.6% of the decision" in mode(0).reason
        # the movement it judged is the round's `movement` event, which the stuck rule then reads
        assert [e.message["round"] for e in store.events("c", kind="movement")] == [0]
        _explore_mode(ctx, segment(1, 0.302, 2), 1, [], h)  # flat, 0.4 % changed: stuck
        assert not mode(1).healthy and "has not learned" in mode(1).reason and mode(1).allowance == 160
        _explore_mode(ctx, segment(2, 0.240, 150), 2, [], h)  # moving, but −2.1 s.e.
        assert not mode(2).healthy and "moves but is over 2 s.e. below the start" in mode(2).reason
        _explore_mode(ctx, segment(3, 0.264, 150), 3, [_finding("plateau", "warning")], h)
        assert not mode(3).healthy and mode(3).moved is None  # a warning decides before anything is measured
        _explore_mode(ctx, segment(4, 0.368, 150), 4, [], h)  # +2.4 s.e.: it learns, movement not needed
        assert mode(4).healthy and "learns" in mode(4).reason and mode(4).moved is None
        assert not any(e.message["round"] == 4 for e in store.events("c", kind="movement"))
        # stuck rounds off (stuck_share null): nothing measures movement, and a flat mainline is troubled as before
        off = replace(ctx, spec=spec.model_copy(
            update={"backtest": spec.backtest.model_copy(update={"stuck_share": None})}))
        _explore_mode(off, segment(5, 0.264, 118), 5, [], h)
        assert not mode(5).healthy and mode(5).moved is None


def test_a_long_skill_description_is_clipped_into_the_hypothesis_and_the_move_kept():
    """A library's descriptions are free text of any length; the hypothesis's ``change`` holds 300 characters."""
    from evotrainer.agent.brains.heuristic import CHANGE_CHARS, _change

    move = " (optim.learning_rate: 0.0003 → 0.00015)"
    text = _change("halve the learning rate " * 20, move)
    assert 290 < len(text) <= CHANGE_CHARS == 300 and text.endswith("…" + move)
    assert _change("halve it", move) == "halve it" + move


def test_a_segment_starts_from_the_version_before_the_ones_it_saved_on_its_way(tmp_path):
    """Movement and the revision's "a promotion that fell" read where a segment started: with budget.final_checks
    its stored parent is the last version it saved on its way (same run), so the chain is walked up past them."""
    from datetime import datetime, timezone

    from evotrainer.agent.state import segment_start
    from evotrainer.config.campaign import CampaignSpec
    from evotrainer.core.domain import PolicyVersion
    from evotrainer.store import Store

    h = HarnessSpec()
    spec = CampaignSpec(name="c", budget={"total_steps": 400})
    with Store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        store.create_campaign("c", "c", spec.model_dump(mode="json"), "t")
        store.add_harness_version(h.version, None, h.model_dump(mode="json"), [])

        def add(vid, parent, run, step):
            return store.add_policy_version(PolicyVersion(
                id=vid, campaign_id="c", parent_id=parent, harness_version=h.version, checkpoint=f"/ck/{vid}",
                run_name=run, mlflow_run_id=None, eval_accuracy=None, step=step, created=datetime.now(timezone.utc)))

        first = add("c:r00:segment", None, "seg0", 20)
        promoted = add("c:r00:promoted", first.id, "branch", 50)
        add("c:r01:segment@100", promoted.id, "seg1", 100)
        add("c:r01:segment@150", "c:r01:segment@100", "seg1", 150)
        last = add("c:r01:segment", "c:r01:segment@150", "seg1", 200)
        assert segment_start(store, last).id == promoted.id
        assert segment_start(store, promoted).id == first.id  # another run's parent is its start
        assert segment_start(store, first) is None
