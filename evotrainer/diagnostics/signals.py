"""Shared pieces of the built-in diagnostics: per-step series, early/recent windows, per-group aggregates.

Every diagnostic reads one of two shapes of evidence: a per-step series (a TRL metric, or the same
quantity aggregated from the rollouts by step) or the rollout rows of a window of steps (per GRPO group,
or per completion). The helpers here do those reads once, vectorised, so that a diagnostic's ``analyze``
is only its decision rule.

Windows are over the distinct steps a series actually has: ``recent`` is the last ``max(min_steps,
ceil(frac * n))`` of them and ``early`` the first as many. When a run is shorter than two windows the
two overlap; diagnostics that compare early with recent check ``Windows.disjoint`` first.

The decision side is shared too: ``grade`` maps a value to a severity against warning/critical levels, and
``window_confidence`` / ``share_confidence`` turn the margin past a threshold and the steps behind it into a
finding's confidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from evotrainer.core.domain import SEVERITY_RANK, Example, Severity
from evotrainer.diagnostics.base import examples_from
from evotrainer.evidence.model import Evidence

# -------------------------------------------------------------------------------------------- params


class BaseParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WindowParams(BaseParams):
    """The early/recent windows most diagnostics judge on."""

    window_frac: float = Field(0.25, gt=0.0, le=0.5,
                               description="Share of the run's steps in the early and in the recent window.")
    min_window_steps: int = Field(5, ge=1, le=10_000,
                                  description="Fewest steps a window holds (when the run has them).")


class ShareParams(WindowParams):
    """A share judged on the recent window, with warning/critical levels."""

    warning: float = Field(0.5, ge=0.0, le=1.0, description="Share at or above which the finding is a warning.")
    critical: float = Field(1.0, ge=0.0, le=1.0, description="Share at or above which the finding is critical.")


# -------------------------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class Window:
    """Steps ``lo..hi`` (inclusive) holding ``n`` distinct steps of the series it was cut from."""

    lo: int
    hi: int
    n: int

    @property
    def steps(self) -> tuple[int, int]:
        return (self.lo, self.hi)

    def mask(self, steps: pd.Series | np.ndarray) -> np.ndarray:
        s = np.asarray(steps)
        return (s >= self.lo) & (s <= self.hi)

    def of(self, series: pd.Series) -> pd.Series:
        """The part of a step-indexed series inside the window."""
        return series[self.mask(series.index)]


@dataclass(frozen=True)
class Windows:
    early: Window
    recent: Window
    total: int  # distinct steps in the series

    @property
    def disjoint(self) -> bool:
        return self.early.hi < self.recent.lo


def windows(steps, frac: float, min_steps: int) -> Windows | None:
    """Early and recent windows over the distinct, non-null ``steps``; None when there are none."""
    s = pd.Series(np.asarray(steps)).dropna()
    u = np.unique(s.to_numpy())
    if not len(u):
        return None
    k = min(len(u), max(int(min_steps), math.ceil(frac * len(u))))
    return Windows(early=Window(int(u[0]), int(u[k - 1]), k), recent=Window(int(u[-k]), int(u[-1]), k), total=len(u))


def window_params(p: BaseModel) -> tuple[float, int]:
    return p.window_frac, p.min_window_steps  # type: ignore[attr-defined]


def between(s: pd.Series, lo: int, hi: int) -> pd.Series:
    """The part of a step-indexed series in steps ``lo..hi`` (inclusive)."""
    return s[(s.index >= lo) & (s.index <= hi)]


# -------------------------------------------------------------------------------------------- series


def as_float(s: pd.Series) -> pd.Series:
    """Numbers, booleans (possibly object dtype with None) or numeric strings as float64, nulls as NaN."""
    try:
        return s.astype("float64")
    except (TypeError, ValueError):
        return pd.to_numeric(s, errors="coerce").astype("float64")


def has_column(df: pd.DataFrame, col: str) -> bool:
    return col in df.columns and bool(df[col].notna().any())


def metric_series(metrics: pd.DataFrame, name: str, *, keep_nonfinite: bool = False) -> pd.Series | None:
    """A metric as a float series indexed by (int) step, sorted; None when absent or all null.

    Rows without a value (e.g. an eval-only row) are dropped; so is ±inf unless ``keep_nonfinite``.
    Duplicate steps (foreign readers) are averaged.
    """
    if name not in metrics.columns or "step" not in metrics.columns:
        return None
    s = pd.Series(as_float(metrics[name]).to_numpy(), index=as_float(metrics["step"]).to_numpy())
    s = s[s.index.notna()]
    if not keep_nonfinite:
        s = s[np.isfinite(s.to_numpy())]
    s = s.dropna()
    if s.empty:
        return None
    s.index = s.index.astype("int64")
    if not s.index.is_unique:
        s = s.groupby(level=0).mean()
    return s.sort_index()


def rollout_series(rollouts: pd.DataFrame, col: str, how: str = "mean") -> pd.Series | None:
    """A rollout column aggregated by step (``how``: a pandas groupby reduction); None when absent."""
    if "step" not in rollouts.columns or not has_column(rollouts, col):
        return None
    v = as_float(rollouts[col])
    ok = v.notna().to_numpy() & rollouts["step"].notna().to_numpy()
    s = v[ok].groupby(rollouts["step"][ok].astype("int64").to_numpy()).agg(how)
    s = s[np.isfinite(s.to_numpy())]
    return None if s.empty else s.sort_index()


@dataclass(frozen=True)
class StepSeries:
    values: pd.Series  # indexed by step
    source: str  # "metric 'x'" or "rollouts 'y'"


def metric_or_rollout(ev: Evidence, metric: str | None, rollout_col: str | None, how: str = "mean") -> StepSeries | None:
    """The metric when the run logged it, else the rollout column aggregated by step, else None."""
    if metric:
        s = metric_series(ev.metrics, metric)
        if s is not None:
            return StepSeries(s, f"metric '{metric}'")
    if rollout_col:
        s = rollout_series(ev.rollouts, rollout_col, how)
        if s is not None:
            return StepSeries(s, f"rollouts '{rollout_col}'")
    return None


def recent_mean(s: pd.Series, p: BaseModel) -> tuple[Windows, float]:
    """Windows over a (non-empty) step series and its recent mean."""
    w = windows(s.index, *window_params(p))
    return w, float(w.recent.of(s).mean())


def early_recent(s: pd.Series, p: BaseModel) -> tuple[Windows, float, float] | None:
    """Windows over a step series and its early and recent means; None unless the windows are disjoint."""
    w = windows(s.index, *window_params(p))
    if w is None or not w.disjoint:
        return None
    return w, float(w.early.of(s).mean()), float(w.recent.of(s).mean())


def slope(x, y) -> float:
    """Least-squares slope of y on x (NaN-free input); NaN with fewer than 2 distinct x."""
    x = np.asarray(x, dtype="float64")
    y = np.asarray(y, dtype="float64")
    if len(x) < 2 or np.ptp(x) == 0:
        return float("nan")
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / (xc * xc).sum())


def series_slope(s: pd.Series) -> float:
    return slope(s.index.to_numpy(), s.to_numpy())


def change_over(s: pd.Series, lo: int, hi: int) -> float:
    """Fitted change of a step series over steps ``lo..hi``: its least-squares slope there × (hi - lo);
    NaN with fewer than 2 steps inside."""
    return series_slope(between(s, lo, hi)) * (hi - lo)


def change_se_over(s: pd.Series, lo: int, hi: int) -> float:
    """Standard error of :func:`change_over` (scipy's least-squares slope error, n - 2 degrees of freedom, × (hi -
    lo)): how far noise alone could move the fitted change. 0 for a series on a line; NaN with fewer than 3 steps."""
    from scipy.stats import linregress

    w = between(s, lo, hi)
    if len(w) < 3 or np.ptp(w.index.to_numpy()) == 0:
        return float("nan")
    err = linregress(w.index.to_numpy(dtype="float64"), w.to_numpy(dtype="float64")).stderr
    return float(err) * (hi - lo) if np.isfinite(err) else 0.0  # a constant series: no noise at all


# -------------------------------------------------------------------------------------------- rollouts


def rows_in(rollouts: pd.DataFrame, window: Window, columns: list[str] | None = None,
            max_n: int | None = None, seed: int = 0) -> pd.DataFrame:
    """Rollout rows whose step lies in ``window``: only ``columns`` that exist (plus ``step``), when given;
    at most ``max_n`` rows drawn uniformly and reproducibly (in their original order) when given.

    Sampling happens on row positions before any column is copied, so a text check on a 1M-row run
    touches only the strings it reads.
    """
    idx = np.flatnonzero(window.mask(rollouts["step"].to_numpy()))
    if max_n is not None and len(idx) > max_n:
        idx = np.sort(np.random.default_rng(seed).choice(idx, size=max_n, replace=False))
    cols = list(rollouts.columns) if columns is None else [c for c in dict.fromkeys(["step", *columns]) if c in rollouts.columns]
    return rollouts.iloc[idx][cols]


def rollout_windows(rollouts: pd.DataFrame, p: BaseModel) -> Windows | None:
    if "step" not in rollouts.columns or not len(rollouts):
        return None
    return windows(rollouts["step"].to_numpy(), *window_params(p))


def group_keys(rollouts: pd.DataFrame) -> list[str] | None:
    """Columns that identify a GRPO group: (step, group_id), else (step, prompt_id); None when neither."""
    if "step" not in rollouts.columns:
        return None
    for col in ("group_id", "prompt_id"):
        if has_column(rollouts, col):
            return ["step", col]
    return None


def group_stats(rows: pd.DataFrame, values: dict[str, pd.Series]) -> pd.DataFrame:
    """Per group of ``rows``: ``n`` (completions with a value) and ``<name>_min`` / ``<name>_max`` / ``<name>_mean``.

    ``values`` maps a name to a float series aligned with ``rows`` (e.g. reward, strict success). Groups
    with fewer than 2 valued completions are dropped: a group of one has no variance to lose.
    """
    keys = group_keys(rows)
    if keys is None or not len(rows):
        return pd.DataFrame(columns=["step", "n"])
    frame = rows[keys].copy()
    for name, v in values.items():
        frame[name] = v.to_numpy()
    first = next(iter(values))
    g = frame.groupby(keys, sort=False, observed=True)
    agg = g[list(values)].agg(["min", "max", "mean"])
    agg.columns = [f"{a}_{b}" for a, b in agg.columns]
    agg["n"] = g[first].count()
    agg = agg.reset_index()
    return agg[agg["n"] >= 2]


REWARD_COLUMNS = ("reward_correctness", "reward")  # the correctness reward, else the total
SUCCESS_COLUMNS = ("correct", *REWARD_COLUMNS)
EXAMPLE_COLUMNS = ["run_id", "group_id", "prompt", "completion", "reward", "correct"]  # what an Example shows


def first_column(df: pd.DataFrame, columns) -> str | None:
    """The first of ``columns`` that ``df`` has with data; None when it has none."""
    return next((c for c in columns if has_column(df, c)), None)


def success(rows: pd.DataFrame) -> tuple[pd.Series, str] | None:
    """Per-completion success as 0/1 floats: strict ``correct``, else correctness reward > 0, else reward > 0."""
    if has_column(rows, "correct"):
        return as_float(rows["correct"]), "strict correct"
    col = first_column(rows, REWARD_COLUMNS)
    if col is None:
        return None
    v = as_float(rows[col])
    return (v > 0).astype("float64").where(v.notna()), f"{col} > 0"


def group_examples(rows: pd.DataFrame, groups: pd.DataFrame, limit: int = 3) -> list[Example]:
    """One completion from each of the latest ``limit`` groups of ``groups`` (a ``group_stats`` frame)."""
    keys = group_keys(rows)
    if keys is None or not len(groups):
        return []
    latest = groups.sort_values("step", kind="stable").tail(limit)
    near = rows[rows["step"].isin(latest["step"]).to_numpy()]
    hit = pd.MultiIndex.from_frame(near[keys]).isin(pd.MultiIndex.from_frame(latest[keys]))
    return recent_examples(near[hit].drop_duplicates(keys), limit)


def recent_examples(rows: pd.DataFrame, limit: int = 3) -> list[Example]:
    """Up to ``limit`` rollout examples, most recent step first."""
    if rows is None or not len(rows):
        return []
    if "step" in rows.columns:
        rows = rows.sort_values("step", kind="stable")
    return examples_from(rows.tail(limit).iloc[::-1], limit)


def examples_in(ev: Evidence, window: Window | tuple[int, int] | None, limit: int = 3) -> list[Example]:
    """Examples from the rollouts of a step range (the latest ones), or none when there are no rollouts."""
    r = ev.rollouts
    if window is None or not len(r) or "step" not in r.columns:
        return []
    lo, hi = window.steps if isinstance(window, Window) else window
    steps = r["step"].to_numpy()
    idx = np.flatnonzero((steps >= lo) & (steps <= hi))
    if not len(idx):
        return []
    last = idx[np.argsort(steps[idx], kind="stable")[-limit:]]
    return recent_examples(r.iloc[last], limit)


# -------------------------------------------------------------------------------------------- decisions


def grade(value: float | None, warning: float | None, critical: float | None = None, *, higher: bool = True,
          strict: bool = False) -> Severity | None:
    """'critical' / 'warning' / None for ``value`` against thresholds (``higher``: bigger is worse; ``strict``:
    a value equal to a threshold is not past it). Critical is checked first; a missing or NaN value grades
    None (±inf compares like any number)."""
    if value is None or np.isnan(value):
        return None

    def past(t: float | None) -> bool:
        if t is None:
            return False
        if strict:
            return value > t if higher else value < t
        return value >= t if higher else value <= t

    if past(critical):
        return "critical"
    return "warning" if past(warning) else None


def worst(*severities: Severity | None) -> Severity | None:
    """The most severe of several rules' outcomes (None when none fired)."""
    return max([s for s in severities if s], key=SEVERITY_RANK.__getitem__, default=None)


def confidence(value: float, threshold: float, full: float, support: float = 1.0) -> float:
    """Confidence in a finding: 0.5 at the threshold, 1.0 at ``full`` (a value well past it), scaled by
    ``support`` in [0, 1] (how much evidence backs it: 0 → ×0.6, 1 → ×1). Works for either direction."""
    span = full - threshold
    margin = 1.0 if span == 0 else (value - threshold) / span
    margin = min(1.0, max(0.0, margin))
    support = min(1.0, max(0.0, support))
    return round((0.5 + 0.5 * margin) * (0.6 + 0.4 * support), 3)


def support(n: float, full: float) -> float:
    """``n`` supporting items out of ``full`` that give full support, clipped to [0, 1]."""
    return 0.0 if full <= 0 else min(1.0, max(0.0, n / full))


def window_confidence(value: float, threshold: float, full: float, window: Window, p: BaseModel) -> float:
    """``confidence`` of a finding judged on ``window``: full support at two minimal windows of steps."""
    return confidence(value, threshold, full, support(window.n, 2 * p.min_window_steps))  # type: ignore[attr-defined]


def share_confidence(share: float, p: ShareParams, window: Window) -> float:
    """Confidence in a share past ``p.warning``: full at ``p.critical`` (or 0.3 past the warning when the
    critical level is not above it)."""
    full = p.critical if p.critical > p.warning else min(1.0, p.warning + 0.3)
    return window_confidence(share, p.warning, full, window, p)
