"""Reward composition: the harness's reward terms as TRL reward functions.

Each term is a separate TRL reward function so that TRL logs it as ``rewards/<term>/mean`` and applies
the harness weight through ``reward_weights``. Only terms with a positive weight are built, except
correctness, which always runs: it is where each completion is verified (strict correctness is recorded
even when the reward is lenient or format-only) and where the rollout rows are started.

Terms (before weighting):
- ``correctness``: 1.0 if right ('exact': the whole completion; 'contains': anywhere in it), else 0.0. A
  task with partial credit (``Verdict.score``, e.g. ``code``: the fraction of hidden tests passed) is paid
  that score under 'exact'; ``reward.correctness.tests: visible`` (a TRAP for demonstrating gates) pays
  ``Verdict.visible_score``, the examples shown in the prompt, instead.
- ``format``: 1.0 if the completion is well-formed for the task, else 0.0.
- ``overlong``: DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13): 0 up to L−buffer tokens,
  linear down to −1 at L, and −1 for a truncated completion.
- ``repetition``: −(share of repeated n-grams among the completion's n-grams).
"""

from __future__ import annotations

import json
from typing import Any

from evotrainer.config import HarnessSpec
from evotrainer.evidence import RolloutRecorder
from evotrainer.tasks import Problem, Task, Verdict


def overlong_penalty(length: int, truncated: bool, max_len: int, buffer: int) -> float:
    if truncated:
        return -1.0
    start = max_len - buffer
    if length <= start:
        return 0.0
    return max(-1.0, (start - length) / buffer)


def repetition_share(text: str, n: int) -> float:
    grams = [text[i : i + n] for i in range(len(text) - n + 1)]
    if len(grams) < 2:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def _problem(kw: dict[str, Any], i: int) -> Problem:
    return Problem(
        id=kw["problem_id"][i],
        prompt=kw["prompts"][i],
        answer=kw["answer"][i],
        difficulty=int(kw["difficulty"][i]),
        meta=json.loads(kw["meta"][i]),
    )


class _Term:
    """A named TRL reward function (TRL uses ``__name__`` for metric names)."""

    def __init__(self, name: str):
        self.__name__ = name


def correctness_value(v: Verdict, match: str, tests: str = "hidden") -> float:
    """The correctness reward of one verdict (see the module docstring)."""
    if match != "exact":
        return 1.0 if v.contains_answer else 0.0
    score = v.visible_score if tests == "visible" and v.visible_score is not None else v.score
    if score is None:
        return 1.0 if v.correct else 0.0
    return float(score)


class CorrectnessTerm(_Term):
    def __init__(self, task: Task, match: str, recorder: RolloutRecorder | None, num_generations: int, eos_id: int,
                 max_len: int, tests: str = "hidden"):
        super().__init__("correctness")
        self.task, self.match, self.tests, self.recorder = task, match, tests, recorder
        self.G, self.eos_id, self.max_len = num_generations, eos_id, max_len

    def __call__(self, prompts, completions, completion_ids, **kw):
        kw["prompts"] = prompts
        state = kw.get("trainer_state")
        step = (state.global_step + 1) if state is not None else 0
        out, rows, correct = [], [], []
        for i, (completion, ids) in enumerate(zip(completions, completion_ids, strict=True)):
            problem = _problem(kw, i)
            v = self.task.verify(problem, completion)
            out.append(correctness_value(v, self.match, self.tests))
            correct.append(v.correct)
            ended = bool(ids) and ids[-1] == self.eos_id
            rows.append(
                {
                    "step": step,
                    "prompt_id": problem.id,
                    "group_id": f"{step}:{i // self.G}",
                    "prompt": problem.prompt,
                    "completion": completion,
                    "correct": v.correct,
                    "well_formed": v.well_formed,
                    "n_candidates": v.n_candidates,
                    "length": len(ids) - (1 if ended else 0),
                    "truncated": (not ended) and len(ids) >= self.max_len,
                    "difficulty": problem.difficulty,
                }
            )
        log_metric = kw.get("log_metric")
        if log_metric is not None and correct:
            log_metric("accuracy", sum(correct) / len(correct))
        if self.recorder is not None and state is not None:
            for r in rows:
                r["run_id"] = self.recorder.run_id
            self.recorder.begin_batch()
            self.recorder.add(rows)
        return out


class FormatTerm(_Term):
    def __init__(self, task: Task):
        super().__init__("format")
        self.task = task

    def __call__(self, prompts, completions, **kw):
        kw["prompts"] = prompts
        return [1.0 if self.task.verify(_problem(kw, i), c).well_formed else 0.0 for i, c in enumerate(completions)]


class OverlongTerm(_Term):
    def __init__(self, max_len: int, buffer: int, eos_id: int):
        super().__init__("overlong")
        self.max_len, self.buffer, self.eos_id = max_len, buffer, eos_id

    def __call__(self, prompts, completions, completion_ids, **kw):
        out = []
        for ids in completion_ids:
            ended = bool(ids) and ids[-1] == self.eos_id
            length = len(ids) - (1 if ended else 0)
            out.append(overlong_penalty(length, (not ended) and len(ids) >= self.max_len, self.max_len, self.buffer))
        return out


class RepetitionTerm(_Term):
    def __init__(self, n: int):
        super().__init__("repetition")
        self.n = n

    def __call__(self, prompts, completions, **kw):
        return [-repetition_share(c, self.n) for c in completions]


def build_reward_funcs(
    harness: HarnessSpec, task: Task, recorder: RolloutRecorder | None, eos_id: int
) -> tuple[list[_Term], list[float]]:
    """TRL reward functions and their weights for a harness (correctness first, always present)."""
    r, g = harness.reward, harness.grpo
    funcs: list[_Term] = [
        CorrectnessTerm(task, r.correctness.match, recorder, g.num_generations, eos_id, g.max_completion_length,
                        r.correctness.tests)
    ]
    weights = [r.correctness.weight]
    if r.format.weight > 0:
        funcs.append(FormatTerm(task))
        weights.append(r.format.weight)
    if r.overlong.weight > 0:
        funcs.append(OverlongTerm(g.max_completion_length, r.overlong.buffer, eos_id))
        weights.append(r.overlong.weight)
    if r.repetition.weight > 0:
        funcs.append(RepetitionTerm(r.repetition.ngram))
        weights.append(r.repetition.weight)
    return funcs, weights
