"""Data selection for a segment: which train-split prompts a job sees, and how often.

The pool is a fixed set of distinct train-split problems (``data.pool_size``, seeded), so that per-prompt
pass rates observed in one segment can steer the next one. Rules that read evidence (dynamic sampling at
segment granularity, difficulty-targeted sampling in the spirit of VADE / DOTS) use the pass statistics of
the job's ancestors; a job with no ancestors trains uniformly on the pool. A fork draws the pool of its lineage's
root job (``pool_seed`` in its meta.json, see ``jobs.runner``), whatever its own seed, so that those statistics
describe prompts it can meet; its own seed decides which of them it draws, and in what order.

The segment dataset is a list of ``steps × prompts_per_step`` problems drawn from the (filtered, weighted)
pool; TRL's sampler then repeats each one ``num_generations`` times.

**One stream per seed** (:func:`stream_problems`). A job's problems are a window of a sequence fixed by the pool,
the weights and the job's seed, starting where its fork point lies on the lineage's step axis — not a fresh draw
per segment. So a job trained in pieces (a campaign's segments, each a fork of the last under the same harness and
seed) meets the very prompts a single run of the whole length would, in the same order: a campaign that changes
nothing trains the user's run, not a neighbouring path (on agentic at lr 3e-4 one such neighbour ended 6.6 points
from the single run, bench/log/07-campaign-vs-static-baseline.md 2026-11-27). Two arms forked from one parent with one seed still share
their window (common random numbers). Uniform weights walk the pool epoch by epoch, each epoch a seeded shuffle (no
prompt twice before every prompt once); weighted ones draw with replacement, one draw per prompt slot.
"""

from __future__ import annotations

import json
import random

import pandas as pd

from evotrainer.config.harness import HarnessSpec
from evotrainer.core.errors import ConfigError
from evotrainer.tasks import Problem, Task


def check_range(task: Task, rng, field: str) -> tuple[int, int]:
    """``rng`` as (lo, hi) if it is an ordered range of ``task``'s levels, else a ConfigError naming ``field``."""
    lo, hi = int(rng[0]), int(rng[1])
    if lo > hi or lo < task.min_difficulty or hi > task.max_difficulty:
        raise ConfigError(
            f"{field} {[lo, hi]} is outside task '{task.name}' levels "
            f"{task.min_difficulty}..{task.max_difficulty} ({task.difficulty_doc})"
        )
    return lo, hi


def difficulty_range(task: Task, harness: HarnessSpec) -> tuple[int, int]:
    return check_range(task, harness.data.difficulty or task.default_range(),
                       "data.difficulty")


def build_pool(task: Task, harness: HarnessSpec, seed: int) -> list[Problem]:
    pool = task.sample("train", harness.data.pool_size, seed=seed, difficulty_range=difficulty_range(task, harness))
    if not pool:
        raise ConfigError(f"task '{task.name}' has no train problems at difficulty {list(difficulty_range(task, harness))}")
    return pool


def needs_pass_stats(harness: HarnessSpec) -> bool:
    """Whether the harness's data rules read the lineage's per-prompt pass rates (reading them costs a job's
    set-up ~0.2 s of Parquet at a campaign's depth, so a uniform harness skips it)."""
    d = harness.data
    return d.drop_all_correct or d.drop_all_wrong or d.sampling == "difficulty_targeted"


def selection_weights(pool: list[Problem], harness: HarnessSpec, stats: pd.DataFrame | None) -> tuple[list[float], dict]:
    """Per-problem sampling weights after the harness's data rules, and a report of what was dropped."""
    d = harness.data
    by_id = stats.set_index("prompt_id") if stats is not None and len(stats) else None
    weights, dropped_correct, dropped_wrong, seen = [], 0, 0, 0
    for p in pool:
        w = 1.0
        if by_id is not None and p.id in by_id.index:
            seen += 1
            row = by_id.loc[p.id]
            if d.drop_all_correct and bool(row["last_all_correct"]):
                w, dropped_correct = 0.0, dropped_correct + 1
            elif d.drop_all_wrong and bool(row["last_all_wrong"]):
                w, dropped_wrong = 0.0, dropped_wrong + 1
            elif d.sampling == "difficulty_targeted":
                # Peak at the target pass rate, floor so no prompt is starved completely.
                w = max(0.05, 1.0 - abs(float(row["pass_rate"]) - d.target_pass_rate) / max(d.target_pass_rate, 1 - d.target_pass_rate))
        weights.append(w)
    if sum(weights) == 0:  # every prompt was filtered: fall back to uniform rather than train on nothing
        weights = [1.0] * len(pool)
    # seen: problems with evidence in the lineage; None where no rule reads it (the job does not load it)
    report = {"pool": len(pool), "seen": seen if stats is not None or needs_pass_stats(harness) else None,
              "dropped_all_correct": dropped_correct, "dropped_all_wrong": dropped_wrong}
    return weights, report


def stream_problems(pool: list[Problem], weights: list[float], seed: int, start: int, n: int) -> list[Problem]:
    """Problems ``start`` to ``start + n`` of the stream ``seed`` gives ``pool`` under ``weights`` (module
    docstring): any window is the same slice of one sequence, whatever the windows before it."""
    if start < 0 or n < 0:
        raise ValueError(f"a stream window needs start >= 0 and n >= 0, not start={start}, n={n}")
    if all(w == 1.0 for w in weights):
        out: list[Problem] = []
        size, at = len(pool), start
        while len(out) < n:
            epoch, offset = divmod(at, size)
            order = list(range(size))
            random.Random(f"{seed}:epoch:{epoch}").shuffle(order)
            take = order[offset : offset + n - len(out)]
            out.extend(pool[i] for i in take)
            at += len(take)
        return out
    return random.Random(f"{seed}:weighted").choices(pool, weights=weights, k=start + n)[start:]


# The version of :func:`stream_problems`' sequence, recorded in each job's ``meta.json`` (``data_stream``): a run whose
# prompts an earlier version drew is not the run the same spec and seed give now, so whatever reuses finished runs
# (the benches) must not take one for the other. Runs recorded before the field existed drew a fresh sample per
# segment (version 1).
STREAM_VERSION = 2

ROW_COLUMNS = ("prompt", "problem_id", "answer", "difficulty", "meta")


def problem_row(p: Problem, conversational: bool = False) -> dict:
    """One dataset row: what TRL hands to reward functions (and, for a multi-turn task, to ``env.reset``).

    ``conversational`` makes the prompt a one-message chat, as TRL's environment support requires.
    """
    return {
        "prompt": [{"role": "user", "content": p.prompt}] if conversational else p.prompt,
        "problem_id": p.id,
        "answer": p.answer,
        "difficulty": p.difficulty,
        "meta": json.dumps(p.meta),
    }


def to_dataset(problems: list[Problem], conversational: bool = False):
    from datasets import Dataset

    built: dict[int, dict] = {}  # a fork's padding repeats one problem thousands of times: one row for it
    for p in problems:
        if id(p) not in built:
            built[id(p)] = problem_row(p, conversational)
    rows = [built[id(p)] for p in problems]
    return Dataset.from_dict({col: [r[col] for r in rows] for col in ROW_COLUMNS})
