"""Watching a run while it trains: re-diagnose as evidence arrives and report each new finding once.

Why: a diagnosis after the run has finished tells you which GPU hours were wasted; the same findings while it
trains tell you when to stop. ``evotrainer watch RUN_OR_DIR`` follows one of our jobs (or a directory written by
:class:`evotrainer.monitor.callback.EvoTrainerCallback`), a TRL ``GRPOTrainer`` output dir or a verl dump dir — whatever
``diagnose`` reads — and:

- checks the run's files every ``interval`` seconds, reading only files that are new or changed
  (:class:`evotrainer.evidence.readers.FileCache`: a step's Parquet file is read once however long the watch);
- diagnoses when ``every`` new steps have arrived (and once more when the run ends), with the harness's
  diagnostics, the same registry and field map as ``diagnose``;
- reports a warning or critical finding the first time its (diagnostic, symptom) appears, and again only when its
  severity changes — a finding that persists for 300 steps is printed once;
- ends at the first finding at or above ``fail_on`` (exit 1), when the run ends (``until_finished``), after
  ``timeout`` seconds, after ``idle`` seconds without a new step, or on Ctrl-C / SIGTERM (exit 130), always
  with a last line saying why.

A file being written when it is read (TRL writes its Parquet and ``trainer_state.json`` in place) fails to read;
it is retried at the next check and reported only if it still cannot be read ``settle_s`` seconds after its last
change. How a run says it has ended: our jobs and the callback's directories set ``status`` in ``meta.json``; a
TRL dir's newest ``trainer_state.json`` reaches its ``max_steps`` (TRL saves a checkpoint at the last step when
saving by steps); verl dumps have no end marker, so ``until_finished`` there needs ``idle``. A TRL dir's
per-step metrics arrive with each checkpoint (``trainer_state.json``), its rollouts with each logging step; the
callback writes both every step.
"""

from __future__ import annotations

import json
import re
import signal
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evotrainer.core.domain import SEVERITY_RANK, Finding
from evotrainer.core.errors import ConfigError, RunNotFound
from evotrainer.core.files import read_text
from evotrainer.evidence.mapping import FieldMap
from evotrainer.evidence.model import Evidence
from evotrainer.evidence.readers import FileCache, load_evidence, run_kind


@dataclass
class Seen:
    """A finding as it first appeared (or changed severity)."""

    finding: Finding
    step: int
    seconds: float


@dataclass
class WatchOutcome:
    stopped: str  # fail_on | finished | timeout | idle | interrupted
    exit_code: int
    seen: list[Seen] = field(default_factory=list)
    evidence: Evidence | None = None
    diagnoses: int = 0


def last_step(ev: Evidence) -> int:
    steps = [int(f["step"].max()) for f in (ev.metrics, ev.rollouts) if "step" in f.columns and len(f)
             and f["step"].notna().any()]
    return max(steps, default=0)


def run_finished(ev: Evidence) -> bool | None:
    """True when the run says it has ended, False when it says it has not, None when it cannot say (verl)."""
    meta = ev.meta if isinstance(ev.meta, dict) else {}
    if ev.source == "evotrainer":
        return meta.get("status") not in (None, "running")
    if ev.source == "trl" and meta.get("trainer_state"):
        try:
            state = json.loads(read_text(meta["trainer_state"]))
            return int(state.get("global_step", -1)) >= int(state.get("max_steps", 1 << 62)) > 0
        except (OSError, ValueError, TypeError, AttributeError, RecursionError):
            return False
    if ev.source == "trl":
        return False
    return None


class Watcher:
    """One run followed over time (see the module docstring); :meth:`check` is one look, :meth:`run` the loop."""

    def __init__(self, ref: str, home: Path | None, registry, names: list[str] | None = None,
                 fields: FieldMap | None = None, every: int = 1, settle_s: float = 5.0):
        self.ref, self.home, self.registry, self.names = ref, home, registry, names
        self.fields, self.every, self.settle_s = fields, max(1, every), settle_s
        self.cache = FileCache()
        self.severity: dict[tuple[str, str], str] = {}
        self.diagnosed_at: int | None = None
        self.diagnoses = 0
        self.evidence: Evidence | None = None
        self.reported_unreadable: set[str] = set()
        self.started = time.monotonic()

    def read(self) -> Evidence | None:
        """The run's evidence now, or None while the run (or any of its files) does not exist yet."""
        p = Path(self.ref).expanduser()
        if p.is_dir() and run_kind(p) is None:
            return None
        if not p.is_dir() and (self.home is None or "/" in self.ref):
            return None
        try:
            return load_evidence(self.ref, self.home, self.fields, self.cache)
        except RunNotFound:
            return None

    def unreadable(self, ev: Evidence) -> list[str]:
        """Files that could not be read and have not changed for ``settle_s`` seconds, each reported once."""
        out = []
        now = time.time()
        for entry in ev.meta.get("skipped") or [] if isinstance(ev.meta, dict) else []:
            m = re.match(r"^(.*?)(?::\d+)?: ", str(entry))  # 'path: why' or 'path:line: why'
            path = m.group(1) if m else str(entry)
            try:  # a FIFO or a device is no file being written: reported at once
                st = Path(path).stat()
                settled = not stat.S_ISREG(st.st_mode) or now - st.st_mtime >= self.settle_s
            except OSError:
                settled = True
            if settled and entry not in self.reported_unreadable:
                self.reported_unreadable.add(entry)
                out.append(str(entry))
        return out

    def check(self, final: bool = False) -> tuple[Evidence | None, list[Seen]]:
        """Read the run; diagnose when ``every`` new steps arrived (or ``final``); the findings that are new."""
        ev = self.read()
        if ev is None:
            return None, []
        self.evidence = ev
        step = last_step(ev)
        due = step > 0 and (self.diagnosed_at is None or step - self.diagnosed_at >= self.every
                            or (final and step != self.diagnosed_at))
        if not due:
            return ev, []
        self.diagnosed_at = step
        self.diagnoses += 1
        new = []
        for f in self.registry.run(ev, self.names):
            if f.severity == "info":
                continue
            key = (f.diagnostic, f.symptom)
            if self.severity.get(key) != f.severity:
                self.severity[key] = f.severity
                new.append(Seen(f, step, round(time.monotonic() - self.started, 3)))
        return ev, new

    def run(self, *, interval: float = 1.0, fail_on: str | None = None, timeout: float | None = None,
            idle: float | None = None, until_finished: bool = False,
            on_finding: Callable[[Seen], None] = lambda s: None,
            on_note: Callable[[str], None] = lambda m: None) -> WatchOutcome:
        """Check every ``interval`` seconds until a stop condition (see the module docstring)."""
        stop = {"signal": False}

        # Ctrl-C and SIGTERM set a flag: the current check ends, then the summary. Python's own SIGINT raises
        # KeyboardInterrupt wherever the interpreter is, e.g. inside the first check's lazy import of torch, and
        # a watch interrupted there once did not end within 60 s (tests/test_watch.py, in a full suite run).
        def on_stop(signum, frame):
            stop["signal"] = True

        main = _main_thread()
        old_term = signal.signal(signal.SIGTERM, on_stop) if main else None
        old_int = signal.signal(signal.SIGINT, on_stop) if main else None
        seen: list[Seen] = []
        last_new = time.monotonic()
        last_seen_step = -1
        announced = False
        try:
            while True:
                finished = False
                ev, new = self.check()
                if ev is not None:
                    if not announced:
                        announced = True
                        on_note(_describe_run(ev))
                    for msg in self.unreadable(ev):
                        on_note(f"could not read {msg}")
                    step = last_step(ev)
                    if step != last_seen_step:
                        last_seen_step, last_new = step, time.monotonic()
                    ends = run_finished(ev)
                    if until_finished and idle is None and ends is None:
                        raise ConfigError(f"{self.ref}: a {ev.source} run has no end marker, so --until-finished "
                                          "cannot tell when it ends; add --idle SECONDS")
                    finished = until_finished and bool(ends)
                    if finished:
                        _, more = self.check(final=True)
                        new += more
                for s in new:
                    seen.append(s)
                    on_finding(s)
                    if fail_on is not None and SEVERITY_RANK[s.finding.severity] >= SEVERITY_RANK[fail_on]:
                        return WatchOutcome("fail_on", 1, seen, self.evidence, self.diagnoses)
                if finished:
                    return WatchOutcome("finished", 0, seen, self.evidence, self.diagnoses)
                now = time.monotonic()
                if timeout is not None and now - self.started >= timeout:
                    return WatchOutcome("timeout", 0, seen, self.evidence, self.diagnoses)
                if idle is not None and ev is not None and now - last_new >= idle:
                    _, more = self.check(final=True)
                    for s in more:
                        seen.append(s)
                        on_finding(s)
                    failing = fail_on is not None and any(
                        SEVERITY_RANK[s.finding.severity] >= SEVERITY_RANK[fail_on] for s in more)
                    return WatchOutcome("fail_on" if failing else "idle", 1 if failing else 0, seen, self.evidence,
                                        self.diagnoses)
                deadline = time.monotonic() + interval  # the next look, or the timeout if it comes first
                if timeout is not None:
                    deadline = min(deadline, self.started + timeout)
                if idle is not None and ev is not None:
                    deadline = min(deadline, last_new + idle)
                while True:
                    if stop["signal"]:
                        raise KeyboardInterrupt
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        except KeyboardInterrupt:
            return WatchOutcome("interrupted", 130, seen, self.evidence, self.diagnoses)
        finally:
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
            if old_int is not None:
                signal.signal(signal.SIGINT, old_int)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _describe_run(ev: Evidence) -> str:
    meta = ev.meta if isinstance(ev.meta, dict) else {}
    corr = correctness_line(meta)
    return f"found {ev.run} ({ev.source}); {corr}"


def correctness_line(meta: dict[str, Any]) -> str:
    """One line: where strict correctness came from, or that there is none and what would supply it."""
    found = meta.get("correctness") or {}
    mapped = meta.get("mapped") or []
    parts = []
    if mapped:
        parts.append("mapped: " + "; ".join(mapped))
    if found:
        parts.append("correctness: " + "; ".join(f"{v['field']} from {v['source']} ({v['how']})"
                                                  for v in found.values()))
    elif meta.get("correctness_missing"):
        parts.append(str(meta["correctness_missing"]))
    return "; ".join(parts) if parts else "correctness: none"
