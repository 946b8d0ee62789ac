"""TRL's GRPOTrainer, plus the hooks EvoTrainer needs to observe it.

We subclass instead of forking TRL: the only additions are (1) copying each generation batch's reward
terms and advantages into the rollout recorder right after TRL computes them (for a multi-turn task also
each completion's policy-written length, from TRL's tool mask), (2) for a multi-turn task, dropping the extra
reward column TRL adds for an environment's ``get_reward``: our correctness term pays that reward itself,
under the harness's weight (see :mod:`evotrainer.training.rewards`), (3) checkpoints whose ``trainer_state.json`` keeps only
the newest row of ``log_history`` (below), and (4) callbacks that
mirror every logged step to ``metrics.jsonl`` and MLflow, run held-out evaluation, flush rollouts at each
step and sync them to MLflow at each checkpoint, stop on non-finite loss, skip the weight update of a step whose
gradient is not finite (and stop after a few in a row), and drive a progress display.
TRL's own completion logging is left off (it prints a table per step); our recorder writes a richer
schema (see :mod:`evotrainer.evidence.model`).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from trl import GRPOTrainer

from evotrainer.evidence.model import RolloutRecorder, append_metrics


def rng_state() -> dict[str, Any]:
    """The process's random streams (Python's, NumPy's, torch's on every device), as a checkpoint saves them."""
    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`rng_state` took."""
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["cpu"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state_all(state["cuda"])


@contextmanager
def untouched_rng():
    """Run a block without moving the process's random streams (Python's, NumPy's, torch's on every device).

    Why: a held-out evaluation samples (pass@k at temperature 1.0) from the same generators the training rollouts
    draw from, and it runs between steps, before the checkpoint records their state. Without this, evaluating
    more or less often changed the run that followed (a job evaluated every 2 steps trained other completions than
    one evaluated every 4), and a segment that evaluated its end left its continuation on another path than a
    single run of the same length.
    """
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


class EvoGRPOTrainer(GRPOTrainer):
    def __init__(self, *args, recorder: RolloutRecorder | None = None, **kwargs):
        self.evo_recorder = recorder
        ours = len(kwargs.get("reward_funcs") or [])
        super().__init__(*args, **kwargs)
        if kwargs.get("environment_factory") is not None and len(self.reward_funcs) > ours:
            # TRL appended the environment's get_reward (weight 1); the correctness term already pays it.
            del self.reward_funcs[ours:], self.reward_func_names[ours:], self.reward_processing_classes[ours:]
            self.reward_weights = self.reward_weights[:ours]

    def get_train_dataloader(self):
        """TRL's loader, without accelerate's device placement of each batch.

        Why: a GRPO batch is rows of prompt text and problem fields, which TRL tokenises and places on the device
        itself (``_generate_and_score_completions``); accelerate's ``send_to_device`` walked every field of every
        row to move nothing, 4.5 ms of each step outside the step itself (~4 s of an 880-step campaign,
        bench/log/06-the-demo-campaign.md). ``skip_first_batches`` (a resume) copies the loader's device, so it skips the walk too."""
        loader = super().get_train_dataloader()
        if getattr(loader, "device", None) is not None:
            loader.device = None
        return loader

    def _save_checkpoint(self, model, trial):
        # ``metrics.jsonl`` is the run's record of every step; TrainerState.log_history repeats it, and a fork
        # inherits its parent's, so along a campaign's lineage it grew by a row a step and serialising it became
        # 0.21 s of a 0.25 s checkpoint at step 560 (bench/log/07-campaign-vs-static-baseline.md). A checkpoint keeps the newest row only.
        history = self.state.log_history
        self.state.log_history = history[-1:]
        try:
            return super()._save_checkpoint(model, trial)
        finally:
            self.state.log_history = history

    def create_model_card(self, *args, **kwargs):
        """TRL's model card (``trainer/README.md``), written once, when the job saves its last step.

        Why: TRL rewrites the card at every checkpoint (~15 ms a save); a campaign's branches pause at every look,
        43 saves in the demo, and a paused branch's card would only be overwritten by the next one. The card
        describes the finished job, so that is when it is written."""
        if self.state.global_step < self.state.max_steps:
            return None
        return super().create_model_card(*args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        rec = self.evo_recorder
        if rec is not None and self.model.training:
            n = len(inputs)
            weights = self.reward_weights.tolist()
            terms = {}
            for name in self.reward_func_names:
                terms[name] = list(self._logs["rewards"][name])[-n:]
                rec.set_term(name, terms[name])
            # as TRL sums: a term that returned None (NaN) for a completion counts 0 there
            totals = [sum(w * v for w, name in zip(weights, self.reward_func_names)
                          if (v := terms[name][i]) == v) for i in range(n)]
            rec.finish_batch(totals, list(self._logs["advantages"])[-n:])
            if "tool_mask" in out:  # tokens the policy wrote: observations and the final EOS excluded
                ids = out["completion_ids"]
                valid = ids != self.processing_class.pad_token_id
                last = ids.gather(1, (valid.sum(dim=1, keepdim=True) - 1).clamp(min=0)).squeeze(1)
                written = (valid & out["tool_mask"].bool()).sum(dim=1) - (last == self.processing_class.eos_token_id).int()
                rec.set_column("length", [max(0, int(w)) for w in written.tolist()])
        return out


class NonFiniteLoss(RuntimeError):
    pass


# A step whose gradient holds NaN/inf leaves the weights as they were (see EvidenceCallback.on_pre_optimizer_step);
# this many such steps in a row end the job: the run has stopped learning, and its evidence says where.
MAX_SKIPPED_UPDATES_IN_A_ROW = 3


class EvidenceCallback(TrainerCallback):
    """Per step: metrics to jsonl + MLflow, rollouts to Parquet, periodic held-out eval; per save: sync."""

    def __init__(
        self,
        run_dir: Path,
        recorder: RolloutRecorder,
        log_metrics: Callable[[int, dict[str, float]], None],
        on_checkpoint: Callable[[int], None],
        evaluate: Callable[[int], dict[str, float]] | None,
        eval_every: int,
        eval_at_start: bool,
        max_steps: int,
        skip_upto: int,
        progress: Callable[[int, dict[str, Any]], None] | None = None,
        stop_at: int | None = None,
        first_step: int = 0,
        pause: Callable[[int], int | None] | None = None,
        save_every: int = 0,
    ):
        self.run_dir, self.recorder = run_dir, recorder
        self.log_metrics, self.on_checkpoint = log_metrics, on_checkpoint
        self.evaluate, self.eval_every, self.max_steps = evaluate, eval_every, max_steps
        self.eval_at_start = eval_at_start
        self.first_step = first_step  # the job's own start (its fork point): the only step eval_at_start means
        # checkpoints every save_every steps of the job, counted like evaluations (see _due); 0: the Trainer's own
        self.save_every = save_every
        self.skip_upto = skip_upto  # MLflow already has steps ≤ this (resume after a crash)
        self.progress = progress
        self.stop_at = stop_at  # pause here: checkpoint and stop (a resume goes on to max_steps)
        # a live session (jobs/live.py): at stop_at, checkpoint and call this instead of stopping; it blocks until
        # the next look and returns its stop_at (None: max_steps), or raises to end the session
        self.pause = pause
        self.last: dict[str, Any] = {}
        self.step_times: list[float] = []
        self.step_ended_at = 0.0  # Unix time of the last step's end
        self._t = time.perf_counter()
        self.eval_seconds = 0.0
        self.skipped_updates: list[int] = []  # steps whose non-finite gradient was not applied
        self._skipped_in_a_row = 0

    def _emit(self, step: int, metrics: dict[str, Any]) -> None:
        clean = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        clean.update({k: float("nan") for k, v in metrics.items() if v is None})  # TRL's "no valid value"
        append_metrics(self.run_dir, step, clean)
        if step > self.skip_upto:
            self.log_metrics(step, clean)
        self.last.update(clean)

    def _due(self, step: int, every: int) -> bool:
        """Whether ``step`` is on an every-``every`` schedule counted from the job's own start, or is its last step.

        Why from the start and not the Trainer's ``global_step % every``: a fork continues its parent's step
        numbering, and a fork point that is not a multiple of ``every`` put the schedule off the job's own steps. A
        campaign's last segment (30 → 320, every 290) evaluated and saved at step 290 for nothing, and a backtest
        branch forked at step 25 with looks every 10 evaluated at 30 and 40 while its looks paused at 35 and 45.
        """
        return step == self.max_steps or (every > 0 and (step - self.first_step) % every == 0)

    def _run_eval(self, step: int) -> None:
        if self.evaluate is None:
            return
        t = time.perf_counter()
        with untouched_rng():
            metrics = self.evaluate(step)
        self._emit(step, metrics)
        self.eval_seconds += time.perf_counter() - t

    def on_train_begin(self, args, state, control, **kw):
        # A fork or resume restores the TrainerState of the checkpoint it starts from, save and logging intervals
        # included: a fork of a job that saved every 20 steps would save every 20, not every save_every.
        state.compute_steps(args, state.max_steps)
        # only at the job's own start (also a session resumed from it: the runner dropped the row an earlier one
        # wrote there), never at a resumed or paused step: evaluations keep the run's every-N schedule, whichever
        # session reaches them
        if self.eval_every and self.eval_at_start and state.global_step == self.first_step:
            self._run_eval(state.global_step)
        self._t = time.perf_counter()

    def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
        """Drop a non-finite gradient before the optimiser sees it.

        Why: one NaN in the gradient (seen under bf16 on a GPU, with SmolLM2 on ``code``, after 13 and 32 healthy
        steps; bench/log/13-a-real-pretrained-model.md) passes through the clipping as a NaN scale, the optimiser writes NaN into every
        weight, and the next generation dies on a device-side assert; the whole job is lost. With every gradient
        set to None, torch's optimisers leave the weights and their moments untouched, so the step's rollouts and
        metrics are kept (``grad_norm`` NaN stays evidence for the ``nan`` diagnostic), ``update_skipped`` is
        logged, and training goes on from unchanged weights, as a mixed-precision loss scaler does on overflow.
        """
        if model is None:
            return
        import torch

        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads:
            return
        norms = torch._foreach_norm(grads)  # one small kernel a tensor, one host sync in all
        if bool(torch.isfinite(torch.stack([n.to(norms[0].device) for n in norms])).all()):
            self._skipped_in_a_row = 0
            return
        for p in model.parameters():
            p.grad = None
        self.skipped_updates.append(state.global_step + 1)  # the step this update would have ended
        self._skipped_in_a_row += 1

    def on_log(self, args, state, control, logs=None, **kw):
        logs = dict(logs or {})
        if "loss" in logs and self.skipped_updates and self.skipped_updates[-1] == state.global_step:
            logs["update_skipped"] = 1.0
        for k in ("total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss"):
            logs.pop(k, None)
        if "loss" in logs and self.step_times:
            logs["step_wall_time"] = self.step_times[-1]
            logs["step_end_time"] = self.step_ended_at
        if logs:
            self._emit(state.global_step, logs)  # NaN included: it is evidence for the `nan` diagnostic
        if self.progress is not None:
            self.progress(state.global_step, self.last)
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.recorder.flush()
            raise NonFiniteLoss(f"loss became {loss} at step {state.global_step}")
        if self._skipped_in_a_row >= MAX_SKIPPED_UPDATES_IN_A_ROW:
            self.recorder.flush()
            raise NonFiniteLoss(f"the gradient was NaN/inf on {self._skipped_in_a_row} steps in a row (steps "
                                f"{', '.join(map(str, self.skipped_updates[-self._skipped_in_a_row:]))}); their "
                                "updates were skipped and the weights are as they were before them. Lower the "
                                "learning rate or max_grad_norm")

    def on_step_begin(self, args, state, control, **kw):
        self._t = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        # the whole optimiser step as the Trainer runs it (TRL's step_time stops before the optimiser update)
        self.step_times.append(time.perf_counter() - self._t)
        self.step_ended_at = round(time.time(), 3)
        self.recorder.flush(wait=False)
        step = state.global_step
        if self.eval_every and self._due(step, self.eval_every):
            self._run_eval(step)
        if self.save_every:  # in place of the Trainer's global_step % save_steps (DefaultFlowCallback runs first)
            control.should_save = self._due(step, self.save_every)
        if self.stop_at is not None and step >= self.stop_at and step < self.max_steps:
            control.should_save = True
            if self.pause is None:
                control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kw):
        self.recorder.wait()
        self.on_checkpoint(state.global_step)
        if (self.pause is not None and self.stop_at is not None and state.global_step == self.stop_at
                and state.global_step < self.max_steps):  # the target is the job's end, never a pause
            # the checkpoint (with its random state), the look's evaluation and the flushed evidence are on disk
            self.stop_at = self.pause(state.global_step)
