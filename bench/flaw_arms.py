"""The arms of the flaw suite, at equal trainer steps from the same warm start: static (a recipe for the whole
budget), the campaign (default settings, or with rules switched off for the ablations), Ray Tune's population-based
training, and Optuna configured as an expert would. Each returns its final policy's accuracy on the confirmation
split and on the wide one, the steps it spent, and what it computed (completions generated, evaluation problems
scored), so that the suite can account both ways.

The search space of PBT and Optuna (:func:`search_space`) is the campaign's own: every knob a library skill may move
from the starting recipe (traps and knobs inert under it left out), each over its documented normal range
(``evotrainer.config.ranges``; the completion budget, whose range depends on the task, from the start to four times
it). That is what an expert would search, and no arm is given a task's known answer.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TRAPS = ("env.leak_tool", "reward.efficiency.weight", "reward.correctness.tests", "reward.correctness.match")


@dataclass(frozen=True)
class TaskRef:
    """A task as jobs carry it: its name and options (normal form)."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def get(self):
        from evotrainer.tasks import get_task

        return get_task(self.name, self.options)

    def fields(self) -> dict[str, Any]:
        return {"task": self.name, "task_options": dict(self.options)}


@dataclass(frozen=True)
class ArmConfig:
    """What every arm of one suite shares (the suite's settings)."""

    budget: int
    eval_n: int
    wide: int
    segment: int = 20
    branch: int = 30
    workers: int = 2
    policy: dict[str, Any] = field(default_factory=dict)  # PolicySpec fields beside the seed (tests: a nano policy)


# --------------------------------------------------------------------------------------------------- scoring
def split_accuracy(ref: TaskRef, checkpoint: str, budget: int, n: int, wide: int | None = None) -> float:
    """Greedy accuracy on the confirmation split of ``n`` problems, or on ``wide`` problems outside the decision and
    selection splits of ``n`` (``split_problems(..., n=wide)``, which begins with the ``n`` of the default one)."""
    from evotrainer.training.evaluation import EvalSpec, split_problems
    from evotrainer.training.policy import policy_accuracy

    t = ref.get()
    ev = EvalSpec(n=n, k=1)
    return round(policy_accuracy(checkpoint, t, split_problems(t, ev, "confirmation", n=wide), ev, budget), 4)


def scored(ref: TaskRef, checkpoint: str, budget: int, cfg: ArmConfig) -> dict[str, Any]:
    return {"accuracy": split_accuracy(ref, checkpoint, budget, cfg.eval_n),
            "accuracy_wide": split_accuracy(ref, checkpoint, budget, cfg.eval_n, cfg.wide) if cfg.wide else None}


def compute_of(run_dirs: list[Path], extra_eval: int = 0) -> dict[str, int]:
    """Completions generated (trained steps × prompts × group size of each job's harness) and evaluation problems
    scored (each evaluation row × its n) by these jobs; ``extra_eval`` adds problems scored outside them."""
    from evotrainer.core.runmeta import read_run_meta
    from evotrainer.evidence.model import read_metrics

    completions, problems = 0, extra_eval
    for d in run_dirs:
        meta = read_run_meta(d)
        if meta is None:
            continue
        m = read_metrics(d)
        h = meta.raw.get("harness")  # the recipe the job trained under, as recorded (the spec may name a file)
        g = h.get("grpo", {}) if isinstance(h, dict) else {}
        steps = int(m["loss"].notna().sum()) if "loss" in m else 0
        completions += steps * int(g.get("prompts_per_step", 0)) * int(g.get("num_generations", 0))
        if "eval/greedy_accuracy" in m:
            problems += int(m["eval/greedy_accuracy"].notna().sum()) * int((meta.spec.get("eval") or {}).get("n", 0))
    return {"completions": completions, "eval_problems": problems}


def trained_steps(run_dir: Path) -> int:
    from evotrainer.evidence.model import read_metrics

    m = read_metrics(run_dir)
    return int(m["loss"].notna().sum()) if "loss" in m else 0


def _job(ref: TaskRef, harness: Any, steps: int, seed: int, name: str, cfg: ArmConfig, every: int,
         threads: int | None = None, at_start: bool = False):
    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.job import JobSpec
    from evotrainer.config.policy import PolicySpec

    return JobSpec(**ref.fields(), harness=harness if not isinstance(harness, Path) else str(harness), steps=steps,
                   seed=seed, save_every=every, name=name, policy=PolicySpec(**cfg.policy, seed=seed),
                   eval=EvalSpec(every=every, n=cfg.eval_n, k=1, at_start=at_start), threads=threads)


# ---------------------------------------------------------------------------------------------------- static
def run_static(ref: TaskRef, harness: Path, seed: int, cfg: ArmConfig, home: Path) -> dict[str, Any]:
    """The recipe for the whole budget, one job (a finished run of the same name is scored again, not re-trained)."""
    from evotrainer.config.harness import load_harness
    from evotrainer.core.runmeta import read_run_meta
    from evotrainer.jobs.lineage import complete_checkpoints
    from evotrainer.jobs.runner import run_job

    t = time.perf_counter()
    name = f"static-{harness.stem}-s{seed}-b{cfg.budget}"
    run_dir = home / "jobs" / name
    meta, done = read_run_meta(run_dir), complete_checkpoints(run_dir)
    version = load_harness(harness).version
    if meta is not None and meta.raw.get("harness_version") != version:
        raise SystemExit(f"{run_dir} trained another recipe ({meta.raw.get('harness_version')}) than {harness} "
                         f"({version}): move it away; a run is reused only for the very recipe it trained")
    if not (meta is not None and meta.status == "finished" and cfg.budget in done):
        run_job(_job(ref, harness, cfg.budget, seed, name, cfg, cfg.budget), home,
                resume=name if run_dir.exists() else None)
        done = complete_checkpoints(run_dir)
    budget = load_harness(harness).grpo.max_completion_length
    return {**scored(ref, str(done[cfg.budget]), budget, cfg), "steps": trained_steps(run_dir), "job": name,
            "compute": compute_of([run_dir]), "wall_s": round(time.perf_counter() - t, 1)}


# -------------------------------------------------------------------------------------------------- campaign
# The campaign's rules that were gained for particular cases (issue 59 §3), each switched by its spec field.
RULES: dict[str, tuple[str, str, Any] | None] = {
    # rule: (section, field, value that switches it off)
    "stuck": ("backtest", "stuck_share", None),
    "brackets": ("backtest", "bracket", False),
    "healthy_share": ("budget", "healthy_explore_share", None),
    # removed from the campaign (improving_z: off by default and measured neutral; the stuck round's interim arm,
    # non-inferiority and larger step: no worse without them, bench/log/19-flaw-suite.md): nothing to switch off,
    # kept so that the plain campaign's list and name stay issue 59's
    "improving_z": None,
    "interim": None,
    "noninferiority": None,
    "prefer_larger": None,
    # not one of issue 59's list: the statistics' answer to a backtest the budget ends (stats/rules/estimate.py)
    "estimate": ("backtest", "spent_estimate", False),
    # nor this: the last segment's checked versions (config/campaign.py BudgetSpec.final_checks)
    "final_checks": ("budget", "final_checks", 1),
}


PLAIN = ("brackets", "healthy_share", "improving_z", "interim", "noninferiority", "prefer_larger", "stuck")
"""The rules issue 59 lists for the plain campaign."""


def off_tag(off: tuple[str, ...]) -> str:
    """A short name for a set of rules switched off, within a campaign name's 100 characters: ``plain`` for issue 59's
    list (``plain-estimate`` with the estimate rule too), else the rules themselves."""
    plain = set(PLAIN) <= set(off)
    return "-".join((["plain"] if plain else []) + sorted(set(off) - set(PLAIN) if plain else off)).replace("_", "")


def settings_tag(settings: dict[str, dict[str, Any]]) -> str:
    """A name part for spec fields set over the suite's: ``{"budget": {"healthy_explore_share": 0.125}}`` →
    'healthyexploreshare0p125'."""
    return "-".join(f"{k.replace('_', '')}{str(v).replace('.', 'p').replace('-', 'm')}"
                    for sec in sorted(settings) for k, v in sorted(settings[sec].items()))


def campaign_spec(ref: TaskRef, harness: Path, seed: int, cfg: ArmConfig, off: tuple[str, ...] = (),
                  settings: dict[str, dict[str, Any]] | None = None) -> dict:
    """The suite's campaign: the same settings for every flaw and task (the demo's, at the suite's budget), with the
    rules in ``off`` switched off and ``settings`` (section → field → value; development experiments on one
    default) set over it."""
    spec: dict[str, Any] = {
        "name": f"flaws-{harness.stem}-s{seed}" + (f"-off-{off_tag(off)}" if off else ""),
        **ref.fields(), "harness": str(harness), "seed": seed, "policy": {**cfg.policy, "seed": seed},
        "segment_steps": cfg.segment, "budget": {"total_steps": cfg.budget},
        "backtest": {"branch_steps": cfg.branch, "seeds": 3, "max_proposals": 2, "min_effect": 0.0,
                     "futility_effect": 0.01},
        "autonomy": "auto", "eval": {"every": 0, "n": cfg.eval_n, "k": 1}, "stop": {"plateau_rounds": 100},
        "launcher": {"workers": cfg.workers},
    }
    for rule in off:
        if RULES[rule] is None:
            continue
        section, key, value = RULES[rule]
        spec.setdefault(section, {})[key] = value
    for section, fields in (settings or {}).items():
        spec.setdefault(section, {}).update(fields)
    if settings:
        spec["name"] += f"-set-{settings_tag(settings)}"
    return spec


def run_campaign(ref: TaskRef, harness: Path, seed: int, cfg: ArmConfig, home: Path,
                 off: tuple[str, ...] = (), settings: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    from evotrainer.agent.campaign import run_campaign as run_campaign_of
    from evotrainer.agent.campaign import start_campaign
    from evotrainer.reports.summaries import campaign_summary
    from evotrainer.store import Store

    spec = campaign_spec(ref, harness, seed, cfg, off, settings)
    spec_file = home / f"{spec['name']}.yaml"
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    t = time.perf_counter()
    log = lambda m: print(f"  [{spec['name']}] {m}", flush=True)  # noqa: E731
    store = Store.for_home(home)
    earlier = [c for c in store.list_campaigns() if c.name == spec["name"]]
    if earlier and earlier[-1].status in ("finished", "failed"):
        # its row is not in the results (else this arm would not run): it ran from other code, or its row was lost
        raise SystemExit(f"{home}: campaign {earlier[-1].id} of this cell is {earlier[-1].status} but has no row; "
                         "a row records the commit it ran from, so run the arm in another --home")
    if earlier:  # a killed bench: the campaign of this cell resumes
        cid = earlier[-1].id
        run_campaign_of(cid, home, log=log)
    else:
        cid = start_campaign(spec_file, home, log=log)
    wall = time.perf_counter() - t
    summary = campaign_summary(home, cid)
    conf = next(e.message for e in reversed(store.events(cid, kind="confirmation")))
    (ver,) = [v for v in store.policy_lineage(cid) if v.id == conf["mainline"]]
    runs = sorted({e.run_name for e in store.ledger(cid)})
    scored_sel = sum(1 for v in store.policy_lineage(cid) if v.selection_accuracy is not None)
    round0 = [{"symptom": f.symptom, "severity": f.severity, "diagnostic": f.diagnostic}
              for f in store.list_findings(cid, round=0)]
    props = {p["id"]: p for p in summary["proposals"]}
    decisions = [{"round": props[d["proposal_id"]]["round"], "knob": d["knob"], "old": d["old"], "new": d["new"],
                  "outcome": d["outcome"], "symptom": props[d["proposal_id"]]["hypothesis"]["symptom"],
                  "skills": props[d["proposal_id"]].get("cited_skills", [])} for d in summary["decisions"]]
    return {**scored(ref, ver.checkpoint, int(conf["budgets"][1]), cfg), "steps": summary["budget"]["spent"],
            "campaign": cid, "off": list(off), "useful_share": summary["spend"]["useful_share"],
            "spend": summary["spend"], "round0_findings": round0, "decisions": decisions,
            "compute": compute_of([home / "jobs" / r for r in runs], extra_eval=scored_sel * cfg.eval_n),
            "wall_s": round(wall, 1)}


# ----------------------------------------------------------------------------------------------- search space
def search_space(start: Any, task: Any) -> dict[str, Any]:
    """{knob: ("log"|"logint"|"float"|"int"|"cat", low, high | choices)}: every knob a library skill may move from ``start``,
    over its documented normal range (see the module docstring)."""
    from evotrainer.agent.lessons import SEED_LIBRARY, brain_inputs
    from evotrainer.config.ranges import NORMAL, normal_range

    cands, _, _ = brain_inputs(SEED_LIBRARY, start, [], task.name, k=10_000)
    inert = start.inert_knobs()
    knobs = start.knobs()
    space: dict[str, Any] = {}
    for knob in sorted({c.knob for c in cands}):
        if knob in TRAPS or knob in inert or knob not in knobs:
            continue
        if knob == "grpo.max_completion_length":
            cur = int(knobs[knob])
            space[knob] = ("int", cur, cur * 4)
            continue
        if knob == "data.difficulty":
            lo, hi = task.default_range()
            levels = sorted({max(task.min_difficulty, lo - 1), lo, min(task.max_difficulty, hi + 1)})
            choices = [[v, v] for v in levels]
            if knobs[knob] is not None and list(knobs[knob]) not in choices:
                choices.append(list(knobs[knob]))
            space[knob] = ("cat", [json.dumps(c) for c in choices])
            continue
        if knob not in NORMAL:
            raise SystemExit(f"{knob}: a skill moves it but evotrainer/config/ranges.py gives it no normal range")
        space[knob] = normal_range(knob).space()
    return space


def sample_point(space: dict[str, Any], rng) -> dict[str, Any]:
    """One point of ``space`` drawn uniformly (log-uniformly for log knobs)."""
    out: dict[str, Any] = {}
    for knob, (kind, *args) in space.items():
        if kind == "cat":
            out[knob] = rng.choice(args[0])
        elif kind in ("log", "logint"):
            v = math.exp(rng.uniform(math.log(args[0]), math.log(args[1])))
            out[knob] = int(round(v)) if kind == "logint" else v
        elif kind == "int":
            out[knob] = rng.randint(int(args[0]), int(args[1]))
        else:
            out[knob] = rng.uniform(args[0], args[1])
    return out


def apply_point(start: Any, point: dict[str, Any], space: dict[str, Any]) -> Any:
    """``start`` with every knob of ``point`` set (a categorical value arrives as JSON text); a combination the
    harness refuses is repaired the way a user would (a reference sync without a KL term is switched off), and a value
    it refuses leaves that knob as it was."""
    from evotrainer.core.errors import ConfigError

    h = start
    values = {k: json.loads(v) if space.get(k, ("",))[0] == "cat" and isinstance(v, str) else v
              for k, v in point.items()}
    for knob, v in sorted(values.items(), key=lambda kv: kv[0] == "grpo.sync_ref_model"):
        if knob == "grpo.sync_ref_model" and v and h.grpo.beta == 0:
            v = False
        try:
            h = h.with_knob(knob, v)
        except ConfigError:
            continue
    return h


def clip_point(point: dict[str, Any], space: dict[str, Any], sep: str = "__") -> dict[str, Any]:
    """``point`` (keys with ``.`` written as ``sep``) with every numeric value clipped into the space: PBT's
    multiplicative perturbations (×0.8, ×1.2) know no bounds."""
    out = dict(point)
    for knob, (kind, *args) in space.items():
        key = knob.replace(".", sep)
        if kind != "cat" and key in out:
            v = min(max(out[key], args[0]), args[1])
            out[key] = int(round(v)) if kind in ("int", "logint") else v
    return out
