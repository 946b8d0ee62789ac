"""What defines one job besides its harness's knobs: task, steps, seed, policy, device, evaluation, checkpoints.

Why a spec of its own, in the config package: the CLI, the launchers (whose requests cross process and Ray
boundaries as JSON) and the campaign all build one, and none of them should need torch to do so. It carries the
harness itself (``harness``: a validated :class:`~evotrainer.config.harness.HarnessSpec`, or the path of a YAML
file to load), so a campaign hands a job the exact recipe it decided on instead of writing a file to read back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evotrainer.config.eval import EvalSpec
from evotrainer.config.harness import HarnessSpec, load_harness
from evotrainer.config.policy import PolicySpec
from evotrainer.tasks import task_form


class JobSpec(BaseModel):
    """Everything that defines a job besides the harness's knobs."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field("arith", description="Built-in task name, a dataset file or save_to_disk directory, "
                                           "'reasoning_gym' (option dataset=NAME) or 'module:Class' of a user task; "
                                           "a mapping {reasoning_gym: NAME, config: {...}} or {dataset: PATH, ...} too.")
    task_options: dict[str, Any] = Field(default_factory=dict, description="Task options (see `evotrainer tasks`).")
    harness: HarnessSpec | str = Field(
        "harnesses/grpo-baseline.yaml",
        description="The harness: the path of a harness YAML file, or the harness itself (its knobs as a mapping, "
                    "which is how a campaign hands a job the recipe it decided on).")
    harness_dir: str | None = Field(
        None, description="Where an inline harness's relative paths (diagnostics.user files) resolve; default the "
                          "directory of the file the harness was loaded from, if any.")
    steps: int = Field(100, ge=1, le=10_000_000, description="Optimiser steps of this job (for a fork: steps after the fork point).")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of sampling, data order and the warm start.")
    policy: PolicySpec = Field(default_factory=PolicySpec, description="Policy to train.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the warm start, training and evaluation run: 'auto' = CUDA when available (unless "
                            "$EVOTRAINER_DEVICE=cpu), else the CPU. A GPU computes in bf16 autocast, a CPU in fp32.")
    eval: EvalSpec = Field(default_factory=EvalSpec, description="Held-out evaluation.")
    save_every: int = Field(25, ge=1, le=1_000_000, description="Checkpoint every N steps of the job, counted from its start (a fork's "
                          "fork point), and at the last step.")
    keep_checkpoints: int = Field(0, ge=0, le=100_000, description="Keep only the newest N checkpoints (0 = keep all, so any step can be forked).")
    name: str | None = Field(None, description="Run name; default {task}__{harness}__s{seed}__{time}.")
    tags: dict[str, str] = Field(default_factory=dict, description="Extra MLflow tags (campaigns add proposal ids, roles).")
    threads: int | None = Field(
        None, ge=1, le=1024,
        description="torch intra-op threads this job computes with, in a launcher's worker (null: the worker's own "
                    "share of the cores). A local launcher with several workers sets it when the job is first "
                    "submitted: the cores divided among the jobs of its batch that run side by side (a segment alone "
                    "gets them all, and so do a batch's last jobs beyond a multiple of the workers, which start once "
                    "those cores are free: LocalLauncher.shares). It is kept in the job's record, so a resumed job "
                    "computes as it began: the thread count may change the order of floating-point sums, and with it "
                    "the run.")

    @model_validator(mode="before")
    @classmethod
    def _task_form(cls, data: Any) -> Any:
        if isinstance(data, dict) and "task" in data:
            data = task_form(data)
        return data

    @model_validator(mode="after")
    def _keep_harness_dir(self) -> JobSpec:
        if isinstance(self.harness, HarnessSpec) and self.harness_dir is None:
            self.harness_dir = self.harness.source_dir  # not serialised with the harness: kept here across processes
        return self

    def resolved_harness(self) -> HarnessSpec:
        """The harness this job trains under (a file is loaded and validated: ConfigError naming it)."""
        if isinstance(self.harness, str):
            return load_harness(self.harness)
        out = self.harness.model_copy(deep=True)
        out.source_dir = self.harness_dir
        return out

    @property
    def harness_label(self) -> str:
        """How messages name the harness: its file, or ``harness 'NAME' (VERSION)`` for an inline one."""
        if isinstance(self.harness, str):
            return self.harness
        return f"harness '{self.harness.name}' ({self.harness.version})"

    @property
    def harness_stem(self) -> str:
        """The harness part of a default run name: the file's stem, or an inline harness's name."""
        return Path(self.harness).stem if isinstance(self.harness, str) else self.harness.name
