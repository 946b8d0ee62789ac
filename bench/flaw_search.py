"""The competition a user would otherwise run, configured to do well: Ray Tune's population-based training and
Optuna as an expert sets it up. Both search the campaign's own space (``flaw_arms.search_space``) from the same warm
start, under the same total trainer steps (every member and trial counted), and hand back one final policy.

**PBT** (``ray.tune.schedulers.PopulationBasedTraining``, Jaderberg et al. 2017, run by Ray Tune for real):

- ``population`` 4, the fewest the issue allows: at equal trainer steps every extra member shortens every member's
  training (4 members of a 400-step budget train 100 steps each), and with fewer than 4 the exploit step has no
  bottom quartile to replace.
- Member 0 starts from the user's recipe, the others from points drawn over the space: an engineer runs PBT around
  the recipe they have, and PBT's strength is the spread of its population.
- ``perturbation_interval`` one segment (``segment`` steps): every member is evaluated and the bottom quartile
  exploits the top quartile's checkpoint as often as the budget allows, the way PBT continues its best checkpoints.
- ``synch=True``: with 4 members a synchronous generation compares members at the same step, which the asynchronous
  default does not guarantee when members run two at a time on 2 cores.
- ``quantile_fraction`` 0.25 (Ray's default): the worst member copies the best one.
- ``resample_probability`` 0.25 and perturbation factors 0.8 / 1.2 (Ray's defaults, the paper's): explore mostly
  around the exploited values, sometimes anywhere in the space.
- The score is greedy accuracy on the decision split (the campaign's own); the final policy is the member best on it
  at the end.

**Optuna, search then continue**:

- ``TPESampler(multivariate=True, group=True)``: the space mixes conditional and interacting knobs (a KL coefficient
  matters only with a reference, a temperature with the group size), which independent TPE cannot model.
- ``n_startup_trials`` 3: with ~10 short trials, Optuna's default of 10 random start-up trials would leave TPE no
  trial to model (the weakness of the earlier Optuna arm).
- ``SuccessiveHalvingPruner(min_resource=10, reduction_factor=3)``: each trial reports at 10, 30 (and 90) steps, and
  only the top third of the trials that reached a rung go on. Short trials are cheap evidence; pruning keeps the
  budget for promising points (ASHA, Li et al. 2020). Hyperband would spread these few trials over brackets that
  each see too few of them.
- ``search_share`` 0.5: half the budget searches in trials of at most ``trial_steps`` (30) steps from the warm start;
  the best trial's checkpoint then trains on, under its values, for the rest ("search, then continue"), so the final
  policy trains as long as the budget allows, as the campaign's mainline does.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
import time
from pathlib import Path
from typing import Any

from flaw_arms import (
    ArmConfig,
    TaskRef,
    _job,
    apply_point,
    clip_point,
    compute_of,
    scored,
    search_space,
    trained_steps,
)


def _harness_of(start_path: Path):
    from evotrainer.config.harness import load_harness

    return load_harness(start_path)


def _last_eval(run_dir: Path, step: int) -> float | None:
    from evotrainer.evidence.model import read_metrics

    m = read_metrics(run_dir)
    if "eval/greedy_accuracy" not in m:
        return None
    at = m.loc[m["step"] == step, "eval/greedy_accuracy"].dropna()
    return float(at.iloc[-1]) if len(at) else None


# ---------------------------------------------------------------------------------------------------------- PBT
def _pbt_member(config: dict[str, Any]) -> None:
    """One PBT member (a Ray Tune function trainable): each iteration forks a job of ``segment`` steps from the
    member's checkpoint under its current values, evaluates it on the decision split and reports."""
    import tempfile

    from ray import tune

    from evotrainer.core.errors import EvoError
    from evotrainer.jobs.runner import run_job

    ctx = config["ctx"]
    home, ref = Path(ctx["home"]), TaskRef(ctx["task"], ctx["task_options"])
    start = _harness_of(Path(ctx["harness"]))
    point = {k.replace("__", "."): v for k, v in config.items() if k != "ctx"}  # categories arrive as JSON text
    h = apply_point(start, point, ctx["space"])
    ckpt = tune.get_checkpoint()
    state = {"fork": None, "step": 0}
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = json.loads((Path(d) / "state.json").read_text())
    trial = tune.get_context().get_trial_id()
    seg = int(ctx["segment"])
    while state["step"] < int(ctx["steps_per_member"]):
        digest = hashlib.sha256(json.dumps(point, sort_keys=True, default=str).encode()).hexdigest()[:8]
        name = f"pbt-{ctx['tag']}-{trial}-{state['step'] + seg}-{digest}"
        job = _job(ref, h, seg, int(ctx["seed"]), name, ArmConfig(**ctx["cfg"]), seg, threads=1)
        acc, fork = 0.0, state["fork"]
        try:
            res = run_job(job, home, fork=fork, resume=name if (home / "jobs" / name).exists() else None)
            step = state["step"] + seg
            acc = _last_eval(Path(res.run_dir), step) or 0.0
            fork = f"{name}@{step}"
        except EvoError as err:  # a collapse the runner refuses to go on from (NaN): the worst score, no progress
            print(f"PBT member {trial}: {name} failed: {err}", flush=True)
        state = {"fork": fork, "step": state["step"] + seg, "run": name}
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "state.json").write_text(json.dumps(state))
            tune.report({"accuracy": acc, "step": state["step"]}, checkpoint=tune.Checkpoint.from_directory(d))


def _tune_space(space: dict[str, Any], mutation: bool) -> dict[str, Any]:
    """The space in Ray Tune's terms: for the initial draw (``tune.choice`` over categories), or for PBT's
    ``hyperparam_mutations`` (a list of categories, which PBT shifts to a neighbour)."""
    from ray import tune

    out: dict[str, Any] = {}
    for knob, (kind, *args) in space.items():
        key = knob.replace(".", "__")
        if kind == "cat":
            out[key] = list(args[0]) if mutation else tune.choice(list(args[0]))
        elif kind == "log":
            out[key] = tune.loguniform(args[0], args[1])
        elif kind == "logint":
            out[key] = tune.lograndint(int(args[0]), int(args[1]) + 1)
        elif kind == "int":
            out[key] = tune.randint(int(args[0]), int(args[1]) + 1)
        else:
            out[key] = tune.uniform(args[0], args[1])
    return out


def run_pbt(ref: TaskRef, harness: Path, seed: int, cfg: ArmConfig, home: Path, population: int = 4) -> dict[str, Any]:
    import os
    import sys

    import ray
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining
    from ray.tune.search.basic_variant import BasicVariantGenerator

    t0 = time.perf_counter()
    start = _harness_of(harness)
    space = search_space(start, ref.get())
    per_member = cfg.budget // population // cfg.segment * cfg.segment
    tag = f"{harness.stem}-s{seed}-b{cfg.budget}"
    ctx = {"home": str(home), "task": ref.name, "task_options": ref.options, "harness": str(harness), "seed": seed,
           "cfg": dataclasses.asdict(cfg), "segment": cfg.segment, "steps_per_member": per_member, "tag": tag,
           "space": space}
    current = start.knobs()
    recipe = {k.replace(".", "__"): (json.dumps(current[k]) if space[k][0] == "cat" else current[k]) for k in space}
    bench = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([bench, *filter(None, [os.environ.get("PYTHONPATH")])])
    if bench not in sys.path:
        sys.path.insert(0, bench)
    random.seed(f"pbt:{seed}")  # PBT draws its exploit partners and perturbations from Python's random module
    # a Ray instance of its own: with no address, ray.init() joins whatever cluster /tmp/ray/ray_current_cluster names
    # (a Ray launcher's head, or a dead one's stale file) and then refuses num_cpus
    ray.init(address="local", num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)
    try:
        pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=1,
                                      hyperparam_mutations=_tune_space(space, mutation=True), quantile_fraction=0.25,
                                      resample_probability=0.25, synch=True,
                                      custom_explore_fn=functools.partial(clip_point, space=space))
        tuner = tune.Tuner(
            tune.with_resources(_pbt_member, {"cpu": 1}),
            param_space={"ctx": ctx, **_tune_space(space, mutation=False)},
            tune_config=tune.TuneConfig(scheduler=pbt, metric="accuracy", mode="max", num_samples=population,
                                        search_alg=BasicVariantGenerator(points_to_evaluate=[recipe],
                                                                         random_state=seed),
                                        reuse_actors=True),
            run_config=tune.RunConfig(name=f"pbt-{tag}", storage_path=str(home / "ray_results"),
                                      stop={"step": per_member}, verbose=0))
        results = tuner.fit()
    finally:
        ray.shutdown()
    best = results.get_best_result(metric="accuracy", mode="max", scope="last")
    with best.checkpoint.as_directory() as d:
        state = json.loads((Path(d) / "state.json").read_text())
    run_name, step = state["fork"].split("@")
    run_dir = home / "jobs" / run_name
    meta = json.loads((run_dir / "meta.json").read_text())
    budget = int(meta["spec"]["harness"]["grpo"]["max_completion_length"])
    from evotrainer.jobs.lineage import complete_checkpoints

    runs = sorted(p for p in (home / "jobs").glob(f"pbt-{tag}-*") if (p / "meta.json").exists())
    return {**scored(ref, str(complete_checkpoints(run_dir)[int(step)]), budget, cfg),
            "steps": sum(trained_steps(r) for r in runs), "population": population, "steps_per_member": per_member,
            "best_point": {k.replace("__", "."): v for k, v in best.config.items() if k != "ctx"},
            "compute": compute_of(runs), "wall_s": round(time.perf_counter() - t0, 1)}


# ------------------------------------------------------------------------------------------------------- Optuna
def _distributions(space: dict[str, Any]) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for knob, (kind, *args) in space.items():
        if kind == "cat":
            out[knob] = CategoricalDistribution(list(args[0]))
        elif kind in ("int", "logint"):
            out[knob] = IntDistribution(int(args[0]), int(args[1]), log=kind == "logint")
        else:
            out[knob] = FloatDistribution(args[0], args[1], log=kind == "log")
    return out


def _replay(study: Any, home: Path, tag: str) -> list[dict[str, Any]]:
    """The trials an earlier run of this arm already spent (the study lives in SQLite beside the jobs): each as it
    ended, and one a kill left running told FAIL. Their trained steps count against the search budget, so that a
    resumed arm spends no more steps than one that ran through."""
    import optuna

    S = optuna.trial.TrialState
    out = []
    for t in study.trials:
        if t.state == S.WAITING:  # enqueued, never asked
            continue
        run_dir = home / "jobs" / f"optuna-{tag}-t{t.number}"
        failed = {S.RUNNING: "interrupted", S.FAIL: "failed"}.get(t.state)
        if t.state == S.RUNNING:
            study.tell(t.number, state=S.FAIL)
        last = t.value if t.state == S.COMPLETE else (
            t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None)
        out.append({"trial": t.number, "steps": trained_steps(run_dir) if run_dir.exists() else 0, "accuracy": last,
                    "pruned": t.state == S.PRUNED, "failed": failed, "params": t.params})
    return out


def run_optuna(ref: TaskRef, harness: Path, seed: int, cfg: ArmConfig, home: Path, search_share: float = 0.5,
               trial_steps: int = 30, rung: int = 10, startup: int = 3) -> dict[str, Any]:
    """Search, then continue (see the module docstring): the user's recipe is the first trial, as an expert
    would enqueue what they have; every trial reports its decision-split accuracy every ``rung`` steps."""
    import optuna

    from evotrainer.agent.values import _quiet
    from evotrainer.core.errors import ConfigError, EvoError
    from evotrainer.core.runmeta import read_run_meta
    from evotrainer.jobs.lineage import complete_checkpoints
    from evotrainer.jobs.runner import run_job

    _quiet()
    t0 = time.perf_counter()
    start = _harness_of(harness)
    space = search_space(start, ref.get())
    dists = _distributions(space)
    tag = f"{harness.stem}-s{seed}-b{cfg.budget}"
    study = optuna.create_study(
        study_name=tag, storage=f"sqlite:///{home / 'optuna-flaws.db'}", load_if_exists=True, direction="maximize",
        sampler=optuna.samplers.TPESampler(multivariate=True, group=True, n_startup_trials=startup, seed=seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=rung, reduction_factor=3))
    if not study.trials:
        current = start.knobs()
        study.enqueue_trial({k: (json.dumps(current[k]) if space[k][0] == "cat" else current[k]) for k in space},
                            skip_if_exists=True)
    search = int(cfg.budget * search_share) // rung * rung
    trials = _replay(study, home, tag)
    spent = sum(t["steps"] for t in trials)
    while search - spent >= rung:
        trial = study.ask(dists)
        h = apply_point(start, trial.params, space)
        steps = min(trial_steps, (search - spent) // rung * rung)
        name = f"optuna-{tag}-t{trial.number}"
        job = _job(ref, h, steps, seed, name, cfg, rung)
        last, pruned, failed = None, False, None
        for upto in range(rung, steps + 1, rung):
            try:
                res = run_job(job, home, resume=name if upto > rung else None, stop_at=upto if upto < steps else None)
            except (ConfigError, EvoError) as err:  # refused or collapsed (NaN): a failed trial
                failed = str(err)[:200]
                break
            last = _last_eval(Path(res.run_dir), upto)
            trial.report(last, upto)
            if upto < steps and trial.should_prune():
                pruned = True
                break
        run_dir = home / "jobs" / name
        trained = trained_steps(run_dir) if run_dir.exists() else 0
        spent += trained
        if failed is not None or last is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        elif pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, last)
        trials.append({"trial": trial.number, "steps": trained, "accuracy": last, "pruned": pruned, "failed": failed,
                       "params": trial.params})
        if trained == 0 and failed is None:
            break  # nothing could be trained: stop rather than spin
    ok = [t for t in trials if t["accuracy"] is not None and not t["failed"]]
    best = max([t for t in ok if not t["pruned"]] or ok, key=lambda t: t["accuracy"])
    best_dir = home / "jobs" / f"optuna-{tag}-t{best['trial']}"
    best_h = apply_point(start, best["params"], space)
    at = max(complete_checkpoints(best_dir))
    rest = cfg.budget - spent
    final_dir, final_step = best_dir, at
    if rest > 0:  # continue: the best trial's checkpoint trains on under its values for the rest of the budget
        name = f"optuna-{tag}-continue"
        final_dir = home / "jobs" / name
        meta = read_run_meta(final_dir)
        if meta is None or meta.status != "finished":  # a finished one (a re-run of the arm) is only read
            run_job(_job(ref, best_h, rest, seed, name, cfg, rest), home,
                    fork=None if final_dir.exists() else f"{best_dir.name}@{at}",
                    resume=name if final_dir.exists() else None)
        final_step = max(complete_checkpoints(final_dir))
        spent += trained_steps(final_dir)
    runs = sorted(p for p in (home / "jobs").glob(f"optuna-{tag}-*") if (p / "meta.json").exists())
    return {**scored(ref, str(complete_checkpoints(final_dir)[final_step]), best_h.grpo.max_completion_length, cfg),
            "steps": spent, "search_steps": search, "trials": len(trials),
            "pruned": sum(t["pruned"] for t in trials), "failed": sum(bool(t["failed"]) for t in trials),
            "best_params": best["params"], "best_trial_accuracy": best["accuracy"],
            "compute": compute_of(runs), "wall_s": round(time.perf_counter() - t0, 1)}
