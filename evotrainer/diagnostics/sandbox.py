"""Running an untrusted diagnostic: another process, confined, with a time limit, a memory limit and no network.

Diagnostics can be revised with new code, and later that code comes from an LLM. Such code is never
imported into the campaign's process. Instead this module starts ``python -m evotrainer.diagnostics.sandbox``
in a fresh process, in a session of its own, that:

- gets the evidence as Parquet files in a private temporary directory (its working directory);
- has no network: it is moved into a new, empty network namespace with ``unshare(CLONE_NEWNET)`` (as root,
  or via a user namespace where the kernel allows it); where neither is possible, socket creation is
  disabled inside the interpreter and the result says ``network: "socket-blocked"`` (seccomp refuses every
  socket anyway);
- confines itself with Landlock, no root, and seccomp (:mod:`evotrainer.diagnostics.confine` says what each
  stops) once its trusted imports are done. The Landlock ruleset is applied first, while the child has one thread
  (Landlock binds a thread and those it starts later); the parent says what this kernel offers
  (:func:`confinement`), and a child that reaches less refuses to run the code. Code an LLM drafted is only run
  where nothing is missing;
- runs under ``RLIMIT_AS`` (memory: with seccomp it cannot fork, so this bounds all it can touch), ``RLIMIT_CPU``,
  ``RLIMIT_FSIZE`` (it cannot fill the disk), ``RLIMIT_NOFILE``, and a wall-clock deadline after which its
  process group is killed. The deadline holds however the child behaves: the parent reads its pipes itself,
  without waiting for an end of file that a descendant could withhold, and kills the group on every way out;
- gets a minimal environment (no API keys, no proxy settings, no ``EVOTRAINER_*`` locations);
- returns findings as JSON on stdout, which the parent validates with the ``Finding`` schema — the
  child's output is as untrusted as its code, and no more than :data:`OUTPUT_CAP` bytes of it are read.

Anything that goes wrong (crash, timeout, memory, too much or malformed output) becomes one ``diagnostic_error``
finding; the caller never sees an exception from here.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evotrainer.core.domain import Finding
from evotrainer.core.errors import ConfigError
from evotrainer.diagnostics.base import Diagnostic
from evotrainer.diagnostics.confine import (
    NOBODY,
    confinement,
    drop_root,
    restrict_filesystem,
    restrict_syscalls,
    seccomp_available,
)
from evotrainer.evidence.model import Evidence

__all__ = ["confinement", "list_diagnostics", "list_names", "run_sandboxed"]

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


def _isolate_network() -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    for flags in (CLONE_NEWNET, CLONE_NEWUSER | CLONE_NEWNET):
        if libc.unshare(flags) == 0:
            return "namespace"
    return "socket-blocked"


SANDBOX_ENV = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "PYTHONHASHSEED", "TMPDIR", "OMP_NUM_THREADS")
"""The parent's environment variables a sandboxed child keeps (no API keys, tokens, proxies or home locations)."""


def _limits(memory_mb: int, cpu_s: int) -> None:
    # RLIMIT_AS counts address space, which numpy/arrow reserve generously at import: bound the growth
    # from the current size (the trusted imports are done by now) rather than the absolute size.
    import re

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as fh:
        m = re.search(r"VmSize:\s+(\d+) kB", fh.read())
    base = int(m.group(1)) * 1024 if m else 0
    limit = base + memory_mb * 1024 * 1024
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024 * 1024, 64 * 1024 * 1024))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def _error_finding(name: str, message: str):

    return Finding(symptom="diagnostic_error", diagnostic=name, version="sandboxed", severity="warning",
                   confidence=0.0, explanation=message[:2000])


OUTPUT_CAP = 8 * 1024 * 1024
"""Bytes of a child's stdout and stderr together that the parent reads back; a child that writes more is killed."""


class _Outcome:
    """What came back from a child: its exit code (None when it was killed for time or output), its two streams,
    and why it was killed."""

    def __init__(self, code: int | None, out: str, err: str, killed: str = "") -> None:
        self.code, self.out, self.err, self.killed = code, out, err, killed


def _pump(proc: subprocess.Popen, bufs: dict[int, bytearray], deadline: float, timeout_s: float) -> str:
    """Read the child's pipes into ``bufs`` until it closes them and exits, the deadline passes or the output is
    over :data:`OUTPUT_CAP`; why it must be killed, or ''."""
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return f"timed out after {timeout_s:.0f}s"
            for key, _ in sel.select(min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                bufs[key.fd] += chunk
                if sum(map(len, bufs.values())) > OUTPUT_CAP:
                    return f"wrote more than {OUTPUT_CAP >> 20} MiB of output"
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout_s:.0f}s"
    return ""


def _read_back(proc: subprocess.Popen, timeout_s: float) -> _Outcome:
    """Read both pipes until the child closes them, the deadline passes or :data:`OUTPUT_CAP` is reached; then kill
    its process group (whatever is left in it) and the child, and reap it. Never waits past the deadline."""
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()  # type: ignore[union-attr]
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    try:
        killed = _pump(proc, bufs, time.monotonic() + timeout_s, timeout_s)
    finally:  # every way out, Ctrl-C included: the child and its group (which it cannot leave under seccomp) die
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group outlives its leader only as a zombie's pgid until reaped
        except (ProcessLookupError, PermissionError):
            pass
        proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            stream.close()  # type: ignore[union-attr]
    out, err = (bufs[fd].decode("utf-8", "replace") for fd in (out_fd, err_fd))
    return _Outcome(None if killed else proc.returncode, out, err, killed)


def _spawn(args: list[str], workdir: Path, timeout_s: float, memory_mb: int) -> _Outcome:
    env = {k: v for k, v in os.environ.items() if k in SANDBOX_ENV}
    env["EVOTRAINER_SANDBOX_MEMORY_MB"] = str(memory_mb)
    env["EVOTRAINER_SANDBOX_CPU_S"] = str(max(1, int(timeout_s)))
    env["EVOTRAINER_SANDBOX_REQUIRE"] = confinement()  # the child refuses to run code with less than this
    if os.geteuid() == 0:  # the child runs the code as nobody: its directory must be its own
        for p in (workdir, *workdir.iterdir()):
            os.chown(p, NOBODY, NOBODY)
    proc = subprocess.Popen(
        [sys.executable, "-m", "evotrainer.diagnostics.sandbox", *args],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    return _read_back(proc, timeout_s)


def run_sandboxed(path: Path, name: str, params: dict[str, Any], ev, timeout_s: float = 30.0, memory_mb: int = 1024):
    """Run diagnostic ``name`` from the untrusted file ``path`` on ``ev`` in a sandboxed process."""
    from pydantic import ValidationError


    with tempfile.TemporaryDirectory(prefix="evo-sandbox-") as tmp:
        work = Path(tmp)
        ev.metrics.to_parquet(work / "metrics.parquet")
        ev.rollouts.to_parquet(work / "rollouts.parquet")
        (work / "diagnostic.py").write_bytes(Path(path).read_bytes())
        (work / "params.json").write_text(json.dumps(params))
        got = _spawn(["run", name], work, timeout_s, memory_mb)
    code, out, err = got.code, got.out, got.err
    if code is None:
        return [_error_finding(name, f"untrusted diagnostic '{name}' {got.killed}; it was killed")]
    if code == -signal.SIGXCPU:  # RLIMIT_CPU: the wall-clock timeout's twin for busy loops
        return [_error_finding(name, f"untrusted diagnostic '{name}' timed out: it used its {int(timeout_s)}s of CPU time "
                                     "and was killed")]
    if code != 0:
        tail = err.strip().splitlines()[-1] if err.strip() else f"exit code {code}"
        return [_error_finding(name, f"untrusted diagnostic '{name}' failed: {tail}")]
    try:
        doc = json.loads(out.strip().splitlines()[-1])
        findings = [Finding.model_validate(f) for f in doc["findings"]]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError, ValidationError) as bad:
        return [_error_finding(name, f"untrusted diagnostic '{name}' returned malformed output: {bad}")]
    for f in findings:  # the child may not impersonate another diagnostic
        f.diagnostic = name
    return findings


def list_names(path: Path, timeout_s: float = 30.0) -> list[str]:
    """Names of the diagnostics an untrusted file defines (learned in the sandbox, not by importing it)."""
    return list(list_diagnostics(path, timeout_s))


def list_diagnostics(path: Path, timeout_s: float = 30.0) -> dict[str, list[str] | None]:
    """The diagnostics an untrusted file defines, each with its parameter names (None when the child could not
    say), learned in the sandbox. The child's answer is untrusted too: anything but identifiers is dropped."""

    with tempfile.TemporaryDirectory(prefix="evo-sandbox-") as tmp:
        work = Path(tmp)
        (work / "diagnostic.py").write_bytes(Path(path).read_bytes())
        got = _spawn(["list"], work, timeout_s, 1024)
    code, out, err = got.code, got.out, " ".join(x for x in (got.killed, got.err) if x)
    try:
        doc = json.loads(out.strip().splitlines()[-1]) if code == 0 else {}
        names, params = doc["names"], doc.get("params")
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        names, params = None, None
    if not names or not isinstance(names, list) or not all(isinstance(n, str) and n.isidentifier() for n in names):
        raise ConfigError(f"untrusted diagnostic file {path} defines no usable Diagnostic ({err.strip()[-300:] or 'no names'})")
    params = params if isinstance(params, dict) else {}
    ok = lambda v: isinstance(v, list) and all(isinstance(x, str) and x.isidentifier() for x in v)  # noqa: E731
    return {n: params[n] if ok(params.get(n)) else None for n in names}


# ---------------------------------------------------------------------------------------------- the child
def _child(argv: list[str]) -> int:
    mode = _isolate_network()
    if mode != "namespace":
        import socket

        def _blocked(*_a, **_k):
            raise OSError("network access is disabled in the diagnostics sandbox")

        socket.socket = _blocked  # type: ignore[assignment, misc]
        socket.create_connection = _blocked  # type: ignore[assignment]
    # Landlock first, while this process has one thread: a ruleset binds the calling thread and the threads it starts
    # later, so the threads numpy, OpenBLAS and Arrow start during the imports below are bound too.
    seccomp_available()  # imports libseccomp's binding now: ctypes.util.find_library runs ldconfig, not possible later
    filesystem = restrict_filesystem(Path.cwd())
    # Trusted imports and input next; the limits, no root and seccomp then apply to everything the untrusted code does.
    import importlib.util
    import inspect

    import pandas as pd


    ev = None
    if argv[0] == "run":
        ev = Evidence(metrics=pd.read_parquet("metrics.parquet"), rollouts=pd.read_parquet("rollouts.parquet"),
                      source="sandbox")
        params = json.loads(Path("params.json").read_text())
    _limits(int(os.environ.get("EVOTRAINER_SANDBOX_MEMORY_MB", "1024")), int(os.environ.get("EVOTRAINER_SANDBOX_CPU_S", "30")))
    try:
        user = drop_root()
    except OSError as e:
        print(f"sandbox: could not stop being root ({e}); not running the code", file=sys.stderr)
        return 3
    reached = "+".join(p for p in (filesystem, "seccomp" if restrict_syscalls() else "") if p and p != "unrestricted")
    reached = reached or "unrestricted"
    # The parent says what this kernel allows (EVOTRAINER_SANDBOX_REQUIRE); reaching less is a refusal, not a quieter run.
    required = os.environ.get("EVOTRAINER_SANDBOX_REQUIRE", "unrestricted")
    if not set(required.split("+")) <= set(reached.split("+")) | {"unrestricted"}:
        print(f"sandbox: could not confine the code ({reached}, expected {required}); not running it", file=sys.stderr)
        return 3

    spec = importlib.util.spec_from_file_location("untrusted_diagnostic", Path("diagnostic.py").resolve())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    classes = {c.name: c for c in vars(module).values()
               if inspect.isclass(c) and issubclass(c, Diagnostic) and c is not Diagnostic and getattr(c, "name", None)}
    if argv[0] == "list":
        fields = {n: getattr(getattr(c, "Params", None), "model_fields", None) for n, c in classes.items()}
        params = {n: sorted(f) if isinstance(f, dict) else None for n, f in fields.items()}
        symptoms = {n: str(getattr(c, "symptom", "")) for n, c in classes.items()}
        print(json.dumps({"names": sorted(classes), "params": params, "symptoms": symptoms, "network": mode,
                          "confinement": reached, "user": user}))
        return 0
    findings = classes[argv[1]](params).run(ev)
    print(json.dumps({"findings": [f.model_dump(mode="json") for f in findings], "network": mode,
                      "confinement": reached, "user": user}))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
