"""What every brain gets and returns, so the propose node does not care which brain it asked.

A brain turns findings into at most ``max_proposals`` single-factor ``ProposalDraft``s. It sees the
current harness (to know old values and bounds), the findings of the last segment, the candidate
interventions (skills of the library, most relevant first) with the held-out effects recorded for them,
the library's known mistakes, and what this campaign already refuted (known mistakes included). It never applies anything: the propose node validates every draft against the
harness (``HarnessSpec.with_knob``) and drops drafts that change nothing or repeat a refuted change.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.config.harness import HarnessSpec
from evotrainer.core.domain import Candidate, Finding, ProposalDraft


class KnownMistake(BaseModel):
    """A library mistake note relevant to the findings: a change that failed before (shown to the LLM brain)."""

    slug: str
    knob: str
    direction: str = Field(..., description="The move that failed: 'to <value tried>', else the note's cluster.")
    symptoms: list[str]
    failures: int = Field(..., description="Backtests in which it was refuted or blocked (the note's helpful count).")
    successes: int = Field(..., description="Backtests in which it worked after all (the note's harmful count).")
    description: str


class RefutedChange(BaseModel):
    knob: str
    value: Any
    outcome: str
    symptoms: list[str] = Field(default_factory=list, description="Symptoms present when it was refuted.")


class BrainContext(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    harness: HarnessSpec
    findings: list[Finding]
    candidates: list[Candidate]
    refuted: list[RefutedChange] = Field(default_factory=list)
    mistakes: list[KnownMistake] = Field(default_factory=list, description="Retrieved library mistake notes.")
    max_proposals: int = 2
    min_effect: float = Field(0.0, description="The backtest's minimum effect: what a candidate must beat to be worth a backtest.")
    task: str = ""
    task_inert: dict[str, str] = Field(
        default_factory=dict, description="Knobs that change nothing on the task (``Task.inert_knobs``), with why.")
    seed: int = 0
    round: int = 0
    metrics: dict[str, float] = Field(default_factory=dict, description="Latest segment's key metrics.")
    only_knobs: list[str] | None = Field(
        None, description="When set, the only knobs a proposal may change, and why (``only_why``): a stuck round offers "
                          "those that enlarge the update (evotrainer/agent/movement.py), a regressed one those that "
                          "shrink it and those the recipe check found far outside their normal range "
                          "(evotrainer/agent/regression.py).")
    only_why: str = Field("", description="Why only ``only_knobs`` are offered, in words (trusted: our own numbers).")
    only_directions: dict[str, str] = Field(
        default_factory=dict, description="With ``only_knobs``, the way each other offered knob must move "
                                          "(library/changes.py direction: up, down, …): a regressed round's recipe "
                                          "outliers, back toward their normal range (agent/regression.py).")
    only_step: Literal["larger", "smaller"] | None = Field(
        None, description="With ``only_knobs``, the way a step-size knob must move the update: larger in a stuck "
                          "round (agent/movement.py), smaller in a regressed one (agent/regression.py).")


    def inert(self) -> dict[str, str]:
        """Knobs that change nothing here: under the rest of the harness, or on the task."""
        return {**self.harness.inert_knobs(), **self.task_inert}


class BrainResult(BaseModel):
    drafts: list[ProposalDraft]
    brain: str = Field(..., description="Which brain produced the drafts: heuristic, llm, or llm→heuristic.")
    notes: list[str] = Field(default_factory=list, description="What happened (retries, fallbacks, rejected drafts).")
    tokens: int = 0


class Brain(Protocol):
    name: str

    def propose(self, ctx: BrainContext) -> BrainResult: ...
