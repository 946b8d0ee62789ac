"""A job directory's record (``meta.json``): one model that the runner writes and every reader reads.

Why a facade: the job directory is a second store beside the state database, and its record used to be parsed
raw, by string keys, in the campaign nodes, the confirmation, the dashboard and the evidence loader — each with its
own idea of a missing or garbage file and of which step a job has reached (the soak found a resume bug in exactly
that: a job that died after resuming from a pause looked as if it had never paused). ``RunMeta`` names every field
the runner records, keeps any other key (an older or newer release's) so that a rewrite loses nothing, and answers
"where is this job" in one place. The runner (``evotrainer.jobs``) remains the only writer, through
:meth:`RunMeta.dump`; ``jobs/lineage.read_meta`` is the strict reader a resume or a fork uses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from evotrainer.core.files import read_text

RunStatus = Literal["running", "paused", "finished", "failed", "interrupted"]


class JobTiming(BaseModel):
    """Where one session of a job (its start, or a resume) spent its seconds, as the runner measured them."""

    model_config = ConfigDict(extra="allow", frozen=True)

    start_step: int = Field(0, description="Global step the session started at.")
    steps_done: int = Field(0, description="Global step it ended at.")
    warm_start_s: float = Field(0.0, description="Building the warm-started base policy (its SFT) because no cached "
                                                 "one existed: 0 when it was cached, and for forks and resumes.")
    setup_s: float = Field(0.0, description="Loading the policy, the data and the trainer, before the first step "
                                            "(the warm start excluded).")
    train_s: float = Field(0.0, description="Inside the Trainer's train(): the steps and the evaluations.")
    eval_s: float = Field(0.0, description="Held-out evaluations (part of train_s).")
    wall_s: float = Field(0.0, description="The whole session in the job's process, setup and finishing included.")
    setup_parts: dict[str, float] = Field(default_factory=dict, description=(
        "setup_s part by part: open (the run's directory, lock and MLflow run), policy (loading it), rewards, pool "
        "(the data pool and its selection weights, ancestors' pass statistics included), data (the stream window "
        "and the held-out problems), tracking (steps MLflow lacks), trainer (building it); empty before 2026-11-28."))
    threads: int | None = Field(None, description="torch intra-op threads the session computed with (JobSpec.threads, "
                                                  "or its worker's share of the cores); None before 2026-11-29.")
    live: bool = Field(False, description="The session went on from a pause in a live worker (no setup of its own).")


class RunMeta(BaseModel):
    """What a job's ``meta.json`` says. Unknown keys are kept (``extra``) and written back as they were read; a field
    set to None is left out of the file (absent and None mean the same to every reader)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: str | None = Field(None, description="The run's name: its directory under HOME/jobs.")
    run_id: str | None = Field(None, description="The job's MLflow run id.")
    status: str = Field("running", description="running (or died while running), paused, finished, failed, "
                                                "interrupted.")
    spec: dict[str, Any] = Field(default_factory=dict, description="The job spec (``JobSpec``), as it was planned.")
    harness: dict[str, Any] = Field(default_factory=dict, description="The harness it trains under (``HarnessSpec``).")
    harness_version: str | None = Field(None, description="That harness's content hash.")
    target_step: StrictInt = Field(0, description="Global step the job trains to (an integer: '8', 8.0 or true is a "
                                                  "damaged record, not a step).")
    start_step: StrictInt = Field(0, description="Global step it started (or was forked) at (an integer, as above).")
    parent_run: str | None = Field(None, description="The run it was forked from (None: a new run).")
    parent_run_id: str | None = Field(None, description="That run's MLflow run id.")
    parent_step: int | None = Field(None, description="The parent's checkpoint step it was forked at.")
    parent_harness_version: str | None = Field(None, description="The harness the parent trained under.")
    pool_seed: int | None = Field(None, description=(
        "Seed of the data pool it draws from: its lineage's (jobs/lineage.lineage_pool_seed); None before it was "
        "recorded (the lineage is walked up)."))
    data_stream: int | None = Field(None, description="Which sequence the seed's prompts come from "
                                                      "(training.data.STREAM_VERSION).")
    base_policy: str | None = Field(None, description="The base policy directory it trains (architecture, tokenizer).")
    created: str | None = Field(None, description="When the run was created (ISO 8601, UTC).")
    paused_at: int | None = Field(None, description="Global step of its last recorded pause (a backtest look); kept "
                                                    "while it is resumed towards the next one.")
    last_checkpoint_step: int | None = Field(None, description="Its last checkpoint the trainer acknowledged.")
    mlflow_synced_step: int | None = Field(None, description=(
        "Set by a session that paused cleanly: MLflow holds every step of the run up to it and none after, so the "
        "next session need not ask (dropped while a session runs)."))
    steps_done: int | None = Field(None, description="Global step its last session ended at.")
    error: str | None = Field(None, description="Why its last session failed (dropped once one ends well).")
    timings: list[JobTiming] = Field(default_factory=list, description="Each finished session's seconds.")

    @property
    def reached(self) -> int:
        """The global step the job has trained to and can be read back at: its target when finished, else its last
        recorded pause — also when it was resumed from that pause and died before the next one (status still
        ``running``) — else where it started."""
        if self.status == "finished":
            return self.target_step
        return self.paused_at or self.start_step

    @property
    def raw(self) -> dict[str, Any]:
        """The whole record as a dict: every key it was read or written with, and none it was not (for readers that
        show it, the dashboard and the evidence, and for the file itself)."""
        return self.model_dump(mode="json", exclude_unset=True, exclude_none=True)

    def dump(self) -> str:
        """The record as ``meta.json`` holds it."""
        return json.dumps(self.raw, indent=2, sort_keys=True)


def read_run_meta(run_dir: Path) -> RunMeta | None:
    """The record of the job in ``run_dir``; None when there is none, or it is not a readable JSON object."""
    try:
        doc = json.loads(read_text(Path(run_dir) / "meta.json", 16 << 20))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    try:
        return RunMeta.model_validate(doc)
    except ValueError:  # a field of the wrong type: a record we cannot trust
        return None


def run_meta_dict(run_dir: Path) -> dict[str, Any]:
    """The whole record as a dict ({} when there is none): for readers that show every key (dashboard, evidence)."""
    meta = read_run_meta(run_dir)
    return dict(meta.raw) if meta is not None else {}


__all__ = ["JobTiming", "RunMeta", "RunStatus", "read_run_meta", "run_meta_dict"]
