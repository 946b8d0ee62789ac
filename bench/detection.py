"""Benchmark (issue 3): do the diagnostics find the pathologies in real runs, and how fast?

Reads the labelled archive written by `bench/pathological_runs.py` (healthy + one run per deliberately
bad harness, 3 seeds each), runs every built-in diagnostic on each run, and reports per symptom the
precision and recall (a run is flagged when the symptom is reported at warning or above), whether any
healthy run got a warning, and the steps from onset to first finding: the evidence is cut at growing
step prefixes and the first prefix at which the labelled symptom is reported is taken. Onset is step 1,
when the bad harness takes effect, so the latency includes the time the pathology needs to develop.

    .venv/bin/python bench/detection.py [--archive runs/pathological-export/archive.yaml]
"""

from __future__ import annotations

from pathlib import Path

from _common import ROOT, parser, save


def main() -> None:
    p = parser(__doc__, "bench-pathological")
    p.add_argument("--archive", default=str(ROOT / "runs" / "pathological-export" / "archive.yaml"))
    a = p.parse_args()

    from evotrainer.core.domain import SEVERITY_RANK
    from evotrainer.diagnostics.registry import Registry
    from evotrainer.diagnostics.revision import Archive
    from evotrainer.evidence.model import Evidence
    from evotrainer.evidence.readers import load_evidence

    archive = Archive.load(Path(a.archive))
    reg = Registry()
    labelled = {s for r in archive.runs for s in r.labels}
    per_run, flagged = [], {}
    for run in archive.runs:
        ev = load_evidence(run.path)
        found = {f.symptom for f in reg.run(ev) if SEVERITY_RANK[f.severity] >= 1 and f.symptom != "diagnostic_error"}
        flagged[run.path] = found
        latency = {}
        steps = sorted(ev.metrics["step"].unique())
        for s in run.labels:
            diag = next(n for n, c in reg.classes.items() if c.symptom == s)
            latency[s] = None
            for k in steps[4:]:
                cut = Evidence(metrics=ev.metrics[ev.metrics["step"] <= k], rollouts=ev.rollouts[ev.rollouts["step"] <= k])
                if any(f.symptom == s and SEVERITY_RANK[f.severity] >= 1 for f in reg.get(diag).run(cut)):
                    latency[s] = int(k)
                    break
        per_run.append({"run": Path(run.path).name, "labels": run.labels, "flagged": sorted(found),
                        "steps_to_first_finding": latency})
        print(per_run[-1], flush=True)
    table = {}
    for s in sorted(labelled | {x for f in flagged.values() for x in f}):
        tp = sum(s in flagged[r.path] and s in r.labels for r in archive.runs)
        fp = sum(s in flagged[r.path] and s not in r.labels for r in archive.runs)
        fn = sum(s not in flagged[r.path] and s in r.labels for r in archive.runs)
        lat = [pr["steps_to_first_finding"][s] for pr in per_run if s in pr["steps_to_first_finding"]]
        lat = [x for x in lat if x is not None]
        table[s] = {"tp": tp, "fp": fp, "fn": fn, "precision": round(tp / (tp + fp), 3) if tp + fp else None,
                    "recall": round(tp / (tp + fn), 3) if tp + fn else None,
                    "mean_steps_to_first_finding": round(sum(lat) / len(lat), 1) if lat else None,
                    "labelled_runs": tp + fn}
    healthy_warnings = {pr["run"]: pr["flagged"] for pr in per_run if not pr["labels"] and pr["flagged"]}
    save("detection", {"archive": a.archive, "per_symptom": table, "runs": per_run,
                       "healthy_runs_with_warnings": healthy_warnings,
                       "pass": all((v["recall"] or 0) >= 0.9 for v in table.values() if v["labelled_runs"])
                       and not healthy_warnings})


if __name__ == "__main__":
    main()
