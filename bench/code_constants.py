"""Benchmark (issue 15, part 2): how much reward a constant program earns on the ``code`` task's problems.

A policy's first guesses are constants (``[]``, ``0``, a copied output). If a problem's hidden tests mostly share
one output, such a guess farms reward - and on a truly degenerate problem it is even *correct* - so GRPO learns
to write constants instead of programs. This samples ``--n`` training problems per level and reports, for the
best constant on each problem (the most common hidden output): its mean score, the share of problems where it
scores at least 0.5, and the share where it passes every hidden test. The generator's rule
(:func:`evotrainer.tasks.code.max_repeats`) caps the first at 0.25 and the others at 0.

    .venv/bin/python bench/code_constants.py            # -> bench/results/code_constants.json
"""

from __future__ import annotations

import collections

from _common import parser, save


def main() -> None:
    p = parser(__doc__, "bench-code-constants")
    p.add_argument("--n", type=int, default=400, help="problems per level")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    from evotrainer.tasks import get_task

    task = get_task("code")
    levels = {}
    for level in range(task.min_difficulty, task.max_difficulty + 1):
        problems = task.sample("train", a.n, seed=a.seed, difficulty_range=(level, level))
        best = []
        for prob in problems:
            outputs = [tuple(y) if isinstance(y, list) else y for _, y in prob.meta["hidden"]]
            best.append(collections.Counter(outputs).most_common(1)[0][1] / len(outputs))
        empty = [sum(1 for _, y in prob.meta["hidden"] if y == []) / len(prob.meta["hidden"]) for prob in problems]
        levels[str(level)] = {
            "best_constant_mean_score": round(sum(best) / len(best), 3),
            "share_best_constant_at_least_half": round(sum(b >= 0.5 for b in best) / len(best), 3),
            "share_best_constant_correct": round(sum(b == 1.0 for b in best) / len(best), 4),
            "mean_share_of_empty_outputs": round(sum(empty) / len(empty), 3),
        }
        print(level, levels[str(level)], flush=True)
    save("code_constants", {"n_per_level": a.n, "seed": a.seed, "options": task.options.model_dump(), "levels": levels})


if __name__ == "__main__":
    main()
