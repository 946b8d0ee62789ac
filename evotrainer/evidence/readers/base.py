"""What every reader shares: the ``Reader`` seam, the file cache, the record of what could not be read, and
the helpers that turn a tool's rows into rollout records.

Why a small abstract class, in the style of Optuna's ``BasePruner``: each tool's directories are one file
(``ours``, ``trl_dir``, ``verl_dir``; MLflow runs by id in ``mlflow_run``), so a reader of another tool is one
class more, found by its name, and :func:`evotrainer.evidence.readers.load_evidence` asks each in turn.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from evotrainer.core.errors import UnreadableEvidence
from evotrainer.core.files import open_regular, read_text
from evotrainer.evidence.mapping import FieldMap, apply_field_map, detect_correctness
from evotrainer.evidence.model import (
    LENGTH_KEYS,
    TRUNCATED_KEYS,
    Evidence,
    rollout_type_problem,
)

ACCEPTED = (
    "an EvoTrainer job directory (meta.json, metrics.jsonl, rollouts/step_*.parquet); a job name or MLflow "
    "run id under HOME/jobs; an MLflow run id in HOME's tracking store (or $EVOTRAINER_MLFLOW_URI); a TRL "
    "GRPOTrainer output directory (trainer_state.json at the top or in checkpoint-*/, "
    "completions/completions_*.parquet); a verl run directory ({step}.jsonl files from "
    "trainer.rollout_data_dir and/or the file logger's {\"step\", \"data\"} .jsonl)"
)
_NUMBERED = re.compile(r"\d+\.jsonl")


class Reader(ABC):
    """One tool's run directories read as ``Evidence`` (metrics under TRL's names, rollouts in the schema's
    columns), leaving out what the tool does not record."""

    kind: ClassVar[str]

    @abstractmethod
    def matches(self, path: Path) -> bool:
        """Whether ``path`` (a directory) holds this tool's run files."""

    @abstractmethod
    def read(self, path: Path, fields: FieldMap | None = None, cache: FileCache | None = None) -> Evidence:
        """The run's evidence; ``fields``: the user's names for contract fields; ``cache``: what was read of
        unchanged files."""


def _resolve(ev: Evidence, fields: FieldMap | None, weights: dict[str, float] | None = None) -> Evidence:
    """The user's names first, then a correctness signal under another name (evotrainer.evidence.mapping)."""
    return detect_correctness(apply_field_map(ev, fields), weights)


class FileCache:
    """What was read from each file, keyed by its size and modification time: a re-read of a growing run reads
    only the files that are new or changed. A file that could not be read is not cached (it is retried)."""

    def __init__(self) -> None:
        self._got: dict[tuple[str, str], tuple[tuple[int, int], Any]] = {}

    def get(self, path: Path, kind: str, load):
        try:
            st = path.stat()
        except OSError:
            return load()
        key, stamp = (str(path), kind), (st.st_size, st.st_mtime_ns)
        hit = self._got.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        value = load()
        if value is not None:
            self._got[key] = (stamp, value)
        return value


def _cached(cache: FileCache | None, path: Path, kind: str, load):
    return load() if cache is None else cache.get(path, kind, load)


def require_readable(ev: Evidence, ref: str | Path) -> Evidence:
    """``ev`` if anything was read or nothing failed; UnreadableEvidence naming the files (and why) when there were
    files and none of them could be read: no metric step and no rollout."""
    empty = not len(ev.rollouts) and (not len(ev.metrics) or "step" not in ev.metrics)
    skipped = ev.meta.get("skipped") or []
    if empty and skipped:
        raise UnreadableEvidence(f"{ref}: no evidence could be read; {describe_skipped(ev)}")
    return ev


def describe_skipped(ev: Evidence, limit: int = 8) -> str | None:
    """One line for what the reader had to skip ("could not read 3 files: a (why); b (why)..."), or None."""
    skipped = [str(x) for x in ev.meta.get("skipped") or []]
    if not skipped:
        return None
    files = ev.meta.get("unreadable") or []
    lines = len(skipped) - len(files)
    what = ", ".join(x for x in (f"{len(files)} file{'s' * (len(files) != 1)}" if files else "",
                                 f"{lines} line{'s' * (lines != 1)}" if lines > 0 else "") if x)
    shown = "; ".join(skipped[:limit]) + (f"; and {len(skipped) - limit} more" if len(skipped) > limit else "")
    return f"could not read {what}: {shown}"


class _Skips:
    """What a reader could not read: ``entries`` ('path: why' or 'path:line: why') and the whole ``files``."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self.files: list[str] = []

    def line(self, path: Path, i: int, why: str) -> None:
        self.entries.append(f"{path}:{i}: {why}")

    def file(self, path: Path, why: str) -> None:
        for prefix in ("UnreadableFile: ", f"{path}: "):  # a refusal of evotrainer.core.files names the path itself
            why = why[len(prefix):] if why.startswith(prefix) else why
        self.entries.append(f"{path}: {why}")
        self.files.append(str(path))

    def meta(self) -> dict[str, list[str]]:
        return {"skipped": self.entries, "unreadable": self.files}


def _text(x: Any) -> str:
    """A prompt or completion as text: strings as is, conversations as 'role: content' lines."""
    if x is None or isinstance(x, str):
        return x or ""
    if isinstance(x, dict):
        c = x.get("content", x.get("text", ""))
        return c if isinstance(c, str) else " ".join(_text(b) for b in (c if c is not None else []))
    if not isinstance(x, (list, tuple, np.ndarray)):
        return str(x)  # a number or anything else a hostile file holds: shown, never interpreted
    msgs = list(x)  # list or numpy array (pyarrow's reading of a list<struct> column)
    if len(msgs) == 1:
        return _text(msgs[0])
    return "\n".join(f"{m.get('role', '')}: {_text(m)}" if isinstance(m, dict) else _text(m) for m in msgs)


def _boolish(s: pd.Series) -> pd.Series | None:
    """The column as nullable booleans if it holds only booleans or 0/1, else None."""
    vals = s.dropna()
    if not len(vals) or not all(isinstance(v, (bool, int, float, np.bool_, np.number)) and v in (0, 1) for v in vals):
        return None
    return s.map(lambda v: None if pd.isna(v) else bool(v)).astype("boolean")


def _group_ids(steps, prompts, consecutive: bool) -> list[str]:
    out, state = [], {}
    for s, p in zip(steps, prompts):
        if consecutive:
            k, prev = state.get(s, (-1, None))
            state[s] = (k + 1, p) if p != prev or k < 0 else (k, prev)
            out.append(f"{s}:{state[s][0]}")
        else:
            seen = state.setdefault(s, {})
            out.append(f"{s}:{seen.setdefault(p, len(seen))}")
    return out


def _finish(out: pd.DataFrame, raw: pd.DataFrame, consecutive: bool, exclude=()) -> pd.DataFrame:
    """Add prompt_id, group_id, whatever of length / truncated the raw columns support, and every other raw column
    under its own name (a correctness signal among them is found later: evotrainer.evidence.mapping)."""
    out["prompt_id"] = [hashlib.sha1(t.encode()).hexdigest()[:16] for t in out["prompt"]]
    out["group_id"] = _group_ids(out["step"], out["prompt"], consecutive)
    used = set(exclude)
    for k in TRUNCATED_KEYS:
        b = _boolish(raw[k]) if k in raw and k not in exclude else None
        if "truncated" not in out and b is not None:
            out["truncated"] = b.values
            used.add(k)
    for k in LENGTH_KEYS:
        if k in raw and k not in exclude and "length" not in out:
            out["length"] = pd.to_numeric(raw[k], errors="coerce").round().astype("Int64").values
            used.add(k)
    for k in raw.columns:
        if k not in used and k not in out.columns and isinstance(k, str):
            out[k] = raw[k].values
    return out


def _metrics_frame(rows: dict[int, dict[str, Any]]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame({"step": pd.Series([], dtype="int64")})
    return pd.DataFrame([rows[s] for s in sorted(rows)]).reset_index(drop=True)


def _read_jsonl(path: Path, skips: _Skips) -> list[dict[str, Any]]:
    """The JSON objects of a .jsonl file, one per line; a file none of whose lines is one counts as unreadable."""
    try:
        lines = read_text(path).splitlines()
    except (OSError, UnicodeDecodeError) as e:
        skips.file(path, f"{type(e).__name__}: {e}")
        return []
    out, bad = [], []
    for i, ln in enumerate(lines, 1):
        if not ln.strip():
            continue
        try:
            rec = json.loads(ln)
        except (json.JSONDecodeError, RecursionError) as e:
            bad.append((i, f"malformed JSON ({getattr(e, 'msg', 'nested too deeply')})"))
            continue
        if isinstance(rec, dict):
            out.append(rec)
        else:
            bad.append((i, "not a JSON object"))
    if bad and not out:
        skips.file(path, f"no line is a JSON object ({len(bad)} malformed; line {bad[0][0]}: {bad[0][1]})")
    else:
        for i, why in bad:
            skips.line(path, i, why)
    return out


def _read_json_object(path: Path, skips: _Skips) -> dict[str, Any]:
    """A JSON file holding one object; {} (and the file recorded as unreadable) otherwise."""
    try:
        doc = json.loads(read_text(path))
    except (OSError, ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        skips.file(path, f"{type(e).__name__}: {e}")
        return {}
    if not isinstance(doc, dict):
        skips.file(path, f"not a JSON object (a {type(doc).__name__})")
        return {}
    return doc


def _read_parquets(files, skips: _Skips, cache: FileCache | None = None) -> list[pd.DataFrame]:
    frames = []
    for f in files:
        errors: list[str] = []

        def load(f=f, errors=errors):
            try:
                with open_regular(f) as fh:
                    return pq.read_table(fh).to_pandas()
            except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a damaged file
                errors.append(f"{type(e).__name__}: {e}")
                return None

        frame = _cached(cache, Path(f), "parquet", load)
        why = (errors[0] if errors else "unreadable") if frame is None else rollout_type_problem(frame)
        if why:
            skips.file(f, why)
        else:
            frames.append(frame)
    return frames


def _empty_rollouts() -> pd.DataFrame:
    return pd.DataFrame({"step": pd.Series([], dtype="int64"), "prompt": [], "completion": []})


def _cached_jsonl(path: Path, skips: _Skips, cache: FileCache | None) -> list[dict[str, Any]]:
    """``_read_jsonl`` through the cache: a file read before and unchanged since is not read again (its skips,
    recorded the first time, are replayed)."""
    if cache is None:
        return _read_jsonl(path, skips)

    def load():
        own = _Skips()
        return _read_jsonl(path, own), own

    recs, own = cache.get(path, "jsonl", load)
    skips.entries.extend(own.entries)
    skips.files.extend(own.files)
    return recs
