"""Benchmark (issues 4 and 14): does a campaign earn its cost? Three arms at equal total trainer steps.

For each task, each start (``flawed``: the tuned recipe with TRL's default learning rate, 1e-6 -- GRPOConfig's
default, made for billion-parameter models and 300× below what the built-in policies train at, the demo's flaw;
``tuned``: the task's baseline recipe; ``demo``: ``campaigns/arith-demo.yaml`` itself) and each seed, every arm starts from the same warm-started
policy and may spend the same number of trainer steps (every segment, branch leg and trial counts):

(a) **static**: the starting recipe for the whole budget, one job;
(b) **campaign**: heuristic brain, automatic approval, sequential backtests, the kept branch (the average of the
    adopted arm's seeds unless ``--merge-seeds off``), screening and
    Optuna values (the defaults of ``evotrainer.config.campaign``);
(c) **optuna**: Optuna's TPE sampler with its median pruner over the knobs the campaign may change (every
    library skill's knob, resolved against the starting recipe: numeric knobs on a range around the start
    value -- scale knobs such as the learning rate from 1/100 to 1000 times it, log scale --, the others over
    the values the skills name), each trial a job from the warm start for
    ``--trial-steps`` steps, reporting held-out accuracy (decision split) three times to the pruner; trials
    go on until the budget is spent; the result is the best finished trial's policy.

Each arm's result is the greedy accuracy of its final policy on the **confirmation split** (problems no arm
chose on; ``evotrainer.training.evaluation.split_problems``), with a t interval over seeds; ``accuracy_wide`` is the same
policy on ``--wide`` (3000) confirmation problems outside the other splits, whose paired sampling error is ~0.8
points where the 500-problem split's is ~2 (``bench/confirm_noise.py`` measured it). On countdown, whose held-out
space is small, the wide split is a harder mix than the 500 (distinct problems lean to rare ones): compare arms
on it, not its numbers with the 500-problem ones. The campaign also reports
its decisions, its useful share (steps in the final mainline's lineage / steps spent), and the share of its
wall time outside trainer steps (a trainer step being the Trainer's whole optimiser step, ``step_wall_time``; with
jobs side by side, ``--workers``, the union of the steps' intervals, so the share is the wall time no step runs in;
``outside_core_share`` weighs each step by the share of the cores its job had, so a worker that evaluates while
another trains counts as outside: the machine's time, where the other is the wall's).
A warm start the campaign's first job had to build (no cached base policy for that seed) is a one-off cost of the
policy, not of the campaign: it is left out of that share's wall time and reported as ``warm_start_s``.

    .venv/bin/python bench/campaign.py --tasks arith --starts flawed tuned --seeds 0 1 2 [--budget 400]

Rows are merged into bench/results/campaign.json by (task, start, seed, arm): an interrupted bench resumes
where it stopped, and tasks can run in separate invocations.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import yaml
from _common import ROOT, parser, save

RESULTS = ROOT / "bench" / "results" / "campaign.json"
BASELINES = {"arith": "grpo-baseline.yaml", "countdown": "grpo-baseline.yaml", "agentic": "agentic-baseline.yaml",
             "code": "code-baseline.yaml"}


def row_key(r: dict[str, Any]) -> tuple:
    """A results row's identity: a row with the same key replaces it (here and in ``bench/merge_results.py``)."""
    return r["task"], r["start"], r["seed"], r["arm"], r["budget"]


def _interval(xs: list[float], confidence: float = 0.9) -> list[float]:
    from scipy import stats

    if len(xs) < 2:
        return [xs[0], xs[0]] if xs else [float("nan")] * 2
    half = stats.t.ppf(0.5 + confidence / 2, len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5
    return [round(statistics.fmean(xs) - half, 4), round(statistics.fmean(xs) + half, 4)]


DEMO_SPEC = ROOT / "campaigns" / "arith-demo.yaml"


TRL_DEFAULT_LR = 1e-6  # trl.GRPOConfig().learning_rate


def start_harness(task: str, start: str, prompts: int, home: Path) -> Path:
    """The task's baseline recipe at ``prompts`` prompts per step; ``flawed`` gives it TRL's default learning rate;
    ``demo`` is the demo's own starting recipe (``harnesses/demo-start.yaml``, arith only)."""
    if start == "demo":
        return (DEMO_SPEC.parent / yaml.safe_load(DEMO_SPEC.read_text())["harness"]).resolve()
    doc = yaml.safe_load((ROOT / "harnesses" / BASELINES[task]).read_text())
    doc["name"] = f"bench-{task}-{start}"
    doc["grpo"]["prompts_per_step"] = prompts
    if start == "flawed":
        doc["optim"]["learning_rate"] = TRL_DEFAULT_LR
    path = home / f"{doc['name']}-p{prompts}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def confirmation_accuracy(task: str, checkpoint: str, budget: int, n: int, wide: int | None = None) -> float:
    """Greedy accuracy on the confirmation split of ``n`` problems, or on a wider one of ``wide`` problems
    outside the decision and selection splits of ``n`` (``split_problems(..., n=wide)``, which begins with the
    ``n`` of the default one)."""
    from evotrainer.tasks import get_task
    from evotrainer.training.evaluation import EvalSpec, split_problems
    from evotrainer.training.policy import policy_accuracy

    t = get_task(task)
    ev = EvalSpec(n=n, k=1)
    return policy_accuracy(checkpoint, t, split_problems(t, ev, "confirmation", n=wide), ev, budget)


def wide_accuracy(task: str, checkpoint: str, budget: int, a: Any) -> float | None:
    """The arm's result on ``--wide`` confirmation problems (None when ``--wide 0``)."""
    return round(confirmation_accuracy(task, checkpoint, budget, a.eval_n, a.wide), 4) if a.wide else None


def final_policy(row: dict[str, Any], home: Path) -> tuple[str, int]:
    """(checkpoint, completion budget) of a finished campaign row's final policy: the mainline its confirmation
    scored, within that mainline's budget."""
    from evotrainer.store import Store

    store = Store.for_home(home)
    conf = next(e.message for e in reversed(store.events(row["campaign"], kind="confirmation")))
    (ver,) = [v for v in store.policy_lineage(row["campaign"]) if v.id == conf["mainline"]]
    return ver.checkpoint, int(conf["budgets"][1])


# ---------------------------------------------------------------------------------------------- arms
def _policy(a: Any):
    from evotrainer.config.policy import PolicySpec

    return PolicySpec(seed=a.policy_seed)


def run_static(task: str, harness: Path, seed: int, a: Any, home: Path) -> dict[str, Any]:
    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.harness import load_harness
    from evotrainer.config.job import JobSpec
    from evotrainer.core.home import jobs_dir
    from evotrainer.core.runmeta import read_run_meta
    from evotrainer.jobs.lineage import complete_checkpoints
    from evotrainer.jobs.runner import run_job
    from evotrainer.training.data import STREAM_VERSION

    t = time.perf_counter()
    # the data stream's version in the name: a run whose prompts another version drew is another job
    name = f"static-{harness.stem}-s{seed}-b{a.budget}" + (f"-d{STREAM_VERSION}" if STREAM_VERSION > 1 else "")
    run_dir = jobs_dir(home) / name
    meta, done = read_run_meta(run_dir), complete_checkpoints(run_dir)
    if meta is not None and meta.status == "finished" and a.budget in done:
        # a finished run (an earlier bench's static arm) is the same deterministic job: score it again
        checkpoint, steps = str(done[a.budget]), meta.reached
    else:
        resume = name if run_dir.exists() else None  # a bench killed mid-run goes on from there
        res = run_job(JobSpec(task=task, harness=str(harness), steps=a.budget, seed=seed, save_every=a.budget,
                              name=name, policy=_policy(a), eval=EvalSpec(every=a.budget, n=a.eval_n, k=1)),
                      home, resume=resume)
        checkpoint, steps = res.checkpoint, res.steps_done
    budget = load_harness(harness).grpo.max_completion_length
    return {"accuracy": confirmation_accuracy(task, checkpoint, budget, a.eval_n), "steps": steps, "job": name,
            "wall_s": round(time.perf_counter() - t, 1), "accuracy_wide": wide_accuracy(task, checkpoint, budget, a)}


def run_campaign(task: str, harness: Path, seed: int, a: Any, home: Path) -> dict[str, Any]:
    from evotrainer.agent.campaign import start_campaign
    from evotrainer.evidence.model import read_metrics
    from evotrainer.reports.summaries import campaign_summary
    from evotrainer.store import Store

    spec = {"name": f"bench-{harness.stem}-s{seed}", "task": task, "harness": str(harness), "seed": seed,
            "policy": _policy(a).model_dump(mode="json"),
            "segment_steps": a.segment, "budget": {"total_steps": a.budget, **(
                {} if a.healthy_share is None else {"healthy_explore_share": a.healthy_share})},
            "backtest": {"branch_steps": a.branch, "seeds": 3, "max_proposals": 2, "min_effect": 0.0,
                         "futility_effect": 0.01, "merge_seeds": a.merge_seeds == "on",
                         **({} if a.bracket_factor is None else {"bracket_factor": a.bracket_factor})},
            "autonomy": "auto", "eval": {"every": 0, "n": a.eval_n, "k": 1}, "stop": {"plateau_rounds": 100},
            **({} if a.live_sessions is None and a.workers is None else {"launcher": {
                **({} if a.live_sessions is None else {"live_sessions": a.live_sessions}),
                **({} if a.workers is None else {"workers": a.workers})}})}
    spec_file = home / f"{spec['name']}.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    if harness.stem == "demo-start":  # the demo itself: `make demo SEED=seed`, in the bench's home
        spec_file = DEMO_SPEC
        if a.live_sessions is not None or a.workers is not None:  # the demo with its launcher changed, nothing else
            doc = yaml.safe_load(DEMO_SPEC.read_text())
            doc["harness"] = str((DEMO_SPEC.parent / doc["harness"]).resolve())
            doc["launcher"] = {**(doc.get("launcher") or {}),
                               **({} if a.live_sessions is None else {"live_sessions": a.live_sessions}),
                               **({} if a.workers is None else {"workers": a.workers})}
            spec_file = home / f"arith-demo-live{a.live_sessions}-w{a.workers}.yaml"
            spec_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    t = time.perf_counter()
    cid = start_campaign(spec_file, home, log=lambda m: print(f"  [{task} {harness.stem} s{seed}] {m}", flush=True),
                         seed=seed)
    wall = time.perf_counter() - t
    summary = campaign_summary(home, cid)
    import os

    from evotrainer.core.runmeta import read_run_meta

    train_s = trl_s = core_s = 0.0
    cores = os.cpu_count() or 1
    spans: list[tuple[float, float]] = []  # (start, end) of every trainer step, when the run recorded its end
    store = Store.for_home(home)
    for run in {e.run_name for e in store.ledger(cid)}:
        m = read_metrics(home / "jobs" / run)
        trl = float(m["step_time"].dropna().sum()) if "step_time" in m else 0.0
        trl_s += trl
        steps_s = float(m["step_wall_time"].dropna().sum()) if "step_wall_time" in m else trl
        train_s += steps_s
        meta = read_run_meta(home / "jobs" / run)
        threads = max((t.threads or cores for t in meta.timings), default=cores) if meta else cores
        core_s += steps_s * min(threads, cores) / cores  # a step on one core of two is half the machine training
        if "step_end_time" in m:
            done = m[["step_end_time", "step_wall_time"]].dropna()
            spans += [(e - w, e) for e, w in zip(done["step_end_time"], done["step_wall_time"])]
    if spans:  # jobs side by side (launcher.workers > 1) overlap: the time in which some trainer step runs
        train_s = _union(spans)
    conf = summary["confirmation"] or {}
    warm = summary["seconds"].get("warm_start", 0.0)
    final = final_policy({"campaign": cid}, home) if conf else None
    return {"accuracy": conf.get("end"), "accuracy_wide": wide_accuracy(task, *final, a) if final else None,
            "start_accuracy": conf.get("start"), "steps": summary["budget"]["spent"],
            "campaign": cid, "useful_share": summary["spend"]["useful_share"], "spend": summary["spend"],
            "decisions": [(d["knob"], d["new"], d["outcome"]) for d in summary["decisions"]],
            "outside_trainer_share": round(1 - train_s / (wall - warm), 3),
            "outside_trl_step_time_share": round(1 - trl_s / (wall - warm), 3),
            # the cores' time outside trainer steps: with jobs side by side, one that evaluates while another trains
            # is outside here but not in outside_trainer_share (the same with one worker, whose jobs use every core)
            "outside_core_share": round(1 - core_s / (wall - warm), 3),
            "wall_s": round(wall, 1), "warm_start_s": warm, "job_seconds": summary["seconds"],
            "outside_jobs_s": round(wall - summary["seconds"]["jobs"], 1), "trainer_steps_s": round(train_s, 1)}


def _union(spans: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for lo, hi in sorted(spans):
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total


def search_space(harness, task: str) -> dict[str, Any]:
    """What the campaign may change, as Optuna distributions: every library skill's knob resolved against the start."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from evotrainer.agent.lessons import SEED_LIBRARY, brain_inputs
    from evotrainer.agent.values import LOG_KNOBS, _bounds

    cands, _, _ = brain_inputs(SEED_LIBRARY, harness, [], task)
    knobs = harness.knobs()
    space: dict[str, Any] = {}
    values: dict[str, list[Any]] = {}
    for c in cands:
        if c.knob in ("env.leak_tool", "reward.efficiency.weight", "reward.correctness.tests"):
            continue  # the traps: a user's search would not include them either
        values.setdefault(c.knob, [knobs[c.knob]]).append(c.value)
    for knob, vals in values.items():
        cur = knobs[knob]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
        if numeric and cur is not None:
            lo_b, hi_b, integer = _bounds(harness, knob)
            # two decades down, three up: from 1e-6 Optuna can reach 1e-3, as the campaign's moves can (an integer
            # scale knob, the prompt pool, keeps the linear space its rows in bench/RESULTS.md were measured with)
            if knob in LOG_KNOBS and cur > 0 and not integer:
                lo, hi = max(cur / 100, lo_b, 1e-8), min(cur * 1000, hi_b)
                space[knob] = FloatDistribution(lo, hi, log=True)
            else:
                d = max(abs(v - cur) for v in vals) * 2
                lo, hi = max(cur - d, lo_b), min(cur + d, hi_b)
                space[knob] = IntDistribution(int(math.ceil(lo)), int(hi)) if integer else FloatDistribution(lo, hi)
        else:
            choices = list(dict.fromkeys(json.dumps(v) for v in vals))
            space[knob] = CategoricalDistribution(choices)
    return space


def run_optuna(task: str, harness: Path, seed: int, a: Any, home: Path) -> dict[str, Any]:
    import optuna

    from evotrainer.agent.values import _quiet
    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.harness import load_harness
    from evotrainer.config.job import JobSpec
    from evotrainer.core.errors import ConfigError
    from evotrainer.evidence.model import read_metrics
    from evotrainer.jobs.lineage import complete_checkpoints
    from evotrainer.jobs.runner import run_job

    _quiet()
    start = load_harness(harness)
    space = search_space(start, task)
    storage = optuna.storages.RDBStorage(f"sqlite:///{home / 'optuna-bench.db'}")
    name = f"{harness.stem}-s{seed}-b{a.budget}"
    study = optuna.create_study(study_name=name, storage=storage, load_if_exists=True, direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed),
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0))
    every = a.trial_steps // 3
    spent, t0 = 0, time.perf_counter()
    results: list[dict[str, Any]] = []
    while a.budget - spent >= every:
        trial = study.ask(space)
        h = start
        try:
            for knob, v in trial.params.items():
                h = h.with_knob(knob, json.loads(v) if isinstance(space[knob], optuna.distributions.CategoricalDistribution) else v)
        except ConfigError as err:  # a combination the harness refuses (e.g. a clip below epsilon): no steps spent
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            results.append({"trial": trial.number, "params": trial.params, "error": str(err)[:200]})
            continue
        steps = min(a.trial_steps, (a.budget - spent) // every * every)
        run = f"optuna-{name}-t{trial.number}"
        job = JobSpec(task=task, harness=h, steps=steps, seed=seed, save_every=every, name=run,
                      policy=_policy(a), eval=EvalSpec(every=every, n=a.eval_n, k=1))
        last, pruned, refused = None, False, None
        for upto in range(every, steps + 1, every):
            try:
                res = run_job(job, home, resume=run if upto > every else None, stop_at=upto if upto < steps else None)
            except ConfigError as err:
                if upto > every:
                    raise
                # refused before anything is written (e.g. a completion budget beyond the policy's context, which
                # only the job knows): a failed trial, no steps spent, as for a harness the spec refuses
                refused = str(err)[:200]
                break
            m = read_metrics(Path(res.run_dir))
            last = float(m.loc[m["step"] == upto, "eval/greedy_accuracy"].dropna().iloc[-1])
            trial.report(last, upto)
            if upto < steps and trial.should_prune():
                pruned = True
                break
        if refused is not None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            results.append({"trial": trial.number, "params": trial.params, "error": refused})
            continue
        trained = int(read_metrics(Path(res.run_dir))["loss"].notna().sum())
        spent += trained
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, last)
        results.append({"trial": trial.number, "params": trial.params, "steps": trained, "accuracy": last,
                        "pruned": pruned, "checkpoint": str(complete_checkpoints(Path(res.run_dir))[upto]),
                        "budget": h.grpo.max_completion_length})
    done = [r for r in results if "accuracy" in r and not r["pruned"]] or [r for r in results if "accuracy" in r]
    best = max(done, key=lambda r: r["accuracy"])
    return {"accuracy": confirmation_accuracy(task, best["checkpoint"], best["budget"], a.eval_n), "steps": spent,
            "accuracy_wide": wide_accuracy(task, best["checkpoint"], best["budget"], a),
            "trials": len(results), "pruned": sum(1 for r in results if r.get("pruned")),
            "best_params": best["params"], "wall_s": round(time.perf_counter() - t0, 1)}


ARMS = {"static": run_static, "campaign": run_campaign, "optuna": run_optuna}


def main() -> None:
    p = parser(__doc__, "bench-campaign")
    p.add_argument("--tasks", nargs="+", default=["arith", "countdown"])
    p.add_argument("--starts", nargs="+", default=["flawed", "tuned"], choices=["flawed", "tuned", "demo"],
                   help="demo: the campaign arm is campaigns/arith-demo.yaml itself (make demo SEED=seed), the others "
                        "start from its recipe; needs --tasks arith and --budget equal to the demo's")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--budget", type=int, default=400, help="trainer steps per arm")
    p.add_argument("--prompts", type=int, default=32, help="prompts per step of the starting recipes")
    p.add_argument("--segment", type=int, default=20)
    p.add_argument("--branch", type=int, default=30)
    p.add_argument("--merge-seeds", choices=["on", "off"], default="on",
                   help="the campaign arm's backtest.merge_seeds (the demo start always runs campaigns/arith-demo.yaml "
                        "as committed)")
    p.add_argument("--bracket-factor", type=float, default=None,
                   help="the campaign arm's backtest.bracket_factor (default: the spec's default; the demo start "
                        "runs campaigns/arith-demo.yaml as committed)")
    p.add_argument("--healthy-share", type=float, default=None,
                   help="the campaign arm's budget.healthy_explore_share (default: the spec's default; the demo start "
                        "runs campaigns/arith-demo.yaml as committed)")
    p.add_argument("--workers", type=int, default=None,
                   help="the campaign arm's launcher.workers (default: the spec's; with more than one, jobs run side by "
                        "side and the trainer-step time is the union of their steps' intervals)")
    p.add_argument("--live-sessions", type=int, default=None,
                   help="the campaign arm's launcher.live_sessions (default: the spec's default; 0 rebuilds every look "
                        "from its checkpoint: the A/B of jobs/live.py). With the demo start, a copy of "
                        "campaigns/arith-demo.yaml with only this changed is run")
    p.add_argument("--trial-steps", type=int, default=99, help="steps of one Optuna trial (a multiple of 3)")
    p.add_argument("--eval-n", type=int, default=500, help="problems in each held-out split")
    p.add_argument("--wide", type=int, default=3000,
                   help="also score every arm's final policy on this many confirmation problems outside the other "
                        "splits (accuracy_wide; 0: not): two 500-problem samples of one policy differ by ~2 points")
    p.add_argument("--policy-seed", type=int, default=None,
                   help="one warm start for every seed (default: each seed warm-starts its own policy)")
    p.add_argument("--out", default="campaign",
                   help="results file bench/results/OUT.json (rows are merged into it; another name keeps a side "
                        "measurement out of the main table)")
    a = p.parse_args()
    if a.trial_steps % 3:
        p.error("--trial-steps must be a multiple of 3 (the pruner sees three evaluations)")
    demo_budget = yaml.safe_load(DEMO_SPEC.read_text())["budget"]["total_steps"]
    if "demo" in a.starts and (a.tasks != ["arith"] or a.budget != demo_budget or a.policy_seed is not None):
        p.error(f"--starts demo runs {DEMO_SPEC.name} as it is: use --tasks arith --budget {demo_budget} "
                "and no --policy-seed")

    from evotrainer.core.home import resolve_home

    home = resolve_home(a.home)
    home.mkdir(parents=True, exist_ok=True)
    results = RESULTS.with_name(f"{a.out}.json")
    prev = json.loads(results.read_text()) if results.exists() else {}
    rows = [r for r in prev.get("runs", []) if "arm" in r]  # rows of this version (with an arm) are kept
    have = {row_key(r) for r in rows}
    for task in a.tasks:
        for start in a.starts:
            harness = start_harness(task, start, a.prompts, home)
            for seed in a.seeds:
                for arm in a.arms:
                    k = (task, start, seed, arm, a.budget)
                    if k in have:
                        continue
                    print(f"== {task} {start} seed {seed}: {arm}", flush=True)
                    out = ARMS[arm](task, harness, seed, a, home)
                    rows.append({"task": task, "start": start, "seed": seed, "arm": arm, "budget": a.budget, **out})
                    print(json.dumps(rows[-1], default=str), flush=True)
                    _save(prev, rows, a.out)
    _save(prev, rows, a.out)


def _save(prev: dict, rows: list[dict], name: str = "campaign") -> None:
    summary: dict[str, Any] = {}
    for task, start, budget in sorted({(r["task"], r["start"], r["budget"]) for r in rows}):
        cell: dict[str, Any] = {}
        by_arm = {arm: {r["seed"]: r for r in rows if (r["task"], r["start"], r["budget"], r["arm"]) == (task, start, budget, arm)}
                  for arm in ARMS}
        for arm, runs in by_arm.items():
            accs = [r["accuracy"] for r in runs.values() if r.get("accuracy") is not None]
            if accs:
                cell[arm] = {"mean": round(statistics.fmean(accs), 4), "ci90": _interval(accs), "seeds": len(accs)}
            wide = [r["accuracy_wide"] for r in runs.values() if r.get("accuracy_wide") is not None]
            if wide:
                cell[arm]["wide"] = {"mean": round(statistics.fmean(wide), 4), "ci90": _interval(wide), "seeds": len(wide)}
        for other in ("static", "optuna"):  # paired over seeds: campaign − other
            seeds = sorted(set(by_arm["campaign"]) & set(by_arm[other]))
            for field, suffix in (("accuracy", ""), ("accuracy_wide", "_wide")):
                d = [by_arm["campaign"][s][field] - by_arm[other][s][field] for s in seeds
                     if by_arm["campaign"][s].get(field) is not None and by_arm[other][s].get(field) is not None]
                if d:
                    cell[f"campaign_minus_{other}{suffix}"] = {"mean": round(statistics.fmean(d), 4),
                                                              "ci90": _interval(d), "seeds": len(d)}
        useful = [r["useful_share"] for r in by_arm["campaign"].values() if r.get("useful_share") is not None]
        if useful:
            cell["useful_share"] = {"mean": round(statistics.fmean(useful), 3), "min": min(useful)}
        outside = [r["outside_trainer_share"] for r in by_arm["campaign"].values() if "outside_trainer_share" in r]
        if outside:
            cell["outside_trainer_share"] = {"mean": round(statistics.fmean(outside), 3), "max": max(outside)}
        summary[f"{task}/{start}/{budget}"] = cell
    save(name, {"runs": rows, "summary": summary,
                      "previous_version": prev.get("previous_version") or {k: prev[k] for k in ("budget", "summary")
                                                                           if k in prev and "runs" in prev and
                                                                           not any("arm" in r for r in prev["runs"])}})


if __name__ == "__main__":
    main()
