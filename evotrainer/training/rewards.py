"""Reward composition: the harness's reward terms as TRL reward functions.

Each term is a separate TRL reward function so that TRL logs it as ``rewards/<term>/mean`` and applies
the harness weight through ``reward_weights``. Only terms with a positive weight are built, except
correctness, which always runs: it is where each completion is verified (strict correctness is recorded
even when the reward is lenient or format-only) and where the rollout rows are started.

Terms (before weighting):
- ``correctness``: 1.0 if right ('exact': the whole completion; 'final': the final answer the task reads from
  prose, ``Verdict.final_correct``, for chat models that wrap answers in words; 'contains': anywhere in it), else
  0.0. Strict correctness (``correct``) and the final-answer reading (``final_correct``) are both recorded in
  every rollout whatever the reward pays, so the diagnostics see both. A
  task with partial credit (``Verdict.score``, e.g. ``code``: the fraction of hidden tests passed) is paid
  that score under 'exact'; ``reward.correctness.tests: visible`` (a TRAP for demonstrating gates) pays
  ``Verdict.visible_score``, the examples shown in the prompt, instead.
- ``format``: 1.0 if the completion is well-formed for the task, else 0.0.
- ``overlong``: DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13): 0 up to L−buffer tokens,
  linear down to −1 at L, and −1 for a truncated completion.
- ``repetition``: −(share of repeated n-grams among the completion's n-grams).
- ``efficiency``: −(completion tokens / max_completion_length): a length / turn penalty (tool observations
  count, so every turn of an episode costs). A TRAP when strong (see ``reward.efficiency.weight``).
- the user's TRL reward functions (``reward.functions``), called with TRL's signature: ``prompts``, ``completions``,
  ``completion_ids``, TRL's own keywords (``trainer_state``, ...) and every column of a dataset task's rows as a
  list, one value per completion. Each returns one float or None per completion, logged under the function's name
  as TRL does. One that raises, returns the wrong number of values or NaN fails the job with its name and the step
  (:class:`UserRewardError`); what was checkpointed and recorded before that step stays.

A multi-turn task (one with an environment, e.g. ``agentic``) gets conversational completions (the episode's
messages) and one environment per completion (TRL's ``environments``). Its environment owns the correctness
reward: the correctness term pays ``env.get_reward()`` (``match`` and ``tests`` do not apply) and records the
environment's verdict of what the episode submitted, the episode's transcript as the completion and every
turn in the ``turns`` column; the text terms read the transcript.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

from evotrainer.config.harness import HarnessSpec
from evotrainer.evidence.model import RolloutRecorder
from evotrainer.tasks import Problem, Task, Verdict
from evotrainer.tasks.verifiers import VERIFIER_ERROR, user_function
from evotrainer.training.episodes import transcript, turn_records

NO_SUBMISSION = Verdict(correct=False, well_formed=False, contains_answer=False, n_candidates=0,
                        reason="the episode submitted no answer")


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


def _text(completion: Any) -> str:
    """A completion as text: itself, or a conversational completion's transcript (a chat model's one reply is its
    text; a multi-turn episode's is its turns and observations)."""
    return transcript(completion) if isinstance(completion, list) else completion


def _verdict(env) -> Verdict:
    return getattr(env, "verdict", None) or NO_SUBMISSION


def _problem(kw: dict[str, Any], i: int) -> Problem:
    prompt = kw["prompts"][i]
    if "problem_prompt" in kw:  # a chat model's rows: the prompt column holds the chat messages
        prompt = kw["problem_prompt"][i]
    return Problem(
        id=kw["problem_id"][i],
        prompt=prompt[-1]["content"] if isinstance(prompt, list) else prompt,
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
    if match == "final":
        return 1.0 if (v.correct if v.final_correct is None else v.final_correct) else 0.0
    if match != "exact":
        return 1.0 if v.contains_answer else 0.0
    score = v.visible_score if tests == "visible" and v.visible_score is not None else v.score
    if score is None:
        return 1.0 if v.correct else 0.0
    return float(score)


class CorrectnessTerm(_Term):
    def __init__(self, task: Task, match: str, recorder: RolloutRecorder | None, num_generations: int, eos_id: int,
                 max_len: int, tests: str = "hidden", record_final: bool = False):
        super().__init__("correctness")
        self.task, self.match, self.tests, self.recorder = task, match, tests, recorder
        self.record_final = record_final or match == "final"  # the final_correct column (see evidence)
        self.G, self.eos_id, self.max_len = num_generations, eos_id, max_len

    def __call__(self, prompts, completions, completion_ids, **kw):
        kw["prompts"] = prompts
        state = kw.get("trainer_state")
        step = (state.global_step + 1) if state is not None else 0
        envs = kw.get("environments")
        out, rows, correct = [], [], []
        for i, (completion, ids) in enumerate(zip(completions, completion_ids, strict=True)):
            problem = _problem(kw, i)
            turns = None
            if envs is not None:  # the environment owns the reward (see the module docstring)
                v = _verdict(envs[i])
                out.append(float(envs[i].get_reward()))
                turns = json.dumps(turn_records(completion), default=str)
            else:
                v = self.task.verify(problem, _text(completion))
                out.append(correctness_value(v, self.match, self.tests))
            correct.append(v.correct)
            ended = bool(ids) and ids[-1] == self.eos_id
            rows.append(
                {
                    "step": step,
                    "prompt_id": problem.id,
                    "group_id": f"{step}:{i // self.G}",
                    "prompt": problem.prompt,
                    "completion": _text(completion),
                    "correct": v.correct,
                    "final_correct": (v.correct if v.final_correct is None else v.final_correct)
                    if self.record_final else None,
                    "well_formed": v.well_formed,
                    "n_candidates": v.n_candidates,
                    "length": len(ids) - (1 if ended else 0),  # multi-turn: the trainer subtracts observations
                    "truncated": (not ended) and len(ids) >= self.max_len,
                    "difficulty": problem.difficulty,
                    "turns": turns,
                    "verifier_error": v.reason if v.reason.startswith(VERIFIER_ERROR) else None,
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
        envs = kw.get("environments")
        if envs is not None:
            return [1.0 if _verdict(env).well_formed else 0.0 for env in envs]
        return [1.0 if self.task.verify(_problem(kw, i), _text(c)).well_formed else 0.0 for i, c in enumerate(completions)]


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
        return [-repetition_share(_text(c), self.n) for c in completions]


class EfficiencyTerm(_Term):
    def __init__(self, max_len: int, eos_id: int):
        super().__init__("efficiency")
        self.max_len, self.eos_id = max_len, eos_id

    def __call__(self, prompts, completions, completion_ids, **kw):
        return [-max(0, len(ids) - (1 if ids and ids[-1] == self.eos_id else 0)) / self.max_len for ids in completion_ids]


class UserRewardError(RuntimeError):
    """A user's reward function misbehaved: the job fails, naming it and the step."""


class UserRewardTerm(_Term):
    """A user's TRL reward function, with its output checked (see the module docstring)."""

    def __init__(self, name: str, path: str):

        super().__init__(name)
        self.path, self.fn = path, user_function(path)

    def __call__(self, prompts, completions, completion_ids, **kw):
        state = kw.get("trainer_state")
        step = (state.global_step + 1) if state is not None else 0
        columns: dict[str, list[Any]] = {}
        if "meta" in kw:  # a dataset task's rows: each column as a keyword, as TRL passes a dataset's columns
            rows = [json.loads(m).get("row") or {} for m in kw["meta"]]
            for col in (rows[0] if rows else {}):
                if col not in kw and col not in ("prompts", "completions", "completion_ids"):
                    columns[col] = [r.get(col) for r in rows]
        where = f"reward function {self.__name__} ({self.path}) at step {step}"
        try:
            out = self.fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **kw, **columns)
        except Exception as exc:  # noqa: BLE001 - a user's function: the job fails naming it
            raise UserRewardError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        if hasattr(out, "tolist"):  # a numpy array or a tensor, as TRL accepts
            out = out.tolist()
        if not isinstance(out, (list, tuple)) or len(out) != len(completions):
            got = f"{len(out)} values" if isinstance(out, (list, tuple)) else f"a {type(out).__name__}"
            raise UserRewardError(f"{where} returned {got} for {len(completions)} completions; return one float "
                                  "(or None) per completion")
        values: list[float | None] = []
        for i, v in enumerate(out):
            if v is None:
                values.append(None)
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
                raise UserRewardError(f"{where} returned {v!r} for completion {i}; return a finite float or None")
            values.append(float(v))
        return values


def build_reward_funcs(
    harness: HarnessSpec, task: Task, recorder: RolloutRecorder | None, eos_id: int, chat: bool = False
) -> tuple[list[_Term], list[float]]:
    """TRL reward functions and their weights for a harness (correctness first, always present). ``chat``: the
    policy is chat-prompted, so its rollouts also record the final-answer reading."""
    r, g = harness.reward, harness.grpo
    funcs: list[_Term] = [
        CorrectnessTerm(task, r.correctness.match, recorder, g.num_generations, eos_id, g.max_completion_length,
                        r.correctness.tests, record_final=chat)
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
    if r.efficiency.weight > 0:
        funcs.append(EfficiencyTerm(g.max_completion_length, eos_id))
        weights.append(r.efficiency.weight)
    for name, user in r.functions.items():
        if user.weight > 0:
            funcs.append(UserRewardTerm(name, user.fn))
            weights.append(user.weight)
    return funcs, weights
