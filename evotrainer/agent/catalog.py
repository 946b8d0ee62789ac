"""The built-in intervention catalog: symptom → one harness change, each from the GRPO literature.

This is what the heuristic brain draws candidates from until the skill library (issue 5) takes over;
then library skills become candidates the same way. An intervention is relative (``scale`` a number,
``set`` a value, ``step`` a difficulty range); ``resolve`` turns it into an absolute value for the current
harness, and drops it when it would change nothing or leave the knob's bounds.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from evotrainer.agent.brains.base import Candidate
from evotrainer.config import HarnessSpec
from evotrainer.errors import ConfigError


class Intervention(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    symptoms: tuple[str, ...]
    knob: str
    op: Literal["set", "scale", "step"]
    arg: Any
    description: str
    source: str


CATALOG: tuple[Intervention, ...] = (
    Intervention(id="clip-higher", symptoms=("entropy_collapse", "plateau"), knob="grpo.epsilon_high", op="set", arg=0.28,
                 description="Raise the upper clip range so low-probability tokens can grow (keeps exploration).",
                 source="DAPO, arXiv 2503.14476"),
    Intervention(id="entropy-bonus", symptoms=("entropy_collapse",), knob="grpo.entropy_coef", op="set", arg=0.005,
                 description="Add a small entropy bonus to the loss.", source="Skywork-OR1, arXiv 2505.22312"),
    Intervention(id="lower-lr", symptoms=("entropy_collapse", "grad_spike", "kl_blowup", "nan", "entropy_blowup"),
                 knob="optim.learning_rate", op="scale", arg=0.5,
                 description="Halve the learning rate: smaller, safer policy updates.", source="standard practice"),
    Intervention(id="raise-lr", symptoms=("plateau",), knob="optim.learning_rate", op="scale", arg=3.0,
                 description="Raise the learning rate half a decade (×3) when learning has stalled without instability.",
                 source="standard practice"),
    Intervention(id="drop-solved", symptoms=("dead_groups", "too_easy"), knob="data.drop_all_correct", op="set", arg=True,
                 description="Dynamic sampling between segments: drop prompts whose last group was all correct.",
                 source="DAPO dynamic sampling, arXiv 2503.14476"),
    Intervention(id="drop-unsolved", symptoms=("dead_groups", "too_hard"), knob="data.drop_all_wrong", op="set", arg=True,
                 description="Dynamic sampling between segments: drop prompts whose last group was all wrong.",
                 source="DAPO dynamic sampling, arXiv 2503.14476"),
    Intervention(id="difficulty-targeted", symptoms=("dead_groups", "too_easy", "too_hard", "plateau"),
                 knob="data.sampling", op="set", arg="difficulty_targeted",
                 description="Sample prompts whose observed pass rate is near 0.5, where groups carry most signal.",
                 source="VADE / DOTS, arXiv 2506.05316"),
    Intervention(id="harder-curriculum", symptoms=("too_easy",), knob="data.difficulty", op="step", arg=1,
                 description="Move the training difficulty range up one level.", source="curriculum learning"),
    Intervention(id="easier-curriculum", symptoms=("too_hard",), knob="data.difficulty", op="step", arg=-1,
                 description="Move the training difficulty range down one level.", source="curriculum learning"),
    Intervention(id="longer-completions", symptoms=("truncation",), knob="grpo.max_completion_length", op="scale", arg=2.0,
                 description="Double the completion budget so answers are not cut off.", source="standard practice"),
    Intervention(id="mask-truncated", symptoms=("truncation",), knob="grpo.mask_truncated_completions", op="set", arg=True,
                 description="Exclude truncated completions from the loss (overlong filtering).",
                 source="DAPO, arXiv 2503.14476"),
    Intervention(id="overlong-penalty", symptoms=("truncation", "repetition"), knob="reward.overlong.weight", op="set",
                 arg=1.0, description="Soft overlong punishment near the length limit.", source="DAPO, arXiv 2503.14476"),
    Intervention(id="repetition-penalty", symptoms=("repetition",), knob="reward.repetition.weight", op="set", arg=0.5,
                 description="Penalise repeated n-grams in completions.", source="standard practice"),
    Intervention(id="strict-correctness", symptoms=("answer_spraying", "reward_hacking"), knob="reward.correctness.match",
                 op="set", arg="exact", description="Only credit a completion that is exactly the answer.",
                 source="reward design; FAPO (flawed positives), arXiv 2510.22543"),
    Intervention(id="kl-anchor", symptoms=("kl_blowup", "reward_hacking", "forgetting", "entropy_blowup"),
                 knob="grpo.beta", op="set", arg=0.04, description="Anchor the policy to the reference with a KL term.",
                 source="DeepSeekMath GRPO, arXiv 2402.03300"),
    Intervention(id="more-samples", symptoms=("dead_groups", "too_hard"), knob="grpo.num_generations", op="scale", arg=2.0,
                 description="Sample more completions per prompt so hard prompts get a success in the group.",
                 source="standard practice"),
    Intervention(id="no-std-scaling", symptoms=("too_hard", "too_easy", "plateau"), knob="grpo.scale_rewards", op="set",
                 arg="none", description="Do not divide advantages by the group std (removes difficulty bias).",
                 source="Dr.GRPO, arXiv 2503.20783"),
    Intervention(id="high-entropy-tokens", symptoms=("entropy_collapse", "plateau"), knob="grpo.top_entropy_quantile",
                 op="set", arg=0.2, description="Train only on the 20% highest-entropy tokens (forking tokens).",
                 source="Beyond the 80/20 rule, arXiv 2506.01939"),
    Intervention(id="temperature-up", symptoms=("entropy_collapse", "dead_groups"), knob="grpo.temperature", op="set",
                 arg=1.2, description="Sample rollouts at a higher temperature for more diverse groups.",
                 source="standard practice"),
)


def _resolved_value(iv: Intervention, current: Any, harness: HarnessSpec) -> Any:
    if iv.op == "set":
        return iv.arg
    if iv.op == "scale":
        new = current * iv.arg
        return int(round(new)) if isinstance(current, int) and not isinstance(current, bool) else float(f"{new:.6g}")
    # step a [lo, hi] difficulty range (None = the task default level, unknown here: leave it)
    if current is None:
        return None
    return [current[0] + iv.arg, current[1] + iv.arg]


def resolve(harness: HarnessSpec, interventions=CATALOG) -> list[Candidate]:
    """Catalog entries as candidates with absolute values valid for this harness (no-ops dropped)."""
    knobs = harness.knobs()
    out: list[Candidate] = []
    for iv in interventions:
        current = knobs.get(iv.knob)
        value = _resolved_value(iv, current, harness)
        if value is None or value == current or (isinstance(current, list) and list(value) == list(current)):
            continue
        try:
            harness.with_knob(iv.knob, value)
        except ConfigError:
            continue  # out of bounds or inconsistent with the rest of the harness
        out.append(Candidate(id=iv.id, symptoms=list(iv.symptoms), knob=iv.knob, value=value,
                             description=iv.description, source=iv.source))
    return out
