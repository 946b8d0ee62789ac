"""Confirmation on fresh held-out problems: the campaign's start against the mainline it hands over.

Why: every decision of a campaign selects on the same held-out problems (``eval.seed``): backtests promote
on them and the regression rollback keeps the version that scored best on them. The mainline's accuracy
there is the maximum of noisy numbers, biased upward by that selection. A confirmation draws ``eval.n``
other problems of the same levels from the same held-out split (a different seed, none of the campaign's
own), evaluates the base policy and the final mainline on them once, and records the result as an event,
so the start → end claim rests on problems no decision has seen.

Each version is played within its own recipe's completion budget (the start harness for the base policy,
the mainline's harness for the mainline), as the campaign measured them. When the two budgets differ the
base policy is also played within the mainline's budget, so the gain splits into what the recipe's budget
gave and what training gave.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evotrainer.errors import ConfigError


class Confirmation(BaseModel):
    """One confirmation of a campaign (the event ``confirmation`` holds its JSON)."""

    seed: int = Field(..., description="Seed of the fresh held-out problems.")
    n: int = Field(..., description="Problems evaluated (none of them in the campaign's own held-out set).")
    difficulty: tuple[int, int] = Field(..., description="Levels of the problems.")
    mainline: str = Field(..., description="Policy version confirmed.")
    start: float = Field(..., description="Base policy's greedy accuracy within the start harness's budget.")
    end: float = Field(..., description="Mainline's greedy accuracy within its own harness's budget.")
    start_at_end_budget: float | None = Field(
        None, description="Base policy within the mainline's budget (only when the budgets differ).")
    budgets: tuple[int, int] = Field(..., description="Completion budgets (start harness, mainline harness).")

    def describe(self) -> str:
        both = "" if self.start_at_end_budget is None else (
            f"; the start within the final budget of {self.budgets[1]} tokens: {self.start_at_end_budget:.3f}")
        return (f"{self.n} fresh held-out problems (seed {self.seed}, levels {list(self.difficulty)}): start "
                f"{self.start:.3f} → end {self.end:.3f} ({self.mainline}){both}")


def fresh_problems(task, eval_spec, seed: int) -> list:
    """``eval_spec.n`` held-out problems drawn with ``seed``, none of them among ``eval_spec``'s own."""
    from evotrainer.evaluation import heldout_problems

    if seed == eval_spec.seed:
        raise ConfigError(f"confirmation seed {seed} is the campaign's own eval.seed; pick another")
    own = {p.id for p in heldout_problems(task, eval_spec)}
    out: list = []
    for extra in (0, eval_spec.n, 4 * eval_spec.n):
        drawn = heldout_problems(task, eval_spec.model_copy(update={"seed": seed, "n": eval_spec.n + extra}))
        out = [p for p in drawn if p.id not in own][: eval_spec.n]
        if len(out) == eval_spec.n:
            return out
    raise ConfigError(f"the held-out split has fewer than {eval_spec.n} problems outside the campaign's own at these "
                      f"levels; lower eval.n")


def confirm(home: Path, cid: str, seed: int | None = None, store: Any = None) -> Confirmation:
    """Evaluate the campaign's base policy and its mainline on fresh held-out problems; record and return it."""
    import json

    from evotrainer.agent.campaign import _spec_of
    from evotrainer.config import HarnessSpec
    from evotrainer.evaluation import evaluate
    from evotrainer.policy import load_policy
    from evotrainer.store import Store
    from evotrainer.tasks import get_task

    store = store or Store.for_home(home)
    camp = store.get_campaign(cid)
    if camp.mainline_version is None:
        raise ConfigError(f"campaign {cid} has no mainline version yet: nothing to confirm")
    spec = _spec_of(camp)
    lineage = store.policy_lineage(cid)
    first = json.loads((home / "jobs" / lineage[0].run_name / "meta.json").read_text())
    mainline = store.get_policy_version(camp.mainline_version)
    start_version = camp.spec["initial_harness_version"]
    harness = {v: HarnessSpec.model_validate(store.get_harness_version(v).spec)
               for v in (start_version, mainline.harness_version)}
    budgets = (harness[start_version].grpo.max_completion_length,
               harness[mainline.harness_version].grpo.max_completion_length)
    task = get_task(spec.task, spec.task_options)
    ev = spec.eval.model_copy(update={"k": 1})
    seed = spec.eval.seed + 1 if seed is None else seed
    problems = fresh_problems(task, ev, seed)

    loaded: dict[str, tuple[Any, Any]] = {}

    def acc(path: str, budget: int) -> float:
        if path not in loaded:
            model, tokenizer = load_policy(path)
            if task.environment() is not None:  # episodes are played through the chat template, as in training
                from evotrainer.episodes import ensure_chat_template

                ensure_chat_template(tokenizer)
            loaded[path] = (model, tokenizer)
        model, tokenizer = loaded[path]
        return evaluate(model, tokenizer, task, problems, ev, budget)["eval/greedy_accuracy"]

    lo, hi = ev.difficulty or (task.default_difficulty, task.default_difficulty)
    result = Confirmation(
        seed=seed, n=len(problems), difficulty=(lo, hi), mainline=mainline.id, budgets=budgets,
        start=acc(first["base_policy"], budgets[0]), end=acc(mainline.checkpoint, budgets[1]),
        start_at_end_budget=acc(first["base_policy"], budgets[1]) if budgets[1] != budgets[0] else None)
    store.log_event(cid, "confirmation", result.model_dump(mode="json"))
    return result
