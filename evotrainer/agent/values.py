"""Values from a real optimizer: the brain chooses which knob to move and why, Optuna chooses how far.

Why: a fixed step (the library's "learning rate ×3") is a guess that ignores what this campaign has
already measured, and at equal budgets classical samplers beat LLM agents at picking numbers while the
hybrid (a sampler for values, the agent for what to try) beats both ("Can LLMs beat classical HPO?",
arXiv 2603.24647). So for a numeric knob the brain's draft gives the knob, the direction and a first
value; the value that is backtested is asked of Optuna's TPE sampler, conditioned on every backtest of that
knob this campaign has decided.

How:

- **One study per knob**, stored in ``HOME/campaigns/ID/optuna.db`` (Optuna's RDB storage), so it resumes
  with the campaign. Its trials are this campaign's backtests of the knob: the **move** tried (from the value
  the knob had then: log(new / old) for scale knobs, new − old otherwise) and the paired held-out effect
  measured for it (treatment − control; a gate-blocked value scores −1, a screened one 0, a failed one is a
  failed trial). They are written when the decision is recorded (:func:`tell`), keyed by proposal id, and
  re-synced from the store before every ask, so a kill -9 between a decision and its tell loses nothing.
- **Why moves, not values.** Each backtest measures its effect against that round's control, so a score says
  how good a *step from there* was, not how good the value is. Recorded as absolute values, a campaign that
  promoted a learning rate 1e-6 → 3e-6 (+0.015) handed TPE one good trial at 3e-6, below the next window
  [5.2e-6, 2.7e-5]; TPE's density then sat at the window's lower edge and asked for the most timid raise
  (5.2e-6) of a learning rate still 30× too small. As moves, the same trial says "×3 helped", and the next
  ask looks around ×3.
- **The window.** The draft moves the knob from ``current`` towards ``value``; Optuna searches from half
  that step to twice it, in log space for scale knobs (learning rate, KL and entropy coefficients, weight decay,
  prompt pool), linearly otherwise, clipped to the knob's bounds. The direction stays the brain's: a draft that says "raise" is
  never turned into a decrease.
- **Fallback.** With no decided backtest of the knob yet, the draft's own value is used (the library's fixed
  step): a sampler with no observations knows less than the literature.
- **Brackets and re-tests.** A bracket arm (``agent/arms.py``: a bolder move of the same scale knob, backtested beside
  the first against the same control) and a re-test of an inconclusive value keep their values; each is
  recorded as its proposal's trial all the same (a range knob's shift has no study: its values are fixed).
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

from evotrainer.config.campaign import BacktestSpec
from evotrainer.config.harness import SCALE_KNOBS, HarnessSpec, locked_knob
from evotrainer.core.errors import ConfigError
from evotrainer.library.changes import resolve_value
from evotrainer.library.format import Intervention

# Knobs searched on a log scale (their useful values span decades).
LOG_KNOBS = SCALE_KNOBS
# Scale knobs whose studies were once of linear moves (ValueOptimizer.study)
RELOGGED = frozenset({"data.pool_size"})
BLOCKED_SCORE = -1.0  # what a gate-blocked value is worth to the optimizer: never again
KEY = "proposal"


class ValueChoice(BaseModel):
    """Where a proposal's value came from (recorded with the proposal's rationale)."""

    value: Any = Field(..., description="The value to backtest.")
    source: str = Field(..., description="'optuna-tpe' (asked of the study), 'fallback' (the draft's own value: "
                                         "no decided backtest of this knob yet), 'bracket' (a bracket arm's own "
                                         "value), 'retest' (an inconclusive value tried "
                                         "again) or 'fixed' (not a numeric knob).")
    window: tuple[float, float] | None = Field(None, description="The range Optuna searched.")
    trials: int = Field(0, description="Decided backtests of this knob the study was conditioned on.")

    def describe(self) -> str:
        if self.source == "fallback":
            return "value from the skill (no Optuna history yet)"
        if self.source == "bracket":
            return "a bracket: the same knob moved further (in log scale, backtest.bracket_factor) beside the first arm"
        if self.source == "retest":
            return "the value of an inconclusive backtest, tried again"
        if self.source != "optuna-tpe":
            return "value from the draft"
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
    for part in section.split("."):  # a user's reward function sits in a mapping: reward.functions.NAME.weight
        model = model[part] if isinstance(model, dict) else getattr(model, part)
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


MAX_LOG_MOVE = 30.0  # |log(new / old)| a scale knob's study can hold (e^30: far beyond any knob's range)


def study_distribution(harness: HarnessSpec, knob: str, log: bool):
    """The distribution every trial of a knob's study is recorded under: every move the knob allows (Optuna keeps
    one kind per parameter; each ask then searches a window inside it). Log moves are already on a log scale."""
    if log:
        return _distribution(Window(-MAX_LOG_MOVE, MAX_LOG_MOVE, False, False))
    lo, hi, integer = _bounds(harness, knob)
    span = hi - lo if math.isfinite(hi - lo) else 1e9
    return _distribution(Window(-span, span, False, integer))


def move_of(knob: str, old: Any, new: Any) -> float | None:
    """The step from ``old`` to ``new`` as the knob's study records it (None: not a numeric step)."""
    if not (_number(old) and _number(new)):
        return None
    if knob in LOG_KNOBS:
        return math.log(new / old) if old > 0 and new > 0 else None
    return float(new - old)


def _move_window(knob: str, current: float, w: Window) -> Window:
    if knob in LOG_KNOBS:
        return Window(math.log(w.low / current), math.log(w.high / current), False, False)
    return Window(w.low - current, w.high - current, False, w.integer)


# How many times as far (in log scale) a bracket arm moves a scale knob when no spec says (the spec's default,
# `backtest.bracket_factor`, whose description records how 3, 4 and 5 were chosen).
BRACKET_FACTOR: float = BacktestSpec.model_fields["bracket_factor"].default


def bracket_value(harness: HarnessSpec, knob: str, current: Any, value: Any, factor: float = BRACKET_FACTOR,
                  band: tuple[float, float] | None = None) -> float | list[int] | None:
    """The bolder value a bracket arm tries beside the draft ``current → value`` of a scale knob: the move
    ``factor`` times as far in log scale, clipped into ``band`` (``backtest.bracket_range``) and the knob's
    bounds. None: no bracket, for a knob that is not a scale knob, or when the clipped value is not at least twice
    as far from ``current`` as ``value`` is (a current value already inside the band, or a move the bounds leave
    no room to extend). A range knob's step (``data.difficulty`` [5, 5] → [4, 4]) is bracketed by
    :func:`range_bracket`."""
    if _shift(current, value):
        return range_bracket(harness, knob, current, value)
    move = move_of(knob, current, value)
    if knob not in LOG_KNOBS or not move or locked_knob(knob):
        return None
    lo, hi, integer = _bounds(harness, knob)
    if band is not None:
        lo, hi = max(lo, band[0]), min(hi, band[1])
    out = min(max(current * math.exp(factor * move), lo), hi)
    out = int(round(out)) if integer else float(f"{out:.3g}")
    if out <= 0 or out in (current, value) or (out - value) * move <= 0:
        return None
    return out if math.log(out / current) / move >= 2.0 else None


RANGE_BRACKET_STEPS = 2  # a range knob's bracket shifts it this many times the draft's step (range_bracket)


def _int_pair(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and len(x) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in x)


def _shift(current: Any, value: Any) -> int | None:
    """The whole-level shift ``current → value`` of a [lo, hi] range knob that moves both ends alike, else None."""
    if not (_int_pair(current) and _int_pair(value)):
        return None
    d = value[0] - current[0]
    return d if d and value[1] - current[1] == d else None


def range_bracket(harness: HarnessSpec, knob: str, current: Any, value: Any) -> list[int] | None:
    """The bracket of a range knob's shift (the training levels one level down, ``easier-curriculum``): the range
    shifted :data:`RANGE_BRACKET_STEPS` times as far, when the harness takes it (None when the knob is locked, the
    move is not a shift of both ends, or the farther range leaves the knob's bounds). Why twice and no further: a
    level is a coarse step (curriculum learning moves one at a time), and the recipe check calls the levels scored
    or one around them normal (``diagnostics/builtin/recipe.py``), so the ranges it flags begin two levels off; the
    one-level move then reaches the edge of the normal band and the bracket the scored levels themselves, both in
    one backtest. The task's own bounds are checked with every draft (``agent/arms.py::_check_draft``)."""
    d = _shift(current, value)
    if d is None or locked_knob(knob):
        return None
    out = resolve_value(Intervention(knob=knob, op="step", arg=RANGE_BRACKET_STEPS * d), current)  # the skills' step
    try:
        harness.with_knob(knob, out)
    except ConfigError:
        return None
    return out


def _apply(knob: str, current: float, move: float, w: Window) -> Any:
    value = current * math.exp(move) if knob in LOG_KNOBS else current + move
    value = min(max(_round(value, w.integer), w.low), w.high)
    return int(value) if w.integer else value


def _round(x: float, integer: bool) -> Any:
    return int(round(x)) if integer else float(f"{x:.3g}")


def _quiet() -> None:
    import logging
    import warnings

    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


# Optuna storages already opened in this process, by database file. Opening one builds an SQLAlchemy engine and
# checks the schema (~0.1 s); a campaign asks in every round's propose and distill, and opens it once early, while
# the first job's worker still imports (agent/runs.py). Keyed by the file's identity too, so a database that was
# removed and made again is opened afresh.
_STORAGES: dict[str, tuple[int, Any]] = {}  # database file -> (its inode when opened, the storage)


def _rdb_storage(path: Path):
    import optuna

    _quiet()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = str(path.resolve())
    hit = _STORAGES.get(key)
    if hit is not None and path.exists() and hit[0] == path.stat().st_ino:
        return hit[1]
    storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
    _STORAGES[key] = (path.stat().st_ino, storage)
    return storage


class ValueOptimizer:
    """The campaign's Optuna studies (one per knob) in ``HOME/campaigns/ID/optuna.db``."""

    def __init__(self, home: Path, campaign_id: str, seed: int):
        self.path = Path(home) / "campaigns" / campaign_id / "optuna.db"
        self.campaign_id, self.seed = campaign_id, seed
        self._storage = None

    def storage(self):
        """The campaign's Optuna storage, one per database file and process (see ``_STORAGES``)."""
        if self._storage is None:
            self._storage = _rdb_storage(self.path)
        return self._storage

    def study(self, knob: str, round_: int = 0):
        import optuna

        digest = hashlib.sha256(f"{self.seed}:{round_}:{knob}".encode()).hexdigest()
        sampler = optuna.samplers.TPESampler(seed=int(digest[:8], 16), n_startup_trials=1)
        # "@move": the study of moves (see the module docstring); a campaign started before moves keeps its old
        # study of values untouched, and its decided backtests are synced into this one on the next ask. A knob
        # that became a scale knob after its study existed gets a study of log moves of its own (Optuna refuses a
        # second distribution kind for a parameter, and an old linear move would read as a log one).
        name = f"{knob}@{'log' if knob in RELOGGED else ''}move"
        return optuna.create_study(study_name=name, storage=self.storage(), sampler=sampler,
                                   direction="maximize", load_if_exists=True)

    # ------------------------------------------------------------------ history
    def sync(self, harness: HarnessSpec, knob: str,
             history: list[tuple[str, Any, Any, float | None, str]]) -> int:
        """Record every decided backtest of ``knob`` as a trial, once: (proposal id, old value, new value, effect,
        outcome).

        A trial asked for the proposal is told its score; a decision with no trial yet (the value came from
        a brain before this study existed, or the knob's history predates it) is added as a finished trial.
        Returns the number of finished trials the study then has.
        """
        import optuna

        study = self.study(knob)
        by_key = {t.user_attrs.get(KEY): t for t in study.get_trials(deepcopy=False)}
        dist = study_distribution(harness, knob, knob in LOG_KNOBS)
        for pid, old, value, effect, outcome in history:
            move = move_of(knob, old, value)
            if move is None:
                continue
            score = _score(effect, outcome)
            t = by_key.get(pid)
            if t is not None and t.state == optuna.trial.TrialState.WAITING:
                study.ask({"move": dist})
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
                params={"move": int(move) if dist_int(dist) else move}, distributions={"move": dist},
                value=score, state=state, user_attrs={KEY: pid, "source": "history", "value": value}))
        return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))

    # ------------------------------------------------------------------ ask
    def suggest(self, key: str, harness: HarnessSpec, knob: str, value: Any, round_: int,
                fixed: str | None = None) -> ValueChoice:
        """The value to backtest for a draft ``knob → value`` (proposal ``key``); see the module docstring.

        Call :meth:`sync` with the knob's decided backtests first: the study is conditioned on what it holds.
        ``fixed`` names where ``value`` came from when it is to be backtested as it is (a bracket arm): it is
        still recorded as the proposal's trial, so its effect informs later asks.
        """
        import optuna

        current = harness.knobs().get(knob)
        window = search_window(harness, knob, current, value)
        if window is None or (knob in LOG_KNOBS and not window.log):
            # a scale knob moved off zero (weight decay 0 -> 0.01) has no log move its study could record
            return ValueChoice(value=value, source="fixed")
        study = self.study(knob, round_)
        mwin = _move_window(knob, current, window)
        dist = _distribution(mwin)
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get(KEY) != key]
        mine = [t for t in trials if t.user_attrs.get(KEY) == key]
        if mine:  # asked before a kill -9: that same trial, never a second one
            t = mine[0]
            if t.state == optuna.trial.TrialState.WAITING:
                study.ask({"move": dist})  # pops the waiting (enqueued) trial: ours
                t = next(x for x in study.get_trials(deepcopy=False) if x.user_attrs.get(KEY) == key)
            chosen = t.user_attrs.get("value", value)
            return ValueChoice(value=chosen, source=t.user_attrs.get("source", "optuna-tpe"),
                               window=(window.low, window.high), trials=len(done))
        if fixed is not None:
            chosen, source = value, fixed
        elif not done:  # no history: the draft's own (library) step
            chosen, source = value, "fallback"
        else:  # TPE on an in-memory copy (seeded, same history: deterministic), then recorded under the key
            probe = optuna.create_study(sampler=study.sampler, direction="maximize")
            for t in done:
                probe.add_trial(t)
            chosen, source = _apply(knob, current, probe.ask({"move": dist}).params["move"], window), "optuna-tpe"
        move = move_of(knob, current, chosen)
        study.enqueue_trial({"move": int(round(move)) if mwin.integer else min(max(move, mwin.low), mwin.high)},
                            user_attrs={KEY: key, "source": source, "value": chosen})
        study.ask({"move": dist})
        return ValueChoice(value=chosen, source=source, window=(window.low, window.high), trials=len(done))


def dist_int(dist: Any) -> bool:
    from optuna.distributions import IntDistribution

    return isinstance(dist, IntDistribution)


def _score(effect: float | None, outcome: str) -> float | None:
    """The objective Optuna maximises for one decided backtest (None: a failed trial)."""
    if outcome == "blocked":
        return BLOCKED_SCORE
    if outcome == "screened":
        return 0.0
    if outcome == "failed" or effect is None:
        return None
    return float(effect)
