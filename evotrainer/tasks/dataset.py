"""A task from a user's dataset file: JSONL, JSON, Parquet, CSV, or a directory written by ``datasets.save_to_disk``.

An RL engineer arrives with a dataset, not a generator. Every format is read by the ``datasets`` library (never a
parser of our own); the rows become :class:`Problem` s once, in this process, and the task then behaves as a
built-in one: the train split and the held-out share are fixed by a hash of each row's id (the same under every
seed and on every machine, so the three held-out splits of :mod:`evotrainer.training.evaluation` are disjoint from train),
and sampling is a seeded shuffle of the rows of a split, so a larger ``n`` extends a smaller one.

Prompts are taken as they are: any Unicode, newlines included, or chat messages in TRL's conversational format
(``[{"role": ..., "content": ...}, ...]``). Only the built-in character-level policies refuse characters outside
their alphabet, before training (:func:`evotrainer.tasks.check_alphabet`).

Bad input is refused when the task is built, naming the file and the field: a missing or unreadable file, a field
that does not exist (with the fields that do), an empty dataset, text that is not UTF-8, and rows with a null
prompt or answer (counted; ``skip_null: true`` skips them). Duplicate rows (the same id) are counted and dropped.
"""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from evotrainer.core.errors import TaskError
from evotrainer.tasks import verifiers
from evotrainer.tasks.base import Problem, Split, Task, TaskOptions, Verdict, stable_unit

FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
"""File suffix -> the ``datasets`` builder that reads it; a directory is read with ``load_from_disk``."""
_TEXT_FORMATS = (".jsonl", ".json", ".csv")
_LOADED: dict[tuple, tuple[list[Problem], dict[str, Any]]] = {}  # per process: rows are parsed once


def looks_like_dataset(name: str) -> bool:
    """Whether a task name is a dataset path (a known suffix, or a ``save_to_disk`` directory)."""
    p = Path(name)
    return p.suffix.lower() in FORMATS or (p.is_dir() and (p / "dataset_info.json").is_file()) or \
        (p.is_dir() and (p / "dataset_dict.json").is_file())


class DatasetOptions(TaskOptions):
    path: str = Field(..., min_length=1, description="The dataset: a .jsonl/.json/.parquet/.csv file or a directory "
                                                     "written by datasets' save_to_disk.")
    prompt: str = Field("prompt", min_length=1, description="Column of the prompt: text, or chat messages in TRL's "
                                                             "conversational format.")
    answer: str = Field("answer", min_length=1, description="Column of the reference answer.")
    id: str | None = Field(None, description="Column of a stable row id; without it, a hash of the prompt (so a prompt "
                                              "given twice is one problem, and never in two splits).")
    difficulty: str | None = Field(None, description="Column of a difficulty: integers are levels as they are, labels "
                                                      "become levels 1..k in sorted order; without it, one level.")
    system: str | None = Field(None, description="System prompt for chat models (a conversational prompt keeps its own).")
    verifier: str = Field("exact", min_length=1, description="exact, numeric, math, or 'package.module:function' "
                                                             "((completion, row) -> float in [0, 1]).")
    tolerance: float = Field(1e-6, ge=0.0, description="numeric verifier: allowed difference (relative above 1).")
    split: str | None = Field(None, description="Split of a save_to_disk DatasetDict; default 'train' or its only one.")
    skip_null: bool = Field(False, description="Skip rows whose prompt or answer is null instead of refusing them.")
    heldout_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="Share of rows (by id hash) held out for "
                                                                      "evaluation; the three held-out splits share it.")

    @field_validator("path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        return str(Path(v).expanduser().resolve())


def _check_utf8(path: Path) -> None:
    """A clear error at the first byte that is not UTF-8 (``datasets`` would fail deep inside pyarrow)."""
    import codecs

    decoder, offset = codecs.getincrementaldecoder("utf-8")(), 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                raise TaskError(f"dataset {path}: byte {offset + exc.start} is not UTF-8 ({exc.reason}); "
                                "save the file as UTF-8") from None
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise TaskError(f"dataset {path}: the file ends inside a UTF-8 character ({exc.reason})") from None


def read_rows(path: str, split: str | None = None):
    """The rows of a dataset file or ``save_to_disk`` directory, as a ``datasets.Dataset`` held in memory."""
    import datasets

    p = Path(path)
    if not p.exists():
        raise TaskError(f"dataset {p} does not exist; give a .jsonl, .json, .parquet or .csv file or a directory "
                        "written by datasets' save_to_disk")
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    if p.is_dir():
        try:
            ds = datasets.load_from_disk(str(p), keep_in_memory=True)
        except Exception as exc:  # noqa: BLE001 - whatever datasets says, the user gets one line naming the directory
            raise TaskError(f"dataset {p}: not a directory written by datasets' save_to_disk ({exc})") from None
        if isinstance(ds, datasets.DatasetDict):
            names = list(ds)
            name = split or ("train" if "train" in ds else names[0] if len(names) == 1 else None)
            if name not in ds:
                raise TaskError(f"dataset {p} has splits {', '.join(names)}; choose one with the option split=NAME")
            ds = ds[name]
        elif split is not None:
            raise TaskError(f"dataset {p} has no splits; leave out the option split")
        return ds
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise TaskError(f"dataset {p}: unknown format '{suffix}'; allowed: {', '.join(FORMATS)} or a save_to_disk "
                        "directory")
    if not p.is_file():
        raise TaskError(f"dataset {p} is not a regular file")
    if p.stat().st_size == 0:
        raise TaskError(f"dataset {p} is empty (0 bytes)")
    try:
        if suffix in _TEXT_FORMATS:
            _check_utf8(p)
        with tempfile.TemporaryDirectory(prefix="evotrainer-ds-") as cache:  # nothing left in the HF cache
            extra = {"keep_default_na": False} if suffix == ".csv" else {}  # an answer 'NA' or 'None' is text
            return datasets.load_dataset(FORMATS[suffix], data_files=str(p), split="train", cache_dir=cache,
                                         keep_in_memory=True, **extra)
    except TaskError:
        raise
    except PermissionError:
        raise TaskError(f"dataset {p} cannot be read (permission denied)") from None
    except Exception as exc:  # noqa: BLE001 - a malformed file of any format is one clear line
        cause = exc.__cause__ or exc
        raise TaskError(f"dataset {p}: the {FORMATS[suffix]} reader failed: {type(cause).__name__}: "
                        f"{str(cause)[:300]}") from None


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


def _jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(dict(row), default=str))


def _levels(values: list[Any], field: str, path: str) -> tuple[list[int], dict[str, int] | None]:
    """Each row's level: integers as they are, labels mapped to 1..k in sorted order (the mapping returned)."""
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return [int(v) for v in values], None
    if all(isinstance(v, str) and v.strip().lstrip("-").isdigit() for v in values):  # a CSV's integers
        return [int(v) for v in values], None
    if all(isinstance(v, str) for v in values):
        labels = {label: i + 1 for i, label in enumerate(sorted(set(values)))}
        return [labels[v] for v in values], labels
    kinds = sorted({type(v).__name__ for v in values})
    raise TaskError(f"dataset {path}: difficulty column '{field}' holds {', '.join(kinds)}; it must hold integers "
                    "or text labels (and no nulls)")


def _build(o: DatasetOptions) -> tuple[list[Problem], dict[str, Any]]:
    ds = read_rows(o.path, o.split)
    columns = list(ds.column_names)
    if len(ds) == 0:
        raise TaskError(f"dataset {o.path} is empty (columns: {', '.join(columns) or 'none'})")
    for option in ("prompt", "answer", "id", "difficulty"):
        col = getattr(o, option)
        if col is not None and col not in columns:
            raise TaskError(f"dataset {o.path}: {option} field '{col}' does not exist; its fields are: "
                            f"{', '.join(columns)} (set it with --task-opt {option}=FIELD)")
    rows = ds.to_list()
    nulls = [i for i, r in enumerate(rows) if r[o.prompt] is None or r[o.answer] is None
             or (isinstance(r[o.prompt], str) and not r[o.prompt].strip())]
    if nulls and not o.skip_null:
        raise TaskError(f"dataset {o.path}: {len(nulls)} of {len(rows)} rows have a null or empty {o.prompt!r} or "
                        f"{o.answer!r} (rows {', '.join(map(str, nulls[:5]))}{'...' if len(nulls) > 5 else ''}); "
                        "fix them, or skip them with --task-opt skip_null=true")
    skip = set(nulls)
    kept = [(i, r) for i, r in enumerate(rows) if i not in skip]
    if not kept:
        raise TaskError(f"dataset {o.path}: every row has a null prompt or answer")
    levels, labels = ([1] * len(kept), None) if o.difficulty is None else \
        _levels([r[o.difficulty] for _, r in kept], o.difficulty, o.path)
    problems: list[Problem] = []
    seen: set[str] = set()
    duplicates = 0
    for (i, r), level in zip(kept, levels, strict=True):
        raw = r[o.prompt]
        if _is_messages(raw):
            messages = [{"role": m["role"], "content": m["content"]} for m in raw]
            text = next((m["content"] for m in reversed(messages) if m["role"] == "user"), messages[-1]["content"])
        elif isinstance(raw, str):
            messages, text = None, raw
        else:
            raise TaskError(f"dataset {o.path}: row {i}'s {o.prompt!r} is a {type(raw).__name__}; a prompt is text or "
                            "chat messages [{role, content}, ...]")
        answer = r[o.answer] if isinstance(r[o.answer], str) else json.dumps(r[o.answer], default=str)
        if o.id is not None and r[o.id] is not None:
            pid = str(r[o.id])
        else:
            blob = json.dumps(messages or text, ensure_ascii=False, sort_keys=True)  # the prompt alone: one split
            pid = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
        if pid in seen:
            duplicates += 1
            continue
        seen.add(pid)
        meta: dict[str, Any] = {"row": _jsonable(r), "index": i}
        if messages is not None:
            meta["messages"] = messages
        problems.append(Problem(id=pid, prompt=text, answer=answer, difficulty=level, meta=meta))
    report = {"rows": len(rows), "skipped_null": len(nulls), "duplicates": duplicates, "columns": columns,
              "labels": labels}
    return problems, report


class DatasetTask(Task):
    """Problems read from a dataset file; see the module docstring."""

    name = "dataset"
    description = "Rows of a user's dataset (JSONL, JSON, Parquet, CSV, save_to_disk), judged by a named verifier."
    difficulty_doc = "the dataset's difficulty column (one level without it)"
    min_difficulty = 1
    max_difficulty = 1
    default_difficulty = 1
    Options = DatasetOptions

    def __init__(self, options=None) -> None:
        super().__init__(options)
        o: DatasetOptions = self.options  # type: ignore[assignment]
        self.heldout = o.heldout_fraction
        self._judge = verifiers.resolve(o.verifier, o.tolerance)
        p = Path(o.path)
        try:
            st = p.stat()
            stamp = (st.st_mtime_ns, st.st_size) if p.is_file() else \
                tuple(sorted((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in p.iterdir()))
        except OSError:
            stamp = ()
        key = (o.model_dump_json(), stamp)
        if key not in _LOADED:
            if len(_LOADED) >= 8:
                _LOADED.clear()
            _LOADED[key] = _build(o)
        self.problems, self.report = _LOADED[key]
        levels = sorted({p.difficulty for p in self.problems})
        self.min_difficulty, self.max_difficulty = levels[0], levels[-1]
        self.default_difficulty = levels[0]
        self._by_level: dict[int, list[Problem]] = {}
        for prob in self.problems:
            self._by_level.setdefault(prob.difficulty, []).append(prob)

    def default_range(self) -> tuple[int, int]:
        """Every level of the dataset: its rows are the task, not one level of a generator."""
        return self.min_difficulty, self.max_difficulty

    def split_of(self, problem: Problem) -> Split:
        return "heldout" if stable_unit(problem.id) < self.heldout else "train"

    def split_sizes(self, difficulty_range: tuple[int, int] | None = None) -> dict[str, int]:
        low, high = difficulty_range or self.default_range()
        sizes = {"train": 0, "heldout": 0}
        for p in self.problems:
            if low <= p.difficulty <= high:
                sizes[self.split_of(p)] += 1
        return sizes

    def sample(self, split: Split, n: int, seed: int, difficulty_range: tuple[int, int] | None = None) -> list[Problem]:
        """Up to ``n`` rows of ``split`` at the levels of ``difficulty_range`` (all levels when None), in a shuffle
        fixed by ``seed``: prefix-consistent, never a duplicate."""
        if split not in ("train", "heldout"):
            raise TaskError(f"task '{self.name}': split {split!r} is not one of train, heldout")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise TaskError(f"task '{self.name}': number of problems must be an integer >= 0, not {n!r}")
        low, high = self._check_range(difficulty_range or self.default_range())
        rows = [p for p in self.problems if low <= p.difficulty <= high and self.split_of(p) == split]
        key = f"{self.name}|{split}|{seed}|{low}|{high}"
        random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")).shuffle(rows)
        return rows[:n]

    def generate(self, rng: random.Random, difficulty: int) -> Problem:
        rows = self._by_level.get(self.check_difficulty(difficulty))
        if not rows:
            raise TaskError(f"dataset {self.options.path} has no rows at level {difficulty}; its levels are "
                            f"{', '.join(map(str, sorted(self._by_level)))}")
        return rng.choice(rows)

    def max_answer_chars(self, difficulty: int) -> int:
        self.check_difficulty(difficulty)
        return max(len(p.answer) for p in self._by_level.get(difficulty, self.problems))

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return verifiers.safe_verdict(self._judge, completion, problem.answer, problem.meta.get("row", {}))

    def chat_messages(self, problem: Problem) -> list[dict[str, str]]:
        o: DatasetOptions = self.options  # type: ignore[assignment]
        messages = problem.meta.get("messages") or [{"role": "user", "content": problem.prompt}]
        if o.system and not any(m["role"] == "system" for m in messages):
            messages = [{"role": "system", "content": o.system}, *messages]
        return messages

    def info(self):
        info = super().info()
        labels = self.report.get("labels")
        doc = f"levels {self.min_difficulty}..{self.max_difficulty}"
        if labels:
            doc += " from labels " + ", ".join(f"{k}={v}" for k, v in labels.items())
        return info.model_copy(update={"difficulty_doc": doc, "heldout_fraction": self.heldout,
                                       "min_difficulty": self.min_difficulty, "max_difficulty": self.max_difficulty,
                                       "default_difficulty": self.default_difficulty})
