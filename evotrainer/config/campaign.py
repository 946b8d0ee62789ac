"""The campaign spec: what to train, under which budget, how to backtest, who approves, when to stop.

A campaign YAML (``campaigns/*.yaml``) is validated like a harness: every field documented with its
default and bounds, unknown keys rejected, errors naming the file, the field and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from evotrainer.config.eval import EvalSpec
from evotrainer.config.harness import SCALE_KNOBS, load_yaml_model
from evotrainer.config.policy import PolicySpec
from evotrainer.core.redact import mask
from evotrainer.tasks import task_form


class _S(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BudgetSpec(_S):
    total_steps: int = Field(..., ge=1, le=10_000_000,
                             description="Trainer steps for the whole campaign, segments and every backtest branch included.")
    wall_clock_minutes: float | None = Field(None, gt=0, description="Stop starting new work after this many minutes.")
    llm_tokens: int | None = Field(None, ge=0, description="LLM tokens the brain may spend; then it falls back to the heuristic.")
    explore_share: float = Field(
        0.4, ge=0.0, le=1.0,
        description="Largest share of total_steps that may go to branches the mainline does not continue from (every "
                    "backtest arm and seed but the kept branch). A backtest starts only if the most it could discard "
                    "fits beside what earlier ones discarded; otherwise fewer proposals are tried, and none once the "
                    "share is spent (rounds then train the mainline). Keeps the useful share (steps in the final "
                    "mainline's lineage / steps spent) at about 1 − explore_share or more.")
    final_share: float = Field(
        0.2, ge=0.0, lt=1.0,
        description="Share of total_steps at the end that only the mainline trains. A backtest starts only if at least "
                    "this much of the budget would remain after its first look, and a segment that would leave less "
                    "than a backtest's first look plus this share trains the rest of the budget instead: a change "
                    "adopted in the last steps has too few left to pay back the steps its branches took from the "
                    "mainline (as a tuned recipe showed: bench/log/07-campaign-vs-static-baseline.md). 0 lets backtests run to the last step.")
    final_checks: int = Field(
        4,
        description="Versions the mainline's last segment (the rest of the budget, once nothing is left to "
                    "backtest) saves and scores on the selection split on its way, evenly spaced, its end included: "
                    "the rollback may go back to any of them, as it does between rounds, so a last stretch that "
                    "overfits or collapses keeps its best checked version instead of only its start. 1: only its "
                    "end. Why: at 400 steps the last segment is 200-290 steps, and with a pool of 64 prompts and with "
                    "too-easy levels it fell in that stretch and the campaign kept only 20-30 % of its steps "
                    "(bench/log/19-flaw-suite.md, development seed 0). 4 is a check every quarter of that stretch, "
                    "chosen before any run; each check costs a checkpoint and two evaluations of eval.n problems.")

    @field_validator("final_checks")
    @classmethod
    def _checks(cls, v: int) -> int:
        if not 1 <= v <= 100:
            raise ValueError(f"budget.final_checks={v} is out of range: 1 checks only the last segment's end, up to "
                             "100 spread along it (each costs a checkpoint and two evaluations)")
        return v
    healthy_explore_share: float | None = Field(
        0.1, ge=0.0, le=1.0,
        description="The exploration share (in place of explore_share) for a round whose run looks healthy: no "
                    "finding at warning or critical, and the mainline's selection-split accuracy above the base "
                    "policy's by more than 2 standard errors (it learns), or its segment moved at least "
                    "backtest.stuck_share of the decision split's answers and left it no more than 2 standard errors "
                    "below the base (it trains; too early to tell). A troubled round (a warning, a stuck recipe that "
                    "has not learned since the start, as the demo's 1e-6) still gets explore_share; once the "
                    "latest round's share is spent, the mainline trains the rest. Why: every backtest arm but the "
                    "kept one is a step the mainline does not take, and from a recipe that already learns the "
                    "changes tried rarely pay that back. On the bench (bench/log/07-campaign-vs-static-baseline.md, 2026-11-26) 0.1 moved "
                    "tuned arith's campaign − static from −2.0 to −0.5 points at 400 steps (5 seeds) and from −2.4 "
                    "to −0.5 at 880 (3 seeds); the demo still promoted and ended above its start on seeds 0-2 "
                    "(+2.2, 0, −3.0 points against before). 0.1 leaves room for one first look (which catches large "
                    "effects) only where that look discards at most 0.1 × total_steps: (2 × backtest.seeds − 1) × "
                    "branch_steps / looks steps, 30 at 2 seeds and 10-step looks; at the flaw suite's 3 seeds it is "
                    "50 > 40 of 400, so there a healthy round never backtests and a tuned start's campaign is its "
                    "static run (bench/log/19-flaw-suite.md, 2026-12-04). 0 never backtests a healthy round; null "
                    "gives every round explore_share.")
    job_timeout_minutes: float | None = Field(
        None, gt=0, description="Minutes one job (segment, branch leg or scoring) may run before it is ended and "
                                "recorded failed with that reason (null: $EVOTRAINER_JOB_TIMEOUT_S, else no limit).")

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "improving_z" in data:
            if data["improving_z"] is None:  # its old default (off), in specs stored before it went: still resumable
                return {k: v for k, v in data.items() if k != "improving_z"}
            raise ValueError("budget.improving_z was removed: holding exploration while the mainline improved measured "
                             "neutral and was off by default (bench/log/07-campaign-vs-static-baseline.md); delete it. "
                             "budget.healthy_explore_share is what limits exploration of a healthy run")
        return data

    @model_validator(mode="after")
    def _shares(self) -> BudgetSpec:
        if self.healthy_explore_share is not None and self.healthy_explore_share > self.explore_share:
            if "healthy_explore_share" not in self.model_fields_set:  # the default under a smaller explore_share
                self.healthy_explore_share = self.explore_share
                return self
            raise ValueError(f"budget.healthy_explore_share={self.healthy_explore_share:g} is above "
                             f"budget.explore_share={self.explore_share:g}: a healthy run would explore more than a "
                             "troubled one; set it at or below explore_share, or null")
        return self


# The band a bracket arm stays inside, per scale knob (`BacktestSpec.bracket_range` says why these).
BRACKET_RANGE: dict[str, tuple[float, float]] = {
    "optim.learning_rate": (1e-7, 1e-3), "grpo.beta": (1e-3, 0.5), "grpo.entropy_coef": (1e-4, 0.02),
    "optim.weight_decay": (1e-3, 0.2), "data.pool_size": (512, 65_536)}


STUCK_RULES_GONE = ("Issue 59's ablation: over the flaw suite's demo flaw (TRL's 1e-6) on development seeds 0-2 the "
                    "campaign without the stuck round's interim arm, non-inferiority and larger-step rules adopted the "
                    "same learning rate and scored no worse than with them, and on its live flaws no round is stuck "
                    "(bench/log/19-flaw-suite.md, 2026-12-03 third session). A stuck round still backtests only what "
                    "enlarges the update, its first raise with its bracket.")
REMOVED_STUCK_RULES: dict[str, bool | None] = {"stuck_margin": None, "stuck_interim": False, "stuck_prefer_larger": False}
"""Backtest fields removed with the stuck round's special rules (:data:`STUCK_RULES_GONE` says why), each with the
value that switched its rule off: a spec that sets one to that value asks for what the campaign now does, and it is
dropped; any other value is refused. A campaign stored before they went drops them (:func:`spec_of`)."""


class BacktestSpec(_S):
    branch_steps: int = Field(30, ge=1, le=100_000, description="Trainer steps of each backtest branch.")
    seeds: int = Field(3, ge=2, le=16, description="Paired seeds per branch pair (control and treatment share them).")
    max_proposals: int = Field(2, ge=1, le=8, description="Proposals backtested per round (they share one control).")
    min_effect: float = Field(0.0, ge=-1.0, le=1.0, description="Held-out accuracy gain the interval must exceed to promote.")
    futility_effect: float | None = Field(
        None, ge=-1.0, le=1.0,
        description="A proposal whose interval (at `confidence`) lies wholly below this gain is rejected: early at an "
                    "interim look (non-binding futility: it can only lower the false-promotion rate), else at the last "
                    "look. Above min_effect it stops changes too small to be worth having; null = min_effect.")
    confidence: float = Field(0.8, gt=0.5, lt=1.0, description="Confidence level of the paired interval.")
    bracket: bool = Field(
        True, description="When a proposal the round would backtest moves a scale knob (learning rate, KL or entropy "
                          "coefficient, weight decay, prompt pool), the same knob moved "
                          "`bracket_factor` times as far in log scale (×3 -> ×243) takes the slot right after it, "
                          "against the same control, as an engineer's sweep would: from a value decades off, the first step alone "
                          "shows effects too small to decide in a short branch. A range knob's shift (the training levels) is "
                          "bracketed by twice the shift ([5, 5] -> [4, 4] beside [3, 3]). Needs max_proposals >= 2; the "
                          "proposals after it move down a slot, those before it keep theirs.")
    bracket_factor: float = Field(
        5.0, ge=1.5, le=8.0,
        description="How many times as far (in log scale) the bracket arm moves the knob as the first arm does: 5 "
                    "turns a ×3 learning-rate raise into ×243, 4 into ×81. 3 (×27) came first and was too timid "
                    "for the demo's slowest warm start; from TRL's default 1e-6, ×81 then reached 8.1e-5, still 4× "
                    "below what the tiny policy's tasks want, and on countdown gained too little in 20-30 steps to "
                    "decide (bench/log/07-campaign-vs-static-baseline.md; chosen on the bench's own tasks, whose tuned rate is known, so "
                    "in-sample). Larger spans more decades and risks a collapse the first look rejects cheaply; "
                    "between 1.5 and 8.")
    bracket_range: dict[str, tuple[float, float]] = Field(
        default_factory=lambda: dict(BRACKET_RANGE),
        description="Per scale knob, the (low, high) band a bracket arm stays inside: its value is clipped into the "
                    "band, and no bracket is made when the clipped value is not at least twice as far (in log scale) "
                    "from the current value as the first arm (a bracket that close is the same test twice). Why: "
                    "the bracket is for a value decades off; from one already inside the band a bold sweep is "
                    "waste. From the tuned arith start (lr 3e-4), ×243 was 0.0729 and collapsed the policy on every "
                    "seed, like 9e-4, ~60 of 400 steps spent to reject both (bench/log/07-campaign-vs-static-baseline.md). Defaults: "
                    "learning rate 1e-7..1e-3 (full fine-tunes of LMs use 1e-7..1e-5, LoRA up to ~5e-4, the tiny "
                    "policy 1e-4..1e-3), KL coefficient 1e-3..0.5, entropy coefficient 1e-4..0.02, weight decay "
                    "1e-3..0.2 (the ranges GRPO recipes report), prompt pool 512..65536 distinct prompts (RL prompt sets: "
                    "DAPO-Math 17k, DeepScaleR 40k). A knob left out is bracketed within its bounds.")
    project_futility: bool = Field(
        True, description="At an interim look, judge futility on the interval's upper end scaled by looks / look (an "
                          "effect that builds up with steps trained, as a learning rate's does, may reach that much by "
                          "the last look); false judges it on the look's own interval, which refutes slow-acting "
                          "changes after a few steps (evotrainer/stats/backtest.py).")
    merge_seeds: bool = Field(
        True, description="After a decision, also average the weights (and Adam moments) of every seed of the arm the "
                          "round adopts into one checkpoint (a model soup; evotrainer/jobs/merge.py) and score it on "
                          "the selection split beside the seeds. The mainline continues from the average unless it "
                          "scores below every seed (a merge that broke something); false keeps the best single seed.")
    looks: int | None = Field(
        None, ge=1, le=20,
        description="Evaluations of every branch at evenly spaced steps (branch_steps / looks apart). A proposal stops "
                    "at the first look that decides it: promoted early under alpha spending, rejected early for "
                    "futility, blocked as soon as a gate trips (evotrainer/stats/backtest.py); its unspent steps go to the "
                    "next mainline segment. 1 = a single evaluation at the end (fixed horizon). null = 3, or 2 or 1 "
                    "when branch_steps is not a multiple of 3.")
    stuck_share: float | None = Field(
        0.05, ge=0.0, le=0.5,
        description="A round whose mainline changed fewer than this share of the decision split's greedy answers over "
                    "its latest segment (whatever its length: movement saturates rather than grows), while at least "
                    "10 % of its groups had a reward spread, is stuck: its update is too small to act on, and a "
                    "reward, scaling or data change cannot show an effect (at lr 1e-6 such backtests measured +0.000 "
                    "exactly). It backtests only changes that enlarge the update (a higher learning rate), "
                    "re-tests of such changes first; evotrainer/agent/movement.py. Measured: "
                    "TRL's default 1e-6 changed 0-1.8 % of answers in 20-200 steps (arith, countdown, agentic), "
                    "working learning rates 8-29 % in 20-30. Judged only when the share is at least 3 answers of the "
                    "split. null = never judge a round stuck.")
    spent_estimate: bool = Field(
        True,
        description="When the budget (or budget.explore_share) ends a backtest before its planned last look, decide "
                    "what it left open on the estimate: promote a change whose effect over the control is above "
                    "min_effect and 0, with every gate passed and every branch finished (decision rule `estimate`, "
                    "evotrainer/stats/rules/estimate.py). Why: the share is spent for every later round too, so such a "
                    "change is never re-tested, and keeping the control is then a decision against the data. It "
                    "gives up superiority's false-promotion bound at that stop. false = leave it inconclusive.")

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not set(data) & set(REMOVED_STUCK_RULES):
            return data
        if gone := sorted(k for k in set(data) & set(REMOVED_STUCK_RULES) if data[k] != REMOVED_STUCK_RULES[k]):
            raise ValueError(f"backtest.{', backtest.'.join(gone)}: removed; delete "
                             f"{'it' if len(gone) == 1 else 'them'}. {STUCK_RULES_GONE}")
        return {k: v for k, v in data.items() if k not in REMOVED_STUCK_RULES}

    @model_validator(mode="after")
    def _looks(self) -> BacktestSpec:
        for knob, (low, high) in self.bracket_range.items():
            if knob not in SCALE_KNOBS:
                raise ValueError(f"backtest.bracket_range: {knob!r} is not a scale knob; brackets move only "
                                 f"{', '.join(sorted(SCALE_KNOBS))}")
            if not 0 < low < high:
                raise ValueError(f"backtest.bracket_range.{knob}: ({low:g}, {high:g}) must be 0 < low < high")
        if self.futility_effect is not None and self.futility_effect < self.min_effect:
            raise ValueError(f"futility_effect={self.futility_effect} is below min_effect={self.min_effect}: a change "
                             "could then be promoted and refuted at once; set futility_effect >= min_effect or null")
        if self.looks is None:
            self.looks = next(k for k in (3, 2, 1) if self.branch_steps % k == 0)
        if self.branch_steps % self.looks:
            fits = [k for k in range(1, min(20, self.branch_steps) + 1) if self.branch_steps % k == 0]
            raise ValueError(f"branch_steps={self.branch_steps} is not a multiple of looks={self.looks}; use looks "
                             f"{', '.join(map(str, fits))} or change branch_steps")
        return self


class LLMBrainSpec(_S):
    base_url: str = Field(..., max_length=2000,
                          description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM, Ollama): an "
                                      "http:// or https:// URL with a host.")
    model: str = Field(..., description="Model name at that endpoint.")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        from urllib.parse import urlsplit


        try:
            parts = urlsplit(v.strip())
            port = parts.port  # a port that is not a number raises here
        except ValueError as exc:
            raise ValueError(f"{mask(v)!r} is not a URL ({exc}); give e.g. http://127.0.0.1:8000/v1") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{mask(v)!r} is not an http:// or https:// URL with a host; give e.g. "
                             "http://127.0.0.1:8000/v1")
        del port
        return v.strip()
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    prompt: Literal["full", "compact"] = Field(
        "full", description="'compact' for small local models (SmolLM2-135M): a ~1.5k-character prompt with few knobs "
                            "(see evotrainer/agent/brains/llm.py).")
    structured_output: Literal["auto", "json_schema", "json_object", "none"] = Field(
        "auto", description="Constrain replies to the proposals' JSON schema when the server can ('auto' steps down "
                            "to JSON mode, then nothing, when refused).")
    timeout_s: float = Field(60.0, gt=0.0, le=3600.0, description="Seconds one call may take (a small model on a CPU "
                                                                   "needs minutes).")
    max_tokens: int = Field(800, ge=16, le=32_768, description="Most tokens a reply may have.")
    max_retries: int = Field(2, ge=0, le=5, description="Calls after a failed one in a round (then the heuristic answers).")


class BrainSpec(_S):
    kind: Literal["heuristic", "llm"] = Field("heuristic", description="Who proposes: the offline heuristic or an LLM.")
    llm: LLMBrainSpec | None = Field(None, description="Endpoint settings, required when kind is 'llm'.")
    explore_threshold: float = Field(
        0.3, ge=0.0, le=1.0,
        description="Heuristic brain: backtest a plateau-driven candidate only if its posterior probability of beating "
                    "backtest.min_effect is at least this (an untried change on a neutral record has ~0.42); below it "
                    "the round trains the mainline instead. 0 explores everything not refuted.")
    prior_strength: float = Field(
        4.0, ge=0.0, le=1000.0,
        description="Heuristic brain: pseudo-observations of 'no effect' that shrink the library's average recorded "
                    "effect before it becomes the prior mean of untried candidates (0 = trust the average fully).")

    @model_validator(mode="after")
    def _llm(self) -> BrainSpec:
        if self.kind == "llm" and self.llm is None:
            raise ValueError("brain.kind is 'llm' but brain.llm (base_url, model) is missing")
        return self


class StopSpec(_S):
    target_accuracy: float | None = Field(None, gt=0, le=1, description="Stop when held-out greedy accuracy reaches this.")
    plateau_rounds: int = Field(
        3, ge=1, le=100,
        description="Stop after this many rounds in a row with neither a promotion nor a new best mainline held-out "
                    "accuracy (by more than backtest.min_effect): a round that only trains the mainline is not stuck "
                    "while the mainline still improves.")


class RollbackSpec(_S):
    enabled: bool = Field(
        True, description="Move the mainline back to the campaign's best policy version when its held-out accuracy "
                          "falls below it by more than evaluation noise (a recipe that wears the policy down keeps "
                          "its best checkpoint; the base policy counts, so nothing worse than the start is handed "
                          "back); false keeps every decline, for a person to roll back by hand.")
    confidence: float = Field(
        0.9, gt=0.5, lt=1.0,
        description="One-sided confidence that a drop is real: the mainline rolls back when the best version's "
                    "accuracy minus its own exceeds z(confidence) standard errors of the two held-out proportions "
                    "(eval.n problems each) and backtest.min_effect.")


class RevisionSpec(_S):
    enabled: bool = Field(True, description="Revise a diagnostic when the campaign catches it misfiring (see agent/revise.py).")
    regression_tolerance: float = Field(
        0.03, ge=0.0, le=1.0,
        description="Held-out accuracy drop after a promotion, with no warning from any diagnostic, that counts as a missed finding.")
    archive: str | None = Field(
        None, description="Extra labelled archive YAML (e.g. tests/fixtures/runs/archive.yaml) replayed beside the campaign's own branches.")
    draft_code: bool = Field(
        True, description="With brain.kind 'llm': when a missed regression has no parameter fix, ask the LLM to draft a "
                          "new diagnostic, run it only in the sandbox, and adopt it into the gate only if it improves F1 "
                          "on the labelled archive without losing recall on invalid runs (agent/drafts.py).")


LIVE_SESSIONS = 12  # launcher.live_sessions' default: 3 seeds × (control + 3 proposals) branches at once


class LauncherSpec(_S):
    kind: Literal["local", "ray"] = Field(
        "local", description="Where jobs run (evotrainer/jobs/launchers/): 'local' = crash-isolated worker processes on "
                             "this machine; 'ray' = each job a Ray task (pip install 'evotrainer[ray]').")
    workers: int | None = Field(
        None, ge=1, le=256,
        description="Jobs run side by side: a backtest look submits every arm × seed at once and this many run at a "
                    "time. local: worker processes (null = 1; with more than one, the jobs side by side share the "
                    "cores as torch threads, and a job alone, such as a segment, gets them all); ray: a cap on tasks "
                    "in flight (null = as many as the cluster's resources fit).")
    address: str | None = Field(
        None, description="ray only: 'ray://HOST:PORT' (Ray Client) or 'auto' (the cluster this machine is part of); "
                          "null starts a local Ray head that ends with the campaign.")
    cpus_per_job: float = Field(1.0, gt=0.0, le=1024.0, description="ray only: CPUs a job's Ray task asks for.")
    gpus_per_job: float = Field(0.0, ge=0.0, le=64.0, description="ray only: GPUs a job's Ray task asks for (a "
                                                                   "fraction shares one GPU between jobs).")
    live_sessions: int | None = Field(
        None, ge=0, le=64,
        description="local only: paused backtest branches each worker keeps alive between looks, so that a look goes "
                    "on in the branch's Trainer instead of rebuilding it from its checkpoint (evotrainer/jobs/live.py; "
                    "each still checkpoints at every look). Each holds its policy, optimizer state and data in the "
                    "worker's memory (a GPU's, for a model on one): 0 turns it off. null = 0 for a pretrained policy "
                    "(set it when the device holds every branch of a look at once: seeds × (1 + max_proposals)), "
                    f"{LIVE_SESSIONS} for the built-in ones (a look's arms × seeds of the default backtest fit).")

    @model_validator(mode="after")
    def _kind(self) -> LauncherSpec:
        if self.kind == "local" and (self.address is not None or self.gpus_per_job or self.cpus_per_job != 1.0):
            raise ValueError("launcher.address, cpus_per_job and gpus_per_job are Ray settings: set launcher.kind: ray, "
                             "or leave them out (a local worker uses the device the job picks)")
        if self.kind == "ray" and self.live_sessions:
            raise ValueError(f"launcher.live_sessions={self.live_sessions} is a local setting: a Ray task holds nothing "
                             "between looks; leave it out, or set launcher.kind: local")
        if self.address is not None and not (self.address == "auto" or self.address.startswith("ray://")):
            raise ValueError(f"launcher.address={self.address!r}: give 'ray://HOST:PORT', 'auto', or null for a local "
                             "Ray head")
        return self


class CampaignSpec(_S):
    name: str = Field(..., min_length=1, max_length=100, description="Campaign name (ids are derived from it).")
    task: str = Field("arith", description="Task: a built-in name, a dataset file or save_to_disk directory (relative "
                                           "to the spec file), {reasoning_gym: NAME, config: {...}}, {dataset: PATH, "
                                           "prompt: FIELD, answer: FIELD, ...}, or 'module:Class'.")
    task_options: dict[str, Any] = Field(default_factory=dict, description="Task options.")
    policy: PolicySpec = Field(default_factory=PolicySpec, description="Policy to train.")
    harness: str = Field("harnesses/grpo-baseline.yaml", description="Starting harness (relative to the spec file).")
    seed: int = Field(0, ge=0, description="Campaign seed: mainline training and the brain's draws.")
    segment_steps: int = Field(50, ge=1, le=1_000_000, description="Steps of each mainline segment between proposals.")
    budget: BudgetSpec
    backtest: BacktestSpec = Field(default_factory=BacktestSpec, description="How interventions are backtested.")
    launcher: LauncherSpec = Field(default_factory=LauncherSpec, description="Where jobs run, and how many side by side.")
    autonomy: Literal["auto", "review"] = Field("auto", description="'review' waits for a person to approve each proposal.")
    brain: BrainSpec = Field(default_factory=BrainSpec, description="Who proposes interventions.")
    eval: EvalSpec = Field(default_factory=lambda: EvalSpec(every=0, n=300), description="Held-out evaluation protocol.")
    stop: StopSpec = Field(default_factory=StopSpec, description="Stop rules.")
    rollback: RollbackSpec = Field(default_factory=RollbackSpec, description="Automatic return to the best policy version after a regression.")
    revision: RevisionSpec = Field(default_factory=RevisionSpec, description="Diagnostic revision when a gate misfires.")
    library: str | None = Field(
        None, description="Skill library folder to start from (default: $EVOTRAINER_LIBRARY, else the seed library "
                          "skills/); an earlier campaign's HOME/campaigns/ID/library carries over what it learned.")
    library_in_place: bool = Field(
        False, description="Curate the library folder itself (review with git diff) instead of a copy under the campaign.")
    screen: bool = Field(
        True, description="Pre-screen reward and data changes on the last segment's rollouts (evotrainer/stats/screening.py): "
                          "a change predicted to leave the training signal unchanged is recorded 'screened' with the "
                          "numbers instead of backtested.")
    values: Literal["optuna", "brain"] = Field(
        "optuna", description="Where the value of a numeric knob comes from: 'optuna' asks a TPE study conditioned on "
                              "this campaign's decided backtests of that knob (evotrainer/agent/values.py; the brain's "
                              "value until there is one), 'brain' keeps the brain's own value.")
    confirm: bool = Field(
        True, description="When the campaign finishes, evaluate the base policy and the final mainline once on "
                          "confirm_n (default eval.n) fresh held-out problems (seed eval.seed + 1, none of the campaign's own): the "
                          "campaign's decisions all selected on its own held-out set (agent/confirm.py).")
    confirm_n: int | None = Field(
        None, ge=1, le=100_000, description="Problems in that confirmation (null: eval.n). A wider one, drawn outside the decision "
                                "and selection splits, narrows the start → end claim's standard error (it is "
                                "reported) at the cost of evaluation alone: two 500-problem samples of one policy "
                                "differ by ~2 points. Its problems are distinct, so on a task whose held-out space is "
                                "small (countdown's level 3: ~5300) a wide split leans to the rarer, harder problems: "
                                "compare start and end on it, not with eval.n numbers. Lower it if the task's "
                                "held-out set has too few problems.")
    trace: bool = Field(False, description="Trace every graph node into MLflow (mlflow.langchain.autolog): inputs, outputs, timings.")
    source_dir: str | None = Field(None, exclude=True, description="Directory of the spec file.")

    @model_validator(mode="before")
    @classmethod
    def _task_form(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and "task" in data:
            base = (info.context or {}).get("source_dir") or data.get("source_dir")
            data = task_form(data, base)
        return data

    @model_validator(mode="after")
    def _fits(self) -> CampaignSpec:
        one_round = self.segment_steps + (1 + 1) * self.backtest.seeds * self.backtest.branch_steps
        if self.budget.total_steps < one_round:
            raise ValueError(f"budget.total_steps={self.budget.total_steps} cannot fit one round "
                             f"(segment {self.segment_steps} + one backtest {2 * self.backtest.seeds}×"
                             f"{self.backtest.branch_steps} = {one_round} steps)")
        return self

    def harness_path(self) -> Path:
        return self.relative(self.harness)

    def relative(self, path: str) -> Path:
        """A path from the spec, resolved against the spec file's directory."""
        p = Path(path)
        return p if p.is_absolute() or self.source_dir is None else Path(self.source_dir) / p


def load_campaign_spec(path: str | Path) -> CampaignSpec:
    return load_yaml_model(path, CampaignSpec, "campaign spec")


def spec_of(campaign: Any) -> CampaignSpec:
    """The spec a stored campaign was started with (``campaign.spec``, as the store keeps it: the validated spec
    plus the directory its relative paths resolve against and the first harness version)."""
    doc = dict(campaign.spec)
    if isinstance(doc.get("backtest"), dict):  # stored before those rules were removed: it resumes without them
        doc["backtest"] = {k: v for k, v in doc["backtest"].items() if k not in REMOVED_STUCK_RULES}
    src = doc.pop("source_dir", None)
    doc.pop("initial_harness_version", None)
    spec = CampaignSpec.model_validate(doc)
    spec.source_dir = src
    return spec
