"""The flaw suite's definitions (``bench/flaws.yaml``), read and checked before anything runs.

Why a model of its own: the suite is pre-registered, so what it says (which flaws, which seeds, which tasks, what
counts as live) must be read one way by every phase of ``bench/flaws.py``, and a typo in it must stop the bench
with the file, the field and what is allowed instead of spending hours on a misread suite. The harnesses each arm
starts from are built here too: a task's tuned recipe at the suite's prompts per step, and the same recipe with the
flaw's knobs set (a flaw may give a knob one value per task).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

SUITE = Path(__file__).resolve().parent / "flaws.yaml"
FAMILIES = ("learning-rate", "exploration", "group-signal", "regularisation", "reward-composition",
            "completion-budget", "data-selection", "optimiser", "double")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Evaluation(_M):
    """One pre-registered evaluation round: fresh seeds, named before they run, and the commit whose campaign they
    measure. A change to the campaign after a round ran spends its seeds; the next round names new ones (the issue's
    "frozen code"), so every round's verdict is about exactly one campaign."""

    name: str = Field(..., pattern=r"^[a-z0-9][a-z0-9-]*$", description="How the report labels the round "
                                                                           "(lower case, digits, dashes).")
    seeds: list[int] = Field(..., min_length=1, description="Required for the round's verdict.")
    extension: list[int] = Field(default_factory=list, description="Run if compute allows; each counts once run.")
    frozen_commit: str | None = Field(
        None, pattern=r"^[0-9a-f]{40}$",
        description="The commit, all 40 hex digits (a branch or HEAD would move), whose code (FROZEN_PATHS) the "
                    "round runs from; unset until the campaign's code is final (no seed of the round runs before).")
    spent: str | None = Field(None, description="Why a later round was needed (what changed in the campaign after "
                                                "this one); its verdict stands for its frozen commit only.")

    @property
    def all_seeds(self) -> list[int]:
        return [*self.seeds, *self.extension]


class TaskEntry(_M):
    task: str | dict[str, Any] = Field(..., description="A task as a campaign spec names it (name or mapping).")
    tuned: str = Field(..., description="The task's tuned harness, relative to flaws.yaml.")
    knobs: dict[str, Any] = Field(default_factory=dict, description="Knobs the task's tuning set over that harness.")

    def ref(self) -> tuple[str, dict[str, Any]]:
        """(task name, task options) in the normal form jobs carry."""
        from evotrainer.tasks import normalize_task

        return normalize_task(self.task, None)


class Flaw(_M):
    id: str = Field(..., pattern=r"^[a-z0-9][a-z0-9+.-]*$", description="Short name; part of run names.")
    family: str = Field(..., description=f"One of {', '.join(FAMILIES)}.")
    knobs: dict[str, Any] = Field(..., min_length=1, max_length=2,
                                  description="knob -> value, or knob -> {task: value} where it depends on the task.")
    subtle: bool = Field(..., description="The value lies inside the range a practitioner calls normal.")
    normal: str = Field(..., min_length=3, description="That range, and where it comes from.")
    symptoms: list[str] = Field(..., min_length=1, description="What round 0's diagnosis should report (any one).")
    remedy: str = Field(..., min_length=3, description="The documented remedy.")
    tasks: list[str] = Field(..., min_length=2, description="The suite's tasks it runs on (at least two).")

    @model_validator(mode="after")
    def _check(self) -> Flaw:
        if self.family not in FAMILIES:
            raise ValueError(f"family {self.family!r} is not one of {', '.join(FAMILIES)}")
        if (len(self.knobs) == 2) != (self.family == "double"):
            raise ValueError("a flaw of two knobs is family 'double', and a 'double' flaw sets two knobs")
        for knob, v in self.knobs.items():
            if isinstance(v, dict) and set(v) != set(self.tasks):
                raise ValueError(f"knob {knob}: per-task values for {sorted(v)}, but the flaw runs on "
                                 f"{sorted(self.tasks)}; give one value per task")
        return self

    def values(self, task: str) -> dict[str, Any]:
        """The flaw's knob values on ``task``."""
        return {k: (v[task] if isinstance(v, dict) else v) for k, v in self.knobs.items()}


class Demo(_M):
    id: str
    knobs: dict[str, Any]
    tasks: list[str]

    def values(self, task: str) -> dict[str, Any]:
        return dict(self.knobs)


class Suite(_M):
    version: int = Field(..., ge=1)
    budget: int = Field(..., ge=30, description="Trainer steps per arm.")
    prompts: int = Field(..., ge=1, description="Prompts per step of every tuned recipe.")
    eval_n: int = Field(..., ge=50)
    wide: int = Field(..., ge=0)
    live_gap: float = Field(..., gt=0, lt=1)
    dev_seeds: list[int] = Field(..., min_length=1)
    evaluations: list[Evaluation] = Field(
        ..., min_length=1, description="The evaluation rounds, oldest first; each measures one frozen campaign and "
                                       "is reported on its own, never pooled with another round.")
    live: list[str] | None = Field(
        None, description="The live cells ('flaw/task'), recorded once the development rows decided them and before "
                          "the evaluation seeds ran; when set, every verdict is over these cells, whatever the "
                          "development rows now in flaws.json give (the report prints those beside them).")
    tasks: dict[str, TaskEntry] = Field(..., min_length=1)
    demo: Demo
    flaws: list[Flaw] = Field(..., min_length=1)
    source_dir: str = Field("", exclude=True)

    @model_validator(mode="after")
    def _check(self) -> Suite:
        seen: dict[int, str] = {s: "a development seed" for s in self.dev_seeds}
        for e in self.evaluations:
            for s in e.all_seeds:
                if s in seen:
                    raise ValueError(f"evaluations {e.name}: seed {s} is already {seen[s]}; every evaluation "
                                     "round needs seeds no other round and no development run has used")
                seen[s] = f"a seed of evaluation round {e.name}"
        names = [e.name for e in self.evaluations]
        if len(set(names)) != len(names):
            raise ValueError(f"evaluations: names repeat ({names}); give each round a name of its own")
        if any(e.frozen_commit is None for e in self.evaluations[:-1]):
            raise ValueError("evaluations: only the last round may be without a frozen_commit (an earlier round "
                             "measured a campaign; record the commit it ran from)")
        ids = [f.id for f in self.flaws]
        if len(set(ids)) != len(ids):
            raise ValueError(f"flaw ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
        cells = {f"{f.id}/{t}" for f in self.flaws for t in f.tasks}
        if bad := sorted(set(self.live or []) - cells):
            raise ValueError(f"live: {bad} are not cells of the suite (a flaw id and one of its tasks, 'flaw/task'; "
                             "the demo flaw is reported beside the suite and is never live)")
        for f in [*self.flaws, self.demo]:
            unknown = set(f.tasks) - set(self.tasks)
            if unknown:
                raise ValueError(f"flaw {f.id}: tasks {sorted(unknown)} are not among the suite's "
                                 f"{sorted(self.tasks)}")
        return self

    def flaw(self, flaw_id: str) -> Flaw | Demo:
        if flaw_id == self.demo.id:
            return self.demo
        for f in self.flaws:
            if f.id == flaw_id:
                return f
        raise SystemExit(f"{SUITE}: no flaw {flaw_id!r}; flaws: {', '.join(f.id for f in self.flaws)}, {self.demo.id}")

    def evaluation(self, name: str | None = None) -> Evaluation:
        """The round named, or the latest one."""
        if name is None:
            return self.evaluations[-1]
        for e in self.evaluations:
            if e.name == name:
                return e
        raise SystemExit(f"{SUITE}: no evaluation round {name!r}; rounds: {', '.join(e.name for e in self.evaluations)}")

    def seeds(self, which: str) -> list[int]:
        """'dev'; 'eval' (the latest round's seeds) or 'eval+' (with its extension), either with ':NAME' for another
        round ('eval:first'); or a comma-separated list of seeds."""
        if which == "dev":
            return list(self.dev_seeds)
        kind, _, name = which.partition(":")
        if kind in ("eval", "eval+"):
            e = self.evaluation(name or None)
            return list(e.seeds) if kind == "eval" else e.all_seeds
        try:
            return [int(s) for s in which.split(",")]
        except ValueError:
            raise SystemExit(f"--seeds {which!r}: give dev, eval, eval+ (':NAME' for an earlier round, such as "
                             "eval:first) or a list such as 0,1,2") from None

    # ------------------------------------------------------------------------------------------ harnesses
    def tuned_doc(self, task: str) -> dict[str, Any]:
        """The task's tuned recipe, at the suite's prompts per step, as a harness mapping."""
        doc = yaml.safe_load((Path(self.source_dir) / self.tasks[task].tuned).read_text())
        doc["grpo"]["prompts_per_step"] = self.prompts
        for knob, v in self.tasks[task].knobs.items():
            _set(doc, knob, v)
        return doc

    def harness(self, task: str, flaw_id: str | None, out_dir: Path) -> Path:
        """A harness file under ``out_dir``: the tuned recipe (``flaw_id`` None) or the flawed one, validated."""
        from evotrainer.config.harness import load_harness

        doc = self.tuned_doc(task)
        # a job's name is built from the file's stem and must be a valid run name: a double flaw's '+' is spelt out
        name = f"flaws-{task}-{(flaw_id or 'tuned').replace('+', '-and-')}"
        if flaw_id is not None:
            for knob, v in self.flaw(flaw_id).values(task).items():
                _set(doc, knob, v)
        doc["name"] = name
        doc["description"] = f"bench/flaws.yaml: the {task} tuned recipe" + (f" with flaw {flaw_id}" if flaw_id else "")
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        load_harness(path)  # a value the harness refuses stops the bench here, naming the file and the knob
        return path


def _set(doc: dict[str, Any], knob: str, value: Any) -> None:
    *parents, leaf = knob.split(".")
    node = doc
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value


def load_suite(path: Path = SUITE) -> Suite:
    """The suite, validated; every problem is one message naming the file and the field."""
    from pydantic import ValidationError

    from evotrainer.core.errors import ConfigError, format_validation_error
    from evotrainer.core.safe_yaml import load_yaml_file

    data = load_yaml_file(path, "flaw suite")
    try:
        suite = Suite.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, str(path), Suite, "flaw suite")) from None
    suite.source_dir = str(path.resolve().parent)
    for tid, entry in suite.tasks.items():
        if not (Path(suite.source_dir) / entry.tuned).is_file():
            raise ConfigError(f"{path}: tasks.{tid}.tuned: {entry.tuned} does not exist")
    for f in suite.flaws:  # every flawed recipe must be one the harness accepts, on every task it names
        for task in f.tasks:
            from evotrainer.config.harness import HarnessSpec

            h = HarnessSpec.model_validate(suite.tuned_doc(task))
            for knob, v in f.values(task).items():
                try:
                    h = h.with_knob(knob, v)
                except ConfigError as err:
                    raise ConfigError(f"{path}: flaw {f.id} on {task}: {err}") from None
    return suite


# What every arm runs: the campaign, its library, the tuned recipes and the arms' own code (PBT and Optuna included).
# A round's frozen commit pins these; a change here after its seeds ran spends them. flaws.yaml is not among them
# (setting a round's frozen_commit edits it), nor flaw_targets.py (it judges rows, it runs none).
FROZEN_PATHS = ("evotrainer", "skills", "harnesses", "bench/flaw_arms.py", "bench/flaw_search.py", "bench/campaign.py")
# What a row's commit must hold exactly (no uncommitted change), so that the commit it records is what ran.
CAMPAIGN_PATHS = (*FROZEN_PATHS, "bench/flaws.yaml", "bench/flaws.py", "bench/flaw_suite.py")


def code_commit(root: Path) -> str:
    """HEAD, when the campaign's code in the working tree is exactly HEAD's; else a SystemExit saying what differs."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *CAMPAIGN_PATHS], cwd=root, capture_output=True,
                           text=True, check=True).stdout.strip()
    if dirty:
        raise SystemExit(f"the campaign's code differs from HEAD {head[:8]} (commit it first; rows record the commit "
                         f"they ran from):\n{dirty}")
    return head


def frozen_check(suite: Suite, root: Path, seeds: list[int]) -> None:
    """An evaluation round's seeds run only from its frozen commit's code (:data:`FROZEN_PATHS`), unchanged since."""
    for e in suite.evaluations:
        if not set(e.all_seeds) & set(seeds):
            continue
        if e.frozen_commit is None:
            raise SystemExit(f"evaluation round {e.name}'s seeds run only from a frozen commit: set its frozen_commit "
                             "in bench/flaws.yaml (and commit it) once the campaign's code is final")
        if subprocess.run(["git", "cat-file", "-e", f"{e.frozen_commit}^{{commit}}"], cwd=root,
                          capture_output=True).returncode:
            raise SystemExit(f"evaluation round {e.name}: frozen_commit {e.frozen_commit[:12]} is not in this "
                             "clone's history (a shallow clone? `git fetch --unshallow`); without it the round's "
                             "seeds cannot be checked, so they do not run")
        changed = subprocess.run(["git", "diff", "--name-only", e.frozen_commit, "HEAD", "--", *FROZEN_PATHS],
                                 cwd=root, capture_output=True, text=True, check=True).stdout.split()
        if changed:
            latest = suite.evaluations[-1]
            todo = (f"run the latest round instead ({latest.name}: --seeds eval)" if latest is not e
                    else "name a new round with fresh seeds in bench/flaws.yaml and freeze it")
            raise SystemExit(f"the campaign's code changed since round {e.name}'s frozen commit {e.frozen_commit[:8]} "
                             f"({', '.join(changed[:5])}{'…' if len(changed) > 5 else ''}): its seeds are spent for "
                             f"this campaign; {todo}")
