"""Readers: one ``Evidence`` from whatever made the run (EvoTrainer, an MLflow run, TRL, verl).

Why: diagnostics read one evidence model (metrics under TRL's names, rollouts in ``ROLLOUT_SCHEMA``
columns) and never care who made the run. Each reader maps its tool's files onto that model and leaves
out what the tool does not record (a missing ``correct`` column makes diagnostics say "not enough
evidence" instead of guessing). Unreadable files and malformed lines are skipped and listed in
``Evidence.meta["skipped"]`` ("path: reason" or "path:line: reason"); the files of which nothing at all could be
read are also in ``Evidence.meta["unreadable"]``. :func:`require_readable` turns evidence that is all unreadable
into an error (``diagnose`` must not report "no finding" on files it could not read); nothing here executes or
unpickles anything.

**TRL** (``GRPOTrainer`` output dir, ``log_completions=True``): ``completions/completions_{step:05d}.parquet``
with columns ``step, prompt, completion, <reward function names>, <log_extra columns>, advantage`` (prompt and
completion are strings or ``[{"role", "content"}]`` conversations), and ``trainer_state.json`` (top level
or in the latest ``checkpoint-*/``) whose ``log_history`` gives the metrics. Reward columns are told from
extra columns by the ``rewards/<name>/mean`` metric keys. ``reward`` is the *unweighted* sum of the reward
columns: TRL keeps ``reward_weights`` only in the pickled ``training_args.bin``, which we do not load.
``group_id`` is ``<step>:<k>`` with k counting prompt changes (TRL writes each prompt's completions
consecutively). ``reward`` is the *weighted* sum instead when the weights can be solved from ``log_history``
(:func:`evotrainer.evidence.mapping.infer_reward_weights`; ``meta["reward_weights"]``). Extra columns (``log_extra``) are
kept under their own names. ``correct`` is whatever :func:`evotrainer.evidence.mapping.detect_correctness` finds (a 0/1
``log_extra`` column or reward function named like correctness, a zero-weight 0/1 reward function); otherwise it
is left out.

**verl**: ``trainer.rollout_data_dir`` holds ``{step}.jsonl`` (``RayPPOTrainer._dump_generations``: one
object per completion with ``input, output, gts, score, step`` plus the reward function's
``reward_extra_info`` keys, e.g. ``acc``, kept as columns under their own names, and a 0/1 one named like
correctness becomes ``correct``); the file logger (``trainer.logger=[file]``, ``FileLogger`` in
``verl/utils/tracking.py``) writes ``{"step": N, "data": {metric: value}}`` lines to
``$VERL_FILE_LOGGER_PATH`` or ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``. A verl run dir is a
directory holding either, directly or one level down. verl dumps rollouts *after* ``balance_batch``
reorders the batch, so groups are identical prompts within a step (not consecutive rows). Metric names
mapped onto TRL's (all other verl keys are kept under their own names):

==============================  =========================  ==============================================
verl                            TRL                        why it is the same quantity
==============================  =========================  ==============================================
critic/score/mean               reward                     reward-function score before any KL penalty
                                                           (critic/rewards/mean is after the in-reward
                                                           KL penalty: kept as is). verl logs no std.
actor/entropy                   entropy                    mean token entropy of the rollout policy
actor/kl_loss                   kl                         KL(policy ‖ reference), as TRL's ``kl``;
actor/reward_kl_penalty         kl (if no kl_loss)         same, in-reward variant. actor/ppo_kl is
                                                           KL(old ‖ new policy): not TRL's kl, kept.
actor/pg_loss                   policy_loss                policy-gradient term of the loss
actor/grad_norm                 grad_norm
actor/lr                        learning_rate
actor/pg_clipfrac               clip_ratio/region_mean     share of tokens where the clipped branch won
response_length/mean|min|max    completions/{mean,min,max}_length
response_length/clip_ratio      completions/clipped_ratio  share of responses at max length
timing_s/step                   step_time                  seconds of the whole step
==============================  =========================  ==============================================
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from evotrainer.core.errors import RunNotFound, UnreadableEvidence
from evotrainer.core.files import check_regular, first_line, open_regular, read_text
from evotrainer.core.home import resolve_run
from evotrainer.core.redact import mask
from evotrainer.core.runmeta import read_run_meta
from evotrainer.evidence.mapping import FieldMap, apply_field_map, detect_correctness, infer_reward_weights
from evotrainer.evidence.model import (
    LENGTH_KEYS,
    ROLLOUT_SCHEMA,
    TRUNCATED_KEYS,
    VERL_METRICS,
    Evidence,
    is_step,
    read_metrics,
    read_rollouts,
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
_RUN_ID = re.compile(r"[0-9a-f]{32}")


def load_evidence(ref: str | Path, home: Path | None = None, fields: FieldMap | None = None,
                  cache: FileCache | None = None) -> Evidence:
    """Evidence from a job dir, a job name / run id under ``home``, an MLflow run id, a TRL or verl dir; ``fields``:
    the user's names for contract fields (applied before correctness is looked for); ``cache``: reuse what was
    read of unchanged files (``watch`` re-reads a growing run every second)."""
    p = Path(ref).expanduser()
    if p.is_dir():
        kind = run_kind(p)
        if kind == "evotrainer":
            return read_job_dir(p, fields, cache)
        if kind == "trl":
            return read_trl_dir(p, fields, cache)
        if kind == "verl":
            return read_verl_dir(p, fields, cache)
        raise RunNotFound(f"{p} holds no run files we know; accepted: {ACCEPTED}")
    if home is not None:
        try:
            return read_job_dir(resolve_run(home, str(ref)), fields, cache)
        except RunNotFound:
            pass
        if _RUN_ID.fullmatch(str(ref)) and (os.environ.get("EVOTRAINER_MLFLOW_URI") or (home / "mlflow.db").is_file()):
            return read_mlflow_run(str(ref), home, fields)
    where = f" (home {home})" if home is not None else " (no home given, so only directories)"
    raise RunNotFound(f"no run '{ref}'{where}; accepted: {ACCEPTED}")


def run_kind(p: Path) -> str | None:
    """'evotrainer' (a job dir, or what EvoTrainerCallback records), 'trl', 'verl', or None for a directory that
    holds none of their files (yet)."""
    if (p / "meta.json").is_file():
        return "evotrainer"
    if _trl_state_file(p) or any((p / "completions").glob("completions_*.parquet")):
        return "trl"
    if _verl_rollout_dir(p) or _verl_metric_files(p):
        return "verl"
    return None


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


# ---------------------------------------------------------------------------------------------- helpers
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


# ------------------------------------------------------------------------------------- our jobs, MLflow
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


def read_mlflow_run(run_id: str, home: Path, fields: FieldMap | None = None) -> Evidence:
    """A run in the tracking store (SQLite under ``home`` or ``$EVOTRAINER_MLFLOW_URI``): metric histories
    pivoted by step, rollouts from the run's ``rollouts/`` artifacts. Uses the client directly rather than
    ``Tracker`` so that reading never creates an experiment on a shared server."""
    os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from evotrainer.core.tracking import tracking_uri

    uri = tracking_uri(home)
    try:
        client = MlflowClient(tracking_uri=uri)
        run = client.get_run(run_id)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise RunNotFound(f"no MLflow run '{run_id}' in {mask(uri)}; accepted: {ACCEPTED}") from None
        # an unreachable server, a URI MLflow cannot use: not "no such run", say what went wrong
        raise RunNotFound(f"could not read MLflow run '{run_id}' from {mask(uri)} ($EVOTRAINER_MLFLOW_URI: a tracking "
                          f"server such as http://host:5000, or unset for HOME's mlflow.db): "
                          f"{mask(str(e.message).strip().splitlines()[0][:300])}") from None
    rows: dict[int, dict[str, Any]] = {}
    for key in run.data.metrics:
        for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.timestamp):
            rows.setdefault(int(m.step), {"step": int(m.step)})[key] = m.value
    skips = _Skips()
    with tempfile.TemporaryDirectory() as tmp:
        files: list[Path] = []
        try:
            if client.list_artifacts(run_id, "rollouts"):
                files = sorted(Path(client.download_artifacts(run_id, "rollouts", tmp)).glob("*.parquet"))
        except (MlflowException, OSError) as e:
            skips.file(Path(f"mlflow:{run_id}/rollouts"), str(e))
        frames = _read_parquets(files, skips)
    rollouts = pd.concat(frames, ignore_index=True) if frames else ROLLOUT_SCHEMA.empty_table().to_pandas()
    meta = {"run_id": run_id, "tracking_uri": mask(tracking_uri(home)), "status": run.info.status,
            "tags": dict(run.data.tags), **skips.meta()}
    return _resolve(Evidence(metrics=_metrics_frame(rows), rollouts=rollouts, source="mlflow",
                             run=run.info.run_name or run_id, meta=meta), fields)


# ------------------------------------------------------------------------------------------------- TRL
def _trl_state_file(path: Path) -> Path | None:
    """The newest trainer_state.json: top level or latest checkpoint-N/, whichever has the larger global_step."""
    cands = [path / "trainer_state.json"]
    ckpts = [d for d in path.glob("checkpoint-*") if d.name.split("-", 1)[1].isdigit()]
    if ckpts:
        cands.append(max(ckpts, key=lambda d: int(d.name.split("-", 1)[1])) / "trainer_state.json")
    found = [c for c in cands if os.path.lexists(c)]  # one that is no regular file is read, and listed unreadable
    found.sort(key=_global_step, reverse=True)  # stable: the top-level file wins a tie
    return found[0] if found else None


def _global_step(state_file: Path) -> int:
    try:
        return int(json.loads(read_text(state_file)).get("global_step", -1))
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        return -1


def read_trl_dir(path: str | Path, fields: FieldMap | None = None, cache: FileCache | None = None) -> Evidence:
    path = Path(path)
    skips = _Skips()
    state_file = _trl_state_file(path)
    files = sorted((path / "completions").glob("completions_*.parquet"))
    if state_file is None and not files:
        raise RunNotFound(f"{path} is not a TRL output dir: no trainer_state.json (top level or checkpoint-*/) "
                          "and no completions/completions_*.parquet (set log_completions=True)")
    history: Any = []
    if state_file is not None:
        history = _read_json_object(state_file, skips).get("log_history", [])
        if not isinstance(history, list):
            skips.file(state_file, f"log_history is not a list (a {type(history).__name__})")
            history = []
    rows: dict[int, dict[str, Any]] = {}
    for e in history:  # train and eval_* entries merge by step; the final train_runtime summary is dropped
        step = e.get("step") if isinstance(e, dict) else None
        if is_step(step) and "train_runtime" not in e:
            rows.setdefault(step, {"step": step}).update({k: v for k, v in e.items() if k != "step"})
    names = list(dict.fromkeys(k[len("rewards/"):-len("/mean")] for r in rows.values() for k in r
                               if k.startswith("rewards/") and k.endswith("/mean")))
    metrics = _metrics_frame(rows)
    weights = infer_reward_weights(metrics, names)
    frames = []
    for f in files:
        raw = next(iter(_read_parquets([f], skips, cache)), None)
        if raw is None:
            continue
        if {"step", "prompt", "completion"} <= set(raw.columns):  # one file is one logged step: converted alone
            frames.append(_cached(cache, f, f"trl:{names}:{weights}", lambda raw=raw: _trl_rollouts(raw, names, weights)))
        else:
            skips.file(f, "missing step/prompt/completion columns")
    rollouts = pd.concat(frames, ignore_index=True) if frames else _empty_rollouts()
    meta = {"path": str(path), "trainer_state": str(state_file) if state_file else None,
            "reward_functions": names, **skips.meta()}
    if weights is not None:
        meta["reward_weights"] = weights
        meta["reward_weights_from"] = "solved from trainer_state.json: reward = sum of weight x rewards/<name>/mean"
    return _resolve(Evidence(metrics=metrics, rollouts=rollouts, source="trl", run=path.name, meta=meta), fields,
                    weights)


def _trl_rollouts(raw: pd.DataFrame, names: list[str], weights: dict[str, float] | None = None) -> pd.DataFrame:
    """One TRL completions table in our columns: reward functions as ``reward_<name>``, ``reward`` their
    weighted sum (``weights``) or, without weights, their plain sum; other columns kept under their names."""
    known = set(LENGTH_KEYS + TRUNCATED_KEYS) | {"step", "advantage"}
    rcols = [n for n in names if n in raw] or [  # without trainer_state.json: the float columns
        c for c in raw.columns if c not in known and pd.api.types.is_float_dtype(raw[c])]
    out = pd.DataFrame({"step": pd.to_numeric(raw["step"], errors="coerce").fillna(-1).astype("int64"),
                        "prompt": raw["prompt"].map(_text),
                        "completion": raw["completion"].map(_text)})
    for c in rcols:
        out[f"reward_{c}"] = pd.to_numeric(raw[c], errors="coerce")
    if rcols:
        w = [weights.get(c, 1.0) if weights else 1.0 for c in rcols]
        out["reward"] = (out[[f"reward_{c}" for c in rcols]] * w).sum(axis=1, min_count=1)
    if "advantage" in raw:
        out["advantage"] = pd.to_numeric(raw["advantage"], errors="coerce")
    return _finish(out, raw, consecutive=True, exclude=[*rcols, "step", "prompt", "completion", "advantage"])


# ------------------------------------------------------------------------------------------------ verl
def _numbered(d: Path) -> list[Path]:
    return sorted((f for f in d.glob("*.jsonl") if _NUMBERED.fullmatch(f.name)), key=lambda f: int(f.stem))


def _verl_rollout_dir(path: Path) -> Path | None:
    """``path`` if it holds {step}.jsonl dumps, else a subdirectory that does (``rollout*`` first, ``val*`` never)."""
    if _numbered(path):
        return path
    subs = sorted((d for d in path.iterdir() if d.is_dir() and not d.name.lower().startswith("val")),
                  key=lambda d: ("rollout" not in d.name.lower(), d.name))
    return next((d for d in subs if _numbered(d)), None)


def _verl_metric_files(path: Path) -> list[Path]:
    """File-logger outputs in ``path`` or one level down: .jsonl whose first object has ``step`` and ``data``."""
    out = []
    for f in sorted([*path.glob("*.jsonl"), *path.glob("*/*.jsonl")]):
        if _NUMBERED.fullmatch(f.name):
            continue
        try:
            rec = json.loads(first_line(f))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(rec, dict) and "step" in rec and isinstance(rec.get("data"), dict):
            out.append(f)
    return out


def read_verl_dir(path: str | Path, fields: FieldMap | None = None, cache: FileCache | None = None) -> Evidence:
    path = Path(path)
    skips = _Skips()
    rdir = _verl_rollout_dir(path) if path.is_dir() else None
    mfiles = _verl_metric_files(path) if path.is_dir() else []
    if rdir is None and not mfiles:
        raise RunNotFound(f"{path} is not a verl run dir: no {{step}}.jsonl rollout dumps (trainer.rollout_data_dir) "
                          "and no file-logger .jsonl with {\"step\": N, \"data\": {...}} lines, here or one level down")
    rows: dict[int, dict[str, Any]] = {}
    for f in mfiles:
        for rec in _cached_jsonl(f, skips, cache):
            if not isinstance(rec.get("data"), dict) or not is_step(rec.get("step")):
                skips.entries.append(f"{f}: a line without an integer step in [0, 2**53) and a data object")
                continue
            data = {k: v for k, v in rec["data"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            for src, dst in VERL_METRICS:
                if src in data and dst not in data:
                    data[dst] = data.pop(src)
            rows.setdefault(rec["step"], {"step": rec["step"]}).update(data)
    records = []
    for f in _numbered(rdir) if rdir else []:
        for rec in _cached_jsonl(f, skips, cache):
            records.append({"step": int(f.stem), **rec})
    if records:
        raw = pd.DataFrame(records)
        out = pd.DataFrame({"step": pd.to_numeric(raw["step"], errors="coerce").fillna(-1).astype("int64"),
                            "prompt": raw.get("input", pd.Series([""] * len(raw))).map(_text),
                            "completion": raw.get("output", pd.Series([""] * len(raw))).map(_text)})
        if "score" in raw:
            out["reward"] = pd.to_numeric(raw["score"], errors="coerce")
        rollouts = _finish(out, raw, consecutive=False, exclude=["step", "input", "output", "score"])
    else:
        rollouts = _empty_rollouts()
    meta = {"path": str(path), "rollout_dir": str(rdir) if rdir else None,
            "metric_files": [str(f) for f in mfiles], **skips.meta()}
    return _resolve(Evidence(metrics=_metrics_frame(rows), rollouts=rollouts, source="verl", run=path.name, meta=meta),
                    fields)


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
