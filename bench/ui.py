"""Benchmark (issue 7): how long each review-dashboard page takes with 1,000 proposals and 500 skills.

Fills a temporary home through the Store API, the way campaigns do: 10 campaigns × 50 rounds × 2 proposals
(1,000 proposals; in five campaigns the last 10 rounds wait for review, so the queue holds 100 — far more
than a real campaign leaves, on purpose), each decided round with its findings, backtest, 6 branches,
decision, ledger entries and policy versions, and a job directory with per-step metrics for every segment
and branch (the charts read them) — about 3,400 runs. A library folder gets 500 synthetic SKILL.md files
(20 % mistake notes, cited by the proposals) written with the library's own writer. One run also gets 100
steps × 64 rollouts of Parquet evidence for the Diagnose page.

Then every page is requested with FastAPI's TestClient (in process: routing, queries, templates and SVG
included; no network): the first request of a fresh app (cold caches: library load and index sync, metrics
files, a run's diagnosis), then ``--repeat`` more, reported as median and 95th percentile.

    .venv/bin/python bench/ui.py [--repeat 30] [--home DIR]
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from _common import parser, peak_rss_mib, save

N_CAMPAIGNS, ROUNDS, PER_ROUND, N_SKILLS, PENDING_ROUNDS, WAITING = 10, 50, 2, 500, 10, 5
STEPS = 20  # per segment and per branch
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
CHANGES = [("grpo.temperature", 1.0, 1.2), ("optim.learning_rate", 3e-5, 9e-5), ("data.drop_all_correct", False, True),
           ("grpo.entropy_coef", 0.0, 0.01), ("grpo.scale_rewards", "group", "none"), ("grpo.beta", 0.0, 0.04),
           ("data.drop_all_wrong", False, True), ("grpo.max_completion_length", 16, 32)]
WORDS = ("entropy collapse clip exploration reward variance dead groups curriculum difficulty length truncation "
         "repetition penalty learning rate warmup schedule kl reference drift spraying lenient checker format "
         "overlong buffer temperature sampling plateau forgetting overfitting gradient spike advantage baseline").split()


def _metrics(run_dir: Path, start: int, rng: random.Random, eval_acc: float) -> None:
    run_dir.mkdir(parents=True)
    lines = []
    for s in range(start + 1, start + STEPS + 1):
        lines.append(json.dumps({"step": s, "reward": 0.3 + rng.random() * 0.2, "accuracy": 0.25 + rng.random() * 0.2,
                                 "entropy": 0.5 - s / 4000, "completions/mean_length": 4 + rng.random(),
                                 "frac_reward_zero_std": 0.3 + rng.random() * 0.2, "loss": 0.01}))
    lines.append(json.dumps({"step": start + STEPS, "eval/greedy_accuracy": eval_acc}))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run_dir / "meta.json").write_text(json.dumps({"name": run_dir.name, "run_id": f"mlflow-{rng.getrandbits(64):016x}",
                                                   "status": "finished", "steps_done": start + STEPS,
                                                   "spec": {"task": "arith"}}))


def fill_skills(lib: Path, rng: random.Random) -> list[str]:
    from evotrainer.core.symptoms import SYMPTOMS
    from evotrainer.library.format import SECTIONS, Counters, Intervention, Skill, Source, Trigger
    from evotrainer.library.loader import write_skill

    symptoms = [s for s in SYMPTOMS if s != "diagnostic_error"]
    slugs = []
    for i in range(N_SKILLS):
        kind = "mistake" if i % 5 == 0 else "skill"
        knob, _, new = CHANGES[i % len(CHANGES)]
        words = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
        body = "# Lesson\n\n" + "\n\n".join(f"## {h}\n{words(60)}." for h in SECTIONS[kind])
        slug = f"{'note' if kind == 'mistake' else 'skill'}-{i:03d}-{rng.choice(WORDS)}"
        helpful = rng.randint(0, 3)
        write_skill(lib, Skill(
            name=f"{words(3).capitalize()} ({i})", description=f"When {words(8)}, {words(10)}.", kind=kind, slug=slug,
            triggers=[Trigger(symptom=rng.choice(symptoms), domains=rng.choice([[], ["math"], ["code"]]))],
            intervention=Intervention(knob=knob, op="set", arg=new), body=body,
            counters=Counters(helpful=helpful, harmful=1, uses=helpful + 2),
            sources=[Source(title=f"Paper on {words(4)}", arxiv="2503.14476")],
            status="deprecated" if i % 25 == 0 else "active",
            deprecated_reason="superseded (bench)" if i % 25 == 0 else None))
        slugs.append(slug)
    return slugs


def fill_store(home: Path, slugs: list[str], rng: random.Random) -> dict:
    from evotrainer.config.harness import HarnessSpec
    from evotrainer.core.domain import (
        BacktestStats,
        BranchResult,
        Decision,
        Example,
        Finding,
        Hypothesis,
        LedgerEntry,
        PolicyVersion,
        Proposal,
        Review,
    )
    from evotrainer.store import Store

    store = Store.for_home(home)
    jobs = home / "jobs"
    base = HarnessSpec()
    store.add_harness_version(base.version, None, base.model_dump(mode="json"), [])
    at = T0
    for c in range(N_CAMPAIGNS):
        cid = f"bench-{c:02d}-20261101000000"
        waiting = c < WAITING
        spec = {"task": "arith", "autonomy": "review", "budget": {"total_steps": 20_000}, "brain": {"kind": "heuristic"},
                "backtest": {"branch_steps": STEPS, "seeds": 2, "min_effect": 0.01, "confidence": 0.8}}
        store.create_campaign(cid, f"bench {c}", spec, cid)
        harness, mainline, step = base, None, 0
        for r in range(ROUNDS):
            pending = waiting and r >= ROUNDS - PENDING_ROUNDS
            at += timedelta(minutes=3)
            seg = f"{cid}__r{r:02d}__segment"
            if not pending or r == ROUNDS - PENDING_ROUNDS:
                _metrics(jobs / seg, step, rng, 0.3 + r / 400)
                store.ledger_add(LedgerEntry(campaign_id=cid, key=seg, kind="segment", run_name=seg, steps=STEPS, at=at))
                pv = PolicyVersion(id=f"{cid}:r{r:02d}:segment", campaign_id=cid, parent_id=mainline,
                                   harness_version=harness.version, checkpoint="ck", run_name=seg,
                                   mlflow_run_id=f"m{c}{r}", eval_accuracy=0.3 + r / 400, step=step + STEPS, created=at)
                store.add_policy_version(pv)
                mainline, step = pv.id, step + STEPS
                store.add_findings(cid, r, seg, [Finding(
                    symptom=s, diagnostic=s, version="1", severity=sev, confidence=0.7, metrics={"share": 0.4},
                    examples=[Example(rollout_id=f"{r}:{k}", step=step, prompt="12+30=", completion="42 <b>42</b>")],
                    explanation=f"{s} in the recent window") for k, (s, sev) in enumerate(
                        [("dead_groups", "warning"), ("plateau", "warning"), ("entropy_collapse", "info")])])
            pids = []
            for k in range(PER_ROUND):
                knob, old, new = CHANGES[(r * PER_ROUND + k) % len(CHANGES)]
                pid = f"{cid}:r{r:02d}:p{k}"
                store.add_proposal(Proposal(
                    id=pid, campaign_id=cid, round=r, knob=knob, old=old, new=new, rationale="bench",
                    hypothesis=Hypothesis(symptom="plateau", cause="the recipe stopped teaching",
                                          change=f"set {knob}", expected_effect="+1 point"),
                    cited_skills=rng.sample(slugs, 2), brain="heuristic", status="pending_review",
                    harness_version=harness.version, created=at + timedelta(seconds=k)))
                pids.append(pid)
            if pending:
                store.set_campaign(cid, status="waiting_review", mainline_version=mainline)
                continue
            for pid in pids:
                store.add_review(Review(proposal_id=pid, verdict="approve", reviewer="bench", comment="", at=at))
            bt = f"{cid}:r{r:02d}:backtest"
            seeds = [10_000 + 100 * r, 10_001 + 100 * r]
            store.add_backtest(bt, cid, r, pids, seeds, STEPS)
            arms = [(None, "control")] + [(pid, "treatment") for pid in pids]
            evals = {}
            for seed in seeds:
                for i, (pid, role) in enumerate(arms):
                    name = f"{cid}__r{r:02d}__{role}{'' if pid is None else i}__s{seed}"
                    acc = 0.3 + r / 400 + rng.gauss(0, 0.02)
                    evals[(pid, seed)] = acc
                    _metrics(jobs / name, step, rng, acc)
                    store.ledger_add(LedgerEntry(campaign_id=cid, key=name, kind="branch", run_name=name, steps=STEPS,
                                                 at=at))
                    store.add_branch(BranchResult(backtest_id=bt, proposal_id=pid, role=role, seed=seed, run_name=name,
                                                  status="finished", eval_accuracy=acc, train_reward=0.4,
                                                  gate_passed=None if pid is None else True, steps=STEPS))
            best = None
            for pid in pids:
                diffs = [evals[(pid, s)] - evals[(None, s)] for s in seeds]
                eff = sum(diffs) / 2
                st = BacktestStats(n_pairs=2, effect=eff, ci_low=eff - 0.03, ci_high=eff + 0.03, confidence=0.8,
                                   method="paired-t", control_mean=0.3, treatment_mean=0.3 + eff)
                store.set_backtest_stats(bt, pid, st)
                outcome = "promote" if eff - 0.03 > 0.01 and best is None else ("reject" if eff < 0 else "inconclusive")
                best = pid if outcome == "promote" else best
                store.add_decision(Decision(proposal_id=pid, outcome=outcome, reasons=[f"effect {eff:+.3f}"], stats=st,
                                            at=at))
                store.set_proposal_status(pid, {"promote": "promoted", "reject": "refuted"}.get(outcome, "inconclusive"))
            if best is not None:
                p = store.get_proposal(best)
                new_h = harness.with_knob(p.knob, p.new)
                store.add_harness_version(new_h.version, harness.version, new_h.model_dump(mode="json"),
                                          [{"path": p.knob, "old": p.old, "new": p.new}])
                harness = new_h
            kept = f"{cid}__r{r:02d}__{'treatment' + str(pids.index(best) + 1) if best else 'control'}__s{seeds[0]}"
            pv = PolicyVersion(id=f"{cid}:r{r:02d}:{'promoted' if best else 'control'}", campaign_id=cid,
                               parent_id=mainline, harness_version=harness.version, checkpoint="ck", run_name=kept,
                               mlflow_run_id=f"k{c}{r}", eval_accuracy=evals[(best, seeds[0])], step=step + STEPS,
                               created=at + timedelta(seconds=30))
            store.add_policy_version(pv)
            mainline, step = pv.id, step + STEPS
            store.log_event(cid, "brain", {"round": r, "notes": "bench"})
        store.set_campaign(cid, mainline_version=mainline, **({} if waiting else {"status": "finished"}))
    counts = {"proposals": store.count_proposals(), "pending": store.count_proposals(status="pending_review"),
              "campaigns": len(store.list_campaigns()), "runs": sum(1 for _ in jobs.iterdir())}
    store.close()
    return counts


def fill_rollouts(run_dir: Path, rng: random.Random, steps: int = 100, per_step: int = 64) -> None:
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evotrainer.evidence.model import ROLLOUT_SCHEMA

    (run_dir / "rollouts").mkdir(parents=True)
    lines = [json.dumps({"step": s, "reward": 0.4, "accuracy": 0.3 + s / 1000, "entropy": 0.5 - s / 1000,
                         "completions/mean_length": 4.0, "completions/clipped_ratio": 0.3, "loss": 0.0,
                         "frac_reward_zero_std": 0.4, "grad_norm": 1.0}) for s in range(1, steps + 1)]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run_dir / "meta.json").write_text(json.dumps({"name": run_dir.name, "run_id": "diag", "status": "finished"}))
    gen = np.random.default_rng(rng.getrandbits(32))
    for s in range(1, steps + 1):
        correct = gen.random(per_step) < 0.4
        df = pd.DataFrame({
            "run_id": "diag", "step": s, "prompt_id": [f"arith:{i // 8}" for i in range(per_step)],
            "group_id": [f"{s}:{i // 8}" for i in range(per_step)], "prompt": "12+30=",
            "completion": np.where(correct, "42", "43 <script>x</script>"), "reward_correctness": correct.astype(float),
            "reward_format": 1.0, "reward": correct.astype(float),
            "correct": correct, "well_formed": True, "n_candidates": 1, "length": 3, "truncated": gen.random(per_step) < 0.3,
            "advantage": gen.normal(0, 1, per_step), "difficulty": 2})
        for col in ROLLOUT_SCHEMA.names:  # any other column of the schema stays null
            if col not in df:
                df[col] = None
        pq.write_table(pa.Table.from_pandas(df, schema=ROLLOUT_SCHEMA, preserve_index=False),
                       run_dir / "rollouts" / f"step_{s:06d}.parquet")


def measure(client, url: str, repeat: int) -> dict:
    t = time.perf_counter()
    r = client.get(url)
    first = time.perf_counter() - t
    assert r.status_code == 200, (url, r.status_code, r.text[:500])
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        r = client.get(url)
        times.append(time.perf_counter() - t)
        assert r.status_code == 200
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return {"url": url, "first_ms": round(first * 1000, 1), "median_ms": round(statistics.median(times) * 1000, 1),
            "p95_ms": round(p95 * 1000, 1), "bytes": len(r.content)}


def main() -> None:
    p = parser(__doc__, "bench-ui")
    p.set_defaults(home=None)
    p.add_argument("--repeat", type=int, default=30, help="timed requests per page after the first")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        home = Path(a.home) if a.home else Path(tmp) / "home"
        lib = Path(tmp) / "skills"
        rng = random.Random(7)
        t = time.perf_counter()
        slugs = fill_skills(lib, rng)
        counts = fill_store(home, slugs, rng)
        diag = home / "jobs" / "bench-diagnose-run"
        fill_rollouts(diag, rng)
        fill_s = time.perf_counter() - t
        print(f"filled {counts} and {len(slugs)} skills in {fill_s:.0f}s", flush=True)

        from fastapi.testclient import TestClient

        from evotrainer.ui import create_app

        client = TestClient(create_app(home, "bench-token-0123456789", library=lib), base_url="http://127.0.0.1:8765")
        cid = "bench-09-20261101000000"
        decided = f"{cid}:r25:p0"
        pending = "bench-00-20261101000000:r45:p1"
        pages = {
            "skills list": "/skills", "skills search": "/skills?q=entropy+collapse+clip",
            "skills filter": "/skills?kind=mistake&domain=math&status=active", "skill page (history)": f"/skills/{slugs[1]}",
            "campaigns list": "/", "campaign page": f"/campaigns/{cid}", "campaign page 2": f"/campaigns/{cid}?page=2",
            "proposal (backtested)": f"/proposals/{decided}", "proposal (pending)": f"/proposals/{pending}",
            "review queue": "/reviews", "review queue page 2": "/reviews?page=2", "diagnose list": "/diagnose",
            "diagnose run": "/diagnose/bench-diagnose-run", "campaign state (JSON poll)": f"/campaigns/{cid}/state.json",
        }
        results = {}
        for name, url in pages.items():
            results[name] = measure(client, url, a.repeat)
            r = results[name]
            print(f"{name:28} first {r['first_ms']:7.1f} ms   median {r['median_ms']:6.1f} ms   p95 {r['p95_ms']:6.1f} ms"
                  f"   {r['bytes'] / 1024:6.1f} KiB", flush=True)
        save("ui", {"store": {**counts, "skills": len(slugs)}, "fill_seconds": round(fill_s, 1), "repeat": a.repeat,
                    "client": "fastapi.testclient (in process)", "pages": results, "peak_rss_mib": round(peak_rss_mib())})


if __name__ == "__main__":
    main()
