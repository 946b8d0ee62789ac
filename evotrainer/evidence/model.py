"""Rollout evidence: the per-rollout Parquet schema, the recorder that writes it, and the reader.

A scalar reward hides most of what goes wrong in RL; diagnosis needs every rollout. Each job writes one
Parquet file per optimiser step under ``JOB/rollouts/step_000123.parquet`` (logged to MLflow as artifacts
under ``rollouts/`` at every checkpoint) and one JSON line of metrics per step to ``JOB/metrics.jsonl``
(mirrored to MLflow under TRL's metric names). Files past the last checkpoint are removed on resume, so a
resumed job never holds two copies of a step.

Rollout schema, one row per completion (``ROLLOUT_COLUMNS``; every file has the ``ROLLOUT_SCHEMA`` columns, and
the ``EXTRA_ROLLOUT_FIELDS`` only when a row of its step has them, so a single-turn job without the efficiency
term writes and reads exactly the files it always did; ``read_rollouts`` returns an extra column when some file
has it, null where a file lacks it):

=================  =======  ==========================================================================
column             type     meaning
=================  =======  ==========================================================================
run_id             string   MLflow run id of the job
step               int32    optimiser step (1-based) whose update used this rollout
prompt_id          string   the task problem's stable id (same problem → same id across runs)
group_id           string   ``<step>:<index>``: the GRPO group (completions of one prompt in one batch)
prompt             string   prompt text given to the policy
completion         string   generated text (untrusted: never executed)
reward_correctness float    correctness term before weighting (null when the term is off)
reward_format      float    format term before weighting (null when off)
reward_overlong    float    soft overlong term before weighting (null when off)
reward_repetition  float    repetition term before weighting (null when off)
reward             float    weighted total reward used for the advantage
correct            bool     strict correctness (well-formed and right), whatever the reward said
well_formed        bool     the completion matches the task's answer format
n_candidates       int32    candidate answers found in the completion (answer spraying signal)
length             int32    completion tokens the policy wrote, EOS excluded (multi-turn: observations excluded)
truncated          bool     hit ``max_completion_length`` without EOS
advantage          float    GRPO advantage TRL computed for this completion
difficulty         int32    task difficulty level of the prompt
reward_efficiency  float    extra: efficiency (length / turn) term before weighting (null when off)
turns              string   extra, multi-turn tasks: JSON list of the policy's actions, one per tool call
                            ``{"turn", "text", "tool", "arguments", "observation"}`` and one with ``tool``
                            null for a turn without a call (see ``evotrainer.training.episodes.turn_records``);
                            null for single-turn tasks and in files written before the column existed
final_correct      bool     extra: the final answer the task reads from prose is right (chat-prompted
                            policies, or ``reward.correctness.match: final``; null otherwise)
verifier_error     string   extra: why the task's verifier raised on this completion (scored 0); null otherwise
reward_<name>      float    extra: a user's TRL reward function (``reward.functions``) before weighting
=================  =======  ==========================================================================

For a multi-turn task, ``prompt`` is the task's prompt text and ``completion`` the episode's transcript: the
policy's turns, with each tool observation on a line starting with ``=``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from evotrainer.core import atomic
from evotrainer.core.files import check_regular, read_text

# What other tools call our fields (readers and the field mapping use these; the evidence contract publishes them)
VERL_METRICS: tuple[tuple[str, str], ...] = (  # (verl key, TRL key); the first present source wins
    ("critic/score/mean", "reward"),
    ("actor/entropy", "entropy"),
    ("actor/kl_loss", "kl"),
    ("actor/reward_kl_penalty", "kl"),
    ("actor/pg_loss", "policy_loss"),
    ("actor/grad_norm", "grad_norm"),
    ("actor/lr", "learning_rate"),
    ("actor/pg_clipfrac", "clip_ratio/region_mean"),
    ("response_length/mean", "completions/mean_length"),
    ("response_length/min", "completions/min_length"),
    ("response_length/max", "completions/max_length"),
    ("response_length/clip_ratio", "completions/clipped_ratio"),
    ("timing_s/step", "step_time"),
)
LENGTH_KEYS = ("length", "completion_length", "response_length")
TRUNCATED_KEYS = ("truncated", "is_truncated", "clipped")
CORRECT_WORDS = frozenset({"correct", "correctness", "iscorrect", "accuracy", "acc", "exact", "exactmatch", "em",
                           "solved", "verified"})
"""Words of a column, reward function or metric name that make it a plausible strict-correctness signal."""
NEGATING_WORDS = frozenset({"not", "in", "incorrect", "wrong", "error", "errors", "fail", "failed", "std"})
"""Words that rule a name out ('not_correct', 'acc_std')."""

REWARD_TERMS = ("correctness", "format", "overlong", "repetition")  # the base schema's terms

ROLLOUT_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("step", pa.int32()),
        ("prompt_id", pa.string()),
        ("group_id", pa.string()),
        ("prompt", pa.string()),
        ("completion", pa.string()),
        *[(f"reward_{t}", pa.float64()) for t in REWARD_TERMS],
        ("reward", pa.float64()),
        ("correct", pa.bool_()),
        ("well_formed", pa.bool_()),
        ("n_candidates", pa.int32()),
        ("length", pa.int32()),
        ("truncated", pa.bool_()),
        ("advantage", pa.float64()),
        ("difficulty", pa.int32()),
    ]
)
"""The columns of every rollout file."""
EXTRA_ROLLOUT_FIELDS = [pa.field("reward_efficiency", pa.float64()), pa.field("turns", pa.string()),
                        pa.field("final_correct", pa.bool_()), pa.field("verifier_error", pa.string())]
"""Columns added later, written only in files where some row has them (see the module docstring)."""
FULL_ROLLOUT_SCHEMA = pa.schema([*ROLLOUT_SCHEMA, *EXTRA_ROLLOUT_FIELDS])
ROLLOUT_COLUMNS = FULL_ROLLOUT_SCHEMA.names
ROLLOUT_DOCS: dict[str, str] = {  # the table above, one line per column (the evidence contract publishes it)
    "run_id": "Id of the run (MLflow run id for our jobs).",
    "step": "Optimiser step (1-based) whose update used this rollout.",
    "prompt_id": "Stable id of the problem (same problem, same id across runs); readers of other tools hash the prompt.",
    "group_id": "The GRPO group, '<step>:<index>': the completions of one prompt in one batch.",
    "prompt": "Prompt text given to the policy (conversations as 'role: content' lines).",
    "completion": "Generated text (untrusted: never executed); multi-turn: the episode's transcript.",
    "reward_correctness": "Correctness reward term before weighting (null when the term is off).",
    "reward_format": "Format reward term before weighting (null when off).",
    "reward_overlong": "Soft overlong reward term before weighting (null when off).",
    "reward_repetition": "Repetition reward term before weighting (null when off).",
    "reward": "Weighted total reward used for the advantage.",
    "correct": "Strict correctness (well-formed and right), whatever the reward said.",
    "well_formed": "The completion matches the task's answer format.",
    "n_candidates": "Candidate answers found in the completion (answer-spraying signal).",
    "length": "Completion tokens the policy wrote, EOS excluded (multi-turn: observations excluded).",
    "truncated": "Hit max_completion_length without EOS.",
    "advantage": "GRPO advantage computed for this completion.",
    "difficulty": "Task difficulty level of the prompt.",
    "reward_efficiency": "Efficiency (length / turn) reward term before weighting (null when off).",
    "turns": "Multi-turn tasks: JSON list of the policy's actions, one per tool call {turn, text, tool, arguments, "
             "observation} (see evotrainer.training.episodes.turn_records); null for single-turn tasks.",
    "final_correct": "The final answer the task reads from prose is right (Verdict.final_correct; strict 'correct' wants "
                     "the answer alone); recorded for chat-prompted policies and under reward.correctness.match "
                     "'final', null otherwise.",
    "verifier_error": "Why the task's verifier failed on this completion (it then scored 0: a user's verifier, "
                      "math-verify, a reasoning-gym scorer); null when it judged normally.",
}


class RolloutRecorder:
    """Collects rollout rows during a step and writes them as one Parquet file per step.

    The correctness reward function adds rows (it is the one place that sees prompts, completions and
    verdicts together); the trainer adds the other reward terms and the advantages TRL computed, in
    order; the step callback flushes. ``flush(wait=False)`` writes on one background thread so that the
    next step's generation overlaps the Parquet encoding; ``wait()`` (called before every checkpoint
    and at the end of training) makes everything handed over so far durable.
    """

    def __init__(self, run_dir: Path, run_id: str):
        self.dir = run_dir / "rollouts"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self._pending: list[dict[str, Any]] = []
        self._batch_start = 0
        self._writer = None  # a one-thread executor, created on the first asynchronous flush
        self._writes: list[Any] = []

    def begin_batch(self) -> None:
        self._batch_start = len(self._pending)

    def add(self, rows: list[dict[str, Any]]) -> None:
        self._pending.extend(rows)

    def set_term(self, term: str, values: list[float]) -> None:
        rows = self._pending[self._batch_start :]
        for row, v in zip(rows, values, strict=False):
            row[f"reward_{term}"] = float(v)

    def set_column(self, column: str, values: list[Any]) -> None:
        """Overwrite one column of the current batch's rows, in order."""
        for row, v in zip(self._pending[self._batch_start :], values, strict=False):
            row[column] = v

    def finish_batch(self, totals: list[float], advantages: list[float]) -> None:
        rows = self._pending[self._batch_start :]
        for row, tot, adv in zip(rows, totals, advantages, strict=False):
            row["reward"] = float(tot)
            row["advantage"] = float(adv)

    def flush(self, wait: bool = True) -> list[Path]:
        """Write the pending rows; with ``wait=False`` on the writer thread (returns no paths then)."""
        rows, self._pending, self._batch_start = self._pending, [], 0
        if not rows:
            return [] if wait else self._submit(None)
        return self.write_frame(pd.DataFrame(rows), wait)

    def write_frame(self, df: pd.DataFrame, wait: bool = False) -> list[Path]:
        """Write a step's rollouts given as a frame (columns of the schema; others are ignored), without the
        pending rows' round trip through dicts; with ``wait=False`` on the writer thread."""
        if not wait:
            return self._submit(df)
        self.wait()
        return self._write(df)

    def _submit(self, df: pd.DataFrame | None) -> list[Path]:
        if df is not None and len(df):
            if self._writer is None:
                from concurrent.futures import ThreadPoolExecutor

                self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollouts")
            self._writes.append(self._writer.submit(self._write, df))
        return []

    def wait(self) -> None:
        """Block until every asynchronous write is on disk; re-raise the first write error."""
        writes, self._writes = self._writes, []
        for f in writes:
            f.result()

    def close(self) -> None:
        self.wait()
        if self._writer is not None:
            self._writer.shutdown()
            self._writer = None

    def _write(self, df: pd.DataFrame) -> list[Path]:
        written = []
        steps = df["step"].to_numpy()
        # the callback hands one step at a time: no groupby then (this runs beside training, every step)
        parts = [(steps[0], df)] if len(steps) and (steps == steps[0]).all() else df.groupby("step", sort=True)
        for step, part in parts:
            path = self.dir / f"step_{int(step):06d}.parquet"
            extra = [f for f in EXTRA_ROLLOUT_FIELDS if f.name in part and part[f.name].notna().any()]
            schema = pa.schema([*ROLLOUT_SCHEMA, *extra, *user_reward_fields(part.columns)])
            # column by column: a missing column is typed nulls, not an object column of None to convert
            table = pa.Table.from_arrays(
                [pa.array(part[f.name], type=f.type, from_pandas=True) if f.name in part else pa.nulls(len(part), f.type)
                 for f in schema], schema=schema)
            old = path.with_suffix(".parquet.tmp")
            pq.write_table(table, old)
            old.replace(path)
            written.append(path)
        return written


def truncate_after(run_dir: Path, step: int) -> None:
    """Drop metrics and rollouts recorded after ``step`` (used when resuming from that checkpoint)."""
    mfile = run_dir / "metrics.jsonl"
    if mfile.exists():
        keep = [ln for ln in mfile.read_text().splitlines() if ln.strip() and _step_of(ln) <= step]
        atomic.write_text(mfile, "".join(k + "\n" for k in keep))
    for f in (run_dir / "rollouts").glob("step_*.parquet*"):
        try:
            s = int(f.name.split("_")[1].split(".")[0])
        except ValueError:
            continue
        if s > step or f.name.endswith(".tmp"):
            f.unlink()


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line).get("step", 0))
    except (json.JSONDecodeError, AttributeError):
        return 1 << 30  # a torn last line is dropped


def append_metrics(run_dir: Path, step: int, metrics: dict[str, Any]) -> None:
    with open(run_dir / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"step": int(step), **metrics}) + "\n")


@dataclass
class Evidence:
    """What a run left behind, whoever made it.

    ``metrics``: one row per step, a ``step`` column and metric columns under TRL's names (readers of other
    tools map their names onto these). ``rollouts``: one row per completion with the columns of
    ``ROLLOUT_SCHEMA`` that the source could provide; a reader leaves out what it does not know (for
    instance strict correctness in a foreign dump), and diagnostics that need it report "not enough
    evidence" instead of guessing. ``source`` says which reader produced it; ``run`` names the run.
    """

    metrics: pd.DataFrame
    rollouts: pd.DataFrame
    source: str = "evotrainer"
    run: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "run": self.run,
            "steps": int(self.metrics["step"].max()) if len(self.metrics) and "step" in self.metrics else 0,
            "metric_columns": sorted(c for c in self.metrics.columns if c != "step"),
            "rollouts": len(self.rollouts),
            "rollout_columns": sorted(self.rollouts.columns),
        }
        if len(self.rollouts) and "correct" in self.rollouts and self.rollouts["correct"].notna().any():
            out["accuracy"] = float(self.rollouts["correct"].dropna().astype(float).mean())
        if isinstance(self.meta, dict):  # where strict correctness came from, and the user's names (mapping.py)
            for k in ("correctness", "correctness_missing", "mapped", "reward_weights"):
                if self.meta.get(k) is not None:
                    out[k] = self.meta[k]
        if isinstance(self.meta, dict) and self.meta.get("skipped"):  # what a reader could not read (readers.py)
            out["skipped"] = [str(x) for x in self.meta["skipped"]]
            out["unreadable"] = [str(x) for x in self.meta.get("unreadable") or []]
        return out


def read_metrics(run_dir: Path) -> pd.DataFrame:
    mfile = run_dir / "metrics.jsonl"
    rows = []
    if os.path.lexists(mfile):  # a FIFO, a device or a file over the cap raises UnreadableFile (evotrainer.core.files)
        for ln in read_text(mfile).splitlines():
            try:
                rows.append(json.loads(ln))
            except json.JSONDecodeError:
                continue  # a torn line from a killed process
    df = pd.DataFrame(rows)
    if len(df):
        df = df.groupby("step", as_index=False).last().sort_values("step").reset_index(drop=True)
    else:
        df = pd.DataFrame({"step": pd.Series([], dtype="int64")})
    return df


def user_reward_fields(names) -> list[pa.Field]:
    """``reward_<name>`` columns of the user's reward functions (``reward.functions``): floats beside the schema's."""
    return [pa.field(c, pa.float64()) for c in names if c.startswith("reward_") and c not in ROLLOUT_COLUMNS]


def read_rollouts(run_dir: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """Every rollout file of a run: the schema's columns, the extra ones some file has, and the user's reward
    functions' ``reward_<name>`` columns (those of its last file: a job's harness, and so its terms, is fixed)."""
    files = sorted((run_dir / "rollouts").glob("step_*.parquet"))
    if not files:
        return ROLLOUT_SCHEMA.empty_table().to_pandas()
    for f in files:
        check_regular(f)
    schema = pa.schema([*FULL_ROLLOUT_SCHEMA, *user_reward_fields(pq.read_schema(files[-1]).names)])
    df = pq.ParquetDataset([str(f) for f in files], schema=schema).read(columns=columns).to_pandas()
    if columns is None:  # an extra column no file has is left out, so a single-turn run reads as it always did
        df = df.drop(columns=[f.name for f in EXTRA_ROLLOUT_FIELDS if df[f.name].isna().all()])
    return df


MAX_STEP = 2**53
"""Steps are whole numbers in [0, 2**53): a larger one (4e25 written as an integer) would wrap in an int64 column."""


def is_step(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_STEP


_NUMBER_KINDS = {"integer", "floating", "mixed-integer-float", "boolean", "decimal", "empty"}
_TEXT_KINDS = {"string", "empty", "mixed"}  # "mixed": TRL's conversations (lists of messages) beside strings


def rollout_type_problem(raw: pd.DataFrame) -> str | None:
    """Why a rollout table cannot be read as rollouts (a step that is no whole number, text that is numbers,
    a number column that is text), or None: such a file is unreadable, not rows at step -1. Kinds are read from
    the values (``infer_dtype``), so a 0/1 column with nulls (object dtype) and a step written as text digits
    (some TRL versions) pass."""
    if "step" in raw and len(raw):
        col = pd.to_numeric(raw["step"], errors="coerce") if not pd.api.types.is_bool_dtype(raw["step"]) else None
        ok = col is not None and bool(col.notna().all()) and bool(np.isfinite(col.to_numpy(dtype="float64")).all())
        if not ok or not bool((col % 1 == 0).all()) or col.min() < 0 or col.max() >= MAX_STEP:
            return f"column step holds {raw['step'].dtype} values, not whole numbers in [0, 2**53)"
    for cols, kinds, what in ((("prompt", "completion"), _TEXT_KINDS | {"unknown-array"}, "text"),
                              (("reward", "advantage", "correct"), _NUMBER_KINDS, "numbers")):
        for c in cols:
            if c not in raw or (what == "text" and isinstance(raw[c].dtype, pd.CategoricalDtype)):
                continue
            kind = pd.api.types.infer_dtype(raw[c], skipna=True)  # once a column: it walks the values
            if kind not in kinds:
                return f"column {c} holds {kind} values, not {what}"
    return None


def evidence_upto(ev: Evidence, step: int) -> Evidence:
    """``ev`` as it stood at ``step``: metrics and rollouts of later steps left out (a backtest's look)."""
    m = ev.metrics[ev.metrics["step"] <= step] if "step" in ev.metrics else ev.metrics
    r = ev.rollouts[ev.rollouts["step"] <= step] if "step" in ev.rollouts else ev.rollouts
    return Evidence(metrics=m.reset_index(drop=True), rollouts=r.reset_index(drop=True), source=ev.source, run=ev.run,
                    meta=ev.meta)


def prompt_pass_stats(rollouts: pd.DataFrame) -> pd.DataFrame:
    """Per prompt: rollouts seen, pass rate, and whether its *latest* group was all correct / all wrong."""
    if not len(rollouts):
        return pd.DataFrame(columns=["prompt_id", "n", "pass_rate", "last_all_correct", "last_all_wrong"])
    agg = rollouts.groupby("prompt_id")["correct"].agg(["size", "mean"]).rename(columns={"size": "n", "mean": "pass_rate"})
    last_step = rollouts.groupby("prompt_id")["step"].transform("max")
    last = rollouts[rollouts["step"] == last_step].groupby("prompt_id")["correct"].agg(["all", "any"])
    agg["last_all_correct"] = last["all"]
    agg["last_all_wrong"] = ~last["any"]
    return agg.reset_index()


# Every per-step metric a job can emit, under TRL's names where TRL emits it. Patterns use fnmatch syntax.
# A test trains a real job and fails when it logs a key that matches none of these.
METRIC_DOCS: dict[str, str] = {
    "loss": "TRL: the GRPO objective minimised this step.",
    "policy_loss": "TRL: the policy-gradient part of the loss (entropy bonus and KL excluded).",
    "grad_norm": "Trainer: gradient norm before clipping; spikes and NaN are diagnostic signals.",
    "learning_rate": "Trainer: learning rate in effect this step.",
    "epoch": "Trainer: fractional epoch over the segment's dataset.",
    "num_tokens": "TRL: tokens (prompt + completion) processed so far.",
    "step_time": "TRL: seconds spent in this optimiser step's generation, scoring and backward pass.",
    "step_wall_time": "EvoTrainer: seconds from the Trainer's step begin to step end: step_time plus the optimiser "
                      "update (gradient clipping, AdamW step, learning-rate schedule).",
    "step_end_time": "EvoTrainer: wall-clock time (Unix seconds) at the step's end; with step_wall_time, when the "
                     "step ran (jobs side by side overlap: bench/campaign.py measures the time no step runs).",
    "update_skipped": "EvoTrainer: 1 on a step whose gradient was NaN/inf, so its weight update was skipped (the "
                      "weights kept their values); absent on every other step.",
    "reward": "TRL: mean weighted total reward of the step's completions.",
    "reward_std": "TRL: standard deviation of the weighted total reward.",
    "frac_reward_zero_std": "TRL: share of groups whose rewards are all equal (no GRPO signal: dead groups).",
    "rewards/*/mean": "TRL: mean of one reward term before weighting (correctness, format, overlong, repetition, efficiency).",
    "rewards/*/std": "TRL: standard deviation of one reward term.",
    "completions/mean_length": "TRL: mean completion length in tokens.",
    "completions/min_length": "TRL: shortest completion.",
    "completions/max_length": "TRL: longest completion.",
    "completions/clipped_ratio": "TRL: share of completions truncated at max_completion_length.",
    "completions/mean_terminated_length": "TRL: mean length of completions that ended with EOS.",
    "completions/min_terminated_length": "TRL: shortest EOS-terminated completion.",
    "completions/max_terminated_length": "TRL: longest EOS-terminated completion.",
    "entropy": "TRL: mean per-token entropy of the policy on its completions (nats).",
    "entropy_coef": "TRL: entropy-bonus coefficient in effect (adaptive entropy control).",
    "kl": "TRL: mean per-token KL to the reference policy (only when beta > 0).",
    "clip_ratio/low_mean": "TRL: share of tokens clipped at 1-ε with negative advantage.",
    "clip_ratio/low_min": "TRL: minimum over processes of clip_ratio/low_mean.",
    "clip_ratio/high_mean": "TRL: share of tokens clipped at 1+ε_high with positive advantage.",
    "clip_ratio/high_max": "TRL: maximum over processes of clip_ratio/high_mean.",
    "clip_ratio/region_mean": "TRL: share of tokens clipped on either side.",
    "cispo_clip_ratio": "TRL: share of tokens whose importance weight was clipped (loss_type=cispo).",
    "tools/call_frequency": "TRL (multi-turn tasks): tool calls per episode.",
    "tools/failure_frequency": "TRL (multi-turn tasks): share of tool calls that failed (unknown tool, bad arguments).",
    "accuracy": "EvoTrainer: share of the step's completions that are strictly correct (whatever the reward).",
    "eval/greedy_accuracy": "EvoTrainer: held-out pass@1 with greedy decoding.",
    "eval/pass_at_*": "EvoTrainer: held-out pass@k with k samples at temperature 1.0.",
    "eval/mean_length": "EvoTrainer: mean greedy completion length (characters) on the held-out set.",
    "eval/final_accuracy": "EvoTrainer, chat-prompted policies: greedy accuracy under the task's final-answer reading "
                           "of prose (lenient; eval/greedy_accuracy stays strict).",
    "campaign/mainline_accuracy": "EvoTrainer campaigns (parent run, step = round): held-out accuracy of the mainline.",
    "campaign/budget_spent": "EvoTrainer campaigns: trainer steps spent so far, backtests included.",
    "campaign/promoted": "EvoTrainer campaigns: 1 if the round promoted an intervention.",
}


def undocumented_metrics(keys) -> list[str]:
    import fnmatch

    return sorted(k for k in keys if k != "step" and not any(fnmatch.fnmatchcase(k, p) for p in METRIC_DOCS))
