"""Issue 59's targets (§2), judged from ``bench/results/flaws.json``'s rows by the bench itself.

Why a module of its own: a target is met or missed by a rule written down before the evaluation seeds ran, so the
verdicts must come from code that reads the rows, not from a scratch script or a hand-made table. Each target is
computed over one seed set (each evaluation round's seeds count, round by round; the development seeds are printed
beside them as in-sample), on the live cells (:func:`flaws.live_cells`: those ``flaws.yaml`` records, decided on the
development seeds), and says what it measured, the numbers, and ``met`` (None where the rows it needs have not run).

- **recovery**: the campaign's median recovered share over the live cells, (campaign − flawed) / (tuned − flawed)
  of the means over the seeds, ≥ 0.8; and on every live cell the campaign − flawed 90 % t interval over the seeds
  above 0.
- **competition**: campaign − PBT and campaign − Optuna paired by (cell, seed), mean above 0 with its 90 % t interval
  above 0, and the campaign's mean over the seeds ahead on at least two thirds of the cells, one by one.
- **diagnosis**: on at least 80 % of the (cell, seed) runs, round 0 names an expected symptom (a finding above
  ``info``, or the plateau finding, whose symptom is in the flaw's ``symptoms``); beside it, the share whose adopted
  change is the flawed knob or a documented remedy and cites a round-0 finding.
- **from the tuned recipe**: campaign − static tuned per task, mean over the seeds: never below −1 point, and at
  least +2 points on one task.
- **demo**: TRL's 1e-6 on arith, the campaign against the static run, PBT and Optuna.

Beside them the compute each arm spent on the live cells (trainer steps, completions generated, evaluation problems
scored) and where the campaign's steps went, so that a step-equal win is not a compute-unequal one unseen.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from typing import Any

from flaw_suite import Suite

SHARE_TARGET = 0.8
DIAGNOSIS_TARGET = 0.8
TUNED_FLOOR = -0.01
TUNED_GAIN = 0.02


def _t90(xs: list[float]) -> list[float] | None:
    from scipy import stats

    if len(xs) < 2:
        return None
    half = stats.t.ppf(0.95, len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5
    m = statistics.fmean(xs)
    return [round(float(m - half), 4), round(float(m + half), 4)]


def _acc(rows: list[dict[str, Any]], seeds: list[int], budget: int) -> dict[tuple[str, str, int, str], dict]:
    """(flaw, task, seed, arm) -> row, default rules only (ablation rows are not an arm here)."""
    return {(r["flaw"], r["task"], r["seed"], r["arm"]): r for r in rows
            if r["seed"] in seeds and r["budget"] == budget and not r.get("off") and r.get("accuracy_wide") is not None}


def remedies(f: Any) -> set[str]:
    """The skills a flaw's documented remedy names (``remedy: ... (skill-slug)``)."""
    return set(re.findall(r"\(([a-z0-9-]+)\)", getattr(f, "remedy", "")))


def named_symptoms(findings: Iterable[tuple[str, str]]) -> set[str]:
    """The symptoms a diagnosis names, from (symptom, severity) pairs: a finding above ``info``, or the plateau
    finding, which reports a stall at ``info`` while its evidence is still short."""
    return {s for s, sev in findings if sev != "info" or s == "plateau"}


def _moves_toward(old: Any, new: Any, tuned: Any) -> bool:
    """Whether a change from ``old`` to ``new`` goes the way of the tuned value (overshooting it still does); a
    range (training levels) by its mean, a flag by equality. Unknown tuned values count as the right way."""
    mean = lambda v: statistics.fmean(v) if isinstance(v, (list, tuple)) and v else v  # noqa: E731
    old, new, tuned = mean(old), mean(new), mean(tuned)
    if tuned is None or isinstance(tuned, bool) or not all(isinstance(v, (int, float)) for v in (old, new, tuned)):
        return tuned is None or new == tuned
    return (new - old) * (tuned - old) > 0


def diagnosis_of(f: Any, row: dict[str, Any], tuned: dict[str, Any] | None = None) -> dict[str, Any]:
    """Did the campaign row's round 0 name an expected symptom, and is its adopted change (the first promotion) the
    flawed knob moved the tuned recipe's way (``tuned``: knob -> the tuned value) or a documented remedy, proposed
    for an expected symptom round 0 found?"""
    named = named_symptoms((x["symptom"], x["severity"]) for x in row.get("round0_findings", []))
    expected = named & set(getattr(f, "symptoms", []))
    adopted = [d for d in row.get("decisions", []) if d["outcome"] == "promote"]
    first = adopted[:1]
    remedy = [d for d in first if (d["knob"] in f.knobs and _moves_toward(d["old"], d["new"], (tuned or {}).get(d["knob"])))
              or set(d.get("skills") or []) & remedies(f)]
    return {"named_expected": bool(expected),
            "adopted": [f"{d['knob']}={d['new']}" for d in adopted],
            "adopted_remedy": bool(remedy),
            "remedy_cites_finding": any(d.get("symptom") in expected for d in remedy)}


def _tuned_values(suite: Suite, task: str) -> dict[str, Any]:
    """The tuned recipe's knobs on ``task``, the training levels as the task resolves them (None: its default)."""
    from evotrainer.config.harness import HarnessSpec
    from evotrainer.tasks import get_task
    from evotrainer.training.data import difficulty_range

    h = HarnessSpec.model_validate(suite.tuned_doc(task))
    knobs = dict(h.knobs())
    knobs["data.difficulty"] = list(difficulty_range(get_task(*suite.tasks[task].ref()), h))
    return knobs


def targets(suite: Suite, rows: list[dict[str, Any]], live: set[tuple[str, str]], seeds: list[int],
            required: list[int] | None = None) -> dict[str, Any]:
    """The targets over ``seeds``. A verdict (``met``) is given only once every live cell has every arm's row on
    each of the ``required`` seeds (default: all of ``seeds``), a warm start refused for a (task, seed) excepted."""
    required = list(seeds) if required is None else required
    acc = _acc(rows, seeds, suite.budget)
    w = {k: r["accuracy_wide"] for k, r in acc.items()}
    refused = {(r["task"], r["seed"]) for r in rows if r.get("refused")}

    def complete(flaw: str, task: str, arms: tuple[str, ...]) -> bool:
        need = [s for s in required if (task, s) not in refused]
        return bool(need) and all((flaw, task, s, a) in w for s in need for a in arms) \
            and all(("tuned", task, s, "tuned") in w for s in need)

    cells: dict[str, Any] = {}
    for flaw, task in sorted(live):
        c: dict[str, Any] = {"complete": complete(flaw, task, ("static", "campaign", "pbt", "optuna"))}
        for arm in ("static", "campaign", "pbt", "optuna"):
            run = [s for s in seeds if (flaw, task, s, arm) in w]
            if run:
                c[arm] = round(statistics.fmean(w[(flaw, task, s, arm)] for s in run), 4)
        tuned = [w[("tuned", task, s, "tuned")] for s in seeds if ("tuned", task, s, "tuned") in w]
        if tuned:
            c["tuned"] = round(statistics.fmean(tuned), 4)
        both = [s for s in seeds if (flaw, task, s, "campaign") in w and (flaw, task, s, "static") in w
                and ("tuned", task, s, "tuned") in w]
        if both:
            gap = statistics.fmean(w[("tuned", task, s, "tuned")] - w[(flaw, task, s, "static")] for s in both)
            rec = statistics.fmean(w[(flaw, task, s, "campaign")] - w[(flaw, task, s, "static")] for s in both)
            c["recovered_share"] = rec / gap if abs(gap) > 1e-9 else None
            c["seeds"] = both
        for other in ("static", "pbt", "optuna"):
            d = [w[(flaw, task, s, "campaign")] - w[(flaw, task, s, other)] for s in seeds
                 if (flaw, task, s, "campaign") in w and (flaw, task, s, other) in w]
            if d:
                c[f"campaign_minus_{other}"] = {"mean": statistics.fmean(d), "ci90": _t90(d), "pairs": len(d)}
        f = suite.flaw(flaw)
        tv = _tuned_values(suite, task)
        diag = [diagnosis_of(f, acc[(flaw, task, s, "campaign")], tv) for s in seeds if (flaw, task, s, "campaign") in acc]
        if diag:
            c["diagnosis"] = diag
        # the same symptoms named from the tuned recipe (its campaign's round 0): how specific the naming is
        base = [diagnosis_of(f, acc[("tuned", task, s, "campaign")])["named_expected"] for s in seeds
                if ("tuned", task, s, "campaign") in acc]
        if base:
            c["named_on_tuned"] = f"{sum(base)}/{len(base)}"
        cells[f"{flaw}/{task}"] = c
    done = bool(live) and all(c["complete"] for c in cells.values())
    return {"seeds": seeds, "required": required, "complete": done, "cells": cells, "recovery": _recovery(cells, done),
            "competition": {o: _against(cells, w, live, seeds, o, done) for o in ("pbt", "optuna")},
            "diagnosis": _diagnosis(cells, done),
            "from_tuned": _from_tuned(suite, w, seeds, required, refused),
            "demo": _demo(suite, w, seeds), "compute": _compute(acc, live)}


def _r(x: float | None, n: int = 4) -> float | None:
    return None if x is None else round(x, n)


def _recovery(cells: dict[str, Any], done: bool) -> dict[str, Any]:
    """The median share counts a cell with no share (tuned level with flawed on these seeds) as not recovered."""
    shares = [-math.inf if c.get("recovered_share") is None else c["recovered_share"] for c in cells.values()
              if "seeds" in c]
    excl = {k: c.get("campaign_minus_static", {}).get("ci90") is not None and c["campaign_minus_static"]["ci90"][0] > 0
            for k, c in cells.items()}
    median = statistics.median(shares) if shares else None
    return {"median_share": _r(median, 3), "cells": len(shares), "interval_above_0": excl,
            "met": (median >= SHARE_TARGET and all(excl.values())) if done else None}


def _against(cells: dict[str, Any], w: dict, live: set, seeds: list[int], other: str, done: bool) -> dict[str, Any]:
    """Paired by (cell, seed) over the live cells; one by one, a cell's campaign − other over the seeds both ran."""
    d = [w[(f, t, s, "campaign")] - w[(f, t, s, other)] for f, t in sorted(live) for s in seeds
         if (f, t, s, "campaign") in w and (f, t, s, other) in w]
    compared = [k for k, c in cells.items() if f"campaign_minus_{other}" in c]
    ahead = [k for k in compared if cells[k][f"campaign_minus_{other}"]["mean"] > 0.0005]
    ci = _t90(d)
    mean = statistics.fmean(d) if d else None
    return {"mean": _r(mean), "ci90": ci, "pairs": len(d),
            "cells_ahead": f"{len(ahead)}/{len(compared)}", "behind_or_level": sorted(set(compared) - set(ahead)),
            "met": (ci is not None and ci[0] > 0 and 3 * len(ahead) >= 2 * len(cells)) if done else None}


def _diagnosis(cells: dict[str, Any], done: bool) -> dict[str, Any]:
    """Per live cell (the issue's unit): named when round 0 names an expected symptom on every seed; remedied when,
    on every seed too, the adopted change is the flawed knob moved the tuned way or a documented remedy, proposed
    for the expected symptom round 0 found. The target asks both of 80 % of the cells."""
    per = [c["diagnosis"] for c in cells.values() if c.get("diagnosis")]
    if not per:
        return {"met": None}
    named = sum(all(d["named_expected"] for d in ds) for ds in per) / len(per)
    remedy = sum(all(d["named_expected"] and d["adopted_remedy"] and d["remedy_cites_finding"] for d in ds)
                 for ds in per) / len(per)
    return {"cells": len(per), "runs": sum(map(len, per)), "named_expected": round(named, 3),
            "adopted_remedy_citing_finding": round(remedy, 3),
            "met": (named >= DIAGNOSIS_TARGET and remedy >= DIAGNOSIS_TARGET) if done else None}


def _from_tuned(suite: Suite, w: dict, seeds: list[int], required: list[int], refused: set) -> dict[str, Any]:
    tasks: dict[str, Any] = {}
    done = True
    for task in suite.tasks:
        need = [s for s in required if (task, s) not in refused]
        done &= bool(need) and all(("tuned", task, s, a) in w for s in need for a in ("tuned", "campaign"))
        d = [w[("tuned", task, s, "campaign")] - w[("tuned", task, s, "tuned")] for s in seeds
             if ("tuned", task, s, "campaign") in w and ("tuned", task, s, "tuned") in w]
        if d:
            tasks[task] = {"campaign_minus_static": statistics.fmean(d), "ci90": _t90(d), "seeds": len(d)}
            for other in ("pbt", "optuna"):
                o = [w[("tuned", task, s, other)] - w[("tuned", task, s, "tuned")] for s in seeds
                     if ("tuned", task, s, other) in w and ("tuned", task, s, "tuned") in w]
                if o:
                    tasks[task][f"{other}_minus_static"] = _r(statistics.fmean(o))
    means = [t["campaign_minus_static"] for t in tasks.values()]
    met = (min(means) >= TUNED_FLOOR and max(means) >= TUNED_GAIN) if done and means else None
    for t in tasks.values():
        t["campaign_minus_static"] = _r(t["campaign_minus_static"])
    return {"tasks": tasks, "met": met}


def _demo(suite: Suite, w: dict, seeds: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for task in suite.demo.tasks:
        for arm in ("static", "campaign", "pbt", "optuna"):
            xs = [w[(suite.demo.id, task, s, arm)] for s in seeds if (suite.demo.id, task, s, arm) in w]
            if xs:
                out[f"{task}/{arm}"] = {"mean": round(statistics.fmean(xs), 4), "seeds": len(xs)}
        for other in ("static", "pbt", "optuna"):
            d = [w[(suite.demo.id, task, s, "campaign")] - w[(suite.demo.id, task, s, other)] for s in seeds
                 if (suite.demo.id, task, s, "campaign") in w and (suite.demo.id, task, s, other) in w]
            if d:
                out[f"{task}/campaign_minus_{other}"] = {"mean": round(statistics.fmean(d), 4), "ci90": _t90(d)}
    return out


def _compute(acc: dict, live: set) -> dict[str, Any]:
    """Per arm over the live cells: mean trainer steps, completions generated, evaluation problems scored and wall;
    for the campaign also where its steps went (mainline, kept and discarded branches, screening)."""
    out: dict[str, Any] = {}
    for arm in ("static", "campaign", "pbt", "optuna"):
        rs = [r for (f, t, _, a), r in acc.items() if a == arm and (f, t) in live]
        if not rs:
            continue
        mean = lambda xs: round(statistics.fmean(xs), 1) if xs else None  # noqa: E731
        out[arm] = {"runs": len(rs), "steps": mean([r.get("steps") or 0 for r in rs]),
                    "completions": mean([r.get("compute", {}).get("completions") or 0 for r in rs]),
                    "eval_problems": mean([r.get("compute", {}).get("eval_problems") or 0 for r in rs]),
                    "wall_s": mean([r.get("wall_s") or 0 for r in rs])}
        if arm == "campaign":
            spend = [r["spend"] for r in rs if r.get("spend")]
            out[arm]["spend"] = {k: mean([s.get(k) or 0 for s in spend])
                                 for k in ("mainline_segments", "kept_branches", "discarded", "screened", "useful_share")}
    return out


def markdown(t: dict[str, Any], label: str) -> str:
    """The targets as the log records them: a line per target, then the cells."""
    r, c, dg, ft = t["recovery"], t["competition"], t["diagnosis"], t["from_tuned"]
    verdict = {True: "**met**", False: "**missed**", None: "not all run"}
    out = [f"**Targets on the {label} seeds {t['seeds']}**", "",
           f"- recovery: median recovered share {r['median_share']} over {r['cells']} cells (target ≥ {SHARE_TARGET}); "
           f"campaign − flawed interval above 0 on {sum(r['interval_above_0'].values())}/{len(r['interval_above_0'])}: "
           f"{verdict[r['met']]}"]
    for o, v in c.items():
        out.append(f"- campaign − {o}: {v['mean']} (90 % t {v['ci90']}, {v['pairs']} pairs), ahead on "
                   f"{v['cells_ahead']} cells: {verdict[v['met']]}")
    if dg.get("cells"):
        out.append(f"- diagnosis, per live cell over its {dg['runs']} runs: the expected symptom named on every seed in "
                   f"{dg['named_expected']:.0%} of {dg['cells']} cells, and the adopted change a remedy for it citing the "
                   f"finding in {dg['adopted_remedy_citing_finding']:.0%} (target ≥ {DIAGNOSIS_TARGET:.0%} each): "
                   f"{verdict[dg['met']]}")
    tt = ", ".join(f"{k} {v['campaign_minus_static']:+.4f}" for k, v in ft["tasks"].items()) or "—"
    out.append(f"- from the tuned recipe, campaign − static per task: {tt}: {verdict[ft['met']]}")
    if t["demo"]:
        out.append("- demo flaw: " + ", ".join(f"{k} {v['mean']:+.4f}" if "minus" in k else f"{k} {v['mean']:.4f}"
                                                for k, v in t["demo"].items()))
    out += ["", "| cell | flawed | tuned | campaign | PBT | Optuna | share | campaign − flawed (90 % t) | named (on tuned) "
            "| adopted |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, cell in t["cells"].items():
        cms = cell.get("campaign_minus_static")
        diag = cell.get("diagnosis", [])
        out.append(" | ".join([
            f"| {name}", *(f"{cell[a]:.3f}" if a in cell else "—" for a in ("static", "tuned", "campaign", "pbt", "optuna")),
            "—" if cell.get("recovered_share") is None else f"{cell['recovered_share']:+.2f}",
            "—" if cms is None else f"{cms['mean']:+.3f} {cms['ci90']}",
            f"{sum(d['named_expected'] for d in diag)}/{len(diag)} ({cell.get('named_on_tuned', '—')})",
            "; ".join(",".join(d["adopted"]) or "nothing" for d in diag) + " |"]))
    out += ["", "| arm | runs | steps | completions | eval problems | wall s |", "|---|---|---|---|---|---|"]
    for arm, v in t["compute"].items():
        out.append(f"| {arm} | {v['runs']} | {v['steps']} | {v['completions']} | {v['eval_problems']} | {v['wall_s']} |")
    if "campaign" in t["compute"] and "spend" in t["compute"]["campaign"]:
        out.append("\ncampaign steps, mean per run: " + ", ".join(
            f"{k} {v}" for k, v in t["compute"]["campaign"]["spend"].items()))
    return "\n".join(out)
