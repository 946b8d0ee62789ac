"""A job's lineage: finding a run, reading its record, its complete checkpoints, and what a fork or a resume takes
from its parents (the fork checkpoint, the ancestors' rollouts and pass statistics, the data stream's seed).

Why apart from the runner: resuming and forking read runs that already exist, and the merge (``jobs/merge.py``)
reads them the same way; none of it trains. The record (``meta.json``) is read strictly here: a damaged one is a
``ConfigError`` naming the file, since a run whose lineage cannot be trusted cannot be continued.

- **Resume** (``resume=RUN``): continue an interrupted job from its last *complete* checkpoint (one with
  ``trainer_state.json``, which the Trainer writes last), with optimizer, scheduler and RNG state, after
  dropping metrics and rollouts recorded past that checkpoint. MLflow metrics for steps it already has
  are not logged twice. To train on past a finished job's target, fork it (same harness or another).
- **Fork** (``fork=RUN[@STEP]``): a new job that starts from the parent's checkpoint at STEP (default: its
  latest) with its weights and optimizer moments, optionally under another harness. A fork of another seed
  drops the parent's RNG state (its own seed governs sampling, so paired seeds mean something); one of the
  parent's seed keeps it. The copy rewrites the learning rate in the optimizer and scheduler state when the
  harness changed it. Lineage (parent run, step, harness versions) is recorded in ``meta.json`` and as MLflow
  tags. Forks continue the parent's step numbering, so a campaign's segments line up on one step axis, and the
  seed's data stream (``data.stream_problems``) from the fork point on: a fork under its parent's harness and
  seed trains exactly the steps one longer run would (a campaign's healthy mainline is the user's run).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from pydantic import ValidationError

from evotrainer.config.harness import HarnessSpec
from evotrainer.config.job import JobSpec
from evotrainer.core import atomic
from evotrainer.core.errors import ConfigError, RunNotFound
from evotrainer.core.home import resolve_run
from evotrainer.core.runmeta import RunMeta
from evotrainer.evidence.model import prompt_pass_stats, read_rollouts

CKPT = "checkpoint-"


# ---------------------------------------------------------------------------------------------- run lookup
META_KEYS = ("name", "run_id", "spec", "harness", "target_step", "start_step", "base_policy")
"""What resuming or forking a job reads from its ``meta.json``."""


def read_meta(run_dir: Path) -> RunMeta:
    """A job's record, read strictly: ConfigError naming the file when it is garbage, empty, not an object, lacks one
    of ``META_KEYS`` (or has it null) or has a field of the wrong type (a run whose record is damaged cannot be
    resumed or forked)."""
    f = run_dir / "meta.json"
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise ConfigError(f"{f}: not a readable job record ({type(err).__name__}: {err}); this run cannot be resumed "
                          "or forked: restore the file, or start a new run") from None
    missing = [k for k in META_KEYS if doc.get(k) is None] if isinstance(doc, dict) else list(META_KEYS)
    if missing:
        got = f"lacks {', '.join(missing)}" if isinstance(doc, dict) else f"is a JSON {type(doc).__name__}"
        raise ConfigError(f"{f}: not a job record: it {got} (a job's meta.json is an object with "
                          f"{', '.join(META_KEYS)}); this run cannot be resumed or forked")
    try:
        return RunMeta.model_validate(doc)
    except ValidationError as err:
        raise _damaged(f, err, "resumed or forked") from None


def _damaged(f: Path, err: ValidationError, what: str) -> ConfigError:
    """The record's first invalid field, named with its path, in one line."""
    why = err.errors()[0]
    return ConfigError(f"{f}: damaged job record ({'.'.join(str(x) for x in why['loc'])}: {why['msg']}); this run "
                       f"cannot be {what}")


def resume_record(run_dir: Path) -> tuple[RunMeta, JobSpec, HarnessSpec, int]:
    """The meta, spec, harness and target step of a run to resume; ConfigError naming its meta.json if damaged."""
    meta = read_meta(run_dir)
    try:
        spec = JobSpec.model_validate(meta.spec)
        harness = HarnessSpec.model_validate(meta.harness)
    except ValidationError as err:
        raise _damaged(run_dir / "meta.json", err, "resumed") from None
    return meta, spec, harness, meta.target_step


def write_meta(run_dir: Path, meta: RunMeta) -> None:
    """Write the record whole (``atomic``): a reader sees the old one or the new one."""
    atomic.write_text(run_dir / "meta.json", meta.dump())


def complete_checkpoints(run_dir: Path) -> dict[int, Path]:
    """Checkpoints that were fully written (trainer_state.json is saved last and must parse)."""
    out: dict[int, Path] = {}
    tdir = run_dir / "trainer"
    if not tdir.is_dir():
        return out
    for d in tdir.iterdir():
        if not d.name.startswith(CKPT):
            continue
        try:
            step = int(d.name[len(CKPT) :])
            json.loads((d / "trainer_state.json").read_text())
        except (ValueError, OSError, json.JSONDecodeError):
            continue
        if (d / "optimizer.pt").is_file() and (any(d.glob("model*.safetensors"))
                                               or (d / "adapter_model.safetensors").is_file()):  # LoRA: the adapter
            out[step] = d
    return dict(sorted(out.items()))


def parse_fork(home: Path, ref: str) -> tuple[Path, int, Path]:
    name, _, at = ref.partition("@")
    parent = resolve_run(home, name)
    ckpts = complete_checkpoints(parent)
    if not ckpts:
        raise RunNotFound(f"run '{name}' has no complete checkpoint to fork from")
    if at:
        try:
            step = int(at)
        except ValueError:
            raise ConfigError(f"--fork {ref}: the part after '@' must be a step number") from None
        if step not in ckpts:
            raise RunNotFound(f"run '{name}' has no checkpoint at step {step}; available steps: {sorted(ckpts)}")
    else:
        step = max(ckpts)
    return parent, step, ckpts[step]


def prepare_fork_checkpoint(src: Path, dst: Path, harness: HarnessSpec, parent_harness: HarnessSpec,
                             keep_rng: bool) -> None:
    """The parent's checkpoint as the fork's first one; ``keep_rng`` keeps the parent's RNG state (a fork with the
    parent's seed), otherwise the fork's own seed governs sampling."""
    import torch

    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    for f in [] if keep_rng else tmp.glob("rng_state*.pth"):
        f.unlink()
    if harness.grpo.use_adaptive_entropy is False:
        (tmp / "entropy_ctrl_state.json").unlink(missing_ok=True)
    new_lr, old_lr = harness.optim.learning_rate, parent_harness.optim.learning_rate
    if new_lr != old_lr:
        opt = torch.load(tmp / "optimizer.pt", weights_only=False)
        for g in opt["param_groups"]:
            g["lr"] = new_lr
            g["initial_lr"] = new_lr
        torch.save(opt, tmp / "optimizer.pt")
        sched_path = tmp / "scheduler.pt"
        if sched_path.exists():
            sched = torch.load(sched_path, weights_only=False)
            if "base_lrs" in sched:
                sched["base_lrs"] = [new_lr for _ in sched["base_lrs"]]
            if "_last_lr" in sched:
                sched["_last_lr"] = [new_lr for _ in sched["_last_lr"]]
            torch.save(sched, sched_path)
    tmp.replace(dst)


def ancestry(home: Path, meta: RunMeta):
    """Up the job's lineage: (child meta, parent's run dir, parent meta) from its parent to the root, stopping at a
    parent that no longer exists or at a cycle. Lazy, so a caller that has its answer reads no further."""
    cur, seen = meta, set()
    while cur.parent_run and cur.parent_run not in seen:
        seen.add(cur.parent_run)
        try:
            pdir = resolve_run(home, cur.parent_run)
        except RunNotFound:
            return
        parent = read_meta(pdir)
        yield cur, pdir, parent
        cur = parent


def ancestor_rollouts(home: Path, meta: RunMeta):
    """Rollouts of the job's ancestors (up to the fork points): the evidence data rules read."""
    import pandas as pd


    frames, limit = [], None
    for child, pdir, _ in ancestry(home, meta):
        at = child.parent_step if child.parent_step is not None else limit
        limit = at if limit is None else min(limit, at)
        df = read_rollouts(pdir, columns=["prompt_id", "step", "correct"])
        frames.append(df[df["step"] <= limit])
    return pd.concat(frames, ignore_index=True) if frames else None


PASS_STATS = "lineage_pass_stats@{step}.parquet"  # in a parent run's directory: its lineage's statistics at a step


def lineage_pass_stats(home: Path, meta: RunMeta):
    """Per-prompt pass statistics of the run's ancestors (:func:`ancestor_rollouts`), computed once per fork point
    and kept in the parent's directory (``lineage_pass_stats@STEP.parquet``) for every run forked there.

    Why: they depend on the fork point alone (the parent's steps up to it, and its own ancestors', never change once
    a run has been forked there), but reading them back means every per-step Parquet file of the lineage, 0.2-0.35 s
    a session; a backtest's branches under a data rule all fork the same checkpoint, one per seed, and each is
    resumed at every look. None without ancestors."""
    import pandas as pd


    cache = None
    if meta.parent_run and meta.parent_step is not None:
        try:
            cache = resolve_run(home, meta.parent_run) / PASS_STATS.format(step=meta.parent_step)
        except RunNotFound:
            cache = None
    if cache is not None and cache.is_file():
        try:
            return pd.read_parquet(cache)
        except Exception:  # noqa: BLE001 - a torn or foreign file: computed again and rewritten below
            pass
    anc = ancestor_rollouts(home, meta)
    if anc is None:
        return None
    stats = prompt_pass_stats(anc)
    if cache is not None:
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        try:
            stats.to_parquet(tmp, index=False)
            os.replace(tmp, cache)  # whole or absent, whichever of several forks writes it (the same numbers) last
        except OSError:  # a parent directory this job may not write (read-only, full): it reads the lineage each time
            tmp.unlink(missing_ok=True)
    return stats


def lineage_pool_seed(home: Path, meta: RunMeta) -> int:
    """The seed of the data pool a fork of ``meta``'s run draws from: its lineage's root job's seed.

    Why the lineage's and not the fork's own: the data rules (``data.drop_all_correct`` / ``drop_all_wrong`` /
    ``sampling: difficulty_targeted``) weigh pool prompts by the pass statistics the ancestors recorded, which only
    exist for prompts of the ancestors' pool. When every backtest branch drew a pool from its own seed, a branch met
    none of its parent's prompts (0 of 240 on the `code` campaign of bench/log/10-code-and-agentic-domains.md, 2026-11-26) and those rules
    did nothing. A run recorded before ``pool_seed`` existed (or a merged run, which copies one source's spec) is
    walked up to the first run that names one, or to the root."""
    root = meta
    if root.pool_seed is None:
        for _, _, root in ancestry(home, meta):  # the last one read is the answer
            if root.pool_seed is not None:
                break
    return root.pool_seed if root.pool_seed is not None else int(root.spec["seed"])


def acknowledged_checkpoints(run_dir: Path, meta: RunMeta) -> dict[int, Path]:
    """The complete checkpoints a resume may start from: those at or before the last one the job's callback
    acknowledged (``last_checkpoint_step``, written once that step's rollouts are flushed), its pause or its start.

    Why: the Trainer writes a checkpoint before it calls ``on_save``, so a process killed in between leaves one
    that is complete on disk while its step's rollouts may not be, and that no pause was recorded at. Resumed
    from it with the same ``stop_at``, a backtest branch trained one step past its look, and when the backtest
    ended at that look the step was never ledgered (found by the Ray campaign test in CI). Such a checkpoint is
    torn like any other: the step is trained again from the acknowledged one (the same step, from the same
    state and RNG)."""
    ack = max(meta.last_checkpoint_step or 0, meta.paused_at or 0, meta.start_step)
    return {s: d for s, d in complete_checkpoints(run_dir).items() if s <= ack}


def died_at(run_dir: Path, meta: RunMeta) -> int | None:
    """The step of a job killed right after it checkpointed (and evaluated, and flushed its metrics) at the step a
    pause asked for, before it could record the pause: its meta says ``running`` and its last complete checkpoint
    is the one its callback acknowledged (``last_checkpoint_step``). None for any other job."""
    if meta.status not in ("running", "interrupted", "failed") or meta.last_checkpoint_step is None:
        return None
    ckpts = complete_checkpoints(run_dir)
    done = meta.last_checkpoint_step
    if not ckpts or max(ckpts) != done or done >= meta.target_step:
        return None
    return done if done > (meta.paused_at or meta.start_step) else None
