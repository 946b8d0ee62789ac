"""The cases of ``bench/hostile_inputs.py`` that attack a box (issue 60): the sandbox, evidence files, ``watch``, the
dashboard and the LLM brain. Imported by ``hostile_inputs.py``, which runs and counts them with its own cases.

A sandbox case runs an untrusted diagnostic that tries one escape (``diagnose DIR --harness h.yaml --only evil``);
an evidence case leaves a file of the kind an attacker would (a link to ``/dev/zero``, a FIFO, an integer too large
for a step). Each has a ``contained`` check of what must still hold afterwards (the victim file's mode, no process
left, the listener never reached, the parent's peak memory): a case whose check fails counts as ``accepted`` (the
attack went through), one whose check holds as ``clear``. The dashboard and the LLM brain are driven in-process
(FastAPI's TestClient; the scripted OpenAI-compatible server of ``tests/llm_server.py`` over real HTTP).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
EVIL = '''from evotrainer.diagnostics.base import Diagnostic


class Evil(Diagnostic):
    name = "evil"
    symptom = "reward_hacking"
    signal = "an attack"
    requires_metrics = ("reward",)

    def analyze(self, ev):
        import os, signal, socket, subprocess, sys, time
        out = []
'''
_KEEP: list[Any] = []  # listeners and victim processes a case's check reads after the run


def _w(d: Path, name: str, data: str | bytes) -> Path:
    p = d / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def _run_dir(d: Path) -> Path:
    run = d / "ev"
    _w(run, "meta.json", '{"name": "ev", "status": "finished"}')
    _w(run, "metrics.jsonl", "".join(json.dumps({"step": i, "reward": 0.5}) + "\n" for i in range(1, 11)))
    (run / "rollouts").mkdir(exist_ok=True)
    return run


def _evil(d: Path, attempts: dict[str, str], tail: str = "") -> list[str]:
    """An untrusted diagnostic that tries each statement and reports ``name:ok`` or ``name:<error>``."""
    body = ""
    for what, stmt in attempts.items():
        body += (f"try:\n    {stmt}\n    out.append('{what}:ok')\n"
                 f"except OSError as e:\n    out.append('{what}:' + type(e).__name__)\n")
    body += tail + "return [self.finding('warning', 'REPORT ' + ' '.join(out))]\n"
    _w(d, "evil.py", EVIL + textwrap.indent(body, " " * 8))
    h = _w(d, "h.yaml", "diagnostics:\n  user: [{path: evil.py, trusted: false}]\n")
    return ["diagnose", str(_run_dir(d)), "--harness", str(h), "--only", "evil", "--json"]


def _no_ok(text: str) -> bool:
    return "REPORT" in text and ":ok" not in text


def _unix(d: Path) -> list[str]:
    lis = socket.socket(socket.AF_UNIX)
    lis.bind(str(d / "daemon.sock"))
    lis.listen(1)
    lis.setblocking(False)
    _KEEP.append(lis)
    return _evil(d, {"unix": f"s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect({str(d / 'daemon.sock')!r})"})


def _unreached(d: Path, text: str) -> bool:
    lis = _KEEP.pop()
    try:
        lis.accept()[0].close()
        return False
    except BlockingIOError:
        return _no_ok(text)
    finally:
        lis.close()


def _metadata(d: Path) -> list[str]:
    f = _w(d, "victim.txt", "x")
    f.chmod(0o600)
    os.utime(f, (1_000_000_000, 1_000_000_000))
    f = str(f)
    return _evil(d, {"chmod": f"os.chmod({f!r}, 0o4777)", "chown": f"os.chown({f!r}, 65534, 65534)",
                     "xattr": f"os.setxattr({f!r}, 'user.evil', b'1')", "utime": f"os.utime({f!r}, (0, 0))"})


def _metadata_intact(d: Path, text: str) -> bool:
    st = (d / "victim.txt").stat()
    return (st.st_mode & 0o7777, st.st_uid, int(st.st_mtime)) == (0o600, os.getuid(), 1_000_000_000) and _no_ok(text)


def _daemon(d: Path) -> list[str]:
    return _evil(d, {"fork": "pid = os.fork()"},
                 "if 'pid' in dir() and pid == 0:\n    os.setsid()\n    time.sleep(300)\n    os._exit(0)\n"
                 "time.sleep(300)\n")


def _nothing_left(d: Path, text: str) -> bool:
    left = subprocess.run(["pgrep", "-f", "evotrainer.diagnostics.sandbox"], capture_output=True, text=True).stdout
    return not left.strip()


def _forks(d: Path) -> list[str]:
    grab = "b = bytearray(700 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(2); os._exit(0)"
    return _evil(d, {f"fork{i}": f"pid = os.fork()\n    if pid == 0:\n        {grab}" for i in range(3)})


def _loud(d: Path) -> list[str]:
    return _evil(d, {}, "chunk = 'x' * (1 << 20)\nfor _ in range(300):\n    sys.stdout.write(chunk)\n")


def _renice(d: Path) -> list[str]:
    victim = subprocess.Popen(["sleep", "600"])
    _KEEP.append(victim)
    return _evil(d, {"renice": f"os.setpriority(os.PRIO_PROCESS, {victim.pid}, 19)",
                     "pin": f"os.sched_setaffinity({victim.pid}, {{0}})"})


def _victim_untouched(d: Path, text: str) -> bool:
    victim = _KEEP.pop()
    try:
        return os.getpriority(os.PRIO_PROCESS, victim.pid) == 0 and \
            os.sched_getaffinity(victim.pid) == os.sched_getaffinity(0) and _no_ok(text)
    finally:
        victim.kill()
        victim.wait()


def _linked(d: Path, target: str, where: str = "ev/metrics.jsonl") -> list[str]:
    run = _run_dir(d)
    (d / where).unlink(missing_ok=True)
    (d / where).parent.mkdir(parents=True, exist_ok=True)
    (d / where).symlink_to(target)
    return ["diagnose", str(run if where.startswith("ev/") else d / where.split("/")[0])]


def _fifo(d: Path, watch: bool = False) -> list[str]:
    run = _run_dir(d)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    return ["watch", str(run), "--timeout", "3", "--interval", "100"] if watch else ["diagnose", str(run)]


def _huge_step(d: Path) -> list[str]:
    history = [{"step": 1, "loss": 0.1, "reward": 0.2}, {"step": 4 * 10**25, "loss": 0.1, "reward": 0.3}]
    _w(d, "trl/trainer_state.json", json.dumps({"global_step": 2, "log_history": history}))
    return ["diagnose", str(d / "trl"), "--json"]


def _wrong_types(d: Path) -> list[str]:
    import pandas as pd

    (d / "trl" / "completions").mkdir(parents=True)
    pd.DataFrame({"step": ["a", "b"], "prompt": [1, 2], "completion": [3.0, 4.0]}).to_parquet(
        d / "trl" / "completions" / "completions_00001.parquet")
    _w(d, "trl/trainer_state.json", json.dumps({"global_step": 1, "log_history": [{"step": 1, "loss": 0.1}]}))
    return ["diagnose", str(d / "trl"), "--json"]


def cli_cases(Case: Callable[..., Any]) -> list[Any]:
    """The CLI cases (sandbox, evidence, watch), as ``hostile_inputs.Case`` rows."""
    named = lambda s: (lambda _d: s)  # noqa: E731
    sandbox = dict(nonzero_ok=True, timeout=120)
    return [
        Case("sbx-unix-socket", "S1: connect to a pathname unix socket outside the sandbox", _unix, named("evil"),
             contained=_unreached, **sandbox),
        Case("sbx-metadata", "S2: chmod/chown/setxattr/utime on a file outside the sandbox", _metadata, named("evil"),
             contained=_metadata_intact, **sandbox),
        Case("sbx-setsid-daemon", "S3: a grandchild that leaves the session and holds the pipes", _daemon,
             named("evil"), contained=_nothing_left, **sandbox),
        Case("sbx-fork-memory", "S4: three forks of 700 MiB each against a 1,024 MB limit", _forks, named("evil"),
             contained=lambda d, t: _no_ok(t) and _nothing_left(d, t), **sandbox),
        Case("sbx-stdout-300mb", "S5: 300 MB on stdout", _loud, named("evil"),
             contained=lambda d, t: "MiB of output" in t, peak_mb=400, **sandbox),
        Case("sbx-renice", "S6: renice and pin a process outside the sandbox", _renice, named("evil"),
             contained=_victim_untouched, **sandbox),
        Case("ev-dev-zero", "D3: metrics.jsonl is a link to /dev/zero", lambda d: _linked(d, "/dev/zero"),
             named("metrics.jsonl"), nonzero_ok=True, peak_mb=1000),
        Case("ev-fifo", "D3: metrics.jsonl is a FIFO", _fifo, named("metrics.jsonl"), nonzero_ok=True, timeout=60),
        Case("ev-verl-dev-zero", "D3: a verl rollout dump that links to /dev/zero",
             lambda d: _linked(d, "/dev/zero", "verl/rollout/1.jsonl"), named("1.jsonl"), nonzero_ok=True,
             peak_mb=1000),
        Case("watch-fifo-timeout", "D3/D4: watch a FIFO with --timeout 3 --interval 100",
             lambda d: _fifo(d, watch=True), named("metrics.jsonl"), timeout=60,
             contained=lambda d, t: "a FIFO" in t),
        Case("watch-interval-inf", "D4: watch --interval inf", lambda d: ["watch", str(_run_dir(d)), "--interval",
                                                                         "inf"], named("--interval")),
        Case("watch-timeout-nan", "D2: watch --timeout nan --json", lambda d: ["watch", str(_run_dir(d)), "--timeout",
                                                                              "nan", "--json"], named("--timeout")),
        Case("ev-step-4e25", "D6: a trainer_state.json step of 4e25", _huge_step, named("trl"),
             contained=lambda d, t: "-9223372036854775808" not in t and "Traceback" not in t),
        Case("ev-parquet-types", "D6: TRL completions with a string step and numeric text", _wrong_types,
             named("completions_00001.parquet"), contained=lambda d, t: "column step holds" in t and '"step": -1' not in t),
    ]


# ---------------------------------------------------------------------------------------------- in-process
def _dashboard_cases(tmp: Path) -> list[tuple[str, str, bool, str]]:
    from fastapi.testclient import TestClient

    from evotrainer.ui import create_app

    home = tmp / "ui-home"
    jobs = home / "jobs"
    for name, meta in (("empty", None), ("garbage", b"\xff{x"), ("listmeta", b"[1, 2]")):
        (jobs / name).mkdir(parents=True, exist_ok=True)
        if meta is not None:
            (jobs / name / "meta.json").write_bytes(meta)
    _w(jobs, "trl/trainer_state.json", json.dumps({"global_step": 1, "log_history": [{"step": 1, "loss": 0.1}]}))
    _w(jobs, "zero/meta.json", '{"name": "zero"}')
    (jobs / "zero" / "metrics.jsonl").symlink_to("/dev/zero")
    _w(tmp, "outside/metrics.jsonl", json.dumps({"step": 1, "reward": 0.5}) + "\n")
    (jobs / "link").symlink_to(tmp / "outside")
    c = TestClient(create_app(home, "t" * 32), base_url="http://127.0.0.1:8765", follow_redirects=False)
    c.get("/?token=" + "t" * 32)
    rows = []
    for name in ("empty", "garbage", "listmeta", "trl", "zero", "link"):
        r = c.get(f"/diagnose/{name}")
        ok = (r.status_code == (404 if name == "link" else 200) and "Content-Security-Policy" in r.headers)
        rows.append((f"ui-diagnose-{name}", f"D10/D11/D12: /diagnose/{name}", ok, f"HTTP {r.status_code}"))
    return rows


def _llm_cases() -> list[tuple[str, str, bool, str]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from llm_server import DRIP, ScriptedLLM

    from evotrainer.agent.brains.base import BrainContext, BrainResult
    from evotrainer.agent.brains.llm import LLMBrain, LLMSettings
    from evotrainer.config.harness import HarnessSpec
    from evotrainer.tasks import get_task

    class Nothing:
        name = "heuristic"

        def propose(self, ctx):
            return BrainResult(drafts=[], brain="heuristic")

    ctx = BrainContext(harness=HarnessSpec(), findings=[], candidates=[], task="arith",
                       task_inert=get_task("arith").inert_knobs())
    p = lambda knob, value: {"knob": knob, "value": value, "rationale": "r", "cited_skills": [],  # noqa: E731
                             "hypothesis": {"symptom": "plateau", "cause": "c", "change": "x", "expected_effect": "e"}}
    rows = []

    def case(cid: str, what: str, script: list[Any], check, budget: int | None = None, **kw) -> None:
        with ScriptedLLM(script, usage=kw.pop("usage", (100, 20)), drip_s=0.5) as llm:
            b = LLMBrain(LLMSettings(base_url=llm.base_url, model="scripted", **{"timeout_s": 3, **kw}), Nothing(),
                         token_budget=budget)
            t0 = time.monotonic()
            res = b.propose(ctx)
            took = time.monotonic() - t0
            ok = check(res, took, len(llm.requests), b)
        rows.append((cid, what, ok, f"{took:.1f}s, {len(llm.requests)} request(s), brain {res.brain}"))

    case("llm-drip", "L1: a server that drips a byte every 0.5 s, timeout_s 3", [DRIP],
         lambda r, t, n, b: t < 6 and r.brain != "llm", max_retries=0)
    case("llm-100k-proposals", "L2: a reply with 100,000 proposals",
         [json.dumps({"proposals": [p("grpo.beta", 0.02)] * 100_000})],
         lambda r, t, n, b: t < 15 and sum(map(len, r.notes)) < 10_000, max_retries=0, max_tokens=32_768)
    case("llm-no-usage", "L3: a server that reports no usage, token_budget 2000", ["x"] * 6,
         lambda r, t, n, b: n < 6 and b.tokens_used > 0, budget=2000, max_retries=5, usage=None)
    case("llm-negative-usage", "L3: a server that reports negative usage", ["x"] * 6,
         lambda r, t, n, b: n < 6 and b.tokens_used > 0, budget=2000, max_retries=5, usage=(-50, -50))
    case("llm-trap-knob", "L4: reward.correctness.tests: visible on arith (inert there)",
         [json.dumps({"proposals": [p("reward.correctness.tests", "visible"), p("env.leak_tool", True)]})],
         lambda r, t, n, b: not r.drafts, max_retries=0)
    case("llm-retry-after", "a 429 whose Retry-After (120 s) is past timeout_s",
         [(429, {"Retry-After": "120"}), json.dumps({"proposals": []})],
         lambda r, t, n, b: t < 5 and n == 1, max_retries=1)
    return rows


def inprocess_cases(tmp: Path) -> list[tuple[str, str, bool, str]]:
    """(id, what, handled, detail) of the dashboard and LLM cases."""
    return _dashboard_cases(tmp) + _llm_cases()
