"""The symptom registry: every symptom's meaning, written once.

A finding names a symptom; a gate, a proposal's hypothesis and a skill's trigger name the same one; the heuristic
brain explains a proposal with its cause; the revision rule needs to know which symptoms claim a score came from
gaming the reward; and the brain ranks a symptom's remedies as urgently as those of the symptoms it can produce.
These used to live in three modules (a description table, the heuristic brain's causes and links, the revision
rule's exploit set), so a new symptom could be registered without its cause or its exploit flag. Now one
``Symptom`` record holds all of it, a test requires every record to be complete, and this module sits at the bottom
of the package (pydantic only), so diagnostics, the library, the store and the agent all read it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Symptom(BaseModel):
    """What a symptom means, why it happens, and how the campaign treats it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., pattern=r"^[a-z][a-z_]*$", description="The name findings, gates and skills use.")
    description: str = Field(..., min_length=10, description="What is observed (shown with findings and in prompts).")
    cause: str = Field(..., min_length=10, description="Why it usually happens (a proposal's hypothesis cites it).")
    exploit: bool = Field(False, description="It claims a high score came from gaming the reward or the environment: "
                                             "a confirmed held-out gain refutes a gate that fired on it.")
    explains: tuple[str, ...] = Field((), description="Symptoms it can produce: while both are present its remedies "
                                                      "are as urgent as theirs, and the heuristic brain does not count "
                                                      "the effect again in a change's relevance (truncation makes "
                                                      "groups look too hard; too_hard and dead_groups grade only the "
                                                      "share truncation does not explain).")
    observed: bool = Field(True, description="Seen in the training evidence; false for a reading of the recipe "
                                             "itself (unusual_recipe). The heuristic brain's hypothesis names an "
                                             "observed symptom (warning or above) its change answers before a recipe "
                                             "reading, so it cites what training showed; the reading only ranks it.")


def _s(name: str, description: str, cause: str, *, exploit: bool = False, explains: tuple[str, ...] = (),
       observed: bool = True) -> Symptom:
    return Symptom(name=name, description=description, cause=cause, exploit=exploit, explains=explains,
                   observed=observed)


_ALL = (
    _s("dead_groups", "Many GRPO groups have zero reward variance, so they carry no gradient.",
       "groups whose completions all get the same reward give GRPO a zero advantage, so no gradient"),
    # an all-wrong or all-right group is a dead one: the group shares count the same groups twice
    _s("too_hard", "Most groups are all wrong: the policy rarely succeeds on the training prompts.",
       "the policy rarely succeeds on these prompts, so most groups carry no signal", explains=("dead_groups",)),
    _s("too_easy", "Most groups are all correct: the prompts no longer teach anything.",
       "the policy already solves these prompts, so most groups carry no signal", explains=("dead_groups",)),
    _s("entropy_collapse", "Policy entropy fell far below its starting level: exploration has stopped.",
       "the policy became nearly deterministic and stopped exploring"),
    _s("entropy_blowup", "Policy entropy rose far above its starting level: outputs are turning into noise.",
       "updates are too large and the policy drifts towards noise"),
    # a cut-off answer is scored as a failure, so truncation makes groups look all-wrong (too_hard) and reward-flat
    # (dead_groups); without the link a critical too_hard buried the budget fix under every curriculum change
    _s("truncation", "Many completions hit max_completion_length without finishing.",
       "answers are cut off by the completion length limit and scored as failures",
       explains=("too_hard", "dead_groups")),
    _s("length_collapse", "Completions shrank to empty or minimal answers.",
       "the reward favours minimal completions over correct ones", exploit=True),
    _s("repetition", "Completions contain n-gram loops.",
       "the policy fell into n-gram loops that the reward does not penalise"),
    _s("echo", "Completions repeat the prompt or a tool observation instead of answering.",
       "the policy copies the prompt instead of answering", exploit=True),
    _s("reward_hacking", "Reward rises while strict correctness or held-out accuracy does not.",
       "the reward gives credit that strict correctness does not", exploit=True),
    _s("answer_spraying", "Completions contain several candidate answers to game a lenient checker.",
       "a lenient checker rewards completions that list several candidate answers", exploit=True),
    _s("kl_blowup", "KL to the reference policy grows fast or is very large.",
       "the policy moves away from the reference faster than the reward justifies"),
    _s("grad_spike", "Gradient norm spikes far above its running level.",
       "occasional very large gradients destabilise training"),
    _s("nan", "Loss, gradient norm or reward became NaN or infinite.", "numerical overflow from too large updates"),
    _s("plateau", "Reward and held-out accuracy stopped improving.",
       "the current recipe has extracted what it can from this data"),
    _s("learns_nothing", "Held-out accuracy does not improve over a long window although the reward keeps moving.",
       "the reward moves for reasons that do not transfer to the held-out problems (noise, format, or an exploit)"),
    # not a diagnostic's: the campaign writes it when a segment's held-out accuracy fell below an earlier version's
    # beyond noise and the mainline went back (agent/regression.py); a rollback alone would retrain the same recipe
    _s("regression", "Held-out accuracy fell below an earlier version's by more than noise, so the mainline went back.",
       "the recipe's updates are too large for this policy, so training undoes what it had learned"),
    _s("forgetting", "Accuracy on an earlier distribution dropped.",
       "updates overwrite what the policy knew on earlier distributions"),
    _s("overfitting", "The gap between training accuracy and held-out accuracy keeps growing.",
       "the policy memorises training prompts instead of generalising"),
    _s("hardcoding", "Programs special-case the literal example values instead of solving the task.",
       "the reward checks only the examples the policy can see, so copying their outputs pays", exploit=True),
    _s("answer_leak", "Success depends on a tool that leaks the answer.",
       "the environment offers a tool that reveals the answer, so using it pays more than solving", exploit=True),
    # not read from the training evidence: the recipe itself, against what practitioners run (config/ranges.py)
    _s("unusual_recipe", "A knob of the recipe lies outside the range practitioners run (evotrainer harness knobs).",
       "a value copied from another setting (a larger model, another library's default) or mistyped",
       observed=False),
    _s("diagnostic_error", "A diagnostic crashed, timed out or could not run; its verdict is unknown.",
       "the analyzer itself failed (a bug, a timeout, or evidence it cannot read), not the training run"),
)

SYMPTOMS: dict[str, Symptom] = {s.name: s for s in _ALL}

# symptoms that claim a score came from gaming the reward (a confirmed held-out gain refutes a gate on them)
EXPLOIT_SYMPTOMS: frozenset[str] = frozenset(s.name for s in _ALL if s.exploit)


def check_symptom(name: str) -> str:
    if name not in SYMPTOMS:
        raise ValueError(f"unknown symptom '{name}'; known symptoms: {', '.join(sorted(SYMPTOMS))}")
    return name


def _linked() -> None:
    for s in _ALL:
        for other in s.explains:
            check_symptom(other)


_linked()
