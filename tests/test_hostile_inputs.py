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


# ------------------------------------------------------------------------------------ diagnose on unreadable evidence
def _garbage(tmp_path: Path, kind: str) -> tuple[Path, list[str]]:
    """A run directory of each layout whose every file is garbage; the file names the message must give."""
    d = tmp_path / kind
    if kind == "ours":
        _write(d, "meta.json", b'{"name": "ours"}')
        _write(d, "metrics.jsonl", b"\xff\xfe garbage \x00\x01\n{not json\n")
        _write(d, "rollouts/step_000001.parquet", os.urandom(512))
        _write(d, "rollouts/step_000002.parquet", b"PAR1" + os.urandom(200) + b"PAR1")
        return d, ["metrics.jsonl", "step_000001.parquet", "step_000002.parquet"]
    if kind == "trl":
        _write(d, "trainer_state.json", b'{"log_history": [garbage')
        _write(d, "completions/completions_00001.parquet", os.urandom(700))
        return d, ["trainer_state.json", "completions_00001.parquet"]
    _write(d, "rollout/1.jsonl", b"\x00\x01\x02 not json at all\n[1, 2\n")
    _write(d, "rollout/2.jsonl", b"\xff" + os.urandom(300))
    return d, ["1.jsonl", "2.jsonl"]


@pytest.mark.parametrize("kind", ["ours", "trl", "verl"])
@pytest.mark.parametrize("fail_on", [None, "warning"])
def test_diagnose_says_what_it_could_not_read_and_fails_when_nothing_could_be(tmp_path, kind, fail_on):
    run, names = _garbage(tmp_path, kind)
    res = cli("diagnose", str(run), "--home", str(tmp_path / "home"), *(["--fail-on", fail_on] if fail_on else []))
    assert res.exit_code == 2, res.output
    out = flat(res.output)
    assert "no evidence could be read" in out and str(run) in out
    for n in names:
        assert n in out, (n, out)
    assert "no warning or critical finding" not in out


def test_diagnose_on_partly_readable_evidence_reports_the_rest_and_a_gate_fails(tmp_path):
    import shutil

    from tests.conftest import REPO

    run = tmp_path / "healthy"
    shutil.copytree(REPO / "tests" / "fixtures" / "runs" / "healthy-s0", run)
    bad = _write(run, "rollouts/step_999999.parquet", os.urandom(300))
    res = cli("diagnose", str(run), "--home", str(tmp_path / "home"))
    assert res.exit_code == 0, res.output
    out = flat(res.output)
    assert "could not read 1 file" in out and str(bad) in out
    assert "no warning or critical finding" not in out  # never on evidence that was not all read
    gate = cli("diagnose", str(run), "--home", str(tmp_path / "home"), "--fail-on", "critical")
    assert gate.exit_code == 1 and "some evidence files could not be read" in flat(gate.output)
    bad.unlink()  # the same run, all of it readable: the gate passes
    assert cli("diagnose", str(run), "--home", str(tmp_path / "home"), "--fail-on", "critical").exit_code == 0


@pytest.mark.parametrize(
    "meta", [b"", b"\x00garbage{", b"[1, 2, 3]", b'{"name": "x"}', json.dumps({"x": "y" * 10}).encode()],
)
def test_diagnose_reads_a_job_dir_with_a_damaged_meta_json(tmp_path, meta):
    import shutil

    from tests.conftest import REPO

    run = tmp_path / "healthy"
    shutil.copytree(REPO / "tests" / "fixtures" / "runs" / "healthy-s0", run)
    (run / "meta.json").write_bytes(meta)
    res = cli("diagnose", str(run), "--home", str(tmp_path / "home"))
    assert res.exit_code == 0, res.output
    assert "rollouts" in res.output


# ------------------------------------------------------------------------------------ names (one rule) and train
def test_the_name_rule():
    from evotrainer.core.errors import ConfigError
    from evotrainer.core.names import check_name, is_name, to_name

    for ok in ("run-1", "a_b.c", "arith__tiny__s0__20261123T155026887917", "X" * 128, "..a", "a.."):
        assert is_name(ok), ok
    for bad in ("", ".", "..", "a/b", "/abs", "../x", "a\\b", "a b", "a\x00b", "X" * 129, "é", "a:b", None, 3):
        assert not is_name(bad), bad
    assert check_name("camp-1:r01:p0", "proposal id", compound=True) == "camp-1:r01:p0"
    with pytest.raises(ConfigError, match=r"--name '\.\./x' is not a valid name: use 1-128 letters"):
        check_name("../x", "--name")
    with pytest.raises(ConfigError, match="parts joined by ':'"):
        check_name("c:..:p0", "proposal id", compound=True)
    assert to_name("my harness (v2)") == "my-harness-v2" and to_name("my.module:Task") == "my.module-Task"
    assert to_name("///", "harness") == "harness" and is_name(to_name("../../" + "x" * 500))


@pytest.mark.parametrize("name", ["/tmp/evotrainer-escape-test", "../x", "a/b", "..", ".", "with space"])
def test_train_refuses_a_run_name_that_is_a_path(tmp_path, name, tiny_harness):
    home = tmp_path / "home"
    target = Path(name) if name.startswith("/") else None
    res = cli("train", "--harness", str(tiny_harness), "--home", str(home), "--steps", "1", "--name", name)
    assert res.exit_code == 2, res.output
    assert "is not a valid name" in flat(res.output) and "--name" in res.output
    assert _entries(home) == []
    assert target is None or not target.exists()


def test_train_names_the_option_and_bound_instead_of_a_validation_error(tmp_path, tiny_harness):
    home = tmp_path / "home"
    res = cli("train", "--harness", str(tiny_harness), "--home", str(home), "--steps", "100000000000")
    assert res.exit_code == 2, res.output
    assert "--steps 100000000000: Input should be less than or equal to 10000000" in flat(res.output)
    assert "ValidationError" not in res.output and "JobSpec" not in res.output
    res = cli("train", "--harness", str(tiny_harness), "--home", str(home), "--seed", "99999999999")
    assert res.exit_code == 2 and "--seed 99999999999" in flat(res.output)
    assert _entries(home) == []


@pytest.mark.parametrize(("meta", "expected"), [
    (b"", "not a readable job record"),
    (b"\x00garbage{", "not a readable job record"),
    (b"\xff\xfe\xfd", "not a readable job record"),
    (b"[1, 2, 3]", "is a JSON list"),
    (b'{"name": "x"}', "lacks run_id"),
    (json.dumps({"name": "x", "run_id": "r", "spec": {"steps": "many"}, "harness": {}, "target_step": 3,
                 "start_step": 0, "base_policy": "p"}).encode(), "damaged job record (steps"),
    (json.dumps({"name": "x", "run_id": "r", "spec": {}, "harness": {}, "target_step": "8",
                 "start_step": 0, "base_policy": "p"}).encode(), "damaged job record (target_step"),
    (json.dumps({"name": "x", "run_id": "r", "spec": {}, "harness": {}, "target_step": True,
                 "start_step": 0, "base_policy": "p"}).encode(), "damaged job record (target_step"),
    (json.dumps({"name": "x", "run_id": None, "spec": {}, "harness": {}, "target_step": 3,
                 "start_step": 0, "base_policy": "p"}).encode(), "lacks run_id"),
])
def test_train_resume_on_a_damaged_meta_json_names_the_file(tmp_path, meta, expected):
    run = tmp_path / "run"
    _write(run, "meta.json", meta)
    home = tmp_path / "home"
    res = cli("train", "--home", str(home), "--resume", str(run))
    assert res.exit_code == 2, res.output
    out = flat(res.output)
    assert str(run / "meta.json") in out and expected in out, out
    assert _entries(home) == [] and sorted(p.name for p in run.iterdir()) == ["meta.json"]


def test_a_damaged_meta_json_does_not_break_lookups_by_run_id(tmp_path):
    home = tmp_path / "home"
    _write(home / "jobs" / "broken", "meta.json", b"\xff\xfe")
    _write(home / "jobs" / "listy", "meta.json", b"[]")
    res = cli("train", "--home", str(home), "--resume", "0123456789abcdef0123456789abcdef")
    assert res.exit_code == 2 and "no run '0123456789abcdef0123456789abcdef'" in flat(res.output)


def test_skill_slugs_follow_the_name_rule():
    from tests.conftest import REPO

    res = cli("skills", "show", "../../etc", "--library", str(REPO / "skills"))
    assert res.exit_code == 2 and "skill slug '../../etc' is not a valid name" in flat(res.output)


@pytest.mark.parametrize("path", ["/diagnose/..%2F..%2Fetc", "/diagnose/%2E%2E", "/campaigns/..%2Fx/state.json",
                                  "/skills/..%2F..%2Fetc%2Fpasswd", "/proposals/c%3A..%3Ap0", "/campaigns/a%20b",
                                  "/diagnose/a%00b"])
def test_every_dashboard_path_segment_follows_the_name_rule(tmp_path, path):
    from fastapi.testclient import TestClient

    from evotrainer.ui import create_app

    c = TestClient(create_app(tmp_path / "home", "t" * 32), base_url="http://127.0.0.1:8765", follow_redirects=False)
    r = c.get(path)
    assert r.status_code == 400, (path, r.status_code)
    assert "is not a valid name" in r.text
    # names that follow the rule reach their route (and are simply not found there)
    assert c.get("/proposals/camp-1:r01:p0").status_code == 404
    assert c.get("/diagnose/arith__tiny__s0").status_code == 404


def test_campaign_ids_follow_the_name_rule(tmp_path):
    from evotrainer.core.errors import ConfigError
    from evotrainer.store import Store

    store = Store.for_home(tmp_path / "home")
    with pytest.raises(ConfigError, match="campaign id '../x' is not a valid name"):
        store.create_campaign("../x", "x", {}, thread_id="t")
    store.create_campaign("camp-1", "x", {}, thread_id="t")
    for cmd in (["campaign", "status", "../../etc"], ["campaign", "resume", "a/b"], ["review", "list"]):
        res = cli(*cmd, "--home", str(tmp_path / "home"))
        assert res.exit_code == (0 if cmd[0] == "review" else 2), res.output
    assert "campaign id '../../etc' is not a valid name" in flat(cli("campaign", "status", "../../etc", "--home",
                                                                      str(tmp_path / "home")).output)


def test_skills_show_on_a_malformed_file_says_why(tmp_path):
    from tests.conftest import REPO

    text = (REPO / "skills" / "clip-higher" / "SKILL.md").read_text()
    _write(tmp_path, "lib/dup/SKILL.md", text.replace("---\n", "---\nname: first\n", 1))
    res = cli("skills", "show", "dup", "--library", str(tmp_path / "lib"))
    assert res.exit_code == 2, res.output
    out = flat(res.output)
    assert "skill 'dup'" in out and "is not valid" in out and str(tmp_path / "lib" / "dup" / "SKILL.md") in out
    assert "duplicate key 'name'" in out
