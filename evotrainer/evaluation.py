"""Held-out evaluation: greedy pass@1 and sampled pass@k on the task's held-out split.

The held-out set is fixed by ``EvalSpec`` (its own seed and difficulty, independent of the run's seed and
of the harness's data rules) so that numbers from different runs, forks and harness versions compare.
Metrics are logged as ``eval/greedy_accuracy`` (pass@1), ``eval/pass_at_<k>`` and ``eval/mean_length``.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from evotrainer.tasks import Problem, Task


class EvalSpec(BaseModel):
    """How and how often a job evaluates on held-out problems."""

    model_config = ConfigDict(extra="forbid")

    every: int = Field(50, ge=0, le=1_000_000, description="Evaluate every N steps (and at the first and last step); 0 = never.")
    at_start: bool = Field(True, description="Also evaluate before the first step (a fork's start equals its parent's end).")
    n: int = Field(200, ge=1, le=100_000, description="Held-out problems evaluated.")
    k: int = Field(8, ge=1, le=256, description="Samples per problem for pass@k (temperature 1.0).")
    difficulty: tuple[int, int] | None = Field(None, description="Held-out difficulty range; null = the task's default level.")
    seed: int = Field(1234, ge=0, description="Seed that fixes the held-out problems (shared across runs on purpose).")
    batch_size: int = Field(256, ge=1, le=65_536, description="Prompts per generation batch.")


def heldout_problems(task: Task, spec: EvalSpec) -> list[Problem]:
    rng = spec.difficulty or (task.default_difficulty, task.default_difficulty)
    return task.sample("heldout", spec.n, seed=spec.seed, difficulty_range=tuple(rng))


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, do_sample: bool, num_return_sequences: int = 1,
             temperature: float = 1.0) -> list[str]:
    enc = tokenizer(prompts, return_tensors="pt", padding=True).to(model.device)
    out = model.generate(
        **enc,
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        temperature=temperature if do_sample else None,
        top_p=1.0 if do_sample else None,
        top_k=0 if do_sample else None,
        num_return_sequences=num_return_sequences,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)


def evaluate(model, tokenizer, task: Task, problems: list[Problem], spec: EvalSpec, max_new_tokens: int) -> dict[str, float]:
    """Greedy accuracy, pass@k and mean completion length over ``problems``.

    A multi-turn task plays whole episodes in its honest environment (never with the leak tool), with
    ``max_new_tokens`` as the completion budget of an episode (see :func:`evotrainer.episodes.run_episodes`).
    """
    if task.environment() is not None:
        return _evaluate_episodes(model, tokenizer, task, problems, spec, max_new_tokens)
    was_training = model.training
    model.eval()
    greedy_ok, passk_ok, lengths = 0, 0, []
    try:
        for i in range(0, len(problems), spec.batch_size):
            chunk = problems[i : i + spec.batch_size]
            prompts = [p.prompt for p in chunk]
            greedy = generate(model, tokenizer, prompts, max_new_tokens, do_sample=False)
            for p, c in zip(chunk, greedy, strict=True):
                greedy_ok += task.verify(p, c).correct
                lengths.append(len(c))
            if spec.k > 1:
                sub = max(1, spec.batch_size // spec.k)
                for j in range(0, len(chunk), sub):
                    part = chunk[j : j + sub]
                    samples = generate(model, tokenizer, [p.prompt for p in part], max_new_tokens, True, spec.k)
                    for a, p in enumerate(part):
                        passk_ok += any(task.verify(p, c).correct for c in samples[a * spec.k : (a + 1) * spec.k])
            else:
                passk_ok = greedy_ok
    finally:
        if was_training:
            model.train()
    n = max(1, len(problems))
    return {
        "eval/greedy_accuracy": greedy_ok / n,
        f"eval/pass_at_{spec.k}": passk_ok / n,
        "eval/mean_length": sum(lengths) / max(1, len(lengths)),
    }


def _evaluate_episodes(model, tokenizer, task: Task, problems: list[Problem], spec: EvalSpec,
                       max_completion_length: int) -> dict[str, float]:
    from evotrainer.episodes import play, solved, transcript

    greedy = play(model, tokenizer, task, problems, max_completion_length, batch_size=spec.batch_size)
    greedy_ok = sum(solved(e.env) for e in greedy)
    passk_ok = greedy_ok
    if spec.k > 1:
        sampled = play(model, tokenizer, task, problems, max_completion_length, do_sample=True, k=spec.k,
                       batch_size=spec.batch_size)
        passk_ok = sum(any(solved(e.env) for e in sampled[a * spec.k : (a + 1) * spec.k]) for a in range(len(problems)))
    n = max(1, len(problems))
    return {
        "eval/greedy_accuracy": greedy_ok / n,
        f"eval/pass_at_{spec.k}": passk_ok / n,
        "eval/mean_length": sum(len(transcript(e.messages)) for e in greedy) / max(1, len(greedy)),
    }
