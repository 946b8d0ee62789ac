"""The one safe YAML loader (issue 18, Build 1): every refusal is a ConfigError naming the file and the line.

Each case goes through the real loaders — ``load_harness`` (harnesses), ``load_campaign_spec``, ``Archive.load``
and a SKILL.md through ``Library.load`` — or the CLI, so a loader that stops using ``safe_yaml`` fails here.
"""

from __future__ import annotations

import glob
import time

import pytest
import yaml
from typer.testing import CliRunner

from evotrainer.cli import app
from evotrainer.config.campaign import load_campaign_spec
from evotrainer.config.harness import load_harness
from evotrainer.core.errors import ConfigError
from evotrainer.core.safe_yaml import MAX_ALIAS_NODES, MAX_BYTES, MAX_DEPTH, parse_yaml
from evotrainer.diagnostics.revision import Archive
from evotrainer.library.format import split_front_matter
from evotrainer.library.lint import check_text
from tests.conftest import REPO


def laughs(levels: int = 9, indent: str = "      ") -> str:
    """The 'billion laughs': each anchor lists the previous one nine times (9^levels strings once expanded)."""
    out = [f'{indent}a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    out += [f"{indent}a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(out) + "\n"


def _refused(tmp_path, data: str | bytes, *expected: str, name: str = "h.yaml") -> str:
    p = tmp_path / name
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    with pytest.raises(ConfigError) as info:
        load_harness(p)
    msg = str(info.value)
    assert msg.startswith(str(p)), msg  # names the file first
    for piece in expected:
        assert piece in msg, (piece, msg)
    return msg


def test_duplicate_keys_are_refused_with_both_lines(tmp_path):
    _refused(tmp_path, "optim: {learning_rate: 0.001}\ngrpo: {temperature: 1.0}\noptim: {learning_rate: 0.1}\n",
             "line 3", "duplicate key 'optim'", "first given at line 1")
    _refused(tmp_path, "grpo:\n  temperature: 1.0\n  beta: 0.0\n  temperature: 3.0\n", "line 4",
             "duplicate key 'temperature'", "line 2")
    _refused(tmp_path, "diagnostics:\n  gate:\n    - {diagnostic: nan, diagnostic: echo}\n", "line 3", "'diagnostic'")


def test_merge_keys_are_not_duplicates(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("grpo: &g {temperature: 1.5, beta: 0.0}\nname: m\n"
                 "diagnostics:\n  params:\n    entropy_collapse:\n      <<: {ratio: 0.2, floor: 0.01}\n      ratio: 0.3\n")
    h = load_harness(p)
    assert h.diagnostics.params["entropy_collapse"] == {"ratio": 0.3, "floor": 0.01}  # explicit key beats merged


def test_non_utf8_bytes_name_the_line_and_byte(tmp_path):
    _refused(tmp_path, b"name: ok\ngrpo: {temperature: 1.0}\ndescription: caf\xe9\n", "line 3", "0xe9", "UTF-8")


def test_deep_nesting_is_refused_before_the_recursion_limit(tmp_path):
    _refused(tmp_path, "diagnostics:\n  params:\n    x: {a: " + "[" * 20000 + "]" * 20000 + "}\n",
             f"nested deeper than {MAX_DEPTH}", "line 3")
    block = "".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5))
    _refused(tmp_path, block, f"nested deeper than {MAX_DEPTH}")
    # depth reached through a chain of aliases counts too (the constructor and pydantic would recurse it)
    chain = "x:\n" + "\n".join(["  a0: &a0 [1]"] + [f"  a{i}: &a{i} [*a{i - 1}]" for i in range(1, 100)]) + "\n"
    _refused(tmp_path, chain, "once aliases are expanded")


def test_billion_laughs_is_refused_quickly(tmp_path):
    t0 = time.perf_counter()
    _refused(tmp_path, "diagnostics:\n  params:\n    entropy_collapse:\n" + laughs(), "aliases expand", "limit",
             "line 5")
    assert time.perf_counter() - t0 < 5  # refused from the node graph, never expanded


def test_a_few_aliases_still_work(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text("diagnostics:\n  params:\n    entropy_collapse: &ec {ratio: 0.2}\n    entropy_blowup: {}\n"
                 "  gate:\n    - &g {diagnostic: nan, fail_at: critical}\n")
    assert load_harness(p).diagnostics.params["entropy_collapse"] == {"ratio": 0.2}


def test_recursive_alias_is_refused(tmp_path):
    _refused(tmp_path, "diagnostics:\n  params:\n    entropy_collapse: &a {x: *a}\n", "recursive", "line 3")
    _refused(tmp_path, "diagnostics:\n  params:\n    x: &b [1, *b]\n", "recursive")


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system ['echo pwned']", "!!python/name:os.system",
                                 "!!binary aGVsbG8=", "!custom 3", "!!set {a: null}"])
def test_object_and_application_tags_are_refused(tmp_path, tag):
    _refused(tmp_path, f"name: ok\ndescription: {tag}\n", "line 2", "is not allowed", "data only")


def test_oversized_file_is_refused_before_it_is_parsed(tmp_path):
    _refused(tmp_path, "name: big\n" + "# " + "x" * MAX_BYTES + "\n", "over the", "byte limit")


def test_values_that_cannot_be_converted_name_their_line(tmp_path):
    _refused(tmp_path, "name: x\ngrpo: {num_generations: " + "9" * 50_000 + "}\n", "line 2", "cannot read this value")
    _refused(tmp_path, "name: x\ndescription: 2026-13-45\n", "line 2", "month")


def test_control_characters_name_their_line(tmp_path):
    _refused(tmp_path, b"name: ok\ndescription: a\x00b\n", "line 2", "U+0000")


def test_campaign_specs_and_archives_use_the_same_loader(tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text("name: c\nbudget: {total_steps: 400}\nbudget: {total_steps: 40}\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: line 3, column 1: duplicate key 'budget'"):
        load_campaign_spec(spec)
    spec.write_bytes(b"name: caf\xe9\nbudget: {total_steps: 400}\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: line 1, column 10: byte 0xe9 is not UTF-8"):
        load_campaign_spec(spec)
    arch = tmp_path / "a.yaml"
    arch.write_text("runs: []\nx:\n  y:\n" + laughs(indent="    "))
    with pytest.raises(ConfigError, match=r"a\.yaml: line 5, .*aliases expand"):
        Archive.load(arch)
    arch.write_text("runs: [{path: a}]\nruns: []\n")
    with pytest.raises(ConfigError, match="duplicate key 'runs'"):
        Archive.load(arch)


def test_skill_front_matter_uses_the_same_loader(tmp_path):
    text = (REPO / "skills" / "clip-higher" / "SKILL.md").read_text()
    dup = text.replace("---\n", "---\nname: first\n", 1)
    skill, problems = check_text(dup, "clip-higher", "SKILL.md")
    assert skill is None
    assert any("line 3" in p.message and "duplicate key 'name' (first given at line 2" in p.message
               for p in problems), problems
    bomb = text.replace("---\n", "---\nx: &x [1, *x]\n", 1)
    with pytest.raises(ValueError, match="front matter: line 2, .*recursive"):
        split_front_matter(bomb)
    res = CliRunner().invoke(app, ["skills", "lint", "--library", str(_library(tmp_path, dup))])
    assert res.exit_code == 1 and "duplicate key 'name'" in res.output


def _library(tmp_path, text: str):
    lib = tmp_path / "lib"
    (lib / "clip-higher").mkdir(parents=True)
    (lib / "clip-higher" / "SKILL.md").write_text(text)
    return lib


def test_the_project_files_read_the_same_as_before():
    """Every YAML file in the repository reads exactly as yaml.safe_load read it (the loader only refuses)."""
    files = [*glob.glob(str(REPO / "harnesses" / "**" / "*.yaml"), recursive=True),
             *glob.glob(str(REPO / "campaigns" / "*.yaml")),
             *glob.glob(str(REPO / "tests" / "fixtures" / "**" / "*.yaml"), recursive=True)]
    assert len(files) >= 10
    for f in files:
        text = open(f, encoding="utf-8").read()
        assert parse_yaml(text, f) == yaml.safe_load(text), f
    for f in glob.glob(str(REPO / "skills" / "*" / "SKILL.md")):
        text = open(f, encoding="utf-8").read()
        raw = text.split("\n", 1)[1].split("\n---", 1)[0]
        assert split_front_matter(text)[0] == yaml.safe_load(raw), f


def test_alias_limit_is_about_expansion_not_file_size():
    many = "\n".join(f"k{i}: {i}" for i in range(MAX_ALIAS_NODES * 2))  # a big plain file: no alias, fine
    assert len(parse_yaml(many, "big.yaml")) == MAX_ALIAS_NODES * 2
    block = "b: &b [" + ",".join(["1"] * 200) + "]\n" + "\n".join(f"c{i}: *b" for i in range(60))
    with pytest.raises(ConfigError, match="aliases expand this document by 12,060 nodes"):  # 60 × 201
        parse_yaml(block, "aliases.yaml")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"optim: {learning_rate: 0.001}\noptim: {learning_rate: 0.1}\n", "duplicate key 'optim'"),
        (b"name: caf\xe9\n", "is not UTF-8"),
        (("diagnostics:\n  params:\n    x: " + "[" * 5000 + "]" * 5000 + "\n").encode(), "nested deeper"),
        (("diagnostics:\n  params:\n    entropy_collapse:\n" + laughs()).encode(), "aliases expand"),
    ],
)
def test_harness_validate_exits_2_naming_the_file(tmp_path, data, expected):
    p = tmp_path / "bad.yaml"
    p.write_bytes(data)
    res = CliRunner().invoke(app, ["harness", "validate", str(p)])
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.split())
    assert str(p) in flat.replace(" ", "") or str(p) in flat
    assert expected in flat
    assert "Traceback" not in res.output
