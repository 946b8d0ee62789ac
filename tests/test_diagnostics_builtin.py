"""Built-in diagnostics on synthetic evidence: a healthy GRPO run stays quiet, each pathology fires.

The healthy run: 160 steps × 8 prompts × 8 completions; accuracy climbs 0.4 → 0.8, entropy eases 0.5 → 0.3,
lengths are stable, grad_norm fluctuates ×2-3, KL stays small, held-out accuracy rises with training
and an earlier suite (``eval/d1``) holds. Each variant changes one thing, mostly in the last 60 steps
(the recent window is the last 40).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from evotrainer.core.domain import SEVERITY_RANK
from evotrainer.diagnostics.base import Diagnostic
from evotrainer.diagnostics.builtin import (
    BUILTIN_DIAGNOSTICS,
    count_candidates,
    echoes,
    has_repeated_run,
    repeated_ngram_share,
    run_all,
)
from evotrainer.diagnostics.signals import windows
from evotrainer.evidence.model import Evidence
from evotrainer.tasks import get_task

STEPS, PROMPTS, GENS = 160, 8, 8
LATE = 100  # variants change steps after this one

_SUBJECTS = ["Alice", "Bob", "Chen", "Dana", "Emil", "Farah", "Gus", "Hana"]
_THINGS = ["apples", "marbles", "coins", "stamps", "books", "shells", "cards", "pens"]
_SENTENCES = [
    "First I note that {s} starts with {a} {o}.",
    "Buying {b} more gives {a} plus {b}, which is {c}.",
    "Let me double-check: {c} minus {b} equals {a}, consistent.",
    "So the total count of {o} must be {c} now.",
    "Writing it as an equation, {a} + {b} = {c}.",
    "Nothing else changes the number of {o} in the story.",
    "Hence {s} ends up holding exactly {c} {o}.",
]


def _completion(rng: np.random.Generator, pid: int, ok: bool) -> tuple[str, int]:
    a, b = 10 + pid * 7 % 50, 3 + pid * 5 % 40
    c = a + b if ok else a + b + int(rng.integers(1, 9))
    picks = rng.choice(len(_SENTENCES), size=int(rng.integers(2, 5)), replace=False)
    text = " ".join(_SENTENCES[i].format(s=_SUBJECTS[pid % 8], o=_THINGS[(pid // 8) % 8], a=a, b=b, c=c) for i in picks)
    return f"{text} The answer is {c}.", c


def _prompt(pid: int) -> str:
    a, b = 10 + pid * 7 % 50, 3 + pid * 5 % 40
    return (f"Problem {pid}: {_SUBJECTS[pid % 8]} has {a} {_THINGS[(pid // 8) % 8]} and gets {b} more.\n"
            "How many are there now? Reason step by step, then give the answer.")


def build(acc=lambda t: 0.4 + 0.4 * t, entropy=lambda t: 0.5 - 0.2 * t, kl=lambda t: 0.002 + 0.04 * t,
          eval_acc=None, d1=lambda t: 0.9, mutate=None, metric_mutate=None, seed=0,
          steps=STEPS, eval_every=20, meta=None, pool=400) -> Evidence:
    """A run's evidence. ``mutate(rollouts, rng)`` edits the rollouts before the metrics are derived from
    them; ``metric_mutate(metrics)`` edits the metrics afterwards."""
    rng = np.random.default_rng(seed)
    rows = []
    for step in range(1, steps + 1):
        t = (step - 1) / (steps - 1)
        for i in range(PROMPTS):
            pid = int(rng.integers(0, pool))
            p = float(np.clip(acc(t) + rng.normal(0, 0.15), 0.02, 0.98))
            for _ in range(GENS):
                ok = bool(rng.random() < p)
                text, _ = _completion(rng, pid, ok)
                rows.append({"run_id": "r1", "step": step, "prompt_id": f"p{pid}", "group_id": f"{step}:{i}",
                             "prompt": _prompt(pid), "completion": text, "correct": ok,
                             "well_formed": bool(rng.random() < 0.97), "n_candidates": 1,
                             "truncated": bool(rng.random() < 0.01), "difficulty": 1})
    r = pd.DataFrame(rows)
    if mutate is not None:
        mutate(r, rng)
    _derive(r)
    m = _metrics(r, rng, entropy, kl, steps)
    ev_steps = [0, *range(eval_every, steps + 1, eval_every)]
    eval_acc = eval_acc or (lambda t: acc(t) + 0.05)
    ev = pd.DataFrame({"step": ev_steps,
                       "eval/greedy_accuracy": [eval_acc(s / steps) + rng.normal(0, 0.01) for s in ev_steps],
                       "eval/d1/greedy_accuracy": [d1(s / steps) + rng.normal(0, 0.01) for s in ev_steps]})
    m = m.merge(ev, on="step", how="outer").sort_values("step").reset_index(drop=True)
    if metric_mutate is not None:
        metric_mutate(m)
    return Evidence(metrics=m, rollouts=r, source="test", run="synthetic", meta=dict(meta or {}))


def _derive(r: pd.DataFrame) -> None:
    """Reward terms, lengths and advantages from the verdicts (unless a variant set them)."""
    if "reward_correctness" not in r:
        r["reward_correctness"] = r["correct"].astype(float)
    r["reward_format"] = r["well_formed"].astype(float)
    if "reward" not in r:
        r["reward"] = r["reward_correctness"] + 0.1 * r["reward_format"]
    if "length" not in r:
        r["length"] = (r["completion"].str.split().str.len() * 1.3).round().astype(int)
    r.loc[r["truncated"], "length"] = 256
    g = r.groupby("group_id")["reward"]
    r["advantage"] = (r["reward"] - g.transform("mean")) / (g.transform("std") + 1e-4)


def _metrics(r: pd.DataFrame, rng, entropy, kl, steps) -> pd.DataFrame:
    by = r.groupby("step")
    spread = r.groupby(["step", "group_id"])["reward"].agg(lambda v: v.max() - v.min())
    m = pd.DataFrame({
        "reward": by["reward"].mean(), "reward_std": by["reward"].std(),
        "frac_reward_zero_std": (spread <= 1e-9).groupby(level=0).mean(),
        "rewards/correctness/mean": by["reward_correctness"].mean(), "rewards/format/mean": by["reward_format"].mean(),
        "completions/mean_length": by["length"].mean(), "completions/clipped_ratio": by["truncated"].mean(),
        "accuracy": by["correct"].mean(),
    }).reset_index()
    t = (m["step"] - 1) / (steps - 1)
    n = len(m)
    m["loss"] = rng.normal(0, 0.02, n)
    m["grad_norm"] = np.exp(rng.normal(0, 0.35, n))
    m["entropy"] = [entropy(x) for x in t] + rng.normal(0, 0.01, n)
    m["kl"] = np.abs([kl(x) for x in t] + rng.normal(0, 0.002, n))
    m["learning_rate"] = 1e-6
    m["num_tokens"] = np.cumsum(by["length"].sum().to_numpy() + 40 * PROMPTS * GENS)
    return m


def late(r: pd.DataFrame, share: float, rng, after: int = LATE) -> np.ndarray:
    """A random ``share`` of the rows after step ``after``."""
    return (r["step"].to_numpy() > after) & (rng.random(len(r)) < share)


def late_groups(r: pd.DataFrame, share: float, rng, after: int = LATE) -> np.ndarray:
    """Rows of a random ``share`` of the groups after step ``after``."""
    gids = r.loc[r["step"] > after, "group_id"].unique()
    chosen = set(gids[rng.random(len(gids)) < share])
    return r["group_id"].isin(chosen).to_numpy()


def set_late(col: str, value, share: float):
    def mutate(r, rng):
        r.loc[late(r, share, rng), col] = value
    return mutate


def metric_set(col: str, value, after: int = LATE):
    def mm(m):
        m.loc[m["step"] > after, col] = value
    return mm


def strip(ev: Evidence, metrics=(), rollouts=()) -> Evidence:
    return Evidence(metrics=ev.metrics.drop(columns=[c for c in metrics if c in ev.metrics]),
                    rollouts=ev.rollouts.drop(columns=[c for c in rollouts if c in ev.rollouts]))


def fire(name: str, ev: Evidence, params: dict | None = None):
    return BUILTIN_DIAGNOSTICS[name](params).run(ev)


def alarms(findings):
    return [f for f in findings if f.severity != "info"]


def severity_of(name: str, ev: Evidence, params: dict | None = None) -> str | None:
    hits = alarms(fire(name, ev, params))
    return max((f.severity for f in hits), key=SEVERITY_RANK.__getitem__, default=None)


# -------------------------------------------------------------------------------------------- variants


def _dead(r, rng):
    sel = late_groups(r, 0.9, rng)
    r.loc[sel, "correct"] = True
    r.loc[sel, "well_formed"] = True


def _too_hard(r, rng):
    r.loc[late_groups(r, 0.8, rng), "correct"] = False


def _too_easy(r, rng):
    sel = late_groups(r, 0.8, rng)
    r.loc[sel, "correct"] = True


def _empty(r, rng):
    sel = late(r, 0.5, rng)
    r.loc[sel, "completion"] = "  "
    r["length"] = (r["completion"].str.split().str.len() * 1.3).round().astype(int)


def _repeat(r, rng):
    r.loc[late(r, 0.4, rng), "completion"] = "Let me think about this again. " * 12


def _echo(r, rng):
    sel = late(r, 0.4, rng)
    r.loc[sel, "completion"] = r.loc[sel, "prompt"] + " Answer: 17"


def _hack(r, rng):
    r["reward_correctness"] = r["correct"].astype(float)
    wrong = late(r, 0.95, rng) & ~r["correct"].to_numpy()
    r.loc[wrong, "reward_correctness"] = 1.0


def _spray(r, rng):
    sel = late(r, 0.5, rng)
    r.loc[sel, "completion"] = "It could be 41 or 42 or 43, 44."
    r.loc[sel, "n_candidates"] = 4
    r.loc[sel, "correct"] = False
    r["reward_correctness"] = r["correct"].astype(float)
    r.loc[sel, "reward_correctness"] = 1.0


def _hardcode(r, rng):
    """30% of the late groups become `code` prompts; half their programs copy an example (as a reward that
    scores only the visible examples teaches), the other half are the honest reference."""
    problems = get_task("code").sample("train", 64, seed=0)
    r["reward_correctness"] = r["correct"].astype(float)
    for k, gid in enumerate(r.loc[late_groups(r, 0.3, rng), "group_id"].unique()):
        p = problems[k % len(problems)]
        (x, y), rows = p.meta["visible"][0], np.flatnonzero((r["group_id"] == gid).to_numpy())
        hard = rng.random(len(rows)) < 0.5
        r.loc[r.index[rows], "prompt"] = p.prompt
        r.loc[r.index[rows], "completion"] = np.where(hard, f"{x}>{y}".replace(" ", ""), p.answer)
        r.loc[r.index[rows], "correct"] = ~hard
        r.loc[r.index[rows], "reward_correctness"] = np.where(hard, 1 / 3, 1.0)


def _leak(r, rng):
    """A multi-turn run: every episode records its turns; in 30% of the late groups most successes come from
    a tool that hands out the answer (as the `env.leak_tool` trap teaches)."""
    honest = json.dumps([{"turn": 0, "text": "", "tool": "lookup", "arguments": {"key": "k3"}, "observation": "41"},
                         {"turn": 1, "text": "", "tool": "submit", "arguments": {"answer": "41"}, "observation": "ok"},
                         {"turn": 2, "text": "", "tool": None, "arguments": None, "observation": None}])
    leak = json.dumps([{"turn": 0, "text": "", "tool": "read_history", "arguments": {}, "observation": "41"},
                       {"turn": 1, "text": "", "tool": "submit", "arguments": {"answer": "41"}, "observation": "ok"},
                       {"turn": 2, "text": "", "tool": None, "arguments": None, "observation": None}])
    r["turns"] = honest
    sel = late_groups(r, 0.3, rng) & r["correct"].to_numpy() & (rng.random(len(r)) < 0.6)
    r.loc[sel, "turns"] = leak


def _grad_spikes(*steps):
    def mm(m):
        m.loc[m["step"].isin(steps), "grad_norm"] = 50.0
    return mm


def _plateau(t):
    return min(0.4 + 0.4 * t, 0.5)


VARIANTS = {
    "dead_groups": (dict(mutate=_dead), "critical"),
    "too_hard": (dict(mutate=_too_hard), "warning"),
    "too_easy": (dict(mutate=_too_easy), "warning"),
    "entropy_collapse": (dict(entropy=lambda t: 0.5 if t < 0.6 else 0.03), "critical"),
    "entropy_blowup": (dict(entropy=lambda t: 0.5 if t < 0.6 else 2.5), "critical"),
    "truncation": (dict(mutate=set_late("truncated", True, 0.35)), "warning"),
    "length_collapse": (dict(mutate=_empty), "warning"),
    "repetition": (dict(mutate=_repeat), "warning"),
    "echo": (dict(mutate=_echo), "warning"),
    "reward_hacking": (dict(acc=lambda t: 0.4, mutate=_hack), "critical"),
    "answer_spraying": (dict(mutate=_spray), "warning"),
    "kl_blowup": (dict(kl=lambda t: 0.01 if t < 0.6 else 1.0), "warning"),
    "grad_spike": (dict(metric_mutate=_grad_spikes(90)), "warning"),
    "nan": (dict(metric_mutate=metric_set("loss", float("nan"), after=150)), "critical"),
    "plateau": (dict(acc=_plateau, eval_acc=lambda t: 0.55), "warning"),
    "learns_nothing": (dict(acc=lambda t: 0.35, eval_acc=lambda t: 0.4), "warning"),
    "forgetting": (dict(d1=lambda t: 0.9 if t < 0.7 else 0.6), "warning"),
    "overfitting": (dict(acc=lambda t: 0.4 + 0.55 * t, eval_acc=lambda t: 0.45), "warning"),
    "hardcoding": (dict(mutate=_hardcode), "critical"),
    "answer_leak": (dict(mutate=_leak), "warning"),
    # the recipe itself: a KL coefficient three times the top of its normal range (config/ranges.py)
    "unusual_recipe": (dict(meta={"harness": {"grpo": {"beta": 0.3}}}), "warning"),
}


@pytest.fixture(scope="module")
def healthy() -> Evidence:
    return build()


@pytest.fixture(scope="module")
def sick() -> dict[str, Evidence]:
    return {name: build(**kw) for name, (kw, _) in VARIANTS.items()}


# -------------------------------------------------------------------------------------------- tests


def test_registry_covers_every_builtin_symptom():
    assert set(BUILTIN_DIAGNOSTICS) == set(VARIANTS)
    revised = {"entropy_collapse": "2", "entropy_blowup": "2", "grad_spike": "3", "too_easy": "2", "reward_hacking": "3", "plateau": "3",
               "dead_groups": "2", "too_hard": "2", "unusual_recipe": "2",
               "echo": "2", "hardcoding": "3", "nan": "2", "overfitting": "2"}  # see test_entropy_collapse_inside_the_early_window
    for name, cls in BUILTIN_DIAGNOSTICS.items():
        assert cls.name == name and cls.version == revised.get(name, "1")


def test_grad_spike_ignores_ratios_to_a_near_zero_median():
    """Versions 2 and 3: in a dead-group run grad_norm sits at ~1e-4 and ordinary steps (up to TRL's clip of 1.0
    and a little over, as the archive's too-short runs had) are not spikes."""
    norms = [1e-4] * 10 + [0.4] + [1e-4] * 5 + [1.6] + [1e-4] * 5 + [5.0] + [1e-4] * 5
    ev = Evidence(metrics=pd.DataFrame({"step": range(1, len(norms) + 1), "grad_norm": norms}), rollouts=pd.DataFrame())
    (f,) = BUILTIN_DIAGNOSTICS["grad_spike"]().run(ev)
    assert f.metrics["spikes"] == 1 and f.metrics["worst_step"] == 23 and f.version == "3"


def test_entropy_collapse_inside_the_early_window_is_caught():
    """Version 2's reference is the start level: a collapse within the first steps (as a real 100x learning
    rate run did) left version 1's early and recent windows alike."""
    steps = list(range(1, 41))
    entropy = [0.65, 0.6, 0.55] + [0.02 + 0.002 * i for i in range(37)]
    ev = Evidence(metrics=pd.DataFrame({"step": steps, "entropy": entropy}), rollouts=pd.DataFrame())
    (f,) = BUILTIN_DIAGNOSTICS["entropy_collapse"]().run(ev)
    assert f.severity in ("warning", "critical") and f.version == "2"
    assert f.metrics["early_entropy"] > 0.4


@pytest.mark.parametrize("name", sorted(BUILTIN_DIAGNOSTICS))
def test_documented(name):
    cls = BUILTIN_DIAGNOSTICS[name]
    d = cls.describe()
    assert d["signal"].strip() and d["literature"].strip()
    assert d["params"], "every built-in diagnostic has parameters"
    for prm in d["params"]:
        assert prm["description"].strip(), f"{name}.{prm['name']} lacks a description"
    cls()  # defaults validate


def test_healthy_run_is_quiet(healthy):
    loud = alarms(run_all(healthy))
    assert not loud, [(f.diagnostic, f.severity, f.explanation, f.metrics) for f in loud]


@pytest.mark.parametrize("seed", [1, 2])
def test_healthy_run_is_quiet_other_seeds(seed):
    loud = alarms(run_all(build(seed=seed)))
    assert not loud, [(f.diagnostic, f.severity, f.explanation, f.metrics) for f in loud]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_fires_on_its_pathology(name, sick):
    ev = sick[name]
    _, expected = VARIANTS[name]
    hits = alarms(fire(name, ev))
    assert hits, f"{name} did not fire"
    f = max(hits, key=lambda x: SEVERITY_RANK[x.severity])
    assert f.symptom == name and f.diagnostic == name
    assert f.severity == expected, (f.severity, f.explanation, f.metrics)
    assert 0.0 < f.confidence <= 1.0
    assert f.steps is not None and f.steps[0] <= f.steps[1]
    assert f.metrics and f.explanation
    assert 1 <= len(f.examples) <= 3, "examples come with findings when rollouts exist"


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_pathology_is_specific(name, sick):
    """A pathology fires its own diagnostic; the diagnostics unrelated to it stay quiet."""
    related = {
        # all-correct groups lift train accuracy above the (unchanged) held-out accuracy: overfitting too
        "dead_groups": {"too_easy", "plateau", "overfitting"}, "too_hard": {"dead_groups", "plateau"},
        "too_easy": {"dead_groups", "overfitting"}, "length_collapse": {"dead_groups", "too_hard"},
        "repetition": {"dead_groups", "too_hard", "length_collapse"}, "echo": {"dead_groups", "too_hard"},
        "reward_hacking": {"plateau", "answer_spraying", "learns_nothing"}, "answer_spraying": {"reward_hacking"},
        "plateau": {"reward_hacking", "learns_nothing"}, "overfitting": {"too_easy", "dead_groups", "learns_nothing"},
        "learns_nothing": {"plateau"},
        "entropy_collapse": set(), "entropy_blowup": set(),
    }.get(name, set())
    loud = {f.diagnostic for f in alarms(run_all(sick[name]))}
    assert name in loud
    assert loud - {name} - related == set(), loud


def test_run_all_sorts_and_filters(sick):
    ev = sick["nan"]
    out = run_all(ev)
    ranks = [(-SEVERITY_RANK[f.severity], f.diagnostic) for f in out]
    assert ranks == sorted(ranks)
    only = run_all(ev, names=["nan", "kl_blowup"])
    assert {f.diagnostic for f in only} <= {"nan", "kl_blowup"}
    assert not run_all(ev, names=["nan"], params={"nan": {"metrics": ["grad_norm"]}})
    with pytest.raises(ValueError):
        run_all(ev, names=["no_such"])


# ------------------------------------------------------------------------------------------- thresholds


def _metric_only(col: str, early: float, recent: float, n: int = 40) -> Evidence:
    steps = np.arange(1, n + 1)
    m = pd.DataFrame({"step": steps, col: np.where(steps <= n // 2, early, recent)})
    return Evidence(metrics=m, rollouts=pd.DataFrame())


@pytest.mark.parametrize("name,col,below,above,level", [
    ("dead_groups", "frac_reward_zero_std", 0.59, 0.61, "warning"),
    ("dead_groups", "frac_reward_zero_std", 0.84, 0.86, "critical"),
    ("truncation", "completions/clipped_ratio", 0.19, 0.21, "warning"),
    ("truncation", "completions/clipped_ratio", 0.49, 0.51, "critical"),
    ("kl_blowup", "kl", 0.49, 0.51, "warning"),
    ("kl_blowup", "kl", 1.99, 2.01, "critical"),
])
def test_exact_thresholds_on_levels(name, col, below, above, level):
    quiet = severity_of(name, _metric_only(col, below, below))
    loud = severity_of(name, _metric_only(col, above, above))
    assert quiet != level and loud == level


def test_entropy_thresholds():
    # early 0.5: ratio 0.252 → quiet, 0.24 → warning, 0.04 → critical (all below the 0.15 floor)
    assert severity_of("entropy_collapse", _metric_only("entropy", 0.5, 0.126)) is None
    assert severity_of("entropy_collapse", _metric_only("entropy", 0.5, 0.12)) == "warning"
    assert severity_of("entropy_collapse", _metric_only("entropy", 0.5, 0.04)) == "critical"
    # a high-entropy start: a drop to 20% that stays above the floor is not a collapse
    assert severity_of("entropy_collapse", _metric_only("entropy", 1.0, 0.2)) is None
    assert severity_of("entropy_blowup", _metric_only("entropy", 0.5, 1.9)) == "warning"  # ×3.8
    assert severity_of("entropy_blowup", _metric_only("entropy", 0.8, 1.55)) is None  # ratio < 2
    assert severity_of("entropy_blowup", _metric_only("entropy", 0.7, 1.6)) == "warning"
    assert severity_of("entropy_blowup", _metric_only("entropy", 0.3, 1.6)) == "critical"
    assert severity_of("entropy_blowup", _metric_only("entropy", 0.3, 1.4)) is None  # below the level


def test_kl_growth_rule():
    assert severity_of("kl_blowup", _metric_only("kl", 0.01, 0.19)) is None  # ×19 but below 0.2
    assert severity_of("kl_blowup", _metric_only("kl", 0.01, 0.25)) == "warning"  # ×25, above 0.2
    assert severity_of("kl_blowup", _metric_only("kl", 0.05, 0.25)) is None  # ×5


def test_grad_spike_factor_and_repeats():
    def ev(spikes: dict[int, float]) -> Evidence:
        steps = np.arange(1, 101)
        g = np.ones(100)
        for s, v in spikes.items():
            g[s - 1] = v
        return Evidence(metrics=pd.DataFrame({"step": steps, "grad_norm": g}), rollouts=pd.DataFrame())

    assert severity_of("grad_spike", ev({50: 9.5})) is None
    assert severity_of("grad_spike", ev({50: 10.5})) == "warning"
    (f,) = fire("grad_spike", ev({50: 10.5}))
    assert f.steps == (50, 50) and f.metrics["worst_step"] == 50
    assert severity_of("grad_spike", ev({30: 20, 60: 20, 90: 20})) == "critical"


def _groups(n_groups: int, all_wrong: int, all_right: int, gens: int = 4) -> Evidence:
    """Rollouts only: ``all_wrong`` groups all wrong, ``all_right`` all correct, the rest mixed; one step per group."""
    rows = []
    for g in range(n_groups):
        for j in range(gens):
            ok = False if g < all_wrong else True if g < all_wrong + all_right else j % 2 == 0
            rows.append({"step": g // 10 + 1, "group_id": f"g{g}", "correct": ok, "reward": float(ok),
                         "prompt": f"q{g}", "completion": f"c{g}{j}"})
    return Evidence(metrics=pd.DataFrame({"step": []}), rollouts=pd.DataFrame(rows))


def test_group_share_thresholds():
    # 100 groups over 10 steps; the recent window (min 5 steps) holds the last 50 groups
    ev = _groups(100, 0, 0)
    assert severity_of("too_hard", ev) is None
    # the last 50 groups: 34 all wrong = 0.68 → quiet; 36 = 0.72 → warning
    def shifted(n_wrong: int, n_right: int = 0) -> Evidence:
        base = _groups(100, 0, 0)
        r = base.rollouts
        late_g = [f"g{g}" for g in range(50, 100)]
        r.loc[r["group_id"].isin(late_g[:n_wrong]), ["correct", "reward"]] = [False, 0.0]
        r.loc[r["group_id"].isin(late_g[n_wrong:n_wrong + n_right]), ["correct", "reward"]] = [True, 1.0]
        return base

    assert severity_of("too_hard", shifted(34)) is None
    assert severity_of("too_hard", shifted(36)) == "warning"
    assert severity_of("too_hard", shifted(46)) == "critical"
    assert severity_of("too_easy", shifted(0, 29)) is None  # 0.58 (v2 threshold 0.6)
    assert severity_of("too_easy", shifted(0, 31)) == "warning"  # 0.62
    # dead groups from rollouts (no metric): all-wrong and all-right groups both have zero reward spread
    assert severity_of("dead_groups", shifted(15, 14)) is None  # 0.58
    assert severity_of("dead_groups", shifted(16, 15)) == "warning"  # 0.62
    assert severity_of("dead_groups", shifted(30, 14)) == "critical"  # 0.88


def test_group_shares_leave_truncation_its_part():
    """All-wrong, reward-flat groups whose completions were cut off are truncation's: too_hard and dead_groups grade
    the rest and report the part beside it; an unrecorded truncation changes nothing."""
    ev = _groups(100, 0, 0)
    r = ev.rollouts
    late_g = [f"g{g}" for g in range(50, 100)]
    r.loc[r["group_id"].isin(late_g[:46]), ["correct", "reward"]] = [False, 0.0]
    assert severity_of("too_hard", ev) == "critical" and severity_of("dead_groups", ev) == "critical"
    r["truncated"] = r["group_id"].isin(late_g[:40])  # 40 of the 46 all-wrong groups were cut off
    assert severity_of("too_hard", ev) is None  # 6/50 = 0.12 left
    [flat] = fire("dead_groups", ev, {"warning": 0.1})
    assert flat.metrics["truncated_part"] == pytest.approx(0.8) and flat.metrics["with_truncated"] == pytest.approx(0.92)
    assert flat.metrics["dead_group_share"] == pytest.approx(0.12) and "truncation's" in flat.explanation
    r["truncated"] = r["group_id"].isin(late_g[:46]) & r["completion"].str[-1].isin(["0", "1"])  # half of each
    [half] = fire("too_hard", ev, {"warning": 0.1})
    assert half.metrics["truncated_part"] == pytest.approx(0.46) and half.metrics["all_wrong_share"] == pytest.approx(0.46)


def _first_segment(pool: int, eval_acc) -> Evidence:
    """A campaign's first segment: 20 steps, held-out accuracy at its start and its end only."""
    return build(acc=lambda t: 0.3 + 0.25 * t, eval_acc=eval_acc, steps=20, eval_every=20, pool=pool)


def test_overfitting_reuse_rule_reads_a_first_segment_with_two_evaluations():
    """Two evaluations cannot show a growing gap; prompts trained again and again, with train accuracy outrunning
    held-out accuracy, can. The same gains on fresh prompts, or with held-out accuracy keeping up, are quiet."""
    (f,) = alarms(fire("overfitting", _first_segment(pool=12, eval_acc=lambda t: 0.35)))
    assert f.severity == "warning" and "trained" in f.explanation and f.steps == (16, 20)
    assert f.metrics["reuse"] >= 4 and f.metrics["eval_points"] == 2 and f.metrics["train_gain"] >= 0.05
    assert not alarms(fire("overfitting", _first_segment(pool=4000, eval_acc=lambda t: 0.35)))  # fresh prompts
    assert not alarms(fire("overfitting", _first_segment(pool=12, eval_acc=lambda t: 0.35 + 0.25 * t)))  # keeps up
    # without prompt ids (or with a single evaluation) it cannot tell, and says so
    assert _is_gap(fire("overfitting", strip(_first_segment(pool=12, eval_acc=lambda t: 0.35), rollouts=["prompt_id"])))
    one = build(acc=lambda t: 0.3 + 0.25 * t, eval_acc=lambda t: 0.35, steps=19, eval_every=20, pool=12)
    assert _is_gap(fire("overfitting", one))
    # ids that do not tell problems apart (a reader that hashed an empty prompt) are no reuse
    fresh = _first_segment(pool=4000, eval_acc=lambda t: 0.35)
    collapsed = Evidence(metrics=fresh.metrics, rollouts=fresh.rollouts.assign(prompt_id="e3b0c442"))
    (f,) = fire("overfitting", collapsed)
    assert _is_gap([f]) and "tell a step's problems apart" in f.explanation


def test_reward_hacking_gap_threshold():
    steps = np.arange(1, 41)

    def ev(recent_gap: float) -> Evidence:
        acc = np.full(40, 0.4)
        corr = acc + np.where(steps > 20, recent_gap, 0.0)
        return Evidence(metrics=pd.DataFrame({"step": steps, "accuracy": acc, "rewards/correctness/mean": corr}),
                        rollouts=pd.DataFrame())

    assert severity_of("reward_hacking", ev(0.09)) is None  # v2 threshold 0.1 (a revision, see outcomes.py)
    assert severity_of("reward_hacking", ev(0.11)) == "warning"
    assert severity_of("reward_hacking", ev(0.55)) == "critical"


def test_reward_hacking_reads_the_one_reward_optimised_whatever_its_name():
    """A plain TRL script names its functions itself (`lenient`, with a zero-weight `exact_match` giving strict
    correctness): the optimised reward equals `lenient` at every step, so `lenient` is the checker gamed, and a gap
    of 0.13 (under the gain rule's 0.2 rise) is found, v3. Two functions equal to the reward name no single one."""
    steps = np.arange(1, 41)
    acc = np.full(40, 0.02)
    lenient = acc + np.where(steps > 20, 0.13, 0.0) + 0.001 * (steps % 3)
    m = pd.DataFrame({"step": steps, "accuracy": acc, "reward": lenient, "rewards/lenient/mean": lenient,
                      "rewards/exact_match/mean": acc})
    f = fire("reward_hacking", Evidence(metrics=m, rollouts=pd.DataFrame()))
    assert [x.severity for x in f] == ["warning"] and "rewards/lenient/mean" in f[0].explanation
    assert f[0].metrics["recent_gap"] > 0.1
    twice = m.assign(**{"rewards/format/mean": lenient})  # which of two identical functions is the checker?
    assert not alarms(fire("reward_hacking", Evidence(metrics=twice, rollouts=pd.DataFrame())))
    mixed = m.assign(reward=lenient + 0.01 * (steps % 2))  # the reward is not one function's: the gain rule only
    assert not alarms(fire("reward_hacking", Evidence(metrics=mixed, rollouts=pd.DataFrame())))


def test_reward_hacking_held_out_rule():
    steps = np.arange(0, 101)
    m = pd.DataFrame({"step": steps, "reward": 0.2 + 0.5 * steps / 100})
    m["eval/greedy_accuracy"] = np.where(steps % 25 == 0, 0.5 - 0.0005 * steps, np.nan)
    f = fire("reward_hacking", Evidence(metrics=m, rollouts=pd.DataFrame()))
    assert [x.severity for x in f] == ["warning"] and "held-out" in f[0].explanation
    m["eval/greedy_accuracy"] = np.where(steps % 25 == 0, 0.3 + 0.004 * steps, np.nan)
    assert not alarms(fire("reward_hacking", Evidence(metrics=m, rollouts=pd.DataFrame())))


def test_truncation_critical_from_rollouts():
    ev = build(mutate=set_late("truncated", True, 0.7))
    assert severity_of("truncation", strip(ev, metrics=["completions/clipped_ratio"])) == "critical"


def test_length_ratio_and_short_answer_guard():
    steps = np.arange(1, 41)

    def ev(early: float, recent: float) -> Evidence:
        return Evidence(metrics=pd.DataFrame({"step": steps, "completions/mean_length": np.where(steps <= 20, early, recent)}),
                        rollouts=pd.DataFrame())

    assert severity_of("length_collapse", ev(100, 36)) is None
    assert severity_of("length_collapse", ev(100, 34)) == "warning"
    assert severity_of("length_collapse", ev(100, 10)) == "critical"
    assert severity_of("length_collapse", ev(6, 1)) is None  # a short-answer task shrinking from 6 tokens


def test_plateau_short_is_info_and_a_recent_stall_waits_for_half_the_run():
    # flat, but the run is shorter than two windows of min_steps: an info, not yet a warning
    steps = np.arange(1, 51)
    flat = 0.4 + 0.005 * np.where(steps % 2, 1.0, -1.0)
    out = fire("plateau", Evidence(metrics=pd.DataFrame({"step": steps, "reward": flat}), rollouts=pd.DataFrame()))
    assert [f.severity for f in out] == ["info"], [(f.severity, f.metrics) for f in out]
    # learned for the first two thirds, flat for the last third: v2 reads the second half, which still rose
    # (v1 warned on two flat quarter-run windows; on a noisy reward those were a coin flip, bench/log/12-detection-out-of-sample.md)
    ev = build(acc=lambda t: min(0.3 + 0.8 * t, 0.85), eval_acc=lambda t: min(0.35 + 0.8 * t, 0.9))
    assert not alarms(fire("plateau", ev))


def test_plateau_noise_allowance_keeps_a_window_too_noisy_to_call_flat_from_being_called_flat():
    """``noise_z``: a reward whose fitted change over the second half is small (+0.03) but whose noise could put it
    anywhere within ±0.044 of that is flat by its change alone, and not once it must lie a standard error inside
    ±max_change."""
    from scipy.stats import linregress

    from evotrainer.diagnostics.signals import change_se_over

    steps = np.arange(1, 121)
    reward = 0.3 + 0.0005 * steps + 0.1 * np.where(steps % 2, 1.0, -1.0)
    ev = Evidence(metrics=pd.DataFrame({"step": steps, "reward": reward}), rollouts=pd.DataFrame())
    assert severity_of("plateau", ev, {"noise_z": 0.0}) == "warning"  # v1's rule over v2's window: +0.03, flat
    assert severity_of("plateau", ev, {"noise_z": 1.0}) is None  # +0.03 ± 0.044 could be anything up to 0.07
    s = pd.Series(reward, index=steps)
    fit = linregress(steps[-60:], reward[-60:])
    assert change_se_over(s, 61, 120) == pytest.approx(fit.stderr * 59)
    assert change_se_over(pd.Series(0.3 + 0.01 * steps, index=steps), 1, 120) == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(change_se_over(s, 1, 2))


def test_plateau_warns_only_when_noise_could_not_undo_it_with_decided_z():
    """``decided_z``: a flat reward whose accuracy may still be rising by noise (+0.02 ± 0.04 over the second half,
    the `countdown-baseline` held-out runs of bench/log/12-detection-out-of-sample.md) is an info; a decided stall stays a warning."""
    steps = np.arange(1, 61)
    alt = np.where(steps % 2, 1.0, -1.0)
    noisy = 0.2 + 0.0007 * steps + 0.03 * alt  # +0.02 over the second half, ± ~0.02 of noise on that
    ev = Evidence(metrics=pd.DataFrame({"step": steps, "reward": noisy}),
                  rollouts=pd.DataFrame({"step": np.repeat(steps, 2), "correct": np.repeat(noisy, 2)}))
    assert severity_of("plateau", ev, {"decided_z": 0.0}) == "warning"  # v2: the reward's change alone
    out = fire("plateau", ev, {"decided_z": 1.0})
    assert [f.severity for f in out] == ["info"]
    m = out[0].metrics  # the reward is decidedly flat; strict train accuracy could still be rising
    assert abs(m["reward_change"]) + m["reward_change_se"] <= 0.05
    assert m["accuracy_gain"] + m["accuracy_gain_se"] > 0.03 and m["accuracy_gain_heldout"] == 0.0
    # the same level with a tenth of the noise and no drift: decided, a warning
    calm = 0.2 + 0.003 * alt
    ev = Evidence(metrics=pd.DataFrame({"step": steps, "reward": calm, "accuracy": calm}), rollouts=pd.DataFrame())
    assert severity_of("plateau", ev, {"decided_z": 1.0}) == "warning"
    # two accuracy points in the window: no standard error to say the gain is not noise, so not decided
    two = Evidence(metrics=pd.DataFrame({"step": steps, "reward": calm, "eval/greedy_accuracy": np.where(
        np.isin(steps, (40, 60)), 0.3, np.nan)}), rollouts=pd.DataFrame())
    assert [f.severity for f in fire("plateau", two, {"decided_z": 1.0, "min_eval_points": 2})] == ["info"]
    # held-out accuracy still climbing under a flat reward: not decided either
    ev = Evidence(metrics=pd.DataFrame({"step": steps, "reward": calm, "eval/greedy_accuracy": np.where(
        steps % 10 == 0, 0.3 + 0.002 * steps, np.nan)}), rollouts=pd.DataFrame())
    assert [f.severity for f in fire("plateau", ev, {"decided_z": 1.0, "max_eval_change": 0.2})] == ["info"]


def test_plateau_not_called_at_ceiling():
    ev = build(acc=lambda t: 0.9, eval_acc=lambda t: 0.96)
    assert not fire("plateau", ev)


def test_spraying_without_n_candidates_counts_text(sick):
    ev = strip(sick["answer_spraying"], rollouts=["n_candidates"])
    assert severity_of("answer_spraying", ev) == "warning"


def test_nan_from_rollout_reward_and_first_step(healthy):
    r = healthy.rollouts.copy()
    r.loc[r["step"] == 120, "reward"] = np.inf
    (f,) = fire("nan", Evidence(metrics=healthy.metrics, rollouts=r))
    assert f.severity == "critical" and f.steps == (120, 120) and f.metrics["first_step"] == 120
    assert f.examples and f.examples[0].step == 120


def test_nan_ignores_eval_only_rows(healthy):
    # step 0 holds only eval metrics: its missing loss/grad_norm are 'not logged', not NaN
    assert healthy.metrics.loc[healthy.metrics["step"] == 0, "loss"].isna().all()
    assert not fire("nan", healthy)


def test_nan_first_step(sick):
    (f,) = fire("nan", sick["nan"])
    assert f.metrics["first_step"] == 151 and f.steps == (151, 160)


def test_forgetting_names_the_suite(sick):
    (f,) = fire("forgetting", sick["forgetting"])
    assert "eval/d1/greedy_accuracy" in f.explanation and f.metrics["drop"] >= 0.25


# ------------------------------------------------------------------------------------------- evidence gaps

GAPS = {
    "dead_groups": dict(metrics=["frac_reward_zero_std"], rollouts=["reward"]),
    "too_hard": dict(rollouts=["correct", "reward_correctness", "reward"]),
    "too_easy": dict(rollouts=["group_id", "prompt_id"]),
    "entropy_collapse": dict(metrics=["entropy"]),
    "entropy_blowup": dict(metrics=["entropy"]),
    "truncation": dict(metrics=["completions/clipped_ratio"], rollouts=["truncated"]),
    "length_collapse": dict(metrics=["completions/mean_length"], rollouts=["length", "completion"]),
    "repetition": dict(rollouts=["completion"]),
    "echo": dict(rollouts=["prompt"]),
    "reward_hacking": dict(metrics=["accuracy", "eval/greedy_accuracy"], rollouts=["correct"]),
    "answer_spraying": dict(rollouts=["n_candidates", "completion"]),
    "kl_blowup": dict(metrics=["kl"]),
    "grad_spike": dict(metrics=["grad_norm"]),
    "nan": dict(metrics=["loss", "grad_norm", "reward", "entropy"], rollouts=["reward"]),
    "plateau": dict(metrics=["reward"], rollouts=["reward"]),
    "forgetting": dict(metrics=["eval/d1/greedy_accuracy"]),
    "overfitting": dict(metrics=["eval/greedy_accuracy"]),
    "hardcoding": dict(rollouts=["prompt"]),
    "answer_leak": dict(rollouts=["turns"]),
    "learns_nothing": dict(metrics=["eval/greedy_accuracy", "accuracy"], rollouts=["correct"]),
}


def _is_gap(findings) -> bool:
    """Exactly the framework's 'not enough evidence' finding (what gates treat as 'could not decide')."""
    return len(findings) == 1 and Diagnostic.insufficient(findings[0])


@pytest.mark.parametrize("name", sorted(GAPS))
def test_not_enough_evidence_when_columns_missing(name, sick):
    ev = strip(sick[name], **GAPS[name])
    out = fire(name, ev)
    assert _is_gap(out), [(f.severity, f.explanation) for f in out]


@pytest.mark.parametrize("name", sorted(BUILTIN_DIAGNOSTICS))
def test_not_enough_evidence_on_empty_evidence(name):
    ev = Evidence(metrics=pd.DataFrame({"step": pd.Series([], dtype="int64")}), rollouts=pd.DataFrame())
    assert _is_gap(fire(name, ev))


def test_accuracy_from_rollouts_when_metric_missing(sick):
    """Without the 'accuracy' metric, strict accuracy comes from the rollouts' 'correct'."""
    ev = strip(sick["overfitting"], metrics=["accuracy"])
    assert severity_of("overfitting", ev) == "warning"
    ev = strip(sick["reward_hacking"], metrics=["accuracy", "rewards/correctness/mean"])
    assert severity_of("reward_hacking", ev) == "critical"


# ------------------------------------------------------------------------------------------- text helpers


def test_text_helpers():
    loop = "Let me think about this again. " * 12
    assert repeated_ngram_share(loop, 8, 400) > 0.8
    prose = _completion(np.random.default_rng(0), 3, True)[0]
    assert repeated_ngram_share(prose, 8, 400) < 0.5
    assert has_repeated_run("result: 12ab12ab12ab12ab12ab12ab12ab", 30, 6, 24)
    assert not has_repeated_run("-" * 80, 30, 6, 24)  # a rule line is not a loop
    assert echoes("Tool output:\nfile not found: data.csv", "I see file not found: data.csv so", 0.8, 8)
    assert not echoes("Problem 3: add 2 and 5.", "The answer is 7.", 0.8, 8)
    # a template line shared by all prompts is not an observation
    prompt = "Problem 12: Alice has 3 apples and gets 4 more.\nThink step by step."
    assert not echoes(prompt, "Think step by step. 7", 0.8, 8, {"Think step by step."})
    assert echoes(prompt, "Think step by step. 7", 0.8, 8)
    assert count_candidates("41 or 42 or 43") == 3
    assert count_candidates("(3 + 5) * 7") == 1
    assert count_candidates("Lots of 1 and 2, so the answer is 3.") == 1


def test_windows_helper():
    w = windows(np.arange(1, 101), 0.25, 5)
    assert (w.early.lo, w.early.hi, w.recent.lo, w.recent.hi) == (1, 25, 76, 100) and w.disjoint
    w = windows(np.arange(1, 7), 0.25, 5)
    assert not w.disjoint and w.recent.n == 5


def test_learns_nothing_needs_a_moving_reward_and_a_long_window(sick):
    """The seed-1 case (held-out flat, reward moving) fires; a flat reward is plateau's case, and a run shorter than
    min_steps is not judged; without held-out points inside the window, strict train accuracy is the signal."""
    ev = sick["learns_nothing"]
    [f] = alarms(fire("learns_nothing", ev))
    assert "Held-out greedy accuracy" in f.explanation and f.metrics["accuracy_change"] <= 0.03
    flat = Evidence(metrics=ev.metrics.assign(reward=0.3), rollouts=ev.rollouts.drop(columns=["reward"]))
    assert not alarms(fire("learns_nothing", flat))
    short = Evidence(metrics=ev.metrics[ev.metrics["step"] <= 60], rollouts=ev.rollouts[ev.rollouts["step"] <= 60])
    [g] = fire("learns_nothing", short)
    assert Diagnostic.insufficient(g) and "at least 100 steps" in g.explanation
    train_only = strip(ev, metrics=["eval/greedy_accuracy"])
    [h] = alarms(fire("learns_nothing", train_only))
    assert "Strict train accuracy" in h.explanation


def test_nan_in_skipped_updates_only_is_a_warning_and_a_nan_the_weights_saw_stays_critical(healthy):
    m = healthy.metrics.copy()
    for step in (50, 90):
        m.loc[m["step"] == step, "grad_norm"] = np.nan
        m.loc[m["step"] == step, "update_skipped"] = 1.0
    (f,) = fire("nan", Evidence(metrics=m, rollouts=healthy.rollouts))
    assert f.severity == "warning" and f.steps == (50, 90) and f.metrics["skipped_updates"] == 2
    assert "skipped those updates" in f.explanation
    m.loc[m["step"] == 120, "grad_norm"] = np.nan  # not skipped: the optimiser applied it
    (f,) = fire("nan", Evidence(metrics=m, rollouts=healthy.rollouts))
    assert f.severity == "critical" and f.steps == (50, 120)
    m.loc[m["step"] == 120, "grad_norm"] = 1.0
    m.loc[m["step"] == 90, "loss"] = np.nan  # a NaN loss is never excused by a skipped update
    (f,) = fire("nan", Evidence(metrics=m, rollouts=healthy.rollouts))
    assert f.severity == "critical"


def test_the_recipe_check_reads_the_training_levels_against_the_scored_ones():
    """Two or more levels away from the held-out split's levels (a built-in task's default, or the job's eval levels)
    is unusual; one level around them is curriculum practice; a record that does not say, or names a user's task
    with its ranges unset, or is malformed, decides nothing (nothing it names is imported)."""
    def recipe(difficulty, task="arith", scored=None):
        meta = {"harness": {"data": {"difficulty": difficulty}}, "spec": {"task": task, "eval": {"difficulty": scored}}}
        return [f for f in fire("unusual_recipe", build(meta=meta)) if f.severity != "info"]

    [hard] = recipe([5, 5])  # arith is scored at level 3
    assert hard.severity == "warning" and hard.metrics["data.difficulty/above"] == 1.0
    assert hard.metrics["data.difficulty/below"] == 0.0 and "2 levels above" in hard.explanation
    [easy] = recipe([1, 1], scored=[4, 4])
    assert easy.metrics["data.difficulty/below"] == 2.0 and "3 levels below" in easy.explanation
    assert recipe([2, 4]) == recipe([4, 4]) == recipe([1, 1], task="countdown", scored=[2, 2]) == []
    assert recipe([9, 9], task="evil.module:Task") == []  # a user's task, its default unknown: not imported
    assert recipe([5, 5], task="evil.module:Task", scored=[1, 1])  # both ranges in the record: compared
    assert recipe([5, 5], task=["arith"]) == recipe([5, 5], scored="x") == []  # malformed: nothing decided
