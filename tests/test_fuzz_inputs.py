"""Property-based fuzzing of the files a user hands EvoTrainer (issue 18, Build 3), with Hypothesis.

The property, for every generated input: the real command line exits 2 with a one-paragraph message that names
the file, and nothing is written under ``--home``. Inputs come in two kinds:

* **certainly invalid**: a valid harness or campaign spec from the repository with one breaking change — a value
  of the wrong type, a number past its bound, an unknown key, a gate or ``diagnostics.params`` entry naming a
  diagnostic or parameter that does not exist. These go through commands that write when given valid input
  (``train``, ``campaign start``), so "nothing written" is a real check.
* **mutated or random bytes**: a repository file with bytes deleted, inserted, duplicated or replaced, or plain
  random bytes. Some of those are still valid; the in-process loader decides first and valid ones are discarded
  (``assume``), so an exception there that is not a ConfigError fails the test like a CLI traceback would.

Bounded by ``max_examples`` (900 inputs in all): about 20 s of CPU, 30-40 s on a busy two-core machine. Failing examples are kept in ``tests/.hypothesis/``,
committed with the repository, so that a regression replays first on every machine (see its README).
"""

from __future__ import annotations

import os
import string
import tempfile
import traceback
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from pydantic import BaseModel
from typer.testing import CliRunner

from evotrainer.cli import app
from evotrainer.config.campaign import CampaignSpec, load_campaign_spec
from evotrainer.config.harness import HarnessSpec, load_harness
from evotrainer.core.errors import ConfigError
from evotrainer.diagnostics.registry import Registry, builtin_diagnostics
from tests.conftest import REPO

DB = DirectoryBasedExampleDatabase(str(REPO / "tests" / ".hypothesis" / "examples"))
# Locally each run draws new examples (and replays the saved failures); under CI (``CI`` set, as .ci/run does) the
# draws are derandomized, hypothesis's own "ci" profile choice, so a clean clone's CI run is the same run every time
# (hypothesis then takes no example database).
_CI = bool(os.environ.get("CI"))
FUZZ = settings(database=None if _CI else DB, deadline=None, derandomize=_CI, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])

HARNESS_FILES = sorted([*REPO.glob("harnesses/*.yaml"), *REPO.glob("harnesses/pathological/*.yaml")])
SPEC_FILES = sorted(REPO.glob("campaigns/*.yaml"))
BOOLISH = {"yes", "no", "on", "off", "true", "false", "t", "f", "y", "n", "inf", "infinity", "nan"}
DIAGNOSTICS = builtin_diagnostics()


# ------------------------------------------------------------------------------------------------ the property
def run_cli(args: list[str], home: Path):
    return CliRunner().invoke(app, args, env={"COLUMNS": "1000", "EVOTRAINER_HOME": str(home), "NO_COLOR": "1"})


def assert_refused(args: list[str], home: Path, file: Path) -> None:
    """Exit 2, one paragraph naming ``file``, no traceback, nothing under ``home``."""
    res = run_cli(args, home)
    out = res.output.strip()
    if res.exception is not None and not isinstance(res.exception, SystemExit):  # what a user would see as a traceback
        raise AssertionError("".join(traceback.format_exception(res.exception))) from res.exception
    assert "Traceback" not in out, out
    assert res.exit_code == 2, (res.exit_code, out)
    assert out.startswith("error:"), out
    assert "\n\n" not in out, out  # one paragraph
    assert str(file) in out or str(file) in "".join(out.split()), out
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else []
    assert written == [], written


# ------------------------------------------------------------------------------------------------ generators
def _sub_model(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return next((a for a in typing.get_args(ann) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return None


def leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any, dict]]:
    """(path, annotation, bounds) of every leaf field a file may set."""
    out = []
    for name, f in model.model_fields.items():
        if f.exclude:
            continue
        sub = _sub_model(f.annotation)
        if sub is not None:
            out.extend(leaves(sub, (*prefix, name)))
            continue
        bounds = {a: getattr(m, a) for m in f.metadata for a in ("ge", "gt", "le", "lt") if getattr(m, a, None) is not None}
        out.append(((*prefix, name), f.annotation, bounds))
    return out


HARNESS_LEAVES = leaves(HarnessSpec)
SPEC_LEAVES = leaves(CampaignSpec)
ident = st.text(string.ascii_lowercase + "_", min_size=1, max_size=12)
word = st.text(string.ascii_letters, min_size=1, max_size=10).filter(lambda s: s.lower() not in BOOLISH)


def _is_dict_field(ann: Any) -> bool:
    return typing.get_origin(ann) is dict


def _is_str_list_field(ann: Any) -> bool:
    return typing.get_origin(ann) in (list, tuple) and all(a in (str, Ellipsis) for a in typing.get_args(ann))


def wrong_type(ann: Any) -> st.SearchStrategy:
    """A value no field of this annotation accepts: a list where a mapping goes, a mapping or a number where a list of
    names goes (a list of words would be valid there: ``model.lora_target_modules``), else a mapping or a list of words."""
    if _is_dict_field(ann):
        return st.lists(word, min_size=1, max_size=3)
    if _is_str_list_field(ann):
        return st.one_of(st.dictionaries(ident, st.integers(), min_size=1, max_size=2), st.integers())
    return st.one_of(st.dictionaries(ident, st.integers(), min_size=1, max_size=2), st.lists(word, min_size=3, max_size=4))


def out_of_range(ann: Any, bounds: dict) -> st.SearchStrategy:
    is_int = int in (typing.get_args(ann) or (ann,))
    delta = st.integers(1, 10**12) if is_int else st.floats(1e-3, 1e12)
    picks = []
    if "le" in bounds:
        picks.append(delta.map(lambda d, b=bounds["le"]: b + d))
    if "lt" in bounds:
        picks.append(delta.map(lambda d, b=bounds["lt"]: b + d).flatmap(lambda v, b=bounds["lt"]: st.sampled_from([b, v])))
    if "ge" in bounds:
        picks.append(delta.map(lambda d, b=bounds["ge"]: b - d))
    if "gt" in bounds:
        picks.append(delta.map(lambda d, b=bounds["gt"]: b - d).flatmap(lambda v, b=bounds["gt"]: st.sampled_from([b, v])))
    return st.one_of(picks)


def _set(doc: dict, path: tuple[str, ...], value: Any) -> dict:
    node = doc
    for p in path[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[path[-1]] = value
    return doc


@st.composite
def one_break(draw, base: dict, model_leaves: list, model: type[BaseModel], harness: bool) -> tuple[dict, str]:
    """``base`` with exactly one change that makes it invalid, and what the change was."""
    doc = yaml.safe_load(yaml.safe_dump(base))  # a deep copy
    kinds = ["wrong_type", "out_of_range", "unknown_key"] + (["gate", "params_diag", "params_name"] if harness else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "wrong_type":
        path, ann, _ = draw(st.sampled_from(model_leaves))
        return _set(doc, path, draw(wrong_type(ann))), f"{'.'.join(path)}: wrong type"
    if kind == "out_of_range":
        path, ann, bounds = draw(st.sampled_from([x for x in model_leaves if x[2]]))
        return _set(doc, path, draw(out_of_range(ann, bounds))), f"{'.'.join(path)}: out of range"
    if kind == "unknown_key":
        sections = [()] + sorted({p[:1] for p, _, _ in model_leaves if len(p) > 1 and isinstance(doc.get(p[0]), dict)})
        where = draw(st.sampled_from(sections))
        node = doc
        for p in where:
            node = node[p]
        allowed = set(model.model_fields) if not where else {p[len(where)] for p, _, _ in model_leaves if p[:len(where)] == where}
        key = draw(ident.filter(lambda k: k not in allowed and k not in node))
        node[key] = draw(st.one_of(st.integers(), word))
        return doc, f"unknown key {'.'.join((*where, key))}"
    diag = doc.setdefault("diagnostics", {}) if isinstance(doc.get("diagnostics"), dict) else _set(doc, ("diagnostics",), {})["diagnostics"]
    if kind == "gate":
        name = draw(ident.filter(lambda n: n not in DIAGNOSTICS))
        diag.setdefault("gate", []).append({"diagnostic": name, "fail_at": "warning"})
        return doc, f"gate on unknown {name}"
    if kind == "params_diag":
        name = draw(ident.filter(lambda n: n not in DIAGNOSTICS))
        diag.setdefault("params", {})[name] = {}
        return doc, f"params for unknown {name}"
    target = draw(st.sampled_from(sorted(DIAGNOSTICS)))
    pname = draw(ident.filter(lambda n: n not in DIAGNOSTICS[target].Params.model_fields))
    diag.setdefault("params", {}).setdefault(target, {})[pname] = draw(st.one_of(st.integers(), st.floats(0, 1)))
    return doc, f"unknown parameter {target}.{pname}"


@st.composite
def mutated(draw, files: list[Path]) -> bytes:
    """A repository file with bytes deleted, inserted, replaced, lines duplicated or swapped, or truncated."""
    data = bytearray(draw(st.sampled_from(files)).read_bytes())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["delete", "insert", "replace", "dup_line", "swap_lines", "truncate"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "delete":
            del data[i: i + draw(st.integers(1, 40))]
        elif op == "insert":
            data[i:i] = draw(st.one_of(st.binary(min_size=1, max_size=30),
                                       st.sampled_from([b": ", b"\n", b"&a ", b"*a", b"!!python/name:os.system ",
                                                        b"{", b"[", b"- ", b"\t", b"<<: ", b"\xff", b"\x00"])))
        elif op == "replace" and data:
            data[i] = draw(st.integers(0, 255))
        elif op in ("dup_line", "swap_lines"):
            lines = bytes(data).split(b"\n")
            j, k = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            if op == "dup_line":
                lines.insert(k, lines[j])
            else:
                lines[j], lines[k] = lines[k], lines[j]
            data = bytearray(b"\n".join(lines))
        elif op == "truncate":
            del data[i:]
    return bytes(data)


def harness_is_valid(path: Path) -> bool:
    try:
        Registry(load_harness(path))  # anything but a ConfigError here is a bug, and fails the test
    except ConfigError:
        return False
    return True


def spec_loads(path: Path) -> bool:
    try:
        load_campaign_spec(path)
    except ConfigError:
        return False
    return True


def _spec_base(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    doc["harness"] = str((path.parent / doc["harness"]).resolve())  # the copy lives elsewhere
    return doc


HARNESS_BASES = [yaml.safe_load(f.read_text()) or {} for f in HARNESS_FILES]
SPEC_BASES = [_spec_base(f) for f in SPEC_FILES]


# ------------------------------------------------------------------------------------------------ the tests
@settings(FUZZ, max_examples=200)
@given(data=st.data())
def test_malformed_harness_is_refused_by_train_and_validate(data):
    doc, what = data.draw(st.sampled_from(HARNESS_BASES).flatmap(
        lambda b: one_break(b, HARNESS_LEAVES, HarnessSpec, harness=True)), label="harness")
    with tempfile.TemporaryDirectory(prefix="evo-fuzz-") as tmp:
        f = Path(tmp) / "harness.yaml"
        f.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
        home = Path(tmp) / "home"
        assert_refused(["train", "--harness", str(f), "--home", str(home), "--steps", "1", "--policy", "nano"], home, f)
        assert_refused(["harness", "validate", str(f)], home, f)


@settings(FUZZ, max_examples=300)
@given(raw=st.one_of(mutated(HARNESS_FILES), st.binary(max_size=600)))
def test_mutated_or_random_harness_bytes_are_refused(raw):
    with tempfile.TemporaryDirectory(prefix="evo-fuzz-") as tmp:
        f = Path(tmp) / "harness.yaml"
        f.write_bytes(raw)
        assume(not harness_is_valid(f))
        assert_refused(["harness", "validate", str(f)], Path(tmp) / "home", f)


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_malformed_campaign_spec_is_refused_by_campaign_start(data):
    doc, what = data.draw(st.sampled_from(SPEC_BASES).flatmap(
        lambda b: one_break(b, SPEC_LEAVES, CampaignSpec, harness=False)), label="spec")
    with tempfile.TemporaryDirectory(prefix="evo-fuzz-") as tmp:
        f = Path(tmp) / "spec.yaml"
        f.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
        home = Path(tmp) / "home"
        assert_refused(["campaign", "start", "--no-wait", "--home", str(home), str(f)], home, f)


@settings(FUZZ, max_examples=250)
@given(raw=st.one_of(mutated(SPEC_FILES), st.binary(max_size=600)))
def test_mutated_or_random_campaign_spec_bytes_are_refused(raw):
    with tempfile.TemporaryDirectory(prefix="evo-fuzz-") as tmp:
        f = Path(tmp) / "spec.yaml"
        f.write_bytes(raw)
        assume(not spec_loads(f))  # a spec that still loads would start a campaign: not this test's business
        home = Path(tmp) / "home"
        assert_refused(["campaign", "start", "--no-wait", "--home", str(home), str(f)], home, f)
