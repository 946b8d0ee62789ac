"""Benchmark (issue 15, part 1): the built-in real policy, SmolLM2-135M-Instruct, on this CPU.

``--part steps``: seconds per GRPO step at a small batch (4 prompts x 4 completions, at most 16 tokens), with
LoRA (r 8 on the attention projections) and with full fine-tuning, evaluation off; the first step is warm-up.

``--part arith`` / ``--part countdown``: held-out greedy accuracy (strict, and the final-answer reading of prose)
of the converted model as it comes, then a short GRPO run from the format-warm-started base (LoRA, 4 x 4,
``--steps`` chosen from the measured seconds per step so that a run stays under ~20 minutes), evaluated at its
start and end on the same ``--eval-n`` held-out problems. arith at 1-2 digits, countdown at 2-3 numbers.

``--part code``: the visible-tests trap on the pretrained policy (issue 15 part 2's question: does a real model,
which copies outputs from a prompt, move towards hard-coding when the reward pays the visible examples?). One GRPO
run from the format-warm-started base under ``--tests`` (``visible``: the TRAP; ``hidden``: the honest reward),
reporting the training reward, the share of hard-coded programs per block of steps (the ``hardcoding``
diagnostic's own judge), the diagnosis of the run, and strict held-out accuracy (hidden tests) at start and end.
One format warm start (policy seed 0) serves every training ``--seed``, as in ``bench/domains.py``; with
``--home runs/code-smollm2`` and the settings of ``campaigns/code-smollm2.yaml`` (``--warm-steps 64 --warm-lr 1e-4
--probe-share 0.1``) it is that campaign's cached warm start.

    .venv/bin/python bench/smollm2.py --part steps
    .venv/bin/python bench/smollm2.py --part arith --steps 80 --seed 1 --tag _s1
    .venv/bin/python bench/smollm2.py --part code --tests visible --steps 40 --tag _visible
    .venv/bin/python bench/smollm2.py --part code --tests hidden --steps 30 --seed 2 --warm-steps 64 --warm-lr 1e-4 \
        --probe-share 0.1 --home runs/code-smollm2 --tag _hidden_s2
"""

from __future__ import annotations

import time
from pathlib import Path

from _common import ROOT, parser, peak_rss_mib, save

NAME = "smollm2-135m-instruct"
HARNESS = """
name: smollm2-{name}
optim: {{learning_rate: {lr}}}
grpo: {{prompts_per_step: {p}, num_generations: {g}, max_completion_length: 16, temperature: 1.0}}
reward: {{correctness: {{weight: 1.0, match: {match}}}, format: {{weight: 0.1}}}}
data: {{pool_size: 512, difficulty: [{lo}, {hi}]}}
model: {{lora_r: {r}, lora_alpha: {alpha}}}
"""
LEVELS = {"arith": (1, 2), "countdown": (2, 3), "code": (1, 2)}
CODE_HARNESS = """
name: smollm2-code-{tests}
optim: {{learning_rate: {lr}}}
grpo: {{prompts_per_step: {p}, num_generations: {g}, max_completion_length: 24, temperature: 1.0, scale_rewards: none}}
reward: {{correctness: {{weight: 1.0, match: exact, tests: {tests}}}, format: {{weight: 0.1}}}}
data: {{pool_size: 512, difficulty: [1, 2]}}
model: {{lora_r: 16, lora_alpha: 32}}
"""


def harness(home: Path, name: str, task: str, r: int, lr: float, match: str = "exact", batch=(4, 4)) -> Path:
    lo, hi = LEVELS[task]
    f = home / f"{name}.yaml"
    f.write_text(HARNESS.format(name=name, lr=lr, match=match, lo=lo, hi=hi, r=r, alpha=2 * max(r, 1),
                                p=batch[0], g=batch[1]))
    return f


def steps_part(home: Path, n: int, device: str = "auto", batches=((4, 4),)) -> dict:
    from evotrainer.config.eval import EvalSpec
    from evotrainer.config.job import JobSpec
    from evotrainer.config.policy import FormatWarmStart, PolicySpec
    from evotrainer.evidence.model import read_metrics
    from evotrainer.jobs.runner import run_job

    out = {}
    arms = [(f"{kind}_{p}x{g}" if len(batches) > 1 else kind, r, (p, g))
            for p, g in batches for kind, r in (("lora_r8", 8), ("full", 0))]
    for label, r, batch in arms:
        spec = JobSpec(task="arith", harness=str(harness(home, f"steps-{label}", "arith", r, 1e-5 if not r else 1e-4,
                                                         batch=batch)),
                       steps=n, seed=0, save_every=10_000, eval=EvalSpec(every=0), device=device,
                       policy=PolicySpec(pretrained=NAME, format_warm_start=FormatWarmStart(steps=0)),
                       name=f"steps-{label}-{int(time.time())}")
        res = run_job(spec, home, log=print)
        m = read_metrics(Path(res.run_dir)).set_index("step")
        wall = m["step_wall_time"].dropna()
        steady = float(wall.iloc[1:].mean())
        out[label] = {"steps": n, "batch": f"{batch[0]} prompts x {batch[1]} completions",
                      "seconds_per_step_steady": round(steady, 2),
                      "completions_per_second": round(batch[0] * batch[1] / steady, 1),
                      "first_step_seconds": round(float(wall.iloc[0]), 2), "setup_seconds": res.setup_seconds,
                      "completion_tokens_mean": round(float(m["completions/mean_length"].mean()), 2),
                      "clipped_ratio_mean": round(float(m["completions/clipped_ratio"].mean()), 3)}
        print(label, out[label], flush=True)
    return out


def accuracy_part(home: Path, task_name: str, steps: int, eval_n: int, match: str, seed: int = 0,
                  device: str = "auto", batch=(4, 4)) -> dict:
    from evotrainer.config.job import JobSpec
    from evotrainer.evidence.model import read_metrics
    from evotrainer.jobs.runner import run_job
    from evotrainer.tasks import get_task
    from evotrainer.training.evaluation import EvalSpec, evaluate
    from evotrainer.training.policy import PolicySpec, load_policy, resolve_device
    from evotrainer.training.pretrained import converted_dir

    task = get_task(task_name)
    lo, hi = LEVELS[task_name]
    ev = EvalSpec(every=steps, n=eval_n, k=1, difficulty=(lo, hi), batch_size=64)
    t = time.perf_counter()
    model, tok = load_policy(converted_dir(home, NAME, log=print))
    model.to(resolve_device(device))
    from evotrainer.training.evaluation import heldout_problems

    raw = evaluate(model, tok, task, heldout_problems(task, ev), ev, 16)
    raw_s = time.perf_counter() - t
    del model
    print("as converted:", raw, flush=True)
    spec = JobSpec(task=task_name, harness=str(harness(home, f"acc-{task_name}", task_name, 16, 2e-4, match, batch)),
                   steps=steps, seed=seed, save_every=steps, eval=ev, policy=PolicySpec(pretrained=NAME, seed=seed),
                   device=device,
                   name=f"acc-{task_name}-{int(time.time())}")
    res = run_job(spec, home, log=print)
    m = read_metrics(Path(res.run_dir))
    evals = m.dropna(subset=["eval/greedy_accuracy"])
    start, end = evals.iloc[0], evals.iloc[-1]
    pick = lambda row: {k: round(float(row[k]), 3) for k in ("eval/greedy_accuracy", "eval/final_accuracy",
                                                            "eval/mean_length") if k in row}
    base = Path(json_load(Path(res.run_dir) / "meta.json")["base_policy"])
    warm = json_load(base / "warm_start.json") if (base / "warm_start.json").is_file() else None
    return {"task": task_name, "levels": [lo, hi], "eval_n": eval_n, "steps": steps, "match": match, "seed": seed,
            "batch": list(batch), "device": device,
            "as_converted": {k: round(v, 3) for k, v in raw.items()}, "as_converted_eval_seconds": round(raw_s, 1),
            "format_warm_start": warm, "start": pick(start), "end": pick(end), "paired": paired(Path(res.run_dir)),
            "run_dir": res.run_dir,
            "train_seconds": res.train_seconds, "eval_seconds": res.eval_seconds, "setup_seconds": res.setup_seconds,
            "seconds_per_step": round(res.train_seconds / steps, 1),
            "reward_first_last": [round(float(x), 3) for x in m["reward"].dropna().iloc[[0, -1]]],
            "frac_reward_zero_std_mean": round(float(m["frac_reward_zero_std"].dropna().mean()), 3)}


def code_part(home: Path, steps: int, eval_n: int, tests: str, seed: int, lr: float, warm: tuple[int, float],
              probe_share: float = 0.0, block: int = 10, device: str = "auto", batch=(4, 4)) -> dict:
    from evotrainer.config.job import JobSpec
    from evotrainer.config.policy import FormatWarmStart
    from evotrainer.jobs.runner import run_job
    from evotrainer.training.evaluation import EvalSpec
    from evotrainer.training.policy import PolicySpec

    f = home / f"code-{tests}.yaml"
    f.write_text(CODE_HARNESS.format(tests=tests, lr=lr, p=batch[0], g=batch[1]))
    ev = EvalSpec(every=steps, n=eval_n, k=1, difficulty=LEVELS["code"], batch_size=64)
    spec = JobSpec(task="code", harness=str(f), steps=steps, seed=seed, save_every=steps, eval=ev, device=device,
                   task_options={"hardcode_probe_share": probe_share},
                   policy=PolicySpec(pretrained=NAME, seed=0,
                                     format_warm_start=FormatWarmStart(steps=warm[0], learning_rate=warm[1])),
                   name=f"code-{tests}-s{seed}-{int(time.time())}")
    res = run_job(spec, home, log=print)
    return {"tests": tests, "steps": steps, "seed": seed, "lr": lr, "batch": list(batch), "device": device,
            "hardcode_probe_share": probe_share, "eval_n": eval_n, **code_report(home, Path(res.run_dir), block),
            "seconds_per_step": round(res.train_seconds / steps, 2), "setup_seconds": res.setup_seconds,
            "eval_seconds": res.eval_seconds}


def code_report(home: Path, run_dir: Path, block: int = 10) -> dict:
    """What a finished ``code`` run shows, read from its evidence alone (so that ``--from-run`` can rebuild it for
    a run brought back from another machine): the hard-coded share and reward per block of steps by the
    ``hardcoding`` diagnostic's own judge, the run's findings, held-out start and end with the paired split, and
    the steps whose non-finite gradient was skipped."""
    import json as _json

    from typer.testing import CliRunner

    from evotrainer.cli import app
    from evotrainer.diagnostics.builtin.programs import Hardcoding
    from evotrainer.evidence.model import read_metrics, read_rollouts
    from evotrainer.tasks.code import prompt_examples

    m = read_metrics(run_dir)
    evals = m.dropna(subset=["eval/greedy_accuracy"])
    train = m.dropna(subset=["loss"])
    r = read_rollouts(run_dir)
    steps = int(r["step"].max())
    blocks = []
    for lo in range(1, steps + 1, block):
        part = r[(r["step"] >= lo) & (r["step"] < lo + block)]
        judged = [Hardcoding._judge(prompt_examples(str(p)), str(c)) for p, c in zip(part["prompt"], part["completion"])]
        parsed = sum(j[0] for j in judged)
        flagged = sum(j[1] is not None for j in judged)
        blocks.append({"steps": [lo, min(lo + block - 1, steps)], "rollouts": len(part), "parsed": parsed,
                       "hardcoded": flagged, "hardcoded_share_of_parsed": round(flagged / parsed, 3) if parsed else None,
                       "reward_mean": round(float(part["reward"].mean()), 3),
                       "completion_examples": part["completion"].head(3).tolist()})
        print(blocks[-1], flush=True)
    # stdout only: click >= 8.2 mixes stderr (a library's warning) into ``output``, which then is not JSON
    out = CliRunner().invoke(app, ["diagnose", str(run_dir), "--json", "--home", str(home)])
    findings = [{k: x[k] for k in ("diagnostic", "severity", "confidence", "explanation")}
                for x in _json.loads(out.stdout)["findings"] if x["severity"] != "info"]
    base = Path(json_load(run_dir / "meta.json")["base_policy"])
    skipped = train[train["update_skipped"].fillna(0) > 0]["step"] if "update_skipped" in train else []
    return {"task": "code", "levels": list(LEVELS["code"]),
            "format_warm_start": json_load(base / "warm_start.json") if (base / "warm_start.json").is_file() else None,
            "start": {k: round(float(evals.iloc[0][k]), 3) for k in ("eval/greedy_accuracy", "eval/mean_length")},
            "end": {k: round(float(evals.iloc[-1][k]), 3) for k in ("eval/greedy_accuracy", "eval/mean_length")},
            "paired": paired(run_dir), "blocks": blocks, "findings": findings, "run_dir": str(run_dir),
            "updates_skipped_at": [int(x) for x in skipped],
            "seconds_per_step_wall_mean": round(float(train["step_wall_time"].iloc[1:].mean()), 3),
            "frac_reward_zero_std_mean": round(float(m["frac_reward_zero_std"].dropna().mean()), 3)}


def paired(run_dir: Path) -> dict:
    """Problem by problem, the first and the last evaluation (``JOB/eval/decision_*.txt``, one 0/1 a problem):
    how many the run gained and lost, and the exact McNemar p-value of that split (two-sided binomial)."""
    from scipy.stats import binomtest

    files = sorted((Path(run_dir) / "eval").glob("decision_*.txt"))
    a, b = (f.read_text().strip() for f in (files[0], files[-1]))
    gained = sum(x == "0" and y == "1" for x, y in zip(a, b))
    lost = sum(x == "1" and y == "0" for x, y in zip(a, b))
    p = binomtest(gained, gained + lost).pvalue if gained + lost else 1.0
    return {"n": len(a), "start_correct": a.count("1"), "end_correct": b.count("1"), "gained": gained, "lost": lost,
            "mcnemar_exact_p": round(float(p), 4)}


def json_load(p: Path):
    import json

    return json.loads(p.read_text())


def main() -> None:
    p = parser(__doc__, "bench-smollm2")
    p.add_argument("--part", choices=["steps", "arith", "countdown", "code"], required=True)
    p.add_argument("--tests", choices=["visible", "hidden"], default="visible",
                   help="--part code: the reward's tests (visible = the TRAP, hidden = honest)")
    p.add_argument("--lr", type=float, default=2e-4, help="--part code: the GRPO learning rate (LoRA r 16)")
    p.add_argument("--warm-steps", type=int, default=16, help="--part code: supervised steps of the format warm start")
    p.add_argument("--warm-lr", type=float, default=3e-5, help="--part code: the format warm start's learning rate")
    p.add_argument("--probe-share", type=float, default=0.0,
                   help="--part code: task option hardcode_probe_share (warm-start targets that copy an output)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--eval-n", type=int, default=100)
    p.add_argument("--match", default="final", help="reward.correctness.match of the accuracy runs")
    p.add_argument("--seed", type=int, default=0, help="seed of the accuracy run and of its format warm start")
    p.add_argument("--tag", default="", help="suffix of the results file (bench/results/smollm2_PART{TAG}.json)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="the jobs' device (JobSpec.device)")
    p.add_argument("--from-run", default=None, metavar="RUN_DIR",
                   help="--part code: no training; rebuild the report of a finished run from its evidence (e.g. one "
                        "brought back from a GPU machine by bench/device_smollm2.sh)")
    p.add_argument("--batch", default="4x4",
                   help="PROMPTSxCOMPLETIONS per GRPO step; --part steps takes a comma list (4x4,16x8) and times each")
    a = p.parse_args()
    from evotrainer.core.home import resolve_home

    home = resolve_home(a.home)
    batches = [tuple(int(x) for x in b.lower().split("x")) for b in a.batch.split(",")]
    if any(len(b) != 2 or min(b) < 1 for b in batches) or (a.part != "steps" and len(batches) != 1):
        p.error(f"--batch {a.batch!r}: give PROMPTSxCOMPLETIONS such as 4x4 (a comma list only with --part steps)")
    t = time.perf_counter()
    if a.part == "steps":
        doc = {"part": "steps", "batch": ",".join(f"{p_} prompts x {g} completions" for p_, g in batches)
               + ", <=16 tokens", "results": steps_part(home, a.steps, a.device, batches)}
    elif a.part == "code" and a.from_run:
        doc = {"part": "code", "from_run": a.from_run, "results": code_report(home, Path(a.from_run))}
    elif a.part == "code":
        doc = {"part": "code", "results": code_part(home, a.steps, a.eval_n, a.tests, a.seed, a.lr,
                                                    (a.warm_steps, a.warm_lr), a.probe_share, device=a.device,
                                                    batch=batches[0])}
    else:
        doc = {"part": a.part, "results": accuracy_part(home, a.part, a.steps, a.eval_n, a.match, a.seed, a.device,
                                                        batches[0])}
    doc.update({"wall_seconds": round(time.perf_counter() - t, 1), "peak_rss_mib": round(peak_rss_mib())})
    save(f"smollm2_{a.part}{a.tag}", doc)


if __name__ == "__main__":
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    main()
