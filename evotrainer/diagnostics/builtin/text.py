"""Built-ins that read what the policy writes: completion lengths and the completion text itself.

Lengths come from TRL metrics or the rollouts; the text checks (``repetition``, ``echo``,
``answer_spraying`` without ``n_candidates``, empty completions in ``length_collapse``) need the rollout
text and are the only costly built-ins. They scan only the recent window and only a uniform sample of at
most ``max_texts`` completions (5,000 by default: the standard error of a share estimated from 5,000 draws
is ≤ 0.007), so their cost does not grow with the run. The text rules themselves are plain functions
(``repeated_ngram_share``, ``has_repeated_run``, ``echoes``, ``count_candidates``) so they can be tested
and reused alone.
"""

from __future__ import annotations

import json
import math
import re
from abc import abstractmethod
from collections import Counter
from functools import lru_cache
from typing import ClassVar

import numpy as np
import pandas as pd
from pydantic import Field

from evotrainer.core.domain import Finding
from evotrainer.diagnostics.base import Need, need
from evotrainer.diagnostics.builtin.common import SUPPLY_REWARD, BuiltinDiagnostic, ShareDiagnostic
from evotrainer.diagnostics.signals import (
    EXAMPLE_COLUMNS,
    REWARD_COLUMNS,
    ShareParams,
    WindowParams,
    as_float,
    early_recent,
    examples_in,
    first_column,
    grade,
    has_column,
    metric_or_rollout,
    recent_examples,
    recent_mean,
    rollout_windows,
    rows_in,
    window_confidence,
    worst,
)
from evotrainer.evidence.model import Evidence

# ------------------------------------------------------------------------------------------------ lengths


class Truncation(ShareDiagnostic):
    name = "truncation"
    version = "1"
    symptom = "truncation"
    share_metric = "truncated_share"
    signal = ("Share of completions truncated at max_completion_length in the recent window (TRL "
              "'completions/clipped_ratio', or the rollouts' 'truncated').")
    literature = "DAPO, arXiv 2503.14476 (overlong filtering and soft overlong punishment)."
    needs = (need("a truncation signal", "metric:completions/clipped_ratio", "rollout:truncated",
                  supply="`--map truncated=COLUMN` or `--map completions/clipped_ratio=METRIC`"),)

    class Params(ShareParams):
        warning: float = Field(0.2, ge=0.0, le=1.0, description="Truncated share at or above which it is a warning.")
        critical: float = Field(0.5, ge=0.0, le=1.0, description="Truncated share at or above which it is critical.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        s = metric_or_rollout(ev, "completions/clipped_ratio", "truncated")
        if s is None:
            return self.not_enough("metric 'completions/clipped_ratio' or rollout column 'truncated'")
        w, share = recent_mean(s.values, self.params)

        def examples():
            if not has_column(ev.rollouts, "truncated"):
                return []
            rows = rows_in(ev.rollouts, w.recent, ["truncated", *EXAMPLE_COLUMNS])
            return recent_examples(rows[as_float(rows["truncated"]).to_numpy() == 1])

        return self.share_finding(
            share, w.recent, "completions",
            f"hit max_completion_length ({s.source}); their rewards judge unfinished text. Raise "
            "max_completion_length, add the soft overlong penalty, or mask truncated completions from the loss.",
            examples=examples)


class LengthCollapse(BuiltinDiagnostic):
    name = "length_collapse"
    version = "1"
    symptom = "length_collapse"
    signal = ("Mean completion length of the recent window against the early window (TRL "
              "'completions/mean_length' or rollouts 'length'), and the share of empty/whitespace-only completions.")
    literature = ("Understanding R1-Zero-Like Training: A Critical Perspective (Dr. GRPO), arXiv 2503.20783 "
                  "(GRPO's length normalisation biases response length).")
    needs = (need("completion lengths", "metric:completions/mean_length", "rollout:length", "rollout:completion",
                  supply="`--map length=COLUMN` or `--map completions/mean_length=METRIC`"),)

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
                sev_ratio = grade(ratio, p.ratio, p.critical_ratio, higher=False)
                conf.append(window_confidence(ratio, p.ratio, p.critical_ratio, w.recent, p))
                steps = w.recent.steps
        rows = None
        if empty is not None:
            share, rows, w_r = empty
            metrics |= {"empty_share": share, "empty_warning": p.empty_warning, "empty_critical": p.empty_critical}
            sev_empty = grade(share, p.empty_warning, p.empty_critical)
            if sev_empty:
                conf.append(window_confidence(share, p.empty_warning, p.empty_critical, w_r.recent, p))
                steps = steps or w_r.recent.steps
        sev = worst(sev_ratio, sev_empty)
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


class _TextShare(ShareDiagnostic):
    """Share of a uniform sample (at most ``max_texts``) of the recent window's completions that ``flags``
    marks; the finding adds how many were sampled and the ``extra_metrics`` parameters."""

    text_columns: ClassVar[tuple[str, ...]]  # rollout columns the rule reads (its need)
    text_reads: ClassVar[tuple[str, ...]] = ()  # further columns it uses when they exist
    says: ClassVar[str]  # the explanation after "<share> of sampled completions in steps <lo>-<hi> "
    extra_metrics: ClassVar[tuple[str, ...]] = ()

    def declared_needs(self) -> tuple[Need, ...]:
        return (need("completion text" if self.text_columns == ("completion",) else "prompts and completions",
                     " + ".join(f"rollout:{c}" for c in self.text_columns)),)

    def declared_reads(self) -> tuple[str, ...]:
        return tuple(f"rollout:{c}" for c in self.text_reads)

    @abstractmethod
    def flags(self, rows: pd.DataFrame) -> np.ndarray:
        """One bool per row of the sample."""

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        r = ev.rollouts
        w = rollout_windows(r, p)
        if w is None or not all(has_column(r, c) for c in self.text_columns):
            return self.not_enough(f"rollout column{'s' if len(self.text_columns) > 1 else ''} "
                                   + " and ".join(f"'{c}'" for c in self.text_columns))
        rows = rows_in(r, w.recent, [*EXAMPLE_COLUMNS, *self.text_reads], max_n=p.max_texts)
        hits = self.flags(rows)
        return self.share_finding(
            float(hits.mean()) if len(hits) else 0.0, w.recent, "sampled completions", self.says,
            examples=lambda: recent_examples(rows[hits]), counts={"sampled": len(rows)},
            extra={k: getattr(p, k) for k in self.extra_metrics})


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


class Repetition(_TextShare):
    name = "repetition"
    version = "1"
    symptom = "repetition"
    share_metric = "looping_share"
    text_columns = ("completion",)
    says = ("end in a repetition loop. Add or raise the repetition penalty reward, lower the temperature's share "
            "of degenerate samples, or shorten max_completion_length.")
    extra_metrics = ("ngram_threshold",)
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

    def flags(self, rows: pd.DataFrame) -> np.ndarray:
        return np.array([self._loops(t) for t in rows["completion"].fillna("").astype(str).tolist()], dtype=bool)

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


def episode_echoes(prompt_needles: tuple[str, ...], turns: str, min_observation_chars: int) -> bool | None:
    """Whether a multi-turn episode's own text (the free text of its turns, tool calls aside) reproduces the
    prompt (``prompt_needles``) or the last tool observation before its final turn; None when ``turns`` is not
    an episode's turn records."""
    try:
        records = json.loads(turns)
    except (TypeError, json.JSONDecodeError):
        return None
    if not isinstance(records, list):
        return None
    text = _squash("".join(str(r.get("text") or "") for r in records if isinstance(r, dict)))
    if not text:
        return False
    observations = [r.get("observation") for r in records if isinstance(r, dict) and r.get("observation") is not None]
    needles = list(prompt_needles)
    if observations and len(_squash(str(observations[-1]))) >= min_observation_chars:
        needles.append(_squash(str(observations[-1])))
    return any(n in text for n in needles)


class Echo(_TextShare):
    name = "echo"
    version = "2"
    symptom = "echo"
    share_metric = "echo_share"
    text_columns = ("prompt", "completion")
    text_reads = ("turns",)
    says = ("repeat their prompt or its last observation instead of answering. Penalise copying (an overlap "
            "penalty or a format reward), and check that echoing is not rewarded by a lenient 'contains' checker.")
    signal = ("Share of sampled recent-window completions that reproduce their prompt (its first or last 80% "
              "without whitespace) or the prompt's last non-template line, e.g. a tool observation. Version 2: a "
              "multi-turn episode (rollout column 'turns') is judged on its own text, tool calls and observations "
              "aside: it echoes when that text reproduces the prompt or the last tool observation.")
    literature = ("RAGEN: Understanding Self-Evolution in LLM Agents via Multi-Turn Reinforcement Learning, "
                  "arXiv 2504.20073 (the 'Echo Trap').")

    class Params(ShareParams):
        warning: float = Field(0.2, ge=0.0, le=1.0, description="Share of echoing completions at or above which it is a warning.")
        critical: float = Field(0.5, ge=0.0, le=1.0, description="Share of echoing completions at or above which it is critical.")
        prompt_frac: float = Field(0.8, gt=0.0, le=1.0, description="Share of the prompt's non-whitespace text that must reappear verbatim.")
        min_chars: int = Field(8, ge=1, description="Prompt text / last line shorter than this (non-whitespace characters) is not matched.")
        template_share: float = Field(0.5, gt=0.0, le=1.0,
                                      description="Prompt lines found in at least this share of distinct prompts are template text, not observations.")
        min_observation_chars: int = Field(
            2, ge=1, description="A multi-turn episode's last tool observation shorter than this (non-whitespace "
                                 "characters) is not matched against the episode's own text.")
        max_texts: int = Field(5000, ge=100, le=20_000, description="Most recent-window completions sampled.")

    def flags(self, rows: pd.DataFrame) -> np.ndarray:
        p = self.params
        prompts = rows["prompt"].fillna("").astype(str).tolist()
        template = _template_lines(prompts, p.template_share)
        needles = {pr: echo_needles(pr, p.prompt_frac, p.min_chars, template) for pr in set(prompts)}  # once per prompt
        completions = (_squash(c) for c in rows["completion"].fillna("").astype(str).tolist())
        flags = np.array([bool(c) and any(n in c for n in needles[pr]) for pr, c in zip(prompts, completions)], dtype=bool)
        if "turns" in rows.columns:  # a multi-turn episode: its completion holds observations, judge its own text
            for i, (pr, turns) in enumerate(zip(prompts, rows["turns"].tolist())):
                if isinstance(turns, str) and turns:
                    hit = episode_echoes(needles[pr], turns, p.min_observation_chars)
                    if hit is not None:
                        flags[i] = hit
        return flags


_ANSWER_MARK = re.compile(r"\\boxed\{|<answer>|\banswer\s*(?:is\b|:)", re.I)
_NUM = r"-?\d+(?:\.\d+)?"
_EXPRESSION = re.compile(r"[(\s]*%s[)\s]*(?:[-+*/×÷^][(\s]*%s[)\s]*)*" % (_NUM, _NUM))


def count_candidates(text: str) -> int:
    """Candidate answers in a completion when the task did not record ``n_candidates``: answer markers
    (\\boxed{, <answer>, 'answer is/:') when present, else maximal arithmetic expressions / integer literals."""
    marks = len(_ANSWER_MARK.findall(text))
    return marks if marks else len(_EXPRESSION.findall(text))


class AnswerSpraying(ShareDiagnostic):
    name = "answer_spraying"
    version = "1"
    symptom = "answer_spraying"
    share_metric = "spraying_share"
    signal = ("Among rewarded completions of the recent window (correctness reward > 0, else reward > 0), the "
              "share holding more than one candidate answer ('n_candidates', else counted in the text).")
    literature = ("Defining and Characterizing Reward Hacking, arXiv 2209.13085 (a lenient checker is a "
                  "hackable proxy); Scaling Laws for Reward Model Overoptimization, arXiv 2210.10760.")
    needs = (need("rewarded completions with their answers",
                  "rollout:reward_correctness|reward + rollout:n_candidates|completion", supply=SUPPLY_REWARD),)

    class Params(ShareParams):
        warning: float = Field(0.3, ge=0.0, le=1.0, description="Share of rewarded completions with >1 candidate at or above which it is a warning.")
        critical: float = Field(0.6, ge=0.0, le=1.0, description="Share of rewarded completions with >1 candidate at or above which it is critical.")
        min_rewarded: int = Field(20, ge=1, description="Fewest rewarded completions in the window needed to judge.")
        max_texts: int = Field(5000, ge=100, le=20_000, description="Most recent-window completions sampled when candidates are counted in the text.")

    def analyze(self, ev: Evidence) -> list[Finding]:
        p = self.params
        r = ev.rollouts
        w = rollout_windows(r, p)
        reward_col = first_column(r, REWARD_COLUMNS)
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
        return self.share_finding(
            float(spray.mean()), w.recent, "rewarded completions",
            f"contain several candidate answers (mean {n.mean():.1f}); a lenient checker is paying for guessing. "
            "Switch the correctness match to 'exact' or reward only single-answer completions.",
            examples=lambda: recent_examples(rewarded[spray]),
            counts={"rewarded": len(rewarded), "mean_candidates": float(n.mean())})
