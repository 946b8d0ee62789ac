"""Benchmark (issue 14): what one multi-turn held-out evaluation costs — ``evotrainer.training.episodes.play``.

A campaign on the ``agentic`` task evaluates 500 episodes at every backtest look, and those evaluations are ~20 %
of its wall time (bench/log/07-campaign-vs-static-baseline.md, session 26). This times the episode loop alone on a warm-started policy:
greedy episodes on ``--n`` decision-split problems (what a look and a selection score play) and sampled ones,
``--k`` per problem on ``--n-sampled`` problems (pass@k), each ``--repeats`` times after one small warm-up call, in
one process with nothing else running. It also prints how many episodes solved their problem and a digest of every
episode's tokens, so that two versions of the loop can be checked to play the same greedy episodes.

    .venv/bin/python bench/episodes_eval.py --policy runs/bench-agentic-int/policies/agentic__tiny__s3__bdb2210e26

To time another version of the code, run this file from a worktree of it (it imports ``evotrainer`` from the tree
it sits in) with ``--out`` naming a separate results file.
"""

from __future__ import annotations

import hashlib
import statistics
import time

from _common import parser, save


def main() -> None:
    p = parser(__doc__, "bench-agentic-int")
    p.add_argument("--policy", required=True, help="a warm-started agentic policy directory")
    p.add_argument("--n", type=int, default=500, help="greedy episodes (decision-split problems)")
    p.add_argument("--n-sampled", type=int, default=200, help="problems played with sampling")
    p.add_argument("--k", type=int, default=4, help="sampled episodes per problem")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget", type=int, default=96, help="completion budget of an episode")
    p.add_argument("--out", default="episodes_eval")
    a = p.parse_args()

    import torch

    from evotrainer.config.eval import EvalSpec
    from evotrainer.tasks import get_task
    from evotrainer.training.episodes import ensure_chat_template, play, solved
    from evotrainer.training.evaluation import split_problems
    from evotrainer.training.policy import load_policy

    task = get_task("agentic")
    problems = split_problems(task, EvalSpec(n=a.n, k=1), "decision")
    model, tok = load_policy(a.policy)
    ensure_chat_template(tok)
    play(model, tok, task, problems[:8], a.budget)  # warm-up

    def digest(eps) -> str:
        h = hashlib.sha256()
        for e in eps:
            h.update(repr((e.prompt_ids, e.completion_ids, solved(e.env))).encode())
        return h.hexdigest()[:16]

    out = {}
    for arm, kw, probs in (("greedy", {}, problems), ("sampled", {"do_sample": True, "k": a.k}, problems[: a.n_sampled])):
        secs, solved_n, digests = [], [], []
        for r in range(a.repeats):
            torch.manual_seed(r)
            t0 = time.perf_counter()
            eps = play(model, tok, task, probs, a.budget, **kw)
            secs.append(time.perf_counter() - t0)
            solved_n.append(sum(solved(e.env) for e in eps))
            digests.append(digest(eps))
        out[arm] = {"episodes": len(eps), "seconds": [round(s, 3) for s in secs],
                    "median_s": round(statistics.median(secs), 3), "solved": solved_n, "digests": digests}
        print(arm, out[arm], flush=True)
    save(a.out, {"policy": a.policy, "budget": a.budget, **out})


if __name__ == "__main__":
    main()
