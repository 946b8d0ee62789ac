"""**verl**: ``trainer.rollout_data_dir`` holds ``{step}.jsonl`` (``RayPPOTrainer._dump_generations``: one
object per completion with ``input, output, gts, score, step`` plus the reward function's
``reward_extra_info`` keys, e.g. ``acc``, kept as columns under their own names, and a 0/1 one named like
correctness becomes ``correct``); the file logger (``trainer.logger=[file]``, ``FileLogger`` in
``verl/utils/tracking.py``) writes ``{"step": N, "data": {metric: value}}`` lines to
``$VERL_FILE_LOGGER_PATH`` or ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``. A verl run dir is a
directory holding either, directly or one level down. verl dumps rollouts *after* ``balance_batch``
reorders the batch, so groups are identical prompts within a step (not consecutive rows). Metric names
mapped onto TRL's (all other verl keys are kept under their own names):

==============================  =========================  ==============================================
verl                            TRL                        why it is the same quantity
==============================  =========================  ==============================================
critic/score/mean               reward                     reward-function score before any KL penalty
                                                           (critic/rewards/mean is after the in-reward
                                                           KL penalty: kept as is). verl logs no std.
actor/entropy                   entropy                    mean token entropy of the rollout policy
actor/kl_loss                   kl                         KL(policy ‖ reference), as TRL's ``kl``;
actor/reward_kl_penalty         kl (if no kl_loss)         same, in-reward variant. actor/ppo_kl is
                                                           KL(old ‖ new policy): not TRL's kl, kept.
actor/pg_loss                   policy_loss                policy-gradient term of the loss
actor/grad_norm                 grad_norm
actor/lr                        learning_rate
actor/pg_clipfrac               clip_ratio/region_mean     share of tokens where the clipped branch won
response_length/mean|min|max    completions/{mean,min,max}_length
response_length/clip_ratio      completions/clipped_ratio  share of responses at max length
timing_s/step                   step_time                  seconds of the whole step
==============================  =========================  ==============================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from evotrainer.core.errors import RunNotFound
from evotrainer.core.files import first_line
from evotrainer.evidence.mapping import FieldMap
from evotrainer.evidence.model import (
    VERL_METRICS,
    Evidence,
    is_step,
)
from evotrainer.evidence.readers.base import (
    _NUMBERED,
    FileCache,
    Reader,
    _cached_jsonl,
    _empty_rollouts,
    _finish,
    _metrics_frame,
    _resolve,
    _Skips,
    _text,
)


def _numbered(d: Path) -> list[Path]:
    return sorted((f for f in d.glob("*.jsonl") if _NUMBERED.fullmatch(f.name)), key=lambda f: int(f.stem))


def _verl_rollout_dir(path: Path) -> Path | None:
    """``path`` if it holds {step}.jsonl dumps, else a subdirectory that does (``rollout*`` first, ``val*`` never)."""
    if _numbered(path):
        return path
    subs = sorted((d for d in path.iterdir() if d.is_dir() and not d.name.lower().startswith("val")),
                  key=lambda d: ("rollout" not in d.name.lower(), d.name))
    return next((d for d in subs if _numbered(d)), None)


def _verl_metric_files(path: Path) -> list[Path]:
    """File-logger outputs in ``path`` or one level down: .jsonl whose first object has ``step`` and ``data``."""
    out = []
    for f in sorted([*path.glob("*.jsonl"), *path.glob("*/*.jsonl")]):
        if _NUMBERED.fullmatch(f.name):
            continue
        try:
            rec = json.loads(first_line(f))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(rec, dict) and "step" in rec and isinstance(rec.get("data"), dict):
            out.append(f)
    return out


def read_verl_dir(path: str | Path, fields: FieldMap | None = None, cache: FileCache | None = None) -> Evidence:
    path = Path(path)
    skips = _Skips()
    rdir = _verl_rollout_dir(path) if path.is_dir() else None
    mfiles = _verl_metric_files(path) if path.is_dir() else []
    if rdir is None and not mfiles:
        raise RunNotFound(f"{path} is not a verl run dir: no {{step}}.jsonl rollout dumps (trainer.rollout_data_dir) "
                          "and no file-logger .jsonl with {\"step\": N, \"data\": {...}} lines, here or one level down")
    rows: dict[int, dict[str, Any]] = {}
    for f in mfiles:
        for rec in _cached_jsonl(f, skips, cache):
            if not isinstance(rec.get("data"), dict) or not is_step(rec.get("step")):
                skips.entries.append(f"{f}: a line without an integer step in [0, 2**53) and a data object")
                continue
            data = {k: v for k, v in rec["data"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            for src, dst in VERL_METRICS:
                if src in data and dst not in data:
                    data[dst] = data.pop(src)
            rows.setdefault(rec["step"], {"step": rec["step"]}).update(data)
    records = []
    for f in _numbered(rdir) if rdir else []:
        for rec in _cached_jsonl(f, skips, cache):
            records.append({"step": int(f.stem), **rec})
    if records:
        raw = pd.DataFrame(records)
        out = pd.DataFrame({"step": pd.to_numeric(raw["step"], errors="coerce").fillna(-1).astype("int64"),
                            "prompt": raw.get("input", pd.Series([""] * len(raw))).map(_text),
                            "completion": raw.get("output", pd.Series([""] * len(raw))).map(_text)})
        if "score" in raw:
            out["reward"] = pd.to_numeric(raw["score"], errors="coerce")
        rollouts = _finish(out, raw, consecutive=False, exclude=["step", "input", "output", "score"])
    else:
        rollouts = _empty_rollouts()
    meta = {"path": str(path), "rollout_dir": str(rdir) if rdir else None,
            "metric_files": [str(f) for f in mfiles], **skips.meta()}
    return _resolve(Evidence(metrics=_metrics_frame(rows), rollouts=rollouts, source="verl", run=path.name, meta=meta),
                    fields)


class VerlReader(Reader):
    kind = "verl"

    def matches(self, path: Path) -> bool:
        return bool(_verl_rollout_dir(path) or _verl_metric_files(path))

    def read(self, path: Path, fields: FieldMap | None = None, cache: FileCache | None = None) -> Evidence:
        return read_verl_dir(path, fields, cache)
