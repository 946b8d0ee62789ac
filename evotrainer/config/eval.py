"""How a job evaluates on held-out problems: a spec every job and campaign carries, free of torch (see
:mod:`evotrainer.training.evaluation` for the evaluation itself and its three disjoint splits)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvalSpec(BaseModel):
    """How and how often a job evaluates on held-out problems."""

    model_config = ConfigDict(extra="forbid")

    every: int = Field(50, ge=0, le=1_000_000, description="Evaluate every N steps of the job, counted from its start (a fork's fork "
                       "point), and at its first and last step; 0 = never.")
    at_start: bool = Field(True, description="Also evaluate before the first step (a fork's start equals its parent's end).")
    n: int = Field(200, ge=1, le=100_000, description="Held-out problems evaluated.")
    k: int = Field(8, ge=1, le=256, description="Samples per problem for pass@k (temperature 1.0).")
    difficulty: tuple[int, int] | None = Field(None, description="Held-out difficulty range; null = the task's default level.")
    seed: int = Field(1234, ge=0, description="Seed that fixes the held-out problems (shared across runs on purpose).")
    batch_size: int = Field(256, ge=1, le=65_536, description="Prompts per generation batch.")
