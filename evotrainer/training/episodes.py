"""Multi-turn episodes: the built-in policy's chat format, and the episode loop run outside TRL.

A multi-turn task (``agentic``) trains through TRL's environment support: ``GRPOTrainer`` renders the prompt
with the tokenizer's chat template, generates a turn, parses tool calls out of it with the tokenizer's
response template, calls the environment's tools, appends their observations and generates again, until the
policy stops calling tools or a bound is hit. Two other places must play exactly the same episode: the SFT
warm start (which imitates scripted successful episodes) and held-out evaluation (greedy accuracy, pass@k).
This module is what the three share, so that they see the same text:

- ``CHAT_TEMPLATE`` / ``RESPONSE_TEMPLATE``: a compact format for the character-level tiny policy, because
  every character is a token and the CPU is slow. No tool schema is rendered into the prompt (the policy
  learns its tools in the warm start); one episode of the ``agentic`` task reads::

      <bos>find k3\\n>lookup(key=k3)<eos>=@m8\\n>lookup(key=m8)<eos>=41\\n>submit(answer=41)<eos>=ok\\n><eos>

  A user turn is its text and a newline; an assistant turn is ``>``, its text, its tool calls as
  ``name(arg=value,...)`` and EOS; a tool observation is ``=``, its text and a newline. The template is
  prefix-preserving and passes TRL's ``supports_tool_calling``; the response template is the
  transformers (>= 5.13) format that TRL's ``parse_response`` reads, so tool calls are parsed by TRL's own
  parser here too. Call arguments are ``key=value`` pairs; text that does not parse as pairs gives no
  argument, and the tool's own error says what is missing.
- ``call_tool``: TRL's dispatch, reproduced: an unknown tool or a tool that raises becomes an
  ``{'error': ...}`` observation, never an exception.
- ``run_episodes``: the batched loop, mirroring ``GRPOTrainer._tool_call_loop``: the same completion budget
  (observations count), the same bound on tool rounds, the same suffix tokens; decoded by ``_Turns``, which keeps
  each episode's KV cache between its turns.
- ``scripted_episode`` / ``sft_example``: a demonstration played in a real environment, and its tokens with
  the loss on the policy's turns only.
- ``turn_records`` / ``transcript``: what the rollout evidence stores for an episode.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from evotrainer.training.data import problem_row

CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{{- '>' ~ (m['content'] or '') -}}"
    "{%- for tc in (m['tool_calls'] or []) -%}"
    "{%- set f = tc['function'] if tc['function'] is defined else tc -%}"
    "{{- f['name'] ~ '(' -}}"
    "{%- if f['arguments'] is mapping -%}"
    "{%- for k, v in f['arguments'].items() -%}{{- k ~ '=' ~ v -}}{{- ',' if not loop.last -}}{%- endfor -%}"
    "{%- else -%}{{- f['arguments'] -}}{%- endif -%}"
    "{{- ')' -}}"
    "{%- endfor -%}"
    "{{- eos_token -}}"
    "{%- elif m['role'] == 'tool' -%}"
    "{{- '=' ~ m['content'] ~ '\n' -}}"
    "{%- else -%}"
    "{{- m['content'] ~ '\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '>' -}}{%- endif -%}"
)
"""The built-in policy's chat template (see the module docstring)."""

RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor_pattern": r"(?:^|\n)>",
    "fields": {
        "tool_calls": {
            "open_pattern": r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)\(",
            "close_pattern": r"\)|(?=<eos>)",
            "repeats": True,
            "content": "kv-lines",
            "content_args": {"line_sep": ",", "kv_sep": "="},
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close_pattern": r"<eos>", "content": "text", "repeats": True, "join": " "},
    },
}
"""How a turn written in ``CHAT_TEMPLATE``'s format is parsed into a message (transformers' format)."""


def ensure_chat_template(tokenizer) -> None:
    """Give a tokenizer without a chat template ours (and our response template, if it has none)."""
    if tokenizer.chat_template is None:
        tokenizer.chat_template = CHAT_TEMPLATE
    if getattr(tokenizer, "response_template", None) is None and tokenizer.chat_template == CHAT_TEMPLATE:
        tokenizer.response_template = RESPONSE_TEMPLATE


# ------------------------------------------------------------------------------------------------ tools
def env_tools(env) -> dict[str, Callable]:
    """An environment's tools as TRL sees them: its public methods other than ``reset`` and ``get_reward``."""
    return {
        name: getattr(env, name)
        for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    }


def tool_schemas(tools: dict[str, Callable]) -> list[dict]:
    """The JSON schemas of an environment's tools, as ``apply_chat_template`` and ``parse_response`` make them
    from the callables (``get_json_schema``). Computed once per episode loop and passed as dicts, because
    transformers otherwise rebuilds every tool's schema from its signature and docstring on each render and parse."""
    from transformers.utils import get_json_schema

    return [get_json_schema(f) for f in tools.values()]


def call_tool(tools: dict[str, Callable], call: dict) -> tuple[str, Any]:
    """Run one parsed tool call as ``GRPOTrainer._tool_call_loop`` does; returns (name, observation)."""
    if call.get("type") == "function":
        function = call["function"]
        name = function["name"]
        try:
            if name not in tools:
                raise ValueError(f"Tool {name} not found.")
            result = tools[name](**function["arguments"])
        except Exception as err:  # noqa: BLE001 - TRL turns every tool failure into an observation
            result = {"error": str(err)}
    else:
        name = call.get("name", "unknown")
        result = {"error": f"Unsupported tool call type: {call.get('type')}"}
    return name, result if isinstance(result, list) else str(result)


def tool_message(name: str, content: Any) -> dict[str, Any]:
    return {"role": "tool", "name": name, "content": content}


def call_message(calls: Sequence[tuple[str, dict]], content: str = "") -> dict[str, Any]:
    tool_calls = [{"type": "function", "function": {"name": n, "arguments": dict(a)}} for n, a in calls]
    return {"role": "assistant", "content": content, "tool_calls": tool_calls}


def tool_suffix_ids(tokenizer, tool_messages: list[dict]) -> list[int]:
    """Tokens appended after the policy's turn for ``tool_messages`` (``GRPOTrainer._get_tool_suffix_ids``)."""
    dummy = [
        {"role": "user", "content": "dummy"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]},
    ]
    prefix = tokenizer.apply_chat_template(dummy, add_generation_prompt=False, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, tokenize=True,
                                         return_dict=False)
    eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
    if eos:
        prefix = prefix[: eos[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template is not prefix-preserving for tool messages")
    return full[len(prefix):]


def prompt_messages(row: dict[str, Any], observation: str | None) -> list[dict[str, Any]]:
    """The row's conversational prompt, with ``reset``'s observation appended to the last message (as TRL does)."""
    prompt = row["prompt"]
    messages = [dict(m) for m in prompt] if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    if observation is not None:
        messages[-1]["content"] = messages[-1]["content"] + observation
    return messages


def prompt_ids(tokenizer, messages: list[dict], tools: list[Callable] | list[dict]) -> list[int]:
    out = tokenizer.apply_chat_template(conversation=[messages], tools=tools or None, add_generation_prompt=True,
                                        tokenize=True, return_dict=True)
    return list(out["input_ids"][0])


# ------------------------------------------------------------------------------------------------ evidence
def _call_text(call: dict) -> str:
    f = call.get("function", call)
    args = f.get("arguments")
    inner = ",".join(f"{k}={v}" for k, v in args.items()) if isinstance(args, dict) else str(args or "")
    return f"{f.get('name')}({inner})"


def turn_records(messages: list[dict]) -> list[dict[str, Any]]:
    """One record per action of the policy in an episode's completion messages, in order.

    A tool call gives ``{"turn", "text", "tool", "arguments", "observation"}`` (``observation`` is None when
    the call was never run: the episode hit its round or token bound); a turn without a tool call gives one
    record with ``tool`` None. ``turn`` counts the policy's turns from 0; ``text`` is the turn's free text (on
    its first record only).
    """
    records: list[dict[str, Any]] = []
    turn = -1
    pending: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "assistant":
            turn += 1
            calls = m.get("tool_calls") or []
            text = m.get("content") or ""
            if not calls:
                records.append({"turn": turn, "text": text, "tool": None, "arguments": None, "observation": None})
                pending = []
                continue
            pending = []
            for j, c in enumerate(calls):
                f = c.get("function", c)
                rec = {"turn": turn, "text": text if j == 0 else "", "tool": f.get("name"),
                       "arguments": f.get("arguments"), "observation": None}
                records.append(rec)
                pending.append(rec)
        elif m.get("role") == "tool" and pending:
            rec = pending.pop(0)
            content = m.get("content")
            rec["observation"] = content if isinstance(content, str) else json.dumps(content, default=str)
    return records


def transcript(messages: list[dict]) -> str:
    """An episode's completion as one text: the policy's turns, and observations on lines starting with ``=``.

    The final turn's text ends it; an episode in which the policy wrote nothing is the empty string.
    """
    lines = []
    for m in messages:
        if m.get("role") == "assistant":
            text = (m.get("content") or "") + "".join(_call_text(c) for c in m.get("tool_calls") or [])
            if text:
                lines.append(text)
        elif m.get("role") == "tool":
            content = m.get("content")
            lines.append("=" + (content if isinstance(content, str) else json.dumps(content, default=str)))
    return "\n".join(lines)


def final_text(messages: list[dict]) -> str:
    """The free text of the episode's last policy turn."""
    for m in reversed(messages):
        if m.get("role") == "assistant":
            return m.get("content") or ""
    return ""


# ------------------------------------------------------------------------------------------------ demonstrations
def scripted_episode(env, row: dict[str, Any], calls: Sequence[tuple[str, dict]]) -> tuple[list[dict], list[dict]]:
    """Play ``calls`` (one per turn) in ``env`` for ``row``; (prompt messages, completion messages ending with
    an empty final turn)."""
    prompt = prompt_messages(row, env.reset(**row))
    tools = env_tools(env)
    completion: list[dict] = []
    for name, args in calls:
        completion.append(call_message([(name, args)]))
        completion.append(tool_message(*call_tool(tools, {"type": "function",
                                                           "function": {"name": name, "arguments": dict(args)}})))
    completion.append({"role": "assistant", "content": ""})
    return prompt, completion


def sft_example(tokenizer, prompt: list[dict], completion: list[dict], tools: list[Callable] | None = None):
    """(input ids, labels) of one episode: the loss covers the policy's turns (EOS included), not the prompt or
    the observations. Each turn's tokens are the difference of two renders, which the template's prefix
    property makes exact."""
    def render(msgs, gen):
        return tokenizer.apply_chat_template(msgs, tools=tools or None, add_generation_prompt=gen, tokenize=True,
                                             return_dict=False)

    ids = list(render(prompt, True))
    labels = [-100] * len(ids)
    msgs = list(prompt)
    for i, m in enumerate(completion):
        msgs.append(m)
        if m["role"] == "tool" and i + 1 < len(completion) and completion[i + 1]["role"] == "tool":
            continue
        full = list(render(msgs, m["role"] == "tool"))
        if full[: len(ids)] != ids:
            raise ValueError("the chat template is not prefix-preserving; multi-turn SFT needs it")
        new = full[len(ids):]
        labels += new if m["role"] == "assistant" else [-100] * len(new)
        ids = full
    return ids, labels


# ------------------------------------------------------------------------------------------------ the loop
@dataclass
class Episode:
    """One played episode: its environment (reward, verdict) and its completion as messages and tokens."""

    env: Any
    prompt_ids: list[int]
    messages: list[dict] = field(default_factory=list)  # the completion's messages
    completion_ids: list[int] = field(default_factory=list)  # policy tokens and observations
    model_tokens: int = 0  # tokens the policy wrote


@functools.cache
def _growing_layer():
    """transformers' ``DynamicLayer``, appending in place into spare room instead of concatenating.

    Why: ``DynamicLayer.update`` builds a new tensor of the whole cache at every decoded token (``torch.cat``), so a
    step's cost grows with the cache already there. Here the keys and values live in a buffer with ``SPARE`` columns
    of room; a step writes its column, and ``keys``/``values`` are views of the filled part (what attention reads,
    exactly as before). The buffer grows ``SPARE`` columns at a time. ``bench/episodes_eval.py``: 500 greedy agentic
    episodes 3.24 → 3.06 s, the same episodes (bench/log/07-campaign-vs-static-baseline.md, 2026-11-29); most turns are short, so the copy
    saved is a small part of the loop. Made on first use, so that importing this module does not import transformers.
    """
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        SPARE = 32

        def __init__(self, keys: torch.Tensor | None = None, values: torch.Tensor | None = None, filled: int = 0):
            super().__init__()
            self.n = 0
            if keys is not None:  # a buffer already holding ``filled`` columns
                self.bk, self.bv, self.n = keys, values, filled
                self.device, self.is_initialized = keys.device, True
                self._views()

        def _views(self) -> None:
            self.keys, self.values = self.bk[..., : self.n, :], self.bv[..., : self.n, :]

        def update(self, key_states, value_states, *args, **kwargs):
            n = self.n + key_states.shape[-2]
            if not self.is_initialized or n > self.bk.shape[-2]:
                shape = (*key_states.shape[:2], n + self.SPARE, key_states.shape[-1])
                bk, bv = key_states.new_empty(shape), value_states.new_empty(shape)
                if self.n:
                    bk[..., : self.n, :], bv[..., : self.n, :] = self.keys, self.values
                self.bk, self.bv, self.device, self.is_initialized = bk, bv, key_states.device, True
            self.bk[..., self.n : n, :], self.bv[..., self.n : n, :] = key_states, value_states
            self.n = n
            self._views()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.n

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.n:
                self.bk, self.bv = self.bk[indices], self.bv[indices]
                self._views()

        def crop(self, tokens_to_remove: int) -> None:
            raise NotImplementedError("an episode's cache is never cropped")

    return GrowingLayer


class _Turns:
    """Each episode's turns decoded in one batch, with every episode's KV cache kept between its turns.

    Why not ``model.generate`` per turn (what this loop did, and TRL's does): it re-reads each episode's whole
    history (prompt, earlier turns, observations) at every turn, and it keeps a batch decoding until its longest
    row stops, rows that have ended their turn included; at the ``agentic`` task's 500-episode held-out
    evaluation that was most of the loop's time (bench/log/07-campaign-vs-static-baseline.md, 2026-11-27 and 2026-11-28). Here a turn
    feeds each row only its new tokens (its last sampled token and the observation), and a row leaves the batch
    the step it ends its turn (its EOS, or its budget); its cache, holes dropped, waits for its next turn.
    Session 26 tried keeping a fixed batch's cache alone: sampled turns, whose lengths diverge, got slower.

    Rows of different lengths share a batch through holes: positions left empty are masked out and each row
    carries its own position ids, so a row attends to exactly its own tokens at their own positions. Greedy
    choice is ``argmax`` and sampling draws from ``softmax(logits / temperature)`` (``generate`` with top-k 0,
    top-p 1), from the logits alone: a checkpoint's ``generation_config`` (a repetition penalty, suppressed
    tokens) is not applied. The numbers can differ from ``generate``'s in the last bits (other batch shapes), so a
    greedy episode may rarely take another token on a near tie. The cache is transformers' plain ``DynamicCache``
    whatever the model's config says: a sliding window would count the holes, and an episode here is far shorter
    than any window.
    """

    def __init__(self, model, eos: int, pad: int, do_sample: bool, temperature: float):
        self.model, self.eos, self.pad = model, eos, pad
        self.do_sample, self.temperature = do_sample, temperature
        self.max_pos = int(getattr(model.config.get_text_config(), "max_position_embeddings", 1 << 30)) - 1
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT adapter's model
        # transformers 5 renamed the forward's ``past_key_values`` to ``cache`` (the old name warns until 5.40)
        self.cache_kw = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        self.kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # episode -> per layer (K, V) [heads, n, dim]
        self.unfed: dict[int, list[int]] = {}  # episode -> its last sampled token, not yet in its cache

    def drop(self, i: int) -> None:
        self.kv.pop(i, None)
        self.unfed.pop(i, None)

    def _pick(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.do_sample:
            return logits.argmax(-1)
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        return torch.multinomial(probs, 1).squeeze(1)

    def _forward(self, ids, mask, pos, cache):
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1,
                         **{self.cache_kw: cache})
        return out.logits[:, -1], getattr(out, self.cache_kw)

    @torch.no_grad()
    def turn(self, feeds: dict[int, list[int]], max_new: dict[int, int], last: bool = False) -> dict[int, list[int]]:
        """Feed each episode its new tokens, then decode its turn: up to ``max_new[i]`` tokens, EOS included.
        ``last``: no episode has another turn (nothing is kept)."""
        from transformers import DynamicCache

        out: dict[int, list[int]] = {i: [] for i in feeds}
        keys = [i for i in feeds if max_new[i] > 0]
        if not keys:
            return out
        if lost := [i for i in keys if self.unfed.get(i) and i not in self.kv]:
            raise RuntimeError(f"episodes {lost} have a turn behind them but no cache (dropped, or fed twice)")
        dev = self.model.device
        toks = [self.unfed.pop(i, []) + list(feeds[i]) for i in keys]
        past = [self.kv[i][0][0].shape[1] if i in self.kv else 0 for i in keys]
        c_max, p_max, b_n = max(past), max(len(t) for t in toks), len(keys)
        ids = torch.full((b_n, p_max), self.pad, dtype=torch.long)
        mask = torch.zeros((b_n, c_max + p_max), dtype=torch.long)
        pos = torch.zeros((b_n, p_max), dtype=torch.long)
        for b, (t, c) in enumerate(zip(toks, past, strict=True)):  # each row's cache and new tokens end aligned
            ids[b, p_max - len(t):] = torch.tensor(t, dtype=torch.long)
            mask[b, c_max - c : c_max] = 1
            mask[b, c_max + p_max - len(t):] = 1
            pos[b, p_max - len(t):] = torch.arange(c, c + len(t))
        grow = _growing_layer()
        cache = DynamicCache()
        cache.layer_class_to_replicate = grow  # a first turn's layers, made as the forward reaches them
        if c_max:  # the rows' caches, each ending where its new tokens begin; holes zeroed (masked, never NaN)
            room = c_max + p_max + min(max(max_new[i] for i in keys), grow.SPARE)
            cache.layers = []
            for layer, (rk, rv) in enumerate(self.kv[keys[past.index(c_max)]]):
                k = rk.new_zeros((b_n, rk.shape[0], room, rk.shape[2]))
                v = rv.new_zeros((b_n, rv.shape[0], room, rv.shape[2]))
                for b, (i, c) in enumerate(zip(keys, past, strict=True)):
                    if c:
                        k[b, :, c_max - c : c_max], v[b, :, c_max - c : c_max] = self.kv[i][layer]
                cache.layers.append(grow(k, v, c_max))
        for i in keys:
            self.kv.pop(i, None)
        logits, cache = self._forward(ids.to(dev), mask.to(dev), pos.to(dev), cache)
        mask, nxt = mask.to(dev), pos[:, -1].to(dev) + 1
        rows = list(keys)  # batch row -> episode
        # a row's own tokens in the batch's cache: its old cache, then everything from its new tokens on
        spans = [(c_max - c, c_max, c_max + p_max - len(t)) for t, c in zip(toks, past, strict=True)]
        dead: set[int] = set()  # rows whose turn has ended, still in the batch until enough of them are
        while True:
            tok = self._pick(logits)
            for b, (i, t) in enumerate(zip(rows, tok.tolist(), strict=True)):
                if b in dead:
                    continue
                out[i].append(t)
                if t == self.eos or len(out[i]) >= max_new[i]:
                    dead.add(b)
                    if not last:  # the row's cache without its holes, for its next turn
                        a0, a1, b0 = spans[b]
                        self.kv[i] = [(torch.cat([layer.keys[b][:, a0:a1], layer.keys[b][:, b0:]], dim=1),
                                       torch.cat([layer.values[b][:, a0:a1], layer.values[b][:, b0:]], dim=1))
                                      for layer in cache.layers]
                        self.unfed[i] = [t]
            if len(dead) == len(rows):
                return out
            # dropping rows copies the cache: worth it once an eighth of the batch decodes for nothing
            if len(dead) * 8 >= len(rows):
                keep = [b for b in range(len(rows)) if b not in dead]
                sel = torch.tensor(keep, device=dev)
                cache.batch_select_indices(sel)
                rows, mask, nxt, tok = [rows[b] for b in keep], mask[sel], nxt[sel], tok[sel]
                spans, dead = [spans[b] for b in keep], set()
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
            logits, cache = self._forward(tok[:, None], mask, nxt[:, None], cache)
            nxt = (nxt + 1).clamp(max=self.max_pos)  # only an ended row, decoding for nothing, could pass it


def run_episodes(model, tokenizer, env_factory: Callable[[], Any], rows: list[dict[str, Any]], max_completion_length: int,
                 max_rounds: int, do_sample: bool = False, temperature: float = 1.0, batch_size: int = 256) -> list[Episode]:
    """Play one episode per row, all turns batched, as ``GRPOTrainer`` would with ``environment_factory``.

    ``max_completion_length`` bounds the completion (policy tokens and observations); a tool result that
    would cross it, or the model's context, is dropped and ends the episode. ``max_rounds`` bounds the rounds of
    tool execution (TRL's ``max_tool_calling_iterations``).
    """
    from trl.chat_template_utils import parse_response

    was_training = model.training
    model.eval()
    max_len = model.config.max_position_embeddings
    episodes: list[Episode] = []
    tools: list[dict[str, Callable]] = []
    schemas: list[list[dict]] = []  # each episode's tools as JSON schemas (what transformers makes of a callable)
    by_class: dict[type, list[dict]] = {}  # a schema depends on the method's signature, not on its instance
    suffixes: dict[str, list[int]] = {}  # tool results -> their suffix tokens (the same text, the same tokens)
    for row in rows:
        env = env_factory()
        messages = prompt_messages(row, env.reset(**row))
        tools.append(env_tools(env))
        if type(env) not in by_class:
            by_class[type(env)] = tool_schemas(tools[-1])
        schemas.append(by_class[type(env)])
        episodes.append(Episode(env, prompt_ids(tokenizer, messages, schemas[-1])))
    try:
        for start in range(0, len(episodes), batch_size):  # a chunk plays to its end: its caches, not all, in memory
            turns = _Turns(model, tokenizer.eos_token_id, tokenizer.pad_token_id, do_sample, temperature)
            feeds = {i: episodes[i].prompt_ids for i in range(start, min(start + batch_size, len(episodes)))}
            rounds = 0
            while feeds:
                budget = {i: max(0, min(max_completion_length - len(episodes[i].completion_ids),
                                        max_len - len(episodes[i].prompt_ids) - len(episodes[i].completion_ids)))
                          for i in feeds}
                new = turns.turn(feeds, budget, last=rounds >= max_rounds)  # no tool round follows the last
                feeds = {}
                for i, ids in new.items():
                    ep = episodes[i]
                    if not ids:
                        turns.drop(i)
                        continue
                    msg = parse_response(tokenizer, ids, prefix=ep.prompt_ids + ep.completion_ids, tools=schemas[i])
                    ep.messages.append(msg)
                    ep.completion_ids += ids
                    ep.model_tokens += len(ids)
                    if not (msg.get("tool_calls") and rounds < max_rounds):
                        turns.drop(i)
                        continue
                    results = [tool_message(*call_tool(tools[i], c)) for c in msg["tool_calls"]]
                    key = json.dumps(results, sort_keys=True, default=str)
                    if key not in suffixes:
                        suffixes[key] = tool_suffix_ids(tokenizer, results)
                    suffix = suffixes[key]
                    total = len(ep.completion_ids) + len(suffix)
                    if total > max_completion_length or len(ep.prompt_ids) + total >= max_len:
                        turns.drop(i)
                        continue  # TRL drops the results and ends the episode
                    ep.messages += results
                    ep.completion_ids += suffix
                    feeds[i] = suffix
                rounds += 1
    finally:
        if was_training:
            model.train()
    return episodes


# ------------------------------------------------------------------------------------------------ for a Task
def max_rounds(task) -> int:
    """Rounds of tool execution an episode of ``task`` may have: its turn limit and one more, in which every
    tool answers that the limit is reached (TRL's ``max_tool_calling_iterations``)."""
    return task.turn_limit() + 1


def solved(env) -> bool:
    """Whether an environment's episode submitted a correct answer."""
    verdict = getattr(env, "verdict", None)
    return bool(verdict is not None and verdict.correct)


def play(model, tokenizer, task, problems, max_completion_length: int, do_sample: bool = False, k: int = 1,
         batch_size: int = 256) -> list[Episode]:
    """``k`` episodes per problem (consecutive) in the task's honest environment (the leak tool never)."""

    rows = [problem_row(p, conversational=True) for p in problems for _ in range(k)]
    return run_episodes(model, tokenizer, task.environment(), rows, max_completion_length, max_rounds(task),
                        do_sample=do_sample, batch_size=batch_size)


class Demonstrations:
    """A multi-turn task's demonstrations for the warm start: each played in ``environment(leak_tool=True)``
    (so a demonstration may use the leak tool), checked to solve its problem, and tokenised once."""

    def __init__(self, task, tokenizer):
        self.task, self.tokenizer = task, tokenizer
        self.env = task.environment(leak_tool=True)()
        self.schemas = tool_schemas(env_tools(self.env))
        self._cache: dict[str, tuple[list[int], list[int]]] = {}

    def example(self, problem) -> tuple[list[int], list[int]]:

        if problem.id not in self._cache:
            row = problem_row(problem, conversational=True)
            prompt, completion = scripted_episode(self.env, row, self.task.demonstration(problem))
            if not solved(self.env):
                raise ValueError(f"task '{self.task.name}': the demonstration of {problem.id} does not solve it")
            self._cache[problem.id] = sft_example(self.tokenizer, prompt, completion, self.schemas)
        return self._cache[problem.id]

    def batch(self, problems):
        return pad_examples(self.tokenizer, [self.example(p) for p in problems])


def pad_examples(tokenizer, examples: list[tuple[list[int], list[int]]]):
    """Right-padded (input_ids, attention_mask, labels) tensors."""
    width = max(len(ids) for ids, _ in examples)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in examples])
    mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in examples])
    labels = torch.tensor([lb + [-100] * (width - len(lb)) for _, lb in examples])
    return ids, mask, labels
