"""The symptom vocabulary: one set of names shared by diagnostics, gates, proposals and skills.

A finding names a symptom from this list; a skill's trigger names the same symptom; a proposal's
hypothesis starts from one. Keeping them in one module (not free text) is what lets the library match a
lesson to a new run.
"""

from __future__ import annotations

SYMPTOMS: dict[str, str] = {
    "dead_groups": "Many GRPO groups have zero reward variance, so they carry no gradient.",
    "too_hard": "Most groups are all wrong: the policy rarely succeeds on the training prompts.",
    "too_easy": "Most groups are all correct: the prompts no longer teach anything.",
    "entropy_collapse": "Policy entropy fell far below its starting level: exploration has stopped.",
    "entropy_blowup": "Policy entropy rose far above its starting level: outputs are turning into noise.",
    "truncation": "Many completions hit max_completion_length without finishing.",
    "length_collapse": "Completions shrank to empty or minimal answers.",
    "repetition": "Completions contain n-gram loops.",
    "echo": "Completions repeat the prompt or a tool observation instead of answering.",
    "reward_hacking": "Reward rises while strict correctness or held-out accuracy does not.",
    "answer_spraying": "Completions contain several candidate answers to game a lenient checker.",
    "kl_blowup": "KL to the reference policy grows fast or is very large.",
    "grad_spike": "Gradient norm spikes far above its running level.",
    "nan": "Loss, gradient norm or reward became NaN or infinite.",
    "plateau": "Reward and held-out accuracy stopped improving.",
    "learns_nothing": "Held-out accuracy does not improve over a long window although the reward keeps moving.",
    "forgetting": "Accuracy on an earlier distribution dropped.",
    "overfitting": "The gap between training accuracy and held-out accuracy keeps growing.",
    "hardcoding": "Programs special-case the literal example values instead of solving the task.",
    "answer_leak": "Success depends on a tool that leaks the answer.",
    "diagnostic_error": "A diagnostic crashed, timed out or could not run; its verdict is unknown.",
}


def check_symptom(name: str) -> str:
    if name not in SYMPTOMS:
        raise ValueError(f"unknown symptom '{name}'; known symptoms: {', '.join(sorted(SYMPTOMS))}")
    return name
