"""Running an untrusted diagnostic: another process, a time limit, a memory limit, no network.

Diagnostics can be revised with new code, and later that code comes from an LLM. Such code is never
imported into the campaign's process. Instead this module starts ``python -m evotrainer.diagnostics.sandbox``
in a fresh process that:

- gets the evidence as Parquet files in a private temporary directory (its working directory);
- runs under ``RLIMIT_AS`` (memory), ``RLIMIT_CPU`` and a wall-clock timeout (killed with its process group),
  ``RLIMIT_FSIZE`` (it cannot fill the disk) and ``RLIMIT_NPROC``-free but ``start_new_session`` isolation;
- has no network: it is moved into a new, empty network namespace with ``unshare(CLONE_NEWNET)`` (as root,
  or via a user namespace where the kernel allows it); where neither is possible, socket creation is
  disabled inside the interpreter and the result says ``network: "socket-blocked"``;
- sees little of the file system and no other process: once its trusted imports are done, a Landlock ruleset
  (Linux ≥ 5.13; ``landlock_create_ruleset`` through ``ctypes``) lets it read only below the interpreter, its
  installed packages, the ``evotrainer`` package and ``/usr``, ``/lib*``, and write only in its working
  directory, so neither a campaign's home (state, API-key files, other runs) nor ``/proc`` of other processes
  is readable, and nothing outside the temporary directory is writable; where the kernel has Landlock ABI 6 it
  also may not signal processes outside its domain (the campaign that started it). The result says
  ``filesystem: "landlock"`` (or ``"landlock+signals"``), or ``"unrestricted"`` where the kernel has no
  Landlock: :func:`confinement` tells which, and code an LLM drafted is only run where it is confined. The ruleset
  is applied first, while the child has one thread (Landlock binds a thread and those it starts later), and a child
  that reaches less confinement than the parent's kernel offers refuses to run the code;
- gets a minimal environment (no API keys, no proxy settings, no ``EVOTRAINER_*`` locations);
- returns findings as JSON on stdout, which the parent validates with the ``Finding`` schema — the
  child's output is as untrusted as its code.

Anything that goes wrong (crash, timeout, memory, malformed output) becomes one ``diagnostic_error``
finding; the caller never sees an exception from here.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


def _isolate_network() -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    for flags in (CLONE_NEWNET, CLONE_NEWUSER | CLONE_NEWNET):
        if libc.unshare(flags) == 0:
            return "namespace"
    return "socket-blocked"


# Landlock (include/uapi/linux/landlock.h): syscalls, access rights by ABI version, scopes.
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # the same numbers on x86_64 and aarch64
_PR_SET_NO_NEW_PRIVS = 38
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_BASE = (1 << 13) - 1  # execute .. make_sym: the ABI 1 rights
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


def _landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or the platform is not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return max(0, int(libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))))
    except (OSError, AttributeError):
        return 0


def confinement() -> str:
    """How a sandboxed child's file system (and signals) would be confined on this machine: 'landlock+signals',
    'landlock' or 'unrestricted' (see the module docstring)."""
    abi = _landlock_abi()
    return "unrestricted" if abi < 1 else "landlock+signals" if abi >= 6 else "landlock"


def _readable_roots() -> list[Path]:
    """What a sandboxed child may read: the interpreter and its libraries, the installed packages, evotrainer."""
    import site

    import evotrainer

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages(),
             str(Path(evotrainer.__file__).resolve().parent), "/usr", "/lib", "/lib64", "/lib32", "/bin",
             f"/proc/{os.getpid()}", "/dev/null", "/dev/urandom", "/dev/zero"}
    return [Path(r) for r in sorted(roots) if r and os.path.exists(r)]


def _restrict_filesystem(workdir: Path) -> str:
    """Landlock the calling process (and what it starts): read below :func:`_readable_roots`, write only below
    ``workdir``; with ABI 6, no signals or abstract sockets outside the domain. Returns the mode it reached."""
    abi = _landlock_abi()
    if abi < 1:
        return "unrestricted"
    libc = ctypes.CDLL(None, use_errno=True)
    handled = _FS_BASE | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0) | \
        (_FS_IOCTL_DEV if abi >= 5 else 0)
    fields = [handled] + ([0] if abi >= 4 else []) + ([_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL] if abi >= 6 else [])
    attr = (ctypes.c_uint64 * len(fields))(*fields)
    ruleset = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return "unrestricted"

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    def allow(path: Path, access: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            rights = (access if path.is_dir() else access & _FILE_RIGHTS) & handled
            rule = PathBeneath(rights, fd)
            if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule),
                            ctypes.c_uint32(0)) != 0:
                print(f"sandbox: Landlock refused a rule for {path} (it stays unreadable)", file=sys.stderr)
        finally:
            os.close(fd)

    try:
        for root in _readable_roots():
            allow(root, _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR)
        allow(Path("/dev/null"), _FS_READ_FILE | _FS_WRITE_FILE)
        allow(workdir, handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(_SYS_RESTRICT, ctypes.c_int(ruleset),
                                                                              ctypes.c_uint32(0)) != 0:
            return "unrestricted"
    finally:
        os.close(ruleset)
    return "landlock+signals" if abi >= 6 else "landlock"


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


def _error_finding(name: str, message: str):
    from evotrainer.domain import Finding

    return Finding(symptom="diagnostic_error", diagnostic=name, version="sandboxed", severity="warning",
                   confidence=0.0, explanation=message[:2000])


def _spawn(args: list[str], workdir: Path, timeout_s: float, memory_mb: int) -> tuple[int | None, str, str]:
    env = {k: v for k, v in os.environ.items() if k in SANDBOX_ENV}
    env["EVOTRAINER_SANDBOX_MEMORY_MB"] = str(memory_mb)
    env["EVOTRAINER_SANDBOX_CPU_S"] = str(max(1, int(timeout_s)))
    env["EVOTRAINER_SANDBOX_REQUIRE"] = confinement()  # the child refuses to run code with less than this
    proc = subprocess.Popen(
        [sys.executable, "-m", "evotrainer.diagnostics.sandbox", *args],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, "", f"timed out after {timeout_s:.0f}s"
    return proc.returncode, out, err


def run_sandboxed(path: Path, name: str, params: dict[str, Any], ev, timeout_s: float = 30.0, memory_mb: int = 1024):
    """Run diagnostic ``name`` from the untrusted file ``path`` on ``ev`` in a sandboxed process."""
    from pydantic import ValidationError

    from evotrainer.domain import Finding

    with tempfile.TemporaryDirectory(prefix="evo-sandbox-") as tmp:
        work = Path(tmp)
        ev.metrics.to_parquet(work / "metrics.parquet")
        ev.rollouts.to_parquet(work / "rollouts.parquet")
        (work / "diagnostic.py").write_bytes(Path(path).read_bytes())
        (work / "params.json").write_text(json.dumps(params))
        code, out, err = _spawn(["run", name], work, timeout_s, memory_mb)
    if code is None:
        return [_error_finding(name, f"untrusted diagnostic '{name}' {err}; it was killed")]
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
    from evotrainer.errors import ConfigError

    with tempfile.TemporaryDirectory(prefix="evo-sandbox-") as tmp:
        work = Path(tmp)
        (work / "diagnostic.py").write_bytes(Path(path).read_bytes())
        code, out, err = _spawn(["list"], work, timeout_s, 1024)
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
    # later, so the threads numpy, OpenBLAS and Arrow start during the imports below are bound too. The parent says
    # what this kernel allows (EVOTRAINER_SANDBOX_REQUIRE); reaching less is a refusal, not a quieter run.
    filesystem = _restrict_filesystem(Path.cwd())
    required = os.environ.get("EVOTRAINER_SANDBOX_REQUIRE", "unrestricted")
    if required != "unrestricted" and filesystem != required:
        print(f"sandbox: could not confine the file system ({filesystem}, expected {required}); not running the code",
              file=sys.stderr)
        return 3
    # Trusted imports and input next; the limits then apply to everything the untrusted code does.
    import importlib.util
    import inspect

    import pandas as pd

    from evotrainer.diagnostics.base import Diagnostic
    from evotrainer.evidence import Evidence

    ev = None
    if argv[0] == "run":
        ev = Evidence(metrics=pd.read_parquet("metrics.parquet"), rollouts=pd.read_parquet("rollouts.parquet"),
                      source="sandbox")
        params = json.loads(Path("params.json").read_text())
    _limits(int(os.environ.get("EVOTRAINER_SANDBOX_MEMORY_MB", "1024")), int(os.environ.get("EVOTRAINER_SANDBOX_CPU_S", "30")))

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
                          "filesystem": filesystem}))
        return 0
    findings = classes[argv[1]](params).run(ev)
    print(json.dumps({"findings": [f.model_dump(mode="json") for f in findings], "network": mode,
                      "filesystem": filesystem}))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
