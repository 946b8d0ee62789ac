"""Merge `bench/campaign.py` results files into one, so arms run in separate invocations are paired by seed.

Why: the arms of one cell are often run apart (the campaign and static arms on one day, Optuna on another, each
into its own ``--out`` file), and issue 14's comparisons are paired over seeds. This writes their rows into one
file with `bench/campaign.py`'s own summary (means, 90 % t-intervals, ``campaign_minus_static`` and
``campaign_minus_optuna``, on the 500-problem confirmation and, where every row has it, the 3000-problem wide one).
Rows of a later file replace an earlier file's row with the same (task, start, seed, arm, budget). ``--wide-from``
fills a row's missing ``accuracy_wide`` from `bench/confirm_noise.py` output (which re-scored campaign and static
policies on the same 3000 problems that `bench/campaign.py --wide 3000` uses).

    .venv/bin/python bench/merge_results.py --results cd880_b5 cd880_optuna --wide-from confirm_noise_cd880_b5 \
        --out cd880_merged
"""

from __future__ import annotations

import json
import sys

from _common import ROOT
from campaign import RESULTS, _save, row_key  # noqa: E402 (bench/ is on the path as the scripts' directory)


def _load(name: str) -> dict:
    path = RESULTS.with_name(f"{name}.json")
    if not path.exists():
        sys.exit(f"merge_results: no results file {path.relative_to(ROOT)}; give a name from bench/results/")
    return json.loads(path.read_text())


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", nargs="+", required=True, help="results files (names in bench/results/, no .json)")
    p.add_argument("--wide-from", nargs="*", default=[], help="confirm_noise results whose wide scores fill rows")
    p.add_argument("--out", required=True, help="the merged file, bench/results/OUT.json")
    a = p.parse_args()
    rows: dict[tuple, dict] = {}
    for name in a.results:
        for r in _load(name).get("runs", []):
            if "arm" in r:
                rows[row_key(r)] = dict(r, source=name)
    for name in a.wide_from:
        for w in _load(name).get("rows", []):
            for arm in ("campaign", "static"):
                k = row_key(dict(w, arm=arm))
                if k in rows and rows[k].get("accuracy_wide") is None and w.get("wide_confirmation"):
                    rows[k]["accuracy_wide"] = w["wide_confirmation"][arm]
                    rows[k]["wide_source"] = name
    _save({}, sorted(rows.values(), key=row_key), a.out)


if __name__ == "__main__":
    main()
