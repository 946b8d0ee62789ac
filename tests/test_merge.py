"""Averaging the seeds of one arm (evotrainer/jobs/merge.py), on real nano GRPO jobs forked from one checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from evotrainer.config.eval import EvalSpec
from evotrainer.config.job import JobSpec
from evotrainer.config.policy import PolicySpec
from evotrainer.core.errors import ConfigError, JobBusy
from evotrainer.jobs.lineage import complete_checkpoints
from evotrainer.jobs.merge import merge_runs
from evotrainer.jobs.runner import run_job
from evotrainer.jobs.scoring import ScoreRequest, score_policies
from tests.conftest import TINY_HARNESS

NANO = PolicySpec(size="nano", sft_steps=150, sft_batch_size=64)


def _spec(harness: Path, steps: int, name: str, seed: int, save_every: int = 2) -> JobSpec:
    return JobSpec(task="arith", harness=str(harness), steps=steps, seed=seed, policy=NANO, name=name,
                   eval=EvalSpec(every=0, n=16, k=1), save_every=save_every)


@pytest.fixture(scope="module")
def seeds(shared_home, tmp_path_factory):
    """A 1-step parent and two 2-step seeds forked from it (as a backtest arm's branches are), plus one seed
    under another learning rate."""
    d = tmp_path_factory.mktemp("merge")
    h = d / "tiny.yaml"
    h.write_text(TINY_HARNESS)
    other = d / "other.yaml"
    other.write_text(TINY_HARNESS.replace("learning_rate: 0.001", "learning_rate: 0.002"))
    run_job(_spec(h, 1, "m-parent", 0, save_every=1), shared_home)
    a = run_job(_spec(h, 2, "m-seed-a", 11, save_every=1), shared_home, fork="m-parent@1")
    b = run_job(_spec(h, 2, "m-seed-b", 12, save_every=1), shared_home, fork="m-parent@1")
    c = run_job(_spec(other, 2, "m-seed-c", 13, save_every=1), shared_home, fork="m-parent@1")
    return shared_home, h, a, b, c


def test_the_average_holds_the_mean_of_the_weights_and_adam_moments_and_trains_on_as_a_fork(seeds):
    home, h, a, b, _ = seeds
    ck = merge_runs(home, "m-merged", [("m-seed-a", 3), ("m-seed-b", 3)], {"evotrainer.round": "0"})
    assert ck == complete_checkpoints(home / "jobs" / "m-merged")[3]
    wa, wb, wm = (load_file(str(Path(p) / "model.safetensors")) for p in (a.checkpoint, b.checkpoint, ck))
    assert wm.keys() == wa.keys()
    moved = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert moved, "the two seeds trained to the same weights: nothing to average"
    for k in wa:
        assert torch.allclose(wm[k], (wa[k].double() + wb[k].double()).div(2).to(wa[k].dtype), atol=1e-7), k
    oa, ob, om = (torch.load(Path(p) / "optimizer.pt", weights_only=False) for p in (a.checkpoint, b.checkpoint, ck))
    for idx, st in om["state"].items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.allclose(st[key], (oa["state"][idx][key] + ob["state"][idx][key]) / 2, atol=1e-9)
    meta = json.loads((home / "jobs" / "m-merged" / "meta.json").read_text())
    assert meta["merged_from"] == [{"run": "m-seed-a", "step": 3}, {"run": "m-seed-b", "step": 3}]
    assert (meta["status"], meta["start_step"], meta["target_step"], meta["parent_run"]) == ("finished", 3, 3, "m-seed-a")
    with pytest.raises(JobBusy, match="is finished"):  # a valid record: resuming it says what to do instead
        run_job(_spec(h, 1, "m-merged", 0), home, resume="m-merged")
    from mlflow.tracking import MlflowClient

    run = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}").get_run(meta["run_id"])
    assert run.data.tags["evotrainer.role"] == "merged" and run.data.tags["evotrainer.merged_from"] == "m-seed-a,m-seed-b"
    # made once: a second call (a campaign resumed after kill -9) returns the same checkpoint, untouched
    stamp = (Path(ck) / "model.safetensors").stat().st_mtime_ns
    assert merge_runs(home, "m-merged", [("m-seed-a", 3), ("m-seed-b", 3)]) == ck
    assert (Path(ck) / "model.safetensors").stat().st_mtime_ns == stamp
    # a fork of the average trains on from its step, like a fork of any job
    res = run_job(_spec(h, 1, "m-after", 14), home, fork="m-merged@3")
    assert res.status == "finished" and res.steps_done == 4
    assert json.loads((Path(res.run_dir) / "meta.json").read_text())["parent_run"] == "m-merged"


def test_seeds_at_different_steps_or_under_different_harnesses_are_refused_by_name(seeds):
    home, *_ = seeds
    with pytest.raises(ConfigError, match=r"different steps \(\[2, 3\]\)"):
        merge_runs(home, "m-bad-steps", [("m-seed-a", 2), ("m-seed-b", 3)])
    with pytest.raises(ConfigError, match="different harnesses"):
        merge_runs(home, "m-bad-harness", [("m-seed-a", 3), ("m-seed-c", 3)])
    with pytest.raises(ConfigError, match="no complete checkpoint at step 9"):
        merge_runs(home, "m-bad-ckpt", [("m-seed-a", 9), ("m-seed-b", 9)])
    assert not any((home / "jobs").glob("m-bad-*")) and not any((home / "jobs").glob(".creating-m-bad-*"))


def test_a_score_request_can_merge_first_and_scores_the_average_last(seeds):
    home, *_ = seeds
    out = score_policies({"task": "arith", "eval": {"n": 16, "k": 1}, "split": "selection", "policies": [],
                          "merge": {"home": str(home), "name": "m-scored", "sources": [["m-seed-a", 3], ["m-seed-b", 3]],
                                    "max_new_tokens": 6}})
    assert out["ok"], out
    assert out["merged"] == str(complete_checkpoints(home / "jobs" / "m-scored")[3])
    assert len(out["accuracies"]) == 1 and 0.0 <= out["accuracies"][0] <= 1.0
    bad = score_policies({"task": "arith", "eval": {"n": 16, "k": 1}, "policies": [],
                          "merge": {"home": str(home), "name": "m-scored-2", "sources": [["m-seed-a", 3], ["m-seed-c", 3]],
                                    "max_new_tokens": 6}})
    assert not bad["ok"] and "different harnesses" in bad["error"]


def test_two_workers_score_a_split_request_as_one_process_scores_it_whole(seeds):
    """A launcher with two workers splits a scoring request between them (the seeds, the base within two budgets, the
    merge: :func:`evotrainer.jobs.scoring.split_request`): the answer is the one the whole request gets in one
    process with the same thread count, in the request's order, the merged checkpoint last."""
    import os

    from evotrainer.jobs.launchers import LocalLauncher

    home, _, a, b, _ = seeds
    req = {"task": "arith", "eval": {"n": 16, "k": 1, "difficulty": [1, 1]}, "split": "selection", "outcomes": True,
           "policies": [[a.checkpoint, 6], [b.checkpoint, 6], [a.checkpoint, 3]],
           "merge": {"home": str(home), "name": "m-split", "sources": [["m-seed-a", 3], ["m-seed-b", 3]],
                     "max_new_tokens": 6}}
    with LocalLauncher(workers=2) as launcher:
        split = launcher.score(ScoreRequest.model_validate(req)).model_dump()
    assert split["ok"], split
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))  # each part's share of the cores
    try:
        whole = score_policies(req)  # the merge exists now: made once, the same checkpoint is scored
    finally:
        torch.set_num_threads(threads)
    assert whole["ok"], whole
    assert split["merged"] == whole["merged"] == str(complete_checkpoints(home / "jobs" / "m-split")[3])
    assert split["accuracies"] == whole["accuracies"] and split["outcomes"] == whole["outcomes"]
    assert len(split["accuracies"]) == 4 and split["n"] == 16
    assert len({tuple(o) for o in whole["outcomes"]}) > 1  # the policies answer differently: order is checked
