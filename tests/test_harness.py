"""The harness spec: loading, hashing, diffing, single-knob changes, and errors that say what to do."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from evotrainer.cli import app
from evotrainer.config.harness import HarnessSpec, diff, knob_docs, load_harness
from evotrainer.core.errors import ConfigError
from tests.conftest import BASELINE


def _write(tmp_path, text, name="h.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_baseline_loads_and_spells_out_every_knob():
    h = load_harness(BASELINE)
    assert h.name == "grpo-baseline"
    # The reference recipe lists every knob explicitly: its file and the defaults agree knob for knob.
    import yaml

    from evotrainer.config.harness import _flatten

    raw = yaml.safe_load(BASELINE.read_text())
    listed = set(_flatten({k: v for k, v in raw.items() if k not in ("name", "description")}))
    assert listed == set(h.knobs())


def test_version_is_content_hash_ignoring_metadata(tmp_path):
    a = load_harness(_write(tmp_path, "name: a\ngrpo: {epsilon: 0.2}\n", "a.yaml"))
    b = load_harness(_write(tmp_path, "name: b\ndescription: other words\n", "b.yaml"))
    c = load_harness(_write(tmp_path, "grpo: {epsilon: 0.25}\n", "c.yaml"))
    assert a.version == b.version  # same recipe, different metadata
    assert a.version != c.version
    assert len(a.version) == 12


def test_diff_lists_exactly_the_changed_knobs(tmp_path):
    a = load_harness(_write(tmp_path, "grpo: {epsilon: 0.2}\n", "a.yaml"))
    b = load_harness(_write(tmp_path, "grpo: {epsilon_high: 0.28}\nreward: {overlong: {weight: 1.0}}\n", "b.yaml"))
    changes = {c.path: (c.old, c.new) for c in diff(a, b)}
    assert changes == {"grpo.epsilon_high": (None, 0.28), "reward.overlong.weight": (0.0, 1.0)}
    assert diff(a, a) == []


def test_with_knob_changes_one_thing_and_validates():
    h = HarnessSpec()
    h2 = h.with_knob("grpo.epsilon_high", 0.28)
    assert [c.path for c in diff(h, h2)] == ["grpo.epsilon_high"]
    with pytest.raises(ConfigError, match="unknown knob 'grpo.nope'"):
        h.with_knob("grpo.nope", 1)
    with pytest.raises(ConfigError, match="epsilon_high"):
        h.with_knob("grpo.epsilon_high", 0.1)  # below epsilon=0.2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("grpo: {epsilonn: 0.2}\n", ["grpo.epsilonn", "unknown key", "epsilon_high"]),
        ("grpo: {num_generations: many}\n", ["grpo.num_generations", "'many'", "integer"]),
        ("grpo: {temperature: 9.0}\n", ["grpo.temperature", "less than or equal to 4", "9.0"]),
        ("optim: {learning_rate: -1}\n", ["optim.learning_rate", "greater than 0"]),
        ("grpo: {loss_type: ppo}\n", ["grpo.loss_type", "'dapo'", "'ppo'"]),
        ("grpo: {epsilon: 0.3, epsilon_high: 0.2}\n", ["epsilon_high=0.2 is below epsilon=0.3"]),
        ("grpo: {sync_ref_model: true}\n", ["beta > 0"]),
        ("grpo: {max_completion_length: 4}\nreward: {overlong: {weight: 1, buffer: 4}}\n", ["buffer=4", "smaller"]),
        ("data: {difficulty: [3, 1]}\n", ["min > max"]),
        ("reward: {correctness: {weight: 0}, format: {weight: 0}}\n", ["no positive term"]),
        ("- just\n- a list\n", ["YAML mapping"]),
        ("grpo: {epsilon: [unclosed\n", ["not valid YAML", "line"]),
    ],
)
def test_invalid_files_name_file_field_value_and_what_is_allowed(tmp_path, text, expected):
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_harness(p)
    msg = str(info.value)
    assert str(p) in msg
    for piece in expected:
        assert piece in msg, (piece, msg)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_harness(tmp_path / "nope.yaml")


def test_every_knob_is_documented_with_default_and_bounds():
    rows = knob_docs()
    assert len(rows) >= 35
    for r in rows:
        assert len(r["description"]) >= 15, r["knob"]
        if r["type"] in ("int", "float"):
            assert r["bounds"], f"{r['knob']} has no bounds"
    names = {r["knob"] for r in rows}
    for required in [
        "optim.learning_rate", "grpo.prompts_per_step", "grpo.num_generations", "grpo.temperature", "grpo.top_p",
        "grpo.max_completion_length", "grpo.loss_type", "grpo.epsilon", "grpo.epsilon_high", "grpo.beta",
        "grpo.scale_rewards", "grpo.num_iterations", "grpo.mask_truncated_completions", "grpo.top_entropy_quantile",
        "grpo.entropy_coef", "reward.correctness.weight", "reward.format.weight", "reward.overlong.buffer",
        "reward.overlong.weight", "reward.repetition.weight", "data.difficulty", "data.drop_all_correct",
        "data.drop_all_wrong", "data.sampling",
    ]:
        assert required in names


def test_cli_validate_and_diff(tmp_path):
    runner = CliRunner()
    bad = _write(tmp_path, "grpo: {top_p: 2}\n", "bad.yaml")
    res = runner.invoke(app, ["harness", "validate", str(bad)])
    assert res.exit_code == 2
    assert "grpo.top_p" in res.output and "bad.yaml" in res.output
    ok = runner.invoke(app, ["harness", "validate", str(BASELINE), "--json"])
    assert ok.exit_code == 0, ok.output
    import json

    assert json.loads(ok.stdout)["harnesses"][0]["version"] == load_harness(BASELINE).version
    other = _write(tmp_path, "grpo: {beta: 0.01}\n", "other.yaml")
    d = runner.invoke(app, ["harness", "diff", str(BASELINE), str(other), "--json"])
    paths = [c["path"] for c in json.loads(d.stdout)["changes"]]
    assert "grpo.beta" in paths


def test_a_job_spec_carries_the_harness_itself_across_a_json_boundary(tmp_path):
    """A campaign hands a job the recipe it decided on (no file written and read back); the harness survives the
    launcher's JSON, and so does where its user files resolve (source_dir is not part of the harness's dump)."""
    from pydantic import ValidationError

    from evotrainer.config.job import JobSpec

    changed = load_harness(BASELINE).with_knob("optim.learning_rate", 1e-3)
    job = JobSpec.model_validate_json(JobSpec(harness=changed, steps=3).model_dump_json())
    got = job.resolved_harness()
    assert isinstance(job.harness, HarnessSpec) and got.version == changed.version != load_harness(BASELINE).version
    assert got.optim.learning_rate == 1e-3 and got.source_dir == str(BASELINE.resolve().parent)
    assert job.harness_label == f"harness 'grpo-baseline' ({changed.version})" and job.harness_stem == "grpo-baseline"
    by_path = JobSpec(harness=str(BASELINE))
    assert by_path.resolved_harness().version == load_harness(BASELINE).version and by_path.harness_stem == "grpo-baseline"
    with pytest.raises(ValidationError, match="learning_rate"):
        JobSpec.model_validate({"harness": {"optim": {"learning_rate": -1}}})
