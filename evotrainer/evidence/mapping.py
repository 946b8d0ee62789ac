"""Mapping a run's own names onto the evidence contract, and finding its correctness signal.

Why: the diagnostics read one set of names (the evidence contract: ``evotrainer evidence contract``), but runs
made by other tools record the same quantities under other names, and strict correctness — what separates a
hacked reward from real progress — most of all. It may be a zero-weight reward function (a monitor the
optimiser does not see), a metric logged with TRL's ``log_metric``, an extra completions column written with
``log_extra``, one of verl's ``reward_extra_info`` keys, or a column the user named. So after a reader has
read a run:

1. **The user's names first** (:class:`FieldMap`: ``--map field=column`` repeatable, a small YAML file with
   ``map:`` and ``correctness:``, or ``--correctness NAME``). A field is a rollout column of the contract
   (``correct``, ``reward``, ``length``, …) or a per-step metric (``accuracy``, ``eval/greedy_accuracy``, …);
   ``rollout:NAME`` / ``metric:NAME`` say which where a name is both (``reward``). The source is looked up as a
   rollout column, then as a TRL reward function's column (``reward_<name>``), then as a metric, then as a TRL
   reward function's metric (``rewards/<name>/mean``). A source that the run does not have is an error naming
   what it has — once the run has any evidence (a run still starting may not have written it yet).
2. **Then a plausible correctness signal under another name** (:func:`detect_correctness`), when the run has no
   ``correct`` column (and, separately, no ``accuracy`` metric). Candidates must hold only 0/1 or booleans;
   names count as correctness when a word of the name is one of :data:`CORRECT_WORDS` and none of
   :data:`NEGATING_WORDS`. In order of preference: an extra column (``log_extra``, a verl ``reward_extra_info``
   key, any other column a reader kept) with such a name; a zero-weight reward function with such a name; a
   reward function with such a name; a zero-weight 0/1 reward function of any name. Metrics: a correctness
   named metric (``log_metric``) or the chosen reward function's ``rewards/<name>/mean``.

What was used is said: ``Evidence.meta["correctness"]`` (``{"field", "source", "how"}`` per kind, shown by
``diagnose`` and ``watch``), ``meta["mapped"]`` (one line per user mapping), and, when nothing was found,
``meta["correctness_missing"]`` with what would supply it. Nothing is ever guessed from a reward's magnitude.

TRL keeps reward weights only in the pickled ``training_args.bin``, which is never loaded here; but its logged
``reward`` is the weighted sum of the ``rewards/<name>/mean`` columns, so :func:`infer_reward_weights` solves
for them by least squares over the logged steps and keeps them only when the fit is exact and determined.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, field_validator

from evotrainer.config.harness import load_yaml_model
from evotrainer.config.reward import BUILTIN_TERMS
from evotrainer.core.errors import ConfigError
from evotrainer.evidence.model import (
    CORRECT_WORDS,
    FULL_ROLLOUT_SCHEMA,
    METRIC_DOCS,
    NEGATING_WORDS,
    ROLLOUT_COLUMNS,
)

MAX_MAP_ENTRIES = 200


def _words(name: str) -> set[str]:
    low = str(name).lower()
    words = set(re.split(r"[^a-z0-9]+", low)) - {""}
    for joined in ("exact_match", "is_correct"):
        if joined in low:
            words.add(joined.replace("_", ""))
    return words


def correctness_named(name: str) -> bool:
    """Whether a name reads as strict correctness ('acc', 'is_correct', 'exact_match', 'rewards/accuracy/mean')."""
    w = _words(name)
    return bool(w & CORRECT_WORDS) and not (w & NEGATING_WORDS)


def as_bool(s: pd.Series) -> pd.Series | None:
    """The column as nullable booleans if its non-null values are all booleans, 0/1 or 'true'/'false'; else None."""
    if s.dtype.kind in "fiu":  # plain numpy numbers, most columns (a reward function's): numpy alone, per step in
        arr = s.to_numpy(dtype="float64")  # the TRL callback
        nan = np.isnan(arr)
        if nan.all() or not np.isin(arr[~nan], (0.0, 1.0)).all():
            return None
        return pd.Series(pd.arrays.BooleanArray(arr == 1.0, nan), index=s.index, name=s.name)
    vals = s.dropna()
    if not len(vals):
        return None
    if pd.api.types.is_bool_dtype(s):
        return s.astype("boolean")
    if pd.api.types.is_numeric_dtype(s):  # vectorised: nullable numbers
        return (s == 1).astype("boolean").where(s.notna(), pd.NA) if vals.isin([0, 1]).all() else None
    try:
        uniq = set(vals.map(lambda v: v.strip().lower() if isinstance(v, str) else v).unique())
    except TypeError:  # unhashable values (lists, dicts): not a boolean column
        return None
    table = {True: True, False: False, "true": True, "false": False}  # 1 == 1.0 == True and 0 == 0.0 == False
    if not all(not isinstance(v, (list, dict, np.ndarray)) and _key(v) in table for v in uniq):
        return None
    return s.map(lambda v: None if _isnull(v) else table[_key(v.strip().lower() if isinstance(v, str) else v)]
                 ).astype("boolean")


def _key(v: Any) -> Any:
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    return v


def _isnull(v: Any) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------- the user's map
class FieldMap(BaseModel):
    """A run's own names for contract fields: ``--map field=column`` (repeatable), ``--map-file FILE`` or
    ``--correctness NAME``. A YAML file holds ``map: {field: name}`` and optionally ``correctness: NAME``."""

    model_config = ConfigDict(extra="forbid")

    map: dict[str, str] = Field(
        default_factory=dict,
        description="Contract field -> the run's column or metric name, e.g. {correct: is_right, "
                    "'eval/greedy_accuracy': val_acc}. Fields: the rollout columns and per-step metrics of "
                    "`evotrainer evidence contract`; prefix 'rollout:' or 'metric:' where a name is both (reward).")
    correctness: str | None = Field(
        None, min_length=1,
        description="The run's strict-correctness signal: a 0/1 column, reward function or metric name. Fills the "
                    "rollout column 'correct' and/or the metric 'accuracy', whichever the source is.")

    @field_validator("map")
    @classmethod
    def _fields(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > MAX_MAP_ENTRIES:
            raise ValueError(f"{len(v)} entries; at most {MAX_MAP_ENTRIES}")
        allowed = contract_fields()
        for key, src in v.items():
            kind, name = split_field(key)
            if kind is None and name not in allowed["rollout"] and name not in allowed["metric"]:
                raise ValueError(f"'{key}' is not a field of the evidence contract; rollout columns: "
                                 f"{', '.join(sorted(allowed['rollout']))}; metrics: {', '.join(sorted(allowed['metric']))} "
                                 "(see `evotrainer evidence contract`)")
            if kind is not None and name not in allowed[kind]:
                raise ValueError(f"'{key}': '{name}' is not a {kind} field of the evidence contract; those are "
                                 f"{', '.join(sorted(allowed[kind]))}")
            if not isinstance(src, str) or not src.strip():
                raise ValueError(f"'{key}': the source must be a non-empty column or metric name")
        return v

    @property
    def empty(self) -> bool:
        return not self.map and not self.correctness

    @classmethod
    def load(cls, path: str | Path) -> FieldMap:

        return load_yaml_model(path, cls, "field map")

    @classmethod
    def from_options(cls, pairs: list[str] | None = None, correctness: str | None = None,
                     file: str | Path | None = None) -> FieldMap:
        """``--map-file`` first, then each ``--map field=name`` over it, then ``--correctness``; ConfigError
        naming the option on a malformed pair or an unknown field."""
        from pydantic import ValidationError

        base = cls.load(file) if file else cls()
        merged = dict(base.map)
        for pair in pairs or []:
            key, sep, src = pair.partition("=")
            if not sep or not key.strip() or not src.strip():
                raise ConfigError(f"--map {pair!r}: write FIELD=NAME, e.g. --map correct=is_right (see `evotrainer "
                                  "evidence contract` for the fields)")
            merged[key.strip()] = src.strip()
        try:
            return cls(map=merged, correctness=correctness or base.correctness)
        except ValidationError as err:
            e = err.errors()[0]
            raise ConfigError(f"--map / --map-file{f' {file}' if file else ''}: {e['msg'].removeprefix('Value error, ')}"
                              ) from None


def split_field(key: str) -> tuple[str | None, str]:
    kind, sep, name = key.partition(":")
    if sep and kind in ("rollout", "metric"):
        return kind, name
    return None, key


def contract_fields() -> dict[str, set[str]]:
    """The fields a map may name: every rollout column of the schema, and every metric the evidence model documents
    (``METRIC_DOCS``, which the contract's metrics are drawn from), the per-term reward patterns spelled out for the
    built-in terms (``rewards/correctness/mean``)."""

    metrics = {k for k in METRIC_DOCS if not any(c in k for c in "*?[")}
    metrics |= {f"rewards/{t}/{s}" for t in BUILTIN_TERMS for s in ("mean", "std")}
    return {"rollout": set(ROLLOUT_COLUMNS), "metric": metrics}


# ---------------------------------------------------------------------------------------------- applying it
def _rollout_source(r: pd.DataFrame, name: str) -> str | None:
    for c in (name, f"reward_{name}"):
        if c in r.columns and r[c].notna().any():
            return c
    return None


def _metric_source(m: pd.DataFrame, name: str) -> str | None:
    for c in (name, f"rewards/{name}/mean"):
        if c in m.columns and m[c].notna().any():
            return c
    return None


def _convert(field: str, s: pd.Series, src: str) -> pd.Series:
    """A source column converted to the contract field's type; ConfigError when it cannot be."""

    t = str(FULL_ROLLOUT_SCHEMA.field(field).type)
    if t == "bool":
        b = as_bool(s)
        if b is None:
            seen = ", ".join(repr(v) for v in list(dict.fromkeys(s.dropna().astype(str)))[:5])
            raise ConfigError(f"--map {field}={src}: '{src}' must hold booleans or 0/1 to be '{field}' (seen: {seen})")
        return b
    if t in ("int32", "int64"):
        return pd.to_numeric(s, errors="coerce").round().astype("Int64")
    if t == "double":
        return pd.to_numeric(s, errors="coerce").astype("float64")
    return s.map(lambda v: None if _isnull(v) else str(v))


def apply_field_map(ev, fmap: FieldMap | None):
    """Apply the user's names (see the module docstring); returns ``ev`` with ``meta['mapped']`` filled."""
    if fmap is None or fmap.empty:
        return ev
    r, m = ev.rollouts.copy(), ev.metrics.copy()
    has_any = len(r) > 0 or ("step" in m.columns and len(m) > 0)
    lines: list[str] = []
    entries = list(fmap.map.items())
    if fmap.correctness:
        entries.append(("correctness", fmap.correctness))
    for key, src in entries:
        kind, field = split_field(key)
        done = False
        if key == "correctness":
            targets = [("rollout", "correct"), ("metric", "accuracy")]
        else:
            targets = [(kind, field)] if kind else [(k, field) for k in ("rollout", "metric")
                                                   if field in contract_fields()[k]]
        for k, f in targets:
            if k == "rollout":
                col = _rollout_source(r, src)
                if col is None:
                    continue
                if f == "correct" and key == "correctness" and as_bool(r[col]) is None:
                    continue  # a non-0/1 column named by --correctness may still be a metric below
                r[f] = _convert(f, r[col], src).values
                lines.append(f"rollout '{f}' <- column '{col}'")
                done = True
            else:
                col = _metric_source(m, src)
                if col is None:
                    continue
                m[f] = pd.to_numeric(m[col], errors="coerce")
                lines.append(f"metric '{f}' <- metric '{col}'")
                done = True
        if not done and has_any:
            what = "--correctness" if key == "correctness" else f"--map {key}"
            cols = ", ".join(sorted(map(str, r.columns))) or "(none)"
            mets = ", ".join(sorted(str(c) for c in m.columns if c != "step")) or "(none)"
            raise ConfigError(f"{what}={src}: the run has no rollout column, reward function or metric '{src}'"
                              f"{' holding 0/1 values' if key == 'correctness' else ''}; rollout columns: {cols}; "
                              f"metrics: {mets}")
        if not done:
            lines.append(f"{key} <- '{src}' (not in the run yet)")
    meta = dict(ev.meta) if isinstance(ev.meta, dict) else {}
    meta["mapped"] = lines
    if fmap.correctness or any(split_field(k)[1] in ("correct", "accuracy") for k in fmap.map):
        meta["correctness_by_user"] = True
    return type(ev)(metrics=m, rollouts=r, source=ev.source, run=ev.run, meta=meta)


# ---------------------------------------------------------------------------------------------- detection
def detect_correctness(ev, weights: dict[str, float] | None = None):
    """Fill a missing rollout 'correct' and metric 'accuracy' from a plausible signal under another name (see the
    module docstring) and say where it came from; ``weights``: reward function name -> weight, when known."""
    r, m = ev.rollouts, ev.metrics
    meta = dict(ev.meta) if isinstance(ev.meta, dict) else {}
    weights = weights if weights is not None else (meta.get("reward_weights") or None)
    found: dict[str, dict[str, str]] = {}
    had_correct = "correct" in r.columns and r["correct"].notna().any()
    had_acc = "accuracy" in m.columns and "step" in m.columns and m["accuracy"].notna().any()
    by_user = bool(meta.get("correctness_by_user"))
    how = "mapped by the user" if by_user else "recorded by the run"
    if had_correct:
        found["rollout"] = {"field": "correct", "source": "rollout column 'correct'", "how": how}
    if had_acc:
        found["metric"] = {"field": "accuracy", "source": "metric 'accuracy'", "how": how}
    chosen_fn = None
    if not had_correct and len(r):
        best = _best_rollout_candidate(r, weights)
        if best is not None:
            col, why, fn = best
            r = r.copy()
            r["correct"] = as_bool(r[col]).values
            found["rollout"] = {"field": "correct", "source": f"rollout column '{col}'", "how": why}
            chosen_fn = fn
    elif had_correct:
        chosen_fn = None
    if not had_acc and "step" in m.columns and len(m):
        best_m = _best_metric_candidate(m, chosen_fn)
        if best_m is not None:
            col, why = best_m
            m = m.copy()
            m["accuracy"] = pd.to_numeric(m[col], errors="coerce")
            found["metric"] = {"field": "accuracy", "source": f"metric '{col}'", "how": why}
    meta["correctness"] = found or None
    if not found:
        meta["correctness_missing"] = (
            "no strict-correctness signal: no rollout column 'correct', no metric 'accuracy', and no 0/1 column, "
            "reward function or metric named like correct / accuracy / exact_match; the diagnostics that need it "
            "(reward_hacking, overfitting, too_hard / too_easy fall back to reward > 0) say 'not enough evidence'. "
            "Supply it with --correctness NAME or --map correct=COLUMN")
    else:
        meta.pop("correctness_missing", None)
    return type(ev)(metrics=m, rollouts=r, source=ev.source, run=ev.run, meta=meta)


def _best_rollout_candidate(r: pd.DataFrame, weights: dict[str, float] | None):
    """(column, how it was chosen, reward function name or None) of the best candidate, or None."""
    fn_cols = {c: c[len("reward_"):] for c in r.columns if str(c).startswith("reward_")}
    skip = {"step", "prompt", "completion", "prompt_id", "group_id", "run_id", "reward", "advantage", "truncated",
            "well_formed", "turns", "length", "n_candidates", "difficulty"}
    cands: list[tuple[int, str, str, str | None]] = []
    for c in r.columns:
        if c in skip or as_bool(r[c]) is None:
            continue
        fn = fn_cols.get(c)
        w = (weights or {}).get(fn) if fn is not None else None
        named = correctness_named(fn if fn is not None else c)
        if fn is None and named:
            cands.append((0, c, f"a 0/1 column named '{c}' (a log_extra column or reward_extra_info key)", None))
        elif fn is not None and named and w == 0:
            cands.append((1, c, f"the zero-weight 0/1 reward function '{fn}'", fn))
        elif fn is not None and named:
            cands.append((2, c, f"the 0/1 reward function '{fn}'" + (f" (weight {w:g})" if w is not None else ""), fn))
        elif fn is not None and w == 0:
            cands.append((3, c, f"the zero-weight 0/1 reward function '{fn}' (a monitor the optimiser does not see)",
                          fn))
    if not cands:
        return None
    cands.sort(key=lambda x: x[0])
    _, col, why, fn = cands[0]
    others = [c for _, c, _, _ in cands[1:]]
    return col, why + (f"; other candidates: {', '.join(others)}" if others else ""), fn


def _best_metric_candidate(m: pd.DataFrame, fn: str | None):
    def ok(c: str) -> bool:
        v = pd.to_numeric(m[c], errors="coerce").dropna()
        return len(v) > 0 and bool(((v >= 0) & (v <= 1)).all())

    if fn is not None and f"rewards/{fn}/mean" in m.columns and ok(f"rewards/{fn}/mean"):
        return f"rewards/{fn}/mean", f"the mean of the reward function '{fn}' that gives 'correct'"
    plain = [c for c in m.columns if c != "step" and not str(c).startswith(("eval", "rewards/", "val"))
             and correctness_named(c) and ok(c)]
    if plain:
        return plain[0], f"a metric named '{plain[0]}' (log_metric) with values in [0, 1]"
    fns = [c for c in m.columns if str(c).startswith("rewards/") and str(c).endswith("/mean")
           and correctness_named(str(c)[len("rewards/"):-len("/mean")]) and ok(c)]
    if fns:
        return fns[0], f"the mean of the reward function '{fns[0][len('rewards/'):-len('/mean')]}'"
    return None


def infer_reward_weights(metrics: pd.DataFrame, names: list[str]) -> dict[str, float] | None:
    """TRL's reward weights from its logs: ``reward`` = sum of w_i x ``rewards/<name_i>/mean`` at every logged step.
    Least squares over the steps where all are logged; None unless the weights are identified (at least two more
    steps than functions, and the functions' means vary independently over them) and the fit exact (residual < 1e-4 of the reward's scale). Weights are rounded to 4
    decimals, so a monitor reads as exactly 0."""
    cols = [f"rewards/{n}/mean" for n in names]
    if not names or "reward" not in metrics.columns or any(c not in metrics.columns for c in cols):
        return None
    df = metrics[["reward", *cols]].apply(pd.to_numeric, errors="coerce").dropna()
    if len(df) < len(names) + 2:
        return None
    a, y = df[cols].to_numpy(dtype="float64"), df["reward"].to_numpy(dtype="float64")
    if np.linalg.matrix_rank(a - a.mean(axis=0), tol=1e-9) < len(names):
        return None  # the functions' means do not vary independently over the steps: the weights are not identified
    w, _, rank, _ = np.linalg.lstsq(a, y, rcond=None)
    if rank < len(names):
        return None
    scale = max(1.0, float(np.abs(y).max()))
    if float(np.abs(a @ w - y).max()) > 1e-4 * scale:
        return None
    return {n: round(float(x), 4) + 0.0 for n, x in zip(names, w)}
