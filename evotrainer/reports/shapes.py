"""The shape of every JSON document the CLI prints with ``--json``, as pydantic models.

A script that runs ``evotrainer … --json`` gets exactly one JSON document on stdout (logs and progress go to
stderr); this module says what is in it. ``evotrainer schema [NAME]`` prints a shape's JSON Schema, and
``COMMANDS`` maps every command that takes ``--json`` to the shapes it may print — a failed command prints
``error`` instead (and exits with the error's code). The CLI checks each document against its shape before
printing it (a mismatch is reported on stderr, and the document still printed), and ``tests/test_cli_json.py``
runs every command listed here strictly (and fails on a command with ``--json`` that is not), so a shape
cannot drift from what is printed.

Top-level keys are closed (``extra="forbid"``); nested records reuse the program's own models (campaign,
proposal, finding, …), and free-form parts (an evidence summary, a revision's details) are plain objects.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.agent.campaign import StopOutcome
from evotrainer.agent.confirm import Confirmation
from evotrainer.config.harness import KnobChange
from evotrainer.core.domain import Campaign, Decision, Finding, PolicyVersion, Proposal, Review
from evotrainer.core.errors import ConfigError
from evotrainer.diagnostics.revision import RevisionResult
from evotrainer.library.format import Skill
from evotrainer.library.lint import Problem
from evotrainer.library.retrieve import HitSummary
from evotrainer.tasks.base import TaskInfo


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------------- errors
class ErrorInfo(_Doc):
    type: str = Field(..., description="The error's class, e.g. ConfigError, RunNotFound, CampaignBusy, JobFailed.")
    message: str = Field(..., description="What is wrong and what to do instead (the red line on stderr).")
    exit_code: int = Field(..., description="The command's exit status: 2 bad input or busy, 3 a failed job, 1 other.")


class ErrorDoc(_Doc):
    """What any ``--json`` command prints when it fails with a user error."""

    error: ErrorInfo


# ---------------------------------------------------------------------------------------------- basics
class TaskList(_Doc):
    """``evotrainer tasks --json``."""

    tasks: list[TaskInfo]


class TaskSample(BaseModel):
    id: str
    difficulty: int
    prompt: str
    answer: str
    messages: list[dict[str, str]] = Field(..., description="What a chat model is given (system message included).")
    canonical: dict[str, Any] = Field(..., description="The verifier on the canonical answer: correct, score, reason.")


class TaskShow(_Doc):
    """``evotrainer tasks show TASK_OR_SPEC --json``: a user's task checked before any compute is spent on it."""

    task: str
    options: dict[str, Any]
    levels: list[int] = Field(..., description="The levels used (the spec's eval.difficulty, else the task's default).")
    all_levels: list[int] = Field(..., description="[min, max] level of the task.")
    difficulty_doc: str
    rows: dict[str, int] | None = Field(None, description="A dataset: its train and held-out rows at those levels.")
    report: dict[str, Any] | None = Field(None, description="A dataset: rows read, skipped for nulls, duplicates, fields.")
    splits: dict[str, int] = Field(..., description="Problems in the train sample and each held-out split, and eval_n.")
    samples: list[TaskSample]
    canonical_checked: int
    canonical_failed: list[dict[str, Any]] = Field(..., description="Canonical answers scoring below 1 (first 20).")
    ok: bool = Field(..., description="Every checked canonical answer scores 1 (else the command exits 1).")


class TrainResult(_Doc):
    """``evotrainer train --json``: the finished job."""

    run_id: str = Field(..., description="MLflow run id.")
    name: str = Field(..., description="Run name (its directory under HOME/jobs).")
    run_dir: str
    steps_done: int
    checkpoint: str | None = Field(..., description="The final complete checkpoint.")
    evidence: dict[str, str] = Field(..., description="Where the evidence is: metrics, rollouts, mlflow.")
    metrics: dict[str, float] = Field(..., description="Last value of every metric.")
    status: str


class HarnessCheck(_Doc):
    file: str
    name: str
    version: str = Field(..., description="Content hash of the harness.")


class HarnessValidation(_Doc):
    """``evotrainer harness validate --json``."""

    harnesses: list[HarnessCheck]


class HarnessDiff(_Doc):
    """``evotrainer harness diff --json``."""

    a: str
    b: str
    changes: list[KnobChange]


class KnobDoc(_Doc):
    knob: str
    type: str
    default: Any
    bounds: dict[str, Any]
    description: str
    normal: str | None = None
    normal_source: str | None = None


class KnobList(_Doc):
    """``evotrainer harness knobs --json``."""

    knobs: list[KnobDoc]


# ---------------------------------------------------------------------------------------------- diagnosis
class Diagnosis(_Doc):
    """``evotrainer diagnose --json``."""

    findings: list[Finding]
    evidence: dict[str, Any] = Field(..., description="Summary of the evidence read: source, run, steps, columns.")


class DiagnosticList(_Doc):
    """``evotrainer diagnostics list --json``: name, version, symptom, signal, literature, params of each."""

    diagnostics: list[dict[str, Any]]


class EvidenceContractDoc(_Doc):
    """``evotrainer evidence contract --json``: the evidence contract, itself a JSON Schema (docs/evidence-contract.schema.json)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_uri: str = Field(..., alias="$schema", description="The JSON Schema dialect (draft 2020-12).")
    id: str = Field(..., alias="$id", description="evotrainer-evidence-contract-v<version>.")
    title: str
    description: str
    contract_version: str = Field(..., alias="x-contract-version", description="Bumped when a field is added, "
                                  "removed or changes meaning.")
    type: Literal["object"]
    properties: dict[str, Any] = Field(..., description="metrics: metric_step records; rollouts: rollout records.")
    defs: dict[str, Any] = Field(..., alias="$defs", description="metric_step and rollout: each field's type, "
                                 "meaning, x-needed-by / x-read-by diagnostics and x-aliases in other tools.")
    diagnostics: list[dict[str, Any]] = Field(..., alias="x-diagnostics", description="Each diagnostic's needs "
                                              "(alternatives, in words, and how to supply them) and extra reads.")
    record: dict[str, Any] = Field(default_factory=dict, alias="x-record", description="Fields of a run's own record "
                                   "(its recipe) a diagnostic needs, with x-needed-by.")
    correctness: dict[str, Any] = Field(..., alias="x-correctness", description="How a correctness signal under "
                                        "another name is found.")
    mapping: str = Field(..., alias="x-mapping", description="How --map / --map-file / --correctness name a run's fields.")


class WatchedFinding(_Doc):
    finding: Finding
    step: int = Field(..., description="The run's last step when the finding first appeared.")
    seconds: float = Field(..., description="Seconds after `watch` started.")


class WatchResult(_Doc):
    """``evotrainer watch --json``: why watching stopped and every finding as it first appeared."""

    run: str
    source: str | None = Field(..., description="evotrainer, trl or verl (None: the run never appeared).")
    stopped: Literal["fail_on", "finished", "timeout", "idle", "interrupted"] = Field(
        ..., description="fail_on: a finding at/above --fail-on (exit 1); finished: the run ended (--until-finished); "
                         "timeout / idle: --timeout / --idle elapsed; interrupted: Ctrl-C or SIGTERM (exit 130).")
    exit_code: int
    steps: int = Field(..., description="The last step seen.")
    rollouts: int
    diagnoses: int = Field(..., description="How many times the evidence was diagnosed.")
    findings: list[WatchedFinding] = Field(..., description="Warning and critical findings, in the order they appeared "
                                            "(a finding reappears when its severity changes).")
    evidence: dict[str, Any] = Field(..., description="Summary of the last evidence read (as in diagnose --json).")


# ---------------------------------------------------------------------------------------------- campaigns
class Budget(_Doc):
    spent: int = Field(..., description="Trainer steps spent (segments and every backtest branch).")
    total: int


class Accuracy(_Doc):
    start: float | None = Field(..., description="Held-out accuracy before the campaign trained.")
    end: float | None = Field(..., description="Held-out accuracy of the mainline handed over.")


class DecisionDoc(Decision):
    knob: str
    old: Any
    new: Any


class VersionDoc(_Doc):
    version: str
    policy: str
    diff: list[KnobChange]


class Where(_Doc):
    mlflow: str
    state: str
    mlflow_run_id: str | None


class Spend(_Doc):
    """Where a campaign's budget went (``evotrainer.reports.summaries.spend``)."""

    spent: int = Field(..., description="Trainer steps spent (segments and every branch leg).")
    mainline_segments: int = Field(..., description="Steps of the segments in the final mainline's lineage.")
    kept_branches: int = Field(..., description="Steps of the backtest branches the mainline continued from.")
    discarded: int = Field(..., description="Steps of everything else (branches not kept, segments rolled back from).")
    useful_share: float | None = Field(..., description="(mainline_segments + kept_branches) / spent.")
    screened: int = Field(..., description="Changes screened out on recorded rollouts (no steps spent).")


class JobSeconds(_Doc):
    """Where a campaign's jobs spent their seconds (``evotrainer.reports.summaries.job_seconds``, from each job session's
    ``meta.json`` timings). The campaign's own time outside its jobs is its wall time minus ``jobs``."""

    trainer: float = Field(..., description="Inside the Trainer's train(), evaluations excluded: steps, checkpoints, "
                                            "callbacks.")
    eval: float = Field(..., description="Held-out evaluations inside the jobs.")
    setup: float = Field(..., description="Loading the policy, the data and the trainer.")
    warm_start: float = Field(0.0, description="Building a warm-started base policy that was not cached yet (a "
                                               "one-off cost of the policy, which later campaigns reuse).")
    other: float = Field(..., description="The rest of the job sessions (their last records, MLflow).")
    jobs: float = Field(..., description="The job sessions' whole wall time.")
    sessions: int = Field(..., description="Job sessions that finished (a start or a resume each).")
    untimed_jobs: int = Field(..., description="Jobs with no finished session on record (e.g. killed).")


class ProcessSeconds(_Doc):
    """Where the campaign process's own seconds went, node by node (``evotrainer.agent.clock``, from
    ``HOME/campaigns/ID/timings.jsonl``; every session of the campaign)."""

    own: dict[str, float] = Field(..., description="Per node: its wall time minus its waits on the worker, largest "
                                                   "first (the store, the brain, diagnosis, the checkpointer).")
    jobs: float = Field(..., description="Waiting on job sessions (their walls, the pipes, a worker still importing).")
    scoring: float = Field(..., description="Waiting on scoring in the worker (selection, merges, confirmation).")
    review_wait: float = Field(0.0, description="Waiting for a person's review (not the campaign's overhead).")
    own_total: float = Field(..., description="The sum of own.")
    laps: int = Field(..., description="Node executions timed (a node cut short by kill -9 is timed by its re-run).")


class KeptBranch(_Doc):
    """The branch a round's mainline continued from (event ``kept_branch``)."""

    round: int
    arm: str = Field(..., description="The promoted proposal's id, or 'control'.")
    chosen: str = Field(..., description="Run name of the branch kept (the merged run when the average was kept).")
    split: str = Field(..., description="The held-out split it was chosen on (selection).")
    n: int = Field(..., description="Problems in that split.")
    candidates: list[dict[str, Any]] = Field(..., description="Each branch of the arm: run, seed, step, "
                                                              "selection_accuracy, decision_accuracy.")
    merged: dict[str, Any] | None = Field(None, description="The average of the arm's seeds (backtest.merge_seeds): "
                                                            "run, step, from (the seeds' runs), selection_accuracy, "
                                                            "kept (false: it scored below every seed). Its "
                                                            "decision-split accuracy is its policy version's "
                                                            "eval_accuracy, scored when a later round reads it.")


class ExploreMode(_Doc):
    """A round's health verdict and exploration allowance (event ``explore_mode``, spec
    ``budget.healthy_explore_share``)."""

    round: int
    healthy: bool = Field(..., description="No finding at warning or critical, and the mainline above the base policy "
                                           "by more than 2 s.e. on the selection split, or moving (moved ≥ "
                                           "backtest.stuck_share) and not more than 2 s.e. below it.")
    reason: str = Field(..., description="Why, in words.")
    before: float | None = Field(..., description="The base policy's selection-split accuracy.")
    after: float | None = Field(..., description="The mainline's selection-split accuracy.")
    se: float | None = Field(None, description="Standard error of after − before (absent when a finding or a missing score decided).")
    moved: float | None = Field(None, description="Share of the decision split's answers the round's segment changed, "
                                                  "when the verdict needed it (absent: it learned, a finding decided, "
                                                  "or no movement was measured).")
    share: float = Field(..., description="The exploration share the round had: healthy_explore_share or explore_share.")
    allowance: float = Field(..., description="share × budget.total_steps: the steps all rounds' discarded branches "
                                              "may take, this round's included.")


class Movement(_Doc):
    """How much a round's segment moved the policy, and whether the round was judged stuck (event ``movement``,
    spec ``backtest.stuck_share``; evotrainer/agent/movement.py)."""

    round: int
    stuck: bool = Field(..., description="Under stuck_share of the decision split's answers changed while the segment "
                                         "had a training signal: only changes that enlarge the update are backtested.")
    reason: str = Field(..., description="Why, in words.")
    moved: float | None = Field(..., description="Share of the decision split's greedy answers that changed over the "
                                                 "segment (None: no per-problem outcomes at its start and end).")
    changed: int | None = Field(None, description="How many answers changed.")
    n: int | None = Field(None, description="Problems in the decision split.")
    steps: int | None = Field(None, description="Steps between the two evaluations compared.")
    signal: float | None = Field(None, description="Share of the segment's groups with a reward spread "
                                                   "(1 − frac_reward_zero_std); None when not recorded.")
    threshold: float | None = Field(None, description="The share below which it was stuck: backtest.stuck_share.")


class CampaignSummary(_Doc):
    """``evotrainer campaign status ID --json`` (and what ``campaign start|resume --json`` print at the end)."""

    campaign: Campaign = Field(..., description="status is 'interrupted' when it says running without a live owner.")
    resume: str | None = Field(..., description="The command that continues the campaign; None while a live owner "
                                                "runs it, or when it is finished.")
    budget: Budget
    accuracy: Accuracy
    lineage: list[PolicyVersion]
    proposals: list[Proposal]
    decisions: list[DecisionDoc]
    promoted: list[str]
    versions: list[VersionDoc]
    revisions: list[dict[str, Any]]
    confirmation: dict[str, Any] | None = Field(..., description="The last confirmation (shape: `schema confirmation`).")
    rollbacks: list[dict[str, Any]]
    spend: Spend
    seconds: JobSeconds
    process_seconds: ProcessSeconds
    kept: list[KeptBranch]
    explore_modes: list[ExploreMode] = Field(default_factory=list, description="Each round's health verdict "
                                                                               "(budget.healthy_explore_share).")
    movements: list[Movement] = Field(default_factory=list, description="Each round's movement verdict "
                                                                       "(backtest.stuck_share).")
    where: Where


class CampaignList(_Doc):
    """``evotrainer campaign status --json`` without an id: every campaign, oldest first."""

    campaigns: list[Campaign]


# ---------------------------------------------------------------------------------------------- reviews
class ReviewQueue(_Doc):
    """``evotrainer review list --json``."""

    pending: list[Proposal]


class ReviewShow(_Doc):
    """``evotrainer review show --json``."""

    proposal: Proposal
    review: Review | None
    findings: list[Finding]


# ---------------------------------------------------------------------------------------------- skills
class SkillRow(_Doc):
    slug: str
    name: str
    kind: str
    status: str
    version: int
    available: bool
    symptoms: list[str]
    intervention: dict[str, Any]
    counters: dict[str, int]
    evidence: int = Field(..., description="How many backtests are recorded as evidence.")
    description: str


class SkillList(_Doc):
    """``evotrainer skills list --json``."""

    library: str
    skills: list[SkillRow]


class SkillShow(Skill):
    """``evotrainer skills show --json``: the entry's front matter, slug and body, and its file."""

    file: str


class SearchHit(HitSummary):
    """One hit of ``evotrainer skills search --json``: the retriever's own summary (its fields, one definition)."""


class SkillSearch(_Doc):
    """``evotrainer skills search --json``."""

    library: str
    query: str
    hits: list[SearchHit]


class SkillLint(_Doc):
    """``evotrainer skills lint --json`` (exit 1 when ``problems`` is not empty)."""

    library: str
    entries: int
    problems: list[Problem]


class SkillHistory(_Doc):
    """``evotrainer skills history --json``: proposals that cited the skill, with decision and effect."""

    slug: str
    in_library: bool
    proposals: list[dict[str, Any]]


# ---------------------------------------------------------------------------------------------- schema
class SchemaEntry(_Doc):
    name: str
    description: str
    commands: list[str] = Field(..., description="Commands that print this shape with --json.")
    schema_: dict[str, Any] = Field(..., alias="schema", description="Its JSON Schema (draft 2020-12).")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SchemaList(_Doc):
    """``evotrainer schema [NAME] --json``."""

    schemas: list[SchemaEntry]


SHAPES: dict[str, type[BaseModel]] = {
    "error": ErrorDoc, "tasks": TaskList, "task-show": TaskShow, "train": TrainResult, "harness-validation": HarnessValidation,
    "harness-diff": HarnessDiff, "knobs": KnobList, "diagnosis": Diagnosis, "diagnostics": DiagnosticList,
    "revision": RevisionResult, "campaign": CampaignSummary, "campaigns": CampaignList, "confirmation": Confirmation,
    "stop": StopOutcome, "review-queue": ReviewQueue, "review": ReviewShow, "skills": SkillList, "skill": SkillShow,
    "skill-search": SkillSearch, "skill-lint": SkillLint, "skill-history": SkillHistory, "schemas": SchemaList,
    "evidence-contract": EvidenceContractDoc, "watch": WatchResult,
}

# command (as typed after `evotrainer`) -> the shapes it prints on success; every one may also print "error"
COMMANDS: dict[str, tuple[str, ...]] = {
    "tasks": ("tasks",),
    "tasks show": ("task-show",),
    "train": ("train",),
    "harness validate": ("harness-validation",),
    "harness diff": ("harness-diff",),
    "harness knobs": ("knobs",),
    "diagnose": ("diagnosis",),
    "diagnostics list": ("diagnostics",),
    "diagnostics revise": ("revision",),
    "evidence contract": ("evidence-contract",),
    "watch": ("watch",),
    "campaign start": ("campaign",),
    "campaign resume": ("campaign",),
    "campaign status": ("campaign", "campaigns"),
    "campaign confirm": ("confirmation",),
    "campaign stop": ("stop",),
    "review list": ("review-queue",),
    "review show": ("review",),
    "skills list": ("skills",),
    "skills show": ("skill",),
    "skills search": ("skill-search",),
    "skills lint": ("skill-lint",),
    "skills history": ("skill-history",),
    "schema": ("schemas",),
}


def schema_entries(name: str | None = None) -> list[SchemaEntry]:
    """Every shape (or the one called ``name``) with its JSON Schema and the commands that print it."""

    if name is not None and name not in SHAPES:
        raise ConfigError(f"no JSON shape called '{name}'; shapes: {', '.join(SHAPES)}")
    out = []
    for n, model in SHAPES.items():
        if name is None or n == name:
            cmds = [c for c, shapes in COMMANDS.items() if n in shapes] or (["every --json command"] if n == "error" else [])
            doc = (model.__doc__ or "").strip().splitlines()[0] if model.__doc__ else ""
            out.append(SchemaEntry(name=n, description=doc, commands=cmds, schema=model.model_json_schema()))
    return out


__all__ = ["SHAPES", "COMMANDS", "schema_entries", "ErrorDoc", "CampaignSummary", "CampaignList"]
