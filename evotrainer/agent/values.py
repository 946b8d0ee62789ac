"""Values from a real optimizer: the brain chooses which knob to move and why, Optuna chooses how far.

Why: a fixed step (the library's "learning rate ×3") is a guess that ignores what this campaign has
already measured, and at equal budgets classical samplers beat LLM agents at picking numbers while the
hybrid (a sampler for values, the agent for what to try) beats both ("Can LLMs beat classical HPO?",
arXiv 2603.24647). So for a numeric knob the brain's draft gives the knob, the direction and a first
value; the value that is backtested is asked of Optuna's TPE sampler, conditioned on every backtest of that
knob this campaign has decided.

How:

- **One study per knob**, stored in ``HOME/campaigns/ID/optuna.db`` (Optuna's RDB storage), so it resumes
  with the campaign. Its trials are this campaign's backtests of the knob: the value tried and the paired
  held-out effect measured for it (treatment − control; a gate-blocked value scores −1, a screened one 0,
  a failed one is a failed trial). They are written when the decision is recorded (:func:`tell`), keyed by
  proposal id, and re-synced from the store before every ask, so a kill -9 between a decision and its tell
  loses nothing.
- **The window.** The draft moves the knob from ``current`` towards ``value``; Optuna searches from half
  that step to twice it, in log space for scale knobs (learning rate, KL and entropy coefficients), linearly
  otherwise, clipped to the knob's bounds. The direction stays the brain's: a draft that says "raise" is
  never turned into a decrease.
- **Fallback.** With no decided backtest of the knob yet, the draft's own value is used (the library's fixed
  step): a sampler with no observations knows less than the literature.
- **Exactly one trial per proposal.** The asked value is enqueued with the proposal's id (one write: a
  waiting trial carrying its key) and then asked, so a kill -9 at any point leaves at most that one keyed
  trial, which a re-run of the propose node finds and reuses instead of asking again; the sampler is
  seeded by (campaign seed, round, knob), so the value is also the same.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evotrainer.config.harness import HarnessSpec, locked_knob

# Knobs searched on a log scale (their useful values span decades).
LOG_KNOBS = frozenset({"optim.learning_rate", "grpo.beta", "grpo.entropy_coef", "optim.weight_decay"})
BLOCKED_SCORE = -1.0  # what a gate-blocked value is worth to the optimizer: never again
KEY = "proposal"


class ValueChoice(BaseModel):
    """Where a proposal's value came from (recorded with the proposal's rationale)."""

    value: Any = Field(..., description="The value to backtest.")
    source: str = Field(..., description="'optuna-tpe' (asked of the study), 'fallback' (the draft's own value: "
                                         "no decided backtest of this knob yet) or 'fixed' (not a numeric knob).")
    window: tuple[float, float] | None = Field(None, description="The range Optuna searched.")
    trials: int = Field(0, description="Decided backtests of this knob the study was conditioned on.")

    def describe(self) -> str:
        if self.source != "optuna-tpe":
            return f"value from the {'skill' if self.source == 'fallback' else 'draft'} (no Optuna history yet)" \
                if self.source == "fallback" else "value from the draft"
        lo, hi = self.window or (None, None)
        return f"value asked of Optuna TPE in [{lo:.4g}, {hi:.4g}] given {self.trials} decided backtest(s) of this knob"


@dataclass(frozen=True)
class Window:
    low: float
    high: float
    log: bool
    integer: bool


def _bounds(harness: HarnessSpec, knob: str) -> tuple[float, float, bool]:
    """(low, high, integer) allowed for a numeric knob by its pydantic field."""
    section, _, leaf = knob.rpartition(".")
    model: Any = harness
    for part in section.split("."):
        model = getattr(model, part)
    field = type(model).model_fields[leaf]
    lo, hi = -math.inf, math.inf
    for m in field.metadata:
        if getattr(m, "ge", None) is not None:
            lo = max(lo, float(m.ge))
        if getattr(m, "gt", None) is not None:
            lo = max(lo, float(m.gt) + (1 if field.annotation is int else 1e-12))
        if getattr(m, "le", None) is not None:
            hi = min(hi, float(m.le))
        if getattr(m, "lt", None) is not None:
            hi = min(hi, float(m.lt) - (1 if field.annotation is int else 1e-12))
    return lo, hi, field.annotation is int


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def search_window(harness: HarnessSpec, knob: str, current: Any, value: Any) -> Window | None:
    """The range Optuna may search for a draft moving ``knob`` from ``current`` to ``value`` (None: not searchable)."""
    if locked_knob(knob) or not _number(current) or not _number(value) or current == value:
        return None
    try:
        lo_b, hi_b, integer = _bounds(harness, knob)
    except (AttributeError, KeyError):
        return None
    log = knob in LOG_KNOBS and current > 0 and value > 0
    if log:
        r = value / current
        a, b = current * r ** 0.5, current * r ** 2
    else:
        d = value - current
        a, b = current + d / 2, current + 2 * d
    lo, hi = max(min(a, b), lo_b), min(max(a, b), hi_b)
    if integer:
        lo, hi = math.ceil(lo), math.floor(hi)
        if value > current:
            lo = max(lo, int(current) + 1)
        else:
            hi = min(hi, int(current) - 1)
    if lo > hi or (lo == hi and lo == current):
        return None
    return Window(float(lo), float(hi), log, integer)


def _distribution(w: Window):
    from optuna.distributions import FloatDistribution, IntDistribution

    if w.integer:
        return IntDistribution(int(w.low), int(w.high), log=w.log)
    return FloatDistribution(w.low, w.high, log=w.log)


def study_distribution(harness: HarnessSpec, knob: str, log: bool):
    """The distribution every trial of a knob's study is recorded under: the knob's whole range (Optuna keeps one
    kind per parameter; each ask then searches a window inside it)."""
    lo, hi, integer = _bounds(harness, knob)
    lo = max(lo, 1e-8) if log else (lo if math.isfinite(lo) else -1e9)
    hi = hi if math.isfinite(hi) else 1e9
    return _distribution(Window(lo, hi, log, integer))


def _round(x: float, integer: bool) -> Any:
    return int(round(x)) if integer else float(f"{x:.3g}")


def _quiet() -> None:
    import logging
    import warnings

    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


class ValueOptimizer:
    """The campaign's Optuna studies (one per knob) in ``HOME/campaigns/ID/optuna.db``."""

    def __init__(self, home: Path, campaign_id: str, seed: int):
        self.path = Path(home) / "campaigns" / campaign_id / "optuna.db"
        self.campaign_id, self.seed = campaign_id, seed
        self._storage = None

    def storage(self):
        if self._storage is None:
            import optuna

            _quiet()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._storage = optuna.storages.RDBStorage(f"sqlite:///{self.path}")
        return self._storage

    def study(self, knob: str, round_: int = 0):
        import optuna

        digest = hashlib.sha256(f"{self.seed}:{round_}:{knob}".encode()).hexdigest()
        sampler = optuna.samplers.TPESampler(seed=int(digest[:8], 16), n_startup_trials=1)
        return optuna.create_study(study_name=knob, storage=self.storage(), sampler=sampler, direction="maximize",
                                   load_if_exists=True)

    # ------------------------------------------------------------------ history
    def sync(self, harness: HarnessSpec, knob: str, history: list[tuple[str, Any, float | None, str]]) -> int:
        """Record every decided backtest of ``knob`` as a trial, once: (proposal id, value, effect, outcome).

        A trial asked for the proposal is told its score; a decision with no trial yet (the value came from
        a brain before this study existed, or the knob's history predates it) is added as a finished trial.
        Returns the number of finished trials the study then has.
        """
        import optuna

        study = self.study(knob)
        by_key = {t.user_attrs.get(KEY): t for t in study.get_trials(deepcopy=False)}
        for pid, value, effect, outcome in history:
            if not _number(value):
                continue
            score = _score(effect, outcome)
            t = by_key.get(pid)
            if t is not None and t.state == optuna.trial.TrialState.WAITING:
                study.ask({"value": study_distribution(harness, knob, self._log(knob, value))})
                t = next(x for x in study.get_trials(deepcopy=False) if x.user_attrs.get(KEY) == pid)
            if t is not None and t.state == optuna.trial.TrialState.RUNNING:
                if score is None:
                    study.tell(t.number, state=optuna.trial.TrialState.FAIL)
                else:
                    study.tell(t.number, score)
                continue
            if t is not None:
                continue
            state = optuna.trial.TrialState.COMPLETE if score is not None else optuna.trial.TrialState.FAIL
            study.add_trial(optuna.trial.create_trial(
                params={"value": value}, distributions={"value": study_distribution(harness, knob, self._log(knob, value))},
                value=score, state=state, user_attrs={KEY: pid, "source": "history"}))
        return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))

    @staticmethod
    def _log(knob: str, value: Any) -> bool:
        return knob in LOG_KNOBS and _number(value) and value > 0

    # ------------------------------------------------------------------ ask
    def suggest(self, key: str, harness: HarnessSpec, knob: str, value: Any, round_: int) -> ValueChoice:
        """The value to backtest for a draft ``knob → value`` (proposal ``key``); see the module docstring.

        Call :meth:`sync` with the knob's decided backtests first: the study is conditioned on what it holds.
        """
        import optuna

        current = harness.knobs().get(knob)
        window = search_window(harness, knob, current, value)
        if window is None:
            return ValueChoice(value=value, source="fixed")
        study = self.study(knob, round_)
        dist = _distribution(window)
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get(KEY) != key]
        mine = [t for t in trials if t.user_attrs.get(KEY) == key]
        if mine:  # asked before a kill -9: that same trial, never a second one
            t = mine[0]
            if t.state == optuna.trial.TrialState.WAITING:
                study.ask({"value": dist})  # pops the waiting (enqueued) trial: ours
                t = next(x for x in study.get_trials(deepcopy=False) if x.user_attrs.get(KEY) == key)
            chosen = t.params.get("value", value)
            return ValueChoice(value=chosen, source=t.user_attrs.get("source", "optuna-tpe"),
                               window=(window.low, window.high), trials=len(done))
        if not done:  # no history: the draft's own (library) step
            chosen, source = value, "fallback"
        else:  # TPE on an in-memory copy (seeded, same history: deterministic), then recorded under the key
            probe = optuna.create_study(sampler=study.sampler, direction="maximize")
            for t in done:
                probe.add_trial(t)
            asked = probe.ask({"value": dist}).params["value"]
            chosen = min(max(_round(asked, window.integer), window.low), window.high)
            chosen, source = (int(chosen) if window.integer else chosen), "optuna-tpe"
        study.enqueue_trial({"value": chosen}, user_attrs={KEY: key, "source": source})
        study.ask({"value": dist})
        return ValueChoice(value=chosen, source=source, window=(window.low, window.high), trials=len(done))


def _score(effect: float | None, outcome: str) -> float | None:
    """The objective Optuna maximises for one decided backtest (None: a failed trial)."""
    if outcome == "blocked":
        return BLOCKED_SCORE
    if outcome == "screened":
        return 0.0
    if outcome == "failed" or effect is None:
        return None
    return float(effect)
