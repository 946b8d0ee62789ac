"""One training session of a job: from its checkpoint (or its start) to its target, or to a pause.

A session builds what TRL's ``GRPOTrainer`` needs (the policy, the reward functions, the data stream from the fork
point on, the evaluation), keeps MLflow in step with the run's files, trains, and closes: the run's record says how
far it got and where its seconds went. Why a class: the Trainer's callbacks (a metric row, a checkpoint, an
evaluation, a live pause) all read and write the same run record and timers, and a class names them instead of a
216-line function with its helpers nested inside.

The data order is the seed's stream from the fork point on (``training.data.stream_problems``), never the (random)
MLflow run id: the same spec and seed give the same run, a fork under its parent's harness and seed continues the
parent's prompts as one longer run would, and paired backtest arms see the same prompts in the same order.
"""

from __future__ import annotations

import gc
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evotrainer.core.errors import ConfigError
from evotrainer.core.runmeta import JobTiming
from evotrainer.evidence.model import RolloutRecorder, read_metrics
from evotrainer.jobs.lineage import complete_checkpoints, lineage_pass_stats, write_meta
from evotrainer.jobs.opening import OpenRun
from evotrainer.jobs.plan import JobPlan
from evotrainer.jobs.result import JobResult, last_metrics
from evotrainer.jobs.trl_config import grpo_config, peft_config
from evotrainer.training.data import (
    build_pool,
    needs_pass_stats,
    selection_weights,
    stream_problems,
    to_dataset,
)
from evotrainer.training.evaluation import evaluate, heldout_problems, write_outcomes
from evotrainer.training.policy import load_policy
from evotrainer.training.prompting import chat_format, dataset_prompts


class Session:
    """Train ``run`` under ``plan`` from ``start_step`` (``resume_ckpt``, or the run's start) towards its target.

    ``mlflow_had``: the last step MLflow is known to hold for this run, with nothing after it (-1 for a new run, the
    pause step after a clean pause); None when unknown (a session was killed), and MLflow is then asked, key by key,
    what it has (~0.1 s a session: 35 metric histories). ``handover``: see ``run_job``'s ``hold``; each pause then
    closes a session on disk as one that ended there would, and the next opens in place."""

    def __init__(self, plan: JobPlan, run: OpenRun, home: Path, tracker: Any, resume_ckpt: Path | None,
                 start_step: int, t_start: float, say: Callable[[str], None],
                 progress: Callable[[int, int, dict[str, Any]], None] | None = None, stop_at: int | None = None,
                 mlflow_had: int | None = None, handover: Callable[[JobResult], int | None] | None = None):
        self.plan, self.run, self.home, self.tracker = plan, run, home, tracker
        self.meta, self.run_dir, self.run_id = run.meta, run.run_dir, run.run_id
        self.resume_ckpt, self.start_step, self.t_start, self.say = resume_ckpt, start_step, t_start, say
        self.progress, self.stop_at, self.mlflow_had, self.handover = progress, stop_at, mlflow_had, handover
        # where the set-up's seconds go, part by part (meta timings' ``setup_parts``): a session that stalls before
        # its first step says in which part, without a profiler in the worker
        self._mark = time.perf_counter()
        self._parts: dict[str, float] = {"open": self._mark - t_start - plan.warm_s}
        # a live session's pause (``handover``) ends the session on disk as one stopped at the pause would, and the
        # next one starts there with the random state its checkpoint saved (other jobs trained in this process
        # meanwhile), so it trains what a resume from that checkpoint would (tests/test_live.py)
        self._session = {"t": t_start, "setup_s": 0.0, "eval0": 0.0, "start": start_step, "parts": {}}
        self._t_train = 0.0

    # ----------------------------------------------------------------------------------------------- set-up
    def _part(self, key: str) -> None:
        now = time.perf_counter()
        self._parts[key] = self._parts.get(key, 0.0) + now - self._mark
        self._mark = now

    def _policy(self) -> None:
        """The policy and, for a multi-turn task, TRL's environment support (a chat template with tool calls, the
        environment with the leak tool only under the trap knob)."""

        self.model, self.tokenizer = load_policy(self.plan.base_dir)
        self._part("policy")
        self.env_factory = self.plan.task.environment(leak_tool=self.plan.harness.env.leak_tool)
        self.env_args: dict[str, Any] = {}
        self.rounds = None
        if self.env_factory is not None:
            from evotrainer.training.episodes import ensure_chat_template, max_rounds

            warnings.filterwarnings("ignore", message="You are using 'environment_factory'", category=UserWarning)
            ensure_chat_template(self.tokenizer)
            self.env_args, self.rounds = {"environment_factory": self.env_factory}, max_rounds(self.plan.task)

    def _rewards(self) -> None:
        from evotrainer.training.rewards import build_reward_funcs

        # a chat model gets conversational rows (TRL applies its template)
        self.chat = self.env_factory is None and chat_format(self.tokenizer, self.plan.task)
        self.recorder = RolloutRecorder(self.run_dir, self.run_id)
        self.funcs, self.weights = build_reward_funcs(self.plan.harness, self.plan.task, self.recorder,
                                                      self.tokenizer.eos_token_id, chat=self.chat)
        self._part("rewards")

    def _dataset(self) -> None:
        """The session's prompts: the seed's stream from the fork point on, padded so that the Trainer's skip of the
        batches it already consumed (``global_step`` of them, on a resume) lands on the next unused one."""

        plan, meta, h = self.plan, self.meta, self.plan.harness
        pool = build_pool(plan.task, h, meta.pool_seed if meta.pool_seed is not None else plan.spec.seed)  # a run from before pool_seed: its own
        stats = lineage_pass_stats(self.home, meta) if needs_pass_stats(h) else None
        w, data_report = selection_weights(pool, h, stats)
        self._part("pool")
        # A fork continues its parent's step numbering, and the Trainer skips global_step batches when it resumes
        # from a checkpoint: padding with the batches the parent consumed makes that skip land exactly on the next
        # unused batch of this job, for a fresh fork, a resume after kill -9, and a paused backtest branch alike.
        pad = meta.start_step * h.grpo.prompts_per_step // h.grpo.num_iterations
        n_needed = (plan.target - meta.start_step) * h.grpo.prompts_per_step
        problems = stream_problems(pool, w, plan.spec.seed, pad, n_needed)  # in a random order: TRL does not reshuffle
        rows = problems[:1] * pad + problems
        dataset = to_dataset(rows, conversational=self.env_factory is not None)
        if self.chat:  # the task's chat messages as the prompt; the raw prompt stays for the verifier and the evidence
            dataset = dataset.rename_column("prompt", "problem_prompt").add_column(
                "prompt", dataset_prompts(self.tokenizer, plan.task, rows))
        (self.run_dir / "data_report.json").write_text(json.dumps(data_report, indent=2))
        self.dataset = dataset
        self.eval_problems = heldout_problems(plan.task, plan.spec.eval) if plan.spec.eval.every else []
        self._part("data")

    def _sync(self) -> None:
        """What MLflow holds of this run, so that nothing is logged twice and nothing is missing."""
        if self.mlflow_had is None:
            self.synced_upto = self.tracker.max_step(self.run_id, "reward")  # rollout files after it go up at the next checkpoint
            # steps (or a step-0 evaluation) that a resume keeps but a kill kept from MLflow
            self.tracker.backfill(self.run_id, read_metrics(self.run_dir), self.start_step)
            self.skip_upto = self.tracker.max_step(self.run_id, "loss")
        else:  # a new run, or one that paused cleanly: every step up to mlflow_had is in MLflow, and nothing after it
            self.synced_upto, self.skip_upto = self.mlflow_had, self.mlflow_had
        self._part("tracking")

    def _trainer(self) -> None:
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        from evotrainer.jobs.trainer import EvidenceCallback, EvoGRPOTrainer

        plan, h = self.plan, self.plan.harness
        if h.model.lora_r:
            have = {n.rsplit(".", 1)[-1] for n, _ in self.model.named_modules()}
            if missing := [m for m in h.model.lora_target_modules if m not in have]:
                raise ConfigError(f"{plan.spec.harness_label}: model.lora_target_modules names {', '.join(missing)}, "
                                  f"which the policy ({plan.base_dir}) does not have; Linear layers it has: "
                                  f"{', '.join(sorted(n for n in have if n.endswith('proj'))) or 'none named *_proj'}")
        args = grpo_config(h, self.run_dir / "trainer", plan.target, plan.spec, self.weights, self.rounds)
        self.trainer = EvoGRPOTrainer(model=self.model, reward_funcs=self.funcs, args=args, train_dataset=self.dataset,
                                      processing_class=self.tokenizer, recorder=self.recorder,
                                      peft_config=peft_config(h), **self.env_args)
        self.trainer.remove_callback(PrinterCallback)
        self.trainer.remove_callback(ProgressCallback)
        spec, meta = plan.spec, self.meta
        self.cb = EvidenceCallback(
            self.run_dir, self.recorder, self._log, self._on_ckpt, self._eval if spec.eval.every else None,
            spec.eval.every, spec.eval.at_start, plan.target, skip_upto=self.skip_upto, progress=self._progress,
            stop_at=self.stop_at, first_step=meta.start_step,
            pause=self._pause if self.handover is not None else None, save_every=spec.save_every)
        self.trainer.add_callback(self.cb)
        self._part("trainer")

    # -------------------------------------------------------------------------------------------- callbacks
    def _eval(self, step: int) -> dict[str, float]:

        outcomes: list[bool] = []
        metrics = evaluate(self.trainer.model, self.tokenizer, self.plan.task, self.eval_problems, self.plan.spec.eval,
                           self.plan.harness.grpo.max_completion_length, outcomes)
        write_outcomes(self.run_dir, step, outcomes)  # per problem: backtests pair arms problem by problem
        return metrics

    def _log(self, step: int, metrics: dict[str, float]) -> None:
        self.tracker.log_metrics(self.run_id, step, metrics, buffered=True)

    def _on_ckpt(self, step: int) -> None:
        self.tracker.flush(self.run_id)
        for f in sorted((self.run_dir / "rollouts").glob("step_*.parquet")):
            s = int(f.name.split("_")[1].split(".")[0])
            if self.synced_upto < s <= step:
                self.tracker.log_artifact(self.run_id, f, "rollouts")
        self.synced_upto = max(self.synced_upto, step)
        self.meta.last_checkpoint_step = step
        write_meta(self.run_dir, self.meta)

    def _progress(self, step: int, last: dict[str, Any]) -> None:
        if self.progress is not None:
            self.progress(step, self.plan.target, last)

    def _pause(self, step: int) -> int | None:
        from evotrainer.jobs.trainer import rng_state, set_rng_state

        gc.unfreeze()
        rng = rng_state()
        result = self.close(step, paused=True)
        nxt = self.handover(result)
        self.tracker.reopen(self.run_id)
        self.meta.mlflow_synced_step = None  # as a resumed session drops it: it is about to log more
        self.meta.status = "running"
        write_meta(self.run_dir, self.meta)
        set_rng_state(rng)
        self._session.update(t=time.perf_counter(), setup_s=0.0, eval0=self.cb.eval_seconds, start=step, parts={})
        gc.freeze()
        return nxt

    # ---------------------------------------------------------------------------------------------- the run
    def train(self) -> JobResult:
        """Set up, train, close; the result says whether the session finished or paused."""
        # TRL 1.16 calls transformers APIs deprecated for v6 on every step; the warnings say nothing to our users.
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers(\.|$)")
        self._policy()
        self._rewards()
        self._dataset()
        self._sync()
        self._trainer()
        self._session.update(setup_s=sum(self._parts.values()), parts=self._parts)
        self._t_train = time.perf_counter()
        # Everything alive now (the libraries, the policy, the data) lives for the whole session: freezing it keeps
        # the garbage collector from scanning it, both in the full collection accelerate's free_memory() runs at the
        # start of every train() (0.45 s a session on this machine, ~3 % of a campaign's wall) and in the automatic
        # ones during the steps. Unfrozen after, so whatever the session leaves behind is collected as usual.
        gc.freeze()
        try:
            self.trainer.train(resume_from_checkpoint=str(self.resume_ckpt) if self.resume_ckpt is not None else None)
        finally:
            gc.unfreeze()
            self.recorder.close()  # the last steps' rollouts are on disk before the run is marked finished or failed
        step = self.trainer.state.global_step
        return self.close(step, paused=step < self.plan.target)

    def close(self, step: int, paused: bool) -> JobResult:
        """Record the session that ends at ``step`` (paused there, or finished) and what it returns."""
        import torch

        meta, run_dir, session = self.meta, self.run_dir, self._session
        first = session["start"] == self.start_step  # else this session went on from a live pause
        ckpts = complete_checkpoints(run_dir)
        final = ckpts.get(self.plan.target) or (ckpts[max(ckpts)] if ckpts else None)
        for f in ("metrics.jsonl", "data_report.json"):
            if (run_dir / f).exists() and not paused:
                self.tracker.log_artifact(self.run_id, run_dir / f)
        meta.status = "paused" if paused else "finished"
        meta.steps_done = step
        # at a pause, the checkpoint flushed every step's metrics and rollout files to MLflow (EvidenceCallback.on_save)
        meta.paused_at = meta.mlflow_synced_step = step if paused else None
        meta.error = None
        now = time.perf_counter()
        train_s = now - self._t_train if first else now - session["t"]
        eval_s = self.cb.eval_seconds - session["eval0"]
        warm_s = round(self.plan.warm_s, 2) if first else 0.0
        # where this session's seconds went (one entry per start, resume or live look): a campaign's overhead is
        # read from these
        meta.timings = [*meta.timings, JobTiming(
            start_step=session["start"], steps_done=step, warm_start_s=warm_s, setup_s=round(session["setup_s"], 2),
            train_s=round(train_s, 2), eval_s=round(eval_s, 2), wall_s=round(now - session["t"], 2),
            setup_parts={k: round(v, 2) for k, v in session["parts"].items()}, threads=torch.get_num_threads(),
            live=not first)]
        write_meta(run_dir, meta)
        self.tracker.end_run(self.run_id, "FINISHED")  # a resume (or the live session's next look) reopens it
        return JobResult(
            run_id=self.run_id, name=str(meta.name), run_dir=str(run_dir), steps_done=step,
            checkpoint=str(final) if final else None,
            evidence={"metrics": str(run_dir / "metrics.jsonl"), "rollouts": str(run_dir / "rollouts"),
                      "mlflow": self.tracker.uri},
            metrics=last_metrics(read_metrics(run_dir)), status=meta.status, seconds=round(now - session["t"], 2),
            train_seconds=round(train_s, 2), eval_seconds=round(eval_s, 2),
            setup_seconds=round(session["setup_s"], 2), warm_start_seconds=warm_s)
