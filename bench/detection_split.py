"""Benchmark (issue 17): detection measured out of sample — precision and recall per symptom on the held-out half.

Reads the two halves of the labelled archive written by ``bench/archive_runs.py`` (split once, before any
revision: ``archive-tuning.yaml`` and ``archive-heldout.yaml``), runs every built-in diagnostic on each run and
reports, per symptom and per half: labelled runs, TP / FP / FN, precision, recall, the runs flagged without the
label, and the mean steps from onset (step 1, when the recipe takes effect) to the first finding, over evidence cut
at growing prefixes (every ``--stride`` steps). A run counts as flagged when the symptom is reported at warning or
above; symptoms a run marks ``unknown`` are not scored on it. Thresholds may be tuned on the tuning half only;
``--params '{"diagnostic": {...}}'`` scores a candidate revision on both halves (``--label`` names it in the
results), so every revision's effect is recorded on both.

    .venv/bin/python bench/detection_split.py [--export runs/archive-v2] [--params JSON --label NAME]
                                              [--archive archive|archive-v3labels]

Halves: ``tuning``, ``heldout`` and, when the archive has them, ``heldout-v4``, ``heldout-v5`` and ``heldout-v6`` (the
held-out runs of the groups added after the v4 and v5 labelling rules and after ``plateau`` v2, which no rule or
threshold was written after).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from _common import ROOT, parser, save


def score(archive_path: Path, reg, stride: int) -> dict:
    from evotrainer.core.domain import SEVERITY_RANK
    from evotrainer.diagnostics.revision import Archive
    from evotrainer.evidence.model import evidence_upto
    from evotrainer.evidence.readers import load_evidence

    archive = Archive.load(archive_path)
    per_run, flagged = [], {}
    for run in archive.runs:
        ev = load_evidence(run.path)
        found = {f.symptom for f in reg.run(ev) if SEVERITY_RANK[f.severity] >= 1 and f.symptom != "diagnostic_error"}
        flagged[run.path] = found
        steps = sorted(set(ev.metrics["step"].dropna().astype(int)) | set(ev.rollouts["step"].dropna().astype(int)))
        latency = {}
        for s in run.labels:
            diag = next((n for n, c in reg.classes.items() if c.symptom == s), None)
            latency[s] = None
            if diag is None or s not in found:
                continue
            for k in [*steps[stride - 1::stride], steps[-1]]:
                if any(f.symptom == s and SEVERITY_RANK[f.severity] >= 1 for f in reg.get(diag).run(evidence_upto(ev, k))):
                    latency[s] = int(k)
                    break
        per_run.append({"run": Path(run.path).name, "labels": run.labels, "unknown": run.unknown,
                        "flagged": sorted(found), "steps": steps[-1] if steps else 0,
                        "steps_to_first_finding": latency})
        print(json.dumps(per_run[-1]), flush=True)
    symptoms = sorted({s for r in archive.runs for s in r.labels} | {s for f in flagged.values() for s in f})
    table = {}
    for s in symptoms:
        scored = [r for r in archive.runs if s not in r.unknown]
        tp = sum(s in flagged[r.path] and s in r.labels for r in scored)
        fp = [Path(r.path).name for r in scored if s in flagged[r.path] and s not in r.labels]
        fn = [Path(r.path).name for r in scored if s not in flagged[r.path] and s in r.labels]
        lat = [pr["steps_to_first_finding"][s] for pr in per_run if pr["steps_to_first_finding"].get(s) is not None]
        table[s] = {"labelled_runs": tp + len(fn), "tp": tp, "fp": len(fp), "fn": len(fn),
                    "precision": round(tp / (tp + len(fp)), 3) if tp + len(fp) else None,
                    "recall": round(tp / (tp + len(fn)), 3) if tp + len(fn) else None,
                    "false_positives": fp, "misses": fn,
                    "mean_steps_to_first_finding": round(sum(lat) / len(lat), 1) if lat else None}
    # a healthy run has no label; a warning on a symptom its records cannot decide (``unknown``) is not held against it
    healthy = {pr["run"]: sorted(set(pr["flagged"]) - set(pr["unknown"])) for pr in per_run if not pr["labels"]}
    return {"archive": str(archive_path), "runs": len(archive.runs), "per_symptom": table, "per_run": per_run,
            "healthy_runs": len(healthy), "healthy_runs_with_warnings": {k: v for k, v in healthy.items() if v},
            "healthy_runs_warned_on_unknown": {pr["run"]: sorted(set(pr["flagged"]) & set(pr["unknown"]))
                                               for pr in per_run if not pr["labels"]
                                               and set(pr["flagged"]) & set(pr["unknown"])}}


def main() -> None:
    p = parser(__doc__, "bench-issue17")
    p.add_argument("--export", default=str(ROOT / "runs" / "archive-v2"))
    p.add_argument("--params", default=None, help="candidate parameters: JSON {diagnostic: {param: value}}")
    p.add_argument("--label", default="current", help="name of this scoring in the results (e.g. a revision)")
    p.add_argument("--stride", type=int, default=5, help="prefix stride (steps) for steps-to-first-finding")
    p.add_argument("--tuning-only", action="store_true", help="score the tuning half alone (a candidate revision is "
                   "judged there before anyone reads its held-out numbers)")
    p.add_argument("--archive", default="archive", help="archive file prefix: 'archive' (the v5 labelling rule: "
                   "symptoms noise cannot decide left unknown), 'archive-v4labels' or 'archive-v3labels' (earlier "
                   "rules; bench/archive_runs.py raw_labels)")
    a = p.parse_args()
    from evotrainer.config.harness import HarnessSpec
    from evotrainer.diagnostics.registry import Registry

    harness = HarnessSpec()
    if a.params:
        harness = harness.model_copy(update={"diagnostics": harness.diagnostics.model_copy(
            update={"params": json.loads(a.params)})})
    reg = Registry(harness)
    export = Path(a.export)
    halves = {half: score(export / f"{a.archive}-{half}.yaml", reg, a.stride)
              for half in (("tuning",) if a.tuning_only else ("tuning", "heldout"))}
    for group in () if a.tuning_only else ("v4", "v5", "v6"):  # the held-out runs of each group added after a rule
        later = export / f"{a.archive}-heldout-{group}.yaml"
        if later.is_file() and yaml.safe_load(later.read_text())["runs"]:
            halves[f"heldout-{group}"] = score(later, reg, a.stride)
    summary = {}
    for s in sorted(set().union(*(h["per_symptom"] for h in halves.values()))):
        summary[s] = {half: {k: halves[half]["per_symptom"].get(s, {}).get(k)
                             for k in ("labelled_runs", "tp", "fp", "fn", "precision", "recall",
                                       "mean_steps_to_first_finding")} for half in halves}
    held = halves.get("heldout")
    ok = None if held is None else all((v["recall"] or 0) >= 0.9 for v in held["per_symptom"].values()
                                       if v["labelled_runs"]) and not held["healthy_runs_with_warnings"]
    out_name = ("detection_split" if a.label == "current" else f"detection_split_{a.label}") + (
        "_tuning" if a.tuning_only else "")
    save(out_name, {"label": a.label, "archive": a.archive, "params": json.loads(a.params) if a.params else {},
                    "summary": summary, "halves": halves, "pass_heldout": ok})


if __name__ == "__main__":
    main()
