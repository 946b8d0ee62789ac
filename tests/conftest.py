"""Shared fixtures: everything real, everything tiny, everything under tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "harnesses" / "grpo-baseline.yaml"

TINY_HARNESS = """
name: tiny-test
optim: {learning_rate: 0.001}
grpo: {prompts_per_step: 4, num_generations: 4, max_completion_length: 6}
data: {pool_size: 64, difficulty: [1, 1]}
"""


FILE_MARKS = {"test_ui_browser.py": "browser", "test_llm_local.py": "llama"}
"""Test files that need one outside part as a whole (the markers are declared in pyproject.toml)."""

SLOW = {ln.strip() for ln in (REPO / "tests" / "slow_tests.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")}
"""``tests/path.py::test_name`` of the tests measured slow (the file says how)."""


def pytest_collection_modifyitems(config, items) -> None:
    """The markers ``make test-fast`` leaves out (declared in pyproject.toml): ``browser`` and ``llama`` by file,
    by the ``postgres`` fixture (or a ``postgresql`` parameter) wherever a test asks for it, ``ray`` by the word in
    the test's name, and ``slow`` from ``tests/slow_tests.txt``."""
    for item in items:
        if item.nodeid.split("[", 1)[0] in SLOW:
            item.add_marker("slow")
        if "ray" in item.name.split("[", 1)[0].split("_"):
            item.add_marker("ray")
        if item.path.name in FILE_MARKS:
            item.add_marker(FILE_MARKS[item.path.name])
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "postgres" in getattr(item, "fixturenames", ()) or "postgresql" in params.values():
            item.add_marker("postgres")


def landlock_or_skip(why: str) -> None:
    """Skip a test of the sandbox where the kernel has no Landlock, unless ``make test`` asked for it
    (EVOTRAINER_REQUIRE_LANDLOCK=1): there a dead sandbox fails the suite instead of skipping it away."""
    from evotrainer.diagnostics.confine import FULL, confinement, missing

    mode = confinement()
    if os.environ.get("EVOTRAINER_REQUIRE_LANDLOCK") == "1":
        assert mode == FULL, f"the sandbox runs as {mode!r}: it lacks {missing(mode)}, which is required here"
    elif missing(mode):
        pytest.skip(why)


@pytest.fixture(scope="session")
def shared_home(tmp_path_factory) -> Path:
    """One home per test session so the warm-started nano base is built once and reused."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture()
def tiny_harness(tmp_path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY_HARNESS)
    return p


def junk_texts(alphabet: str, n: int, short: int, long: int, seed: int = 9) -> list[str]:
    """Random strings for verifier fuzzing: mostly up to ``short`` chars, every tenth up to ``long``."""
    import random

    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, long if i % 10 == 0 else short)))
            for i in range(n)]


@pytest.fixture(scope="session")
def postgres():
    """A throw-away PostgreSQL server for the session (tests/postgres.py); ``postgres.new_database()`` per test.

    Fails (does not skip) when PostgreSQL is not installed, saying what to install: these tests are part of CI,
    whose ``make test`` installs Debian's ``postgresql``.
    """
    from tests.postgres import PostgresMissing, PostgresServer

    server = PostgresServer()
    try:
        server.__enter__()
    except PostgresMissing as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield server
    finally:
        server.__exit__(None, None, None)


def small_context(store, spec=None, *, home: Path, campaign_id: str = "c", **over):
    """A real ``CampaignContext`` for a node or helper that reads the store and the spec: the heuristic brain, no
    launcher and no tracker (a test that runs jobs starts a real campaign instead). ``over`` sets any other field."""
    from evotrainer.agent.brains.heuristic import HeuristicBrain
    from evotrainer.agent.state import CampaignContext
    from evotrainer.config.campaign import CampaignSpec

    if spec is None:
        spec = CampaignSpec(name=campaign_id, budget={"total_steps": 1000})
    return CampaignContext(campaign_id=campaign_id, spec=spec,
                           home=home, store=store,
                           brain=over.pop("brain", HeuristicBrain()), pool=over.pop("pool", None),
                           tracker=over.pop("tracker", None), **over)
