"""Running one GRPO job: new, resumed after a crash, or forked from another job's checkpoint.

A job is one TRL ``GRPOTrainer.train()`` of a policy under a harness for a number of optimiser steps. It
lives in ``HOME/jobs/<name>/`` (``meta.json``, ``harness.yaml``, ``metrics.jsonl``, ``rollouts/``,
``trainer/checkpoint-*``) and in one MLflow run. Names are deterministic, cleanrl style:
``{task}__{harness}__s{seed}__{utc time}``.

Resume (``resume=RUN``, after a crash) and fork (``fork=RUN[@STEP]``, from another job's checkpoint, maybe under
another harness) read the parent through :mod:`evotrainer.jobs.lineage`, which says what each carries over.

A job directory is complete or absent, and has one writer (``jobs/jobdir.py``): a new job is assembled under
a hidden name and renamed into place once its ``meta.json`` is written, and the process that trains it
holds the directory's lock, so a second writer is refused (``JobBusy``) and a finished job is never resumed
or rewritten.

Changing the harness between segments is therefore: stop → fork with the new harness → train. The cost
is one trainer construction (see ``bench/segments.py``).
"""

from __future__ import annotations

import gc
import json
import shutil
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evotrainer.config.harness import HarnessSpec, dump_harness
from evotrainer.config.job import JobSpec
from evotrainer.config.policy import PolicySpec, budget_overflow
from evotrainer.core.errors import ConfigError, JobBusy, JobFailed
from evotrainer.core.home import jobs_dir
from evotrainer.core.names import check_name, to_name
from evotrainer.diagnostics.registry import Registry
from evotrainer.jobs.jobdir import JobLock, is_locked, publish, staging_dir
from evotrainer.jobs.lineage import (
    CKPT,
    acknowledged_checkpoints,
    complete_checkpoints,
    died_at,
    lineage_pass_stats,
    lineage_pool_seed,
    parse_fork,
    prepare_fork_checkpoint,
    read_meta,
    resolve_run,
    resume_record,
    write_meta,
)
from evotrainer.jobs.result import JobResult, SessionAbandoned, last_metrics, record_pause
from evotrainer.jobs.trl_config import grpo_config, peft_config


# ---------------------------------------------------------------------------------------------- the job
def run_job(
    spec: JobSpec,
    home: Path,
    resume: str | None = None,
    fork: str | None = None,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
    log: Callable[[str], None] | None = None,
    stop_at: int | None = None,
    hold: Callable[[JobResult, int], int | None] | None = None,
) -> JobResult:
    """Run (or resume, or fork) one job to completion. Validates everything before writing anything.

    ``stop_at`` pauses the job at that global step instead: it checkpoints there, is recorded ``paused``,
    and a later ``resume`` goes on towards its target exactly as an uninterrupted job would (the dataset,
    schedule and RNG state are the target's, so pausing changes nothing). Backtests train their branches
    this way, one look at a time, and stop the ones whose answer is already known.

    ``hold`` keeps the session alive across its pauses (``jobs/live.py``): at each one, once the pause is on disk
    exactly as a session that ended there would leave it and the run's lock is let go, ``hold(result, target)`` is
    called in the training thread and blocks; it returns the next ``stop_at`` (None: the target) to train on in
    the same Trainer, or raises ``SessionAbandoned`` to end the session without writing anything more. The session
    goes on only when it can take the lock back and the run on disk is still the pause it wrote (else
    ``SessionAbandoned``: someone resumed it meanwhile, and a later resume goes on from the checkpoint).
    """
    from evotrainer.tasks import get_task

    t_start = time.perf_counter()
    say = log or (lambda _m: None)
    if resume and fork:
        raise ConfigError("--resume and --fork are exclusive: resume continues a run, fork starts a new one from it")

    # ---- validate and resolve (nothing is written before this block ends) ------------------------
    if resume:
        run_dir = resolve_run(home, resume)
        meta, spec, harness, target = resume_record(run_dir)
    else:
        if spec.name is not None:
            check_name(spec.name, "run name (--name)")  # a name is a folder under HOME/jobs: never a path
        harness = spec.resolved_harness()
        Registry(harness)  # gates and diagnostics.params must name diagnostics that exist (with their parameters)
        from evotrainer.tasks.verifiers import user_function

        for user in harness.reward.functions.values():  # the user's reward functions import, before anything is written
            user_function(user.fn)
        meta = None
        target = spec.steps
    task = get_task(spec.task, spec.task_options)
    # in the thread that trains (a live session's own): a thread takes torch's last count for its parallel loops but
    # not for its matrix products. With its worker's one thread, a step of the demo's start took 0.52 s instead of
    # 0.34 s on two (bench/RESULTS.md, log of session 39).
    if spec.threads:
        import torch

        torch.set_num_threads(spec.threads)
    from evotrainer.training.data import check_range, difficulty_range

    diff = difficulty_range(task, harness)
    if spec.eval.difficulty is not None:
        check_range(task, spec.eval.difficulty, "eval difficulty")
    need = task.max_answer_chars(diff[1]) + 1
    if harness.grpo.max_completion_length < need and not spec.policy.real:
        say(f"warning: grpo.max_completion_length={harness.grpo.max_completion_length} is below the {need} tokens the "
            f"longest '{task.name}' answer at difficulty {diff[1]} needs; completions will be truncated")

    parent_dir = parent_step = fork_src = None
    if fork:
        parent_dir, parent_step, fork_src = parse_fork(home, fork)
        target = parent_step + spec.steps
        parent_model = HarnessSpec.model_validate(read_meta(parent_dir)["harness"]).model
        if parent_model != harness.model:
            raise ConfigError(f"{spec.harness_label}: model.* must match the parent run's ({parent_model.model_dump()}): its "
                              "checkpoints are full weights or LoRA adapters of one shape; fork under those values")
    if stop_at is not None:
        first = (parent_step or 0) if meta is None else int(meta.get("paused_at") or meta["start_step"])
        if meta is not None and died_at(run_dir, meta) == stop_at:
            first = stop_at - 1  # it reached this pause and died before recording it: recorded below, nothing trained
        if not first < stop_at <= target:
            raise ConfigError(f"stop_at={stop_at} must lie after the job's current step {first} and at most at its "
                              f"target step {target}")
    from evotrainer.core.tracking import Tracker
    from evotrainer.training.policy import base_policy_dir

    # The base fixes the architecture and tokenizer; a fork's or resume's weights come from its checkpoint, so it
    # reuses its parent's base instead of warm-starting a new one for another difficulty or seed.
    if meta is not None:
        base_dir = Path(meta["base_policy"])
    elif parent_dir is not None:
        base_dir = Path(read_meta(parent_dir)["base_policy"])
    else:
        base_dir = None
    # a fork or resume trains its parent's base; a new run the policy its spec names (checked before warm-starting)
    context = spec.policy.context_length() if base_dir is None else PolicySpec(path=str(base_dir)).context_length()
    if (why := budget_overflow(harness.grpo.max_completion_length, context)) is not None:
        raise ConfigError(f"{spec.harness_label}: {why}")
    from evotrainer.training.policy import precision, resolve_device

    device = resolve_device(spec.device)
    say(f"device {device}, precision {precision(device)}" + (f", LoRA r={harness.model.lora_r}" if harness.model.lora_r
                                                             else "") +
        (", gradient checkpointing" if harness.model.gradient_checkpointing else ""))
    if not spec.policy.real:  # the character-level policies know their alphabet only: refuse other text before training
        from evotrainer.tasks import check_alphabet
        from evotrainer.training.data import build_pool
        from evotrainer.training.policy import CHARS

        rows = getattr(task, "problems", None) or build_pool(task, harness, spec.seed)
        check_alphabet(task, rows, frozenset(CHARS), spec.policy.size)
    if base_dir is None:
        policy_seed = spec.seed if spec.policy.seed is None else spec.policy.seed
        warm = check_range(task, spec.policy.warm_start_difficulty or diff, "policy.warm_start_difficulty")
        t_warm = time.perf_counter()
        base_dir = base_policy_dir(home, task, spec.policy, policy_seed, warm, log=say, device=device)
        warm_s = time.perf_counter() - t_warm  # ~0 when the base was cached; minutes of SFT when it was built
    else:
        warm_s = 0.0
    tracker = Tracker(home)

    # ---- create or reopen the run (see jobs/jobdir.py: complete or absent, one writer) ----------------
    if meta is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        hname = to_name(spec.harness_stem, "harness")
        name = spec.name or f"{to_name(spec.task.replace(':', '.'), 'task')}__{hname}__s{spec.seed}__{stamp}"
        run_dir = jobs_dir(home) / name
        if run_dir.exists() and not (run_dir / "meta.json").exists() and not is_locked(run_dir):
            shutil.rmtree(run_dir)  # debris of a creation (by an older release) killed before its meta.json
        if run_dir.exists():
            raise ConfigError(f"a run named '{name}' already exists under {jobs_dir(home)}; pick another --name")
        final_dir, (run_dir, lock) = run_dir, staging_dir(jobs_dir(home), name)
        try:
            tags = {
                "evotrainer.task": spec.task,
                "evotrainer.harness_version": harness.version,
                "evotrainer.harness_name": harness.name,
                "evotrainer.seed": str(spec.seed),
                "evotrainer.role": spec.tags.get("evotrainer.role", "job"),
                **spec.tags,
            }
            parent_meta = None
            if parent_dir is not None:
                parent_meta = read_meta(parent_dir)
                tags.update(
                    {
                        "evotrainer.parent_run_id": parent_meta["run_id"],
                        "evotrainer.parent_run": parent_meta["name"],
                        "evotrainer.parent_step": str(parent_step),
                        "evotrainer.parent_harness_version": parent_meta["harness_version"],
                    }
                )
            params = {f"harness.{k}": v for k, v in harness.knobs().items()}
            params.update({"task": spec.task, "seed": spec.seed, "policy.size": spec.policy.size, "steps": spec.steps,
                           "device": device})
            if spec.policy.real:
                params["policy.source"] = spec.policy.pretrained or spec.policy.path
            run_id = tracker.create_run(name, tags, params)
            from evotrainer.training.data import STREAM_VERSION as data_stream

            meta = {
                "name": name,
                "run_id": run_id,
                "spec": spec.model_dump(mode="json"),
                "harness": harness.model_dump(mode="json"),
                "harness_version": harness.version,
                "target_step": target,
                "start_step": parent_step or 0,
                "parent_run": parent_meta["name"] if parent_meta else None,
                "parent_run_id": parent_meta["run_id"] if parent_meta else None,
                "parent_step": parent_step,
                "parent_harness_version": parent_meta["harness_version"] if parent_meta else None,
                # the data pool's seed: a fork keeps its lineage's pool (so the data rules meet the prompts its
                # ancestors' statistics describe) and samples from it under its own seed
                "pool_seed": lineage_pool_seed(home, parent_meta) if parent_meta else spec.seed,
                "data_stream": data_stream,  # which sequence the seed's prompts come from (data.STREAM_VERSION)
                "base_policy": str(base_dir),
                "status": "running",
                "created": datetime.now(timezone.utc).isoformat(),
            }
            (run_dir / "harness.yaml").write_text(dump_harness(harness))
            if fork_src is not None:
                (run_dir / "trainer").mkdir(parents=True, exist_ok=True)
                parent_harness = HarnessSpec.model_validate(parent_meta["harness"])
                prepare_fork_checkpoint(fork_src, run_dir / "trainer" / f"{CKPT}{parent_step}", harness, parent_harness,
                                         keep_rng=spec.seed == parent_meta["spec"]["seed"])
            write_meta(run_dir, meta)  # last: a run with meta.json is complete enough to resume
            publish(run_dir, final_dir)  # the whole directory appears under its name at once
        except BaseException as err:
            lock.release()
            shutil.rmtree(run_dir, ignore_errors=True)
            if isinstance(err, FileExistsError):
                raise ConfigError(f"a run named '{name}' was created under {jobs_dir(home)} by another process "
                                  "meanwhile; pick another --name") from None
            raise
        run_dir = final_dir
        tracker.log_artifact(run_id, run_dir / "harness.yaml")
        mlflow_had = -1  # a run just created: MLflow holds none of its steps
    else:
        name, run_id = meta["name"], meta["run_id"]
        lock = JobLock.take(run_dir, name)  # a second writer of this run is refused here
        try:
            meta = read_meta(run_dir)  # as it is now, under the lock
            if meta.get("status") == "finished":
                raise JobBusy(f"run {name} is finished (step {meta.get('steps_done', meta['target_step'])}): there is "
                              f"nothing to resume, and a finished run is never rewritten; fork it to train on "
                              f"(--fork {name})")
            tracker.reopen(run_id)
            # the last step MLflow holds, as a session that paused cleanly left it; dropped from the record while
            # this session runs, so that one killed after logging more steps is never trusted to have stopped there
            mlflow_had = meta.pop("mlflow_synced_step", None)
            meta["status"] = "running"
            write_meta(run_dir, meta)
        except BaseException:
            lock.release()
            raise

    if stop_at is not None and resume and died_at(run_dir, meta) == stop_at:
        try:
            return record_pause(run_dir, meta, tracker, stop_at, t_start)
        finally:
            lock.release()

    def _handover(result: JobResult) -> int | None:
        """A live pause (``hold``): let go of the run while the session waits; take it back, unchanged, to go on."""
        nonlocal lock
        written = json.loads(json.dumps(meta))  # the pause as it is on disk
        lock.release()
        nxt = hold(result, target)
        try:
            lock = JobLock.take(run_dir, name)
        except JobBusy:
            raise SessionAbandoned(f"run {name} is being written by another process") from None
        if read_meta(run_dir) != written:
            raise SessionAbandoned(f"run {name} changed on disk while its session waited; it resumes from its checkpoint")
        if nxt is not None and not (result.steps_done < nxt <= target):
            raise SessionAbandoned(f"stop_at={nxt} does not lie after step {result.steps_done}")
        return nxt

    ckpts = acknowledged_checkpoints(run_dir, meta)
    resume_ckpt = ckpts[max(ckpts)] if ckpts else None
    start_step = max(ckpts) if ckpts else meta["start_step"]
    from evotrainer.evidence.model import truncate_after

    # from the job's own start, its at-start evaluation runs again as in a fresh start (it draws from the RNG the
    # steps after it draw from): the row an earlier session wrote there goes, so the run is the same step for step
    truncate_after(run_dir, start_step - 1 if start_step == int(meta["start_step"]) else start_step)
    for d in (run_dir / "trainer").glob(f"{CKPT}*") if (run_dir / "trainer").is_dir() else []:
        if d.is_dir() and d not in ckpts.values():
            shutil.rmtree(d, ignore_errors=True)  # torn checkpoint from a killed process

    try:
        result = _train(spec, harness, task, home, run_dir, meta, tracker, base_dir, resume_ckpt, start_step, target,
                        diff, progress, say, t_start, stop_at, warm_s,
                        mlflow_had=mlflow_had if mlflow_had in (-1, start_step) else None,
                        handover=_handover if hold is not None else None)
    except SessionAbandoned:
        raise  # a live session let go at a pause that is on disk, and the run may have another writer now
    except BaseException as err:  # record the failure, keep everything, re-raise as a clear error
        # Ctrl-C, or the process being told to exit (a Ray worker whose owner died gets SystemExit): the job did
        # not fail, it was stopped, and a resume goes on from its last checkpoint
        stopped = isinstance(err, (KeyboardInterrupt, SystemExit))
        meta["status"] = "interrupted" if stopped else "failed"
        meta["error"] = f"{type(err).__name__}: {err}"
        write_meta(run_dir, meta)
        (run_dir / "error.txt").write_text(traceback.format_exc())
        try:
            tracker.set_tags(run_id, {"evotrainer.error": meta["error"][:4000]})
            tracker.end_run(run_id, "KILLED" if stopped else "FAILED")
        except Exception as track_err:  # noqa: BLE001 - the tracking server may be what failed
            say(f"could not mark the MLflow run failed: {track_err}")
        if stopped or isinstance(err, ConfigError):
            raise
        raise JobFailed(f"run {name} failed at step ≥{start_step}: {meta['error']} (traceback in {run_dir / 'error.txt'}; "
                        f"resume with --resume {name})") from err
    finally:
        lock.release()  # the next writer (a resume) may take the run now
    return result


def _train(spec, harness, task, home, run_dir, meta, tracker, base_dir, resume_ckpt, start_step, target, diff,
           progress, say, t_start, stop_at=None, warm_s=0.0, mlflow_had: int | None = None,
           handover: Callable[[JobResult], int | None] | None = None) -> JobResult:
    """Train one session. ``mlflow_had``: the last step MLflow is known to hold for this run, with nothing after it
    (-1 for a new run, the pause step after a clean pause); None when unknown (a session was killed), and MLflow is
    then asked, key by key, what it has (~0.1 s a session: 35 metric histories). ``handover``: see ``run_job``'s
    ``hold``; each pause then closes a session on disk as one that ended there would, and the next opens in place."""
    import warnings

    import torch

    # TRL 1.16 calls transformers APIs deprecated for v6 on every step; the warnings say nothing to our users.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers(\.|$)")
    from evotrainer.evidence.model import RolloutRecorder
    from evotrainer.jobs.trainer import EvidenceCallback, EvoGRPOTrainer, rng_state, set_rng_state
    from evotrainer.training.data import (
        build_pool,
        needs_pass_stats,
        selection_weights,
        stream_problems,
        to_dataset,
    )
    from evotrainer.training.evaluation import evaluate, heldout_problems, write_outcomes
    from evotrainer.training.policy import load_policy
    from evotrainer.training.rewards import build_reward_funcs

    run_id = meta["run_id"]
    # where the set-up's seconds go, part by part (meta timings' ``setup_parts``): a session that stalls before its
    # first step says in which part, without a profiler in the worker
    mark = [time.perf_counter()]
    parts: dict[str, float] = {"open": mark[0] - t_start - warm_s}

    def _part(key: str) -> None:
        now = time.perf_counter()
        parts[key] = parts.get(key, 0.0) + now - mark[0]
        mark[0] = now

    model, tokenizer = load_policy(base_dir)
    _part("policy")
    # A multi-turn task trains through TRL's environment support: conversational prompts, a chat template with
    # tool calls, and the environment (with the leak tool only under the trap knob).
    env_factory = task.environment(leak_tool=harness.env.leak_tool)
    env_args: dict[str, Any] = {}
    rounds = None
    if env_factory is not None:
        from evotrainer.training.episodes import ensure_chat_template, max_rounds

        warnings.filterwarnings("ignore", message="You are using 'environment_factory'", category=UserWarning)
        ensure_chat_template(tokenizer)
        env_args, rounds = {"environment_factory": env_factory}, max_rounds(task)
    from evotrainer.training.prompting import chat_format, dataset_prompts

    chat = env_factory is None and chat_format(tokenizer, task)  # a chat model: conversational rows (TRL templates)
    recorder = RolloutRecorder(run_dir, run_id)
    funcs, weights = build_reward_funcs(harness, task, recorder, tokenizer.eos_token_id, chat=chat)
    _part("rewards")

    pool = build_pool(task, harness, meta.get("pool_seed", spec.seed))  # a run from before pool_seed keeps its own
    stats = lineage_pass_stats(home, meta) if needs_pass_stats(harness) else None
    w, data_report = selection_weights(pool, harness, stats)
    _part("pool")
    # A fork continues its parent's step numbering, and the Trainer skips global_step batches when it resumes from
    # a checkpoint. Padding the dataset with the batches the parent consumed makes that skip land exactly on the
    # next unused batch of this job, for a fresh fork, a resume after kill -9, and a paused backtest branch alike.
    pad = meta["start_step"] * harness.grpo.prompts_per_step // harness.grpo.num_iterations
    # The data order is the seed's stream from the fork point on (data.stream_problems), never the (random) MLflow
    # run id: the same spec and seed give the same run, a fork under its parent's harness and seed continues the
    # parent's prompts as one longer run would, and paired backtest arms (same parent, same seed) see the same
    # prompts in the same order (common random numbers), so their difference measures the change, not the data.
    n_needed = (target - meta["start_step"]) * harness.grpo.prompts_per_step
    problems = stream_problems(pool, w, spec.seed, pad, n_needed)  # in a random order: TRL does not reshuffle
    rows = problems[:1] * pad + problems
    dataset = to_dataset(rows, conversational=env_factory is not None)
    if chat:  # the task's chat messages as the prompt; the raw prompt stays for the verifier and the evidence
        dataset = dataset.rename_column("prompt", "problem_prompt").add_column(
            "prompt", dataset_prompts(tokenizer, task, rows))
    (run_dir / "data_report.json").write_text(json.dumps(data_report, indent=2))

    eval_problems = heldout_problems(task, spec.eval) if spec.eval.every else []
    _part("data")

    def _eval(step: int):
        outcomes: list[bool] = []
        metrics = evaluate(trainer.model, tokenizer, task, eval_problems, spec.eval, harness.grpo.max_completion_length,
                           outcomes)
        write_outcomes(run_dir, step, outcomes)  # per problem: backtests pair arms problem by problem
        return metrics

    from evotrainer.evidence.model import read_metrics

    if mlflow_had is None:
        synced_upto = [tracker.max_step(run_id, "reward")]  # rollout files after it go up at the next checkpoint
        # steps (or a step-0 evaluation) that a resume keeps but a kill kept from MLflow
        tracker.backfill(run_id, read_metrics(run_dir), start_step)
        skip_upto = tracker.max_step(run_id, "loss")
    else:  # a new run, or one that paused cleanly: every step up to mlflow_had is in MLflow, and nothing after it
        synced_upto, skip_upto = [mlflow_had], mlflow_had
    _part("tracking")

    def _log(step, metrics):
        tracker.log_metrics(run_id, step, metrics, buffered=True)

    def _on_ckpt(step):
        tracker.flush(run_id)
        for f in sorted((run_dir / "rollouts").glob("step_*.parquet")):
            s = int(f.name.split("_")[1].split(".")[0])
            if synced_upto[0] < s <= step:
                tracker.log_artifact(run_id, f, "rollouts")
        synced_upto[0] = max(synced_upto[0], step)
        meta["last_checkpoint_step"] = step
        write_meta(run_dir, meta)

    def _progress(step, last):
        if progress is not None:
            progress(step, target, last)

    if harness.model.lora_r:
        have = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        if missing := [m for m in harness.model.lora_target_modules if m not in have]:
            raise ConfigError(f"{spec.harness_label}: model.lora_target_modules names {', '.join(missing)}, which the policy "
                              f"({base_dir}) does not have; Linear layers it has: "
                              f"{', '.join(sorted(n for n in have if n.endswith('proj'))) or 'none named *_proj'}")
    args = grpo_config(harness, run_dir / "trainer", target, spec, weights, rounds)
    trainer = EvoGRPOTrainer(
        model=model, reward_funcs=funcs, args=args, train_dataset=dataset, processing_class=tokenizer, recorder=recorder,
        peft_config=peft_config(harness), **env_args,
    )
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    # a live session's pause (``handover``): the session ends on disk as one stopped at the pause would, the run is
    # handed back, and the next one starts here with the random state its checkpoint saved (other jobs trained in
    # this process meanwhile), so it trains what a resume from that checkpoint would (tests/test_live.py)
    session = {"t": t_start, "setup_s": 0.0, "eval0": 0.0, "start": start_step, "parts": {}}

    def _pause(step: int) -> int | None:
        gc.unfreeze()
        rng = rng_state()
        result = _close_session(step, paused=True)
        nxt = handover(result)
        tracker.reopen(run_id)
        meta.pop("mlflow_synced_step", None)  # as a resumed session drops it: it is about to log more
        meta["status"] = "running"
        write_meta(run_dir, meta)
        set_rng_state(rng)
        session.update(t=time.perf_counter(), setup_s=0.0, eval0=cb.eval_seconds, start=step, parts={})
        gc.freeze()
        return nxt

    def _close_session(step: int, paused: bool) -> JobResult:
        """Record the session that ends at ``step`` (paused there, or finished) and what it returns."""
        first = session["start"] == start_step  # else this session went on from a live pause
        ckpts = complete_checkpoints(run_dir)
        final = ckpts.get(target) or (ckpts[max(ckpts)] if ckpts else None)
        for f in ("metrics.jsonl", "data_report.json"):
            if (run_dir / f).exists() and not paused:
                tracker.log_artifact(run_id, run_dir / f)
        meta["status"] = "paused" if paused else "finished"
        meta["steps_done"] = step
        if paused:
            meta["paused_at"] = step
            # the pause's checkpoint flushed every step's metrics and rollout files to MLflow (EvidenceCallback.on_save)
            meta["mlflow_synced_step"] = step
        else:
            meta.pop("paused_at", None)
        meta.pop("error", None)
        now = time.perf_counter()
        train_s = now - t_train if first else now - session["t"]
        eval_s = cb.eval_seconds - session["eval0"]
        # where this session's seconds went (one entry per start, resume or live look): a campaign's overhead is
        # read from these
        meta.setdefault("timings", []).append({
            "start_step": session["start"],
            "steps_done": step, "warm_start_s": round(warm_s, 2) if first else 0.0,
            "setup_s": round(session["setup_s"], 2), "train_s": round(train_s, 2),
            "eval_s": round(eval_s, 2), "wall_s": round(now - session["t"], 2),
            "setup_parts": {k: round(v, 2) for k, v in session["parts"].items()}, "threads": torch.get_num_threads(),
            **({} if first else {"live": True})})
        write_meta(run_dir, meta)
        tracker.end_run(run_id, "FINISHED")  # a resume (or the live session's next look) reopens it
        from evotrainer.evidence.model import read_metrics

        mdf = read_metrics(run_dir)
        return JobResult(
            run_id=run_id,
            name=meta["name"],
            run_dir=str(run_dir),
            steps_done=step,
            checkpoint=str(final) if final else None,
            evidence={"metrics": str(run_dir / "metrics.jsonl"), "rollouts": str(run_dir / "rollouts"),
                      "mlflow": tracker.uri},
            metrics=last_metrics(mdf),
            status=meta["status"],
            seconds=round(now - session["t"], 2),
            train_seconds=round(train_s, 2),
            eval_seconds=round(eval_s, 2),
            setup_seconds=round(session["setup_s"], 2),
            warm_start_seconds=round(warm_s, 2) if first else 0.0,
        )

    cb = EvidenceCallback(
        run_dir, recorder, _log, _on_ckpt, _eval if spec.eval.every else None, spec.eval.every, spec.eval.at_start, target,
        skip_upto=skip_upto, progress=_progress, stop_at=stop_at,
        first_step=meta["start_step"], pause=_pause if handover is not None else None, save_every=spec.save_every,
    )
    trainer.add_callback(cb)
    _part("trainer")
    setup_s = sum(parts.values())
    session.update(setup_s=setup_s, parts=parts)
    t_train = time.perf_counter()
    # Everything alive now (the libraries, the policy, the data) lives for the whole session: freezing it keeps
    # the garbage collector from scanning it, both in the full collection accelerate's free_memory() runs at the
    # start of every train() (0.45 s a session on this machine, ~3 % of a campaign's wall) and in the automatic
    # ones during the steps. Unfrozen after, so whatever the session leaves behind is collected as usual.
    gc.freeze()
    try:
        trainer.train(resume_from_checkpoint=str(resume_ckpt) if resume_ckpt is not None else None)
    finally:
        gc.unfreeze()
        recorder.close()  # the last steps' rollouts are on disk before the run is marked finished or failed
    return _close_session(trainer.state.global_step, paused=trainer.state.global_step < target)

