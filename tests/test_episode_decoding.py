"""The multi-turn decoder (``evotrainer.training.episodes._Turns``): a cache kept between turns, rows leaving the batch as
they end their turn, holes between rows of different lengths — and still each row's own greedy continuation.

The reference is the plainest decoder there is: the whole sequence read again for every token, one row at a time,
no cache, no padding. A real (tiny, random) Llama plays both, with rows whose prompts, observations and budgets
all differ, so that every row shares its batch with rows longer and shorter than itself at every turn.
"""

from __future__ import annotations

import torch

from evotrainer.training.episodes import _Turns
from evotrainer.training.policy import build_model, build_tokenizer


def _reference(model, seq: list[int], budget: int, eos: int) -> list[int]:
    out: list[int] = []
    with torch.no_grad():
        while len(out) < budget:
            logits = model(input_ids=torch.tensor([seq + out])).logits[0, -1]
            out.append(int(logits.argmax()))
            if out[-1] == eos:
                break
    return out


def test_turns_decode_each_row_as_a_whole_sequence_would_across_turns():
    tok = build_tokenizer()
    model = build_model("nano", tok, seed=3).eval()
    eos, pad = tok.eos_token_id, tok.pad_token_id
    g = torch.Generator().manual_seed(0)
    vocab = [t for t in range(len(tok)) if t not in (eos, pad)]

    def text(n: int) -> list[int]:
        return [vocab[int(i)] for i in torch.randint(len(vocab), (n,), generator=g)]

    rows = 17  # enough that rows which ended their turn stay in the batch (it drops them an eighth at a time)
    seqs = {i: text(3 + i % 9) for i in range(rows)}  # prompts of 3..11 tokens
    turns = _Turns(model, eos=eos, pad=pad, do_sample=False, temperature=1.0)
    feeds = dict(seqs)
    for turn in range(3):
        budgets = {i: 2 + (i * 5 + turn * 3) % 9 for i in feeds}  # 2..10 new tokens; rows share and differ
        if turn == 0:
            budgets[0] = 0  # a row with no budget left writes nothing and stays out of the batch
        got = turns.turn(feeds, budgets)
        if turn == 0:
            assert got[0] == [] and 0 not in turns.kv
        for i, new in got.items():
            if i == 0:
                continue
            want = _reference(model, seqs[i], budgets[i], eos)
            assert new == want, f"row {i} turn {turn}"
            seqs[i] += new
        feeds = {i: text(1 + (i + turn) % 4) for i in got if i != 0}  # observations of 1..4 tokens
        for i, obs in feeds.items():
            seqs[i] += obs
    # the kept caches hold each row's tokens so far, except its last sampled one (fed with its next turn)
    for i in range(1, rows):
        assert turns.kv[i][0][0].shape[1] == len(seqs[i]) - len(feeds[i]) - 1
    # a last turn keeps nothing, and decodes as the others did
    got = turns.turn(feeds, dict.fromkeys(feeds, 4), last=True)
    assert all(got[i] == _reference(model, seqs[i], 4, eos) for i in feeds)
    assert not turns.kv and not turns.unfed


def test_a_row_that_ends_its_turn_leaves_the_batch_and_the_rest_go_on():
    tok = build_tokenizer()
    model = build_model("nano", tok, seed=4).eval()
    turns = _Turns(model, eos=tok.eos_token_id, pad=tok.pad_token_id, do_sample=True, temperature=1.0)
    torch.manual_seed(0)
    got = turns.turn({0: [5, 6, 7], 1: [8, 9], 2: [10]}, {0: 1, 1: 12, 2: 6})
    assert len(got[0]) == 1 and 1 <= len(got[1]) <= 12 and 1 <= len(got[2]) <= 6
    for new in got.values():  # each stops at its EOS or its budget, whichever comes first
        assert tok.eos_token_id not in new[:-1]
    turns.drop(1)
    assert set(turns.kv) == {0, 2}
