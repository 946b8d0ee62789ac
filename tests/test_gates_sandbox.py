"""Gates, user diagnostics (trusted and sandboxed), and revisions scored on a labelled archive."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from evotrainer.config.harness import HarnessSpec, load_harness
from evotrainer.core.errors import ConfigError
from evotrainer.diagnostics.gates import check_gate
from evotrainer.diagnostics.registry import Registry
from evotrainer.diagnostics.revision import Archive, evaluate_revision, history, record
from evotrainer.evidence.model import Evidence
from tests.conftest import landlock_or_skip

USER_DIAG = '''
from evotrainer.diagnostics.base import Diagnostic
from pydantic import BaseModel, Field


class Params(BaseModel):
    max_reward: float = Field(0.5, description="Reward above which the run is suspicious.")


class HighReward(Diagnostic):
    name = "high_reward"
    symptom = "reward_hacking"
    signal = "mean reward"
    Params = Params
    requires_metrics = ("reward",)

    def analyze(self, ev):
        m = float(ev.metrics["reward"].mean())
        if m > self.params.max_reward:
            return [self.finding("warning", f"mean reward {m:.2f} is suspicious", metrics={"reward": m})]
        return []
'''


def _ev(reward: float, steps: int = 10) -> Evidence:
    metrics = pd.DataFrame({"step": range(1, steps + 1), "reward": [reward] * steps})
    return Evidence(metrics=metrics, rollouts=pd.DataFrame(), source="test")


def _harness(tmp_path: Path, extra: str) -> HarnessSpec:
    (tmp_path / "diag.py").write_text(USER_DIAG)
    p = tmp_path / "h.yaml"
    p.write_text(extra)
    return load_harness(p)


def test_trusted_user_diagnostic_loads_relative_to_harness_and_gates(tmp_path):
    h = _harness(tmp_path, "diagnostics:\n  user: [{path: diag.py}]\n  gate: [{diagnostic: high_reward}]\n")
    reg = Registry(h)
    assert "high_reward" in reg.names()
    bad = check_gate(_ev(0.9), reg)
    assert not bad.passed and "high_reward" in bad.reasons[0] and "0.90" in bad.reasons[0]
    assert check_gate(_ev(0.1), reg).passed


def test_gate_fails_closed_when_a_rule_cannot_decide(tmp_path):
    h = _harness(tmp_path, "diagnostics:\n  user: [{path: diag.py}]\n  gate: [{diagnostic: high_reward}]\n")
    no_reward = Evidence(metrics=pd.DataFrame({"step": [1]}), rollouts=pd.DataFrame())
    res = check_gate(no_reward, Registry(h))
    assert not res.passed and "could not decide" in res.reasons[0]
    h2 = h.with_knob("diagnostics.gate_on_error", "pass")
    assert check_gate(no_reward, Registry(h2)).passed


def test_registry_rejects_unknown_names_and_shadowing(tmp_path):
    with pytest.raises(ConfigError, match="unknown diagnostic 'nope'"):
        Registry(_harness(tmp_path, "diagnostics:\n  gate: [{diagnostic: nope}]\n"))
    with pytest.raises(ConfigError, match="diagnostics.params.nope: unknown diagnostic 'nope'"):
        Registry(_harness(tmp_path, "diagnostics:\n  params: {nope: {x: 1}}\n"))
    (tmp_path / "shadow.py").write_text(USER_DIAG.replace('"high_reward"', '"nan"'))
    with pytest.raises(ConfigError, match="already taken"):
        Registry(_harness(tmp_path, "diagnostics:\n  user: [{path: shadow.py}]\n"))
    with pytest.raises(ConfigError, match="diagnostics.params.high_reward"):
        Registry(_harness(tmp_path, "diagnostics:\n  user: [{path: diag.py}]\n  params: {high_reward: {max_reward: x}}\n")).get("high_reward")


def test_untrusted_diagnostic_runs_in_a_sandbox_and_its_output_is_validated(tmp_path):
    h = _harness(tmp_path, "diagnostics:\n  user: [{path: diag.py, trusted: false}]\n  gate: []\n")
    reg = Registry(h)
    assert "high_reward" in reg.untrusted and "high_reward" not in reg.classes  # never imported here
    findings = reg.get("high_reward").run(_ev(0.9))
    assert [f.symptom for f in findings] == ["reward_hacking"] and findings[0].diagnostic == "high_reward"
    assert reg.get("high_reward", {"max_reward": 0.95}).run(_ev(0.9)) == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("        while True:\n            pass\n", "timed out"),
        ("        x = bytearray(4 * 1024 * 1024 * 1024)\n        return []\n", "MemoryError"),
        ("        import sys\n        sys.stdout.write('{not json')\n        sys.exit(0)\n", "malformed output"),
        ("        raise RuntimeError('boom')\n", "diagnostic crashed: RuntimeError: boom"),
    ],
)
def test_sandbox_turns_hangs_memory_network_and_garbage_into_error_findings(tmp_path, body, expected):
    code = USER_DIAG.split("    def analyze")[0] + "    def analyze(self, ev):\n" + body
    (tmp_path / "evil.py").write_text(code)
    from evotrainer.diagnostics.registry import SandboxedDiagnostic

    diag = SandboxedDiagnostic(tmp_path / "evil.py", "high_reward", timeout_s=4, memory_mb=512)
    t = time.time()
    findings = diag.run(_ev(0.9))
    assert time.time() - t < 30
    assert len(findings) == 1 and findings[0].symptom == "diagnostic_error", findings
    assert expected in findings[0].explanation


def test_sandbox_has_no_network_even_to_loopback(tmp_path):
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    # the C-level socket module, which a monkeypatched socket.socket would not stop: only the namespace does
    body = (f"        import _socket\n        s = _socket.socket()\n        s.settimeout(2)\n"
            f"        s.connect(('127.0.0.1', {port}))\n"
            "        return [self.finding('warning', 'connected')]\n")
    (tmp_path / "net.py").write_text(USER_DIAG.split("    def analyze")[0] + "    def analyze(self, ev):\n" + body)
    from evotrainer.diagnostics.registry import SandboxedDiagnostic

    try:
        findings = SandboxedDiagnostic(tmp_path / "net.py", "high_reward", timeout_s=10).run(_ev(0.9))
    finally:
        server.close()
    assert [f.symptom for f in findings] == ["diagnostic_error"]
    expl = findings[0].explanation  # seccomp refuses the socket (PermissionError), or the namespace the connect
    assert "'connected'" not in expl and ("OSError" in expl or "PermissionError" in expl), expl


def test_revision_is_accepted_only_if_it_keeps_invalid_recall_and_improves_f1(tmp_path):
    reg = Registry(_harness(tmp_path, "diagnostics:\n  user: [{path: diag.py}]\n"))
    rewards = {"exploit": 0.9, "mild_exploit": 0.6, "honest_high": 0.55, "honest_low": 0.2}
    exploits = {"exploit", "mild_exploit"}
    arch = Archive.model_validate({"runs": [
        {"path": k, "labels": ["reward_hacking"] if k in exploits else [], "invalid": k in exploits} for k in rewards]})
    load = lambda p: _ev(rewards[p])  # noqa: E731
    cur = reg.get("high_reward")  # threshold 0.5 flags honest_high too: P=2/3, R=1
    cand = lambda t: reg.get("high_reward", {"max_reward": t})  # noqa: E731

    good = evaluate_revision(cur, cand(0.58), "reward_hacking", arch, load, {"params": {"max_reward": 0.58}})
    assert (good.before.tp, good.before.fp, good.before.f1) == (2, 1, 0.8)
    assert good.accepted and good.after.f1 == 1.0 and good.after.invalid_recall == 1.0

    same = evaluate_revision(cur, cand(0.52), "reward_hacking", arch, load, {})
    assert not same.accepted and "F1 does not improve" in same.reasons[0]

    lossy = evaluate_revision(cur, cand(0.8), "reward_hacking", arch, load, {})
    assert not lossy.accepted and any("loses recall on invalid runs: 1.0 → 0.5" in r for r in lossy.reasons)

    record(tmp_path, good)
    record(tmp_path, lossy)
    assert [r.accepted for r in history(tmp_path, "high_reward")] == [True, False]
    line = json.loads((tmp_path / "diagnostics" / "history.jsonl").read_text().splitlines()[1])
    assert line["after"]["invalid_recall"] == 0.5 and line["candidate"] == {}


def test_archive_file_errors_name_the_file(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text("runs: [{path: x, labels: [not_a_symptom]}]\n")
    with pytest.raises(ConfigError, match=r"(?s)a.yaml.*runs.0.labels: unknown symptom 'not_a_symptom'"):
        Archive.load(p)


def test_sandbox_confines_files_and_signals_to_its_own_domain(tmp_path):
    """Code an LLM drafted may try to read the campaign's files, write outside its directory or kill the campaign:
    Landlock refuses all three (reads below the interpreter and packages only, writes in its directory only,
    signals within its domain only)."""
    import subprocess
    import sys

    from evotrainer.diagnostics.registry import SandboxedDiagnostic
    from evotrainer.diagnostics.sandbox import confinement

    landlock_or_skip("this kernel has no Landlock (Linux >= 5.13), so the sandbox cannot confine files")
    (tmp_path / "secret.txt").write_text("sk-secret-api-key")
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    attempts = {
        "read": f"open({str(tmp_path / 'secret.txt')!r}).read()",
        "write": f"open({str(tmp_path / 'escaped.txt')!r}, 'w').write('x')",
        "environ": f"open('/proc/{victim.pid}/environ').read()",
        "home": f"open({str(Path.home() / '.bashrc')!r}).read() if os.path.exists({str(Path.home() / '.bashrc')!r}) "
                "else (_ for _ in ()).throw(PermissionError('absent'))",
    }
    body = "        import os, signal\n        out = []\n"
    for what, expr in attempts.items():
        body += (f"        try:\n            got = {expr}\n            out.append('{what}:ok:' + str(got)[:40])\n"
                 f"        except OSError as e:\n            out.append('{what}:' + type(e).__name__)\n")
    if confinement() == "landlock+signals":
        body += (f"        try:\n            os.kill({victim.pid}, signal.SIGKILL)\n            out.append('kill:ok')\n"
                 "        except OSError as e:\n            out.append('kill:' + type(e).__name__)\n")
    body += "        return [self.finding('warning', ' '.join(out))]\n"
    (tmp_path / "escape.py").write_text(USER_DIAG.split("    def analyze")[0] + "    def analyze(self, ev):\n" + body)
    try:
        (finding,) = SandboxedDiagnostic(tmp_path / "escape.py", "high_reward", timeout_s=20).run(_ev(0.9))
        time.sleep(0.5)
        assert victim.poll() is None, "the sandboxed code killed a process outside its domain"
    finally:
        victim.kill()
    assert finding.symptom == "reward_hacking", finding.explanation  # it ran, and reported what it was refused
    assert ":ok" not in finding.explanation and "sk-secret" not in finding.explanation, finding.explanation
    assert "read:PermissionError" in finding.explanation and "write:PermissionError" in finding.explanation
    assert not (tmp_path / "escaped.txt").exists()



def _escape_body(attempts: dict[str, str]) -> str:
    body = "        import os, signal, socket, subprocess\n        out = []\n"
    for what, stmt in attempts.items():
        body += (f"        try:\n            {stmt}\n            out.append('{what}:ok')\n"
                 f"        except OSError as e:\n            out.append('{what}:' + type(e).__name__)\n")
    return body + "        return [self.finding('warning', ' '.join(out))]\n"


def test_sandbox_refuses_unix_sockets_metadata_changes_forks_and_renice(tmp_path):
    """S1, S2, S4 and S6 of issue 60: a pathname unix socket outside the sandbox, chmod / chown / setxattr / utime on
    a file outside it, forks that would each get their own memory limit, and renicing or pinning a process outside
    it are all refused (seccomp, and no root to lose)."""
    import socket
    import subprocess
    import sys
    import tempfile

    from evotrainer.diagnostics.registry import SandboxedDiagnostic

    landlock_or_skip("this kernel cannot confine the sandbox")
    victim_file = tmp_path / "victim.txt"
    victim_file.write_text("x")
    victim_file.chmod(0o600)
    before = victim_file.stat()
    listen_dir = Path(tempfile.mkdtemp(prefix="evo-unix-"))
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(listen_dir / "daemon.sock"))
    listener.listen(1)
    listener.settimeout(0.5)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    f, sock = str(victim_file), str(listen_dir / "daemon.sock")
    attempts = {
        "unix": f"s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect({sock!r})",
        "socketpair": "socket.socketpair()",
        "chmod": f"os.chmod({f!r}, 0o4777)",
        "chown": f"os.chown({f!r}, 65534, 65534)",
        "xattr": f"os.setxattr({f!r}, 'user.evil', b'1')",
        "utime": f"os.utime({f!r}, (0, 0))",
        "fork": "pid = os.fork(); os._exit(0) if pid == 0 else None",
        "spawn": "subprocess.run(['/bin/true'])",
        "setsid": "os.setsid()",
        "renice": f"os.setpriority(os.PRIO_PROCESS, {victim.pid}, 19)",
        "pin": f"os.sched_setaffinity({victim.pid}, {{0}})",
        "exec": "os.execv('/bin/true', ['/bin/true'])",
    }
    (tmp_path / "escape.py").write_text(USER_DIAG.split("    def analyze")[0] + "    def analyze(self, ev):\n"
                                        + _escape_body(attempts))
    try:
        (finding,) = SandboxedDiagnostic(tmp_path / "escape.py", "high_reward", timeout_s=20).run(_ev(0.9))
        try:
            conn, _ = listener.accept()
            conn.close()
            reached = True
        except (TimeoutError, socket.timeout):
            reached = False
        nice, cpus = os.getpriority(os.PRIO_PROCESS, victim.pid), os.sched_getaffinity(victim.pid)
    finally:
        victim.kill()
        listener.close()
    assert finding.symptom == "reward_hacking", finding.explanation  # it ran, and reported what it was refused
    assert ":ok" not in finding.explanation, finding.explanation
    assert all(f"{what}:" in finding.explanation for what in attempts), finding.explanation
    assert not reached, "the sandboxed code reached a unix socket outside the sandbox"
    after = victim_file.stat()
    assert (after.st_mode, after.st_uid, after.st_gid, after.st_mtime) == \
        (before.st_mode, before.st_uid, before.st_gid, before.st_mtime)
    assert os.listxattr(victim_file) == []
    assert nice == 0 and cpus == os.sched_getaffinity(0)


def test_no_descendant_outlives_the_deadline_or_holds_the_pipes(tmp_path):
    """S3: a grandchild that leaves the session and keeps stdout open must neither outlive the call nor hold it past
    its time limit."""
    from evotrainer.diagnostics.registry import SandboxedDiagnostic

    landlock_or_skip("this kernel cannot confine the sandbox")
    body = ("        import os, time\n"
            "        try:\n            pid = os.fork()\n        except OSError:\n            pid = -1\n"
            "        if pid == 0:\n            os.setsid()\n            time.sleep(120)\n            os._exit(0)\n"
            "        time.sleep(120)\n        return []\n")
    (tmp_path / "daemon.py").write_text(USER_DIAG.split("    def analyze")[0] + "    def analyze(self, ev):\n" + body)
    t = time.time()
    (finding,) = SandboxedDiagnostic(tmp_path / "daemon.py", "high_reward", timeout_s=3).run(_ev(0.9))
    assert time.time() - t < 15
    assert finding.symptom == "diagnostic_error" and "timed out" in finding.explanation
    import subprocess

    left = subprocess.run(["pgrep", "-f", "evotrainer.diagnostics.sandbox"], capture_output=True, text=True).stdout
    assert left.strip() == "", left


def test_the_output_read_back_from_the_sandbox_is_capped(tmp_path):
    """S5: 300 MB on stdout must not grow the trusted parent: it is cut off at the cap and named."""
    import resource

    from evotrainer.diagnostics.registry import SandboxedDiagnostic

    body = ("        import sys\n        chunk = 'x' * (1 << 20)\n"
            "        for _ in range(300):\n            sys.stdout.write(chunk)\n        return []\n")
    (tmp_path / "loud.py").write_text(USER_DIAG.split("    def analyze")[0] + "    def analyze(self, ev):\n" + body)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    (finding,) = SandboxedDiagnostic(tmp_path / "loud.py", "high_reward", timeout_s=30).run(_ev(0.9))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert finding.symptom == "diagnostic_error" and "MiB of output" in finding.explanation, finding.explanation
    assert grown_mb < 100, f"the parent grew by {grown_mb:.0f} MiB"


def test_every_thread_of_the_child_runs_under_the_filter(tmp_path):
    """seccomp is synchronised to every thread (TSYNC): the pools numpy and Arrow started during the trusted imports
    could otherwise fork, open sockets and change metadata for the untrusted code."""
    from evotrainer.diagnostics.registry import SandboxedDiagnostic

    landlock_or_skip("this kernel cannot confine the sandbox")
    body = ("        import os\n        tasks = os.listdir('/proc/self/task')\n"
            "        bad = [t for t in tasks if 'Seccomp:\\t2' not in open(f'/proc/self/task/{t}/status').read()]\n"
            "        return [self.finding('warning', f'threads {len(tasks)} unfiltered {len(bad)}')]\n")
    (tmp_path / "threads.py").write_text(USER_DIAG.split("    def analyze")[0] + "    def analyze(self, ev):\n" + body)
    (finding,) = SandboxedDiagnostic(tmp_path / "threads.py", "high_reward", timeout_s=20).run(_ev(0.9))
    assert finding.symptom == "reward_hacking" and finding.explanation.endswith("unfiltered 0"), finding.explanation
