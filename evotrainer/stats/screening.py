"""Offline pre-screening: what a reward or data change would do to the training signal, from recorded rollouts.

Why: the EvoTrainer paper's own "backtest" re-scores cached rollouts before any training step is spent. A
change to how rollouts are scored or which prompts are drawn acts first through the GRPO signal: which
groups have any reward spread (a dead group has none and gives no gradient), how much advantage there is,
how much of it pushes up completions that are not strictly correct, and how much of the batch is kept. All
of that can be computed from the last segment's rollout records (``evotrainer.evidence.model``: every completion
with its reward terms, strict correctness, length, truncation, group and TRL's advantage) under the current
harness and under the changed one. A change whose predicted effect on the signal is nil cannot change the
first update, and at best changes later ones through the policy's drift, so it is not worth a backtest; the
campaign records it as ``screened`` with these numbers (and the library counts it as evidence).

Screenable changes (``SCREENABLE``): reward term weights (correctness, format, overlong, repetition,
efficiency), the matching rule and test set of the correctness term (single-turn tasks: completions are
re-verified against the problems of the segment's pool), the overlong buffer and repetition n-gram,
advantage scaling (``grpo.scale_rewards``), group size (``grpo.num_generations``: the dead share from each
prompt's observed pass rate, p^G + (1−p)^G), DAPO's overlong filtering (``grpo.mask_truncated_completions``:
truncated completions leave the loss), segment-level dynamic sampling (``data.drop_all_correct`` /
``drop_all_wrong``), difficulty-targeted sampling and its target, and difficulty ranges whose levels the
segment saw. Anything else (learning rate, temperature, loss type…) needs new rollouts and is not screened.

Signal measures (:class:`Signal`), per completion of the segment's recorded steps:

- ``dead_share``: share of groups whose total rewards are all equal (TRL's ``frac_reward_zero_std``);
- ``advantage_mass``: mean |advantage| (TRL's formula: r − group mean, divided by the group's or the
  batch's standard deviation + 1e-4 unless ``scale_rewards`` is none);
- ``misaligned_share``: share of the positive advantage mass on completions that are not strictly correct
  (the reward/strict-correctness gap an exploit opens);
- ``kept_share``: expected share of the batch that reaches the loss: drawn from prompts the data rules keep
  (sampling weight of the segment's prompts relative to uniform), and not masked as truncated.

Nil (``Screening.nil``): the advantage vector moves by less than ``ADV_TOL`` of its norm, the dead share
by less than ``DEAD_TOL``, the misaligned share by less than ``DEAD_TOL`` and the kept share by less than
``KEPT_TOL``. The estimate re-scores the current harness first and checks it against the advantages TRL
recorded; when they disagree (rollouts written by another version, a multi-turn reward paid by the
environment) the change is reported as not screenable rather than guessed at.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from evotrainer.config.harness import HarnessSpec
from evotrainer.core.errors import ConfigError
from evotrainer.core.runmeta import read_run_meta
from evotrainer.evidence.model import prompt_pass_stats, read_rollouts
from evotrainer.training.data import build_pool, selection_weights

ADV_TOL = 0.01  # relative change of the advantage vector below which the update is the same
DEAD_TOL = 0.005  # absolute change of the dead / misaligned share
KEPT_TOL = 0.01  # absolute change of the kept share
SELF_CHECK_TOL = 1e-3  # max |re-scored − recorded advantage| for the re-scoring to be trusted

SCREENABLE = frozenset({
    "reward.correctness.weight", "reward.format.weight", "reward.overlong.weight", "reward.repetition.weight",
    "reward.efficiency.weight", "reward.correctness.match", "reward.correctness.tests", "reward.overlong.buffer",
    "reward.repetition.ngram", "grpo.scale_rewards", "grpo.num_generations", "grpo.mask_truncated_completions",
    "data.drop_all_correct",
    "data.drop_all_wrong", "data.sampling", "data.target_pass_rate", "data.difficulty",
})


class Signal(BaseModel):
    """The GRPO training signal of a batch (see the module docstring)."""

    dead_share: float = Field(..., description="Share of groups with no reward spread (no gradient).")
    advantage_mass: float = Field(..., description="Mean |advantage| per completion.")
    misaligned_share: float = Field(..., description="Share of positive advantage mass on completions not strictly correct.")
    kept_share: float = Field(1.0, description="Expected share of the batch from prompts the data rules keep.")


class Screening(BaseModel):
    """What a change would do to the last segment's training signal."""

    knob: str
    value: Any
    screenable: bool = Field(..., description="False when the effect cannot be computed from recorded rollouts.")
    reason: str = Field("", description="Why it is not screenable, or what was computed.")
    rollouts: int = Field(0, description="Completions re-scored.")
    steps: tuple[int, int] | None = Field(None, description="First and last recorded step used.")
    current: Signal | None = None
    predicted: Signal | None = None
    advantage_change: float | None = Field(None, description="||A' − A|| / ||A||: how much the update would move.")

    @property
    def nil(self) -> bool:
        if not self.screenable or self.current is None or self.predicted is None:
            return False
        c, p = self.current, self.predicted
        return ((self.advantage_change or 0.0) < ADV_TOL and abs(p.dead_share - c.dead_share) < DEAD_TOL
                and abs(p.misaligned_share - c.misaligned_share) < DEAD_TOL and abs(p.kept_share - c.kept_share) < KEPT_TOL)

    def describe(self) -> str:
        if not self.screenable:
            return f"not screened: {self.reason}"
        c, p = self.current, self.predicted
        assert c is not None and p is not None
        return (f"on {self.rollouts} recorded rollouts (steps {self.steps[0]}-{self.steps[1]}): dead groups "
                f"{c.dead_share:.3f} → {p.dead_share:.3f}, advantage mass {c.advantage_mass:.3f} → "
                f"{p.advantage_mass:.3f} (update moves {self.advantage_change:.1%}), misaligned advantage "
                f"{c.misaligned_share:.3f} → {p.misaligned_share:.3f}, batch kept {c.kept_share:.3f} → {p.kept_share:.3f}"
                + ("; predicted effect on the signal: nil" if self.nil else ""))


# ---------------------------------------------------------------------------------------------- scoring
def _terms(df: pd.DataFrame, h: HarnessSpec, correctness: np.ndarray) -> np.ndarray:
    """Total reward per completion under ``h`` (the weighted sum TRL computes)."""
    r, g = h.reward, h.grpo
    total = r.correctness.weight * correctness
    if r.format.weight > 0:
        total = total + r.format.weight * df["well_formed"].to_numpy(dtype=float)
    if r.overlong.weight > 0:
        from evotrainer.training.rewards import overlong_penalty

        pen = [overlong_penalty(int(n), bool(t), g.max_completion_length, r.overlong.buffer)
               for n, t in zip(df["length"], df["truncated"])]
        total = total + r.overlong.weight * np.asarray(pen, dtype=float)
    if r.repetition.weight > 0:
        from evotrainer.training.rewards import repetition_share

        total = total - r.repetition.weight * np.asarray([repetition_share(c, r.repetition.ngram)
                                                          for c in df["completion"]], dtype=float)
    if r.efficiency.weight > 0:
        total = total - r.efficiency.weight * df["length"].to_numpy(dtype=float) / g.max_completion_length
    return total


def _advantages(rewards: np.ndarray, groups: np.ndarray, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """TRL's GRPO advantages (sum_then_normalize) and a per-completion 'group is dead' flag."""
    s = pd.Series(rewards)
    mean = s.groupby(groups).transform("mean").to_numpy()
    std_g = s.groupby(groups).transform("std").to_numpy()  # ddof=1, vectorised (a lambda per group cost 2 s a round)
    adv = rewards - mean
    if scale == "group":
        adv = adv / (std_g + 1e-4)
    elif scale == "batch":
        adv = adv / (float(np.std(rewards, ddof=1)) + 1e-4)
    return np.nan_to_num(adv), np.isclose(np.nan_to_num(std_g), 0.0)


def _signal(adv: np.ndarray, dead: np.ndarray, groups: np.ndarray, correct: np.ndarray, weights: np.ndarray,
            kept: float) -> Signal:
    w = weights / weights.sum() if weights.sum() > 0 else np.full(len(weights), 1 / max(1, len(weights)))
    g = pd.DataFrame({"g": groups, "dead": dead, "w": w}).groupby("g").agg(dead=("dead", "first"), w=("w", "sum"))
    pos = np.clip(adv, 0, None) * w
    return Signal(dead_share=float((g["dead"] * g["w"]).sum() / g["w"].sum()),
                  advantage_mass=float((np.abs(adv) * w).sum()),
                  misaligned_share=float(pos[~correct].sum() / pos.sum()) if pos.sum() > 0 else 0.0,
                  kept_share=float(kept))


class _Rescorer:
    """The segment's rollouts, re-scorable under any harness (problems rebuilt from the segment's pool)."""

    def __init__(self, df: pd.DataFrame, harness: HarnessSpec, task: Any, pool: dict[str, Any] | None):
        self.df, self.harness, self.task, self.pool = df.reset_index(drop=True), harness, task, pool
        self.groups = self.df["group_id"].to_numpy()
        self.correct = self.df["correct"].to_numpy(dtype=bool)
        self._verdicts: list[Any] | None = None

    def verdicts(self) -> list[Any] | None:
        if self._verdicts is None and self.pool is not None:
            out = []
            for pid, text in zip(self.df["prompt_id"], self.df["completion"]):
                p = self.pool.get(pid)
                if p is None:
                    return None
                out.append(self.task.verify(p, text))
            self._verdicts = out
        return self._verdicts

    def correctness(self, h: HarnessSpec) -> np.ndarray | None:
        c, cur = h.reward.correctness, self.harness.reward.correctness
        if (c.match, c.tests) == (cur.match, cur.tests) and self.df["reward_correctness"].notna().all():
            return self.df["reward_correctness"].to_numpy(dtype=float)
        vs = self.verdicts()
        if vs is None:
            return None
        from evotrainer.training.rewards import correctness_value

        return np.asarray([correctness_value(v, c.match, c.tests) for v in vs], dtype=float)

    def advantages(self, h: HarnessSpec) -> tuple[np.ndarray, np.ndarray] | None:
        corr = self.correctness(h)
        if corr is None:
            return None
        return _advantages(_terms(self.df, h, corr), self.groups, h.grpo.scale_rewards)


def _prompt_weights(df: pd.DataFrame, h: HarnessSpec, pool_size: int | None = None) -> tuple[np.ndarray, float]:
    """Per-completion sampling weight of its prompt under ``h``'s data rules (relative to uniform), and the
    expected kept share, using the segment's own pass statistics as the next segment would.

    The next segment draws from the whole pool (``pool_size`` prompts), not only from the ones this segment saw:
    a prompt it never drew has no statistics, so every rule keeps it at weight 1, and (the segment's prompts being
    a uniform draw of the pool) it looks on average like one of the segment's prompts under uniform sampling. So
    each seen prompt stands for itself under the rule plus an equal share of the unseen ones: weight w + U/S for
    S seen and U unseen prompts. With a pool far larger than a segment, a segment-level filter therefore changes
    little, which is what the jobs do (bench/log/07-campaign-vs-static-baseline.md, 2026-11-26)."""
    from types import SimpleNamespace


    stats = prompt_pass_stats(df[["prompt_id", "step", "correct"]])
    w, _ = selection_weights([SimpleNamespace(id=pid) for pid in stats["prompt_id"]], h, stats)
    seen = len(w)
    unseen = max((h.data.pool_size if pool_size is None else pool_size) - seen, 0)
    by_id = dict(zip(stats["prompt_id"], w))
    per = np.asarray([by_id[p] + (unseen / seen if seen else 0.0) for p in df["prompt_id"]], dtype=float)
    kept = (sum(x > 0 for x in w) + unseen) / (seen + unseen) if seen + unseen else 1.0
    return per, float(kept)


# ---------------------------------------------------------------------------------------------- entry point
def screen(harness: HarnessSpec, knob: str, value: Any, rollouts: pd.DataFrame, task: Any,
           pool: dict[str, Any] | None = None, pool_size: int | None = None) -> Screening:
    """Predict what ``knob → value`` would do to the signal of ``rollouts`` recorded under ``harness``.

    ``pool`` maps prompt ids to the segment's problems (needed to re-verify under another matching rule);
    :func:`screen_run` builds it from a job directory. ``pool_size``: how many distinct prompts the next segment
    draws from (the job's ``data_report.json``; default ``data.pool_size``), for the data rules.
    """
    out = Screening(knob=knob, value=value, screenable=False)
    if knob not in SCREENABLE:
        return out.model_copy(update={"reason": f"{knob} acts through new rollouts (not computable from recorded ones)"})
    if not len(rollouts) or rollouts["advantage"].isna().all():
        return out.model_copy(update={"reason": "the segment recorded no rollouts"})
    if "turns" in rollouts.columns and rollouts["turns"].notna().any():
        return out.model_copy(update={"reason": "a multi-turn task's environment pays the reward; not re-scored"})
    try:
        new = harness.with_knob(knob, value)
    except ConfigError as err:
        return out.model_copy(update={"reason": str(err)})
    df = rollouts.reset_index(drop=True)
    rs = _Rescorer(df, harness, task, pool)
    base = rs.advantages(harness)
    if base is None:
        return out.model_copy(update={"reason": "the segment's problems could not be rebuilt"})
    adv0, dead0 = base
    if float(np.max(np.abs(adv0 - df["advantage"].to_numpy(dtype=float)))) > SELF_CHECK_TOL:
        return out.model_copy(update={"reason": "re-scoring the segment under its own harness does not reproduce "
                                                "the advantages TRL recorded"})
    w0, kept0 = _prompt_weights(df, harness, pool_size) if knob.startswith("data.") else (np.ones(len(df)), 1.0)
    current = _signal(adv0, dead0, rs.groups, rs.correct, w0, kept0)
    steps = (int(df["step"].min()), int(df["step"].max()))
    if knob.startswith("data."):
        if knob == "data.difficulty":
            seen = set(df["difficulty"].astype(int))
            lo, hi = value
            if not set(range(int(lo), int(hi) + 1)) <= seen:
                return out.model_copy(update={"reason": f"levels {lo}..{hi} include some the segment never drew "
                                                        f"(it saw {sorted(seen)})"})
            w1 = np.asarray([1.0 if lo <= d <= hi else 0.0 for d in df["difficulty"]])
            kept1 = float(w1.mean())
        else:
            w1, kept1 = _prompt_weights(df, new, pool_size)
        if w1.sum() == 0:
            w1, kept1 = np.ones(len(df)), 1.0  # every prompt filtered: the job falls back to uniform
        predicted = _signal(adv0, dead0, rs.groups, rs.correct, w1, kept1)
        # the update a batch drawn under the new weights would make, relative to the current one
        change = float(np.linalg.norm(adv0 * (w1 / w1.mean() - w0 / w0.mean())) / max(np.linalg.norm(adv0), 1e-12))
    elif knob == "grpo.mask_truncated_completions":
        trunc = df["truncated"].to_numpy(dtype=bool)
        masked = trunc if value else np.zeros(len(df), dtype=bool)
        was = trunc if harness.grpo.mask_truncated_completions else np.zeros(len(df), dtype=bool)
        current = current.model_copy(update={"kept_share": float(1 - was.mean())})
        adv_in = np.where(was, 0.0, adv0)
        adv1 = np.where(masked, 0.0, adv0)
        predicted = current.model_copy(update={"advantage_mass": float(np.abs(adv1).mean()),
                                               "kept_share": float(1 - masked.mean())})
        change = float(np.linalg.norm(adv1 - adv_in) / max(np.linalg.norm(adv_in), 1e-12))
    elif knob == "grpo.num_generations":
        p = pd.Series(rs.correct.astype(float)).groupby(df["prompt_id"].to_numpy()).mean()
        g_new, g_old = int(value), harness.grpo.num_generations
        dead = lambda G: float(np.mean(p.to_numpy() ** G + (1 - p.to_numpy()) ** G))  # noqa: E731
        ratio = (1 - dead(g_new)) / max(1 - dead(g_old), 1e-12)
        predicted = current.model_copy(update={"dead_share": current.dead_share + dead(g_new) - dead(g_old),
                                               "advantage_mass": current.advantage_mass * ratio})
        change = abs(ratio - 1)
    else:
        res = rs.advantages(new)
        if res is None:
            return out.model_copy(update={"reason": "the segment's problems could not be rebuilt to re-verify"})
        adv1, dead1 = res
        predicted = _signal(adv1, dead1, rs.groups, rs.correct, np.ones(len(df)), 1.0)
        change = float(np.linalg.norm(adv1 - adv0) / max(np.linalg.norm(adv0), 1e-12))
    if not math.isfinite(change):
        change = 1.0
    return Screening(knob=knob, value=value, screenable=True, reason="re-scored", rollouts=len(df), steps=steps,
                     current=current, predicted=predicted, advantage_change=round(change, 6))


def screen_run(run_dir: Path, harness: HarnessSpec, knob: str, value: Any, task: Any, last_steps: int | None = None) -> Screening:
    """:func:`screen` on a job directory's rollouts (its last ``last_steps`` steps), rebuilding its pool."""


    df = read_rollouts(run_dir)
    if last_steps is not None and len(df):
        df = df[df["step"] > df["step"].max() - last_steps]
    pool = pool_size = None
    report = run_dir / "data_report.json"
    if knob.startswith("data.") and report.is_file():
        try:
            pool_size = int(json.loads(report.read_text(encoding="utf-8"))["pool"])
        except (OSError, ValueError, KeyError, TypeError):
            pool_size = None  # unreadable: the harness's data.pool_size stands in
    if knob in ("reward.correctness.match", "reward.correctness.tests"):
        meta = read_run_meta(run_dir)
        if meta is None or not isinstance(meta.raw.get("harness"), dict) or "seed" not in meta.spec:
            raise ConfigError(f"{run_dir / 'meta.json'}: no readable job record with its harness and seed, which "
                              f"screening {knob} needs (it re-grades the run's own problems)")
        try:
            job_harness = HarnessSpec.model_validate(meta.raw["harness"])
        except ValueError as err:  # pydantic's ValidationError is one
            raise ConfigError(f"{run_dir / 'meta.json'}: the recorded harness is not valid ({str(err).splitlines()[0]})"
                              ) from None
        # the job's own pool: a fork's is its lineage's (evotrainer.jobs.runner records pool_seed)
        pool = {p.id: p for p in build_pool(task, job_harness, int(meta.raw.get("pool_seed", meta.spec["seed"])))}
    return screen(harness, knob, value, df, task, pool, pool_size)
