"""The harness as TRL sees it: ``GRPOConfig`` from the harness's ``grpo``/``optim``/``data`` knobs (TRL's names
throughout, as TRL documents ``GRPOConfig``), ``LoraConfig`` from ``model.lora_*``, and the device arguments.

Why a file of its own: it is the one place where a harness knob becomes a trainer argument, so a reader checking
what a knob does, or a TRL upgrade renaming an argument, finds it here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evotrainer.config.harness import HarnessSpec
from evotrainer.config.job import JobSpec
from evotrainer.training.policy import precision, resolve_device


def device_args(device: str = "auto") -> dict[str, Any]:

    dev = resolve_device(device)
    return {"use_cpu": dev == "cpu", "bf16": precision(dev) == "bf16"}


def peft_config(harness: HarnessSpec):
    """peft's LoraConfig for a harness with ``model.lora_r > 0`` (None: train every weight)."""
    m = harness.model
    if m.lora_r == 0:
        return None
    from peft import LoraConfig

    return LoraConfig(r=m.lora_r, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout,
                      target_modules=list(m.lora_target_modules), task_type="CAUSAL_LM", bias="none")


def grpo_config(harness: HarnessSpec, output_dir: Path, max_steps: int, spec: JobSpec, weights: list[float],
                max_tool_calling_iterations: int | None = None):
    """Translate a harness into TRL's GRPOConfig (one place, so verl overrides can mirror it later).

    ``max_tool_calling_iterations`` bounds the tool rounds of a multi-turn task's episodes (None: single-turn).
    """
    from trl import GRPOConfig

    g, o = harness.grpo, harness.optim
    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=max_steps,
        per_device_train_batch_size=g.prompts_per_step * g.num_generations,  # counts completions
        gradient_accumulation_steps=1,
        num_generations=g.num_generations,
        learning_rate=o.learning_rate,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=o.warmup_steps,
        weight_decay=o.weight_decay,
        max_grad_norm=o.max_grad_norm,
        temperature=g.temperature,
        top_p=g.top_p,
        max_completion_length=g.max_completion_length,
        loss_type=g.loss_type,
        epsilon=g.epsilon,
        epsilon_high=g.epsilon_high,
        beta=g.beta,
        sync_ref_model=g.sync_ref_model,
        ref_model_sync_steps=g.ref_model_sync_steps,
        ref_model_mixup_alpha=g.ref_model_mixup_alpha,
        scale_rewards=g.scale_rewards,
        num_iterations=g.num_iterations,
        mask_truncated_completions=g.mask_truncated_completions,
        top_entropy_quantile=g.top_entropy_quantile,
        entropy_coef=g.entropy_coef,
        use_adaptive_entropy=g.use_adaptive_entropy,
        entropy_target=g.entropy_target,
        reward_weights=weights,
        logging_steps=1,
        save_strategy="steps",
        save_steps=spec.save_every,
        save_total_limit=spec.keep_checkpoints or None,
        report_to="none",
        disable_tqdm=True,
        log_completions=False,
        seed=spec.seed,
        data_seed=spec.seed,
        dataloader_num_workers=0,
        ignore_data_skip=False,
        shuffle_dataset=False,  # the segment's problems are drawn in a seeded random order (data.stream_problems)
        max_tool_calling_iterations=max_tool_calling_iterations,
        gradient_checkpointing=harness.model.gradient_checkpointing,
        **device_args(spec.device),
    )
