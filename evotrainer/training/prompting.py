"""How a policy is prompted: raw text for a model without a chat template, the chat template for a chat model.

One rule, read off the saved tokenizer, so that training, evaluation, the warm start and a campaign's scoring
of any checkpoint prompt the same policy the same way without being told:

- a single-turn task and a tokenizer **with** a chat template (SmolLM2-Instruct, a user's Qwen or Llama
  instruct model): the prompt is the task's :meth:`~evotrainer.tasks.Task.chat_messages` (a system message and
  the problem in words, e.g. "What is 12+35? Answer with the number only."), rendered by the tokenizer's own
  template with the generation prompt (TRL does the same from the conversational dataset rows we give it);
  generation stops at EOS, which for a chat model is its end-of-turn token (``<|im_end|>``);
- a tokenizer **without** one (our built-in character-level models, a base model), or a task that sets
  ``raw_prompts = True``: the raw ``Problem.prompt`` (``37+58=``), as before;
- a multi-turn task (``agentic``) talks through :mod:`evotrainer.training.episodes` instead.
"""

from __future__ import annotations

from typing import Any

from evotrainer.tasks import Problem, Task


def chat_format(tokenizer, task: Task) -> bool:
    """Whether single-turn prompts of ``task`` go through ``tokenizer``'s chat template (see the module docstring)."""
    return (task.environment() is None and not task.raw_prompts
            and getattr(tokenizer, "chat_template", None) is not None)


def messages(task: Task, problem: Problem) -> list[dict[str, str]]:
    return [dict(m) for m in task.chat_messages(problem)]


def render(tokenizer, task: Task, problems: list[Problem]) -> tuple[list[str], bool]:
    """Model input texts for ``problems`` and whether the tokenizer should add its special tokens to them (not
    when a chat template already placed them)."""
    if not chat_format(tokenizer, task):
        return [p.prompt for p in problems], True
    texts = [tokenizer.apply_chat_template(messages(task, p), tokenize=False, add_generation_prompt=True)
             for p in problems]
    return texts, False


def dataset_prompts(tokenizer, task: Task, problems: list[Problem]) -> list[Any] | None:
    """The ``prompt`` column TRL should see: conversational rows for a chat model (TRL applies the template),
    None when the raw prompts stand."""
    if not chat_format(tokenizer, task):
        return None
    return [messages(task, p) for p in problems]


def stop_ids(tokenizer, model=None) -> list[int]:
    """Token ids that end a completion: the tokenizer's EOS (a chat model's end-of-turn) and the model's
    generation-config EOS ids."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for i in ([extra] if isinstance(extra, int) else list(extra or [])):
        if i not in ids:
            ids.append(i)
    return ids
