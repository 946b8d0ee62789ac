"""The harness: every training-side knob EvoTrainer may turn, documented and validated in one place.

A harness is everything on the training side that interprets the policy: the GRPO recipe (TRL's
``GRPOConfig`` knobs, under TRL's own names), the reward composition, and the data-selection rules applied
between segments. It lives in a YAML file under ``harnesses/``. Later issues add diagnostic gates.

Why pydantic with one ``Field`` per knob: the field's description, default and bounds *are* the
documentation (``evotrainer harness knobs`` prints them, a test fails when one is missing), and the same
model validates a file, a single-factor intervention (``with_knob``) and an LLM's proposal alike. Invalid
files fail with :class:`~evotrainer.core.errors.ConfigError` naming the file, the field, the value and what is
allowed; files are read by :mod:`evotrainer.core.safe_yaml` (no duplicate keys, alias bombs, deep nesting, oversized or
non-UTF-8 files). Which diagnostics a gate or ``diagnostics.params`` may name is known only to the registry (user
files included): ``evotrainer.diagnostics.registry.Registry`` checks them. The content hash (``version``) ignores
``name``/``description`` so that two files with the same recipe are the same harness version.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    model_validator,
)

from evotrainer.config.ranges import NORMAL
from evotrainer.config.reward import RewardKnobs
from evotrainer.config.section import _Section
from evotrainer.core.errors import ConfigError, format_validation_error
from evotrainer.core.safe_yaml import MAX_BYTES, load_yaml_file

LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo"]
ScaleRewards = Literal["group", "batch", "none"]


class OptimKnobs(_Section):
    """Optimiser settings (AdamW, constant schedule after warm-up, as TRL's defaults)."""

    learning_rate: float = Field(
        3e-4, gt=0.0, le=1e-1,
        description="AdamW learning rate. Too high collapses entropy; too low plateaus. The tiny policy likes 1e-4..1e-3.",
    )
    warmup_steps: int = Field(
        0, ge=0, le=10_000, description="Linear warm-up steps at the start of a run (not repeated when resuming or forking).",
    )
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="AdamW decoupled weight decay.")
    max_grad_norm: float = Field(
        1.0, gt=0.0, le=1e4, description="Gradient-norm clipping threshold (the `grad_norm` metric is logged before clipping).",
    )


class GRPOKnobs(_Section):
    """The GRPO recipe. Names and meanings follow TRL's ``GRPOConfig``; see its docs for paper links."""

    prompts_per_step: int = Field(
        32, ge=1, le=4096, description="Distinct prompts per optimiser step; each gets `num_generations` completions.",
    )
    num_generations: int = Field(
        8, ge=2, le=256, description="Group size G: completions sampled per prompt. The group is the GRPO baseline.",
    )
    temperature: float = Field(1.0, gt=0.0, le=4.0, description="Sampling temperature for rollouts.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus-sampling mass for rollouts (1.0 = off).")
    max_completion_length: int = Field(
        16, ge=1, le=32_768,
        description="Tokens a completion may have; longer ones are truncated (`completions/clipped_ratio`).",
    )
    loss_type: LossType = Field(
        "dapo",
        description="Loss aggregation: 'grpo' (per-sequence mean, length-biased), 'dr_grpo' (Dr.GRPO, constant "
        "normaliser, arXiv 2503.20783), 'dapo' (token-level over the batch, DAPO arXiv 2503.14476), 'bnpo', "
        "'cispo' (MiniMax-M1), 'sapo' (soft gate).",
    )
    epsilon: float = Field(0.2, gt=0.0, le=1.0, description="Lower PPO clip range ε.")
    epsilon_high: float | None = Field(
        None, gt=0.0, le=10.0,
        description="Upper clip range (clip-higher, DAPO recommends 0.28). None = same as `epsilon`. Must be ≥ `epsilon`.",
    )
    beta: float = Field(
        0.0, ge=0.0, le=10.0, description="KL coefficient against the reference policy. 0 = no reference model is loaded.",
    )
    sync_ref_model: bool = Field(
        False, description="Periodically reset the KL reference towards the current policy (TR-DPO style). Needs beta > 0.",
    )
    ref_model_sync_steps: int = Field(
        64, ge=1, le=100_000, description="Steps between reference resets when `sync_ref_model` is on.",
    )
    ref_model_mixup_alpha: float = Field(
        1.0, ge=0.0, le=1.0, description="Mix α of the reset: ref = α·policy + (1-α)·ref. 1.0 = hard reset.",
    )
    scale_rewards: ScaleRewards = Field(
        "group",
        description="Advantage scaling: 'group' std (GRPO), 'batch' std, or 'none' (Dr.GRPO: no difficulty bias).",
    )
    num_iterations: int = Field(
        1, ge=1, le=16, description="Optimiser passes per generated batch (μ). >1 reuses rollouts (off-policy by the clip).",
    )
    mask_truncated_completions: bool = Field(
        False, description="Exclude truncated completions from the loss (DAPO's overlong filtering).",
    )
    top_entropy_quantile: float = Field(
        1.0, ge=0.0, le=1.0,
        description="Train only on the top-ρ quantile of tokens by entropy (Beyond the 80/20 rule, arXiv 2506.01939; "
        "0.2 recommended). 1.0 = all tokens.",
    )
    entropy_coef: float = Field(
        0.0, ge=0.0, le=1.0, description="Entropy bonus coefficient (0 = off). Initial value when adaptive control is on.",
    )
    use_adaptive_entropy: bool = Field(
        False, description="Adapt `entropy_coef` towards `entropy_target` each step (Skywork-OR1, arXiv 2505.22312).",
    )
    entropy_target: float = Field(
        0.2, ge=0.0, le=20.0, description="Target per-token entropy (nats) for adaptive entropy control.",
    )

    @model_validator(mode="after")
    def _cross_field(self) -> GRPOKnobs:
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise ValueError(
                f"epsilon_high={self.epsilon_high} is below epsilon={self.epsilon}; clip-higher needs "
                "epsilon_high ≥ epsilon (or null for a symmetric clip)"
            )
        if self.sync_ref_model and self.beta == 0.0:
            raise ValueError("sync_ref_model needs a reference model: set beta > 0 or sync_ref_model: false")
        return self


class EnvKnobs(_Section):
    """The environment of a multi-turn task (`agentic`): which tools the policy is given during training."""

    leak_tool: bool = Field(
        False,
        description="A TRAP for demonstrating gates: give the policy the task's answer-leaking tool (`agentic`: "
        "read_history(), like reading a repository's history to copy the reference patch). Success then comes "
        "from copying, not solving (the `answer_leak` diagnostic catches it); held-out evaluation never has the "
        "tool. Single-turn tasks ignore it.",
    )


class ModelKnobs(_Section):
    """How the policy's weights are trained and what that costs in memory (real models on a CPU or a small GPU).

    LoRA (``lora_r > 0``, through ``peft``; Hu et al., arXiv 2106.09685) trains low-rank adapters on the chosen
    projections instead of every weight: a 135M model's optimizer state drops from ~1 GB to a few MB and a
    checkpoint holds only the adapter, which evaluation merges onto the base. Gradient checkpointing recomputes
    activations in the backward pass instead of storing them (less memory, ~30 % more compute). Fixed for a
    lineage: a fork or resume must keep its parent's values (no intervention may change them).
    """

    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass (less memory, more compute; TRL's own knob).",
    )
    lora_r: int = Field(
        0, ge=0, le=1024, description="LoRA rank; 0 = train every weight (full fine-tuning). 8-16 suits a 135M model.",
    )
    lora_alpha: int = Field(16, ge=1, le=4096, description="LoRA scaling numerator (the update is scaled by alpha / r).")
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA branch's input.")
    lora_target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1, max_length=32,
        description="Module names that get adapters (Llama-family names: q_proj k_proj v_proj o_proj gate_proj up_proj "
                    "down_proj); a name the model lacks is an error at job start.",
    )


class DataKnobs(_Section):
    """Which prompts a segment trains on. Rules that read evidence apply between segments (forks)."""

    difficulty: tuple[int, int] | None = Field(
        None, description="Inclusive [min, max] task difficulty level of training prompts. null = the task's default level.",
    )
    pool_size: int = Field(
        4096, ge=8, le=1_000_000,
        description="Distinct training prompts in the segment's pool (drawn from the train split, fixed per lineage: "
                    "a fork keeps its root job's pool).",
    )
    drop_all_correct: bool = Field(
        False, description="Dynamic sampling at segment granularity: drop prompts whose last group was all correct.",
    )
    drop_all_wrong: bool = Field(
        False, description="Dynamic sampling at segment granularity: drop prompts whose last group was all wrong.",
    )
    sampling: Literal["uniform", "difficulty_targeted"] = Field(
        "uniform",
        description="'uniform' over the pool, or 'difficulty_targeted': weight prompts by closeness of their observed "
        "pass rate to `target_pass_rate` (VADE / DOTS, arXiv 2506.05316).",
    )
    target_pass_rate: float = Field(
        0.5, gt=0.0, lt=1.0, description="Pass rate that difficulty-targeted sampling favours (0.5 maximises p(1−p)).",
    )

    @model_validator(mode="after")
    def _range(self) -> DataKnobs:
        if self.difficulty is not None and self.difficulty[0] > self.difficulty[1]:
            raise ValueError(f"difficulty {list(self.difficulty)} has min > max; write [min, max]")
        if self.difficulty is not None and self.difficulty[0] < 1:
            raise ValueError(f"difficulty {list(self.difficulty)} starts below level 1")
        return self


class GateRule(_Section):
    """One gate condition: the branch fails if this diagnostic reports a finding at or above ``fail_at``."""

    diagnostic: str = Field(..., min_length=1, description="Diagnostic name (built-in or from `diagnostics.user`).")
    fail_at: Literal["warning", "critical"] = Field(
        "warning", description="Lowest finding severity that fails the gate.",
    )


class UserDiagnostic(_Section):
    path: str = Field(..., min_length=1, description="Python file defining Diagnostic subclasses (relative to the harness file).")
    trusted: bool = Field(
        True,
        description="Run in-process. Untrusted code (e.g. written by an LLM) runs in a separate process with time, "
        "memory and network limits instead.",
    )


class DiagnosticsKnobs(_Section):
    """Diagnostic parameters, user diagnostics, and the promotion gate."""

    params: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-diagnostic parameter overrides, e.g. {entropy_collapse: {ratio: 0.2}} (see `evotrainer diagnostics list`).",
    )
    user: list[UserDiagnostic] = Field(default_factory=list, description="User diagnostics loaded from Python files.")
    gate: list[GateRule] = Field(
        default_factory=lambda: [
            GateRule(diagnostic="nan", fail_at="critical"),
            GateRule(diagnostic="reward_hacking", fail_at="warning"),
            GateRule(diagnostic="answer_spraying", fail_at="warning"),
            GateRule(diagnostic="length_collapse", fail_at="warning"),
            GateRule(diagnostic="echo", fail_at="warning"),
            GateRule(diagnostic="entropy_collapse", fail_at="critical"),
        ],
        description="Diagnostics a branch must pass before promotion, whatever its score (exploits are kept out here).",
    )
    gate_on_error: Literal["fail", "pass"] = Field(
        "fail", description="What a gate decides when one of its diagnostics crashes or times out (fail closed by default).",
    )


# Knobs no intervention may change: the diagnostics and their gate judge interventions, so a proposal (from
# a brain, an LLM or a library file) that touched them could switch off its own judge.
# The model section is locked too: a lineage's checkpoints are full weights or LoRA adapters of one shape.
LOCKED_KNOB_PREFIXES: tuple[str, ...] = ("diagnostics.", "model.")


# Knobs added after harness versions were first recorded, with their defaults (see HarnessSpec.version).
LATE_KNOBS: dict[str, Any] = {
    "reward.efficiency.weight": 0.0, "env.leak_tool": False,
    "model.gradient_checkpointing": False, "model.lora_r": 0, "model.lora_alpha": 16, "model.lora_dropout": 0.0,
    "model.lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "reward.functions": {},
}


def locked_knob(path: str) -> bool:
    """Whether no intervention may change ``path``: the judges, the model's shape, and which code a user's reward
    function is (an intervention may reweight it, never point it at another module)."""
    return path.startswith(LOCKED_KNOB_PREFIXES) or (path.startswith("reward.functions.") and path.endswith(".fn"))


# Knobs whose useful values span decades: searched and moved on a log scale (agent/values.py), bracketed
# (config/campaign.py `backtest.bracket`).
SCALE_KNOBS = frozenset({"optim.learning_rate", "grpo.beta", "grpo.entropy_coef", "optim.weight_decay",
                         "data.pool_size"})
# Knob → the direction in which it enlarges the update a training step makes (+1: a larger value): what can act on a
# policy too stuck to move (evotrainer/agent/movement.py). Not optim.warmup_steps: a fork does not repeat its
# lineage's warm-up, so a shorter one changes nothing in a branch. Not grpo.num_iterations: the budget counts optimiser
# steps, and more iterations per batch reuse rollouts at the same learning rate, each step's update no larger.
STEP_SIZE_KNOBS: dict[str, int] = {"optim.learning_rate": +1}


def enlarges_update(knob: str, old: Any, new: Any) -> bool:
    """Whether ``knob: old → new`` makes the policy's update larger (see :data:`STEP_SIZE_KNOBS`)."""
    sign = STEP_SIZE_KNOBS.get(knob)
    if sign is None or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (old, new)):
        return False
    return (new - old) * sign > 0


def shrinks_update(knob: str, old: Any, new: Any) -> bool:
    """Whether ``knob: old → new`` makes the policy's update smaller: the move back enlarges it."""
    return enlarges_update(knob, new, old)


class HarnessSpec(_Section):
    """One harness file. ``version`` is its content hash; ``diff`` lists the knobs that differ."""

    name: str = Field("unnamed", min_length=1, max_length=100, description="Human name; not part of the version hash.")
    description: str = Field("", max_length=4000, description="What this recipe is for; not part of the version hash.")
    optim: OptimKnobs = Field(default_factory=OptimKnobs, description="Optimiser.")
    grpo: GRPOKnobs = Field(default_factory=GRPOKnobs, description="GRPO recipe (TRL GRPOConfig knobs).")
    reward: RewardKnobs = Field(default_factory=RewardKnobs, description="Reward composition.")
    data: DataKnobs = Field(default_factory=DataKnobs, description="Data selection.")
    env: EnvKnobs = Field(default_factory=EnvKnobs, description="Tools of a multi-turn task's environment.")
    model: ModelKnobs = Field(default_factory=ModelKnobs, description="LoRA and gradient checkpointing (memory).")
    diagnostics: DiagnosticsKnobs = Field(default_factory=DiagnosticsKnobs, description="Diagnostics and gates.")
    source_dir: str | None = Field(
        None, exclude=True, description="Directory of the file this harness was loaded from (user paths resolve here).",
    )
    source_file: str | None = Field(
        None, exclude=True, description="The file this harness was loaded from (errors about it name it); not hashed.",
    )

    @model_validator(mode="after")
    def _consistency(self) -> HarnessSpec:
        r, g = self.reward, self.grpo
        if r.overlong.weight > 0 and r.overlong.buffer >= g.max_completion_length:
            raise ValueError(
                f"reward.overlong.buffer={r.overlong.buffer} must be smaller than "
                f"grpo.max_completion_length={g.max_completion_length}"
            )
        if r.correctness.weight == 0 and r.format.weight == 0 and not any(f.weight > 0 for f in r.functions.values()):
            raise ValueError("reward has no positive term: give reward.correctness.weight, reward.format.weight or a "
                             "reward.functions weight a value > 0")
        return self

    # ------------------------------------------------------------------ identity
    def knobs(self) -> dict[str, Any]:
        """Flat ``{dotted.path: value}`` of every knob (metadata excluded)."""
        return _flatten(self.model_dump(mode="json", exclude={"name", "description", "source_dir", "source_file"}))

    @property
    def version(self) -> str:
        """Stable content hash of the recipe (12 hex chars). Knobs added after harness versions were first
        recorded (``LATE_KNOBS``) count only when they differ from their default, so older versions stay valid."""
        knobs = {k: v for k, v in self.knobs().items() if k not in LATE_KNOBS or v != LATE_KNOBS[k]}
        blob = json.dumps(knobs, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def inert_knobs(self) -> dict[str, str]:
        """Knobs that change nothing under the rest of this harness, with the reason.

        A single-factor intervention on an inert knob is a no-op whose backtest can only measure noise (a
        first demo campaign "promoted" clip-higher this way), so brains skip them and the propose node
        refuses them. The clip is inert on-policy: one optimiser step per generated batch
        (``num_iterations: 1``, TRL's ``steps_per_generation`` = gradient accumulation = 1) makes the
        probability ratio exactly 1.
        """
        g, r, d = self.grpo, self.reward, self.data
        out: dict[str, str] = {}
        if g.num_iterations == 1:
            for k in ("grpo.epsilon", "grpo.epsilon_high"):
                out[k] = "the clip never binds on-policy (num_iterations: 1 makes the ratio 1); raise num_iterations first"
        if not g.sync_ref_model:
            for k in ("grpo.ref_model_sync_steps", "grpo.ref_model_mixup_alpha"):
                out[k] = "used only when grpo.sync_ref_model is on"
        if not g.use_adaptive_entropy:
            out["grpo.entropy_target"] = "used only when grpo.use_adaptive_entropy is on"
        if d.sampling != "difficulty_targeted":
            out["data.target_pass_rate"] = "used only when data.sampling is difficulty_targeted"
        if r.correctness.match != "exact":
            out["reward.correctness.tests"] = "used only when reward.correctness.match is exact"
        if r.overlong.weight == 0:
            out["reward.overlong.buffer"] = "used only when reward.overlong.weight > 0"
        if r.repetition.weight == 0:
            out["reward.repetition.ngram"] = "used only when reward.repetition.weight > 0"
        if self.model.lora_r == 0:
            for k in ("model.lora_alpha", "model.lora_dropout", "model.lora_target_modules"):
                out[k] = "used only when model.lora_r > 0 (LoRA)"
        return out

    def with_knob(self, path: str, value: Any) -> HarnessSpec:
        """A copy with one knob changed, validated as a whole (single-factor interventions use this)."""
        if path not in self.knobs():
            raise ConfigError(f"unknown knob '{path}'; known knobs: {', '.join(sorted(self.knobs()))}")
        data = self.model_dump(mode="json")
        node = data
        *parents, leaf = path.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
        out = _validate(data, source=f"knob {path}={value!r}")
        out.source_dir, out.source_file = self.source_dir, self.source_file
        return out


class KnobChange(BaseModel):
    path: str
    old: Any
    new: Any


def diff(a: HarnessSpec, b: HarnessSpec) -> list[KnobChange]:
    """Knobs whose value differs between two harnesses, sorted by path."""
    ka, kb = a.knobs(), b.knobs()
    return [KnobChange(path=k, old=ka.get(k), new=kb.get(k)) for k in sorted(set(ka) | set(kb)) if ka.get(k) != kb.get(k)]


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def knob_docs(model: type[BaseModel] = HarnessSpec, prefix: str = "") -> list[dict[str, Any]]:
    """Every leaf knob with its description, default, bounds and normal range (:mod:`evotrainer.config.ranges`) — the
    source of `evotrainer harness knobs`."""
    rows: list[dict[str, Any]] = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue  # source_dir / source_file: where the file was, not a knob
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows.extend(knob_docs(ann, f"{prefix}{name}."))
            continue
        bounds = {}
        for m in field.metadata:
            for attr in ("ge", "gt", "le", "lt", "min_length", "max_length"):
                if getattr(m, attr, None) is not None:
                    bounds[attr] = getattr(m, attr)
        usual = NORMAL.get(f"{prefix}{name}")
        rows.append(
            {
                "knob": f"{prefix}{name}",
                "type": getattr(ann, "__name__", str(ann)).replace("typing.", ""),
                "default": field.get_default(call_default_factory=True),
                "bounds": bounds,
                "description": field.description or "",
                "normal": usual.describe() if usual else None,
                "normal_source": usual.source if usual else None,
            }
        )
    return rows


def _validate(data: Any, source: str) -> HarnessSpec:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a harness must be a YAML mapping of sections, got {type(data).__name__}")
    try:
        return HarnessSpec.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, HarnessSpec, "harness")) from None


def load_yaml_model(path: str | Path, model: type[BaseModel], what: str, *, max_bytes: int = MAX_BYTES):
    """Read a YAML file into a pydantic model; every failure is a ConfigError naming the file (and field).

    Harness files, campaign specs and labelled archives all load through here, so they fail the same way:
    missing or oversized file, bytes that are not UTF-8, YAML syntax, duplicate keys, alias bombs or deep
    nesting (each with its line: :mod:`evotrainer.core.safe_yaml`), not a mapping, or invalid fields (see
    :func:`~evotrainer.core.errors.format_validation_error`). A model with a ``source_dir`` field learns the
    file's directory, against which it resolves relative paths (and ``source_file``, the file itself).
    """
    p = Path(path)
    data = load_yaml_file(p, what, max_bytes=max_bytes)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a {what} must be a YAML mapping, got {type(data).__name__}")
    try:
        obj = model.model_validate(data, context={"source_dir": str(p.resolve().parent)})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, str(p), model, what)) from None
    except RecursionError:  # a backstop: safe_yaml limits the depth of what it returns
        raise ConfigError(f"{p}: nested too deeply to validate; flatten the structure") from None
    if "source_dir" in type(obj).model_fields:
        obj.source_dir = str(p.resolve().parent)
    if "source_file" in type(obj).model_fields:
        obj.source_file = str(p)
    return obj


def load_harness(path: str | Path) -> HarnessSpec:
    """Read and validate a harness YAML file; raises ConfigError naming the file and field. An empty file (or one of
    comments, or ``null``) is refused: it would validate as every default under the name 'unnamed', which is never
    what was meant."""
    p = Path(path)
    if p.is_file() and not load_yaml_file(p, "harness"):
        raise ConfigError(f"{p}: the harness is empty; give at least its name and the knobs it changes (see "
                          "harnesses/grpo-baseline.yaml), or use that file")
    return load_yaml_model(path, HarnessSpec, "harness")


def dump_harness(spec: HarnessSpec) -> str:
    """YAML text of a harness with every knob spelled out (what runs record as their artifact)."""
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
