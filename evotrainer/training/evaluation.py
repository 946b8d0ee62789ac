"""Held-out evaluation: greedy pass@1 and sampled pass@k on the task's held-out split.

The held-out set is fixed by ``EvalSpec`` (its own seed and difficulty, independent of the run's seed and
of the harness's data rules) so that numbers from different runs, forks and harness versions compare.
Metrics are logged as ``eval/greedy_accuracy`` (pass@1), ``eval/pass_at_<k>`` and ``eval/mean_length``.

Three disjoint held-out splits (:func:`split_problems`), because a campaign chooses three times and every
choice made on a set of problems biases the accuracy measured on it:

- **decision** (``eval.seed``, the problems every job evaluates): backtest effects, promotions;
- **selection** (``eval.seed + 2``, none of the other two): which finished branch the mainline continues
  from, and which ancestor a regression rolls back to;
- **confirmation** (``eval.seed + 1``, none of the decision split): the start → end number reported once at
  the end, on problems no choice has seen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from evotrainer.config.eval import EvalSpec
from evotrainer.core import atomic
from evotrainer.core.errors import ConfigError
from evotrainer.tasks import Problem, Task
from evotrainer.training.prompting import chat_format, render, stop_ids

Split = Literal["decision", "selection", "confirmation"]
SPLITS: tuple[Split, ...] = ("decision", "selection", "confirmation")
SPLIT_SEED_OFFSET: dict[str, int] = {"decision": 0, "confirmation": 1, "selection": 2}


def heldout_problems(task: Task, spec: EvalSpec) -> list[Problem]:
    """The decision split: ``spec.n`` held-out problems drawn with ``spec.seed`` (what every job evaluates)."""
    rng = spec.difficulty or task.default_range()
    return task.sample("heldout", spec.n, seed=spec.seed, difficulty_range=tuple(rng))


def _fresh(task: Task, spec: EvalSpec, seed: int, exclude: set[str], split: str, knob: str = "eval.n") -> list[Problem]:
    """``spec.n`` held-out problems drawn with ``seed``, none of them in ``exclude``."""
    out: list[Problem] = []
    for extra in (0, len(exclude), 4 * len(exclude) + spec.n):
        drawn = heldout_problems(task, spec.model_copy(update={"seed": seed, "n": spec.n + extra}))
        out = [p for p in drawn if p.id not in exclude][: spec.n]
        if len(out) == spec.n:
            return out
    sizes = ""
    if hasattr(task, "split_sizes"):  # a dataset: say how many rows each split gets
        have = task.split_sizes(tuple(spec.difficulty) if spec.difficulty else None)
        sizes = (f": the dataset has {have['heldout']} held-out rows (and {have['train']} train), which the three "
                 f"held-out splits share, so each gets at most {have['heldout'] // 3}; {knob}={spec.n} is too many")
    raise ConfigError(f"the held-out split of '{task.name}' has fewer than {spec.n} problems at these levels outside "
                      f"the other splits (needed for the {split} split){sizes}; lower {knob}")


def split_problems(task: Task, spec: EvalSpec, split: Split, seed: int | None = None,
                   n: int | None = None) -> list[Problem]:
    """One of the three disjoint held-out splits (see the module docstring), ``spec.n`` problems each.

    ``seed`` overrides the split's seed (``campaign confirm --seed``); the problems stay disjoint from the
    other splits at their default seeds.

    ``n`` (the confirmation only: ``confirm_n``, ``campaign confirm --n``) asks for a confirmation of another
    size, drawn with its seed outside both other splits. A wider one narrows the standard error of the start →
    end claim (two 500-problem samples of one policy differ by ~2 points) at the cost of evaluation alone.
    The draws are prefix-consistent, so a wider confirmation begins with the default one's problems. They are
    also distinct, so where the held-out space is small (countdown's level 3 has ~5300 problems) the later ones
    lean to what the generator makes rarely: a 3000-problem countdown split read 5-7 points lower than its first
    500 for the same policies (bench/log/07-campaign-vs-static-baseline.md). Compare policies on one split; do not mix its numbers with
    ``eval.n`` ones.
    """
    if split not in SPLITS:
        raise ConfigError(f"unknown held-out split '{split}'; splits: {', '.join(SPLITS)}")
    if n is not None and split != "confirmation":
        raise ConfigError(f"only the confirmation split takes its own size; the {split} split has eval.n problems")
    if n is not None and n < 1:
        raise ConfigError(f"a confirmation of {n} problems: give 1 or more")
    wide = n is not None and n != spec.n
    if split == "decision":
        if seed is not None and seed != spec.seed:
            raise ConfigError("the decision split is eval.seed's problems; set eval.seed to change it")
        return heldout_problems(task, spec)
    decision = {p.id for p in heldout_problems(task, spec)}
    default = spec.seed + SPLIT_SEED_OFFSET[split]
    seed = default if seed is None else seed
    if seed == spec.seed:
        raise ConfigError(f"seed {seed} is eval.seed, whose problems are the decision split; pick another")
    if split == "confirmation" and seed == default and not wide:
        return _fresh(task, spec, seed, decision, split)
    confirmation = {p.id for p in _fresh(task, spec, spec.seed + SPLIT_SEED_OFFSET["confirmation"], decision,
                                         "confirmation")}
    if split == "selection":
        return _fresh(task, spec, seed, decision | confirmation, split)
    selection = {p.id for p in _fresh(task, spec, spec.seed + SPLIT_SEED_OFFSET["selection"],
                                      decision | confirmation, "selection")}
    if not wide:
        return _fresh(task, spec, seed, decision | selection, split)
    return _fresh(task, spec.model_copy(update={"n": n}), seed, decision | selection, split, knob="the confirmation's n")


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, do_sample: bool, num_return_sequences: int = 1,
             temperature: float = 1.0, add_special_tokens: bool = True) -> list[str]:
    """Decoded completions of ``prompts`` (special tokens dropped), stopping at any of the policy's EOS ids
    (:func:`evotrainer.training.prompting.stop_ids`). ``add_special_tokens=False`` for texts a chat template rendered."""

    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=add_special_tokens).to(model.device)
    out = model.generate(
        **enc,
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        temperature=temperature if do_sample else None,
        top_p=1.0 if do_sample else None,
        top_k=0 if do_sample else None,
        num_return_sequences=num_return_sequences,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=stop_ids(tokenizer, model),
    )
    return tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)


def evaluate(model, tokenizer, task: Task, problems: list[Problem], spec: EvalSpec, max_new_tokens: int,
             outcomes: list[bool] | None = None) -> dict[str, float]:
    """Greedy accuracy, pass@k and mean completion length over ``problems``.

    A multi-turn task plays whole episodes in its honest environment (never with the leak tool), with
    ``max_new_tokens`` as the completion budget of an episode (see :func:`evotrainer.training.episodes.run_episodes`).
    ``outcomes``, when given, receives each problem's greedy correctness in order (backtests pair them per
    problem across arms).
    """
    if task.environment() is not None:
        return _evaluate_episodes(model, tokenizer, task, problems, spec, max_new_tokens, outcomes)

    chat = chat_format(tokenizer, task)  # a chat model: its template, and the final-answer reading is logged too
    was_training = model.training
    model.eval()
    greedy_ok, passk_ok, final_ok, lengths = 0, 0, 0, []
    try:
        for i in range(0, len(problems), spec.batch_size):
            chunk = problems[i : i + spec.batch_size]
            prompts, special = render(tokenizer, task, chunk)
            greedy = generate(model, tokenizer, prompts, max_new_tokens, do_sample=False, add_special_tokens=special)
            for p, c in zip(chunk, greedy, strict=True):
                v = task.verify(p, c)
                ok = v.correct
                greedy_ok += ok
                final_ok += v.correct if v.final_correct is None else v.final_correct
                if outcomes is not None:
                    outcomes.append(bool(ok))
                lengths.append(len(c))
            if spec.k > 1:
                sub = max(1, spec.batch_size // spec.k)
                for j in range(0, len(chunk), sub):
                    part = chunk[j : j + sub]
                    samples = generate(model, tokenizer, render(tokenizer, task, part)[0], max_new_tokens, True, spec.k,
                                       add_special_tokens=special)
                    for a, p in enumerate(part):
                        passk_ok += any(task.verify(p, c).correct for c in samples[a * spec.k : (a + 1) * spec.k])
            else:
                passk_ok = greedy_ok
    finally:
        if was_training:
            model.train()
    n = max(1, len(problems))
    out = {
        "eval/greedy_accuracy": greedy_ok / n,
        f"eval/pass_at_{spec.k}": passk_ok / n,
        "eval/mean_length": sum(lengths) / max(1, len(lengths)),
    }
    if chat:
        out["eval/final_accuracy"] = final_ok / n
    return out


def _evaluate_episodes(model, tokenizer, task: Task, problems: list[Problem], spec: EvalSpec,
                       max_completion_length: int, outcomes: list[bool] | None = None) -> dict[str, float]:
    from evotrainer.training.episodes import play, solved, transcript

    greedy = play(model, tokenizer, task, problems, max_completion_length, batch_size=spec.batch_size)
    greedy_ok = sum(solved(e.env) for e in greedy)
    if outcomes is not None:
        outcomes.extend(bool(solved(e.env)) for e in greedy)
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


def write_outcomes(run_dir: Path, step: int, outcomes: list[bool], split: str = "decision") -> Path:
    """Store one evaluation's per-problem greedy correctness (``JOB/eval/<split>_<step>.txt``, one 0/1 per
    problem in the split's order): backtests pair control and treatment problem by problem."""
    d = Path(run_dir) / "eval"
    d.mkdir(exist_ok=True)
    path = d / f"{split}_{step:06d}.txt"
    return atomic.write_text(path, "".join("1" if o else "0" for o in outcomes) + "\n")


def read_outcomes(run_dir: Path, step: int, split: str = "decision") -> list[int] | None:
    """The per-problem outcomes :func:`write_outcomes` stored, or None when that evaluation has none."""
    path = Path(run_dir) / "eval" / f"{split}_{step:06d}.txt"
    if not path.is_file():
        return None
    text = path.read_text().strip()
    return [1 if c == "1" else 0 for c in text] if text and set(text) <= {"0", "1"} else None


def eval_steps(run_dir: Path, split: str = "decision") -> list[int]:
    """The steps at which a run stored per-problem outcomes on ``split``, in order."""
    steps = []
    for f in (Path(run_dir) / "eval").glob(f"{split}_*.txt"):
        tail = f.stem.rsplit("_", 1)[-1]
        if tail.isdigit():
            steps.append(int(tail))
    return sorted(steps)
