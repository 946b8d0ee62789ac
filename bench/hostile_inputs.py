"""Hostile inputs through the CLI (issue 18): every bad input must end in a clear error, never a traceback or a write.

The idea: a fixed list of inputs a hostile or careless user could give — YAML bombs, duplicate keys, non-UTF-8
bytes, gates on diagnostics that do not exist, run names that climb out of ``--home``, garbage evidence — each
run through the real ``evotrainer`` command line in a fresh subprocess with a fresh, empty home. For every input
the script records the exit code and classifies the outcome:

* ``clear``: exit 2 (or non-zero for ``diagnose``'s evidence cases), no traceback, and the message names the file
  or option at fault;
* ``traceback``: a Python traceback, or the process died (killed by a signal, out of memory) or was still
  running, refusing nothing, when its time was up;
* ``accepted``: exit 0 (or a run that kept going) although the input is invalid — the silent misconfiguration;
* ``unclear``: any other refusal (wrong exit code, or a message that does not name the file/option).

It also counts the entries written under the (empty) home, and files written at paths outside it. A memory cap
(``RLIMIT_AS``, 3 GiB) guards the YAML bombs so that an unfixed loader is refused by the OS, not the machine.

Run: ``.venv/bin/python bench/hostile_inputs.py --label before|after`` (about 2-4 minutes: the few inputs that an
unfixed CLI accepts start real tiny training jobs). Writes ``bench/results/hostile_inputs_<label>.json`` and prints
the table that ``bench/RESULTS.md`` §11 keeps.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
TINY = """name: tiny
optim: {learning_rate: 0.001}
grpo: {prompts_per_step: 4, num_generations: 4, max_completion_length: 6}
data: {pool_size: 64, difficulty: [1, 1]}
"""
# what a `train` that is (wrongly) accepted runs: seconds, not minutes
QUICK = ["--steps", "1", "--policy", "nano", "--sft-steps", "0", "--eval-every", "0", "--save-every", "1"]
MEM_CAP = 3 * 1024**3


@dataclass
class Case:
    id: str
    what: str
    build: Callable[[Path], list[str]]  # writes its files under the case dir, returns the CLI arguments
    names: Callable[[Path], str]  # what the message must name (a file path or an option)
    outside: Callable[[Path], list[Path]] = lambda _d: []  # paths outside the home that must not appear
    nonzero_ok: bool = False  # diagnose on unreadable evidence: any non-zero exit with a message is clear
    timeout: int = 120
    contained: Callable[[Path, str], bool] | None = None  # an attack (bench/hostile_boxes.py): what must still hold
    peak_mb: int | None = None  # the CLI process's peak memory that counts as the attack going through


@dataclass
class Outcome:
    id: str
    rc: int | None
    kind: str
    writes: int
    outside: int
    seconds: float
    message: str = field(default="")
    peak_mb: float = 0.0


def _w(d: Path, name: str, data: str | bytes) -> Path:
    p = d / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def _laughs(levels: int = 9) -> str:
    lines = ["diagnostics:", "  params:", "    entropy_collapse:", '      a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"      a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def _spec(harness: Path, extra: str = "") -> str:
    return (f"name: hostile\ntask: arith\npolicy: {{size: nano, sft_steps: 0}}\nharness: {harness}\nsegment_steps: 1\n"
            "budget: {total_steps: 40}\nbacktest: {branch_steps: 1, seeds: 2, max_proposals: 1}\n"
            "eval: {every: 0, n: 10, k: 1}\n" + extra)


def _validate(name: str, text: str | bytes) -> Callable[[Path], list[str]]:
    return lambda d: ["harness", "validate", str(_w(d, name, text))]


def _job_dir(d: Path, meta: bytes) -> Path:
    run = d / "run"
    _w(run, "meta.json", meta)
    return run


def _garbage_ours(d: Path) -> Path:
    run = d / "ours"
    _w(run, "meta.json", b'{"name": "ours"}')
    _w(run, "metrics.jsonl", b"\xff\xfe garbage \x00\x01\n{not json\n")
    _w(run, "rollouts/step_000001.parquet", os.urandom(512))
    _w(run, "rollouts/step_000002.parquet", b"PAR1" + os.urandom(200) + b"PAR1")
    return run


def _garbage_trl(d: Path) -> Path:
    run = d / "trl"
    _w(run, "trainer_state.json", b"{\"log_history\": [garbage")
    _w(run, "completions/completions_00001.parquet", os.urandom(700))
    return run


def _garbage_verl(d: Path) -> Path:
    run = d / "verl"
    _w(run, "rollout/1.jsonl", b"\x00\x01\x02 not json at all\n[1, 2\n")
    _w(run, "rollout/2.jsonl", os.urandom(300))
    return run


def _dup_skill(d: Path) -> list[str]:
    text = (ROOT / "skills" / "clip-higher" / "SKILL.md").read_text()
    _w(d, "lib/dup/SKILL.md", text.replace("---\n", "---\nname: first\n", 1))
    return ["skills", "show", "dup", "--library", str(d / "lib")]


def cases() -> list[Case]:
    here = lambda name: (lambda d: str(d / name))  # noqa: E731 - the message must name this file
    H = "h.yaml"
    c: list[Case] = [
        Case("gate-unknown", "a gate on a diagnostic that does not exist",
             _validate(H, "diagnostics:\n  gate:\n    - {diagnostic: no_such_diag, fail_at: warning}\n"), here(H)),
        Case("params-unknown-diag", "diagnostics.params for a diagnostic that does not exist",
             _validate(H, "diagnostics:\n  params:\n    no_such_diag: {ratio: 0.2}\n"), here(H)),
        Case("params-unknown-name", "an unknown parameter of a real diagnostic",
             _validate(H, "diagnostics:\n  params:\n    entropy_collapse: {no_such_param: 0.2}\n"), here(H)),
        Case("duplicate-key", "two optim: blocks (the last one would win)",
             _validate(H, "optim: {learning_rate: 0.001}\ngrpo: {temperature: 1.0}\noptim: {learning_rate: 0.1}\n"), here(H)),
        Case("duplicate-nested-key", "a knob given twice in one section",
             _validate(H, "grpo:\n  temperature: 1.0\n  temperature: 3.0\n"), here(H)),
        Case("non-utf8", "Latin-1 bytes in a harness",
             _validate(H, b"name: caf\xe9\ngrpo: {temperature: 1.0}\n"), here(H)),
        Case("deep-nesting", "a value nested 20,000 levels deep",
             _validate(H, "diagnostics:\n  params:\n    x: {a: " + "[" * 20000 + "]" * 20000 + "}\n"), here(H)),
        Case("billion-laughs", "exponential alias expansion in diagnostics.params",
             _validate(H, _laughs()), here(H)),
        Case("recursive-alias", "an alias that contains itself",
             _validate(H, "diagnostics:\n  params:\n    entropy_collapse: &a {x: *a}\n"), here(H)),
        Case("python-tag", "a python/object tag",
             _validate(H, "name: !!python/object/apply:os.system ['echo pwned']\n"), here(H)),
        Case("oversize", "a 40 MB harness (comments)",
             _validate(H, "name: big\n" + ("# " + "x" * 78 + "\n") * 500_000), here(H)),
        Case("huge-int", "an integer of 50,000 digits",
             _validate(H, "grpo: {num_generations: " + "9" * 50_000 + "}\n"), here(H)),
        Case("random-bytes", "4 KB of random bytes",
             _validate(H, os.urandom(4096)), here(H)),
        Case("nul-bytes", "NUL and control characters",
             _validate(H, b"name: a\x00b\ngrpo: {temperature: 1.0}\x07\n"), here(H)),
        Case("not-a-mapping", "a list at the top level", _validate(H, "- a\n- b\n"), here(H)),
        Case("wrong-type", "a string where a float belongs", _validate(H, "grpo: {temperature: hot}\n"), here(H)),
        # campaign specs
        Case("spec-duplicate-key", "a campaign spec with budget given twice",
             lambda d: ["campaign", "start", "--no-wait", "--max-rounds", "1", "--home", str(d / "home"),
                        str(_w(d, "c.yaml", _spec(_w(d, "t.yaml", TINY), "budget: {total_steps: 41}\n")))],
             here("c.yaml"), timeout=90),
        Case("spec-unknown-gate", "a campaign whose harness gates on a diagnostic that does not exist",
             lambda d: ["campaign", "start", "--no-wait", "--max-rounds", "1", "--home", str(d / "home"),
                        str(_w(d, "c.yaml", _spec(_w(d, "t.yaml", TINY + "diagnostics: {gate: [{diagnostic: nope}]}\n"))))],
             here("t.yaml"), timeout=90),
        Case("spec-non-utf8", "a campaign spec with Latin-1 bytes",
             lambda d: ["campaign", "start", "--no-wait", "--home", str(d / "home"),
                        str(_w(d, "c.yaml", _spec(_w(d, "t.yaml", TINY)).encode() + b"# caf\xe9\n"))],
             here("c.yaml")),
        Case("spec-laughs", "a campaign spec with an alias bomb in task_options",
             lambda d: ["campaign", "start", "--no-wait", "--home", str(d / "home"),
                        str(_w(d, "c.yaml", _spec(_w(d, "t.yaml", TINY)) + _laughs().replace(
                            "diagnostics:\n  params:\n    entropy_collapse:", "task_options:\n  x:\n    y:")))],
             here("c.yaml")),
        # labelled archive and skill files
        Case("archive-duplicate", "a labelled archive with runs: given twice",
             lambda d: ["diagnostics", "revise", "entropy_collapse", "--params", "{}", "--home", str(d / "home"),
                        "--archive", str(_w(d, "a.yaml", "runs: []\nruns: [{path: x}]\n"))], here("a.yaml")),
        Case("archive-laughs", "a labelled archive with an alias bomb",
             lambda d: ["diagnostics", "revise", "entropy_collapse", "--params", "{}", "--home", str(d / "home"),
                        "--archive", str(_w(d, "a.yaml", "runs: []\n" + _laughs().replace(
                            "diagnostics:\n  params:\n    entropy_collapse:", "x:\n  y:\n    z:")))],
             here("a.yaml")),
        Case("skill-duplicate", "SKILL.md front matter with name: twice", _dup_skill, here("lib/dup/SKILL.md")),
        Case("skill-slug-escape", "skills show ../../etc", lambda d: ["skills", "show", "../../etc", "--library",
                                                                      str(ROOT / "skills")], lambda _d: "../../etc"),
        # train options
        Case("steps-huge", "train --steps 100000000000",
             lambda d: ["train", "--harness", str(_w(d, "t.yaml", TINY)), "--home", str(d / "home"), "--steps", "100000000000"], lambda _d: "--steps"),
        Case("name-absolute", "train --name /absolute/path (outside --home)",
             lambda d: ["train", "--harness", str(_w(d, "t.yaml", TINY)), "--home", str(d / "home"), *QUICK,
                        "--name", str(d / "escaped")], lambda _d: "--name", outside=lambda d: [d / "escaped"],
             timeout=240),
        Case("name-dotdot", "train --name ../x",
             lambda d: ["train", "--harness", str(_w(d, "t.yaml", TINY)), "--home", str(d / "home"), *QUICK,
                        "--name", "../x"], lambda _d: "--name", outside=lambda d: [d / "x"], timeout=240),
        Case("name-slash", "train --name a/b",
             lambda d: ["train", "--harness", str(_w(d, "t.yaml", TINY)), "--home", str(d / "home"), *QUICK,
                        "--name", "a/b"], lambda _d: "--name", timeout=240),
        Case("resume-garbage-meta", "train --resume DIR whose meta.json is garbage",
             lambda d: ["train", "--home", str(d / "home"), "--resume", str(_job_dir(d, b"\x00garbage{"))],
             lambda d: str(d / "run" / "meta.json")),
        Case("resume-empty-meta", "train --resume DIR whose meta.json is empty",
             lambda d: ["train", "--home", str(d / "home"), "--resume", str(_job_dir(d, b""))],
             lambda d: str(d / "run" / "meta.json")),
        Case("resume-wrong-meta", "train --resume DIR whose meta.json is a JSON list",
             lambda d: ["train", "--home", str(d / "home"), "--resume", str(_job_dir(d, b"[1, 2, 3]"))],
             lambda d: str(d / "run" / "meta.json")),
        # diagnose on evidence that cannot be read
        Case("diagnose-ours", "diagnose a job dir of garbage Parquet/JSONL",
             lambda d: ["diagnose", str(_garbage_ours(d)), "--home", str(d / "home")],
             lambda d: "step_000001.parquet", nonzero_ok=True),
        Case("diagnose-trl", "diagnose a TRL output dir of garbage",
             lambda d: ["diagnose", str(_garbage_trl(d)), "--home", str(d / "home")],
             lambda d: "completions_00001.parquet", nonzero_ok=True),
        Case("diagnose-verl", "diagnose a verl dump of garbage",
             lambda d: ["diagnose", str(_garbage_verl(d)), "--home", str(d / "home")],
             lambda d: "2.jsonl", nonzero_ok=True),
        Case("diagnose-fail-on", "diagnose --fail-on warning (a CI gate) on garbage TRL evidence",
             lambda d: ["diagnose", str(_garbage_trl(d)), "--fail-on", "warning", "--home", str(d / "home")],
             lambda d: "completions_00001.parquet", nonzero_ok=True),
    ]
    from hostile_boxes import cli_cases

    return c + cli_cases(Case)


def _cap_memory() -> None:
    os.setsid()
    resource.setrlimit(resource.RLIMIT_AS, (MEM_CAP, MEM_CAP))


def run_case(case: Case, tmp: Path, src: Path | None = None) -> Outcome:
    d = tmp / case.id
    (d / "home").mkdir(parents=True)
    args = case.build(d)
    env = {**os.environ, "EVOTRAINER_HOME": str(d / "home"), "COLUMNS": "1000", "NO_COLOR": "1",
           "HF_HUB_OFFLINE": "1", "MLFLOW_ENABLE_TELEMETRY": "false"}
    if src is not None:  # another copy of the package (e.g. `git archive` of the commit before the fixes)
        env["PYTHONPATH"] = str(src)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "evotrainer.cli", *args], cwd=d, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_cap_memory)
    peak = _PeakRSS(proc.pid)
    try:
        out, err = proc.communicate(timeout=case.timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = None
    secs = time.perf_counter() - t0
    peak_mb = peak.stop()
    text = (out + err).decode("utf-8", "replace")
    writes = sum(1 for _ in (d / "home").rglob("*"))
    outside = sum(1 for p in case.outside(d) if p.exists())
    named = case.names(d)
    flat = "".join(text.split())
    names_it = named in text or "".join(named.split()) in flat
    if "Traceback (most recent call last)" in text or (rc is not None and rc < 0) or rc in (137, 139):
        kind = "traceback"
    elif case.contained is not None or case.peak_mb is not None:  # an attack: did it go through?
        held = (rc is not None and (case.contained is None or case.contained(d, text))
                and (case.peak_mb is None or peak_mb < case.peak_mb))
        kind = "clear" if held else "accepted"
    elif rc is None:
        kind = "traceback"  # neither refused nor finished in its time (an alias bomb grinding at the memory cap)
    elif rc == 0:
        kind = "accepted"
    elif (rc == 2 or (case.nonzero_ok and rc != 0)) and names_it:
        kind = "clear"
    else:
        kind = "unclear"
    last = [ln for ln in text.strip().splitlines() if ln.strip()]
    msg = next((ln for ln in last if "error" in ln.lower()), last[-1] if last else "")
    return Outcome(case.id, rc, kind, writes, outside, round(secs, 1), msg.strip()[:300], round(peak_mb, 1))


class _PeakRSS:
    """The peak resident memory of a process, sampled every 50 ms in a thread (psutil)."""

    def __init__(self, pid: int) -> None:
        import threading

        import psutil

        self.peak, self._done = 0.0, threading.Event()
        try:
            self._proc = psutil.Process(pid)
        except psutil.Error:
            self._proc = None
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while self._proc is not None and not self._done.wait(0.05):
            try:
                self.peak = max(self.peak, self._proc.memory_info().rss / 2**20)
            except Exception:  # noqa: BLE001 - the process ended
                return

    def stop(self) -> float:
        self._done.set()
        self._thread.join(timeout=1)
        return self.peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", default="after", help="'before' or 'after' the fixes (names the results file)")
    ap.add_argument("--only", nargs="*", default=None, help="run only these case ids")
    ap.add_argument("--src", type=Path, default=None,
                    help="run the evotrainer package found in this directory instead of this checkout's "
                         "(e.g. `git archive COMMIT | tar -x -C DIR`, to measure a commit before the fixes)")
    a = ap.parse_args()
    chosen = [c for c in cases() if a.only is None or c.id in a.only]
    tmp = Path(tempfile.mkdtemp(prefix="evo-hostile-"))
    rows = []
    whats = {c.id: c.what for c in chosen}
    try:
        for c in chosen:
            o = run_case(c, tmp, a.src)
            rows.append(o)
            print(f"{o.id:22} rc={o.rc!s:5} {o.kind:9} writes={o.writes:<3} outside={o.outside} {o.seconds:6.1f}s  "
                  f"{o.message[:150]}", flush=True)
        if a.only is None or any(i.startswith(("ui-", "llm-")) for i in a.only):
            from hostile_boxes import inprocess_cases

            for cid, what, ok, detail in inprocess_cases(tmp):
                if a.only is None or cid in a.only:
                    whats[cid] = what
                    o = Outcome(cid, None, "clear" if ok else "accepted", 0, 0, 0.0, detail)
                    rows.append(o)
                    print(f"{o.id:22} {o.kind:9} {detail}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    kinds = {k: sum(1 for r in rows if r.kind == k) for k in ("clear", "traceback", "accepted", "unclear")}
    summary = {"inputs": len(rows), **kinds, "runs_with_writes": sum(1 for r in rows if r.writes),
               "writes_outside_home": sum(r.outside for r in rows)}
    print("\n| inputs tried | clear errors | tracebacks / killed | silently accepted | unclear refusals | "
          "inputs that wrote under --home | writes outside --home |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {summary['inputs']} | {summary['clear']} | {summary['traceback']} | {summary['accepted']} | "
          f"{summary['unclear']} | {summary['runs_with_writes']} | {summary['writes_outside_home']} |")
    out = ROOT / "bench" / "results" / f"hostile_inputs_{a.label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"bench": "hostile_inputs", "label": a.label, "src": str(a.src or ROOT),
                               "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "summary": summary,
                               "cases": [o.__dict__ for o in rows],
                               "what": whats}, indent=2))


if __name__ == "__main__":
    main()
