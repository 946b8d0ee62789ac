"""Campaign-driven diagnostic revision on real run evidence (the committed pathological fixture runs).

The store, the archive, the diagnostics and the revision rule are all real; only the branches are
fixture runs copied into the home instead of being trained, so that a misfire can be staged exactly.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evotrainer.agent.revise import (
    accepted_false_positives,
    archive_path,
    campaign_revisions,
    load_archive,
    param_candidates,
    refuted_blocks,
    refutes_block,
)
from evotrainer.config.campaign import CampaignSpec
from evotrainer.config.harness import HarnessSpec
from evotrainer.core.domain import (
    BacktestStats,
    BranchResult,
    Decision,
    Hypothesis,
    PolicyVersion,
    Proposal,
)
from evotrainer.diagnostics.builtin import outcomes
from evotrainer.diagnostics.revision import history
from evotrainer.store import Store

FIX = Path(__file__).parent / "fixtures" / "runs"
NOW = datetime(2026, 11, 21, tzinfo=timezone.utc)


@dataclass
class Ctx:
    campaign_id: str
    spec: CampaignSpec
    home: Path
    store: Any
    logs: list[str] = field(default_factory=list)
    brain: Any = None

    def log(self, m: str) -> None:
        self.logs.append(m)


def _harness(reward_hacking: dict[str, Any]) -> HarnessSpec:
    return HarnessSpec.model_validate({"diagnostics": {"params": {"reward_hacking": reward_hacking}}})


def _ctx(tmp_path: Path, harness: HarnessSpec, runs: dict[str, str]) -> Ctx:
    home = tmp_path / "home"
    for name, fixture in runs.items():
        shutil.copytree(FIX / fixture, home / "jobs" / name)
    store = Store.for_home(home)
    spec = CampaignSpec.model_validate({
        "name": "rev", "segment_steps": 10, "budget": {"total_steps": 1000}, "backtest": {"branch_steps": 10, "seeds": 2},
        "revision": {"archive": str(FIX / "archive.yaml")}})
    store.create_campaign("rev", "rev", spec.model_dump(mode="json"), "t")
    store.add_harness_version(harness.version, None, harness.model_dump(mode="json"), [])
    return Ctx("rev", spec, home, store)


def _promoted_then_segment(ctx: Ctx, harness: HarnessSpec, accuracy: float) -> None:
    """A promoted version at held-out 0.5, then round 1's segment (job seg_r01) at ``accuracy``."""
    for pv in (("rev:r00:promoted", None, None, 0.5), ("rev:r01:segment", "rev:r00:promoted", "seg_r01", accuracy)):
        ctx.store.add_policy_version(PolicyVersion(
            id=pv[0], campaign_id="rev", parent_id=pv[1], harness_version=harness.version, checkpoint="x",
            run_name=pv[2], mlflow_run_id=None, eval_accuracy=pv[3], step=10, created=NOW))


def _too_strict_gate(tmp_path: Path) -> tuple[HarnessSpec, Ctx]:
    """A gate so strict it flags healthy runs (reward_hacking with no gap threshold), over healthy branches."""
    harness = _harness({"gap": 0.0, "min_gap_growth": 0.0})
    return harness, _ctx(tmp_path, harness, {"control_s1": "too-easy-s0", "control_s2": "too-easy-s0",
                                             "treat_s1": "healthy-s0", "treat_s2": "healthy-s0"})


def _blocked_backtest(ctx: Ctx, harness: HarnessSpec, ci_low: float) -> str:
    s = ctx.store
    s.add_proposal(Proposal(
        id="rev:r00:p0", campaign_id="rev", round=0, knob="optim.learning_rate", old=3e-4, new=6e-4,
        hypothesis=Hypothesis(symptom="plateau", cause="steps too small", change="raise lr", expected_effect="+2 points"),
        rationale="", cited_skills=[], brain="test", status="blocked", harness_version=harness.version, created=NOW))
    s.add_backtest("rev:r00:backtest", "rev", 0, ["rev:r00:p0"], [1, 2], 10)
    for seed in (1, 2):
        s.add_branch(BranchResult(backtest_id="rev:r00:backtest", proposal_id=None, role="control", seed=seed,
                                  run_name=f"control_s{seed}", status="finished", eval_accuracy=0.3))
        s.add_branch(BranchResult(backtest_id="rev:r00:backtest", proposal_id="rev:r00:p0", role="treatment", seed=seed,
                                  run_name=f"treat_s{seed}", status="finished", eval_accuracy=0.4, gate_passed=False,
                                  gate_reasons=["reward_hacking: warning reward_hacking"]))
    stats = BacktestStats(n_pairs=2, effect=0.1, ci_low=ci_low, ci_high=0.2, confidence=0.8, method="paired-t",
                          control_mean=0.3, treatment_mean=0.4)
    s.add_decision(Decision(proposal_id="rev:r00:p0", outcome="blocked", reasons=["test"], stats=stats, at=NOW))
    return "rev:r00:backtest"


def test_param_candidates_stay_in_bounds_and_change_one_parameter():
    cls = outcomes.RewardHacking
    cands = param_candidates(cls, {"gap": 0.0, "min_gap_growth": 0.0})
    assert cands and all(len(change) == 1 for change, _ in cands)
    for change, size in cands:
        cls.Params.model_validate({"gap": 0.0, "min_gap_growth": 0.0, **change})  # valid by construction
        assert size > 0
    # a zero parameter cannot be scaled, but it can go back to its documented default
    assert ({"gap": 0.1}, 1.0) in cands
    assert all(change.get("min_eval_points", 3) >= 3 for change, _ in cands)  # ge=3 bound respected


def test_refutes_block_only_for_exploit_claims_with_a_confirmed_gain():
    assert refutes_block({"reward_hacking"}, ci_low=0.01, min_effect=0.0)
    assert not refutes_block({"reward_hacking"}, ci_low=-0.01, min_effect=0.0)  # gain not confirmed
    assert not refutes_block({"nan"}, ci_low=0.2, min_effect=0.0)  # a NaN is not refuted by accuracy
    assert not refutes_block(set(), ci_low=0.2, min_effect=0.0)


def test_refuted_block_revises_the_gate_and_reopens_the_proposal(tmp_path):
    harness, ctx = _too_strict_gate(tmp_path)
    bt = _blocked_backtest(ctx, harness, ci_low=0.05)
    new = campaign_revisions(ctx, 0, bt, harness)

    assert new.version != harness.version
    revised = new.diagnostics.params["reward_hacking"]
    assert revised["gap"] > 0 or revised["min_gap_growth"] > 0  # the threshold moved off zero
    hv = ctx.store.get_harness_version(new.version)
    assert hv.parent == harness.version and any(c["path"].startswith("diagnostics.params.reward_hacking") for c in hv.diff)
    (ev,) = ctx.store.events("rev", kind="diagnostic_revision")
    assert ev.message["accepted"] and ev.message["diagnostic"] == "reward_hacking"
    assert ev.message["misfire"]["kind"] == "false_positive" and ev.message["tried"] > 1
    after = ev.message["scores"]["after"]
    assert after["invalid_recall"] == 1.0 and after["f1"] > ev.message["scores"]["before"]["f1"]
    # labels come from outcomes: the refuted treatments are healthy for reward_hacking, controls unconfirmed
    arch = {Path(r.path).name: r for r in load_archive(archive_path(ctx.home, "rev")).runs}
    assert set(arch) == {"control_s1", "control_s2", "treat_s1", "treat_s2"}
    assert "reward_hacking" not in arch["treat_s1"].labels and not arch["treat_s1"].invalid
    assert "refuted" in arch["treat_s1"].note and "unconfirmed" in arch["control_s1"].note
    # the blocked change may be proposed again under the fixed gate; the revision is in the history file
    assert accepted_false_positives(ctx.store, "rev") == {"rev:r00:p0"}
    assert [r.diagnostic for r in history(ctx.home)] == ["reward_hacking"]

    # re-running distill after kill -9 decides nothing twice, and the adopted revision is not lost
    again = campaign_revisions(ctx, 0, bt, harness)
    assert again.version == new.version
    assert len(ctx.store.events("rev", kind="diagnostic_revision")) == 1 and len(history(ctx.home)) == 1


def test_loosening_a_gate_needs_a_known_exploit_to_check_against(tmp_path):
    harness, ctx = _too_strict_gate(tmp_path)
    ctx.spec = ctx.spec.model_copy(update={"revision": ctx.spec.revision.model_copy(update={"archive": None})})
    bt = _blocked_backtest(ctx, harness, ci_low=0.05)
    assert campaign_revisions(ctx, 0, bt, harness).version == harness.version
    (ev,) = ctx.store.events("rev", kind="diagnostic_revision")
    assert not ev.message["accepted"] and "no run labelled invalid" in " ".join(ev.message["reasons"])
    assert refuted_blocks(ctx.store, "rev") == {"rev:r00:p0"}  # still no mistake of the change
    assert accepted_false_positives(ctx.store, "rev") == set()  # but not reopened either


def test_upheld_block_is_an_invalid_label_and_no_misfire(tmp_path):
    harness = _harness({})
    ctx = _ctx(tmp_path, harness, {"control_s1": "healthy-s0", "control_s2": "healthy-s0",
                                   "treat_s1": "lenient-reward-s0", "treat_s2": "lenient-reward-s0"})
    bt = _blocked_backtest(ctx, harness, ci_low=-0.05)  # the gain is not confirmed: the gate was right
    assert campaign_revisions(ctx, 0, bt, harness).version == harness.version
    assert ctx.store.events("rev", kind="diagnostic_revision") == []
    arch = {Path(r.path).name: r for r in load_archive(archive_path(ctx.home, "rev")).runs}
    assert arch["treat_s1"].invalid and {"reward_hacking", "answer_spraying"} <= set(arch["treat_s1"].labels)


def test_regression_after_promotion_without_warning_tightens_a_gate(tmp_path):
    # reward_hacking too lax to see the lenient run's gap of 0.116
    harness = _harness({"gap": 0.2})
    ctx = _ctx(tmp_path, harness, {"seg_r01": "lenient-reward-s0"})
    s = ctx.store
    s.add_policy_version(PolicyVersion(id="rev:r00:promoted", campaign_id="rev", parent_id=None, harness_version=harness.version,
                                       checkpoint="x", run_name=None, mlflow_run_id=None, eval_accuracy=0.5, step=10,
                                       created=NOW))
    s.add_policy_version(PolicyVersion(id="rev:r01:segment", campaign_id="rev", parent_id="rev:r00:promoted",
                                       harness_version=harness.version, checkpoint="y", run_name="seg_r01",
                                       mlflow_run_id=None, eval_accuracy=0.40, step=20, created=NOW))
    new = campaign_revisions(ctx, 1, None, harness)
    (ev,) = s.events("rev", kind="diagnostic_revision")
    assert ev.message["misfire"]["kind"] == "false_negative", ev.message
    assert ev.message["accepted"] and ev.message["diagnostic"] == "reward_hacking"
    scores = ev.message["scores"]
    assert scores["after"]["recall"] > scores["before"]["recall"]  # the revised version now catches the regression
    assert new.diagnostics.params["reward_hacking"] != {"gap": 0.2}
    seg = next(r for r in load_archive(archive_path(ctx.home, "rev")).runs if Path(r.path).name == "seg_r01")
    assert seg.labels == ["reward_hacking"] and "tentative" in seg.note


def test_blocked_seed_that_passed_the_gate_is_unconfirmed_not_invalid(tmp_path):
    harness = _harness({})
    ctx = _ctx(tmp_path, harness, {"control_s1": "healthy-s0", "control_s2": "healthy-s0",
                                   "treat_s1": "lenient-reward-s0", "treat_s2": "healthy-s0"})
    bt = _blocked_backtest(ctx, harness, ci_low=-0.05)
    campaign_revisions(ctx, 0, bt, harness)
    arch = {Path(r.path).name: r for r in load_archive(archive_path(ctx.home, "rev")).runs}
    assert arch["treat_s1"].invalid  # this seed tripped the gate
    assert not arch["treat_s2"].invalid and "unconfirmed" in arch["treat_s2"].note  # this one did not


def test_small_drop_is_not_a_misfire(tmp_path):
    harness = _harness({"gap": 0.2})
    ctx = _ctx(tmp_path, harness, {"seg_r01": "lenient-reward-s0"})
    s = ctx.store
    _promoted_then_segment(ctx, harness, 0.49)
    assert campaign_revisions(ctx, 1, None, harness).version == harness.version
    assert s.events("rev", kind="diagnostic_revision") == []


def test_revision_can_be_switched_off(tmp_path):
    harness, ctx = _too_strict_gate(tmp_path)
    ctx.spec = ctx.spec.model_copy(update={"revision": ctx.spec.revision.model_copy(update={"enabled": False})})
    bt = _blocked_backtest(ctx, harness, ci_low=0.05)
    assert campaign_revisions(ctx, 0, bt, harness).version == harness.version
    assert not archive_path(ctx.home, "rev").exists()


SPRAY_DRAFT = """import re

from evotrainer.diagnostics.base import Diagnostic


class Spray(Diagnostic):
    name = "number_spray"
    symptom = "reward_hacking"
    signal = "share of late completions holding more than one number"
    requires_rollouts = ("completion", "step")

    def analyze(self, ev):
        r = ev.rollouts[ev.rollouts["step"] > ev.rollouts["step"].max() / 2]
        share = float(r["completion"].map(lambda c: len(re.findall(r"-?\\d+", str(c))) > 1).mean())
        if share > 0.3:
            return [self.finding("warning", f"{share:.0%} of late completions hold several numbers")]
        return []
"""


def test_a_missed_regression_no_threshold_catches_gets_a_drafted_diagnostic_once(tmp_path):
    """The campaign glue (issue 17 part 4): no gate diagnostic to revise, so the LLM brain drafts one; it is adopted
    as a new harness version, the segment is labelled with its symptom, and a re-run (resume) asks nothing again."""
    import json

    from evotrainer.agent.brains.heuristic import HeuristicBrain
    from evotrainer.agent.brains.llm import LLMBrain, LLMSettings
    from evotrainer.diagnostics.registry import Registry
    from tests.conftest import landlock_or_skip
    from tests.llm_server import ScriptedLLM

    landlock_or_skip("drafted code runs only under Landlock")
    harness = HarnessSpec.model_validate({"diagnostics": {"gate": [], "params": {"reward_hacking": {"gap": 0.2}}}})
    ctx = _ctx(tmp_path, harness, {"seg_r01": "lenient-reward-s0"})
    s = ctx.store
    _promoted_then_segment(ctx, harness, 0.40)
    reply = json.dumps({"name": "number_spray", "symptom": "reward_hacking", "code": SPRAY_DRAFT, "rationale": "spraying"})
    with ScriptedLLM([reply]) as llm:
        ctx.brain = LLMBrain(LLMSettings(base_url=llm.base_url, model="scripted", max_retries=0),
                             fallback=HeuristicBrain())
        new = campaign_revisions(ctx, 1, None, harness)
        again = campaign_revisions(ctx, 1, None, harness)  # the node re-run after kill -9
        assert len(llm.requests) == 1
    (ev,) = s.events("rev", kind="diagnostic_revision")
    msg = ev.message
    assert msg["drafted"] and msg["accepted"] and msg["diagnostic"] == "number_spray", msg["reasons"]
    assert msg["scores"]["before"]["invalid_recall"] == 0.0 and msg["scores"]["after"]["invalid_recall"] == 1.0
    assert new.version == again.version == msg["harness_version"] != harness.version
    assert s.get_harness_version(new.version).spec["diagnostics"]["gate"] == [{"diagnostic": "number_spray",
                                                                            "fail_at": "warning"}]
    assert "number_spray" in Registry(new).untrusted
    seg = next(r for r in load_archive(archive_path(ctx.home, "rev")).runs if Path(r.path).name == "seg_r01")
    assert seg.labels == ["reward_hacking"] and "tentative" in seg.note
    assert [r.accepted for r in history(ctx.home, "number_spray")] == [True]
