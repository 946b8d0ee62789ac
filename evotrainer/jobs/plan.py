"""Planning a job: everything checked and resolved before anything is written.

Why apart from the runner: a job's refusals (a bad name, an unknown diagnostic, a fork under another model shape, a
pause outside the job, a completion budget that fills the context, a character the policy cannot read, a warm start
that misses its target) must all happen before its directory exists, and reading them in one place, in the order
they are checked, is how a reader knows that nothing is half-made. :func:`plan_job` returns the typed
:class:`JobPlan` the runner creates or reopens the run from; it writes nothing but the warm-started base policy's
cache entry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evotrainer.config.harness import HarnessSpec
from evotrainer.config.job import JobSpec
from evotrainer.config.policy import PolicySpec, budget_overflow
from evotrainer.core.errors import ConfigError
from evotrainer.core.home import resolve_run
from evotrainer.core.names import check_name
from evotrainer.core.runmeta import RunMeta
from evotrainer.diagnostics.registry import Registry
from evotrainer.jobs.lineage import died_at, parse_fork, read_meta, resume_record
from evotrainer.tasks import Task, check_alphabet, get_task
from evotrainer.tasks.verifiers import user_function
from evotrainer.training.data import build_pool, check_range, difficulty_range
from evotrainer.training.policy import CHARS, base_policy_dir, precision, resolve_device


@dataclass
class JobPlan:
    """A job, resolved: what it trains, from where, to which step, on which device and base policy."""

    spec: JobSpec
    harness: HarnessSpec
    task: Task
    target: int  # the global step the job trains to
    levels: tuple[int, int]  # the training difficulty range
    device: str
    base_dir: Path  # the base policy (architecture, tokenizer; a new run's weights)
    warm_s: float = 0.0  # seconds spent building the base (0 when it was cached or inherited)
    meta: RunMeta | None = None  # a resumed run's record (None: a new run)
    run_dir: Path | None = None  # a resumed run's directory
    parent_dir: Path | None = None  # a fork's parent run
    parent_step: int | None = None  # the parent's step the fork starts at
    fork_src: Path | None = None  # the parent's checkpoint at that step


def plan_job(spec: JobSpec, home: Path, resume: str | None, fork: str | None, stop_at: int | None,
             say: Callable[[str], None]) -> JobPlan:
    """The job ``spec`` (or the run ``resume`` names, or a fork of ``fork``) resolved and checked; ConfigError (or
    RunNotFound, WarmStartFailed) naming what is wrong, with nothing written."""
    if resume and fork:
        raise ConfigError("--resume and --fork are exclusive: resume continues a run, fork starts a new one from it")
    meta = run_dir = None
    if resume:
        run_dir = resolve_run(home, resume)
        meta, spec, harness, target = resume_record(run_dir)
    else:
        harness, target = _new(spec), spec.steps
    task = get_task(spec.task, spec.task_options)
    _threads(spec)
    levels = _levels(task, harness, spec, say)
    plan = JobPlan(spec=spec, harness=harness, task=task, target=target, levels=levels, device="cpu",
                   base_dir=Path(), meta=meta, run_dir=run_dir)
    if fork:
        _fork(plan, home, fork)
    _check_stop_at(plan, stop_at)
    _resolve_policy(plan, home, say)
    return plan


def _new(spec: JobSpec) -> HarnessSpec:
    """A new job's harness, with what it names checked: its run name, diagnostics and reward functions."""
    if spec.name is not None:
        check_name(spec.name, "run name (--name)")  # a name is a folder under HOME/jobs: never a path
    harness = spec.resolved_harness()
    Registry(harness)  # gates and diagnostics.params must name diagnostics that exist (with their parameters)
    for user in harness.reward.functions.values():  # the user's reward functions import, before anything is written
        user_function(user.fn)
    return harness


def _threads(spec: JobSpec) -> None:
    """The job's torch threads, set in the thread that trains (a live session's own): a thread takes torch's last
    count for its parallel loops but not for its matrix products (with its worker's one thread, a step of the demo's
    start took 0.52 s instead of 0.34 s on two)."""
    if spec.threads:
        import torch

        torch.set_num_threads(spec.threads)


def _levels(task: Task, harness: HarnessSpec, spec: JobSpec, say: Callable[[str], None]) -> tuple[int, int]:
    """The training levels, checked (and the evaluation's); a completion budget below the longest answer is said."""
    levels = difficulty_range(task, harness)
    if spec.eval.difficulty is not None:
        check_range(task, spec.eval.difficulty, "eval difficulty")
    need = task.max_answer_chars(levels[1]) + 1
    if harness.grpo.max_completion_length < need and not spec.policy.real:
        say(f"warning: grpo.max_completion_length={harness.grpo.max_completion_length} is below the {need} tokens the "
            f"longest '{task.name}' answer at difficulty {levels[1]} needs; completions will be truncated")
    return levels


def _fork(plan: JobPlan, home: Path, fork: str) -> None:
    """The fork's parent, its step and checkpoint; the model section must be the parent's (one checkpoint shape)."""
    plan.parent_dir, plan.parent_step, plan.fork_src = parse_fork(home, fork)
    plan.target = plan.parent_step + plan.spec.steps
    parent_model = HarnessSpec.model_validate(read_meta(plan.parent_dir).harness).model
    if parent_model != plan.harness.model:
        raise ConfigError(f"{plan.spec.harness_label}: model.* must match the parent run's ({parent_model.model_dump()}): "
                          "its checkpoints are full weights or LoRA adapters of one shape; fork under those values")


def _check_stop_at(plan: JobPlan, stop_at: int | None) -> None:
    """A pause must lie after the job's current step and at most at its target."""
    if stop_at is None:
        return
    meta = plan.meta
    first = (plan.parent_step or 0) if meta is None else (meta.paused_at or meta.start_step)
    if meta is not None and died_at(plan.run_dir, meta) == stop_at:
        first = stop_at - 1  # it reached this pause and died before recording it: recorded then, nothing trained
    if not first < stop_at <= plan.target:
        raise ConfigError(f"stop_at={stop_at} must lie after the job's current step {first} and at most at its "
                          f"target step {plan.target}")


def _resolve_policy(plan: JobPlan, home: Path, say: Callable[[str], None]) -> None:
    """The device and the base policy: a resume's or fork's recorded base (its weights come from its checkpoint, so
    it never warm-starts another), else the spec's policy, warm-started (or found cached) after the checks it
    must pass first."""

    spec, harness, task = plan.spec, plan.harness, plan.task
    recorded = plan.meta if plan.meta is not None else read_meta(plan.parent_dir) if plan.parent_dir else None
    base_dir = Path(str(recorded.base_policy)) if recorded is not None else None
    context = spec.policy.context_length() if base_dir is None else PolicySpec(path=str(base_dir)).context_length()
    if (why := budget_overflow(harness.grpo.max_completion_length, context)) is not None:
        raise ConfigError(f"{spec.harness_label}: {why}")
    plan.device = resolve_device(spec.device)
    say(f"device {plan.device}, precision {precision(plan.device)}" +
        (f", LoRA r={harness.model.lora_r}" if harness.model.lora_r else "") +
        (", gradient checkpointing" if harness.model.gradient_checkpointing else ""))
    if not spec.policy.real:  # the character-level policies know their alphabet only: refuse other text before training
        rows = getattr(task, "problems", None) or build_pool(task, harness, spec.seed)
        check_alphabet(task, rows, frozenset(CHARS), spec.policy.size)
    if base_dir is None:
        policy_seed = spec.seed if spec.policy.seed is None else spec.policy.seed
        warm = check_range(task, spec.policy.warm_start_difficulty or plan.levels, "policy.warm_start_difficulty")
        t_warm = time.perf_counter()
        base_dir = base_policy_dir(home, task, spec.policy, policy_seed, warm, log=say, device=plan.device)
        plan.warm_s = time.perf_counter() - t_warm  # ~0 when the base was cached; minutes of SFT when it was built
    plan.base_dir = base_dir
