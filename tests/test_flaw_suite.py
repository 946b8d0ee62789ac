"""The flaw suite (bench/flaws.yaml) as pre-registered, and its arms run for real at a tiny scale: the static recipe,
Ray Tune's PopulationBasedTraining and Optuna's search-then-continue, each from one warm start at equal steps."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

from flaw_arms import ArmConfig, TaskRef, apply_point, clip_point, run_static, search_space  # noqa: E402
from flaw_suite import FAMILIES, load_suite  # noqa: E402

from evotrainer.config.harness import HarnessSpec, load_harness  # noqa: E402
from evotrainer.config.ranges import NORMAL  # noqa: E402
from evotrainer.tasks import get_task  # noqa: E402


def test_the_suite_is_what_the_issue_asks_for():
    """At least 10 single-knob flaws and two double ones over every family; a third or more subtle; each on two
    tasks or more; evaluation seeds named and apart from the development seeds; every flawed recipe valid."""
    suite = load_suite()
    singles = [f for f in suite.flaws if f.family != "double"]
    assert len(singles) >= 10 and sum(f.family == "double" for f in suite.flaws) >= 2
    assert {f.family for f in suite.flaws} == set(FAMILIES)
    assert sum(f.subtle for f in suite.flaws) * 3 >= len(suite.flaws)
    assert all(len(f.tasks) >= 2 for f in suite.flaws)
    assert {"arith", "countdown"} <= set(suite.tasks) and any(
        e.ref()[0] == "reasoning_gym" for e in suite.tasks.values())
    evals = [s for e in suite.evaluations for s in e.all_seeds]
    assert evals and len(set(evals)) == len(evals) and not set(evals) & set(suite.dev_seeds)
    lr = [f.values("arith")["optim.learning_rate"] for f in singles
          if list(f.knobs) == ["optim.learning_rate"] and "arith" in f.tasks]
    tuned = load_harness(REPO / "harnesses" / "grpo-baseline.yaml").optim.learning_rate
    assert any(v > tuned for v in lr) and any(tuned / 10 <= v < tuned for v in lr)  # too high, and 3-10x too low


def test_a_flaw_is_subtle_exactly_when_its_value_lies_in_the_knobs_normal_range():
    """``subtle`` is not a label chosen by hand: it says the value is inside what practitioners run
    (evotrainer/config/ranges.py), the same ranges `evotrainer harness knobs` prints and the recipe diagnostic reads."""
    suite = load_suite()
    for f in suite.flaws:
        for task in f.tasks:
            inside = [NORMAL[k].contains(v) for k, v in f.values(task).items() if k in NORMAL]
            if inside:
                assert all(inside) == f.subtle, (f.id, task, f.values(task))
    baseline = HarnessSpec.model_validate(suite.tuned_doc("arith")).knobs()
    assert all(r.contains(baseline[k]) for k, r in NORMAL.items() if k in baseline), "the tuned recipe is normal"


def test_every_flawed_recipe_is_a_valid_harness_whose_jobs_have_valid_names(tmp_path):
    """Each (flaw, task) writes a harness the project accepts, and the arms' job names built from its file's stem
    (a double flaw's '+' included) are valid run names: a bench never fails at a cell it reaches hours later."""
    from evotrainer.core.names import check_name

    suite = load_suite()
    for f in [*suite.flaws, suite.demo]:
        for task in f.tasks:
            path = suite.harness(task, f.id, tmp_path)
            check_name(f"static-{path.stem}-s101-b{suite.budget}", "run name")
    for task in suite.tasks:
        check_name(f"static-{suite.harness(task, None, tmp_path).stem}-s0-b{suite.budget}", "run name")


def test_the_search_space_is_the_campaigns_knobs_over_their_normal_ranges():
    suite = load_suite()
    start = HarnessSpec.model_validate(suite.tuned_doc("arith"))
    space = search_space(start, get_task("arith"))
    assert {"optim.learning_rate", "grpo.temperature", "grpo.num_generations", "grpo.beta", "data.pool_size",
            "reward.format.weight"} <= set(space)
    # a knob a skill can move only from where a flaw put it (weight decay back to 0): in the space of that start
    assert "optim.weight_decay" not in space
    assert "optim.weight_decay" in search_space(start.with_knob("optim.weight_decay", 0.5), get_task("arith"))
    assert "env.leak_tool" not in space and "grpo.epsilon" not in space  # a trap, and a knob inert on-policy
    assert space["optim.learning_rate"] == ("log", 1e-6, 1e-3) and space["data.pool_size"][0] == "logint"
    point = clip_point({"grpo__temperature": 3.0, "grpo__num_generations": 2.6, "data__pool_size": 600.4}, space)
    assert point == {"grpo__temperature": 1.2, "grpo__num_generations": 4, "data__pool_size": 600}
    h = apply_point(start, {"grpo.beta": 0.05, "grpo.sync_ref_model": "true", "grpo.scale_rewards": '"none"'}, space)
    assert (h.grpo.beta, h.grpo.sync_ref_model, h.grpo.scale_rewards) == (0.05, True, "none")


TINY = {"size": "nano", "sft_steps": 150, "sft_batch_size": 64, "warm_start_difficulty": [1, 1]}


@pytest.fixture()
def tiny(tmp_path):
    doc = load_suite().tuned_doc("arith")
    doc["grpo"].update(prompts_per_step=4, num_generations=4, max_completion_length=3)
    doc["data"]["difficulty"] = [1, 1]
    path = tmp_path / "tiny.yaml"
    import yaml

    path.write_text(yaml.safe_dump(doc))
    return path, ArmConfig(budget=16, eval_n=16, wide=0, segment=2, policy=TINY)


@pytest.mark.slow
def test_the_static_arm_trains_the_whole_budget_and_is_scored(tiny, tmp_path):
    path, cfg = tiny
    row = run_static(TaskRef("arith"), path, 0, cfg, tmp_path)
    assert row["steps"] == 16 and 0 <= row["accuracy"] <= 1 and row["compute"]["completions"] == 16 * 4 * 4


@pytest.mark.slow
def test_optuna_searches_then_continues_the_best_trial_at_equal_steps(tiny, tmp_path):
    from flaw_search import run_optuna

    path, cfg = tiny
    row = run_optuna(TaskRef("arith"), path, 0, cfg, tmp_path, trial_steps=6, rung=2)
    assert row["steps"] == 16 and row["search_steps"] == 8 and row["trials"] >= 2
    assert (tmp_path / "jobs" / f"optuna-{path.stem}-s0-b16-continue").is_dir()
    # run again (as after a kill): the study's trials and the jobs are found, nothing more is trained
    again = run_optuna(TaskRef("arith"), path, 0, cfg, tmp_path, trial_steps=6, rung=2)
    assert {k: again[k] for k in ("steps", "trials", "best_params", "accuracy")} == {
        k: row[k] for k in ("steps", "trials", "best_params", "accuracy")}


@pytest.mark.slow
@pytest.mark.ray
def test_pbt_runs_a_population_that_exploits_checkpoints_at_equal_steps(tiny, tmp_path):
    """Ray Tune's real PopulationBasedTraining: 4 members of 4 steps each (16 in all), two perturbation rounds of 2
    steps; every member's jobs fork from the previous checkpoint, a member's or the one it exploited."""
    from flaw_search import run_pbt

    path, cfg = tiny
    row = run_pbt(TaskRef("arith"), path, 0, cfg, tmp_path)
    assert row["population"] == 4 and row["steps_per_member"] == 4 and row["steps"] == 16
    assert 0 <= row["accuracy"] <= 1 and row["best_point"]


def test_the_campaign_arm_is_one_spec_for_every_flaw_and_its_rules_switch_off_one_by_one(tmp_path):
    """The suite's campaign: the same settings whatever the flaw or task; each rule the ablations question switches off
    through its own spec field, all of them at once for the plain campaign, and every such spec is valid."""
    import yaml
    from flaw_arms import RULES, campaign_spec

    from evotrainer.config.campaign import CampaignSpec

    cfg = ArmConfig(budget=400, eval_n=500, wide=3000)
    h = tmp_path / "h.yaml"
    h.write_text("name: h\n")
    default = CampaignSpec.model_validate(campaign_spec(TaskRef("arith"), h, 0, cfg))
    assert default.backtest.stuck_share and default.backtest.bracket and default.budget.healthy_explore_share
    plain = CampaignSpec.model_validate(campaign_spec(TaskRef("countdown"), h, 0, cfg, tuple(RULES)))
    assert plain.name == "flaws-h-s0-off-plain-estimate-finalchecks"
    long = tmp_path / "flaws-countdown-lr-low-3x-and-temp-low.yaml"  # the suite's longest harness name
    long.write_text("name: h\n")
    assert len(campaign_spec(TaskRef("countdown"), long, 105, cfg, tuple(RULES))["name"]) <= 100
    b = plain.backtest
    assert (b.stuck_share, b.bracket) == (None, False)
    assert default.backtest.spent_estimate and not b.spent_estimate
    assert default.budget.final_checks == 4 and plain.budget.final_checks == 1
    assert plain.budget.healthy_explore_share is None
    for rule in RULES:  # one at a time
        doc = campaign_spec(TaskRef("arith"), h, 0, cfg, (rule,))
        CampaignSpec.model_validate(yaml.safe_load(yaml.safe_dump(doc)))
    # a development experiment sets one default over the suite's, and its campaign is named apart
    tried = CampaignSpec.model_validate(campaign_spec(TaskRef("arith"), h, 0, cfg, (),
                                                      {"budget": {"healthy_explore_share": 0.125}}))
    assert tried.budget.healthy_explore_share == 0.125 and tried.budget.total_steps == 400
    assert tried.name == "flaws-h-s0-set-healthyexploreshare0p125" != default.name


def _row(flaw, task, seed, arm, acc, **extra):
    return {"flaw": flaw, "task": task, "seed": seed, "arm": arm, "budget": 400, "off": [], "accuracy_wide": acc,
            "steps": 400, "compute": {"completions": 100, "eval_problems": 10}, **extra}


def test_the_targets_are_judged_from_the_rows_by_the_rules_written_before_the_evaluation_seeds():
    """Issue 59's §2 from rows: the median recovered share and each cell's campaign − flawed interval, campaign − PBT /
    Optuna paired by (cell, seed) and cell by cell, round 0 naming the expected symptom, the tuned recipe's floor and
    gain; and 'not all run' (None) until every live cell has its rows."""
    from flaw_targets import diagnosis_of, targets

    suite = load_suite()
    live = {("short-budget", "arith"), ("lr-high", "countdown")}
    found = [{"symptom": "truncation", "severity": "critical"}, {"symptom": "plateau", "severity": "info"}]
    adopted = [{"knob": "grpo.max_completion_length", "old": 3, "new": 6, "outcome": "promote", "symptom": "truncation",
                "skills": ["longer-completions"]}]
    rows = []
    for i, s in enumerate((101, 102, 103)):
        rows += [_row("tuned", "arith", s, "tuned", 0.45 + i / 100), _row("tuned", "countdown", s, "tuned", 0.24),
                 _row("short-budget", "arith", s, "static", 0.15 + i / 200),
                 _row("short-budget", "arith", s, "campaign", 0.44 + i / 100, round0_findings=found, decisions=adopted),
                 _row("short-budget", "arith", s, "pbt", 0.40), _row("short-budget", "arith", s, "optuna", 0.41 + i / 50),
                 _row("lr-high", "countdown", s, "static", 0.0),
                 _row("lr-high", "countdown", s, "pbt", 0.20 + i / 100), _row("lr-high", "countdown", s, "optuna", 0.21)]
    partial = targets(suite, rows, live, [101, 102, 103])
    assert partial["recovery"]["met"] is None and partial["competition"]["pbt"]["met"] is None
    rows += [_row("lr-high", "countdown", s, "campaign", 0.235 + i / 200, round0_findings=[], decisions=[])
             for i, s in enumerate((101, 102, 103))]
    t = targets(suite, rows, live, [101, 102, 103])
    sb = t["cells"]["short-budget/arith"]
    assert sb["recovered_share"] == pytest.approx((0.45 - 0.155) / (0.46 - 0.155), abs=1e-3)
    assert t["recovery"]["met"] is True and t["recovery"]["interval_above_0"] == {
        "lr-high/countdown": True, "short-budget/arith": True}
    assert t["competition"]["pbt"]["met"] is True and t["competition"]["pbt"]["cells_ahead"] == "2/2"
    assert t["competition"]["optuna"]["cells_ahead"] == "2/2"
    assert t["diagnosis"] == {"cells": 2, "runs": 6, "named_expected": 0.5, "adopted_remedy_citing_finding": 0.5,
                              "met": False}
    assert t["from_tuned"]["met"] is None  # no campaign from the tuned recipe has run
    assert t["compute"]["campaign"]["runs"] == 6
    # a plateau finding at info names the plateau; a promoted change of another knob, or of the flawed knob the
    # wrong way, is no remedy; one cited for a symptom that is not the expected one does not cite the finding
    f = suite.flaw("lr-low-3x")
    d = diagnosis_of(f, {"round0_findings": found, "decisions": [{**adopted[0], "symptom": "dead_groups"}]})
    assert d["named_expected"] and not d["adopted_remedy"]
    lower = {"knob": "optim.learning_rate", "old": 1e-4, "new": 5e-5, "outcome": "promote", "symptom": "plateau"}
    assert not diagnosis_of(f, {"round0_findings": found, "decisions": [lower]}, {"optim.learning_rate": 3e-4})[
        "adopted_remedy"]
    raise_ = {**lower, "new": 9e-4}
    d = diagnosis_of(f, {"round0_findings": found, "decisions": [raise_]}, {"optim.learning_rate": 3e-4})
    assert d["adopted_remedy"] and d["remedy_cites_finding"]
    d = diagnosis_of(suite.flaw("short-budget"), {"round0_findings": found + [{"symptom": "unusual_recipe",
                                                                               "severity": "warning"}],
                                                  "decisions": [{**adopted[0], "symptom": "unusual_recipe"}]})
    assert d["adopted_remedy"] and not d["remedy_cites_finding"]
    # one seed missing in a cell: no verdict, whatever the rest says
    assert targets(suite, [r for r in rows if not (r["seed"] == 103 and r["arm"] == "pbt")], live,
                   [101, 102, 103])["competition"]["pbt"]["met"] is None
    rows += [_row("tuned", t_, s, arm, acc) for s in (101, 102, 103) for t_, arm, acc in (
        ("arith", "campaign", 0.481), ("countdown", "campaign", 0.235), ("rg-sums", "tuned", 0.3),
        ("rg-sums", "campaign", 0.3))]
    ft = targets(suite, rows, live, [101, 102, 103])["from_tuned"]
    assert ft["tasks"]["arith"]["campaign_minus_static"] == pytest.approx(0.021, abs=1e-4)
    assert ft["met"] is True  # countdown −0.5 points is inside the floor of −1, arith +2.1 the gain (+2 exactly, in floating point, may fall short)


def test_rows_from_different_warm_starts_of_one_seed_are_kept_apart_and_one_set_is_compared(tmp_path):
    """A warm start rebuilt on another kind of CPU trains to other weights: a row records the fingerprint of the
    weights it started from, each warm start's rows of a task and seed are kept, and the report compares one set (the
    largest; of sets as large, the one finished first) and says what it held aside, never mixing two."""
    from flaws import base_fingerprint, comparable, summary

    a, b = tmp_path / "a", tmp_path / "b"
    for d, w in ((a, b"\x00" * 64), (b, b"\x01" * 64)):
        d.mkdir()
        (d / "model.safetensors").write_bytes(w)
        (d / "config.json").write_text("{}")
    assert base_fingerprint(a) == base_fingerprint(a) and base_fingerprint(a) != base_fingerprint(b)
    (a / "config.json").write_text('{"other": 1}')  # only the weights count
    assert base_fingerprint(a) == base_fingerprint(a)
    fa, fb = base_fingerprint(a), base_fingerprint(b)
    same = [_row("lr-high", "arith", 0, "static", 0.3, base=fa),
            _row("lr-high", "arith", 0, "campaign", 0.4, base=fa),
            _row("lr-high", "arith", 1, "static", 0.3, base=fb),
            _row("lr-high", "arith", 1, "pbt", 0.3)]  # a row from before the fingerprint: always compared
    assert comparable(same) == (same, [])
    other = _row("lr-high", "arith", 0, "static", 0.9, base=fb, cpu="AMD EPYC (AVX512)")
    kept, held = comparable([*same, other])
    assert kept == same and held == [other]  # the smaller set is held aside, whatever its accuracy
    s = summary(load_suite(), [*same, other])
    assert s["held_aside"] == {"arith/0": [{"base": fb, "cpu": "AMD EPYC (AVX512)", "rows": 1}]}
    # of two sets as large, the one whose last row came first counts
    tie = [same[0], other, same[1], _row("lr-high", "arith", 0, "campaign", 0.1, base=fb)]
    assert [r["base"] for r in comparable(tie)[0]] == [fa, fa]


def test_the_live_cells_are_the_recorded_ones_once_set_and_the_rows_liveness_is_printed_beside_them():
    """The evaluation seeds are judged on the cells chosen before they ran: once ``live`` is recorded in the suite,
    rows that would make other cells live (re-run development rows) change the printed ``live_by_rows`` only."""
    from flaws import live_by_rows, live_cells, summary

    suite = load_suite()
    assert live_cells(suite, []) == {tuple(c.split("/")) for c in suite.live}
    rows = [_row("tuned", "arith", s, "tuned", 0.5) for s in (0, 1, 2)]
    rows += [_row("temp-low", "arith", s, "static", 0.3) for s in (0, 1, 2)]
    rows += [_row("lr-high", "arith", s, "static", 0.48) for s in (0, 1, 2)]
    assert live_by_rows(suite, rows) == {("temp-low", "arith")}
    assert ("temp-low", "arith") not in live_cells(suite, rows) and ("lr-high", "arith") in live_cells(suite, rows)
    out = summary(suite, rows)
    assert out["live_by_rows"] == ["temp-low/arith"] and "lr-high/arith" in out["live"]
    unset = suite.model_copy(update={"live": None})
    assert live_cells(unset, rows) == {("temp-low", "arith")}
    with pytest.raises(ValueError, match="'nope/arith'.*not cells of the suite"):
        type(suite).model_validate({**suite.model_dump(), "live": ["nope/arith"]})
    with pytest.raises(ValueError, match="never live"):
        type(suite).model_validate({**suite.model_dump(), "live": [f"{suite.demo.id}/arith"]})


def test_each_evaluation_round_has_fresh_seeds_its_own_frozen_commit_and_its_own_verdict():
    """A round's seeds are named before they run and shared with no other round and no development run; only the last
    round may wait for its frozen commit (a full commit id), and none of its seeds runs before it is set; the report
    judges each round apart, so a campaign changed after one round is never pooled with it."""
    from flaw_suite import Evaluation
    from flaws import summary

    suite = load_suite()
    first, latest = suite.evaluations[0], suite.evaluations[-1]
    assert suite.seeds("eval") == latest.seeds and suite.seeds("eval+") == latest.all_seeds
    assert suite.seeds(f"eval:{first.name}") == first.seeds and suite.seeds(f"eval+:{first.name}") == first.all_seeds
    assert suite.seeds("4,5") == [4, 5]
    with pytest.raises(SystemExit, match="no evaluation round 'nope'"):
        suite.seeds("eval:nope")
    doc = suite.model_dump()
    bad = [{**doc["evaluations"][0]}, {"name": "again", "seeds": [first.seeds[0], 999]}]
    with pytest.raises(ValueError, match=f"again: seed {first.seeds[0]} is already a seed of evaluation round {first.name}"):
        type(suite).model_validate({**doc, "evaluations": bad})
    with pytest.raises(ValueError, match="seed 0 is already a development seed"):
        type(suite).model_validate({**doc, "evaluations": [{"name": "x", "seeds": [0]}]})
    with pytest.raises(ValueError, match="only the last round may be without a frozen_commit"):
        type(suite).model_validate({**doc, "evaluations": [{"name": "x", "seeds": [998]}, {"name": "y", "seeds": [999]}]})
    with pytest.raises(ValueError, match="frozen_commit"):  # a name that moves is no freeze
        Evaluation(name="x", seeds=[998], frozen_commit="HEAD")
    head = _git("rev-parse", "HEAD")
    two = suite.model_copy(update={"evaluations": [Evaluation(name="a", seeds=[998], extension=[997], frozen_commit=head),
                                                   Evaluation(name="b", seeds=[999], frozen_commit=head)]})
    cell = ("short-budget", "arith")
    rows = [_row("tuned", "arith", s, "tuned", 0.5) for s in (998, 999)]
    rows += [_row(*cell, s, arm, acc) for s, arm, acc in (
        (998, "static", 0.1), (998, "campaign", 0.45), (998, "pbt", 0.4), (998, "optuna", 0.4),
        (999, "static", 0.2), (999, "campaign", 0.25), (999, "pbt", 0.3), (999, "optuna", 0.3))]
    out = summary(two, rows)
    assert out["eval-a"]["short-budget/arith"]["campaign"]["mean"] == pytest.approx(0.45)
    assert out["eval-b"]["short-budget/arith"]["campaign"]["mean"] == pytest.approx(0.25)
    assert "eval" not in out and {"eval-a_targets", "eval-b_targets", "dev_targets"} <= set(out)
    # round a's extension seed 997 is required only once it has rows
    assert out["eval-a_targets"]["cells"]["short-budget/arith"]["complete"] is True
    out = summary(two, [*rows, _row(*cell, 997, "static", 0.1)])
    assert out["eval-a_targets"]["cells"]["short-budget/arith"]["complete"] is False


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def test_a_rounds_seeds_run_only_from_its_frozen_commit_and_are_spent_once_the_code_changed():
    """The freeze is checked against git: an unfrozen round's seeds are refused, a round frozen at a commit whose
    campaign code differs from HEAD's is spent (and the message says which round to run instead), a round frozen at
    HEAD runs, and a commit missing from the clone is refused rather than waved through."""
    from flaw_suite import FROZEN_PATHS, Evaluation, frozen_check

    suite = load_suite()
    head = _git("rev-parse", "HEAD")
    touched = _git("log", "-1", "--format=%H", "--", "evotrainer")
    try:
        before = _git("rev-parse", f"{touched}^")
    except subprocess.CalledProcessError:
        pytest.skip("a shallow clone: the commit before the campaign's last change is not here")
    assert _git("diff", "--name-only", before, "HEAD", "--", *FROZEN_PATHS)
    rounds = suite.model_copy(update={"evaluations": [Evaluation(name="old", seeds=[997], frozen_commit=before),
                                                      Evaluation(name="now", seeds=[998], frozen_commit=head),
                                                      Evaluation(name="next", seeds=[999])]})
    with pytest.raises(SystemExit, match=r"round old's frozen commit .*spent.*run the latest round instead \(next"):
        frozen_check(rounds, REPO, [997])
    frozen_check(rounds, REPO, [998, 0])  # frozen at HEAD; development seeds need no freeze
    with pytest.raises(SystemExit, match="round next's seeds run only from a frozen commit"):
        frozen_check(rounds, REPO, [998, 999])
    gone = rounds.model_copy(update={"evaluations": [Evaluation(name="x", seeds=[997], frozen_commit="0" * 40)]})
    with pytest.raises(SystemExit, match="not in this clone's history"):
        frozen_check(gone, REPO, [997])
    last = rounds.model_copy(update={"evaluations": rounds.evaluations[:1]})
    with pytest.raises(SystemExit, match="spent.*name a new round"):
        frozen_check(last, REPO, [997])
