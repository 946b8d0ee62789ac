"""A step whose gradient is NaN/inf must not write into the weights (EvidenceCallback.on_pre_optimizer_step).

Why: under bf16 on a GPU one NaN gradient turned every weight of a SmolLM2 run into NaN and the next generation died
on a device-side assert. These tests drive the callback the way transformers' Trainer does (clip, pre-optimizer
hook, optimizer step, log) on a real torch module and optimizer.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import TrainerControl, TrainerState, TrainingArguments

from evotrainer.evidence.model import RolloutRecorder
from evotrainer.jobs.trainer import MAX_SKIPPED_UPDATES_IN_A_ROW, EvidenceCallback, NonFiniteLoss


def _callback(tmp_path):
    logged = []
    cb = EvidenceCallback(tmp_path, RolloutRecorder(tmp_path, "r"), lambda step, m: logged.append((step, m)),
                          lambda step: None, None, 0, False, 100, skip_upto=-1)
    return cb, logged


def _step(cb, model, opt, state, poison: bool):
    """One Trainer step: backward, clip, the pre-optimizer hook, the update, the log row."""
    model(torch.ones(2, 3)).sum().backward()
    if poison:
        model.weight.grad[0, 0] = float("nan")
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # a NaN norm scales every gradient to NaN
    args, control = TrainingArguments(output_dir=str(cb.run_dir), report_to="none"), TrainerControl()
    cb.on_pre_optimizer_step(args, state, control, model=model)
    opt.step()
    opt.zero_grad()
    state.global_step += 1
    cb.on_log(args, state, control, logs={"loss": 0.5, "grad_norm": float(norm)})


def test_a_non_finite_gradient_leaves_the_weights_and_the_step_is_logged_as_skipped(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    cb, _ = _callback(tmp_path)
    state = TrainerState()
    _step(cb, model, opt, state, poison=False)
    before = [p.detach().clone() for p in model.parameters()]
    moments = [opt.state[p]["exp_avg"].clone() for p in model.parameters()]
    _step(cb, model, opt, state, poison=True)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters())), "the NaN step changed a weight"
    assert all(torch.equal(m, opt.state[p]["exp_avg"]) for m, p in zip(moments, model.parameters()))
    assert cb.skipped_updates == [2]
    _step(cb, model, opt, state, poison=False)  # training goes on, and a finite step updates again
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert not all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("update_skipped") for r in rows] == [None, 1.0, None]
    assert math.isnan(rows[1]["grad_norm"])  # still evidence for the `nan` diagnostic


def test_non_finite_gradients_in_a_row_end_the_job_with_the_steps_named(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    cb, _ = _callback(tmp_path)
    state = TrainerState()
    _step(cb, model, opt, state, poison=True)
    _step(cb, model, opt, state, poison=False)  # a finite step in between resets the count
    for _ in range(MAX_SKIPPED_UPDATES_IN_A_ROW - 1):
        _step(cb, model, opt, state, poison=True)
    with pytest.raises(NonFiniteLoss, match=r"3 steps in a row \(steps 3, 4, 5\)"):
        _step(cb, model, opt, state, poison=True)
    assert all(torch.isfinite(p).all() for p in model.parameters())
