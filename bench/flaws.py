"""Benchmark (issue 59): does the campaign repair recipes it was not built for, and beat competent tuning?

The suite (``bench/flaws.yaml``, pre-registered) holds single- and double-knob flaws of each task's tuned recipe. Its
phases, each writing rows into ``bench/results/flaws.json`` keyed by (flaw, task, seed, arm, budget, rules off) and
the warm start the row began from (a seed rebuilt on another kind of CPU starts from other weights; :func:`comparable`):

- ``live``: the flawed recipe and the tuned one, static for the whole budget, on the development seeds. A flaw is
  live on a task where tuned − flawed reaches ``live_gap`` on the wide confirmation split (mean over the seeds).
- ``round0``: the first segment under the flawed recipe, diagnosed, and the heuristic brain's drafts for it: does the
  diagnosis name the symptom the suite expects, and is the draft the flawed knob or a documented remedy?
- ``arms``: the arms of ``bench/flaw_arms.py`` and ``bench/flaw_search.py`` (static flawed, tuned, campaign, PBT,
  expert Optuna; ``--off`` runs the campaign with rules switched off, for the ablations), on live flaws.
  An evaluation round's seeds run only from its frozen commit (``frozen_commit``): every row records the commit it
  ran from, and each round is reported on its own.
- ``report``: per flaw × task × arm the wide accuracy over the seeds and the recovered share
  (arm − flawed) / (tuned − flawed), the paired differences with 90 % t intervals, and the compute each arm spent.

Every warm start is built (or found) before a seed's first arm: one that misses its target on every attempt is
recorded as refused and the seed is skipped for that task, instead of spending the budget on it.

    .venv/bin/python bench/flaws.py live --seeds dev
    .venv/bin/python bench/flaws.py round0 --seeds dev
    .venv/bin/python bench/flaws.py arms --seeds dev --flaws live --arms campaign
    .venv/bin/python bench/flaws.py report
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import flaw_targets
from _common import ROOT, machine_kind, parser, save
from flaw_arms import ArmConfig, TaskRef, run_campaign, run_static
from flaw_suite import Suite, code_commit, frozen_check, load_suite
from flaw_targets import named_symptoms, remedies

RESULTS = ROOT / "bench" / "results" / "flaws.json"
ARMS = ("static", "tuned", "campaign", "pbt", "optuna")


def row_key(r: dict[str, Any]) -> tuple:
    return r["flaw"], r["task"], r["seed"], r["arm"], r["budget"], tuple(r.get("off") or ())


def _load_rows() -> list[dict[str, Any]]:
    return json.loads(RESULTS.read_text())["rows"] if RESULTS.exists() else []


def _t90(xs: list[float]) -> list[float]:
    from scipy import stats

    if len(xs) < 2:
        return [round(xs[0], 4)] * 2 if xs else [float("nan")] * 2
    half = stats.t.ppf(0.95, len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5
    m = statistics.fmean(xs)
    return [round(m - half, 4), round(m + half, 4)]


def arm_config(suite: Suite, task: str, home: Path) -> ArmConfig:
    """The suite's settings for ``task``'s arms. Every arm starts from the warm start of the tuned recipe's levels
    (``policy.warm_start_difficulty``): a flaw of the training levels (too hard, too easy) must not change the
    policy the arms start from, only what they train on."""
    from evotrainer.config.harness import load_harness
    from evotrainer.training.data import difficulty_range

    ref = TaskRef(*suite.tasks[task].ref())
    levels = difficulty_range(ref.get(), load_harness(suite.harness(task, None, home / "harnesses")))
    return ArmConfig(budget=suite.budget, eval_n=suite.eval_n, wide=suite.wide,
                     policy={"warm_start_difficulty": list(levels)})


def warm_start(ref: TaskRef, cfg: ArmConfig, seed: int, home: Path) -> tuple[str | None, str | None]:
    """(the fingerprint of the seed's warm start, None) once it exists or could be built; (None, why) when refused."""
    from evotrainer.config.policy import PolicySpec
    from evotrainer.core.errors import WarmStartFailed
    from evotrainer.training.policy import base_policy_dir

    try:
        base = base_policy_dir(home, ref.get(), PolicySpec(**cfg.policy, seed=seed), seed,
                               tuple(cfg.policy["warm_start_difficulty"]),
                               log=lambda m: print(f"  [warm start {ref.name} s{seed}] {m}", flush=True))
    except WarmStartFailed as err:
        return None, str(err)
    return base_fingerprint(base), None


def base_fingerprint(base: Path) -> str:
    """The first 12 hex digits of the SHA-256 of a warm start's weights. A cached warm start is keyed by its settings,
    not by the code that built it, and one rebuilt on another kind of CPU trains to other weights (torch's float kernels
    follow the CPU), so a home built under older code, or lost and rebuilt elsewhere, may start a seed from other
    weights: rows are compared only when they started from the same ones (:func:`comparable`)."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(base.glob("*.safetensors")):
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:12]


def comparable(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows compared, rows held aside). Arms are compared only when they started from one warm start, and a seed
    takes longer than a session, whose machine may be of another kind than the last one's: each kind's rows of a task
    and seed are kept, and it resumes its own set (:func:`run_rows`). The report compares, per task and seed, the set
    with the most rows, and of sets as large the one finished first (its last row earlier in the file): a choice made
    from counts and order, never from an accuracy. Rows from before the fingerprint was recorded are always compared."""
    sets: dict[tuple[str, int], dict[str, list[int]]] = {}
    for i, r in enumerate(rows):
        if r.get("base"):
            sets.setdefault((r["task"], r["seed"]), {}).setdefault(r["base"], []).append(i)
    keep = {k: min(v.items(), key=lambda kv: (-len(kv[1]), kv[1][-1]))[0] for k, v in sets.items()}
    kept, held = [], []
    for r in rows:
        (held if r.get("base") and r["base"] != keep[(r["task"], r["seed"])] else kept).append(r)
    return kept, held


def held_aside(held: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """'task/seed' -> each warm start whose rows are held aside there: its fingerprint, the machine, how many rows."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in held:
        e = out.setdefault(f"{r['task']}/{r['seed']}", {}).setdefault(r["base"], {"base": r["base"], "cpu": r.get("cpu"),
                                                                                  "rows": 0})
        e["rows"] += 1
    return {k: list(v.values()) for k, v in sorted(out.items())}


def _cells(suite: Suite, a) -> list[tuple[str, str]]:
    """(flaw, task) pairs the command names: every flaw × its tasks, or those of --flaws (ids, 'live', the demo's id,
    or 'tuned': the arms from each task's tuned recipe itself)."""
    chosen = a.flaws or [f.id for f in suite.flaws]
    cells: list[tuple[str, str]] = []
    live = live_cells(suite, comparable(_load_rows())[0]) if "live" in chosen else set()
    for fid in chosen:
        if fid == "live":
            cells += sorted(live)
            continue
        if fid == "tuned":
            cells += [("tuned", t) for t in suite.tasks]
            continue
        f = suite.flaw(fid)
        cells += [(f.id, t) for t in f.tasks]
    return [(f, t) for f, t in dict.fromkeys(cells) if not a.tasks or t in a.tasks]


def live_cells(suite: Suite, rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The suite's recorded ``live`` cells once set (the evaluation seeds are judged on the cells chosen before they
    ran); until then :func:`live_by_rows`."""
    if suite.live is not None:
        return {tuple(c.split("/", 1)) for c in suite.live}  # type: ignore[misc]
    return live_by_rows(suite, rows)


def live_by_rows(suite: Suite, rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(flaw, task) where tuned − flawed ≥ live_gap on the wide split, mean over the development seeds run; never the
    demo's flaw, which is reported beside the suite, not one of its flaws (its gap is in :func:`gaps` all the same)."""
    out = set()
    for (flaw, task), gap in gaps(suite, rows).items():
        if flaw != suite.demo.id and gap["mean"] is not None and gap["mean"] >= suite.live_gap:
            out.add((flaw, task))
    return out


def gaps(suite: Suite, rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """tuned − flawed (wide split) per (flaw, task) over the development seeds, with its interval."""
    wide = {(r["flaw"], r["task"], r["seed"]): r["accuracy_wide"] for r in rows
            if r["arm"] in ("static", "tuned") and r["budget"] == suite.budget and r.get("accuracy_wide") is not None}
    out = {}
    for f in [*suite.flaws, suite.demo]:
        for task in f.tasks:
            d = [wide[("tuned", task, s)] - wide[(f.id, task, s)] for s in suite.dev_seeds
                 if (f.id, task, s) in wide and ("tuned", task, s) in wide]
            out[(f.id, task)] = {"mean": round(statistics.fmean(d), 4) if d else None, "ci90": _t90(d) if d else None,
                                 "seeds": len(d)}
    return out


# ------------------------------------------------------------------------------------------------------- phases
def run_rows(suite: Suite, a, arms: list[str]) -> None:
    from evotrainer.core.home import resolve_home

    home = resolve_home(a.home)
    home.mkdir(parents=True, exist_ok=True)
    seeds = suite.seeds(a.seeds)
    frozen_check(suite, ROOT, seeds)
    commit = code_commit(ROOT)
    rows = _load_rows()
    hdir = home / "harnesses"
    off = tuple(sorted(a.off or ()))
    cpu = machine_kind()  # a warm start rebuilt on another kind of CPU has other weights
    for seed in seeds:
        for flaw, task in _cells(suite, a):
            ref = TaskRef(*suite.tasks[task].ref())
            cfg = arm_config(suite, task, home)
            for arm in arms:
                if flaw == "tuned" and arm == "static":
                    continue  # the tuned recipe's static arm is the `tuned` row
                fid = "tuned" if arm == "tuned" else flaw
                key = (fid, task, seed, arm, suite.budget, off if arm == "campaign" else ())
                done = {r.get("base") for r in rows if row_key(r) == key}
                if None in done:
                    continue  # a row from before the fingerprint, or a refused warm start: not run again
                base, refused = warm_start(ref, cfg, seed, home)
                if base in done:
                    continue  # this warm start's row is there; another machine's set is kept beside it
                harness = suite.harness(task, None if "tuned" in (arm, flaw) else flaw, hdir)
                row: dict[str, Any] = {"flaw": fid, "task": task, "seed": seed, "arm": arm, "budget": suite.budget,
                                       "off": list(key[5]), "commit": commit, "date": time.strftime("%Y-%m-%d"),
                                       "base": base, "cpu": cpu}
                print(f"== {fid} / {task} / seed {seed}: {arm}" + (f" (off: {', '.join(off)})" if key[5] else ""),
                      flush=True)
                if refused is not None:
                    row["refused"] = refused
                else:
                    row.update(_arm(arm, ref, harness, seed, cfg, home, key[5]))
                rows = [r for r in _load_rows() if (row_key(r), r.get("base")) != (key, base)] + [row]
                print(json.dumps(row, default=str), flush=True)
                _save(suite, rows)


def _arm(arm: str, ref: TaskRef, harness: Path, seed: int, cfg: ArmConfig, home: Path, off: tuple) -> dict[str, Any]:
    if arm in ("static", "tuned"):
        return run_static(ref, harness, seed, cfg, home)
    if arm == "campaign":
        return run_campaign(ref, harness, seed, cfg, home, off)
    from flaw_search import run_optuna, run_pbt

    return (run_pbt if arm == "pbt" else run_optuna)(ref, harness, seed, cfg, home)


def round0(suite: Suite, a) -> None:
    """The first segment under each flawed recipe, diagnosed, and the heuristic brain's drafts for its findings."""
    from flaw_arms import _job

    from evotrainer.agent.brains.base import BrainContext
    from evotrainer.agent.brains.heuristic import HeuristicBrain
    from evotrainer.agent.lessons import SEED_LIBRARY, brain_inputs
    from evotrainer.config.harness import load_harness
    from evotrainer.core.home import resolve_home
    from evotrainer.diagnostics.registry import Registry
    from evotrainer.evidence.readers import read_job_dir
    from evotrainer.jobs.runner import run_job

    home = resolve_home(a.home)
    commit = code_commit(ROOT)
    seeds = suite.seeds(a.seeds)
    frozen_check(suite, ROOT, seeds)
    out = []
    for seed in seeds:
        for flaw, task in _cells(suite, a):
            ref = TaskRef(*suite.tasks[task].ref())
            harness_path = suite.harness(task, flaw, home / "harnesses")
            cfg = arm_config(suite, task, home)
            if (why := warm_start(ref, cfg, seed, home)[1]) is not None:
                out.append({"flaw": flaw, "task": task, "seed": seed, "refused": why})
                continue
            name = f"round0-{harness_path.stem}-s{seed}-seg{a.segment}-ws"
            run_dir = home / "jobs" / name
            if not (run_dir / "meta.json").exists() or json.loads((run_dir / "meta.json").read_text())["status"] != "finished":
                job = _job(ref, harness_path, a.segment, seed, name, cfg, a.segment, at_start=True)
                run_job(job, home, resume=name if run_dir.exists() else None)
            harness = load_harness(harness_path)
            findings = Registry(harness).run(read_job_dir(run_dir))
            if (fell := _fell(run_dir, a.segment, suite.eval_n)) is not None:
                findings = [fell, *findings]
            cands, _, _ = brain_inputs(SEED_LIBRARY, harness, findings, ref.name, task_inert=ref.get().inert_knobs())
            brain = HeuristicBrain(explore_threshold=0.3)  # the campaign's defaults (BrainSpec)
            res = brain.propose(BrainContext(harness=harness, findings=findings, candidates=cands, max_proposals=2,
                                             seed=seed, round=0, min_effect=0.0, task=ref.name))
            f = suite.flaw(flaw)
            named = named_symptoms((x.symptom, x.severity) for x in findings)
            out.append({"flaw": flaw, "task": task, "seed": seed, "commit": commit,
                        "findings": [{"symptom": x.symptom, "severity": x.severity} for x in findings],
                        "expected": f.symptoms if hasattr(f, "symptoms") else [],
                        "named_expected": bool(set(named) & set(getattr(f, "symptoms", []))),
                        "drafts": [{"knob": d.knob, "value": d.value, "symptom": d.hypothesis.symptom,
                                    "skills": d.cited_skills} for d in res.drafts],
                        "draft_is_flawed_knob": any(d.knob in f.knobs for d in res.drafts),
                        "draft_is_remedy": any(d.knob in f.knobs or set(d.cited_skills) & remedies(f)
                                               for d in res.drafts)})
            print(json.dumps(out[-1], default=str), flush=True)
    # rows of other cells and seeds stay: a run replaces only the (flaw, task, seed) it ran
    path = ROOT / "bench" / "results" / "flaws_round0.json"
    ran = {(r["flaw"], r["task"], r["seed"]) for r in out}
    kept = [r for r in (json.loads(path.read_text())["rows"] if path.exists() else [])
            if (r["flaw"], r["task"], r["seed"]) not in ran]
    save("flaws_round0", {"segment": a.segment, "rows": kept + out})


def _fell(run_dir: Path, step: int, n: int):
    """The campaign's ``regression`` finding when the segment's held-out accuracy fell below its start by more than
    the rollback's margin (``rollback.confidence`` 0.9, as the campaign would roll the segment back to the base).
    round0 is the campaign's first round without its stuck and regressed restrictions on what the brain may draft;
    the campaign arm records the real one."""
    from statistics import NormalDist

    from evotrainer.agent.regression import DIAGNOSTIC, SYMPTOM, VERSION
    from evotrainer.core.domain import Finding
    from evotrainer.evidence.model import read_metrics

    m = read_metrics(run_dir)
    acc = m.set_index("step")["eval/greedy_accuracy"].dropna() if "eval/greedy_accuracy" in m else None
    if acc is None or 0 not in acc.index or step not in acc.index:
        return None
    start, end = float(acc[0]), float(acc[step])
    margin = NormalDist().inv_cdf(0.9) * ((start * (1 - start) + end * (1 - end)) / n) ** 0.5
    if start - end <= margin:
        return None
    return Finding(symptom=SYMPTOM, diagnostic=DIAGNOSTIC, version=VERSION, severity="critical", confidence=1.0,
                   metrics={"accuracy": end, "best_accuracy": start, "drop": start - end, "margin": margin},
                   explanation=f"held-out accuracy fell from {start:.3f} to {end:.3f} in the segment")


# ------------------------------------------------------------------------------------------------------ report
def summary(suite: Suite, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (flaw, task) on each seed set: every arm's wide accuracy (mean, 90 % t), its recovered share, and the
    campaign's paired differences with the flawed recipe, PBT, Optuna and the tuned one; 'tuned/<task>': the arms
    from the tuned recipe itself."""
    rows, held = comparable(rows)
    out: dict[str, Any] = {"held_aside": held_aside(held), "gaps": {f"{f}/{t}": g for (f, t), g in gaps(suite, rows).items()},
                           "live": sorted(f"{f}/{t}" for f, t in live_cells(suite, rows)),
                           "live_by_rows": sorted(f"{f}/{t}" for f, t in live_by_rows(suite, rows))}
    starts = [(f.id, task) for f in [*suite.flaws, suite.demo] for task in f.tasks]
    starts += [("tuned", t) for t in suite.tasks]
    for label, seeds, extension in seed_sets(suite):
        cells = {f"{fid}/{task}": c for fid, task in starts if (c := _cell(suite, rows, fid, task, seeds))}
        out[label] = cells
        out[f"{label}_pooled"] = _pooled(suite, rows, seeds)
        # a round's seeds are required for a verdict, an extension seed once it has rows
        required = [s for s in seeds if s not in extension or any(r["seed"] == s for r in rows)]
        out[f"{label}_targets"] = flaw_targets.targets(suite, rows, live_cells(suite, rows), seeds, required)
    return out


def seed_sets(suite: Suite) -> list[tuple[str, list[int], list[int]]]:
    """(label, seeds, extension) of the development seeds and of each evaluation round, each reported apart."""
    return [("dev", list(suite.dev_seeds), []),
            *((f"eval-{e.name}", e.all_seeds, list(e.extension)) for e in suite.evaluations)]


def _pooled(suite: Suite, rows: list[dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
    """The default campaign against each other arm (PBT, Optuna, the flawed static run, each ablation), paired by
    (live cell, seed) over the seed set: mean difference with its 90 % t interval, the pairs, how many the campaign
    leads (by more than 0.0005), and the same per seed."""
    live = live_cells(suite, rows)
    acc: dict[str, dict[tuple[str, str, int], float]] = {}
    for r in rows:
        if (r["flaw"], r["task"]) in live and r["seed"] in seeds and r.get("accuracy_wide") is not None \
                and r["budget"] == suite.budget:
            arm = r["arm"] + (f"-off-{'-'.join(r['off'])}" if r.get("off") else "")
            acc.setdefault(arm, {})[(r["flaw"], r["task"], r["seed"])] = r["accuracy_wide"]
    camp = acc.get("campaign", {})

    def diff(d: list[float]) -> dict[str, Any]:
        return {"mean": round(statistics.fmean(d), 4), "ci90": _t90(d), "pairs": len(d),
                "ahead": sum(x > 0.0005 for x in d)}

    out: dict[str, Any] = {}
    for arm, other in sorted(acc.items()):
        keys = sorted(set(camp) & set(other))
        if arm in ("campaign", "tuned") or not keys:
            continue
        out[f"campaign_minus_{arm}"] = {**diff([camp[k] - other[k] for k in keys]), "by_seed": {
            s: diff([camp[k] - other[k] for k in keys if k[2] == s]) for s in sorted({k[2] for k in keys})}}
    return out


def _cell(suite: Suite, rows: list[dict[str, Any]], fid: str, task: str, seeds: list[int]) -> dict[str, Any] | None:
    by: dict[str, dict[int, dict[str, Any]]] = {}
    for r in rows:
        if r["task"] == task and r["seed"] in seeds and r.get("accuracy_wide") is not None and \
                r["budget"] == suite.budget and (r["flaw"] == fid or r["arm"] == "tuned"):
            arm = r["arm"] + (f"-off-{'-'.join(r['off'])}" if r.get("off") else "")
            by.setdefault(arm, {})[r["seed"]] = r
    if set(by) <= {"tuned"}:
        return None
    cell: dict[str, Any] = {}
    for arm, runs in by.items():
        xs = [runs[s]["accuracy_wide"] for s in sorted(runs)]
        cell[arm] = {"mean": round(statistics.fmean(xs), 4), "ci90": _t90(xs), "seeds": sorted(runs),
                     "steps": [runs[s].get("steps") for s in sorted(runs)],
                     "completions": [runs[s].get("compute", {}).get("completions") for s in sorted(runs)]}
    flawed, tuned = by.get("static", {}), by.get("tuned", {})
    for arm, runs in by.items():
        common = [s for s in runs if s in flawed and s in tuned]
        gap = [tuned[s]["accuracy_wide"] - flawed[s]["accuracy_wide"] for s in common]
        if common and abs(statistics.fmean(gap)) > 1e-9:
            share = (statistics.fmean(runs[s]["accuracy_wide"] for s in common)
                     - statistics.fmean(flawed[s]["accuracy_wide"] for s in common)) / statistics.fmean(gap)
            cell[arm]["recovered_share"] = round(share, 3)
    camp = by.get("campaign", {})
    for other in ("static", "pbt", "optuna", "tuned"):
        common = sorted(set(camp) & set(by.get(other, {})))
        if common:
            d = [camp[s]["accuracy_wide"] - by[other][s]["accuracy_wide"] for s in common]
            cell[f"campaign_minus_{other}"] = {"mean": round(statistics.fmean(d), 4), "ci90": _t90(d), "seeds": common}
    return cell


def markdown(suite: Suite, rows: list[dict[str, Any]]) -> str:
    """The liveness table (tuned − flawed per flaw × task, wide split, development seeds) and, per seed set, every
    arm's wide accuracy and recovered share: what bench/log/19-flaw-suite.md records."""
    summ = summary(suite, rows)
    rows = comparable(rows)[0]
    wide = {(r["flaw"], r["task"], r["seed"], r["arm"]): r.get("accuracy_wide") for r in rows if not r.get("off")}
    out = ["| flaw | task | subtle | tuned − flawed (wide), per dev seed | mean | live |", "|---|---|---|---|---|---|"]
    for (flaw, task), g in gaps(suite, rows).items():
        f = suite.flaw(flaw)
        per = [
            (wide[("tuned", task, s, "tuned")] - wide[(flaw, task, s, "static")])
            if wide.get(("tuned", task, s, "tuned")) is not None and wide.get((flaw, task, s, "static")) is not None
            else None for s in suite.dev_seeds]
        cells = " / ".join("—" if x is None else f"{x:+.3f}" for x in per)
        mean = "—" if g["mean"] is None else f"{g['mean']:+.3f}"
        live = "" if g["mean"] is None else ("**live**" if g["mean"] >= suite.live_gap else "no")
        out.append(f"| {flaw} | {task} | {'yes' if getattr(f, 'subtle', False) else 'no'} | {cells} | {mean} | {live} |")
    for label, _, _ in seed_sets(suite):
        if summ[label]:
            out += ["", arms_markdown(label, summ[label]), "",
                    flaw_targets.markdown(summ[f"{label}_targets"],
                                          "development" if label == "dev" else f"evaluation ({label[5:]})")]
    return "\n".join(out)


def arms_markdown(label: str, cells: dict[str, Any]) -> str:
    """Per cell, every arm's wide accuracy (mean over the seeds it ran, their count) and recovered share."""
    arms = sorted({a for c in cells.values() for a, v in c.items() if isinstance(v, dict) and "mean" in v
                   and not a.startswith("campaign_minus")}, key=lambda a: (ARM_ORDER.get(a.split("-off-")[0], 9), a))
    out = [f"**{label} seeds**: wide accuracy, mean over seeds (n), recovered share in brackets",
           "| cell | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for name, c in cells.items():
        row = []
        for a in arms:
            v = c.get(a)
            share = f" [{v['recovered_share']:+.2f}]" if v and "recovered_share" in v and a not in ("static", "tuned") else ""
            row.append("—" if v is None else f"{v['mean']:.3f} ({len(v['seeds'])}){share}")
        out.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(out)


ARM_ORDER = {"static": 0, "tuned": 1, "campaign": 2, "pbt": 3, "optuna": 4}


def _save(suite: Suite, rows: list[dict[str, Any]]) -> None:
    save("flaws", {"suite_version": suite.version, "budget": suite.budget, "rows": rows, "summary": summary(suite, rows)})


def main() -> None:
    p = parser(__doc__, "bench-flaws")
    p.add_argument("phase", choices=["live", "round0", "arms", "report"])
    p.add_argument("--seeds", default="dev", help="dev; eval or eval+ (with the extension): the latest evaluation round, "
                   "':NAME' for another (eval:first); or a list such as 0,1")
    p.add_argument("--flaws", nargs="*", default=None, help="flaw ids, 'live' (the live cells), or the demo's id")
    p.add_argument("--tasks", nargs="*", default=None)
    p.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--off", nargs="*", default=None, help="campaign rules switched off (flaw_arms.RULES)")
    p.add_argument("--segment", type=int, default=20, help="round0: steps of the first segment")
    p.add_argument("--markdown", action="store_true", help="report: the liveness table as markdown")
    a = p.parse_args()
    suite = load_suite()
    if a.phase == "live":
        run_rows(suite, a, ["tuned", "static"])
    elif a.phase == "arms":
        run_rows(suite, a, a.arms)
    elif a.phase == "round0":
        round0(suite, a)
    else:
        rows = _load_rows()
        print(markdown(suite, rows) if a.markdown else json.dumps(summary(suite, rows), indent=1))


if __name__ == "__main__":
    main()
