"""**TRL** (``GRPOTrainer`` output dir, ``log_completions=True``): ``completions/completions_{step:05d}.parquet``
with columns ``step, prompt, completion, <reward function names>, <log_extra columns>, advantage`` (prompt and
completion are strings or ``[{"role", "content"}]`` conversations), and ``trainer_state.json`` (top level
or in the latest ``checkpoint-*/``) whose ``log_history`` gives the metrics. Reward columns are told from
extra columns by the ``rewards/<name>/mean`` metric keys. ``reward`` is the *unweighted* sum of the reward
columns: TRL keeps ``reward_weights`` only in the pickled ``training_args.bin``, which we do not load.
``group_id`` is ``<step>:<k>`` with k counting prompt changes (TRL writes each prompt's completions
consecutively). ``reward`` is the *weighted* sum instead when the weights can be solved from ``log_history``
(:func:`evotrainer.evidence.mapping.infer_reward_weights`; ``meta["reward_weights"]``). Extra columns (``log_extra``) are
kept under their own names. ``correct`` is whatever :func:`evotrainer.evidence.mapping.detect_correctness` finds (a 0/1
``log_extra`` column or reward function named like correctness, a zero-weight 0/1 reward function); otherwise it
is left out.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from evotrainer.core.errors import RunNotFound
from evotrainer.core.files import read_text
from evotrainer.evidence.mapping import FieldMap, infer_reward_weights
from evotrainer.evidence.model import (
    LENGTH_KEYS,
    TRUNCATED_KEYS,
    Evidence,
    is_step,
)
from evotrainer.evidence.readers.base import (
    FileCache,
    Reader,
    _cached,
    _empty_rollouts,
    _finish,
    _metrics_frame,
    _read_json_object,
    _read_parquets,
    _resolve,
    _Skips,
    _text,
)


def _trl_state_file(path: Path) -> Path | None:
    """The newest trainer_state.json: top level or latest checkpoint-N/, whichever has the larger global_step."""
    cands = [path / "trainer_state.json"]
    ckpts = [d for d in path.glob("checkpoint-*") if d.name.split("-", 1)[1].isdigit()]
    if ckpts:
        cands.append(max(ckpts, key=lambda d: int(d.name.split("-", 1)[1])) / "trainer_state.json")
    found = [c for c in cands if os.path.lexists(c)]  # one that is no regular file is read, and listed unreadable
    found.sort(key=_global_step, reverse=True)  # stable: the top-level file wins a tie
    return found[0] if found else None


def _global_step(state_file: Path) -> int:
    try:
        return int(json.loads(read_text(state_file)).get("global_step", -1))
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        return -1


def read_trl_dir(path: str | Path, fields: FieldMap | None = None, cache: FileCache | None = None) -> Evidence:
    path = Path(path)
    skips = _Skips()
    state_file = _trl_state_file(path)
    files = sorted((path / "completions").glob("completions_*.parquet"))
    if state_file is None and not files:
        raise RunNotFound(f"{path} is not a TRL output dir: no trainer_state.json (top level or checkpoint-*/) "
                          "and no completions/completions_*.parquet (set log_completions=True)")
    history: Any = []
    if state_file is not None:
        history = _read_json_object(state_file, skips).get("log_history", [])
        if not isinstance(history, list):
            skips.file(state_file, f"log_history is not a list (a {type(history).__name__})")
            history = []
    rows: dict[int, dict[str, Any]] = {}
    for e in history:  # train and eval_* entries merge by step; the final train_runtime summary is dropped
        step = e.get("step") if isinstance(e, dict) else None
        if is_step(step) and "train_runtime" not in e:
            rows.setdefault(step, {"step": step}).update({k: v for k, v in e.items() if k != "step"})
    names = list(dict.fromkeys(k[len("rewards/"):-len("/mean")] for r in rows.values() for k in r
                               if k.startswith("rewards/") and k.endswith("/mean")))
    metrics = _metrics_frame(rows)
    weights = infer_reward_weights(metrics, names)
    frames = []
    for f in files:
        raw = next(iter(_read_parquets([f], skips, cache)), None)
        if raw is None:
            continue
        if {"step", "prompt", "completion"} <= set(raw.columns):  # one file is one logged step: converted alone
            frames.append(_cached(cache, f, f"trl:{names}:{weights}", lambda raw=raw: _trl_rollouts(raw, names, weights)))
        else:
            skips.file(f, "missing step/prompt/completion columns")
    rollouts = pd.concat(frames, ignore_index=True) if frames else _empty_rollouts()
    meta = {"path": str(path), "trainer_state": str(state_file) if state_file else None,
            "reward_functions": names, **skips.meta()}
    if weights is not None:
        meta["reward_weights"] = weights
        meta["reward_weights_from"] = "solved from trainer_state.json: reward = sum of weight x rewards/<name>/mean"
    return _resolve(Evidence(metrics=metrics, rollouts=rollouts, source="trl", run=path.name, meta=meta), fields,
                    weights)


def _trl_rollouts(raw: pd.DataFrame, names: list[str], weights: dict[str, float] | None = None) -> pd.DataFrame:
    """One TRL completions table in our columns: reward functions as ``reward_<name>``, ``reward`` their
    weighted sum (``weights``) or, without weights, their plain sum; other columns kept under their names."""
    known = set(LENGTH_KEYS + TRUNCATED_KEYS) | {"step", "advantage"}
    rcols = [n for n in names if n in raw] or [  # without trainer_state.json: the float columns
        c for c in raw.columns if c not in known and pd.api.types.is_float_dtype(raw[c])]
    out = pd.DataFrame({"step": pd.to_numeric(raw["step"], errors="coerce").fillna(-1).astype("int64"),
                        "prompt": raw["prompt"].map(_text),
                        "completion": raw["completion"].map(_text)})
    for c in rcols:
        out[f"reward_{c}"] = pd.to_numeric(raw[c], errors="coerce")
    if rcols:
        w = [weights.get(c, 1.0) if weights else 1.0 for c in rcols]
        out["reward"] = (out[[f"reward_{c}" for c in rcols]] * w).sum(axis=1, min_count=1)
    if "advantage" in raw:
        out["advantage"] = pd.to_numeric(raw["advantage"], errors="coerce")
    return _finish(out, raw, consecutive=True, exclude=[*rcols, "step", "prompt", "completion", "advantage"])


class TrlReader(Reader):
    kind = "trl"

    def matches(self, path: Path) -> bool:
        return bool(_trl_state_file(path) or any((path / "completions").glob("completions_*.parquet")))

    def read(self, path: Path, fields: FieldMap | None = None, cache: FileCache | None = None) -> Evidence:
        return read_trl_dir(path, fields, cache)
