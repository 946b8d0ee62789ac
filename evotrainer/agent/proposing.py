"""A round's proposals: the brain asked for drafts, what the round's state allows of them, values from Optuna, the
last checks, screening, and the proposals recorded.

Why apart from the propose node: the node routes (to review, or on to distill when nothing is proposed); this is what
a proposal goes through before it exists, in the order it goes through it:

1. **Candidates.** The library's skills resolved against the harness (their evidence is the prior), re-tests of
   inconclusive changes first; the library's mistakes count as refuted changes.
2. **What can act.** Only what enlarges the update can act on a policy that does not move (``agent/movement.py``),
   only what shrinks it, or moves an outlier of the recipe back, on a recipe that undid the policy
   (``agent/regression.py``: the recipe's remedies first); a brain that drafts outside its
   candidates (an LLM) is held to the same rule, and when the library has no such change the campaign's own
   step-size draft is used (``agent/fallback.py``).
3. **Arms.** A scale knob's draft, or a range knob's shift, gets its bracket (``agent/arms.py``).
4. **Values.** A numeric knob's value is asked of Optuna over this campaign's backtests of it (``agent/values.py``).
5. **Checks and screening.** A draft that may not be proposed is recorded as invalid; a reward or data change that
   screens as nil on the segment's rollouts is recorded ``screened`` and is neither reviewed nor backtested.
"""

from __future__ import annotations

from typing import Any

from evotrainer.agent.arms import (
    _bracketed,
    _check_draft,
    _is_retest,
    _knob_history,
    _refuted,
    _retests,
    _screen,
    _task_inert,
)
from evotrainer.agent.brains.base import BrainContext, BrainResult
from evotrainer.agent.budget import _explore_mode
from evotrainer.agent.fallback import BRAIN as BUILTIN
from evotrainer.agent.fallback import step_draft
from evotrainer.agent.lessons import brain_inputs
from evotrainer.agent.movement import STUCK_WHY, round_stuck
from evotrainer.agent.regression import REGRESSED_WHY, recipe_remedies, regressed
from evotrainer.agent.runs import _harness, _now
from evotrainer.agent.state import CampaignContext, CampaignState
from evotrainer.agent.values import ValueOptimizer
from evotrainer.config.harness import STEP_SIZE_KNOBS, HarnessSpec, enlarges_update, shrinks_update
from evotrainer.core.domain import Decision, Finding, Proposal
from evotrainer.core.errors import ConfigError
from evotrainer.library.changes import direction


def draft_round(ctx: CampaignContext, state: CampaignState, rnd: int) -> None:
    """Draft and record round ``rnd``'s proposals."""
    harness = _harness(ctx, state["harness_version"])
    findings = ctx.store.list_findings(ctx.campaign_id, round=rnd)
    _explore_mode(ctx, state, rnd, findings, harness)
    result, builtin = _ask_brain(ctx, rnd, harness, findings)
    ctx.store.log_event(ctx.campaign_id, "brain", {"round": rnd, "brain": result.brain, "notes": result.notes,
                                                   "tokens": result.tokens})
    _record(ctx, state, rnd, harness, result, builtin)


def _ask_brain(ctx: CampaignContext, rnd: int, harness: HarnessSpec,
               findings: list[Finding]) -> tuple[BrainResult, bool]:
    """The brain's drafts for the round, held to what can act on it; (result, whether the drafts are the campaign's
    own step-size draft)."""
    context = ctx.spec.policy.context_length()
    candidates, mistakes, known = brain_inputs(ctx.library, harness, findings, ctx.spec.task, store=ctx.store,
                                               context=context, task_inert=_task_inert(ctx))
    candidates = _retests(ctx, harness, candidates) + candidates
    knobs = harness.knobs()
    # a regressed round moved, so it is never stuck
    fell = regressed(findings)
    stuck = not fell and round_stuck(ctx, rnd)
    step = "larger" if stuck else "smaller" if fell else None
    # a regressed round's restriction spares the remedies of the recipe's outliers (agent/regression.py)
    recipe = recipe_remedies(candidates, findings, harness) if fell else {}

    def acts(knob: str, value: Any) -> bool:
        return ((enlarges_update if stuck else shrinks_update)(knob, knobs.get(knob), value)
                or recipe.get(knob) == direction(knobs.get(knob), value))

    if step:
        candidates = [c for c in candidates if acts(c.knob, c.value)]
    k = ctx.spec.backtest.max_proposals
    bctx = BrainContext(harness=harness, findings=findings, candidates=candidates, mistakes=mistakes,
                        refuted=_refuted(ctx) + known, max_proposals=k + (2 if ctx.spec.screen else 0),
                        min_effect=ctx.spec.backtest.min_effect,
                        task=ctx.spec.task, task_inert=_task_inert(ctx), seed=ctx.spec.seed, round=rnd,
                        only_knobs=[*STEP_SIZE_KNOBS, *sorted(recipe)] if step else None,
                        only_directions=recipe, only_step=step,
                        only_why=STUCK_WHY if stuck else REGRESSED_WHY if fell else "")
    result = ctx.brain.propose(bctx)
    builtin = False
    if step:  # a brain may draft outside its candidates (an LLM does): the same rule, re-tests first
        movers = [d for d in result.drafts if acts(d.knob, d.value)]
        dropped = [f"{d.knob}={d.value!r}" for d in result.drafts if d not in movers]
        movers.sort(key=lambda d: (not _is_retest(d), d.knob not in recipe))
        why = "the mainline is stuck" if stuck else "the mainline regressed"
        notes = [*result.notes, *([f"{why}: dropped {', '.join(dropped)} (only changes that make the update "
                                   f"{step}" + (", or move the recipe's outliers back," if recipe else "")
                                   + " can act on it)"] if dropped else [])]
        # the library offered no such change (a brain that declined one it offered is not overruled)
        if not movers and not candidates and (fb := step_draft(harness, step, bctx.refuted)) is not None:
            movers, builtin = [fb], True
            notes.append(f"{why} and the library has no change that makes the update {step}: the built-in "
                         f"{fb.knob} → {fb.value!r}")
        result = result.model_copy(update={"drafts": movers, "notes": notes})
    return result, builtin


def _record(ctx: CampaignContext, state: CampaignState, rnd: int, harness: HarnessSpec, result: BrainResult,
            builtin: bool) -> None:
    """Each draft bracketed, valued, checked and screened, then recorded as a proposal, up to the round's
    ``backtest.max_proposals`` that are not screened out."""
    b, k = ctx.spec.backtest, ctx.spec.backtest.max_proposals
    values = ValueOptimizer(ctx.home, ctx.campaign_id, ctx.spec.seed) if ctx.spec.values == "optuna" else None
    drafts, brackets = _bracketed(harness, result.drafts, k if b.bracket else 0, b.bracket_factor, b.bracket_range)
    context, knobs = ctx.spec.policy.context_length(), harness.knobs()
    kept = 0
    for i, d in enumerate(drafts):
        if kept >= k:  # the round's slots are full: say what the brain drafted that no slot was left for
            ctx.store.log_event(ctx.campaign_id, "drafts_cut", {"round": rnd, "k": k, "drafts": [
                {"knob": c.knob, "value": c.value, "symptom": c.hypothesis.symptom, "skills": c.cited_skills}
                for c in drafts[i:]]})
            break
        pid = f"{ctx.campaign_id}:r{rnd:02d}:p{i}"
        try:
            _check_draft(ctx, harness, d.knob, d.value, d.hypothesis.symptom, context, retest=_is_retest(d))
            value, rationale = _valued(ctx, values, rnd, pid, harness, d, brackets.get(i), context)
        except ConfigError as err:
            ctx.store.log_event(ctx.campaign_id, "invalid_draft", {"round": rnd, "knob": d.knob, "error": str(err)})
            continue
        screening = _screen(ctx, state, harness, d.knob, value) if ctx.spec.screen else None
        status = "screened" if screening is not None and screening.nil else "pending_review"
        ctx.store.add_proposal(Proposal(
            id=pid, campaign_id=ctx.campaign_id, round=rnd, knob=d.knob, old=knobs[d.knob], new=value,
            hypothesis=d.hypothesis, rationale=rationale, cited_skills=d.cited_skills,
            brain=BUILTIN if builtin else result.brain,
            status=status, harness_version=harness.version, created=_now()))
        if screening is not None and screening.screenable:
            ctx.store.log_event(ctx.campaign_id, "screening", {"round": rnd, "proposal": pid,
                                                               **screening.model_dump(mode="json")})
        if status == "screened":
            ctx.store.add_decision(Decision(proposal_id=pid, outcome="screened", at=_now(), reasons=[
                screening.describe(), "not backtested: the change would leave the training signal as it is"]))
        else:
            kept += 1


def _valued(ctx: CampaignContext, values: ValueOptimizer | None, rnd: int, pid: str, harness: HarnessSpec, d: Any,
            fixed: str | None, context: int | None) -> tuple[Any, str]:
    """The draft's value (Optuna's for a numeric knob, once the draft passed its checks) and its rationale."""
    value, rationale = d.value, d.rationale
    if values is None:
        return value, rationale
    values.sync(harness, d.knob, _knob_history(ctx, d.knob))
    choice = values.suggest(pid, harness, d.knob, value, rnd, fixed=fixed or ("retest" if _is_retest(d) else None))
    if choice.value != value:
        try:
            _check_draft(ctx, harness, d.knob, choice.value, d.hypothesis.symptom, context)
            value = choice.value
        except ConfigError as err:  # the draft's own value stands
            ctx.store.log_event(ctx.campaign_id, "value_refused", {
                "round": rnd, "knob": d.knob, "value": choice.value, "error": str(err)})
    if choice.source != "fixed":
        rationale = f"{rationale}; {choice.describe()}"[:2000]
    return value, rationale
