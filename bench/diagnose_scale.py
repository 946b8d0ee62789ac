"""Benchmark (issue 3): diagnosing 1,000,000 rollout records and 10,000 metric steps, target <= 10 s.

Builds synthetic evidence of that size with the real rollout schema (`ROLLOUT_SCHEMA` dtypes, 64 prompts
x 8 completions = 512 rollouts per step over the last 1,953 steps, metrics for all 10,000 steps), writes
it as a job directory of Parquet files, then times (a) reading it back and (b) running every built-in
diagnostic, separately.

    .venv/bin/python bench/diagnose_scale.py
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from _common import parser, peak_rss_mib, save


def build(root: Path, n_rollouts: int, n_steps: int, seed: int = 0) -> None:
    from evotrainer.evidence.model import ROLLOUT_SCHEMA

    rng = np.random.default_rng(seed)
    steps = np.arange(1, n_steps + 1)
    metrics = pd.DataFrame({
        "step": steps, "reward": 0.4 + 0.3 * steps / n_steps + rng.normal(0, 0.03, n_steps),
        "reward_std": 0.4 + rng.normal(0, 0.02, n_steps), "frac_reward_zero_std": 0.3 + rng.normal(0, 0.03, n_steps),
        "entropy": 0.5 - 0.15 * steps / n_steps + rng.normal(0, 0.01, n_steps),
        "grad_norm": 1.5 + rng.gamma(2.0, 0.2, n_steps), "loss": rng.normal(0, 0.01, n_steps),
        "completions/mean_length": 4.4 + rng.normal(0, 0.1, n_steps), "completions/clipped_ratio": np.full(n_steps, 0.01),
        "accuracy": 0.3 + 0.3 * steps / n_steps + rng.normal(0, 0.03, n_steps),
        "rewards/correctness/mean": 0.3 + 0.3 * steps / n_steps + rng.normal(0, 0.03, n_steps),
    })
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "metrics.jsonl", "w") as fh:
        for row in metrics.to_dict("records"):
            fh.write(json.dumps({k: (int(v) if k == "step" else float(v)) for k, v in row.items()}) + "\n")
    (root / "meta.json").write_text(json.dumps({"name": "scale", "run_id": "scale"}))
    per_step = 512
    n_roll_steps = n_rollouts // per_step
    (root / "rollouts").mkdir(exist_ok=True)
    answers = rng.integers(100, 2000, size=per_step // 8)
    for s in range(n_steps - n_roll_steps + 1, n_steps + 1):
        correct = rng.random(per_step) < 0.55
        ans = np.repeat(answers, 8)
        comp = np.where(correct, ans, ans + 1).astype(str)
        df = pd.DataFrame({
            "run_id": "scale", "step": s, "prompt_id": np.repeat([f"arith:{a}" for a in answers], 8),
            "group_id": np.repeat([f"{s}:{i}" for i in range(per_step // 8)], 8),
            "prompt": np.repeat([f"{a - 37}+37=" for a in answers], 8), "completion": comp,
            "reward_correctness": correct.astype(float), "reward_format": 1.0, "reward_overlong": np.nan,
            "reward_repetition": np.nan, "reward": correct + 0.1, "correct": correct, "well_formed": True,
            "n_candidates": 1, "length": 4, "truncated": False, "advantage": rng.normal(0, 1, per_step), "difficulty": 3,
        })
        pq.write_table(pa.Table.from_pandas(df, schema=ROLLOUT_SCHEMA, preserve_index=False),
                       root / "rollouts" / f"step_{s:06d}.parquet")


def main() -> None:
    p = parser(__doc__, "bench-scale")
    p.add_argument("--rollouts", type=int, default=1_000_000)
    p.add_argument("--steps", type=int, default=10_000)
    a = p.parse_args()

    from evotrainer.diagnostics.registry import Registry
    from evotrainer.evidence.readers import load_evidence

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "scale"
        build(root, a.rollouts, a.steps)
        t = time.perf_counter()
        ev = load_evidence(root)
        t_read = time.perf_counter() - t
        t = time.perf_counter()
        findings = Registry().run(ev)
        t_diag = time.perf_counter() - t
    save("diagnose_scale", {
        "rollouts": len(ev.rollouts), "metric_steps": len(ev.metrics), "read_s": round(t_read, 2),
        "diagnose_s": round(t_diag, 2), "total_s": round(t_read + t_diag, 2), "target_s": 10,
        "findings": sorted({f"{f.severity}:{f.symptom}" for f in findings}), "peak_rss_mib": round(peak_rss_mib(), 1),
    })


if __name__ == "__main__":
    main()
