"""Scoring saved policies on a held-out split, in a pool worker (which has torch and the task loaded).

Why a worker: the campaign process does not import torch for its own bookkeeping, and a worker already
holds the training stack. A campaign scores on the *selection* split the branches its mainline may continue
from, and the segment checkpoints a rollback may return to (:mod:`evotrainer.training.evaluation` explains the three
splits). Like ``run_branch`` it never raises: the error is the result.

A request may also ask for the seeds of one arm to be averaged first (``merge``, :mod:`evotrainer.jobs.merge`):
the merged checkpoint is then scored last, in the same call, and its path returned.

A launcher with several workers splits a request of several policies into parts, one per worker, with the cores
shared among them (:func:`split_request`, :func:`join_answers`): greedy evaluation of a small policy does not
scale across threads (on 2 cores one agentic evaluation took 1.4× as long on 1 thread as on 2), so two
evaluations side by side on a core each finish ~30 % sooner than one after the other on both. The campaign's
confirmation, the kept seeds and their average, and a segment's score beside the base's are such requests.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.config.eval import EvalSpec
from evotrainer.jobs.merge import merge_runs
from evotrainer.tasks import get_task
from evotrainer.training.evaluation import Split, split_problems
from evotrainer.training.policy import policy_accuracy


class MergeRequest(BaseModel):
    """Seeds of one arm to average into the job ``name`` (under ``home``), scored within ``max_new_tokens``."""

    model_config = ConfigDict(extra="forbid")

    home: str
    name: str
    sources: list[tuple[str, int]] = Field(..., min_length=2, description="(run name, step) of each seed.")
    max_new_tokens: int = Field(..., ge=1)
    tags: dict[str, str] = Field(default_factory=dict, description="Extra MLflow tags of the merged run.")


class ScoreRequest(BaseModel):
    """What to score: policies (checkpoint or base directories), each within its completion budget."""

    model_config = ConfigDict(extra="forbid")

    task: str
    task_options: dict[str, Any] = Field(default_factory=dict)
    eval: EvalSpec
    split: Split = "selection"
    seed: int | None = Field(None, description="The split's seed, when not its default (a confirmation's --seed).")
    n: int | None = Field(None, ge=1, description="The confirmation's size, when not eval.n (confirm_n, --n).")
    outcomes: bool = Field(False, description="Also return each policy's per-problem outcomes (for paired errors).")
    policies: list[tuple[str, int]] = Field(..., description="(path, max_new_tokens) pairs.")
    merge: MergeRequest | None = Field(None, description="Average these runs into a new job first and score it last.")


class ScoreAnswer(BaseModel):
    """What scoring answers: the accuracies in the request's order (the merged checkpoint's last), or why it failed."""

    model_config = ConfigDict(extra="ignore")

    ok: bool
    error: str | None = Field(None, description="Why it failed (a worker's own error, or a part's, named).")
    accuracies: list[float] = Field(default_factory=list, description="Greedy accuracy of each policy, in order.")
    n: int | None = Field(None, description="Problems each policy was scored on.")
    merged: str | None = Field(None, description="The merged checkpoint's path, when the request asked for one.")
    outcomes: list[list[bool]] | None = Field(None, description="Per-problem outcomes of each policy, when asked.")


def score_here(request: ScoreRequest) -> ScoreAnswer:
    """Score in this process (which then imports torch): a confirmation run from the command line."""
    return ScoreAnswer.model_validate(score_policies(request.model_dump(mode="json")))


def split_request(request: dict[str, Any], parts: int) -> list[tuple[dict[str, Any], list[int]]]:
    """``request`` divided into at most ``parts`` requests, with the indices their answers' policies have in the
    whole answer (``len(policies)`` is the merged checkpoint's: it comes last).

    Evaluations are what cost, so each part gets about as many: copies of one path (the base played within two
    budgets) stay together, since a worker loads a policy once for consecutive copies, and the merge (one more
    evaluation, after the averaging) goes to a part of its own when it can. Deterministic: a campaign that is
    re-run splits the same way, so each policy is scored with the same thread count.
    """
    policies = [tuple(p) for p in request.get("policies") or []]
    groups: dict[str, list[int]] = {}
    for i, (path, _) in enumerate(policies):
        groups.setdefault(str(path), []).append(i)
    merge = request.get("merge") is not None
    units = ([[len(policies)]] if merge else []) + sorted(groups.values(), key=len, reverse=True)
    n = min(max(parts, 1), len(units))
    if n <= 1:
        return [(request, list(range(len(policies) + merge)))]
    bins: list[list[int]] = [[] for _ in range(n)]
    for unit in units:
        min(bins, key=len).extend(unit)  # the first of the lightest parts: ties go to the lower part
    out = []
    for idx in bins:
        own = sorted(i for i in idx if i < len(policies))
        part = {**request, "policies": [list(policies[i]) for i in own]}
        if len(policies) in idx:
            own.append(len(policies))
        else:
            part.pop("merge", None)
        out.append((part, own))
    return out


def join_answers(parts: list[tuple[dict[str, Any], list[int]]], answers: list[dict[str, Any]]) -> dict[str, Any]:
    """The parts' answers (:func:`split_request`) as the whole request's: accuracies and outcomes in its order, the
    merged checkpoint's path; or the first failed part's error, naming the part."""
    total = sum(len(idx) for _, idx in parts)
    accs: list[Any] = [None] * total
    outcomes: list[Any] = [None] * total
    merged, n = None, None
    for k, ((_, idx), ans) in enumerate(zip(parts, answers, strict=True)):
        if not ans.get("ok"):
            return {**ans, "error": f"part {k + 1} of {len(parts)}: {ans.get('error')}"}
        for j, i in enumerate(idx):
            accs[i] = ans["accuracies"][j]
            if "outcomes" in ans:
                outcomes[i] = ans["outcomes"][j]
        merged = ans.get("merged") or merged
        n = ans.get("n", n)
    out = {"ok": True, "accuracies": accs, "n": n, "merged": merged}
    if any("outcomes" in a for a in answers):
        out["outcomes"] = outcomes
    return out


def score_policies(request: dict[str, Any]) -> dict[str, Any]:
    """``{"ok": True, "accuracies": [...], "merged": path | None}`` in the order of ``request.policies`` (the merged
    checkpoint's last, when ``merge`` asked for one), with ``"outcomes"`` (a list of booleans per policy) when the
    request asked for them; or ``{"ok": False, "error"}``."""
    try:

        req = ScoreRequest.model_validate(request)
        task = get_task(req.task, req.task_options)
        problems = split_problems(task, req.eval, req.split, req.seed, req.n)
        policies = list(req.policies)
        merged = None
        if req.merge is not None:

            m = req.merge
            merged = str(merge_runs(Path(m.home), m.name, m.sources, m.tags))
            policies.append((merged, m.max_new_tokens))
        accs: list[float] = []
        outcomes: list[list[bool]] = []
        cache: dict[str, Any] = {}
        for path, budget in policies:
            if path not in cache:
                cache.clear()  # one policy in memory at a time (a real model is hundreds of MB)
            outcomes.append([])
            accs.append(policy_accuracy(path, task, problems, req.eval, budget, cache=cache, outcomes=outcomes[-1]))
        return {"ok": True, "accuracies": accs, "n": len(problems), "merged": merged,
                **({"outcomes": outcomes} if req.outcomes else {})}
    except BaseException as err:  # noqa: BLE001 - reported to the campaign, which records it and goes on
        return {"ok": False, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-4000:]}
