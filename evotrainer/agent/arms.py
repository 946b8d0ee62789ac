"""Shaping a round's arms: the refuted changes a brain must not repeat, the checks a draft must pass, re-tests of
measured gains, brackets (a bolder move of the same knob), screening, and the seeds and names of the branches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evotrainer.agent.brains.base import RefutedChange
from evotrainer.agent.lessons import overflows_context, repeated_mistake
from evotrainer.agent.revise import accepted_false_positives
from evotrainer.agent.state import CampaignContext, CampaignState
from evotrainer.agent.values import BRACKET_FACTOR, RANGE_BRACKET_STEPS, bracket_value, move_of
from evotrainer.config.campaign import BRACKET_RANGE
from evotrainer.config.harness import (
    HarnessSpec,
    locked_knob,
)
from evotrainer.core.domain import Candidate
from evotrainer.core.errors import ConfigError
from evotrainer.stats.screening import SCREENABLE, screen_run
from evotrainer.tasks import get_task
from evotrainer.training.data import check_range


def _refuted(ctx: CampaignContext) -> list[RefutedChange]:
    """Changes this campaign rejected or blocked, each with every symptom (warning or worse) of its round.

    A brain reopens a refuted change only on new evidence: a serious symptom that was absent when it failed.
    Recording just the symptom the proposal cited would count its round's other findings as new, and the
    campaign would backtest a blocked trap again in the very next round.
    """

    out = []
    reopened = accepted_false_positives(ctx.store, ctx.campaign_id)  # blocked by a gate that has since been fixed
    seen: dict[int, list[str]] = {}
    for d in ctx.store.list_decisions(ctx.campaign_id):
        if d.outcome == "reject" or (d.outcome == "blocked" and d.proposal_id not in reopened):
            p = ctx.store.get_proposal(d.proposal_id)
            if p.round not in seen:
                seen[p.round] = [f.symptom for f in ctx.store.list_findings(ctx.campaign_id, round=p.round)
                                 if f.severity != "info"]
            symptoms = list(dict.fromkeys([p.hypothesis.symptom, *seen[p.round]]))
            out.append(RefutedChange(knob=p.knob, value=p.new, outcome=d.outcome, symptoms=symptoms))
    return out


def _knob_history(ctx: CampaignContext, knob: str) -> list[tuple[str, Any, Any, float | None, str]]:
    """This campaign's decided proposals of ``knob``: (proposal id, old value, new value, effect, outcome), for
    the optimizer (which learns from the moves: see agent/values.py)."""
    props = {p.id: p for p in ctx.store.list_proposals(ctx.campaign_id) if p.knob == knob}
    decided = ctx.store.get_decisions(list(props))
    return [(pid, props[pid].old, props[pid].new, None if d.stats is None else d.stats.effect, d.outcome)
            for pid, d in sorted(decided.items(), key=lambda kv: (props[kv[0]].round, kv[0]))]  # decision order


def _task(ctx: CampaignContext) -> Any:
    """The campaign's task, built once per campaign process."""
    if ctx.task is None:
        ctx.task = get_task(ctx.spec.task, ctx.spec.task_options)
    return ctx.task


def _task_inert(ctx: CampaignContext) -> dict[str, str]:
    """The campaign task's inert knobs (``Task.inert_knobs``)."""
    return _task(ctx).inert_knobs()


def _check_draft(ctx: CampaignContext, harness: HarnessSpec, knob: str, value: Any, symptom: str,
                 context: int | None, retest: bool = False) -> None:
    """Raise ConfigError when ``knob=value`` may not be proposed (the propose node's last line of defence).

    A re-test (:func:`_retests`) is not checked against the mistake notes: the notebook extrapolates from the
    values that failed (a ×3 raise refuted at −0.002 marks every larger raise), while this exact value measured a
    gain in this campaign, which is the stronger evidence.
    """

    harness.with_knob(knob, value)  # brains validate too
    if locked_knob(knob):
        raise ConfigError(f"{knob} is locked: diagnostics and gates judge proposals")
    inert = {**harness.inert_knobs(), **_task_inert(ctx)}
    if knob in inert:
        raise ConfigError(f"{knob} changes nothing here: {inert[knob]}")
    if (why := overflows_context(knob, value, context)) is not None:
        raise ConfigError(why)
    if knob == "data.difficulty" and value is not None:  # the harness knows level 1, only the task its last level
        check_range(_task(ctx), value, knob)
    mistake = None if retest else repeated_mistake(ctx.library, harness, knob, value, symptom)
    if mistake:
        raise ConfigError(f"{knob}={value!r} repeats the known mistake {mistake} with no new symptom")


RETEST = "retest-"  # id prefix of a re-test candidate (:func:`_retests`)


def _is_retest(draft: Any) -> bool:
    return any(c.startswith(RETEST) for c in draft.cited_skills)


def _retests(ctx: CampaignContext, harness: HarnessSpec, library: Sequence[Candidate] = ()) -> list:
    """Inconclusive changes that measured a gain, offered once more as candidates, with that gain as evidence.

    Why: an inconclusive backtest is not a refutation, but no library skill proposes its value again. A bracket
    arm (a learning rate moved 1e-6 → 2.7e-5) that gained +0.011 in 30 steps on a slow-learning warm start, too
    little to decide, was never tried again: the skill's own ×3 step had been refuted, so the knob dropped out,
    and the campaign ended where it started. A change is re-tested once (its value backtested twice at most),
    only while its knob still has the value it was tested from (after the knob moved, the old step means
    something else), and only when its effect was above ``backtest.min_effect``; it is backtested as it was,
    neither bracketed nor re-valued by Optuna. It answers its hypothesis's symptom and whatever the skills it cited
    answer now (their candidates among ``library``): a hypothesis names one symptom, the observed one before a
    reading of the recipe, and a pool still too small for the recipe check must keep its re-test when the
    overfitting that was named goes quiet for a segment.
    """

    knobs = harness.knobs()
    props = ctx.store.list_proposals(ctx.campaign_id)
    decided = ctx.store.get_decisions([p.id for p in props])
    tried: dict[tuple[str, str], int] = {}
    for p in props:
        if p.id in decided:
            tried[(p.knob, repr(p.new))] = tried.get((p.knob, repr(p.new)), 0) + 1
    out, seen = [], set()
    for p in props:
        d = decided.get(p.id)
        key = (p.knob, repr(p.new))
        if (d is None or d.outcome != "inconclusive" or d.stats is None or d.stats.effect <= ctx.spec.backtest.min_effect
                or tried[key] > 1 or key in seen or knobs.get(p.knob) != p.old):
            continue
        try:
            harness.with_knob(p.knob, p.new)
        except ConfigError:  # a value this harness no longer accepts is no candidate
            continue
        seen.add(key)
        cited = [sym for c in library if c.id in p.cited_skills for sym in c.symptoms]
        out.append(Candidate(
            id=f"{RETEST}{p.id}", symptoms=list(dict.fromkeys([p.hypothesis.symptom, *cited])), knob=p.knob,
            value=p.new, source="this campaign",
            description=f"re-test {p.knob} → {p.new!r}: inconclusive in round {p.round} at {d.stats.effect:+.3f} "
                        f"({d.stats.ci_low:+.3f}..{d.stats.ci_high:+.3f})",
            effects=[d.stats.effect]))
    return out


def _bracketed(harness: HarnessSpec, drafts: list, k: int, factor: float | None = None,
               bands: dict[str, tuple[float, float]] | None = None) -> tuple[list, dict[int, str]]:
    """The brain's drafts with a bracket arm (spec ``backtest.bracket``), and where the fixed values came from:
    ``{index: "bracket"}`` (:class:`~evotrainer.agent.values.ValueChoice`'s sources).

    When one of the drafts the round would backtest (the first ``k``) moves a scale knob, the same knob moved
    ``factor`` (``backtest.bracket_factor``) times as far in log scale is inserted right after it, backtested
    against the same control (×3 and ×243 for a learning rate); the drafts after it move down a slot, the drafts
    before it keep theirs. Why: a learning rate 300× too small gains +0.005 in a 30-step branch from a ×3 raise,
    too little to decide (on one warm start it read −0.002 and was refuted), while the bracket shows which decade
    the knob belongs in. The bracket is a second arm of its draft's hypothesis, so it never outranks a draft the
    brain put first: a bracket that moved its draft to the front cut the recipe's outlier the proposer had ranked
    first (flaw suite, evaluation seeds 101-102: four generations for groups of 2 lost to a lowered learning rate
    and its bracket). A bracket past the round's ``k`` slots runs only when an earlier draft is screened out.
    If both are promoted the larger effect wins (``decide_node``); both arms are trials of the knob's Optuna
    study. ``k`` < 2 (or 0: bracketing off) leaves the drafts as they are. ``bands`` (``backtest.bracket_range``,
    the spec's default when None) keeps the bracket inside each knob's usual band: from a value already there
    (a tuned learning rate) there is no bracket. A range knob's shift
    (the training levels, ``data.difficulty``) is bracketed the same way, by twice the shift
    (:func:`~evotrainer.agent.values.range_bracket`): [5, 5] → [4, 4] beside [3, 3].
    """

    factor = BRACKET_FACTOR if factor is None else factor
    if k < 2 or not drafts:
        return list(drafts), {}
    knobs = harness.knobs()
    at, first, value = next(((i, d, v) for i, d in enumerate(drafts[:k]) if not _is_retest(d)
                             and (v := bracket_value(harness, d.knob, knobs.get(d.knob), d.value, factor,
                                                     (BRACKET_RANGE if bands is None else bands).get(d.knob)))
                             is not None),
                            (None, None, None))
    if first is None:
        return list(drafts), {}
    current = knobs.get(first.knob)
    if any(d.knob == first.knob and d.value == value for d in drafts):
        return list(drafts), {}
    ranged = isinstance(value, list)  # a range knob's shift (values.range_bracket), not a scale knob's log move
    factor = (RANGE_BRACKET_STEPS if ranged  # else < factor if clipped
              else move_of(first.knob, current, value) / move_of(first.knob, current, first.value))
    scale = "the step" if ranged else "the move in log scale"

    def arm(v: Any, change: str, why: str):  # the draft moved to ``v``, saying how and why
        return first.model_copy(update={
            "value": v, "hypothesis": first.hypothesis.model_copy(update={"change": f"{first.knob}: {current!r} → "
                                                                                   f"{v!r}, {change}"[:300]}),
            "rationale": f"{why}; {first.rationale}"[:2000]})

    bracket = arm(value, f"a bracket of {first.value!r} ({factor:.3g}× {scale})",
                  f"bracket of the brain's draft ({first.knob} → {first.value!r}): the same knob moved {factor:.3g} "
                  f"times as far ({scale}), backtested beside the round's first arm against the same control")
    return [*drafts[:at + 1], bracket, *drafts[at + 1:]], {at + 1: "bracket"}


def _screen(ctx: CampaignContext, state: CampaignState, harness: HarnessSpec, knob: str, value: Any):
    """Screen a change on this round's segment rollouts (None when it cannot be, or the screening failed)."""

    if knob not in SCREENABLE or not state.get("segment_run"):
        return None
    try:
        return screen_run(ctx.home / "jobs" / state["segment_run"], harness, knob, value,
                          _task(ctx))
    except Exception as err:  # noqa: BLE001 - screening is an optimisation: a failure means "backtest it"
        ctx.store.log_event(ctx.campaign_id, "screening_error", {"round": state["round"], "knob": knob,
                                                                 "error": f"{type(err).__name__}: {err}"})
        return None


def _seeds(ctx: CampaignContext, rnd: int) -> list[int]:
    return [10_000 + 100 * rnd + 7 * ctx.spec.seed + i for i in range(ctx.spec.backtest.seeds)]


def _branch_name(ctx: CampaignContext, rnd: int, role: str, index: int | None, seed: int) -> str:
    return f"{ctx.campaign_id}__r{rnd:02d}__{role}{'' if index is None else index}__s{seed}"
