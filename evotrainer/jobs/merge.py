"""Averaging the seeds of one backtest arm into a single checkpoint, recorded as a job of its own.

Why: after a decision the mainline continues from a branch of the arm the round adopts (PBT's "exploit",
``evotrainer.agent.mainline._keep_branch``). Every seed of that arm trained the same harness from the same parent
checkpoint, so their weights lie close together, and their plain average -- a "model soup" (Wortsman et al.
2022); WARP (Ramé et al. 2024) averages RLHF policies fine-tuned from one initialisation the same way -- keeps
what each seed learned instead of throwing all but one away. Measured before building it (bench/log/07-campaign-vs-static-baseline.md,
2026-11-25 night): on 17 arms of two demo campaigns, the average of an arm's seeds scored +0.5 points above the
seed the selection split picked, on the confirmation split.

What is averaged: every floating-point tensor of the weights (full ``model*.safetensors`` or a LoRA adapter) and
Adam's two moments in ``optimizer.pt``, so the next segment resumes with optimiser state that matches the
averaged weights. Everything else (scheduler, trainer state, config and tokenizer files) is the first source's:
the sources stopped at the same step of the same harness, so those agree. A LoRA adapter's two factors are
averaged separately, and the mean of the products B·A is not the product of the means; the seeds start from one
adapter and move little in a branch, so the two are close, and the campaign keeps the average only when it scores
no worse than every seed.

The result is a job directory like any other (``meta.json``, ``harness.yaml``, ``trainer/checkpoint-STEP``), so
``fork=NAME@STEP`` continues from it. It trained no step itself: its ``parent_run`` is the first source (whose
rollouts the lineage's evidence then follows), and ``merged_from`` names every source. It is assembled in a
hidden folder and published whole (``evotrainer.jobs.jobdir``), and a second call with the same name returns
the published one: a campaign resumed after ``kill -9`` gets the same checkpoint.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

from evotrainer.core.errors import ConfigError
from evotrainer.core.home import jobs_dir
from evotrainer.core.runmeta import RunMeta
from evotrainer.core.tracking import Tracker
from evotrainer.jobs.jobdir import publish, staging_dir
from evotrainer.jobs.lineage import CKPT, complete_checkpoints, read_meta, resolve_run, write_meta

ADAM_MOMENTS = ("exp_avg", "exp_avg_sq")


def _weight_files(ckpt: Path) -> list[str]:
    names = sorted(p.name for p in ckpt.glob("model*.safetensors"))
    return names or (["adapter_model.safetensors"] if (ckpt / "adapter_model.safetensors").is_file() else [])


def average_checkpoints(sources: list[Path], dst: Path) -> None:
    """Write into ``dst`` (a new directory) the average of the checkpoints ``sources``: weights and Adam moments
    averaged, every other file copied from the first. ConfigError when they do not have the same tensors."""
    import torch
    from safetensors.torch import load_file, save_file

    first = sources[0]
    files = _weight_files(first)
    if not files:
        raise ConfigError(f"{first}: no model*.safetensors or adapter_model.safetensors to average")
    for s in sources[1:]:
        if _weight_files(s) != files:
            raise ConfigError(f"{s} does not hold the same weight files as {first} ({', '.join(files)}): only seeds "
                              "of one arm, saved at one step, can be averaged")
    shutil.copytree(first, dst)
    for name in files:
        tensors = [load_file(str(s / name)) for s in sources]
        out = {}
        for key, t in tensors[0].items():
            if any(key not in o or o[key].shape != t.shape for o in tensors[1:]):
                raise ConfigError(f"{name}: tensor {key} differs in shape or presence between {first} and the other "
                                  "sources; they are not seeds of one model")
            out[key] = (sum(o[key].double() for o in tensors) / len(tensors)).to(t.dtype) if t.is_floating_point() \
                else t
        save_file(out, str(dst / name), metadata={"format": "pt"})
    if (first / "optimizer.pt").is_file():
        opts = [torch.load(s / "optimizer.pt", weights_only=False) for s in sources]
        state = opts[0]["state"]
        for idx, st in state.items():
            for k in ADAM_MOMENTS:
                if k in st and torch.is_tensor(st[k]):
                    st[k] = sum(o["state"][idx][k].double() for o in opts).div(len(opts)).to(st[k].dtype)
        torch.save(opts[0], dst / "optimizer.pt")


def merge_runs(home: Path, name: str, sources: list[tuple[str, int]], tags: dict[str, str] | None = None) -> Path:
    """The checkpoint of job ``name``: the average of ``sources`` ((run, step) pairs, all at one step and under
    one harness), created once. Returns the merged job's checkpoint directory."""

    if len(sources) < 2:
        raise ConfigError(f"merging needs at least two (run, step) sources, got {len(sources)}")
    steps = {step for _, step in sources}
    if len(steps) != 1:
        raise ConfigError(f"merge {name}: sources are at different steps ({sorted(steps)}); average seeds that "
                          "stopped at one step")
    (step,) = steps
    final = jobs_dir(home) / name
    if (final / "meta.json").is_file():  # made before (a campaign resumed after kill -9)
        ck = complete_checkpoints(final)
        if step not in ck:
            raise ConfigError(f"{final}: a run of that name exists without a checkpoint at step {step}; remove it or "
                              "pick another name")
        return ck[step]
    ckpts, metas = [], []
    for run, at in sources:
        d = resolve_run(home, run)
        ck = complete_checkpoints(d)
        if at not in ck:
            raise ConfigError(f"run {run} has no complete checkpoint at step {at}; available: {sorted(ck)}")
        ckpts.append(ck[at])
        metas.append(read_meta(d))
    versions = {m.harness_version for m in metas}
    if len(versions) != 1:
        raise ConfigError(f"merge {name}: the sources trained different harnesses ({sorted(map(str, versions))}); "
                          "only seeds of one arm can be averaged")
    src = metas[0]
    tmp, lock = staging_dir(jobs_dir(home), name)
    try:
        (tmp / "trainer").mkdir()
        average_checkpoints(ckpts, tmp / "trainer" / f"{CKPT}{step}")
        shutil.copy2(resolve_run(home, sources[0][0]) / "harness.yaml", tmp / "harness.yaml")
        merged_from = [{"run": run, "step": at} for run, at in sources]
        run_tags = {**(src.spec.get("tags") or {}), **(tags or {}), "evotrainer.role": "merged",
                    "evotrainer.merged_from": ",".join(run for run, _ in sources)[:5000]}
        run_id = Tracker(home).create_run(name, run_tags, {"merged_from": len(sources), "step": step})
        meta = RunMeta(
            name=name, run_id=run_id,
            # a valid job spec (the first seed's, renamed), so that `train --resume` says "finished, fork it"; the
            # steps this job trained are target_step - start_step = 0
            spec={**src.spec, "name": name, "tags": run_tags}, harness=src.harness,
            harness_version=src.harness_version, parent_harness_version=src.harness_version,
            target_step=step, start_step=step, steps_done=step, last_checkpoint_step=step,
            parent_run=sources[0][0], parent_run_id=src.run_id, parent_step=step,
            merged_from=merged_from, base_policy=src.base_policy, status="finished",
            created=datetime.now(timezone.utc).isoformat())
        write_meta(tmp, meta)
        publish(tmp, final)
    except FileExistsError:  # another process published it meanwhile: theirs stands
        shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        lock.release()
    return complete_checkpoints(final)[step]


__all__ = ["average_checkpoints", "merge_runs", "ADAM_MOMENTS"]
