"""Where a campaign process's own seconds go, node by node (``HOME/campaigns/ID/timings.jsonl``).

Why: a campaign's promise is that it spends the user's compute better than they would, and its wall time outside
trainer steps is part of that bill (issue 14 asks for at most 10 %). Job sessions already time themselves
(``meta.json`` timings); what the campaign process spends around them (diagnosis, proposals, distillation, the
checkpointer, scoring policies in the worker) was only visible under a profiler, which inflates Python-heavy code
about twofold and so misplaces the cost. This clock is always on and costs two clock readings a node.

Each line is one node execution: its wall time from the previous node's end (so the checkpointer's write of the
previous step is counted where it happens), how much of it waited on job sessions (the launcher's ``run_many``)
and on scoring in the worker (``score``), and ``own_s``, the rest: the campaign process's own work. A resumed
campaign appends; a node that ``kill -9`` cut short writes nothing (its re-run does).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

WAITS = ("jobs", "scoring")  # what a node may wait on in the worker


def timings_path(home: Path, campaign_id: str) -> Path:
    """The campaign's clock file: one line per node execution."""
    return home / "campaigns" / campaign_id / "timings.jsonl"


class NodeClock:
    """Accumulates waits (:meth:`waiting`) and writes a line per node (:meth:`lap`)."""

    def __init__(self, path: Path):
        self.path = path
        self._waits = dict.fromkeys(WAITS, 0.0)
        self._mark = time.perf_counter()

    @contextmanager
    def waiting(self, kind: str) -> Iterator[None]:
        """Time a call that waits on the worker (``jobs`` or ``scoring``)."""
        if kind not in self._waits:
            raise ValueError(f"unknown wait {kind!r}: one of {', '.join(WAITS)}")
        t = time.perf_counter()
        try:
            yield
        finally:
            self._waits[kind] += time.perf_counter() - t

    def lap(self, node: str, rnd: int | None) -> dict[str, Any]:
        """Close the interval since the last lap as ``node``'s and append it to the file."""
        now = time.perf_counter()
        wall = now - self._mark
        row = {"node": node, "round": rnd, "wall_s": round(wall, 3),
               **{f"{k}_s": round(v, 3) for k, v in self._waits.items()},
               "own_s": round(max(0.0, wall - sum(self._waits.values())), 3)}
        self._mark, self._waits = now, dict.fromkeys(WAITS, 0.0)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return row


REVIEW_WAIT = "review_wait"  # the lap of a campaign waiting for a person's review: neither work nor a worker wait


def read_node_seconds(path: Path) -> dict[str, Any]:
    """Seconds per node summed over the file (all sessions of the campaign): own work, waits on the worker, and
    time spent waiting for reviews (kept apart: a person's time is not the campaign's overhead)."""
    out: dict[str, Any] = {"own": {}, "jobs": 0.0, "scoring": 0.0, "review_wait": 0.0, "own_total": 0.0, "laps": 0}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
            node, own = str(row["node"]), float(row["own_s"])
            jobs, scoring = float(row["jobs_s"]), float(row["scoring_s"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by kill -9 mid-write: the rest still counts
        out["laps"] += 1
        if node == REVIEW_WAIT:
            out["review_wait"] += float(row["wall_s"])
            continue
        out["own"][node] = out["own"].get(node, 0.0) + own
        out["jobs"] += jobs
        out["scoring"] += scoring
        out["own_total"] += own
    out["own"] = {k: round(v, 1) for k, v in sorted(out["own"].items(), key=lambda kv: -kv[1])}
    for k in ("jobs", "scoring", "review_wait", "own_total"):
        out[k] = round(out[k], 1)
    return out
