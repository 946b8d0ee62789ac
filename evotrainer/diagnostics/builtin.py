"""The built-in diagnostics: one per symptom of ``symptoms.SYMPTOMS`` that rollout evidence can show.

Each reads a per-step series (a TRL metric, or the same quantity aggregated from the rollouts when the
metric is missing) or the rollout rows of the recent window, and applies a thresholded rule whose
defaults keep a healthy GRPO run quiet: accuracy climbing from ~40% to ~80%, entropy easing from ~0.5 to
~0.3 nats, stable lengths, a few all-correct / all-wrong groups, grad-norm fluctuating ×2-3 and reward
noise of ±0.05 per step produce no warning or critical finding.

Findings name the steps they cover (the recent window, or the range where the trigger was seen), carry the
numbers and thresholds that triggered them, and up to three rollout examples when rollouts exist.

Cost: everything per step or per group is vectorised (pandas groupby). Text checks (``repetition``,
``echo``, ``answer_spraying`` without ``n_candidates``, empty completions in ``length_collapse``) scan only
the recent window and only a uniform sample of at most ``max_texts`` completions (5,000 by default: the
standard error of a share estimated from 5,000 draws is ≤ 0.007), so their cost does not grow with the run.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections import Counter
from functools import lru_cache

import numpy as np
import pandas as pd
from pydantic import Field

from evotrainer.diagnostics.base import SEVERITY_RANK, Diagnostic, Finding, Severity
from evotrainer.diagnostics.signals import (
    EXAMPLE_COLUMNS,
    SUCCESS_COLUMNS,
    BaseParams,
    StepSeries,
    Window,
    WindowParams,
    as_float,
    confidence,
    early_recent,
    examples_in,
    group_examples,
    group_keys,
    group_stats,
    has_column,
    metric_or_rollout,
    metric_series,
    recent_examples,
    rollout_windows,
    rows_in,
    series_slope,
    success,
    support,
    windows,
)
from evotrainer.evidence import Evidence

# ------------------------------------------------------------------------------------------------ base


class _Builtin(Diagnostic):
    """Shared decision helpers; not a diagnostic itself."""

    def not_enough(self, needs: str) -> list[Finding]:
        return [self.finding("info", f"not enough evidence: needs {needs}", confidence=0.0)]

    @staticmethod
    def grade(value: float, warning: float, critical: float | None = None, *, higher: bool = True) -> Severity | None:
        """'critical' / 'warning' / None for ``value`` against thresholds (``higher``: bigger is worse)."""
        if value is None or not np.isfinite(value):
            return None

        def past(t: float | None) -> bool:
            return t is not None and (value >= t if higher else value <= t)

        if past(critical):
            return "critical"
        return "warning" if past(warning) else None


class ShareParams(WindowParams):
    """A share judged on the recent window, with warning/critical levels."""

    warning: float = Field(0.5, ge=0.0, le=1.0, description="Share at or above which the finding is a warning.")
    critical: float = Field(1.0, ge=0.0, le=1.0, description="Share at or above which the finding is critical.")


def _share_conf(value: float, p: ShareParams, n_steps: int) -> float:
    full = p.critical if p.critical > p.warning else min(1.0, p.warning + 0.3)
    return confidence(value, p.warning, full, support(n_steps, 2 * p.min_window_steps))


def _recent_share(ev: Evidence, p: WindowParams, metric: str, rollout_col: str):
    """(series, windows, recent mean) of a per-step share, metric first; None when neither exists."""
    s = metric_or_rollout(ev, metric, rollout_col)
    if s is None:
        return None
    w = windows(s.values.index, p.window_frac, p.min_window_steps)
    return s, w, float(w.recent.of(s.values).mean())


# ------------------------------------------------------------------------------------------------ groups


class DeadGroups(_Builtin):
    name = "dead_groups"
    version = "1"
    symptom = "dead_groups"
    signal = ("Share of GRPO groups whose rewards are all equal over the recent window: TRL's "
              "frac_reward_zero_std, or the reward spread per group in the rollouts.")
    literature = ("DAPO, arXiv 2503.14476 (dynamic sampling: groups with all-equal rewards have zero advantage "
                  "and no gradient); Skywork-OR1, arXiv 2505.22312 (online filtering of zero-advantage groups).")

    class Params(ShareParams):
        warning: float = Field(0.6, ge=0.0, le=1.0, description="Dead-group share at or above which it is a warning.")
        critical: float = Field(0.85, ge=0.0, le=1.0, description="Dead-group share at or above which it is critical.")
        tolerance: float = Field(1e-9, ge=0.0, le=1.0,
                                 description="Reward spread (max - min) within a group at or below which it is dead.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        s = metric_series(ev.metrics, "frac_reward_zero_std")
        groups = rows = None
        if s is not None:
            w = windows(s.index, p.window_frac, p.min_window_steps)
            share, source = float(w.recent.of(s).mean()), "metric 'frac_reward_zero_std'"
        else:
            got = self._rollout_groups(ev)
            if got is None:
                return self.not_enough("metric 'frac_reward_zero_std' or rollouts with 'reward' and 'group_id'")
            groups, rows, w = got
            share, source = float(groups["dead"].mean()), "rollouts (reward spread per group)"
        sev = self.grade(share, p.warning, p.critical)
        if sev is None:
            return []
        if groups is None and (got := self._rollout_groups(ev)) is not None:
            groups, rows, _ = got
        examples = group_examples(rows, groups[groups["dead"]]) if groups is not None else []
        return [self.finding(
            sev, f"{share:.0%} of GRPO groups in steps {w.recent.lo}-{w.recent.hi} have all-equal rewards "
                 f"({source}), so they contribute no gradient. Filter or resample such groups (DAPO dynamic "
                 "sampling), or move the task difficulty toward the policy's current level.",
            confidence=_share_conf(share, p, w.recent.n), steps=w.recent.steps, examples=examples,
            metrics={"dead_group_share": share, "warning": p.warning, "critical": p.critical, "steps": w.recent.n})]

    def _rollout_groups(self, ev: Evidence):
        """(per-group table with a 'dead' column, the recent rows, windows) from the rollouts, or None."""
        r = ev.rollouts
        w = rollout_windows(r, self.params)
        if w is None or not has_column(r, "reward") or group_keys(r) is None:
            return None
        rows = rows_in(r, w.recent, [*group_keys(r), "reward", *EXAMPLE_COLUMNS])
        groups = group_stats(rows, {"reward": as_float(rows["reward"])})
        if not len(groups):
            return None
        groups["dead"] = (groups["reward_max"] - groups["reward_min"]) <= self.params.tolerance
        return groups, rows, w


class _GroupOutcome(_Builtin):
    """Share of groups in the recent window whose completions all succeeded (``all_ok``) or all failed."""

    all_ok: bool

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        r = ev.rollouts
        w = rollout_windows(r, p)
        if w is None or group_keys(r) is None or not any(has_column(r, c) for c in SUCCESS_COLUMNS):
            return self.not_enough("rollouts with 'correct' (or 'reward') and 'group_id'")
        rows = rows_in(r, w.recent, [*group_keys(r), *SUCCESS_COLUMNS, *EXAMPLE_COLUMNS])
        ok_series, source = success(rows)
        groups = group_stats(rows, {"ok": ok_series})
        if not len(groups):
            return self.not_enough("GRPO groups of at least 2 completions in the recent window")
        hit = groups["ok_min"] == 1 if self.all_ok else groups["ok_max"] == 0
        share = float(hit.mean())
        sev = self.grade(share, p.warning, p.critical)
        if sev is None:
            return []
        what = "all correct" if self.all_ok else "all wrong"
        return [self.finding(
            sev, f"{share:.0%} of GRPO groups in steps {w.recent.lo}-{w.recent.hi} are {what} (by {source}), "
                 f"so they carry no learning signal. {self.advice}",
            confidence=_share_conf(share, p, w.recent.n), steps=w.recent.steps,
            examples=group_examples(rows, groups[hit]),
            metrics={f"{'all_correct' if self.all_ok else 'all_wrong'}_share": share, "groups": len(groups),
                     "warning": p.warning, "critical": p.critical})]


class TooHard(_GroupOutcome):
    name = "too_hard"
    version = "1"
    symptom = "too_hard"
    all_ok = False
    signal = ("Share of GRPO groups in the recent window where every completion is wrong (strict 'correct', "
              "else correctness reward or reward <= 0).")
    literature = ("DAPO, arXiv 2503.14476 (dynamic sampling of groups with accuracy 0); Skywork-OR1, arXiv "
                  "2505.22312 (offline and online filtering of prompts with pass rate 0).")
    advice = "Lower the task difficulty or add easier prompts until the policy succeeds sometimes."

    class Params(ShareParams):
        warning: float = Field(0.7, ge=0.0, le=1.0, description="All-wrong group share at or above which it is a warning.")
        critical: float = Field(0.9, ge=0.0, le=1.0, description="All-wrong group share at or above which it is critical.")


class TooEasy(_GroupOutcome):
    name = "too_easy"
    version = "1"
    symptom = "too_easy"
    all_ok = True
    signal = ("Share of GRPO groups in the recent window where every completion is correct (strict 'correct', "
              "else correctness reward or reward > 0).")
    literature = ("DAPO, arXiv 2503.14476 (dynamic sampling of groups with accuracy 1); Skywork-OR1, arXiv "
                  "2505.22312 (filtering prompts with pass rate 1).")
    advice = "Raise the difficulty or drop solved prompts: compute is being spent on what is already learned."

    class Params(ShareParams):
        warning: float = Field(0.7, ge=0.0, le=1.0, description="All-correct group share at or above which it is a warning.")
        critical: float = Field(1.0, ge=0.0, le=1.0,
                                description="All-correct group share at or above which it is critical (1.0: only when every group is solved).")


# ------------------------------------------------------------------------------------------------ entropy


class _EntropyShift(_Builtin):
    requires_metrics = ("entropy",)

    def shift(self, ev: Evidence):
        """(windows, early mean, recent mean) of the entropy metric, or None for a run shorter than two windows."""
        return early_recent(metric_series(ev.metrics, "entropy"), self.params)


class EntropyCollapse(_EntropyShift):
    name = "entropy_collapse"
    version = "1"
    symptom = "entropy_collapse"
    signal = "Mean policy entropy (TRL 'entropy') of the recent window against the early window, and an absolute floor."
    literature = ("The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models, arXiv 2505.22617; "
                  "DAPO, arXiv 2503.14476 (clip-higher against entropy collapse); Skywork-OR1, arXiv 2505.22312; "
                  "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective RL for LLM Reasoning, "
                  "arXiv 2506.01939.")

    class Params(WindowParams):
        ratio: float = Field(0.25, gt=0.0, lt=1.0, description="Warning when recent mean < ratio × early mean (and below the floor).")
        critical_ratio: float = Field(0.1, gt=0.0, lt=1.0, description="Critical when recent mean < critical_ratio × early mean (and below the floor).")
        floor: float = Field(0.15, ge=0.0, description="Absolute entropy (nats/token) the recent mean must also be below.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        er = self.shift(ev)
        if er is None:
            return self.not_enough(f"at least {2 * p.min_window_steps} steps of metric 'entropy'")
        w, early, recent = er
        ratio = recent / early if early > 0 else float("inf")
        if recent >= p.floor:
            return []
        sev = "critical" if ratio < p.critical_ratio else "warning" if ratio < p.ratio else None
        if sev is None:
            return []
        return [self.finding(
            sev, f"Policy entropy fell from {early:.3f} to {recent:.3f} nats/token ({ratio:.0%} of its start): "
                 "sampling has become near-deterministic and exploration has stopped. Try clip-higher (a larger "
                 "epsilon_high), an entropy bonus, or a higher sampling temperature.",
            confidence=confidence(ratio, p.ratio, p.critical_ratio, support(w.recent.n, 2 * p.min_window_steps)),
            steps=w.recent.steps, examples=examples_in(ev, w.recent),
            metrics={"early_entropy": early, "recent_entropy": recent, "ratio": ratio, "ratio_threshold": p.ratio,
                     "critical_ratio": p.critical_ratio, "floor": p.floor})]


class EntropyBlowup(_EntropyShift):
    name = "entropy_blowup"
    version = "1"
    symptom = "entropy_blowup"
    signal = "Mean policy entropy (TRL 'entropy') of the recent window against the early window, and an absolute level."
    literature = ("Skywork-OR1, arXiv 2505.22312 (entropy loss can make entropy explode; adaptive entropy control); "
                  "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models, arXiv 2505.22617.")

    class Params(WindowParams):
        ratio: float = Field(2.0, gt=1.0, description="Warning when recent mean > ratio × early mean (and above the level).")
        critical_ratio: float = Field(4.0, gt=1.0, description="Critical when recent mean > critical_ratio × early mean (and above the level).")
        level: float = Field(1.5, ge=0.0, description="Absolute entropy (nats/token) the recent mean must also exceed.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        er = self.shift(ev)
        if er is None:
            return self.not_enough(f"at least {2 * p.min_window_steps} steps of metric 'entropy'")
        w, early, recent = er
        if recent <= p.level:
            return []
        ratio = recent / early if early > 0 else float("inf")
        sev = "critical" if ratio > p.critical_ratio else "warning" if ratio > p.ratio else None
        if sev is None:
            return []
        return [self.finding(
            sev, f"Policy entropy rose from {early:.3f} to {recent:.3f} nats/token (×{ratio:.1f}): completions are "
                 "drifting toward noise. Lower or anneal the entropy coefficient, lower the learning rate, or "
                 "tighten clipping.",
            confidence=confidence(min(ratio, 1e9), p.ratio, p.critical_ratio, support(w.recent.n, 2 * p.min_window_steps)),
            steps=w.recent.steps, examples=examples_in(ev, w.recent),
            metrics={"early_entropy": early, "recent_entropy": recent, "ratio": min(ratio, 1e9),
                     "ratio_threshold": p.ratio, "critical_ratio": p.critical_ratio, "level": p.level})]


# ------------------------------------------------------------------------------------------------ lengths


class Truncation(_Builtin):
    name = "truncation"
    version = "1"
    symptom = "truncation"
    signal = ("Share of completions truncated at max_completion_length in the recent window (TRL "
              "'completions/clipped_ratio', or the rollouts' 'truncated').")
    literature = "DAPO, arXiv 2503.14476 (overlong filtering and soft overlong punishment)."

    class Params(ShareParams):
        warning: float = Field(0.2, ge=0.0, le=1.0, description="Truncated share at or above which it is a warning.")
        critical: float = Field(0.5, ge=0.0, le=1.0, description="Truncated share at or above which it is critical.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        got = _recent_share(ev, p, "completions/clipped_ratio", "truncated")
        if got is None:
            return self.not_enough("metric 'completions/clipped_ratio' or rollout column 'truncated'")
        s, w, share = got
        sev = self.grade(share, p.warning, p.critical)
        if sev is None:
            return []
        examples = []
        if has_column(ev.rollouts, "truncated"):
            rows = rows_in(ev.rollouts, w.recent, ["truncated", *EXAMPLE_COLUMNS])
            examples = recent_examples(rows[as_float(rows["truncated"]).to_numpy() == 1])
        return [self.finding(
            sev, f"{share:.0%} of completions in steps {w.recent.lo}-{w.recent.hi} hit max_completion_length "
                 f"({s.source}); their rewards judge unfinished text. Raise max_completion_length, add the soft "
                 "overlong penalty, or mask truncated completions from the loss.",
            confidence=_share_conf(share, p, w.recent.n), steps=w.recent.steps, examples=examples,
            metrics={"truncated_share": share, "warning": p.warning, "critical": p.critical})]


class LengthCollapse(_Builtin):
    name = "length_collapse"
    version = "1"
    symptom = "length_collapse"
    signal = ("Mean completion length of the recent window against the early window (TRL "
              "'completions/mean_length' or rollouts 'length'), and the share of empty/whitespace-only completions.")
    literature = ("Understanding R1-Zero-Like Training: A Critical Perspective (Dr. GRPO), arXiv 2503.20783 "
                  "(GRPO's length normalisation biases response length).")

    class Params(WindowParams):
        ratio: float = Field(0.35, gt=0.0, lt=1.0, description="Warning when recent mean length < ratio × early mean length.")
        critical_ratio: float = Field(0.15, gt=0.0, lt=1.0, description="Critical when recent mean length < critical_ratio × early mean.")
        min_early_length: float = Field(16.0, ge=0.0,
                                        description="The ratio rule applies only when the early mean is at least this many tokens (short-answer tasks legitimately shrink from a few tokens).")
        empty_warning: float = Field(0.3, ge=0.0, le=1.0, description="Share of empty/whitespace-only completions at or above which it is a warning.")
        empty_critical: float = Field(0.6, ge=0.0, le=1.0, description="Share of empty/whitespace-only completions at or above which it is critical.")
        max_texts: int = Field(5000, ge=100, le=20_000, description="Most recent-window completions sampled for the empty check.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        lengths = metric_or_rollout(ev, "completions/mean_length", "length")
        empty = self._empty(ev)
        if lengths is None and empty is None:
            return self.not_enough("metric 'completions/mean_length' or rollout columns 'length' or 'completion'")
        metrics: dict[str, float] = {}
        sev_ratio = sev_empty = None
        conf = []
        steps = None
        er = early_recent(lengths.values, p) if lengths is not None else None
        if er is not None:
            w, early, recent = er
            ratio = recent / early if early > 0 else 1.0
            metrics |= {"early_mean_length": early, "recent_mean_length": recent, "ratio": ratio,
                        "ratio_threshold": p.ratio, "critical_ratio": p.critical_ratio}
            if early >= p.min_early_length:
                sev_ratio = self.grade(ratio, p.ratio, p.critical_ratio, higher=False)
                conf.append(confidence(ratio, p.ratio, p.critical_ratio, support(w.recent.n, 2 * p.min_window_steps)))
                steps = w.recent.steps
        rows = None
        if empty is not None:
            share, rows, w_r = empty
            metrics |= {"empty_share": share, "empty_warning": p.empty_warning, "empty_critical": p.empty_critical}
            sev_empty = self.grade(share, p.empty_warning, p.empty_critical)
            if sev_empty:
                conf.append(confidence(share, p.empty_warning, p.empty_critical, support(w_r.recent.n, 2 * p.min_window_steps)))
                steps = steps or w_r.recent.steps
        sev = max([s for s in (sev_ratio, sev_empty) if s], key=SEVERITY_RANK.__getitem__, default=None)
        if sev is None:
            return []
        parts = []
        if sev_ratio:
            parts.append(f"mean length fell from {metrics['early_mean_length']:.1f} to {metrics['recent_mean_length']:.1f} tokens")
        if sev_empty:
            parts.append(f"{metrics['empty_share']:.0%} of recent completions are empty")
        examples = recent_examples(rows[rows["_empty"]]) if rows is not None and sev_empty else examples_in(ev, steps)
        return [self.finding(
            sev, "Completions are collapsing: " + " and ".join(parts) + ". Check for a reward that favours short "
                 "output (a length-normalised loss, a penalty that empty answers avoid) and use a "
                 "length-unbiased loss (Dr. GRPO) or a minimum-length/format reward.",
            confidence=max(conf), steps=steps, examples=examples, metrics=metrics)]

    def _empty(self, ev: Evidence):
        r = ev.rollouts
        w = rollout_windows(r, self.params)
        if w is None:
            return None
        if has_column(r, "completion"):
            rows = rows_in(r, w.recent, EXAMPLE_COLUMNS, max_n=self.params.max_texts)
            rows = rows.assign(_empty=rows["completion"].fillna("").str.strip().str.len().to_numpy() == 0)
        elif has_column(r, "length"):
            rows = rows_in(r, w.recent, ["length", *EXAMPLE_COLUMNS])
            rows = rows.assign(_empty=as_float(rows["length"]).to_numpy() == 0)
        else:
            return None
        return float(rows["_empty"].mean()) if len(rows) else 0.0, rows, w


# ------------------------------------------------------------------------------------------------ text


def repeated_ngram_share(text: str, n: int, window: int) -> float:
    """1 - unique/total of the character n-grams in the last ``window`` characters of ``text``."""
    s = text[-window:]
    total = len(s) - n + 1
    if total < 2:
        return 0.0
    return 1.0 - len({s[i : i + n] for i in range(total)}) / total


@lru_cache(maxsize=16)
def _run_pattern(max_unit: int, repeats: int) -> re.Pattern:
    return re.compile(r"(.{2,%d}?)\1{%d,}" % (max_unit, repeats - 1), re.S)


def has_repeated_run(text: str, max_unit: int, repeats: int, min_chars: int) -> bool:
    """A unit of 2..``max_unit`` characters (not one repeated character) repeated ``repeats``+ times in a row."""
    for m in _run_pattern(max_unit, repeats).finditer(text):
        if len(m.group(0)) >= min_chars and len(set(m.group(1).strip())) >= 2:
            return True
    return False


class Repetition(_Builtin):
    name = "repetition"
    version = "1"
    symptom = "repetition"
    signal = ("Share of sampled recent-window completions whose tail is an n-gram loop: repeated character "
              "n-gram share above a threshold, or a short unit repeated k times in a row.")
    literature = ("The Curious Case of Neural Text Degeneration, arXiv 1904.09751; Neural Text Generation with "
                  "Unlikelihood Training, arXiv 1908.04319.")

    class Params(ShareParams):
        warning: float = Field(0.2, ge=0.0, le=1.0, description="Share of looping completions at or above which it is a warning.")
        critical: float = Field(0.5, ge=0.0, le=1.0, description="Share of looping completions at or above which it is critical.")
        ngram: int = Field(8, ge=2, le=64, description="Character n-gram size of the repetition share.")
        ngram_threshold: float = Field(0.5, gt=0.0, lt=1.0,
                                       description="A completion loops when 1 - unique/total of its n-grams reaches this (normal prose and code: p99 ≈ 0.45 at n=8).")
        min_chars: int = Field(40, ge=8, description="Completions shorter than this (characters) are not scored by the n-gram share.")
        window_chars: int = Field(400, ge=50, le=20_000,
                                  description="Only the last this many characters are scored (loops run to the end; keeps the cost bounded).")
        run_repeats: int = Field(6, ge=3, le=100, description="A unit repeated this many times in a row also counts as a loop.")
        run_max_unit: int = Field(30, ge=2, le=200, description="Longest unit (characters) of the repeated-run check.")
        run_min_chars: int = Field(24, ge=4, description="Shortest repeated run (characters) that counts.")
        run_window_chars: int = Field(200, ge=20, le=20_000, description="The repeated-run check scans only the last this many characters.")
        max_texts: int = Field(5000, ge=100, le=20_000, description="Most recent-window completions sampled.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        r = ev.rollouts
        w = rollout_windows(r, p)
        if w is None or not has_column(r, "completion"):
            return self.not_enough("rollout column 'completion'")
        rows = rows_in(r, w.recent, EXAMPLE_COLUMNS, max_n=p.max_texts)
        texts = rows["completion"].fillna("").astype(str).tolist()
        loops = np.array([self._loops(t) for t in texts], dtype=bool)
        share = float(loops.mean()) if len(loops) else 0.0
        sev = self.grade(share, p.warning, p.critical)
        if sev is None:
            return []
        return [self.finding(
            sev, f"{share:.0%} of sampled completions in steps {w.recent.lo}-{w.recent.hi} end in a repetition "
                 "loop. Add or raise the repetition penalty reward, lower the temperature's share of degenerate "
                 "samples, or shorten max_completion_length.",
            confidence=_share_conf(share, p, w.recent.n), steps=w.recent.steps, examples=recent_examples(rows[loops]),
            metrics={"looping_share": share, "sampled": len(rows), "warning": p.warning, "critical": p.critical,
                     "ngram_threshold": p.ngram_threshold})]

    def _loops(self, text: str) -> bool:
        p = self.params
        if len(text) >= p.min_chars and repeated_ngram_share(text, p.ngram, p.window_chars) >= p.ngram_threshold:
            return True
        return has_repeated_run(text[-p.run_window_chars :], p.run_max_unit, p.run_repeats, p.run_min_chars)


def _squash(text: str) -> str:
    return "".join(text.split())


def _template_lines(prompts: list[str], share: float) -> set[str]:
    """Lines that occur in at least ``share`` of the distinct prompts (chat template, fixed instructions)."""
    distinct = list(dict.fromkeys(prompts))
    if len(distinct) < 4:
        return set()
    counts = Counter(ln for pr in distinct for ln in {x.strip() for x in pr.splitlines()} if ln)
    return {ln for ln, c in counts.items() if c >= share * len(distinct)}


def _tail_line(prompt: str, template: set[str]) -> str:
    """The prompt's last non-empty line that is not template text (typically a tool observation)."""
    for ln in reversed(prompt.splitlines()):
        ln = ln.strip()
        if ln and ln not in template:
            return ln
    return ""


def echo_needles(prompt: str, frac: float, min_chars: int, template: set[str] = frozenset()) -> tuple[str, ...]:
    """Whitespace-free pieces of ``prompt`` whose presence in a completion makes it an echo: the first and the
    last ``frac`` of the prompt's text, and its last non-template line (each at least ``min_chars`` long)."""
    p = _squash(prompt)
    out = []
    if len(p) >= min_chars:
        m = math.ceil(frac * len(p))
        out += [p[:m], p[-m:]]
    tail = _squash(_tail_line(prompt, template))
    if len(tail) >= min_chars:
        out.append(tail)
    return tuple(out)


def echoes(prompt: str, completion: str, frac: float, min_chars: int, template: set[str] = frozenset()) -> bool:
    """Whether ``completion`` reproduces the prompt (see ``echo_needles``)."""
    c = _squash(completion)
    return bool(c) and any(n in c for n in echo_needles(prompt, frac, min_chars, template))


class Echo(_Builtin):
    name = "echo"
    version = "1"
    symptom = "echo"
    signal = ("Share of sampled recent-window completions that reproduce their prompt (its first or last 80% "
              "without whitespace) or the prompt's last non-template line, e.g. a tool observation.")
    literature = ("RAGEN: Understanding Self-Evolution in LLM Agents via Multi-Turn Reinforcement Learning, "
                  "arXiv 2504.20073 (the 'Echo Trap').")

    class Params(ShareParams):
        warning: float = Field(0.2, ge=0.0, le=1.0, description="Share of echoing completions at or above which it is a warning.")
        critical: float = Field(0.5, ge=0.0, le=1.0, description="Share of echoing completions at or above which it is critical.")
        prompt_frac: float = Field(0.8, gt=0.0, le=1.0, description="Share of the prompt's non-whitespace text that must reappear verbatim.")
        min_chars: int = Field(8, ge=1, description="Prompt text / last line shorter than this (non-whitespace characters) is not matched.")
        template_share: float = Field(0.5, gt=0.0, le=1.0,
                                      description="Prompt lines found in at least this share of distinct prompts are template text, not observations.")
        max_texts: int = Field(5000, ge=100, le=20_000, description="Most recent-window completions sampled.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        r = ev.rollouts
        w = rollout_windows(r, p)
        if w is None or not (has_column(r, "completion") and has_column(r, "prompt")):
            return self.not_enough("rollout columns 'prompt' and 'completion'")
        rows = rows_in(r, w.recent, EXAMPLE_COLUMNS, max_n=p.max_texts)
        prompts = rows["prompt"].fillna("").astype(str).tolist()
        template = _template_lines(prompts, p.template_share)
        needles = {pr: echo_needles(pr, p.prompt_frac, p.min_chars, template) for pr in set(prompts)}  # once per prompt
        completions = (_squash(c) for c in rows["completion"].fillna("").astype(str).tolist())
        hits = np.array([bool(c) and any(n in c for n in needles[pr]) for pr, c in zip(prompts, completions)], dtype=bool)
        share = float(hits.mean()) if len(hits) else 0.0
        sev = self.grade(share, p.warning, p.critical)
        if sev is None:
            return []
        return [self.finding(
            sev, f"{share:.0%} of sampled completions in steps {w.recent.lo}-{w.recent.hi} repeat their prompt or "
                 "its last observation instead of answering. Penalise copying (an overlap penalty or a format "
                 "reward), and check that echoing is not rewarded by a lenient 'contains' checker.",
            confidence=_share_conf(share, p, w.recent.n), steps=w.recent.steps, examples=recent_examples(rows[hits]),
            metrics={"echo_share": share, "sampled": len(rows), "warning": p.warning, "critical": p.critical})]


_ANSWER_MARK = re.compile(r"\\boxed\{|<answer>|\banswer\s*(?:is\b|:)", re.I)
_NUM = r"-?\d+(?:\.\d+)?"
_EXPRESSION = re.compile(r"[(\s]*%s[)\s]*(?:[-+*/×÷^][(\s]*%s[)\s]*)*" % (_NUM, _NUM))


def count_candidates(text: str) -> int:
    """Candidate answers in a completion when the task did not record ``n_candidates``: answer markers
    (\\boxed{, <answer>, 'answer is/:') when present, else maximal arithmetic expressions / integer literals."""
    marks = len(_ANSWER_MARK.findall(text))
    return marks if marks else len(_EXPRESSION.findall(text))


class AnswerSpraying(_Builtin):
    name = "answer_spraying"
    version = "1"
    symptom = "answer_spraying"
    signal = ("Among rewarded completions of the recent window (correctness reward > 0, else reward > 0), the "
              "share holding more than one candidate answer ('n_candidates', else counted in the text).")
    literature = ("Defining and Characterizing Reward Hacking, arXiv 2209.13085 (a lenient checker is a "
                  "hackable proxy); Scaling Laws for Reward Model Overoptimization, arXiv 2210.10760.")

    class Params(ShareParams):
        warning: float = Field(0.3, ge=0.0, le=1.0, description="Share of rewarded completions with >1 candidate at or above which it is a warning.")
        critical: float = Field(0.6, ge=0.0, le=1.0, description="Share of rewarded completions with >1 candidate at or above which it is critical.")
        min_rewarded: int = Field(20, ge=1, description="Fewest rewarded completions in the window needed to judge.")
        max_texts: int = Field(5000, ge=100, le=20_000, description="Most recent-window completions sampled when candidates are counted in the text.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        r = ev.rollouts
        w = rollout_windows(r, p)
        reward_col = next((c for c in ("reward_correctness", "reward") if has_column(r, c)), None)
        counted = has_column(r, "n_candidates")
        if w is None or reward_col is None or not (counted or has_column(r, "completion")):
            return self.not_enough("rollouts with 'reward' and 'n_candidates' (or 'completion')")
        cols = [*EXAMPLE_COLUMNS, "n_candidates", reward_col]
        rows = rows_in(r, w.recent, cols, max_n=None if counted else p.max_texts)
        rewarded = rows[(as_float(rows[reward_col]) > 0).to_numpy()]
        if len(rewarded) < p.min_rewarded:
            return []
        if counted:
            n = as_float(rewarded["n_candidates"]).fillna(1).to_numpy()
        else:
            n = np.array([count_candidates(t) for t in rewarded["completion"].fillna("").astype(str)])
        spray = n > 1
        share = float(spray.mean())
        sev = self.grade(share, p.warning, p.critical)
        if sev is None:
            return []
        return [self.finding(
            sev, f"{share:.0%} of rewarded completions in steps {w.recent.lo}-{w.recent.hi} contain several "
                 f"candidate answers (mean {n.mean():.1f}); a lenient checker is paying for guessing. Switch the "
                 "correctness match to 'exact' or reward only single-answer completions.",
            confidence=_share_conf(share, p, w.recent.n), steps=w.recent.steps,
            examples=recent_examples(rewarded[spray]),
            metrics={"spraying_share": share, "rewarded": len(rewarded), "mean_candidates": float(n.mean()),
                     "warning": p.warning, "critical": p.critical})]


# ------------------------------------------------------------------------------------------------ reward


class RewardHacking(_Builtin):
    name = "reward_hacking"
    version = "1"
    symptom = "reward_hacking"
    signal = ("Correctness reward vs strict accuracy per step (metrics or rollouts): the gap growing from the "
              "early to the recent window; or reward rising while strict or held-out greedy accuracy does not.")
    literature = ("Scaling Laws for Reward Model Overoptimization (Gao et al.), arXiv 2210.10760; Defining and "
                  "Characterizing Reward Hacking (Skalse et al.), arXiv 2209.13085.")

    class Params(WindowParams):
        gap: float = Field(0.2, ge=0.0, le=1.0, description="Recent (correctness reward - strict accuracy) at or above which it is a warning.")
        critical_gap: float = Field(0.5, ge=0.0, le=1.0, description="Recent gap at or above which it is critical.")
        min_gap_growth: float = Field(0.1, ge=0.0, le=1.0, description="The recent gap must exceed the early gap by at least this much.")
        min_reward_gain: float = Field(0.2, ge=0.0, description="Reward gain (early→recent, or over the eval span) that counts as 'rising'.")
        max_accuracy_gain: float = Field(0.0, ge=-1.0, le=1.0, description="Accuracy gain at or below which accuracy 'does not rise'.")
        min_eval_points: int = Field(3, ge=3, description="Fewest held-out eval points for the held-out rule.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        acc = metric_or_rollout(ev, "accuracy", "correct")
        corr = metric_or_rollout(ev, "rewards/correctness/mean", "reward_correctness")
        total = metric_or_rollout(ev, "reward", "reward")
        evals = metric_series(ev.metrics, "eval/greedy_accuracy")
        reward = corr or total
        if reward is None or (acc is None and (evals is None or len(evals) < p.min_eval_points)):
            return self.not_enough("a reward (metric or rollouts) and strict accuracy (metric 'accuracy' or "
                                     f"rollout 'correct') or {p.min_eval_points}+ points of 'eval/greedy_accuracy'")
        hits: list[tuple[Severity, float, tuple[int, int] | None, str]] = []
        metrics: dict[str, float] = {}
        if acc is not None and corr is not None:
            hits += self._gap_rule(corr, acc, metrics)
        elif acc is not None:
            hits += self._gain_rule(total, acc, metrics)
        if evals is not None and len(evals) >= p.min_eval_points:
            hits += self._eval_rule(reward, acc, evals, metrics)
        if not hits:
            return []
        sev = max((h[0] for h in hits), key=SEVERITY_RANK.__getitem__)
        conf = max(h[1] for h in hits)
        steps = next((h[2] for h in hits if h[2]), None)
        r = ev.rollouts
        examples = []
        if steps and len(r) and has_column(r, "correct"):
            rcol = next((c for c in ("reward_correctness", "reward") if has_column(r, c)), None)
            if rcol:
                rows = rows_in(r, Window(steps[0], steps[1], 0), [rcol, *EXAMPLE_COLUMNS])
                bad = (as_float(rows[rcol]) > 0).to_numpy() & (as_float(rows["correct"]) == 0).to_numpy()
                examples = recent_examples(rows[bad])
        return [self.finding(
            sev, " ".join(h[3] for h in hits) + " Tighten the checker (strict match, one answer) and compare "
                 "rewarded completions with strict verdicts before training further.",
            confidence=conf, steps=steps, examples=examples, metrics=metrics)]

    def _gap_rule(self, corr: StepSeries, acc: StepSeries, metrics: dict[str, float]):
        p = self.params
        gap = (corr.values - acc.values).dropna()
        er = early_recent(gap, p)
        if er is None:
            return []
        w, early, recent = er
        metrics |= {"early_gap": early, "recent_gap": recent, "gap_threshold": p.gap, "critical_gap": p.critical_gap,
                    "min_gap_growth": p.min_gap_growth}
        if recent < p.gap or recent < early + p.min_gap_growth:
            return []
        sev: Severity = "critical" if recent >= p.critical_gap else "warning"
        conf = confidence(recent, p.gap, p.critical_gap, support(w.recent.n, 2 * p.min_window_steps))
        return [(sev, conf, w.recent.steps,
                 f"The correctness reward exceeds strict accuracy by {recent:.2f} in steps {w.recent.lo}-{w.recent.hi} "
                 f"(early gap {early:.2f}): rewarded completions are increasingly not strictly correct.")]

    def _gain_rule(self, total: StepSeries | None, acc: StepSeries, metrics: dict[str, float]):
        p = self.params
        if total is None:
            return []
        both = pd.concat([total.values, acc.values], axis=1, join="inner").dropna()
        er_r = early_recent(both.iloc[:, 0], p)
        er_a = early_recent(both.iloc[:, 1], p)
        if er_r is None or er_a is None:
            return []
        w, r0, r1 = er_r
        _, a0, a1 = er_a
        metrics |= {"reward_gain": r1 - r0, "accuracy_gain": a1 - a0, "min_reward_gain": p.min_reward_gain,
                    "max_accuracy_gain": p.max_accuracy_gain}
        if r1 - r0 < p.min_reward_gain or a1 - a0 > p.max_accuracy_gain:
            return []
        conf = confidence(r1 - r0, p.min_reward_gain, 2 * p.min_reward_gain + 0.1, support(w.recent.n, 2 * p.min_window_steps))
        return [("warning", conf, w.recent.steps,
                 f"Reward rose by {r1 - r0:.2f} while strict accuracy changed by {a1 - a0:+.2f}.")]

    def _eval_rule(self, reward: StepSeries, acc: StepSeries | None, evals: pd.Series, metrics: dict[str, float]):
        """Reward rising over the eval span while held-out accuracy does not. The part of the reward gain that
        strict train accuracy explains is taken off first: reward and train accuracy rising together while
        held-out accuracy stays flat is overfitting, not a hacked reward."""
        p = self.params
        lo, hi = int(evals.index[0]), int(evals.index[-1])

        def gain(s: pd.Series) -> float:
            part = s[(s.index >= lo) & (s.index <= hi)]
            return series_slope(part) * (hi - lo) if len(part) >= 2 else float("nan")

        reward_gain = gain(reward.values)
        if hi <= lo or not np.isfinite(reward_gain):
            return []
        acc_gain = gain(acc.values) if acc is not None else float("nan")
        unexplained = reward_gain - (acc_gain if np.isfinite(acc_gain) else 0.0)
        eval_gain = series_slope(evals) * (hi - lo)
        metrics |= {"reward_gain_over_evals": reward_gain, "eval_gain": eval_gain, "eval_points": len(evals),
                    "unexplained_reward_gain": unexplained, "min_reward_gain": p.min_reward_gain}
        if unexplained < p.min_reward_gain or eval_gain > p.max_accuracy_gain:
            return []
        conf = confidence(unexplained, p.min_reward_gain, 2 * p.min_reward_gain + 0.1, support(len(evals), 6))
        return [("warning", conf, (lo, hi),
                 f"Reward rose by {reward_gain:.2f} over steps {lo}-{hi}"
                 + (f" (strict train accuracy by {acc_gain:+.2f})" if np.isfinite(acc_gain) else "")
                 + f" while held-out greedy accuracy changed by {eval_gain:+.2f} over {len(evals)} evaluations.")]


# ------------------------------------------------------------------------------------------------ optimisation


class KLBlowup(_Builtin):
    name = "kl_blowup"
    version = "1"
    symptom = "kl_blowup"
    signal = "Mean per-token KL to the reference (TRL 'kl') of the recent window: its level, and its growth over the early window."
    literature = ("Proximal Policy Optimization Algorithms, arXiv 1707.06347; Training language models to follow "
                  "instructions with human feedback, arXiv 2203.02155 (KL-penalised RL from a reference policy).")
    requires_metrics = ("kl",)

    class Params(WindowParams):
        warning: float = Field(0.5, ge=0.0, description="Recent mean KL at or above which it is a warning.")
        critical: float = Field(2.0, ge=0.0, description="Recent mean KL at or above which it is critical.")
        growth: float = Field(10.0, gt=1.0, description="Warning when the recent mean is at least growth × the early mean ...")
        growth_min_kl: float = Field(0.2, ge=0.0, description="... and at least this large (KL starts near 0, so small values grow fast).")
        early_floor: float = Field(0.01, gt=0.0, description="The early mean is taken as at least this (avoids dividing by ~0).")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        s = metric_series(ev.metrics, "kl")
        w = windows(s.index, p.window_frac, p.min_window_steps)
        recent = float(w.recent.of(s).mean())
        early = max(float(w.early.of(s).mean()), p.early_floor) if w.disjoint else float("nan")
        growth = recent / early if w.disjoint else float("nan")
        sev = self.grade(recent, p.warning, p.critical)
        if sev is None and w.disjoint and recent >= p.growth_min_kl and growth >= p.growth:
            sev = "warning"
        if sev is None:
            return []
        metrics = {"recent_kl": recent, "warning": p.warning, "critical": p.critical, "growth_threshold": p.growth}
        if w.disjoint:
            metrics |= {"early_kl": early, "growth": growth}
        conf = confidence(recent, p.warning, p.critical, support(w.recent.n, 2 * p.min_window_steps))
        if recent < p.warning:
            conf = confidence(growth, p.growth, 3 * p.growth, support(w.recent.n, 2 * p.min_window_steps))
        return [self.finding(
            sev, f"KL to the reference policy averages {recent:.3f} in steps {w.recent.lo}-{w.recent.hi}"
                 + (f" (×{growth:.0f} the early level)" if w.disjoint else "") + ": the policy is moving far from "
                 "its reference. Lower the learning rate, raise beta, or reset the reference.",
            confidence=conf, steps=w.recent.steps, examples=examples_in(ev, w.recent), metrics=metrics)]


class GradSpike(_Builtin):
    name = "grad_spike"
    version = "1"
    symptom = "grad_spike"
    signal = "Steps where 'grad_norm' exceeds k × the rolling median of the previous W steps."
    literature = ("A Theory on Adam Instability in Large-Scale Machine Learning (Molybog et al.); RAGEN, arXiv "
                  "2504.20073 (gradient spikes in the Echo Trap).")
    requires_metrics = ("grad_norm",)

    class Params(BaseParams):
        factor: float = Field(10.0, gt=1.0, description="A step spikes when grad_norm > factor × the rolling median.")
        window: int = Field(20, ge=3, le=10_000, description="Previous steps the rolling median covers.")
        min_history: int = Field(5, ge=1, le=10_000, description="Fewest previous steps before a spike can be called.")
        critical_count: int = Field(3, ge=1, description="Spikes at or above which it is critical (repeated spikes).")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        s = metric_series(ev.metrics, "grad_norm")
        s = s[s > 0]
        median = s.shift(1).rolling(p.window, min_periods=min(p.min_history, p.window)).median()
        ratio = (s / median).dropna()
        spikes = ratio[ratio > p.factor]
        if spikes.empty:
            return []
        n = len(spikes)
        sev: Severity = "critical" if n >= p.critical_count else "warning"
        first, last = int(spikes.index[0]), int(spikes.index[-1])
        top = int(spikes.idxmax())
        return [self.finding(
            sev, f"grad_norm spiked above {p.factor:g}× its running median {n} time(s) between steps {first} and "
                 f"{last} (worst ×{spikes.max():.0f} at step {top}). Lower the learning rate or max_grad_norm, "
                 "and look at the rollouts of the spiking steps for outliers.",
            confidence=confidence(float(spikes.max()), p.factor, 5 * p.factor, support(n, p.critical_count)),
            steps=(first, last), examples=examples_in(ev, (top, top)),
            metrics={"spikes": n, "max_ratio": float(spikes.max()), "worst_step": top, "factor": p.factor,
                     "window": p.window, "critical_count": p.critical_count})]


class NonFinite(_Builtin):
    name = "nan"
    version = "1"
    symptom = "nan"
    signal = "NaN or ±inf in the 'loss', 'grad_norm', 'reward' or 'entropy' metrics, or in the rollouts' 'reward'."
    literature = "Mixed Precision Training, arXiv 1710.03740 (overflow, loss scaling and non-finite gradients)."

    class Params(BaseParams):
        metrics: list[str] = Field(default_factory=lambda: ["loss", "grad_norm", "reward", "entropy"],
                                   description="Metric columns checked for NaN/inf.")
        dense_share: float = Field(0.5, gt=0.0, le=1.0,
                                   description="A row counts as a training log when it holds at least this share of the non-eval metric columns; only there is a NaN evidence (elsewhere it means 'not logged').")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        m = ev.metrics
        watched = [c for c in p.metrics if c in m.columns and "step" in m.columns]
        rollout_reward = "step" in ev.rollouts.columns and has_column(ev.rollouts, "reward")
        if not watched and not rollout_reward:
            return self.not_enough("one of metrics " + ", ".join(f"'{c}'" for c in p.metrics) + " or rollout column 'reward'")
        bad_steps: list[np.ndarray] = []
        metrics: dict[str, float] = {}
        if watched:
            logged = self._training_rows(m)
            for c in watched:
                v = as_float(m[c]).to_numpy()
                bad = ~np.isfinite(v) & (logged | np.isinf(v))
                if bad.any():
                    metrics[f"nonfinite_{c}"] = int(bad.sum())
                    bad_steps.append(as_float(m["step"]).to_numpy()[bad])
        rows_bad = None
        if rollout_reward:
            v = as_float(ev.rollouts["reward"]).to_numpy()
            bad = ~np.isfinite(v)
            if bad.any():
                metrics["nonfinite_rollout_reward"] = int(bad.sum())
                bad_steps.append(ev.rollouts["step"].to_numpy()[bad].astype("float64"))
                rows_bad = ev.rollouts[bad]
        steps = np.concatenate(bad_steps) if bad_steps else np.array([])
        steps = steps[np.isfinite(steps)]
        if not len(steps):
            return []
        first, last = int(steps.min()), int(steps.max())
        metrics["first_step"] = first
        examples = recent_examples(rows_bad[rows_bad["step"] == rows_bad["step"].min()]) if rows_bad is not None else examples_in(ev, (first, first))
        what = ", ".join(k.removeprefix("nonfinite_") for k in metrics if k.startswith("nonfinite_"))
        return [self.finding(
            "critical", f"Non-finite values (NaN/inf) in {what}, first at step {first}. Training past this point "
                        "is meaningless: lower the learning rate, enable gradient clipping, check the reward "
                        "function for NaN, or use bf16 instead of fp16.",
            confidence=1.0, steps=(first, last), examples=examples, metrics=metrics)]

    def _training_rows(self, m: pd.DataFrame) -> np.ndarray:
        """Rows that are training logs (so a NaN there was logged): rows holding most non-eval columns,
        or rows holding nothing at all (only a NaN-valued log creates one)."""
        train_cols = [c for c in m.columns if c != "step" and not str(c).startswith("eval/")]
        eval_cols = [c for c in m.columns if str(c).startswith("eval/")]
        present = m[train_cols].notna().to_numpy() if train_cols else np.zeros((len(m), 0), dtype=bool)
        dense = present.mean(axis=1) >= self.params.dense_share if train_cols else np.zeros(len(m), dtype=bool)
        empty = ~present.any(axis=1) & (~m[eval_cols].notna().to_numpy().any(axis=1) if eval_cols else True)
        return dense | empty


# ------------------------------------------------------------------------------------------------ progress


class Plateau(_Builtin):
    name = "plateau"
    version = "1"
    symptom = "plateau"
    signal = ("Least-squares change of 'reward' (and of 'eval/greedy_accuracy' when logged) over the last W "
              "steps, W = max(min_steps, window_frac × run length), while accuracy (held-out, else train) is "
              "below a ceiling.")
    literature = ("Does Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base "
                  "Model?, arXiv 2504.13837 (RLVR gains saturate within the base model's reach).")

    class Params(BaseParams):
        window_frac: float = Field(0.25, gt=0.0, le=0.5, description="W as a share of the run's steps.")
        min_steps: int = Field(30, ge=30, le=100_000, description="Smallest W (steps).")
        max_change: float = Field(0.05, gt=0.0, description="Fitted reward change over W at or below which (in absolute value) reward is flat.")
        max_eval_change: float = Field(0.05, gt=0.0, description="Fitted held-out accuracy change over W at or below which it is flat.")
        min_eval_points: int = Field(3, ge=2, description="Fewest eval points inside W for the held-out series to count.")
        ceiling: float = Field(0.95, gt=0.0, le=1.0, description="No plateau is called when accuracy is at or above this.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        reward = metric_or_rollout(ev, "reward", "reward")
        if reward is None:
            return self.not_enough("metric 'reward' or rollout column 'reward'")
        s = reward.values
        W = max(p.min_steps, math.ceil(p.window_frac * len(s)))
        if len(s) < W:
            return self.not_enough(f"at least {W} steps of reward")
        flat, metrics = self._flat(ev, s.iloc[-W:])
        if not flat:
            return []
        # held-out greedy accuracy is the better ceiling signal: sampled train accuracy rarely nears 1.0
        acc = metric_or_rollout(ev, "eval/greedy_accuracy", None) or metric_or_rollout(ev, "accuracy", "correct")
        lo, hi = int(s.index[-W]), int(s.index[-1])
        if acc is not None:
            level = acc.values[(acc.values.index >= lo) & (acc.values.index <= hi)]
            level = float(level.mean()) if len(level) else float(acc.values.iloc[-1])
            metrics |= {"accuracy": level, "ceiling": p.ceiling}
            if level >= p.ceiling:
                return []
        long = len(s) >= 2 * W and self._flat(ev, s.iloc[-2 * W :])[0]
        if long:
            lo = int(s.index[-2 * W])
        sev: Severity = "warning" if long else "info"
        metrics |= {"window_steps": W, "max_change": p.max_change}
        return [self.finding(
            sev, f"Reward has been flat over steps {lo}-{hi}" + (" (two windows)" if long else "")
                 + f" (fitted change {metrics['reward_change']:+.3f}) and accuracy is below the ceiling: learning "
                 "has stalled. Change the curriculum (harder or easier prompts), the learning rate, or stop.",
            confidence=confidence(abs(metrics["reward_change"]), p.max_change, 0.0, 1.0 if long else 0.5),
            steps=(lo, hi), examples=examples_in(ev, (lo, hi)), metrics=metrics)]

    def _flat(self, ev: Evidence, tail: pd.Series) -> tuple[bool, dict[str, float]]:
        p = self.params
        lo, hi = int(tail.index[0]), int(tail.index[-1])
        change = series_slope(tail) * (hi - lo)
        metrics = {"reward_change": change}
        flat = abs(change) <= p.max_change
        evals = metric_series(ev.metrics, "eval/greedy_accuracy")
        if evals is not None:
            e = evals[(evals.index >= lo) & (evals.index <= hi)]
            if len(e) >= p.min_eval_points:
                metrics["eval_change"] = series_slope(e) * (hi - lo)
                flat = flat and abs(metrics["eval_change"]) <= p.max_eval_change
        return flat, metrics


class Forgetting(_Builtin):
    name = "forgetting"
    version = "1"
    symptom = "forgetting"
    signal = ("Held-out accuracy on earlier distributions (metrics 'eval/<suite>/greedy_accuracy'): the latest "
              "smoothed value against the best smoothed value before it.")
    literature = "Overcoming catastrophic forgetting in neural networks (Kirkpatrick et al.), arXiv 1612.00796."

    class Params(BaseParams):
        pattern: str = Field("eval/*/greedy_accuracy", min_length=1, description="fnmatch pattern of the suite series.")
        drop: float = Field(0.1, gt=0.0, le=1.0, description="Absolute drop from the best value at or above which it is a warning.")
        smooth_points: int = Field(2, ge=1, le=20, description="Eval points averaged (rolling) before comparing; damps eval noise.")
        min_points: int = Field(3, ge=2, description="Fewest eval points a suite needs.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        cols = [c for c in ev.metrics.columns if fnmatch.fnmatchcase(str(c), p.pattern)]
        series = {c: s for c in cols if (s := metric_series(ev.metrics, c)) is not None}
        if not series:
            return self.not_enough(f"held-out series of an earlier distribution (metrics matching '{p.pattern}')")
        out = []
        for c, s in series.items():
            if len(s) < p.min_points:
                continue
            k = min(p.smooth_points, len(s) - 1)
            sm = s.rolling(k, min_periods=k).mean().dropna()
            best_step = int(sm.idxmax())
            best, now = float(sm.max()), float(sm.iloc[-1])
            drop = best - now
            if drop < p.drop:
                continue
            out.append(self.finding(
                "warning", f"{c} fell from {best:.2f} (step {best_step}) to {now:.2f} (step {int(sm.index[-1])}): "
                           "training on the current distribution is erasing an earlier one. Mix earlier data back "
                           "in (replay), lower the learning rate, or add a KL anchor.",
                confidence=confidence(drop, p.drop, 3 * p.drop, support(len(s), 6)),
                steps=(best_step, int(sm.index[-1])), examples=examples_in(ev, (best_step, int(sm.index[-1]))),
                metrics={"best": best, "latest": now, "drop": drop, "drop_threshold": p.drop, "eval_points": len(s)}))
        return out


class Overfitting(_Builtin):
    name = "overfitting"
    version = "1"
    symptom = "overfitting"
    signal = ("Train accuracy ('accuracy' metric or rollout 'correct', averaged over the steps before each eval) "
              "minus 'eval/greedy_accuracy' at eval steps: the recent gap against the early gap.")
    literature = ("Quantifying Generalization in Reinforcement Learning (Cobbe et al.), arXiv 1812.02341; SFT "
                  "Memorizes, RL Generalizes (Chu et al.).")

    class Params(BaseParams):
        gap: float = Field(0.15, ge=0.0, le=1.0, description="Recent train-minus-held-out gap at or above which it is a warning ...")
        min_growth: float = Field(0.1, ge=0.0, le=1.0, description="... when it also exceeds the early gap by at least this.")
        align_steps: int = Field(10, ge=1, description="Train steps (up to each eval step) averaged into the train accuracy at that eval.")
        min_points: int = Field(4, ge=2, description="Fewest eval points with a train accuracy beside them.")
        points_frac: float = Field(0.34, gt=0.0, le=0.5, description="Share of the eval points in the early and in the recent group.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        train = metric_or_rollout(ev, "accuracy", "correct")
        evals = metric_series(ev.metrics, "eval/greedy_accuracy")
        if train is None or evals is None:
            return self.not_enough("train accuracy (metric 'accuracy' or rollout 'correct') and metric 'eval/greedy_accuracy'")
        t = train.values.rolling(p.align_steps, min_periods=1).mean()
        left = pd.DataFrame({"step": evals.index.astype("int64"), "eval": evals.to_numpy()})
        right = pd.DataFrame({"step": t.index.astype("int64"), "train": t.to_numpy()})
        both = pd.merge_asof(left, right, on="step", direction="backward", tolerance=p.align_steps).dropna()
        if len(both) < p.min_points:
            return self.not_enough(f"at least {p.min_points} eval points with train accuracy beside them")
        gap = (both["train"] - both["eval"]).to_numpy()
        k = max(1, math.ceil(p.points_frac * len(gap)))
        early, recent = float(gap[:k].mean()), float(gap[-k:].mean())
        if recent < p.gap or recent < early + p.min_growth:
            return []
        lo, hi = int(both["step"].iloc[-k]), int(both["step"].iloc[-1])
        return [self.finding(
            "warning", f"Train accuracy exceeds held-out greedy accuracy by {recent:.2f} at the last {k} evaluations "
                       f"(early gap {early:.2f}): the policy is fitting the training prompts, not the task. Enlarge "
                       "or refresh the prompt pool, or stop at the best held-out checkpoint.",
            confidence=confidence(recent - early, p.min_growth, 3 * p.min_growth, support(len(gap), 8)),
            steps=(lo, hi), examples=examples_in(ev, (lo, hi)),
            metrics={"early_gap": early, "recent_gap": recent, "gap_threshold": p.gap, "min_growth": p.min_growth,
                     "eval_points": len(gap)})]


# ------------------------------------------------------------------------------------------------ registry

BUILTIN_DIAGNOSTICS: dict[str, type[Diagnostic]] = {
    cls.name: cls
    for cls in (DeadGroups, TooHard, TooEasy, EntropyCollapse, EntropyBlowup, Truncation, LengthCollapse, Repetition,
                Echo, RewardHacking, AnswerSpraying, KLBlowup, GradSpike, NonFinite, Plateau, Forgetting, Overfitting)
}


def run_all(ev: Evidence, names=None, params: dict[str, dict] | None = None) -> list[Finding]:
    """Run the named built-in diagnostics (all by default) with per-diagnostic ``params``
    (``{name: {param: value}}``); findings sorted critical first, then by diagnostic name."""
    names = list(BUILTIN_DIAGNOSTICS) if names is None else list(names)
    params = params or {}
    unknown = sorted({n for n in [*names, *params] if n not in BUILTIN_DIAGNOSTICS})
    if unknown:
        raise ValueError(f"unknown diagnostic(s) {', '.join(unknown)}; known: {', '.join(BUILTIN_DIAGNOSTICS)}")
    findings: list[Finding] = []
    for n in names:
        findings += BUILTIN_DIAGNOSTICS[n](params.get(n)).run(ev)
    return sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.diagnostic))
