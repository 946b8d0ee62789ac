"""The skill library inside a campaign: which folder, what the brain gets, what distill writes back."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from evotrainer.agent.lessons import (
    SEED_LIBRARY,
    brain_inputs,
    campaign_library,
    curate_round,
    repeated_mistake,
    repeats_mistake,
)
from evotrainer.config.campaign import CampaignSpec
from evotrainer.config.harness import HarnessSpec
from evotrainer.core.domain import BacktestStats, Decision, Finding, Hypothesis, Proposal
from evotrainer.library.curation import read_log, record_outcome
from evotrainer.library.loader import Library
from evotrainer.store import Store

NOW = datetime(2026, 11, 21, tzinfo=timezone.utc)
PLATEAU = Finding(symptom="plateau", diagnostic="plateau", version="1", severity="info", confidence=0.7,
                  explanation="reward flat")


def _spec(**kw) -> CampaignSpec:
    return CampaignSpec.model_validate({"name": "l", "segment_steps": 10, "budget": {"total_steps": 1000},
                                        "backtest": {"branch_steps": 10, "seeds": 2}, **kw})


def _seeds(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    shutil.copytree(SEED_LIBRARY, lib)
    return lib


def _ev(pid: str, outcome: str, effect: float) -> dict[str, Any]:
    return {"campaign": "old", "task": "arith", "proposal": pid, "effect": effect, "ci_low": effect - 0.01,
            "ci_high": effect + 0.01, "seeds": [1, 2], "date": NOW.date()}


def test_campaign_library_is_a_copy_unless_in_place(tmp_path):
    home = tmp_path / "home"
    lib = campaign_library(home, "c1", _spec())
    assert lib == home / "campaigns" / "c1" / "library" and (lib / "raise-lr" / "SKILL.md").is_file()
    (lib / "raise-lr" / "SKILL.md").write_text("changed")  # curation of the copy never touches the seeds
    assert campaign_library(home, "c1", _spec()) == lib and (lib / "raise-lr" / "SKILL.md").read_text() == "changed"
    assert "changed" not in (SEED_LIBRARY / "raise-lr" / "SKILL.md").read_text()
    own = _seeds(tmp_path)
    assert campaign_library(home, "c2", _spec(library=str(own), library_in_place=True)) == own
    copied = campaign_library(home, "c3", _spec(library=str(own)))
    assert copied != own and sorted(p.name for p in copied.iterdir()) == sorted(p.name for p in own.iterdir())


def test_known_mistake_is_refuted_only_as_far_as_it_failed(tmp_path):
    lib = _seeds(tmp_path)
    # an earlier campaign raised the learning rate 3e-4 -> 9e-4 against a plateau, and it was refuted
    ops = record_outcome(lib, symptom="plateau", knob="optim.learning_rate", old=3e-4, value=9e-4, outcome="reject",
                         evidence=_ev("old:r00:p0", "reject", -0.05), actor="campaign:old", cited=["raise-lr"])
    assert [o.op for o in ops] == ["update_evidence", "add"]  # raise-lr gets it as harmful; a mistake note is added
    h = HarnessSpec()  # lr 3e-4: raise-lr proposes 9e-4, exactly what failed
    cands, mistakes, refuted = brain_inputs(lib, h, [PLATEAU], "arith")
    assert any(r.knob == "optim.learning_rate" and r.value == 9e-4 and "known mistake" in r.outcome for r in refuted)
    assert [m.slug for m in mistakes] == ["mistake-optim-learning-rate-up-plateau"] and mistakes[0].failures == 1
    low = h.with_knob("optim.learning_rate", 3e-5)  # raising 3e-5 -> 9e-5 stays below what failed: not the mistake
    _, _, refuted_low = brain_inputs(lib, low, [PLATEAU], "arith")
    assert not any(r.knob == "optim.learning_rate" for r in refuted_low)
    note = Library.load(lib).get("mistake-optim-learning-rate-up-plateau")
    assert repeats_mistake(note, "up", 1e-3) and not repeats_mistake(note, "up", 5e-4)


def test_a_refuted_range_refutes_only_as_far_as_it_went(tmp_path):
    """A round brackets levels [5, 5] -> [4, 4] with [3, 3]; the bracket refuted leaves the one-level move open."""
    lib = _seeds(tmp_path)
    record_outcome(lib, symptom="too_hard", knob="data.difficulty", old=[5, 5], value=[3, 3], outcome="reject",
                   evidence=_ev("old:r00:p1", "reject", -0.02), actor="campaign:old")
    h = HarnessSpec().with_knob("data.difficulty", [5, 5])
    assert repeated_mistake(lib, h, "data.difficulty", [4, 4], "too_hard") is None
    assert repeated_mistake(lib, h, "data.difficulty", [2, 2], "too_hard") is not None  # further than what failed


def test_a_draft_repeating_a_known_mistake_is_caught_for_its_own_symptom(tmp_path):
    lib = _seeds(tmp_path)
    record_outcome(lib, symptom="plateau", knob="optim.learning_rate", old=3e-4, value=9e-4, outcome="reject",
                   evidence=_ev("old:r00:p0", "reject", -0.05), actor="campaign:old")
    h = HarnessSpec()
    assert repeated_mistake(lib, h, "optim.learning_rate", 1e-3, "plateau") == "mistake-optim-learning-rate-up-plateau"
    assert repeated_mistake(lib, h, "optim.learning_rate", 5e-4, "plateau") is None  # not as far as what failed
    assert repeated_mistake(lib, h, "optim.learning_rate", 1e-3, "too_hard") is None  # another symptom: new evidence
    assert repeated_mistake(None, h, "optim.learning_rate", 1e-3, "plateau") is None


def test_library_cannot_touch_the_judges(tmp_path):
    from evotrainer.library.format import check_intervention

    with pytest.raises(ValueError, match="locked"):
        check_intervention("diagnostics.gate_on_error", "set", "pass")
    lib = _seeds(tmp_path)
    text = (lib / "raise-lr" / "SKILL.md").read_text()
    (lib / "raise-lr" / "SKILL.md").write_text(text.replace("knob: optim.learning_rate\n  op: scale\n  arg: 3.0",
                                                            "knob: diagnostics.gate_on_error\n  op: set\n  arg: pass"))
    loaded = Library.load(lib, strict=False)
    assert loaded.find("raise-lr") is None and any("locked" in p.message for p in loaded.problems)


def test_skill_evidence_is_the_brain_prior(tmp_path):
    lib = _seeds(tmp_path)
    record_outcome(lib, symptom="plateau", knob="optim.learning_rate", old=3e-5, value=9e-5, outcome="promote",
                   evidence=_ev("old:r01:p0", "promote", 0.04), actor="campaign:old", cited=["raise-lr"])
    cands, _, _ = brain_inputs(lib, HarnessSpec().with_knob("optim.learning_rate", 3e-5), [PLATEAU], "arith")
    raise_lr = next(c for c in cands if c.id == "raise-lr")
    assert raise_lr.effects == [0.04] and raise_lr.value == 9e-5
    assert cands[0].id == "raise-lr"  # retrieval order: the only candidate with evidence behind it comes first


@dataclass
class Ctx:
    campaign_id: str
    spec: CampaignSpec
    store: Any
    library: Path


def test_curate_round_writes_a_clustered_mistake_note_once(tmp_path):
    store = Store.for_home(tmp_path / "home")
    spec = _spec()
    store.create_campaign("c", "c", spec.model_dump(mode="json"), "t")
    ctx = Ctx("c", spec, store, _seeds(tmp_path))
    for r, pid in enumerate(("c:r00:p0", "c:r01:p0")):  # the same change refuted in two rounds
        store.add_proposal(Proposal(
            id=pid, campaign_id="c", round=r, knob="grpo.top_entropy_quantile", old=1.0, new=0.2,
            hypothesis=Hypothesis(symptom="plateau", cause="few forking tokens", change="train on top 20%",
                                  expected_effect="+1 point"),
            rationale="", cited_skills=["high-entropy-tokens"], brain="heuristic", status="refuted",
            harness_version="h", created=NOW))
        store.add_backtest(f"c:r{r:02d}:backtest", "c", r, [pid], [1, 2], 10)
        store.add_decision(Decision(proposal_id=pid, outcome="reject", reasons=["worse"], at=NOW, stats=BacktestStats(
            n_pairs=2, effect=-0.03, ci_low=-0.05, ci_high=-0.01, confidence=0.8, method="paired-t",
            control_mean=0.4, treatment_mean=0.37)))
        ops = curate_round(ctx, r)
        assert {o["slug"] for o in ops} == {"high-entropy-tokens", "mistake-grpo-top-entropy-quantile-down-plateau"}
    lib = Library.load(ctx.library)
    note = lib.get("mistake-grpo-top-entropy-quantile-down-plateau")
    assert note.kind == "mistake" and [e.proposal for e in note.evidence] == ["c:r00:p0", "c:r01:p0"]
    assert lib.get("high-entropy-tokens").counters.harmful == 2
    n_log = len(read_log(ctx.library))
    assert curate_round(ctx, 1) == [] and len(read_log(ctx.library)) == n_log  # re-run: nothing twice
    assert curate_round(ctx, 7) == []  # a round with no decision
    # a screened change (never backtested) is evidence too: no effect, no counter moved
    store.add_proposal(Proposal(
        id="c:r02:p0", campaign_id="c", round=2, knob="data.drop_all_correct", old=False, new=True,
        hypothesis=Hypothesis(symptom="too_easy", cause="solved prompts", change="drop them", expected_effect="+1 point"),
        rationale="", cited_skills=["drop-solved"], brain="heuristic", status="screened", harness_version="h",
        created=NOW))
    store.add_decision(Decision(proposal_id="c:r02:p0", outcome="screened", at=NOW,
                                reasons=["on 512 recorded rollouts: dead groups 0.300 → 0.300 …; nil"]))
    before = Library.load(ctx.library).get("drop-solved").counters
    ops = curate_round(ctx, 2)
    assert [o["slug"] for o in ops] == ["drop-solved"]
    after = Library.load(ctx.library).get("drop-solved")
    assert after.evidence[-1].outcome == "screened" and after.evidence[-1].effect is None
    assert (after.counters.helpful, after.counters.harmful) == (before.helpful, before.harmful)


def test_a_refuted_block_is_not_written_as_a_mistake(tmp_path):
    store = Store.for_home(tmp_path / "home")
    spec = _spec()
    store.create_campaign("c", "c", spec.model_dump(mode="json"), "t")
    ctx = Ctx("c", spec, store, _seeds(tmp_path))
    store.add_proposal(Proposal(
        id="c:r00:p0", campaign_id="c", round=0, knob="optim.learning_rate", old=3e-5, new=9e-5,
        hypothesis=Hypothesis(symptom="plateau", cause="steps too small", change="raise lr", expected_effect="+2 points"),
        rationale="", cited_skills=["raise-lr"], brain="heuristic", status="blocked", harness_version="h", created=NOW))
    store.add_backtest("c:r00:backtest", "c", 0, ["c:r00:p0"], [1, 2], 10)
    store.add_decision(Decision(proposal_id="c:r00:p0", outcome="blocked", reasons=["gate"], at=NOW,
                                gate_reasons=["reward_hacking: warning"], stats=BacktestStats(
                                    n_pairs=2, effect=0.05, ci_low=0.02, ci_high=0.08, confidence=0.8,
                                    method="paired-t", control_mean=0.4, treatment_mean=0.45)))
    ops = curate_round(ctx, 0, refuted_blocks={"c:r00:p0"})
    assert ops and not any(o["slug"].startswith("mistake-") for o in ops)
    ev = Library.load(ctx.library).get("raise-lr").evidence[-1]
    assert ev.outcome == "inconclusive" and "gate misfire" in ev.note
