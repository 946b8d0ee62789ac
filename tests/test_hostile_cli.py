"""Hostile input at the command line: secrets never printed, bad options still one JSON document, a home that is a
file, an empty harness, a boolean for a number, an LLM endpoint that is no URL (issue 60: X1-X4, D1, D2, D7-D9).

Real processes (``python -m evotrainer.cli``) with real sockets that nothing listens on.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from evotrainer.config.campaign import LLMBrainSpec
from evotrainer.config.harness import HarnessSpec
from evotrainer.core.errors import ConfigError
from evotrainer.core.redact import mask
from tests.conftest import REPO


def _cli(args: list[str], home, env: dict[str, str] | None = None, timeout: float = 120):
    full = {**os.environ, "EVOTRAINER_HOME": str(home), "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "evotrainer.cli", *args], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=timeout)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: connections are refused


def test_mask_hides_every_form_of_credential():
    assert mask("postgresql+psycopg://u@127.0.0.1:1/x?password=SECRETQ") == "postgresql+psycopg://u@127.0.0.1:1/x?password=***"
    assert mask("host=127.0.0.1 port=1 password=SECRETPW dbname=x") == "host=127.0.0.1 port=1 password=*** dbname=x"
    assert mask("host=h password='a b c' user=u") == "host=h password=*** user=u"
    assert mask("http://u:SECRETML@127.0.0.1:1") == "http://u:***@127.0.0.1:1"
    assert mask("https://api.x/v1?api_key=K&model=m") == "https://api.x/v1?api_key=***&model=m"
    assert mask("sqlite:////tmp/h/state.db") == "sqlite:////tmp/h/state.db"
    assert mask("https://ghp_0123456789abcdefABCDEF@github.com/o/r") == "https://***@github.com/o/r"
    assert mask("postgresql://evo@db/x") == "postgresql://evo@db/x"  # a plain user name stays
    assert mask("https://s3/b?X-Amz-Credential=AKIA1&X-Amz-Signature=abc123&X-Amz-Expires=60") == \
        "https://s3/b?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Expires=60"
    assert mask("client_secret=CS1 refresh_token=RT1 max_tokens=800") == "client_secret=*** refresh_token=*** max_tokens=800"
    assert mask("secret_key=S --api-key=K pad_token=<pad>") == "secret_key=*** --api-key=*** pad_token=<pad>"
    assert mask("https://x/cb#access_token=T&y=1") == "https://x/cb#access_token=***&y=1"
    assert mask("https://ghp_0123456789abcdefABCDEF:x-oauth-basic@github.com") == "https://***:***@github.com"


@pytest.mark.parametrize("env,secret", [
    ({"EVOTRAINER_STATE_URL": "postgresql+psycopg://u@127.0.0.1:{port}/x?password=SECRETQ"}, "SECRETQ"),
    ({"EVOTRAINER_STATE_URL": "postgresql+psycopg://u:SECRETUP@127.0.0.1:{port}/x"}, "SECRETUP"),
    ({"EVOTRAINER_STATE_URL": "postgresql+psycopg://u:SECRETPORT@127.0.0.1:notaport/x"}, "SECRETPORT"),
    ({"EVOTRAINER_CHECKPOINT_URL": "host=127.0.0.1 port={port} password=SECRETPW"}, "SECRETPW"),
], ids=["query", "userinfo", "bad-port", "keyword-dsn"])
def test_a_store_url_with_credentials_is_never_printed(tmp_path, env, secret):
    port = _closed_port()
    env = {k: v.format(port=port) for k, v in env.items()}
    (tmp_path / "spec.yaml").write_text("name: x\ntask: arith\nbudget: {total_steps: 400}\n")
    commands = [["campaign", "start", str(tmp_path / "spec.yaml"), "--no-wait"]]
    if "EVOTRAINER_STATE_URL" in env:  # every command opens the store; only a campaign opens its checkpointer
        commands.append(["campaign", "status"])
    for args in commands:
        p = _cli(args, tmp_path / "home", env)
        out = p.stdout + p.stderr
        assert secret not in out, out
        assert p.returncode == 2 and "Traceback" not in out, out


def test_an_unreachable_mlflow_server_fails_fast_without_its_password(tmp_path):
    uri = f"http://u:SECRETML@127.0.0.1:{_closed_port()}"
    t = time.monotonic()
    p = _cli(["diagnose", "0123456789abcdef0123456789abcdef"], tmp_path / "home", {"EVOTRAINER_MLFLOW_URI": uri})
    out = p.stdout + p.stderr
    assert time.monotonic() - t < 90, "MLflow's own retries (~250 s) were not bounded"
    assert p.returncode == 2 and "SECRETML" not in out and "u:***@127.0.0.1" in " ".join(out.split()), out


def test_a_usage_error_with_json_is_still_one_error_document(tmp_path):
    for args in (["train", "--steps", "0"], ["watch", "x", "--interval", "0"], ["tasks", "show", "arith",
                                                                               "--samples", "0"]):
        p = _cli([*args, "--json"], tmp_path / "home")
        doc = json.loads(p.stdout)  # exactly one document, nothing else on stdout
        assert p.returncode == 2 and doc["error"]["exit_code"] == 2 and doc["error"]["message"], p.stdout


def test_a_home_that_is_a_file_is_one_clear_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for args in (["campaign", "status"], ["review", "list"], ["diagnose", "x"], ["train", "--steps", "1"]):
        p = _cli([*args, "--home", str(f)], tmp_path)
        assert p.returncode == 2 and "is not a directory" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_an_empty_harness_and_a_boolean_for_a_number_are_refused(tmp_path):
    from evotrainer.config.harness import load_harness

    for text in ("", "# only a comment\n", "null\n"):
        (tmp_path / "h.yaml").write_text(text)
        with pytest.raises(ConfigError, match="the harness is empty"):
            load_harness(tmp_path / "h.yaml")
    with pytest.raises(ValueError, match="True is a boolean; this knob takes a number"):
        HarnessSpec.model_validate({"grpo": {"prompts_per_step": True}})


def test_the_llm_endpoint_must_be_an_http_url():
    for bad in ("file:///etc/passwd", "not a url", "http://127.0.0.1:x/v1", "ftp://h/v1"):
        with pytest.raises(ValueError, match="http"):
            LLMBrainSpec(base_url=bad, model="m")
    assert LLMBrainSpec(base_url=" http://127.0.0.1:8000/v1 ", model="m").base_url == "http://127.0.0.1:8000/v1"


def test_confirm_n_is_bounded_in_the_spec(tmp_path):
    from evotrainer.config.campaign import load_campaign_spec

    (tmp_path / "s.yaml").write_text("name: x\nbudget: {total_steps: 400}\nconfirm_n: 100000000\n")
    with pytest.raises(ConfigError, match="confirm_n"):
        load_campaign_spec(tmp_path / "s.yaml")
