"""Our own job directories (and what ``EvoTrainerCallback`` records in a user's TRL run).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from evotrainer.core.files import check_regular
from evotrainer.core.runmeta import read_run_meta
from evotrainer.evidence.mapping import FieldMap
from evotrainer.evidence.model import (
    ROLLOUT_SCHEMA,
    Evidence,
    is_step,
    read_metrics,
    read_rollouts,
)
from evotrainer.evidence.readers.base import (
    FileCache,
    Reader,
    _metrics_frame,
    _read_json_object,
    _read_jsonl,
    _read_parquets,
    _resolve,
    _Skips,
)


def read_job_dir(run_dir: Path, fields: FieldMap | None = None, cache: FileCache | None = None) -> Evidence:
    """The evidence of one EvoTrainer job directory (or of what ``EvoTrainerCallback`` records): the one loader the
    campaign, the dashboard, ``diagnose`` and ``watch`` all use. Sound files are read whole; when one is damaged
    (a torn line, a garbage record, a Parquet file cut short by a kill) it is read file by file and line by line,
    and what was skipped is named in ``meta['skipped']`` instead of failing the whole run."""
    if cache is None:
        meta = read_run_meta(run_dir)
        try:  # the fast path: every file sound
            if meta is not None:
                ev = Evidence(metrics=read_metrics(run_dir), rollouts=read_rollouts(run_dir), source="evotrainer",
                              run=meta.name or run_dir.name, meta={**meta.raw, "skipped": [], "unreadable": []})
                mfile = run_dir / "metrics.jsonl"
                if len(ev.metrics) or not os.path.lexists(mfile) or not check_regular(mfile):
                    return _resolve(ev, fields)
        except Exception:  # noqa: BLE001 - a damaged metrics.jsonl or Parquet file: read file by file below
            pass
    skips = _Skips()
    meta = _read_json_object(run_dir / "meta.json", skips)
    rows: dict[int, dict[str, Any]] = {}
    mfile = run_dir / "metrics.jsonl"
    records = _read_jsonl(mfile, skips) if os.path.lexists(mfile) else []  # a FIFO or a link is unreadable, not absent
    for rec in records:
        if is_step(rec.get("step")):
            rows.setdefault(rec["step"], {}).update(rec)
    n = len(records) - sum(1 for r in records if is_step(r.get("step")))
    if n:  # (several records of one step, e.g. a training log and an eval, are fine)
        why = f"{n} record{'s' * (n != 1)} without an integer step in [0, 2**53)"
        if rows:
            skips.entries.append(f"{mfile}: {why}")
        else:
            skips.file(mfile, why)
    frames = _read_parquets(sorted((run_dir / "rollouts").glob("step_*.parquet")), skips, cache)
    rollouts = pd.concat(frames, ignore_index=True) if frames else ROLLOUT_SCHEMA.empty_table().to_pandas()
    name = meta.get("name") if isinstance(meta.get("name"), str) else run_dir.name
    return _resolve(Evidence(metrics=_metrics_frame(rows), rollouts=rollouts, source="evotrainer", run=name,
                             meta={**meta, **skips.meta()}), fields)


class OursReader(Reader):
    kind = "evotrainer"

    def matches(self, path: Path) -> bool:
        return (path / "meta.json").is_file()

    def read(self, path: Path, fields: FieldMap | None = None, cache: FileCache | None = None) -> Evidence:
        return read_job_dir(path, fields, cache)
