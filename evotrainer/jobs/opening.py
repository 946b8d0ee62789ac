"""Opening a job's run: a new one created whole, or an existing one reopened by its one writer.

Why apart from the runner: a run directory is complete or absent (``jobs/jobdir.py``). A new run is assembled under
a hidden name, with its MLflow run, its recipe, its fork checkpoint and, last, its ``meta.json``, then renamed into
place; a resumed one is reopened under its lock, and a finished one is refused. Every failure on the way leaves
nothing behind, which is what a ``kill -9`` at any point relies on.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evotrainer.config.harness import HarnessSpec, dump_harness
from evotrainer.core.errors import ConfigError, JobBusy
from evotrainer.core.home import jobs_dir
from evotrainer.core.names import to_name
from evotrainer.core.runmeta import RunMeta
from evotrainer.jobs.jobdir import JobLock, is_locked, publish, staging_dir
from evotrainer.jobs.lineage import CKPT, lineage_pool_seed, prepare_fork_checkpoint, read_meta, write_meta
from evotrainer.jobs.plan import JobPlan
from evotrainer.training.data import STREAM_VERSION


@dataclass
class OpenRun:
    """A run this process now writes: its directory, record and lock."""

    name: str
    run_id: str
    run_dir: Path
    meta: RunMeta
    lock: JobLock
    mlflow_had: int | None  # the last step MLflow holds with nothing after it (-1: a new run; None: unknown)


def open_run(plan: JobPlan, home: Path, tracker: Any) -> OpenRun:
    """The plan's run, created (new or fork) or reopened (resume); JobBusy for a finished run or another writer."""
    return _reopen(plan, tracker) if plan.meta is not None else _create(plan, home, tracker)


def _create(plan: JobPlan, home: Path, tracker: Any) -> OpenRun:
    spec, harness = plan.spec, plan.harness
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    name = spec.name or (f"{to_name(spec.task.replace(':', '.'), 'task')}__{to_name(spec.harness_stem, 'harness')}"
                         f"__s{spec.seed}__{stamp}")
    final_dir = jobs_dir(home) / name
    if final_dir.exists() and not (final_dir / "meta.json").exists() and not is_locked(final_dir):
        shutil.rmtree(final_dir)  # debris of a creation (by an older release) killed before its meta.json
    if final_dir.exists():
        raise ConfigError(f"a run named '{name}' already exists under {jobs_dir(home)}; pick another --name")
    run_dir, lock = staging_dir(jobs_dir(home), name)
    try:
        parent_meta = read_meta(plan.parent_dir) if plan.parent_dir is not None else None
        run_id = tracker.create_run(name, _tags(plan, parent_meta), _params(plan))
        meta = _record(plan, home, name, run_id, parent_meta)
        (run_dir / "harness.yaml").write_text(dump_harness(harness))
        if plan.fork_src is not None:
            (run_dir / "trainer").mkdir(parents=True, exist_ok=True)
            parent_harness = HarnessSpec.model_validate(parent_meta.harness)
            prepare_fork_checkpoint(plan.fork_src, run_dir / "trainer" / f"{CKPT}{plan.parent_step}", harness,
                                    parent_harness, keep_rng=spec.seed == parent_meta.spec["seed"])
        write_meta(run_dir, meta)  # last: a run with meta.json is complete enough to resume
        publish(run_dir, final_dir)  # the whole directory appears under its name at once
    except BaseException as err:
        lock.release()
        shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(err, FileExistsError):
            raise ConfigError(f"a run named '{name}' was created under {jobs_dir(home)} by another process "
                              "meanwhile; pick another --name") from None
        raise
    tracker.log_artifact(run_id, final_dir / "harness.yaml")
    return OpenRun(name=name, run_id=run_id, run_dir=final_dir, meta=meta, lock=lock, mlflow_had=-1)


def _tags(plan: JobPlan, parent_meta: RunMeta | None) -> dict[str, str]:
    spec, harness = plan.spec, plan.harness
    tags = {"evotrainer.task": spec.task, "evotrainer.harness_version": harness.version,
            "evotrainer.harness_name": harness.name, "evotrainer.seed": str(spec.seed),
            "evotrainer.role": spec.tags.get("evotrainer.role", "job"), **spec.tags}
    if parent_meta is not None:
        tags.update({"evotrainer.parent_run_id": str(parent_meta.run_id), "evotrainer.parent_run": str(parent_meta.name),
                     "evotrainer.parent_step": str(plan.parent_step),
                     "evotrainer.parent_harness_version": str(parent_meta.harness_version)})
    return tags


def _params(plan: JobPlan) -> dict[str, Any]:
    spec = plan.spec
    params: dict[str, Any] = {f"harness.{k}": v for k, v in plan.harness.knobs().items()}
    params.update({"task": spec.task, "seed": spec.seed, "policy.size": spec.policy.size, "steps": spec.steps,
                   "device": plan.device})
    if spec.policy.real:
        params["policy.source"] = spec.policy.pretrained or spec.policy.path
    return params


def _record(plan: JobPlan, home: Path, name: str, run_id: str, parent_meta: RunMeta | None) -> RunMeta:
    """A new run's ``meta.json``."""
    parent = parent_meta or RunMeta()
    return RunMeta(
        name=name, run_id=run_id, spec=plan.spec.model_dump(mode="json"), harness=plan.harness.model_dump(mode="json"),
        harness_version=plan.harness.version, target_step=plan.target, start_step=plan.parent_step or 0,
        parent_run=parent.name, parent_run_id=parent.run_id, parent_step=plan.parent_step,
        parent_harness_version=parent.harness_version,
        # the data pool's seed: a fork keeps its lineage's pool (so the data rules meet the prompts its ancestors'
        # statistics describe) and samples from it under its own seed
        pool_seed=lineage_pool_seed(home, parent_meta) if parent_meta else plan.spec.seed,
        data_stream=STREAM_VERSION, base_policy=str(plan.base_dir), status="running",
        created=datetime.now(timezone.utc).isoformat())


def _reopen(plan: JobPlan, tracker: Any) -> OpenRun:
    run_dir, name, run_id = plan.run_dir, str(plan.meta.name), str(plan.meta.run_id)
    lock = JobLock.take(run_dir, name)  # a second writer of this run is refused here
    try:
        meta = read_meta(run_dir)  # as it is now, under the lock
        if meta.status == "finished":
            raise JobBusy(f"run {name} is finished (step {meta.steps_done or meta.target_step}): there is "
                          f"nothing to resume, and a finished run is never rewritten; fork it to train on "
                          f"(--fork {name})")
        tracker.reopen(run_id)
        # the last step MLflow holds, as a session that paused cleanly left it; dropped from the record while this
        # session runs, so that one killed after logging more steps is never trusted to have stopped there
        mlflow_had, meta.mlflow_synced_step = meta.mlflow_synced_step, None
        meta.status = "running"
        write_meta(run_dir, meta)
    except BaseException:
        lock.release()
        raise
    return OpenRun(name=name, run_id=run_id, run_dir=run_dir, meta=meta, lock=lock, mlflow_had=mlflow_had)
