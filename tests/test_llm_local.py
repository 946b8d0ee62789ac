"""The LLM brain against a real local model: SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible server.

A 135M model is a weak tuner, so these tests assert what must hold whatever it answers: the call goes through
the real server with the compact prompt and a schema the server accepts (llama-cpp-python takes JSON mode with
a schema, refusing OpenAI's json_schema form with HTTP 500), the grammar-constrained reply parses, and every
outcome -- a valid proposal or the heuristic's, with the reason -- is recorded honestly. The scripted server
(tests/llm_server.py) keeps the adversarial cases. ``make test`` installs llama-cpp-python[server] (``make
llm-server``) and sets EVOTRAINER_REQUIRE_LLAMA=1, so these fail instead of skipping there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from llama_server import LlamaServer, available
from test_llm_brain import StubHeuristic, ctx  # noqa: F401 - the shared brain context fixture

from evotrainer.agent.brains.llm import LLMBrain, LLMSettings

if not available():
    if os.environ.get("EVOTRAINER_REQUIRE_LLAMA") == "1":
        raise RuntimeError("llama-cpp-python[server] is not installed: make llm-server installs it")
    pytest.skip("llama-cpp-python[server] is not installed (make llm-server installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def server():
    with LlamaServer() as srv:
        yield srv


def _settings(srv: LlamaServer, **kw) -> LLMSettings:
    return LLMSettings(**{"base_url": srv.base_url, "model": srv.model, "prompt": "compact", "timeout_s": 300,
                          "max_tokens": 300, "max_retries": 0, "temperature": 0.0, **kw})


def test_propose_through_the_real_server_with_a_schema(server, ctx):  # noqa: F811
    brain = LLMBrain(_settings(server), fallback=StubHeuristic())
    res = brain.propose(ctx)
    notes = "\n".join(res.notes)
    assert "cannot reach" not in notes and "attempt 1: server answered" not in notes
    assert brain.format == "json_object_schema"  # OpenAI's json_schema refused once, then llama.cpp's own form
    assert "rejected response_format json_schema (HTTP 500)" in notes
    assert "not valid JSON" not in notes  # the grammar made the reply parse
    if res.brain == "llm":
        assert res.drafts and all(ctx.harness.with_knob(d.knob, d.value) for d in res.drafts)
    else:  # an honest fallback: the reason is recorded, the heuristic answered
        assert res.brain == "llm→heuristic" and "dropped" in notes and "fell back to the heuristic brain" in notes
    assert res.tokens > 0


def test_an_unusable_small_model_reply_falls_back_and_says_why(server, ctx):  # noqa: F811
    """Unconstrained and cut at 24 tokens, the reply cannot be a whole proposal: the heuristic answers."""
    brain = LLMBrain(_settings(server, structured_output="none", max_tokens=24), fallback=StubHeuristic())
    res = brain.propose(ctx)
    notes = "\n".join(res.notes)
    assert res.brain == "llm→heuristic" and [d.knob for d in res.drafts] == ["grpo.beta"]
    assert "attempt 1:" in notes and "fell back to the heuristic brain: attempt 1: no valid proposal" in notes


def test_a_campaign_round_with_the_local_llm_brain(server, tmp_path):
    from test_campaign import _spec

    from evotrainer.agent.campaign import start_campaign
    from evotrainer.store import Store

    llm = {"base_url": server.base_url, "model": server.model, "prompt": "compact", "timeout_s": 300,
           "max_tokens": 300, "max_retries": 0}
    spec = _spec(tmp_path, backtest={"max_proposals": 1}, budget={"total_steps": 10},
                 brain={"kind": "llm", "llm": llm})
    home = tmp_path / "home"
    cid = start_campaign(spec, home, log=lambda _m: None, max_rounds=1)
    store = Store.for_home(home)
    proposals = store.list_proposals(cid, round=0)
    assert proposals, "the round proposed nothing"
    # the real path is the point: a dead or crashed server would still pass with the heuristic's proposals
    assert any(p.brain == "llm" for p in proposals), [(p.brain, p.knob) for p in proposals]
    for p in proposals:  # whoever proposed it, it is a valid single-knob change that the round decided on
        assert p.old != p.new


def test_the_installed_llama_cpp_build_is_portable():
    """The CPU backend holds no AVX-512 or AMX instruction (the Makefile's LLAMA_CMAKE_ARGS): a native build for a host
    that advertises them faults on machines of this kind (a general protection fault on the first completion)."""
    import llama_cpp

    objdump = shutil.which("objdump")
    assert objdump, "objdump (binutils) is needed to read the build's instructions"
    libs = sorted((Path(llama_cpp.__file__).parent / "lib").glob("libggml-cpu.so*"))
    assert libs, "llama_cpp ships no libggml-cpu.so"
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(libs[0])], capture_output=True, text=True,
                          check=True).stdout
    assert "ymm" in text  # AVX2 is there (the build is not a bare SSE one)
    for register in ("zmm", "%tmm", "tileloadd"):
        assert register not in text, f"{libs[0].name} uses {register}: a native, non-portable build"


def test_the_setup_check_answers_one_real_completion(capsys):
    """``make llm-server``'s last step (``tests/llama_server.py --check``) on the installed build: a real completion."""
    from llama_server import check

    assert check("") == 0
    assert "one chat completion answered" in capsys.readouterr().out
