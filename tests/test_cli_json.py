"""Every command that takes ``--json`` prints exactly one JSON document on stdout, in its documented shape.

The commands are enumerated from the Typer app itself, so a new ``--json`` command fails this test until it
is registered in ``evotrainer.reports.shapes.COMMANDS`` and given arguments here. Each one runs for real against one
tiny campaign (waiting for a review, so nothing trains after its first segment): the ones that start
workers or train run as subprocesses, where a stray print from a child process would land on the same
stdout; the rest through Typer's runner. stdout must parse with ``json.loads`` and validate against one
of the command's shapes; logs and progress may go to stderr only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from evotrainer.cli import app
from evotrainer.reports.shapes import COMMANDS, SHAPES
from tests.conftest import REPO
from tests.test_campaign import _spec

SKILLS = str(REPO / "skills")


def json_commands() -> set[str]:
    """'group sub' names of every command of the app that has a --json option."""
    found: set[str] = set()

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):  # a group (Typer carries its own copy of click); it may run on its own too
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        if any("--json" in p.opts for p in cmd.params):
            found.add(" ".join(path))

    walk(typer.main.get_command(app), [])
    return found


def test_every_json_command_has_a_documented_shape_and_a_run_below():
    assert json_commands() == set(COMMANDS), "register the command's shapes in evotrainer.reports.shapes.COMMANDS"
    assert set(ARGS) == set(COMMANDS), "give the new --json command its arguments in ARGS below"
    assert all(s in SHAPES for shapes in COMMANDS.values() for s in shapes)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One campaign waiting for review of its first proposals (started with --json), and its home."""
    tmp = tmp_path_factory.mktemp("json")
    home = tmp / "home"
    spec = _spec(tmp, autonomy="review", budget={"total_steps": 14})
    p = _run(["campaign", "start", str(spec), "--no-wait", "--max-rounds", "1", "--json"], home)
    doc = _parse(p.stdout, "campaign start")
    cid = doc["campaign"]["id"]
    segment = doc["lineage"][0]["run_name"]
    archive = tmp / "archive.yaml"
    archive.write_text(yaml.safe_dump({"runs": [{"path": str(home / "jobs" / segment), "labels": ["truncation"]}]}))
    pending = doc["proposals"][0]["id"]
    return {"home": home, "cid": cid, "segment": segment, "archive": archive, "harness": tmp / "h.yaml",
            "pending": pending, "start": p}


def _run(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "EVOTRAINER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "evotrainer.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)


def _parse(stdout: str, command: str) -> dict:
    doc = json.loads(stdout)  # one document, nothing before or after it
    errors = []
    for shape in COMMANDS[command]:
        try:
            SHAPES[shape].model_validate(doc)
            return doc
        except ValueError as err:
            errors.append(f"{shape}: {err}")
    raise AssertionError(f"{command}: stdout matches none of its shapes: {errors}")


# command -> (arguments, run as a subprocess?); every entry runs in test_json_command below
ARGS: dict[str, tuple[Any, bool]] = {
    "tasks": (lambda w: ["tasks"], False),
    "tasks show": (lambda w: ["tasks", "show", "countdown", "--eval-n", "20"], False),
    "train": (lambda w: ["train", "--task", "arith", "--harness", str(w["harness"]), "--steps", "1", "--policy", "nano",
                         "--sft-steps", "150", "--eval-every", "0", "--save-every", "1", "--name", "json-train"], True),
    "harness validate": (lambda w: ["harness", "validate", str(w["harness"])], False),
    "harness diff": (lambda w: ["harness", "diff", str(w["harness"]), str(REPO / "harnesses" / "grpo-baseline.yaml")], False),
    "harness knobs": (lambda w: ["harness", "knobs"], False),
    "diagnose": (lambda w: ["diagnose", w["segment"], "--home", str(w["home"])], False),
    "diagnostics list": (lambda w: ["diagnostics", "list"], False),
    "diagnostics revise": (lambda w: ["diagnostics", "revise", "truncation", "--archive", str(w["archive"]), "--params",
                                      '{"warning": 0.5}', "--home", str(w["home"])], False),
    "campaign start": (None, True),  # run by the fixture
    "campaign resume": (lambda w: ["campaign", "resume", w["cid"], "--no-wait"], True),
    "campaign status": (lambda w: ["campaign", "status", w["cid"], "--home", str(w["home"])], False),
    "campaign confirm": (lambda w: ["campaign", "confirm", w["cid"], "--home", str(w["home"])], False),
    "campaign stop": (lambda w: ["campaign", "stop", w["cid"], "--home", str(w["home"])], False),
    "review list": (lambda w: ["review", "list", "--home", str(w["home"])], False),
    "review show": (lambda w: ["review", "show", w["pending"], "--home", str(w["home"])], False),
    "skills list": (lambda w: ["skills", "list", "--library", SKILLS], False),
    "skills show": (lambda w: ["skills", "show", "longer-completions", "--library", SKILLS], False),
    "skills search": (lambda w: ["skills", "search", "truncation", "--library", SKILLS, "--home", str(w["home"])], False),
    "skills lint": (lambda w: ["skills", "lint", "--library", SKILLS], False),
    "skills history": (lambda w: ["skills", "history", "longer-completions", "--library", SKILLS, "--home",
                                  str(w["home"])], False),
    "schema": (lambda w: ["schema"], False),
    "evidence contract": (lambda w: ["evidence", "contract"], False),
    "watch": (lambda w: ["watch", w["segment"], "--home", str(w["home"]), "--until-finished", "--interval", "0.1"], False),
}


@pytest.mark.parametrize("command", list(ARGS))  # in this order: 'campaign stop' comes after resume and status
def test_json_command(command, world):
    make, subprocess_ = ARGS[command]
    if make is None:
        result = world["start"]
        code, out, err = result.returncode, result.stdout, result.stderr
    elif subprocess_:
        result = _run([*make(world), "--json"], world["home"])
        code, out, err = result.returncode, result.stdout, result.stderr
    else:
        result = CliRunner().invoke(app, [*make(world), "--json"])
        code, out, err = result.exit_code, result.stdout, result.stderr
    assert code == 0, f"{command}: exit {code}\n{err[-3000:]}"
    doc = _parse(out, command)
    if command == "campaign status":  # and without an id: the list, as one document (it was JSON + a text list)
        listed = CliRunner().invoke(app, ["campaign", "status", "--home", str(world["home"]), "--json"])
        assert [c["id"] for c in _parse(listed.stdout, command)["campaigns"]] == [world["cid"]]
        assert doc["campaign"]["status"] == "waiting_review" and doc["resume"]
    if command in ("campaign start", "campaign resume", "train"):
        assert err.strip(), f"{command}: its progress and logs belong on stderr"


def test_a_failing_json_command_prints_one_error_document():
    r = CliRunner().invoke(app, ["campaign", "status", "no-such-campaign", "--json", "--home", "/nonexistent/evo-home"])
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    SHAPES["error"].model_validate(doc)
    assert doc["error"]["type"] == "NotFound" and "no-such-campaign" in doc["error"]["message"]
    assert doc["error"]["exit_code"] == 2


def test_schema_prints_every_shape_and_one_by_name():
    every = json.loads(CliRunner().invoke(app, ["schema", "--json"]).stdout)
    assert {s["name"] for s in every["schemas"]} == set(SHAPES)
    camp = next(s for s in every["schemas"] if s["name"] == "campaign")
    assert "campaign status" in camp["commands"] and "resume" in camp["schema"]["properties"]
    one = CliRunner().invoke(app, ["schema", "campaign"])
    assert one.exit_code == 0 and json.loads(one.stdout)["title"] == "CampaignSummary"
    bad = CliRunner().invoke(app, ["schema", "nope"])
    assert bad.exit_code == 2 and "campaign" in bad.stderr
