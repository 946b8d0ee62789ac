"""``EvoTrainerCallback``: EvoTrainer's evidence and diagnostics inside anyone's own TRL script.

Why: most GRPO runs are not ours. One line, ``GRPOTrainer(..., callbacks=[EvoTrainerCallback()])``, gives a
plain TRL script what our jobs have: every step's metrics and every rollout recorded in our schema (a directory
``diagnose`` and ``watch`` read like one of our jobs: ``meta.json``, ``metrics.jsonl``, ``rollouts/step_*.parquet``;
default ``<output_dir>/evotrainer``), the diagnostics run every ``every`` steps (less often when they would take more
than ``max_overhead`` of training time) on what has been recorded, new
findings logged (Python logging, and MLflow when an MLflow run is active: a metric ``evotrainer/<diagnostic>`` =
1 warning / 2 critical at the step, and the findings as ``evotrainer/findings/step_<N>.json``), and training
stopped on a gate-level finding when asked (``stop_on``).

How it reads the rollouts: TRL keeps the last generation batch's prompts, completions, per-function rewards,
advantages and ``log_extra`` columns on the trainer (``GRPOTrainer._logs``, what ``log_completions`` writes); the
callback reads them after each optimiser step, so no ``log_completions`` is needed. Callbacks are not handed the
trainer, so it is found once at ``on_train_begin`` (the trainer whose callback handler holds this callback, on the
call stack), or passed as ``trainer=``. A generation batch reused across steps (``num_iterations > 1``) is recorded
once. The total ``reward`` is the weighted sum with the trainer's own ``reward_weights``; groups are exact (TRL
samples each prompt ``num_generations`` times in a row); ``correct`` is the named ``correctness`` source (a
reward function or ``log_extra`` column) or what :func:`evotrainer.evidence.mapping.detect_correctness` finds, and the
per-step ``accuracy`` metric is its mean. Lengths and truncation come from TRL's metrics.

Cost: a step's rollouts become one frame built from whole columns; writing is on a background thread
(:class:`evotrainer.evidence.model.RolloutRecorder`); a diagnosis reads only memory and is spaced by ``max_overhead``
(``bench/callback_overhead.py`` measures the step-time overhead).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import statistics
import sys
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from transformers import TrainerCallback

from evotrainer.config.harness import HarnessSpec, load_harness
from evotrainer.core import atomic
from evotrainer.core.domain import SEVERITY_RANK, Finding
from evotrainer.core.errors import ConfigError
from evotrainer.diagnostics.base import Diagnostic
from evotrainer.diagnostics.registry import Registry
from evotrainer.evidence.mapping import as_bool, detect_correctness
from evotrainer.evidence.model import Evidence, RolloutRecorder, append_metrics, truncate_after
from evotrainer.evidence.readers.base import _text as text

log = logging.getLogger("evotrainer.monitor.callback")

StopOn = Literal["gate", "warning", "critical"]


def _floats(vals: list[Any]) -> np.ndarray:
    """Numbers (possibly tensors' items, None or text) as float64, anything else as NaN."""
    try:
        return np.asarray(vals, dtype="float64")
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(vals, dtype=object), errors="coerce").to_numpy(dtype="float64")


def _text(x: Any) -> str:
    if type(x) is str:  # nearly always (plain-text prompts and completions): no call into the readers per rollout
        return x

    return text(x)


class EvoTrainerCallback(TrainerCallback):
    """Record rollout evidence in our schema, diagnose every ``every`` steps, log findings, optionally stop.

    Args:
        out_dir: where the evidence goes (default ``<output_dir>/evotrainer``); read it with ``evotrainer diagnose``
            or follow it with ``evotrainer watch``.
        every: diagnose after every ``every`` optimiser steps at most (at logging steps; and at the end).
        max_overhead: a cap on the diagnosis's share of training time (default 0.01, 1 %; None: no cap, exactly
            every ``every`` steps). A diagnosis reads the whole recorded history, so its cost grows with the run
            while a step's does not; after a diagnosis that took ``d`` seconds, at a median step of ``s`` seconds,
            the next waits ``max(every, ceil(d / (max_overhead * s)))`` steps. A finding then comes later on a
            long run of short steps, never at a cost the user did not agree to. At 0.02 the whole callback cost
            +8.5 % of a 0.34 s step here, the diagnosis about half of it; at 0.01, with the cheaper hook, +4.2 %
            (bench/log/12-detection-out-of-sample.md). At steps of a second or more (a real model) ``every`` decides, not this cap.
        background_writes: write each step's rollouts to Parquet on a background thread (default), or on the
            training thread (False: when training already keeps every core busy, a thread woken each step takes a
            core from torch's pool).
        diagnostics: names of the diagnostics to run (default: all of the harness's).
        harness: a harness YAML file (or ``HarnessSpec``) whose diagnostic parameters, user diagnostics and gate apply.
        stop_on: ``"gate"`` stops training at a finding of a gate diagnostic at or above its ``fail_at`` (the
            harness's gate, by default nan, reward_hacking, answer_spraying, length_collapse, echo,
            entropy_collapse); ``"warning"`` / ``"critical"`` at any finding of that severity; None never stops.
        correctness: the reward function or ``log_extra`` column holding strict correctness (default: found).
        mlflow: log findings to the active MLflow run, if there is one.
        trainer: the trainer, when it cannot be found on the call stack (a custom training loop).
        name: the run's name in ``meta.json`` (default: the output dir's name).
    """

    def __init__(self, out_dir: str | Path | None = None, every: int = 10, max_overhead: float | None = 0.01,
                 background_writes: bool = True, diagnostics: list[str] | None = None,
                 harness: str | Path | Any | None = None, stop_on: StopOn | None = None, correctness: str | None = None,
                 mlflow: bool = True, trainer: Any = None, name: str | None = None):
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ConfigError(f"EvoTrainerCallback(every={every!r}): a whole number of steps, at least 1")
        if max_overhead is not None and (isinstance(max_overhead, bool) or not isinstance(max_overhead, (int, float))
                                         or not 0 < max_overhead <= 1):
            raise ConfigError(f"EvoTrainerCallback(max_overhead={max_overhead!r}): a fraction of training time in "
                              "(0, 1], e.g. 0.02 for 2 %; or None to diagnose exactly every `every` steps")
        if stop_on not in (None, "gate", "warning", "critical"):
            raise ConfigError(f"EvoTrainerCallback(stop_on={stop_on!r}): use 'gate', 'warning', 'critical' or None")

        spec = harness if isinstance(harness, HarnessSpec) else (load_harness(harness) if harness else HarnessSpec())
        self.registry = Registry(spec)
        for n in diagnostics or []:
            self.registry.get(n)  # an unknown name fails here, naming the known ones
        self.names = list(diagnostics) if diagnostics else None
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.every, self.stop_on, self.correctness = every, stop_on, correctness
        self.max_overhead = float(max_overhead) if max_overhead is not None else None
        self.background_writes = bool(background_writes)
        self.use_mlflow, self.trainer, self.name = mlflow, trainer, name
        self.recorder: RolloutRecorder | None = None
        self.frames: list[pd.DataFrame] = []
        self.metric_rows: dict[int, dict[str, Any]] = {}
        self.findings: list[tuple[int, Finding]] = []  # every new finding with the step it appeared at
        self.severity: dict[tuple[str, str], str] = {}
        self.stopped_by: Finding | None = None
        self.correct_source: str | None = None
        self._fingerprint: Any = None
        self._diagnosed_at = 0
        self._next_at = every  # the first step at which the next (non-final) diagnosis may run
        self._step_ends: deque[float] = deque(maxlen=21)  # wall times of the latest step ends (and the start)
        self.diagnoses: list[tuple[int, float]] = []  # (step, seconds) of every diagnosis run
        self._accuracy: dict[int, float] = {}
        self._prompt_ids: dict[str, str] = {}
        self.meta: dict[str, Any] = {}

    # ------------------------------------------------------------------------------------------ set-up
    def _find_trainer(self) -> Any:
        from transformers import Trainer

        frame = sys._getframe(1)
        while frame is not None:
            obj = frame.f_locals.get("self")
            if isinstance(obj, Trainer) and self in getattr(obj.callback_handler, "callbacks", []):
                return obj
            frame = frame.f_back
        raise ConfigError("EvoTrainerCallback could not find its trainer on the call stack; pass it: "
                          "EvoTrainerCallback(trainer=trainer) after building the trainer")

    def on_train_begin(self, args, state, control, **kw):
        if self.trainer is None:
            self.trainer = self._find_trainer()
        t = self.trainer
        self.out_dir = self.out_dir or Path(args.output_dir) / "evotrainer"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        truncate_after(self.out_dir, state.global_step)  # a resumed run keeps what it recorded up to its checkpoint
        names = list(getattr(t, "reward_func_names", []) or [])
        weights = getattr(t, "reward_weights", None)
        weights = [float(w) for w in weights.tolist()] if weights is not None else [1.0] * len(names)
        self.weights = dict(zip(names, weights))
        self.num_generations = int(getattr(t, "num_generations", 1) or 1)
        name = self.name or Path(args.output_dir).name
        self.recorder = RolloutRecorder(self.out_dir, run_id=name)
        self._step_ends.append(time.perf_counter())  # the first step's time counts from here
        self.meta = {"name": name, "source": "EvoTrainerCallback", "status": "running",
                     "created": datetime.now(timezone.utc).isoformat(), "output_dir": str(args.output_dir),
                     "max_steps": int(state.max_steps), "reward_functions": names, "reward_weights": self.weights,
                     "num_generations": self.num_generations, "correctness": self.correctness}
        self._write_meta()

    def _write_meta(self) -> None:
        atomic.write_text(self.out_dir / "meta.json", json.dumps(self.meta, indent=2, default=str))

    # ------------------------------------------------------------------------------------------ recording
    def _batch(self, step: int) -> pd.DataFrame | None:
        logs = getattr(self.trainer, "_logs", None)
        if not logs or not len(logs.get("completion", ())):
            return None
        completions = list(logs["completion"])
        advantages = list(logs["advantages"])
        fp = hashlib.sha1(repr((completions, advantages)).encode()).hexdigest()
        if fp == self._fingerprint:
            return None  # the same generation batch as the last step (num_iterations > 1)
        self._fingerprint = fp
        n = len(completions)
        prompts = [_text(p) for p in list(logs["prompt"])[-n:]]
        # one frame built from whole columns: inserting columns one by one costs more than the rest of the hook
        cols: dict[str, Any] = {"step": np.full(n, step, dtype="int64"), "prompt": prompts,
                                "completion": [_text(c) for c in completions],
                                "advantage": _floats(advantages[-n:])}
        rewards = {f"reward_{fn}": _floats(list(vals)[-n:]) for fn, vals in logs["rewards"].items()}
        cols.update(rewards)
        for col, vals in logs["extra"].items():
            vals = list(vals)[-n:]
            if len(vals) == n and f"reward_{col}" not in cols and col not in cols:
                cols[col] = vals
        terms = [(rewards[f"reward_{fn}"], w) for fn, w in self.weights.items() if f"reward_{fn}" in rewards]
        if terms:
            vals = np.stack([v for v, _ in terms])
            total = (np.nan_to_num(vals) * np.array([w for _, w in terms])[:, None]).sum(axis=0)
            cols["reward"] = np.where(np.isnan(vals).all(axis=0), np.nan, total)
        cols["group_id"] = [f"{step}:{i // self.num_generations}" for i in range(n)]
        cols["prompt_id"] = [self._prompt_id(p) for p in prompts]
        cols["run_id"] = [self.meta.get("name", "")] * n
        df = pd.DataFrame(cols)
        self._add_correct(df)
        return df

    def _prompt_id(self, prompt: str) -> str:
        pid = self._prompt_ids.get(prompt)
        if pid is None:
            if len(self._prompt_ids) > 100_000:  # a bound on memory over a long run of fresh prompts
                self._prompt_ids.clear()
            pid = self._prompt_ids[prompt] = hashlib.sha1(prompt.encode()).hexdigest()[:16]
        return pid

    def _add_correct(self, df: pd.DataFrame) -> None:
        if self.correct_source is None:
            if self.correctness:
                src = next((c for c in (self.correctness, f"reward_{self.correctness}") if c in df), None)
                if src is None or as_bool(df[src]) is None:
                    raise ConfigError(f"EvoTrainerCallback(correctness={self.correctness!r}): no 0/1 reward function or "
                                      f"log_extra column of that name; this trainer has {', '.join(df.columns)}")
                self.correct_source, how = src, "named by correctness="
            else:
                ev = detect_correctness(Evidence(metrics=pd.DataFrame({"step": []}), rollouts=df),
                                        self.weights)
                found = (ev.meta.get("correctness") or {}).get("rollout")
                if found is None:
                    self.correct_source = ""
                    self.meta["correctness_found"] = None
                    self._write_meta()
                    return
                self.correct_source = found["source"].split("'")[1]
                how = found["how"]
            self.meta["correctness_found"] = {"source": self.correct_source, "how": how}
            self._write_meta()
        if self.correct_source and self.correct_source in df:
            b = as_bool(df[self.correct_source])
            if b is not None:
                df["correct"] = b.values

    def on_step_end(self, args, state, control, **kw):
        self._step_ends.append(time.perf_counter())
        step = state.global_step
        df = self._batch(step)
        if df is not None:
            self.frames.append(df)
            if "correct" in df:
                self._accuracy[step] = float(df["correct"].astype(float).mean())
            self.recorder.write_frame(df, wait=not self.background_writes)  # the writer keeps the schema's columns
        if getattr(args, "logging_strategy", "no") == "no":  # no on_log will come: diagnose here
            self._maybe_diagnose(step, control)
        return control

    def on_log(self, args, state, control, logs=None, **kw):
        logs = dict(logs or {})
        for k in ("total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss"):
            logs.pop(k, None)
        clean = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        clean.update({k: float("nan") for k, v in logs.items() if v is None})
        step = state.global_step
        if step in self._accuracy and "reward" in clean:
            clean["accuracy"] = self._accuracy[step]
        if clean and self.out_dir is not None:
            append_metrics(self.out_dir, step, clean)
            self.metric_rows.setdefault(step, {"step": step}).update(clean)
        if "loss" in clean or "reward" in clean:  # a training log (not an evaluation's)
            self._maybe_diagnose(step, control)
        return control

    # ------------------------------------------------------------------------------------------ diagnosis
    def evidence(self) -> Evidence:
        """What has been recorded so far, from memory."""
        rows = [self.metric_rows[s] for s in sorted(self.metric_rows)]
        metrics = pd.DataFrame(rows) if rows else pd.DataFrame({"step": pd.Series([], dtype="int64")})
        if len(self.frames) > 1:  # what earlier diagnoses joined is joined once: one concat of two frames a call
            self.frames = [pd.concat(self.frames, ignore_index=True)]
        # a shallow copy (copy-on-write): a diagnostic that adds or changes a column changes no recorded frame
        rollouts = self.frames[0].copy(deep=False) if self.frames else pd.DataFrame({"step": []})
        return Evidence(metrics=metrics, rollouts=rollouts, source="evotrainer", run=self.meta.get("name", ""),
                        meta=dict(self.meta))

    def _maybe_diagnose(self, step: int, control, final: bool = False) -> None:
        if step <= 0 or (not final and step < self._next_at) or step == self._diagnosed_at:
            return
        self._diagnosed_at = step
        t0 = time.perf_counter()
        findings = self.registry.run(self.evidence(), self.names)
        spent = time.perf_counter() - t0
        self.diagnoses.append((step, spent))
        self._next_at = step + self._gap(spent)
        new = []
        for f in findings:
            if f.severity == "info":
                continue
            key = (f.diagnostic, f.symptom)
            if self.severity.get(key) != f.severity:
                self.severity[key] = f.severity
                new.append(f)
                self.findings.append((step, f))
                log.warning("evotrainer step %d: %s %s (%s): %s", step, f.severity, f.symptom, f.diagnostic,
                            f.explanation)
        if new and self.use_mlflow:
            self._to_mlflow(step, new)
        if self.stop_on is not None and not final and self.stopped_by is None:
            hit = next((f for f in findings if self._stops(f)), None)
            if hit is not None:
                self.stopped_by = hit
                control.should_training_stop = True
                self.meta["stopped_by"] = {"step": step, "finding": hit.model_dump(mode="json")}
                self._write_meta()
                log.warning("evotrainer: stopping training at step %d on %s %s (stop_on=%s)", step, hit.severity,
                            hit.symptom, self.stop_on)

    def _gap(self, spent: float) -> int:
        """Steps until the next diagnosis: ``every``, or more when ``max_overhead`` says so."""
        ends = list(self._step_ends)
        if self.max_overhead is None or len(ends) < 3:
            return self.every
        step_s = statistics.median(b - a for a, b in zip(ends, ends[1:]))
        if step_s <= 0:
            return self.every
        return max(self.every, math.ceil(spent / (self.max_overhead * step_s)))

    def _stops(self, f: Finding) -> bool:
        if f.severity == "info" or f.symptom == "diagnostic_error" or Diagnostic.insufficient(f):
            return False
        if self.stop_on == "gate":
            return any(r.diagnostic == f.diagnostic and SEVERITY_RANK[f.severity] >= SEVERITY_RANK[r.fail_at]
                       for r in self.registry.harness.diagnostics.gate)
        return SEVERITY_RANK[f.severity] >= SEVERITY_RANK[self.stop_on]

    def _to_mlflow(self, step: int, new: list[Finding]) -> None:
        mlflow = sys.modules.get("mlflow")  # an active run means mlflow is imported; never import it here
        if mlflow is None or mlflow.active_run() is None:
            return
        try:
            mlflow.log_metrics({f"evotrainer/{f.diagnostic}": float(SEVERITY_RANK[f.severity]) for f in new}, step=step)
            mlflow.log_dict({"step": step, "findings": [f.model_dump(mode="json") for f in new]},
                            f"evotrainer/findings/step_{step:06d}.json")
        except Exception as err:  # noqa: BLE001 - a tracking hiccup must not stop training
            log.warning("evotrainer: could not log findings to MLflow: %s", err)

    def on_train_end(self, args, state, control, **kw):
        self._maybe_diagnose(state.global_step, control, final=True)
        if self.recorder is not None:
            self.recorder.close()
        if self.out_dir is not None and self.meta:
            self.meta["status"] = "stopped" if self.stopped_by is not None else "finished"
            self.meta["steps_done"] = int(state.global_step)
            self._write_meta()
        return control

