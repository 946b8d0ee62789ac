"""`evotrainer watch` follows runs while they train: real plain-TRL jobs started by the test, a directory grown step
by step, a verl dump dir, Ctrl-C.

The TRL jobs are scripts this test writes (plain ``GRPOTrainer``, the nano policy, a few steps) and runs as
subprocesses while ``watch`` runs in another; one writes TRL's own output dir (``log_completions``), the other
records through ``EvoTrainerCallback``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from evotrainer.diagnostics.registry import Registry
from evotrainer.monitor.watch import Watcher, run_finished
from tests.conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "runs" / "lr-too-high-s0"

SCRIPT = textwrap.dedent('''
    """A plain TRL GRPO script: the nano policy, {steps} steps, 2 prompts x 4 generations per step."""
    import sys
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from evotrainer.training.policy import build_model, build_tokenizer

    out, reward, callback = sys.argv[1], sys.argv[2], sys.argv[3] == "callback"

    def constant(completions, **kw):
        return [1.0 for _ in completions]

    def brevity(completions, **kw):
        return [-len(c) / 4 for c in completions]

    tok = build_tokenizer()
    args = GRPOConfig(output_dir=out, max_steps={steps}, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=4, logging_steps=1, save_steps=1, report_to="none", use_cpu=True,
                      bf16=False, disable_tqdm=True, log_completions=not callback, num_completions_to_print=0, seed=0)
    callbacks = []
    if callback:
        from evotrainer.monitor.callback import EvoTrainerCallback
        callbacks.append(EvoTrainerCallback(every=1))
    GRPOTrainer(model=build_model("nano", tok), reward_funcs=[constant if reward == "constant" else brevity], args=args,
                processing_class=tok, train_dataset=Dataset.from_dict({{"prompt": ["1+1=", "0+2="] * 16}}),
                callbacks=callbacks).train()
''')


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "EVOTRAINER_HOME": "/nonexistent-home"}


def _watch(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evotrainer.cli", "watch", *args], cwd=REPO, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _train(tmp_path: Path, out: Path, reward: str, callback: bool, steps: int) -> subprocess.Popen:
    script = tmp_path / "train_grpo.py"
    script.write_text(SCRIPT.format(steps=steps))
    return subprocess.Popen([sys.executable, str(script), str(out), reward, "callback" if callback else "plain"],
                            cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out or "", err or ""


def test_watch_a_plain_trl_output_dir_fails_at_the_first_critical_finding(tmp_path):
    out = tmp_path / "trl-out"
    watch = _watch([str(out), "--fail-on", "critical", "--interval", "0.2", "--timeout", "500"])  # before it exists
    train = _train(tmp_path, out, "constant", callback=False, steps=6)
    try:
        code, stdout, stderr = _finish(watch)
    finally:
        train.terminate()
        _finish(train, 60)
    assert code == 1, (stdout, stderr)
    assert "CRITICAL" in stdout and "dead_groups" in stdout
    assert "(trl)" in stderr and "stopped (a finding at or above critical)" in " ".join(stderr.split())


def test_watch_the_callback_directory_until_the_run_finishes(tmp_path):
    out = tmp_path / "trl-out"
    train = _train(tmp_path, out, "brevity", callback=True, steps=3)
    watch = _watch([str(out / "evotrainer"), "--until-finished", "--interval", "0.2", "--timeout", "500", "--json"])
    code, stdout, stderr = _finish(watch)
    tcode, _, terr = _finish(train)
    assert tcode == 0, terr[-2000:]
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert doc["stopped"] == "finished" and doc["source"] == "evotrainer" and doc["steps"] == 3
    assert doc["rollouts"] == 24 and doc["diagnoses"] >= 1


def _grow(src: Path, dest: Path, upto: int) -> None:
    """``dest`` as ``src`` stood at step ``upto`` (meta.json says running until the last step)."""
    (dest / "rollouts").mkdir(parents=True, exist_ok=True)
    meta = json.loads((src / "meta.json").read_text())
    last = max(int(p.stem.split("_")[1]) for p in (src / "rollouts").glob("step_*.parquet"))
    meta["status"] = "finished" if upto >= last else "running"
    (dest / "meta.json").write_text(json.dumps(meta))
    lines = [ln for ln in (src / "metrics.jsonl").read_text().splitlines() if json.loads(ln)["step"] <= upto]
    (dest / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for p in (src / "rollouts").glob("step_*.parquet"):
        if int(p.stem.split("_")[1]) <= upto and not (dest / "rollouts" / p.name).exists():
            shutil.copy(p, dest / "rollouts" / p.name)


def test_watcher_reports_each_finding_once_and_again_when_its_severity_changes(tmp_path):
    run = tmp_path / "job"
    w = Watcher(str(run), None, Registry(), every=1)
    assert w.check() == (None, [])  # not there yet
    seen = []
    for step in range(1, 41):
        _grow(FIXTURE, run, step)
        ev, new = w.check()
        seen += [(s.step, s.finding.diagnostic, s.finding.severity) for s in new]
        assert run_finished(ev) == (step == 40)
    keys = [(d, sev) for _, d, sev in seen]
    assert len(keys) == len(set(keys)), seen  # never twice the same
    # every completion of this run is cut off, so its dead groups are truncation's (dead_groups v2)
    assert ("truncation", "critical") in keys and ("entropy_collapse", "critical") in keys
    assert w.diagnoses == 40 and len(w.cache._got) >= 40  # each step's file read once, then served from the cache
    first = {d: s for s, d, _ in reversed(seen)}
    assert first["truncation"] < 40  # found while the run was going, not at its end


def test_watch_a_verl_dump_dir_stops_when_idle(tmp_path):
    root = tmp_path / "verl"
    (root / "rollouts").mkdir(parents=True)
    for step in range(1, 7):  # every group's scores are equal: dead groups
        recs = [{"input": f"q{i % 2}", "output": f"o{i}", "score": 0.0, "step": step} for i in range(8)]
        (root / "rollouts" / f"{step}.jsonl").write_text("\n".join(json.dumps(x) for x in recs) + "\n")
    code, out, err = _finish(_watch([str(root), "--until-finished", "--timeout", "60"]), 120)
    assert code == 2 and "no end marker" in " ".join(err.split()) and "--idle" in err
    code, out, err = _finish(_watch([str(root), "--until-finished", "--idle", "1", "--interval", "0.2",
                                     "--timeout", "60"]), 120)
    assert code == 0 and "dead_groups" in out and "no new step for 1.0s" in " ".join(err.split())


def test_ctrl_c_stops_watch_cleanly(tmp_path):
    proc = _watch([str(tmp_path / "never"), "--interval", "0.2"])
    deadline = time.monotonic() + 60
    line = ""
    while "watching" not in line and time.monotonic() < deadline:
        line += proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(60)
    err = " ".join((line + proc.stderr.read()).split())  # (communicate() would skip what readline buffered)
    assert code == 130 and "stopped (interrupted)" in err
