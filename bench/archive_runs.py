"""Grow the labelled archive (issue 17): real runs of more domains, longer runs, and runs made by plain TRL scripts.

The first archive (``bench/pathological_runs.py``) was 15 runs of 40-step ``arith``, and the diagnostics' four
revisions were tuned on them, so its recall of 1.00 is in-sample. This script adds:

- the same five arith recipes with two more RL seeds (the fixture's seed 0 is the third);
- long runs: two healthy 300-step arith runs (for the precision of ``grad_spike`` and ``plateau``, which need
  length to misfire), two 120-step runs at learning rate 1e-7 (labelled ``learns_nothing``: the reward moves by
  sampling noise, nothing is learned), and the seed-1 baseline run of ``bench/RESULTS.md`` §1 (64 x 8, 300 steps),
  the run that had no finding;
- runs of ``countdown``, ``code`` and ``agentic`` (baseline recipes, a too-short budget, the agentic leak trap);
- runs made by a plain TRL script (``bench/trl_script.py``: TRL's own output dir, no EvoTrainer in the loop).

Every run is labelled **before** any diagnostic reads it and **split once** into a tuning half and a held-out half (the ``split`` column below, fixed here before any revision:
for each recipe its runs alternate between the halves, seed by seed, and a recipe with one run goes to the half
that has fewer runs of its kind). Labels come from the records, not from the diagnostics (:func:`raw_labels`, over
the last quarter of the run's steps, at the levels the symptoms are defined by): ``dead_groups`` when at least 60 %
of the GRPO groups have all-equal rewards, ``too_hard`` when 70 % are all wrong, ``too_easy`` when 60 % are all
right, ``truncation`` when 20 % of completions are clipped (TRL's ``completions/clipped_ratio``), ``entropy_collapse``
when entropy ends below a quarter of its start and below 0.15, ``entropy_blowup`` when it ends above twice its start
and above 1.5; the exploit and trend symptoms a recipe was made to
show (``RUNS``: spraying, reward hacking) only when the records confirm them — spraying: 30 % of rewarded
completions hold more than one number; reward hacking: the optimised reward rises and its gap to strict accuracy
grows by 0.05 — and ``invalid`` only when an exploit happened. Over the second half of a run, with accuracy = held-out
greedy accuracy where it has 3+ evaluations there, else strict train accuracy: ``plateau`` when the run has 60+ steps,
the reward's fitted change is within ±0.05 and accuracy gains at most 0.03 (below 0.95); ``learns_nothing`` when it
has 100+ steps, accuracy gains at most 0.03 (below 0.95) and the per-step reward's standard deviation is at least
0.02 — unless the fitted change lies within one standard error of its line, when the run is *ambiguous* for
that symptom (``unknown`` in the archive, scored neither way; :func:`_trend_labels`, since 2026-11-28).
``grad_spike`` is never a label: no recipe was made to destabilise the optimiser, so every one it reports counts
as a false positive (a run whose groups are mostly dead has tiny gradients between a few ordinary ones). For the share symptoms this makes the benchmark a test of the readers and of
the aggregation across evidence sources at the defined levels (not of the levels). ``--check`` prints the raw numbers
and the labels they give. Runs are exported
compactly to ``--export`` (``meta.json``, ``metrics.jsonl``, ``rollouts/``; TRL runs: ``trainer_state.json`` and
``completions/``), with ``archive.yaml``, ``archive-tuning.yaml`` and ``archive-heldout.yaml``.

    .venv/bin/python bench/archive_runs.py [--only GROUP ...] [--check]

Groups, in the order they run (each resumable: a run already exported is kept): trl, arith, lr, long1 (the held-out
long run), countdown, agentic, code, long0, seed1, v4 (four more seeds of the trend recipes), v5 (more seeds of the
exploit recipes above all, 2026-11-28), v6 (fresh seeds for plateau v2) — most important first, because on a shared 2-core machine the
whole list takes hours (bench/RESULTS.md says which groups ran).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _common import ROOT, parser

# name -> group, kind, spec, labels, invalid, split. kind 'job': our runner (task, harness or harness patch, steps,
# seed, policy, eval every, eval n); kind 'trl': bench/trl_script.py (variant, steps, seed).
H = "harnesses/"
RUNS: dict[str, dict] = {}


def _add(name, group, kind, spec, labels, split, invalid=False):
    RUNS[name] = {"group": group, "kind": kind, "spec": spec, "labels": labels, "split": split, "invalid": invalid}


# plain TRL script runs (the policy: our warm-started tiny arith model, as a plain HF dir)
for seed, split in ((0, "tuning"), (1, "heldout")):
    _add(f"trl-healthy-s{seed}", "trl", "trl", {"variant": "healthy", "steps": 60, "seed": seed}, [], split)
    _add(f"trl-lenient-s{seed}", "trl", "trl", {"variant": "lenient", "steps": 60, "seed": seed},
         ["answer_spraying", "reward_hacking", "too_hard", "truncation"], split, invalid=True)
    _add(f"trl-short-s{seed}", "trl", "trl", {"variant": "short", "steps": 30, "seed": seed},
         ["truncation", "too_hard", "dead_groups"], split)
    _add(f"trl-lr-high-s{seed}", "trl", "trl", {"variant": "lr-high", "steps": 30, "seed": seed},
         ["entropy_collapse", "truncation", "too_hard", "dead_groups"], split)
# the five recipes of the first archive, two more RL seeds (policy seed 0, as the fixture's seed-0 runs)
OLD = {"healthy": (H + "grpo-small.yaml", {}, []),
       "lr-too-high": (H + "pathological/lr-too-high.yaml", {}, ["entropy_collapse", "truncation", "too_hard", "dead_groups"]),
       "too-short": (H + "pathological/too-short.yaml", {}, ["truncation", "too_hard", "dead_groups"]),
       "too-easy": (H + "pathological/too-easy.yaml", {"sft_target_accuracy": 0.99}, ["dead_groups", "too_easy"]),
       "lenient-reward": (H + "pathological/lenient-reward.yaml", {},
                          ["answer_spraying", "reward_hacking", "too_hard", "truncation"])}
for variant, (harness, pol, labels) in OLD.items():
    for seed, split in ((1, "tuning"), (2, "heldout")):
        _add(f"arith-{variant}-s{seed}", "arith", "job",
             {"task": "arith", "harness": harness, "steps": 40, "seed": seed, "policy": {"seed": 0, **pol},
              "eval_every": 10, "eval_n": 100}, labels, split, invalid=variant == "lenient-reward")
for seed, split in ((0, "tuning"), (1, "heldout")):
    _add(f"arith-healthy-long-s{seed}", f"long{seed}", "job",
         {"task": "arith", "harness": H + "grpo-small.yaml", "steps": 300, "seed": seed, "policy": {"seed": 0},
          "eval_every": 25, "eval_n": 200}, [], split)
    _add(f"arith-lr-tiny-s{seed}", "lr", "job",
         {"task": "arith", "harness": {"base": H + "grpo-small.yaml", "patch": {"optim": {"learning_rate": 1e-7}}},
          "steps": 120, "seed": seed, "policy": {"seed": 0}, "eval_every": 20, "eval_n": 200},
         ["learns_nothing", "plateau"], split)
for seed, split in ((0, "tuning"), (1, "heldout")):
    _add(f"countdown-baseline-s{seed}", "countdown", "job",
         {"task": "countdown", "harness": H + "grpo-small.yaml", "steps": 60, "seed": seed, "policy": {"seed": 0},
          "eval_every": 20, "eval_n": 100}, [], split)
_add("countdown-too-short-s0", "countdown", "job",
     {"task": "countdown", "harness": H + "pathological/too-short.yaml", "steps": 40, "seed": 0, "policy": {"seed": 0},
      "eval_every": 20, "eval_n": 100}, ["truncation", "too_hard", "dead_groups"], "heldout")
_add("agentic-baseline-s0", "agentic", "job",
     {"task": "agentic", "harness": H + "agentic-baseline.yaml", "steps": 60, "seed": 0, "policy": {"seed": 0},
      "eval_every": 30, "eval_n": 100}, [], "heldout")
for seed, split in ((0, "tuning"), (1, "heldout")):
    _add(f"agentic-leak-s{seed}", "agentic", "job",
         {"task": "agentic", "harness": {"base": H + "agentic-baseline.yaml", "patch": {"env": {"leak_tool": True}}},
          "steps": 60, "seed": seed, "policy": {"seed": 0}, "eval_every": 30, "eval_n": 100}, ["answer_leak"], split,
         invalid=True)
_add("code-baseline-s0", "code", "job",
     {"task": "code", "harness": H + "code-baseline.yaml", "steps": 60, "seed": 0,
      "policy": {"seed": 0, "sft_steps": 1000, "sft_target_accuracy": None}, "eval_every": 30, "eval_n": 100}, [],
     "heldout")
_add("arith-baseline-seed1", "seed1", "job",
     {"task": "arith", "harness": H + "grpo-baseline.yaml", "steps": 300, "seed": 1, "policy": {"seed": 1},
      "eval_every": 50, "eval_n": 500}, ["learns_nothing"], "heldout")
# recipes that later groups repeat with more seeds: (spec of seed, labels by design, invalid)
LENIENT = ["answer_spraying", "reward_hacking", "too_hard", "truncation"]
RECIPES = {
    "trl-healthy": lambda s: ({"variant": "healthy", "steps": 60, "seed": s}, [], False),
    "trl-lenient": lambda s: ({"variant": "lenient", "steps": 60, "seed": s}, LENIENT, True),
    "arith-lr-tiny": lambda s: ({"task": "arith", "harness": {"base": H + "grpo-small.yaml", "patch": {
        "optim": {"learning_rate": 1e-7}}}, "steps": 120, "seed": s, "policy": {"seed": 0}, "eval_every": 20,
        "eval_n": 200}, ["learns_nothing", "plateau"], False),
    "arith-healthy-long": lambda s: ({"task": "arith", "harness": H + "grpo-small.yaml", "steps": 300, "seed": s,
                                      "policy": {"seed": 0}, "eval_every": 25, "eval_n": 200}, [], False),
    "countdown-baseline": lambda s: ({"task": "countdown", "harness": H + "grpo-small.yaml", "steps": 60, "seed": s,
                                      "policy": {"seed": 0}, "eval_every": 20, "eval_n": 100}, [], False),
    "arith-lenient-reward": lambda s: ({"task": "arith", "harness": OLD["lenient-reward"][0], "steps": 40, "seed": s,
                                        "policy": {"seed": 0}, "eval_every": 10, "eval_n": 100}, LENIENT, True),
    "agentic-leak": lambda s: ({"task": "agentic", "harness": {"base": H + "agentic-baseline.yaml", "patch": {
        "env": {"leak_tool": True}}}, "steps": 60, "seed": s, "policy": {"seed": 0}, "eval_every": 30, "eval_n": 100},
        ["answer_leak"], True),
}


def _more(group: str, recipe: str, seeds) -> None:
    """More seeds of a recipe in ``group``, halves alternating by seed (even: tuning, odd: held-out)."""
    for seed in seeds:
        spec, labels, invalid = RECIPES[recipe](seed)
        _add(f"{recipe}-s{seed}", group, "trl" if recipe.startswith("trl-") else "job", spec, labels,
             "tuning" if seed % 2 == 0 else "heldout", invalid=invalid)


# v4 (2026-11-28): more seeds of the recipes whose labels are trend symptoms or their absence, added after the
# ambiguous-trend rule and never read by any threshold or rule before they were scored.
for r in ("trl-healthy", "trl-lenient", "arith-lr-tiny", "arith-healthy-long", "countdown-baseline"):
    _more("v4", r, (2, 3, 4, 5))
# v5 (2026-11-28, session 31): more seeds of every recipe whose runs sat near a line — the exploit recipes above all
# (archive v4 held only two held-out reward_hacking runs) — plus healthy and leak runs, defined with the v5 labelling
# rule and before any of them ran.
_more("v5", "trl-lenient", range(6, 14))
_more("v5", "trl-healthy", range(6, 10))
_more("v5", "arith-lenient-reward", range(3, 7))
for r in ("arith-healthy-long", "arith-lr-tiny", "countdown-baseline"):
    _more("v5", r, (6, 7))
_more("v5", "agentic-leak", (2, 3))
# v6 (2026-11-28, session 31): plateau v2 was chosen on the tuning half, but after the held-out numbers of archive v5
# had been printed beside it; fresh seeds of the recipes that carry plateau labels or risk a plateau warning on a
# healthy run, defined before any of them ran, test it (and everything else) with the diagnostics frozen.
_more("v6", "trl-lenient", range(14, 18))
_more("v6", "trl-healthy", range(10, 14))
for r in ("arith-healthy-long", "arith-lr-tiny", "countdown-baseline"):
    _more("v6", r, (8, 9))
GROUPS = ["trl", "arith", "lr", "long1", "countdown", "agentic", "code", "long0", "seed1", "v4", "v5", "v6"]
FIXTURES = {"healthy-s0": [], "lr-too-high-s0": OLD["lr-too-high"][2], "too-short-s0": OLD["too-short"][2],
            "too-easy-s0": OLD["too-easy"][2], "lenient-reward-s0": OLD["lenient-reward"][2]}


def _harness_file(h, home: Path, name: str) -> str:
    if isinstance(h, str):
        return str(ROOT / h)
    doc = yaml.safe_load((ROOT / h["base"]).read_text())
    for k, v in h["patch"].items():
        doc[k] = {**(doc.get(k) or {}), **v}
    doc["name"] = name
    out = home / "harnesses" / f"{name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(out)


def _job(name: str, spec: dict, home: Path, dest: Path) -> None:
    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.job import JobSpec
    from evotrainer.config.policy import PolicySpec
    from evotrainer.jobs.runner import run_job

    job = JobSpec(task=spec["task"], harness=_harness_file(spec["harness"], home, name), steps=spec["steps"],
                  seed=spec["seed"], policy=PolicySpec(**spec["policy"]), save_every=spec["steps"], name=name,
                  eval=EvalSpec(every=spec["eval_every"], n=spec["eval_n"], k=1))
    src = home / "jobs" / name
    if not (src / "meta.json").is_file() or json.loads((src / "meta.json").read_text()).get("status") != "finished":
        try:
            run_job(job, home, resume=name if (src / "meta.json").is_file() else None, log=print)
        except Exception as err:  # noqa: BLE001 - a pathological run may end in NaN: keep what it recorded
            print(f"{name}: {type(err).__name__}: {err}", flush=True)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for f in ("meta.json", "metrics.jsonl"):
        shutil.copy(src / f, dest / f)
    shutil.copytree(src / "rollouts", dest / "rollouts")


def _trl(name: str, spec: dict, home: Path, dest: Path) -> None:
    model = home / "policies" / "arith__tiny__s0__b608a2bca4"  # the fixture runs' warm start (tiny, 3-digit sums)
    if not model.is_dir():
        raise SystemExit(f"{model} missing: train any arith job with policy seed 0 in {home} first")
    out = home / "trl" / name
    if not any(out.glob("checkpoint-*/trainer_state.json")):
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([sys.executable, str(ROOT / "bench" / "trl_script.py"), "--model", str(model), "--out", str(out),
                        "--variant", spec["variant"], "--steps", str(spec["steps"]), "--seed", str(spec["seed"])],
                       check=True)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    last = max(out.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    shutil.copy(last, dest / "trainer_state.json")
    shutil.copytree(out / "completions", dest / "completions")


def write_archives(export: Path) -> None:
    """``archive{,-tuning,-heldout}.yaml`` under the labelling rule in use (v5), ``archive-v4labels*.yaml`` and
    ``archive-v3labels*.yaml`` under the earlier rules (:func:`raw_labels`), and ``*-heldout-v4.yaml`` /
    ``*-heldout-v5.yaml``: the held-out runs of groups added after each rule, which no rule was written after."""
    numbers = {n: raw_numbers(ROOT / "tests" / "fixtures" / "runs" / n) for n in FIXTURES}
    numbers |= {n: raw_numbers(export / n) for n in RUNS if (export / n).is_dir()}
    for prefix, rule in (("archive", "v5"), ("archive-v4labels", "v4"), ("archive-v3labels", "v3")):
        entries = []
        for n, design in FIXTURES.items():
            labels, exploit, unsure = raw_labels(design, numbers[n], rule)
            entries.append({"path": str(ROOT / "tests" / "fixtures" / "runs" / n), "labels": labels,
                            "invalid": exploit, "unknown": unsure, "note": "fixture, seed 0 (the first archive)",
                            "split": "tuning", "group": "fixture"})
        for name, r in RUNS.items():
            if name in numbers:
                labels, exploit, unsure = raw_labels(r["labels"], numbers[name], rule)
                entries.append({"path": name, "labels": labels, "invalid": exploit, "unknown": unsure,
                                "note": f"{r['group']}: {json.dumps(r['spec'], sort_keys=True)}; made to show "
                                        f"{r['labels'] or 'nothing'}", "split": r["split"], "group": r["group"]})
        for suffix, keep in (("", lambda e: True), ("-tuning", lambda e: e["split"] == "tuning"),
                             ("-heldout", lambda e: e["split"] == "heldout"),
                             ("-heldout-v4", lambda e: e["split"] == "heldout" and e["group"] == "v4"),
                             ("-heldout-v5", lambda e: e["split"] == "heldout" and e["group"] == "v5"),
                             ("-heldout-v6", lambda e: e["split"] == "heldout" and e["group"] == "v6")):
            runs = [{k: v for k, v in e.items() if k not in ("split", "group")} | {"note": f"{e['split']}; {e['note']}"}
                    for e in entries if keep(e)]
            (export / f"{prefix}{suffix}.yaml").write_text(yaml.safe_dump({"runs": runs}, sort_keys=False))


def raw_numbers(path: Path) -> dict:
    """The raw numbers behind the labels, from the records (not the diagnostics)."""
    import re

    import numpy as np

    from evotrainer.evidence.readers import load_evidence

    ev = load_evidence(path)
    r, m = ev.rollouts, ev.metrics
    q = r[r["step"] > r["step"].max() * 0.75] if len(r) else r
    out: dict = {"run": path.name, "steps": int(r["step"].max())}
    if len(q) and "reward" in q:
        g = q.groupby(["step", "group_id"])
        out["dead"] = round(float((g["reward"].max() - g["reward"].min() <= 1e-9).mean()), 2)
        if "correct" in q:
            c = q.assign(c=q["correct"].astype(float)).groupby(["step", "group_id"])["c"]
            out["all_wrong"] = round(float((c.max() == 0).mean()), 2)
            out["all_right"] = round(float((c.min() == 1).mean()), 2)
            out["acc_first_last"] = [round(float(r[r["step"] <= r["step"].min() + 4]["correct"].astype(float).mean()), 3),
                                     round(float(q["correct"].astype(float).mean()), 3)]
    for col, key in (("completions/clipped_ratio", "clipped"), ("entropy", "entropy")):
        if col in m and m[col].notna().any():
            s = m[col].dropna()
            out[key] = [round(float(s.iloc[:3].mean()), 3), round(float(s.iloc[-max(3, len(s) // 4):].mean()), 3)]
    if "eval/greedy_accuracy" in m and m["eval/greedy_accuracy"].notna().any():
        e = m["eval/greedy_accuracy"].dropna()
        out["heldout"] = [round(float(e.iloc[0]), 3), round(float(e.iloc[-1]), 3), len(e)]
    if "reward" in m and m["reward"].notna().any():
        s = m["reward"].dropna()
        out["reward_first_last"] = [round(float(s.iloc[:5].mean()), 3), round(float(s.iloc[-max(5, len(s) // 4):].mean()), 3)]
    if len(q) and "reward" in q:  # spraying: rewarded completions holding more than one number
        rewarded = q[q["reward"] > 0]
        if len(rewarded) >= 20:
            out["spraying"] = round(float(np.mean([len(re.findall(r"-?\d+", str(c))) > 1
                                                   for c in rewarded["completion"]])), 3)
    # progress over the second half: reward (per step) and accuracy (held-out with 3+ points there, else strict train)
    # The standard error of the fitted change is the least-squares slope's (scipy's linregress, n - 2 degrees of
    # freedom) times the same span; it says how far the change could sit from its estimate by noise alone.
    def change(df, col):
        from scipy.stats import linregress

        d = df[["step", col]].dropna()
        d = d[d["step"] >= out["steps"] / 2]
        if len(d) < 2:
            return None, None, None, None
        x, y = d["step"].to_numpy(float), d[col].to_numpy(float)
        span = float(x.max() - x.min())
        fit = linregress(x, y)
        # linregress gives no stderr (NaN) for a constant series: its fitted change is exactly 0, with no noise
        se = (fit.stderr * span if math.isfinite(fit.stderr) else 0.0) if len(d) >= 3 else None
        return (round(float(fit.slope) * span, 3), round(float(y.mean()), 3), round(float(y.std(ddof=1)), 3),
                None if se is None else round(se, 3))

    if "reward" in m:
        out["reward_change_2nd_half"], _, out["reward_std_2nd_half"], out["reward_change_se"] = change(m, "reward")
    # the reward/accuracy gap's growth (first five steps to the last quarter, as ``acc_first_last`` and
    # ``reward_first_last`` read it) and its standard error: each window's per-step gaps are a sample, and the
    # growth is the difference of two means (Welch), so its error is the root of the two variances over their counts
    if len(r) and "correct" in r and "reward" in m and m["reward"].notna().any():
        acc_step = r.assign(c=r["correct"].astype(float)).groupby("step")["c"].mean()
        rew_step = m[["step", "reward"]].dropna().groupby("step")["reward"].mean()
        gap = (rew_step - acc_step).dropna()
        first, last = gap[gap.index <= gap.index.min() + 4], gap[gap.index > out["steps"] * 0.75]
        if len(first) >= 2 and len(last) >= 2:
            out["gap_growth_se"] = round(float(math.sqrt(first.var(ddof=1) / len(first)
                                                         + last.var(ddof=1) / len(last))), 3)
    held = m[["step", "eval/greedy_accuracy"]].dropna() if "eval/greedy_accuracy" in m else None
    if held is not None and (held["step"] >= out["steps"] / 2).sum() >= 3:
        out["acc_change_2nd_half"], out["acc_level_2nd_half"], _, out["acc_change_se"] = change(
            m, "eval/greedy_accuracy")
        out["acc_source"] = "held-out"
    elif "correct" in r:
        per_step = r.assign(c=r["correct"].astype(float)).groupby("step", as_index=False)["c"].mean()
        out["acc_change_2nd_half"], out["acc_level_2nd_half"], _, out["acc_change_se"] = change(per_step, "c")
        out["acc_source"] = "train"
    return out


def _trend_labels(n: dict) -> tuple[set[str], set[str]]:
    """The trend labels (``plateau``, ``learns_nothing``) the records support, and those they cannot decide.

    A trend label compares a fitted change with a line (accuracy gain 0.03, reward change ±0.05). When the change
    sits within one standard error of its line, noise alone could put it on either side, and neither the label nor
    its absence can be trusted: the symptom is then *ambiguous* for that run, written to the archive as ``unknown``
    and not scored there (a finding is neither a hit nor a false alarm). The rule was added on 2026-11-28, after
    archive v3's held-out misses sat on such lines (``countdown-baseline-s1``'s train accuracy +0.028 against 0.03
    with a standard error of ~0.05; ``arith-healthy-long-s1``'s +0.039); ``bench/RESULTS.md`` §12 reports both rules,
    and the runs added after it (group ``v4``) test it on data it was not written for.
    """
    acc, level, rc = n.get("acc_change_2nd_half"), n.get("acc_level_2nd_half"), n.get("reward_change_2nd_half")
    if acc is None or level is None or level >= 0.95:
        return set(), set()
    acc_se, rc_se = n.get("acc_change_se") or 0.0, n.get("reward_change_se") or 0.0

    def labels(a: float, r: float | None) -> set[str]:
        out = set()
        if a <= 0.03 and n["steps"] >= 60 and r is not None and abs(r) <= 0.05:
            out.add("plateau")
        if a <= 0.03 and n["steps"] >= 100 and (n.get("reward_std_2nd_half") or 0) >= 0.02:
            out.add("learns_nothing")
        return out

    seen = [labels(a, r) for a in (acc - acc_se, acc, acc + acc_se)
            for r in ((rc - rc_se, rc, rc + rc_se) if rc is not None else (None,))]
    sure = labels(acc, rc)
    return sure, {s for s in ("plateau", "learns_nothing") if len({s in x for x in seen}) > 1}


RULES = ("v5", "v4", "v3")  # labelling rules, newest first (see raw_labels)


def raw_labels(design: list[str], n: dict, rule: str = "v5") -> tuple[list[str], bool, list[str]]:
    """Labels the records support (see the module docstring), whether an exploit happened, and the symptoms they
    cannot decide, left ``unknown``. ``rule``: ``v3``, none is left unknown (before 2026-11-28); ``v4``, the trend
    symptoms within a standard error of their line (:func:`_trend_labels`, 2026-11-28); ``v5``, also
    ``reward_hacking`` when the gap's growth lies within its standard error of the 0.05 line (2026-11-28, written
    after archive v4's held-out miss ``trl-lenient-s3``, growth 0.053, and before group ``v5`` existed)."""
    out = []
    if n.get("dead", 0) >= 0.6:
        out.append("dead_groups")
    if n.get("all_wrong", 0) >= 0.7:
        out.append("too_hard")
    if n.get("all_right", 0) >= 0.6:
        out.append("too_easy")
    if n.get("clipped", [0, 0])[1] >= 0.2:
        out.append("truncation")
    ent = n.get("entropy")
    if ent and ent[1] < 0.25 * ent[0] and ent[1] < 0.15:
        out.append("entropy_collapse")
    if ent and ent[1] > 2 * ent[0] and ent[1] > 1.5:
        out.append("entropy_blowup")
    if "answer_spraying" in design and n.get("spraying", 0) >= 0.3:
        out.append("answer_spraying")
    acc, rew = n.get("acc_first_last"), n.get("reward_first_last")
    trend, unsure = _trend_labels(n)
    if "reward_hacking" in design and acc and rew and rew[1] > rew[0]:
        growth, se = (rew[1] - acc[1]) - (rew[0] - acc[0]), n.get("gap_growth_se") or 0.0
        if growth >= 0.05:
            out.append("reward_hacking")
        if rule == "v5" and abs(growth - 0.05) <= se:  # noise alone could put the growth on either side of its line
            unsure.add("reward_hacking")
    unsure = unsure if rule != "v3" else set()
    out = [s for s in out if s not in unsure] + sorted(trend - unsure)
    for s in ("answer_leak",):  # confirmed from the turns by --check's reader (leak use), kept by design
        if s in design:
            out.append(s)
    exploit = bool({"answer_spraying", "reward_hacking", "answer_leak"} & set(out))
    return sorted(out), exploit, sorted(unsure)


def check(export: Path) -> None:
    for name in [*RUNS, *FIXTURES]:
        path = export / name if name in RUNS else ROOT / "tests" / "fixtures" / "runs" / name
        if not path.is_dir():
            continue
        n = raw_numbers(path)
        design = (RUNS.get(name) or {}).get("labels", FIXTURES.get(name))
        labels, exploit, unsure = raw_labels(design, n)
        print(json.dumps({**n, "design": design, "labels": labels, "invalid": exploit, "ambiguous": unsure,
                          **{f"labels_{r}": raw_labels(design, n, r)[0] for r in RULES[1:]}}), flush=True)


def main() -> None:
    p = parser(__doc__, "bench-issue17")
    p.add_argument("--export", default=str(ROOT / "runs" / "archive-v2"))
    p.add_argument("--only", nargs="*", default=None, help=f"groups: {' '.join(GROUPS)}")
    p.add_argument("--check", action="store_true", help="print the raw numbers behind each run's labels")
    a = p.parse_args()
    from evotrainer.core.home import resolve_home

    home, export = resolve_home(a.home), Path(a.export)
    export.mkdir(parents=True, exist_ok=True)
    if a.check:
        check(export)
        write_archives(export)
        return
    for group in a.only or GROUPS:
        for name, r in RUNS.items():
            if r["group"] != group or (export / name / ("meta.json" if r["kind"] == "job" else "trainer_state.json")).is_file():
                continue
            t = time.time()
            (_job if r["kind"] == "job" else _trl)(name, r["spec"], home, export / name)
            print(json.dumps({"run": name, "minutes": round((time.time() - t) / 60, 1)}), flush=True)
            write_archives(export)
    write_archives(export)


if __name__ == "__main__":
    main()
