"""Benchmark (issue 17): how long from a step being written to `evotrainer watch` printing its finding.

A run directory in our job format grows the way a training job writes it — per step one Parquet file of 256
rollouts (32 prompts x 8 completions, ROLLOUT_SCHEMA) and then one metrics.jsonl line — with ``--history`` steps
already there when ``watch`` starts (it reads those first). New healthy steps then arrive every ``--step-seconds``;
at step history+``--trigger-after`` the metrics line carries a NaN loss, which the ``nan`` diagnostic reports as
critical. ``watch --fail-on critical --interval I`` runs as a subprocess (the real CLI, all built-in diagnostics);
the latency is the time from that step's metrics line being flushed to the finding's line appearing on watch's
stdout. Repeated ``--repeats`` times per history size. Also timed in-process: one ``Watcher.check()`` after a new
step (incremental read + all diagnostics), the cost that sets the latency besides the polling interval.

    .venv/bin/python bench/watch_latency.py [--history 50 300] [--interval 0.5] [--repeats 5]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _common import ROOT, parser, save

PROMPTS, GENS = 32, 8


def write_step(run: Path, step: int, rng: np.random.Generator, nan: bool = False) -> float:
    """One step's rollouts then its metrics line; the time the metrics line was flushed."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evotrainer.evidence.model import ROLLOUT_SCHEMA, append_metrics

    rows = []
    acc = 0.3 + 0.4 * min(1.0, step / 300)
    for i in range(PROMPTS):
        a, b = int(rng.integers(100, 999)), int(rng.integers(100, 999))
        p = float(np.clip(acc + rng.normal(0, 0.15), 0.02, 0.98))
        for _ in range(GENS):
            ok = bool(rng.random() < p)
            ans = a + b if ok else a + b + int(rng.integers(1, 9))
            rows.append({"run_id": "bench", "step": step, "prompt_id": f"p{a}{b}", "group_id": f"{step}:{i}",
                         "prompt": f"{a}+{b}=", "completion": str(ans), "reward_correctness": float(ok),
                         "reward_format": 1.0, "reward_overlong": None, "reward_repetition": None,
                         "reward": float(ok) + 0.1, "correct": ok, "well_formed": True, "n_candidates": 1,
                         "length": 4, "truncated": False, "advantage": 0.0, "difficulty": 3})
    df = pd.DataFrame(rows)
    tmp = run / "rollouts" / f"step_{step:06d}.parquet.tmp"
    pq.write_table(pa.Table.from_pandas(df[ROLLOUT_SCHEMA.names], schema=ROLLOUT_SCHEMA, preserve_index=False), tmp)
    tmp.replace(run / "rollouts" / f"step_{step:06d}.parquet")
    r = df["reward"]
    spread = df.groupby("group_id")["reward"].agg(lambda v: v.max() - v.min())
    metrics = {"loss": float("nan") if nan else float(rng.normal(0, 0.02)), "grad_norm": float(np.exp(rng.normal(0, 0.3))),
               "reward": float(r.mean()), "reward_std": float(r.std()), "frac_reward_zero_std": float((spread == 0).mean()),
               "entropy": 0.5 - 0.2 * min(1.0, step / 300), "kl": 0.0, "accuracy": float(df["correct"].mean()),
               "completions/mean_length": 4.0, "completions/clipped_ratio": 0.0, "rewards/correctness/mean": float(r.mean() - 0.1)}
    append_metrics(run, step, metrics)
    return time.time()


def make_run(root: Path, history: int, rng) -> Path:
    run = root / "job"
    (run / "rollouts").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"name": "latency-bench", "status": "running"}))
    for s in range(1, history + 1):
        write_step(run, s, rng)
    return run


def one_trial(history: int, interval: float, step_seconds: float, trigger_after: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp), history, rng)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
        proc = subprocess.Popen([sys.executable, "-m", "evotrainer.cli", "watch", str(run), "--fail-on", "critical",
                                 "--interval", str(interval), "--timeout", "600"], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen: dict[str, float] = {}

        def read(stream, tag):
            for line in stream:
                if tag == "out" and "nan" in line and "CRITICAL" in line and "nan" not in seen:
                    seen["nan"] = time.time()
                if tag == "err" and "found" in line and "found" not in seen:
                    seen["found"] = time.time()

        threads = [threading.Thread(target=read, args=(proc.stdout, "out"), daemon=True),
                   threading.Thread(target=read, args=(proc.stderr, "err"), daemon=True)]
        for t in threads:
            t.start()
        t0 = time.time()
        while "found" not in seen and time.time() - t0 < 120:
            time.sleep(0.05)
        time.sleep(2 * interval + 1.0)  # let it diagnose the history once
        written = None
        for k in range(1, trigger_after + 1):
            time.sleep(step_seconds)
            written = write_step(run, history + k, rng, nan=k == trigger_after)
        code = proc.wait(timeout=300)
        for t in threads:
            t.join(timeout=5)
        return {"history": history, "exit_code": code, "startup_s": round(seen.get("found", t0) - t0, 2),
                "latency_s": round(seen["nan"] - written, 3) if "nan" in seen and written else None}


def check_cost(history: int, seed: int) -> dict:
    """In-process: seconds of one Watcher.check() after a new step (incremental read + all diagnostics)."""
    from evotrainer.diagnostics.registry import Registry
    from evotrainer.monitor.watch import Watcher

    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp), history, rng)
        w = Watcher(str(run), None, Registry(), every=1)
        t = time.perf_counter()
        w.check()
        first = time.perf_counter() - t
        times = []
        for k in range(1, 6):
            write_step(run, history + k, rng)
            t = time.perf_counter()
            w.check()
            times.append(time.perf_counter() - t)
        return {"history": history, "first_check_s": round(first, 3), "incremental_check_s": round(statistics.median(times), 3)}


def main() -> None:
    p = parser(__doc__, "bench-issue17")
    p.add_argument("--history", type=int, nargs="+", default=[50, 300])
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--step-seconds", type=float, default=1.0)
    p.add_argument("--trigger-after", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    trials, costs = [], []
    for h in a.history:
        costs.append(check_cost(h, 0))
        print(json.dumps(costs[-1]), flush=True)
        for r in range(a.repeats):
            trials.append(one_trial(h, a.interval, a.step_seconds, a.trigger_after, seed=r))
            print(json.dumps(trials[-1]), flush=True)
    by = {}
    for h in a.history:
        lat = [t["latency_s"] for t in trials if t["history"] == h and t["latency_s"] is not None]
        by[str(h)] = {"rollouts_per_step": PROMPTS * GENS, "rollouts_in_run": (h + a.trigger_after) * PROMPTS * GENS,
                      "trials": len([t for t in trials if t["history"] == h]), "found": len(lat),
                      "median_latency_s": round(statistics.median(lat), 3) if lat else None,
                      "max_latency_s": round(max(lat), 3) if lat else None}
    save("watch_latency", {"interval_s": a.interval, "step_seconds": a.step_seconds, "by_history": by,
                           "check_cost": costs, "trials": trials,
                           "pass": all(v["max_latency_s"] is not None and v["max_latency_s"] <= 2.0 for v in by.values())})


if __name__ == "__main__":
    main()
