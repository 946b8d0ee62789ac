"""Make real pathological (and healthy) runs with our trainer, and the labelled archive that goes with them.

Each variant trains the tiny policy on `arith` under one deliberately bad harness from
`harnesses/pathological/` (see its README), or under `harnesses/grpo-small.yaml` for the healthy control.
Runs are exported compactly (meta.json, metrics.jsonl, rollouts/ — no checkpoints) to `--export DIR`, with
`archive.yaml` labelling each run by the symptoms it was made to have. The test fixtures in
`tests/fixtures/runs` were made with:

    .venv/bin/python bench/pathological_runs.py --seeds 0 1 2 --steps 40
    cp -r runs/pathological-export/*-s0 tests/fixtures/runs/   # + an archive.yaml for seed 0

and the detection benchmark (`bench/detection.py`) reads all three seeds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from _common import ROOT, parser

# name -> (harness file, policy overrides, labels, invalid). Labels are everything the run really has, read
# from its raw records: a policy broken by a 100x learning rate emits truncated '1111…' strings, so besides
# the collapse it is too hard (no group has a success) and its groups are dead; 2-token completions truncate
# every 3-digit answer, with the same consequences; answer spraying drives strict accuracy to ~1 % and
# completions to the length limit.
VARIANTS: dict[str, tuple[str, dict, list[str], bool]] = {
    "healthy": ("harnesses/grpo-small.yaml", {}, [], False),
    "lr-too-high": ("harnesses/pathological/lr-too-high.yaml", {},
                    ["entropy_collapse", "truncation", "too_hard", "dead_groups"], False),
    "too-short": ("harnesses/pathological/too-short.yaml", {}, ["truncation", "too_hard", "dead_groups"], False),
    "too-easy": ("harnesses/pathological/too-easy.yaml", {"sft_target_accuracy": 0.99}, ["dead_groups", "too_easy"], False),
    # spraying drives strict accuracy to ~1 % (every group strictly wrong) and completions to the length limit
    "lenient-reward": ("harnesses/pathological/lenient-reward.yaml", {},
                       ["answer_spraying", "reward_hacking", "too_hard", "truncation"], True),
}


def make_runs(home: Path, seeds: list[int], steps: int, export: Path, only: list[str] | None = None) -> Path:
    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.job import JobSpec
    from evotrainer.config.policy import PolicySpec
    from evotrainer.jobs.runner import run_job

    export.mkdir(parents=True, exist_ok=True)
    archive_path = export / "archive.yaml"
    entries = []
    import hashlib

    for variant, (harness, pol, labels, invalid) in VARIANTS.items():
        for seed in seeds:
            name = f"{variant}-s{seed}"
            dest = export / name
            # the job name carries the variant's settings, so a changed harness never reuses an old run
            tag = hashlib.sha256(((ROOT / harness).read_text() + repr(sorted(pol.items()))).encode()).hexdigest()[:8]
            if (not only or variant in only) and not (dest / "meta.json").exists():
                spec = JobSpec(task="arith", harness=str(ROOT / harness), steps=steps, seed=seed,
                               policy=PolicySpec(**pol), eval=EvalSpec(every=max(1, steps // 4), n=100, k=4),
                               save_every=steps, name=f"{name}-{steps}-{tag}")
                try:
                    res = run_job(spec, home)
                    src = Path(res.run_dir)
                except Exception as err:  # noqa: BLE001 - a pathological run may crash (NaN); keep its evidence
                    print(f"{name}: {err}")
                    src = home / "jobs" / f"{name}-{steps}-{tag}"
                shutil.rmtree(dest, ignore_errors=True)
                dest.mkdir(parents=True)
                for f in ("meta.json", "metrics.jsonl"):
                    shutil.copy(src / f, dest / f)
                shutil.copytree(src / "rollouts", dest / "rollouts")
            if (dest / "meta.json").exists():
                entries.append({"path": name, "labels": labels, "invalid": invalid, "note": f"harness {harness}"})
                print(name, "done", flush=True)
    import yaml

    archive_path.write_text(yaml.safe_dump({"runs": entries}, sort_keys=False))
    return archive_path


def main() -> None:
    p = parser(__doc__, "bench-pathological")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--export", default=str(ROOT / "runs" / "pathological-export"))
    p.add_argument("--only", nargs="*", default=None)
    a = p.parse_args()
    from evotrainer.core.home import resolve_home

    path = make_runs(resolve_home(a.home), a.seeds, a.steps, Path(a.export), a.only)
    print(json.dumps({"archive": str(path)}))


if __name__ == "__main__":
    main()
