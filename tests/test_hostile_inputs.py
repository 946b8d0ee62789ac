"""Issue 18's 'Found' list: each hostile input a probe found, through the real CLI, refused with exit 2 and a message
naming the file or option — never a traceback, a silent acceptance, or a write outside (or, when refused, under)
``--home``. Every test here failed on the code before the fixes (``bench/hostile_inputs.py`` keeps the counts).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evotrainer.cli import app
from tests.conftest import TINY_HARNESS

USER_DIAG = '''
from evotrainer.diagnostics.base import Diagnostic
from pydantic import BaseModel, ConfigDict, Field


class P(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_reward: float = Field(0.9, description="threshold")


class HighReward(Diagnostic):
    name = "high_reward"
    symptom = "reward_hacking"
    signal = "mean reward"
    Params = P

    def analyze(self, ev):
        return []
'''


def cli(*args: str, env: dict[str, str] | None = None):
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": "400", **(env or {})})
    assert "Traceback" not in res.output, res.output
    return res


def flat(text: str) -> str:
    return " ".join(text.split())


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def _entries(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else []


# ------------------------------------------------------------------------------------ gates and params (Build 2)
@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("diagnostics:\n  gate:\n    - {diagnostic: no_such_diag, fail_at: warning}\n",
         ["diagnostics.gate[0].diagnostic", "unknown diagnostic 'no_such_diag'", "entropy_collapse", "reward_hacking"]),
        ("diagnostics:\n  params:\n    no_such_diag: {ratio: 0.2}\n",
         ["diagnostics.params.no_such_diag", "unknown diagnostic", "answer_spraying"]),
        ("diagnostics:\n  params:\n    entropy_collapse: {no_such_param: 0.2}\n",
         ["diagnostics.params.entropy_collapse.no_such_param", "unknown parameter", "its parameters:", "ratio"]),
        ("diagnostics:\n  params:\n    entropy_collapse: {ratio: lots}\n",
         ["diagnostics.params.entropy_collapse.ratio", "'lots'", "its parameters:"]),
    ],
)
def test_harness_validate_knows_the_registry(tmp_path, yaml_text, expected):
    p = _write(tmp_path, "h.yaml", yaml_text)
    res = cli("harness", "validate", str(p))
    assert res.exit_code == 2, res.output
    for piece in [str(p), *expected]:
        assert piece in flat(res.output), (piece, res.output)


def test_user_diagnostics_count_as_registered_and_their_parameters_are_checked(tmp_path):
    _write(tmp_path, "diag.py", USER_DIAG)
    ok = _write(tmp_path, "ok.yaml", "diagnostics:\n  user: [{path: diag.py}]\n  gate: [{diagnostic: high_reward}]\n"
                                     "  params: {high_reward: {max_reward: 0.8}}\n")
    assert cli("harness", "validate", str(ok)).exit_code == 0
    bad = _write(tmp_path, "bad.yaml", "diagnostics:\n  user: [{path: diag.py}]\n  params: {high_reward: {max_rewrd: 1}}\n")
    res = cli("harness", "validate", str(bad))
    assert res.exit_code == 2
    assert "diagnostics.params.high_reward.max_rewrd: unknown parameter of 'high_reward'; its parameters: max_reward" \
        in flat(res.output)
    # the list of what exists includes the user's diagnostic
    gate = _write(tmp_path, "gate.yaml", "diagnostics:\n  user: [{path: diag.py}]\n  gate: [{diagnostic: high_rewards}]\n")
    assert "high_reward," in flat(cli("harness", "validate", str(gate)).output)


def test_untrusted_diagnostics_report_their_parameters_from_the_sandbox(tmp_path):
    _write(tmp_path, "diag.py", USER_DIAG)
    bad = _write(tmp_path, "bad.yaml", "diagnostics:\n  user: [{path: diag.py, trusted: false}]\n"
                                       "  params: {high_reward: {max_rewrd: 1}}\n")
    res = cli("harness", "validate", str(bad))
    assert res.exit_code == 2, res.output
    assert "unknown parameter of 'high_reward'; its parameters: max_reward" in flat(res.output)


def test_train_refuses_an_unknown_gate_before_writing_anything(tmp_path):
    h = _write(tmp_path, "t.yaml", TINY_HARNESS + "diagnostics: {gate: [{diagnostic: reward_hackin}]}\n")
    home = tmp_path / "home"
    res = cli("train", "--harness", str(h), "--home", str(home), "--steps", "1")
    assert res.exit_code == 2
    assert str(h) in flat(res.output) and "unknown diagnostic 'reward_hackin'" in res.output
    assert _entries(home) == []
