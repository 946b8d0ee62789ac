"""Shared bits of the benchmark scripts: argument parsing, peak RSS, and writing results as JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
             "MLFLOW_ENABLE_TELEMETRY": "false"}.items():
    os.environ.setdefault(k, v)


def parser(doc: str, default_home: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--home", default=str(ROOT / "runs" / default_home), help="state directory for the bench runs")
    return p


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_model() -> str | None:
    """The CPU's model name: torch picks its float kernels (AVX2, AVX-512, AMX) by what the CPU advertises, so the
    same seed can train to other weights on another kind of machine; rows from two machines are told apart by this."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels run with ('AVX512', 'AVX2', ...; ATEN_CPU_CAPABILITY lowers it)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def machine_kind() -> str:
    """What a row records of the machine its warm start was built on: the CPU model and torch's kernel level."""
    return f"{cpu_model()} ({cpu_capability()})"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def save(name: str, doc: dict) -> Path:
    import torch

    doc = {
        "bench": name,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads(), "cpu": cpu_model(),
                    "cpu_capability": cpu_capability(),
                    "packages": {p: _version(p) for p in ("transformers", "trl", "accelerate", "peft", "numpy")},
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
        **doc,
    }
    out = ROOT / "bench" / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2))
    print(json.dumps(doc, indent=2))
    return out
