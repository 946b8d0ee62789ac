"""Confirmation on fresh held-out problems: the campaign's start against the mainline it hands over.

Why: a campaign chooses on held-out problems: backtests promote on the decision split, and the mainline
continues from the branch (and rolls back to the version) that scored best on the selection split. Accuracy
on either is the maximum of noisy numbers, biased upward by that choice. A confirmation evaluates the base
policy and the final mainline once on the third split (:func:`evotrainer.training.evaluation.split_problems`:
``eval.n`` problems of the same levels, none of the other two splits) and records the result as an event,
so the start → end claim rests on problems no choice has seen.

A campaign scores them in its pool's worker (``score``), which already holds torch and the policy code; loading
them in the campaign process cost about 8 s of a 400-step campaign's 230, most of it importing transformers.
``evotrainer campaign confirm`` scores in-process.

Each version is played within its own recipe's completion budget (the start harness for the base policy,
the mainline's harness for the mainline), as the campaign measured them. When the two budgets differ the
base policy is also played within the mainline's budget, so the gain splits into what the recipe's budget
gave and what training gave.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field

from evotrainer.config.campaign import spec_of
from evotrainer.config.harness import HarnessSpec
from evotrainer.core.errors import ConfigError
from evotrainer.core.runmeta import read_run_meta
from evotrainer.jobs.scoring import ScoreAnswer, ScoreRequest, score_here
from evotrainer.tasks import get_task
from evotrainer.training.evaluation import split_problems


class Confirmation(BaseModel):
    """One confirmation of a campaign (the event ``confirmation`` holds its JSON)."""

    seed: int = Field(..., description="Seed of the fresh held-out problems.")
    n: int = Field(..., description="Problems evaluated (the confirmation split: none the campaign chose on).")
    difficulty: tuple[int, int] = Field(..., description="Levels of the problems.")
    mainline: str = Field(..., description="Policy version confirmed.")
    start: float = Field(..., description="Base policy's greedy accuracy within the start harness's budget.")
    end: float = Field(..., description="Mainline's greedy accuracy within its own harness's budget.")
    start_at_end_budget: float | None = Field(
        None, description="Base policy within the mainline's budget (only when the budgets differ).")
    budgets: tuple[int, int] = Field(..., description="Completion budgets (start harness, mainline harness).")
    gain_se: float | None = Field(
        None, description="Standard error of end − start over these problems, paired (the s.d. of the per-problem "
                          "difference of outcomes / √n): the part of the gain a different sample of problems would "
                          "move. None in records made before it existed.")

    def describe(self) -> str:
        both = "" if self.start_at_end_budget is None else (
            f"; the start within the final budget of {self.budgets[1]} tokens: {self.start_at_end_budget:.3f}")
        se = "" if self.gain_se is None else f" ({self.end - self.start:+.3f}, s.e. {self.gain_se:.3f})"
        return (f"{self.n} fresh held-out problems (seed {self.seed}, levels {list(self.difficulty)}): start "
                f"{self.start:.3f} → end {self.end:.3f}{se} ({self.mainline}){both}")


def paired_se(a: list[bool], b: list[bool]) -> float | None:
    """Standard error of mean(b) − mean(a) for two policies' outcomes on the same problems (None below 2)."""
    import statistics

    d = [float(y) - float(x) for x, y in zip(a, b, strict=True)]
    return round(statistics.stdev(d) / len(d) ** 0.5, 4) if len(d) > 1 else None


Scorer = Callable[[ScoreRequest], ScoreAnswer]  # a launcher's score, or scoring.score_here


def confirm(home: Path, cid: str, seed: int | None = None, store: Any = None, score: Scorer | None = None,
            n: int | None = None) -> Confirmation:
    """Evaluate the campaign's base policy and its mainline on fresh held-out problems; record and return it.

    ``score``: where to evaluate (the campaign's pool: ``Launcher.score``); None evaluates in this process.
    ``n``: how many problems (default: the spec's ``confirm_n``, else ``eval.n``).
    """

    from evotrainer.store import Store

    store = store or Store.for_home(home)
    camp = store.get_campaign(cid)
    if camp.mainline_version is None:
        raise ConfigError(f"campaign {cid} has no mainline version yet: nothing to confirm")
    spec = spec_of(camp)
    lineage = store.policy_lineage(cid)
    first_dir = home / "jobs" / lineage[0].run_name
    first = read_run_meta(first_dir)
    if first is None or first.base_policy is None:
        raise ConfigError(f"{first_dir / 'meta.json'}: no readable job record of the campaign's first segment, so "
                          "the base policy to confirm against is unknown")
    mainline = store.get_policy_version(camp.mainline_version)
    start_version = camp.spec["initial_harness_version"]
    harness = {v: HarnessSpec.model_validate(store.get_harness_version(v).spec)
               for v in (start_version, mainline.harness_version)}
    budgets = (harness[start_version].grpo.max_completion_length,
               harness[mainline.harness_version].grpo.max_completion_length)
    task = get_task(spec.task, spec.task_options)
    ev = spec.eval.model_copy(update={"k": 1})
    n = n if n is not None else spec.confirm_n
    problems = split_problems(task, ev, "confirmation", seed, n)  # validates seed and n before anything is scored
    policies = [(first.base_policy, budgets[0]), (mainline.checkpoint, budgets[1])]
    if budgets[1] != budgets[0]:
        policies.append((first.base_policy, budgets[1]))
    out = (score or score_here)(ScoreRequest(task=spec.task, task_options=spec.task_options, eval=ev,
                                             split="confirmation", seed=seed, n=n, outcomes=True, policies=policies))
    if not out.ok:
        raise ConfigError(f"campaign {cid}: the confirmation could not score its policies: {out.error}")
    accs = out.accuracies
    seed = spec.eval.seed + 1 if seed is None else seed
    lo, hi = ev.difficulty or task.default_range()
    result = Confirmation(
        seed=seed, n=len(problems), difficulty=(lo, hi), mainline=mainline.id, budgets=budgets,
        start=accs[0], end=accs[1], start_at_end_budget=accs[2] if len(accs) > 2 else None,
        gain_se=paired_se(out.outcomes[0], out.outcomes[1]) if out.outcomes else None)
    store.log_event(cid, "confirmation", result.model_dump(mode="json"))
    return result
