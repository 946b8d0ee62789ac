"""The review dashboard end to end in a real headless Chromium (Selenium + Debian's chromium-driver).

One small real campaign (nano policy, 2-step segments and branches, ``autonomy: review``) is started once for
the module and stops at its first review. The dashboard is served by uvicorn from a thread; the browser opens
every page (a screenshot of each is saved under the test's temp dir), signs in with the token through the login
form, approves one proposal and rejects the other while a ``campaign resume --wait`` process waits for them,
and the campaign then backtests the approved change. Every page load fails the test on any browser console
error (Chromium's log through ``goog:loggingPrefs``), which includes Content-Security-Policy violations.

Outside ``make test`` the module is skipped when ``/usr/bin/chromium`` or ``/usr/bin/chromedriver`` is missing;
``make test`` installs them and sets ``EVOTRAINER_REQUIRE_BROWSER=1``, which turns the skip into a failure.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from evotrainer.core.domain import Example, Finding
from evotrainer.store import Store
from tests.conftest import REPO

CHROMIUM = os.environ.get("EVOTRAINER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("EVOTRAINER_CHROMEDRIVER", "/usr/bin/chromedriver")
TOKEN = "browser-test-token-0123456789"
XSS = "<script>window.__xss = 1</script><img src=x onerror=\"window.__xss = 2\">"
HARNESS = """
name: flawed
optim: {learning_rate: 0.001}
grpo: {prompts_per_step: 4, num_generations: 4, max_completion_length: 2}
data: {pool_size: 64, difficulty: [1, 1]}
"""


def _browser_missing() -> str | None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (Path(p).is_file() and os.access(p, os.X_OK))]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    return ", ".join(missing) or None


@pytest.fixture(scope="module")
def browser():
    missing = _browser_missing()
    if missing:
        why = f"browser tests need {missing} (apt-get install -y chromium chromium-driver; `make test` does it)"
        if os.environ.get("EVOTRAINER_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000",
              "--disable-extensions", "--no-first-run"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _cli(*args: str, home: Path) -> subprocess.Popen:
    env = {**os.environ, "EVOTRAINER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("EVOTRAINER_UI_TOKEN", None)
    return subprocess.Popen([sys.executable, "-m", "evotrainer.cli", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory, browser):
    """A real campaign waiting for review of its first round's proposals (``--no-wait`` returned there)."""
    root = tmp_path_factory.mktemp("ui-campaign")
    (root / "h.yaml").write_text(HARNESS)
    spec = {"name": "ui", "task": "arith", "policy": {"size": "nano", "sft_steps": 150}, "harness": "h.yaml",
            "segment_steps": 2, "budget": {"total_steps": 14, "explore_share": 1.0, "final_share": 0.0},
            "backtest": {"branch_steps": 2, "seeds": 2, "max_proposals": 2},
            "eval": {"every": 0, "n": 16, "k": 1}, "stop": {"plateau_rounds": 2}, "autonomy": "review"}
    (root / "campaign.yaml").write_text(yaml.safe_dump(spec))
    home = root / "home"
    p = _cli("campaign", "start", str(root / "campaign.yaml"), "--no-wait", home=home)
    out, _ = p.communicate(timeout=900)
    assert p.returncode == 0, out[-3000:]
    store = Store.for_home(home)
    (camp,) = store.list_campaigns()
    pending = store.pending_reviews()
    assert camp.status == "waiting_review" and len(pending) == 2, out[-3000:]
    # untrusted rollout text, as a diagnostic would store it: the pages must show it, never run it
    store.add_findings(camp.id, 0, "xss-probe", [Finding(
        symptom="echo", diagnostic="echo", version="1", severity="warning", confidence=0.8, metrics={"echo_share": 0.5},
        examples=[Example(rollout_id="x:1", step=1, prompt=XSS, completion=f"</pre>{XSS}</td>", reward=1.0)],
        explanation="completions repeat the prompt")])
    return {"home": home, "root": root, "cid": camp.id, "pending": [x.id for x in pending]}


@pytest.fixture(scope="module")
def server(campaign):
    import uvicorn

    from evotrainer.ui import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(campaign["home"], TOKEN, library=REPO / "skills")
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    deadline = time.time() + 30
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    th.join(10)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


class Page:
    """Open URLs, wait for them, save a full-page screenshot, and fail on any console error."""

    def __init__(self, driver, base: str, shots: Path):
        self.d, self.base, self.shots = driver, base, shots

    def open(self, path: str, shot: str):
        self.d.get(self.base + path)
        return self.done(shot)

    def done(self, shot: str):
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(self.d, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")
        height = self.d.execute_script("return document.documentElement.scrollHeight")
        self.d.set_window_size(1400, min(max(height, 800) + 40, 8000))
        assert self.d.save_screenshot(str(self.shots / f"{shot}.png"))
        self.d.set_window_size(1400, 1000)
        errors = [e for e in self.d.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, f"console errors on {shot}: {errors}"
        assert self.d.execute_script("return window.__xss === undefined"), f"untrusted text ran on {shot}"
        return self.d

    def text(self, css: str) -> str:
        from selenium.webdriver.common.by import By

        return self.d.find_element(By.CSS_SELECTOR, css).text


@pytest.fixture()
def page(browser, server, shots) -> Page:
    return Page(browser, server, shots)


def test_campaign_pages_of_a_real_campaign(page, campaign):
    from selenium.webdriver.common.by import By

    d = page.open("/", "campaigns")
    link = d.find_element(By.LINK_TEXT, "ui")
    assert "2 waiting" in page.text("#campaigns") and "waiting review" in page.text("#campaigns")
    link.click()
    page.done("campaign")
    assert campaign["cid"] in d.current_url.replace("%3A", ":")
    lineage = page.text("#lineage")
    assert "r00 segment" in lineage and "pending review" in lineage  # the round's proposals hang off its segment
    charts = d.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(charts) >= 2 and all(c.find_elements(By.CSS_SELECTOR, "text.tick") for c in charts)
    assert d.find_elements(By.CSS_SELECTOR, "svg.chart path.series")  # training metrics drawn as lines
    assert "MLflow" in d.page_source and campaign["cid"] + "__r00__segment" in d.page_source
    queue = page.open("/reviews", "review-queue")
    ids = [a.text for a in queue.find_elements(By.CSS_SELECTOR, "#queue td a")]
    assert ids == campaign["pending"]  # oldest first


def test_rollout_text_is_shown_escaped_never_run(page, campaign):
    from selenium.webdriver.common.by import By

    d = page.open(f"/proposals/{campaign['pending'][0]}", "proposal-pending")
    shown = [e.get_attribute("textContent") for e in d.find_elements(By.CSS_SELECTOR, "pre.rollout")]
    assert XSS in shown and f"</pre>{XSS}</td>" in shown  # the exact text, as text
    assert not d.find_elements(By.CSS_SELECTOR, "main img") and not d.find_elements(By.CSS_SELECTOR, "main script")
    d = page.open("/diagnose", "diagnose-runs")
    d.find_element(By.PARTIAL_LINK_TEXT, "__r00__segment").click()
    page.done("diagnose-run")
    assert "Findings" in d.page_source and d.find_elements(By.CSS_SELECTOR, "svg.chart")


def test_skills_search_in_the_browser(page):
    from selenium.webdriver.common.by import By

    d = page.open("/skills", "skills")
    box = d.find_element(By.ID, "skill-q")
    box.send_keys("entropy collapse clip")
    d.find_element(By.ID, "skill-search-go").click()
    page.done("skills-search")
    assert "q=entropy+collapse+clip" in d.current_url
    first = d.find_element(By.CSS_SELECTOR, "#skills tbody tr td a")
    assert first.text.startswith("Clip-higher")
    first.click()
    page.done("skill")
    assert page.text("#skill-name").startswith("Clip-higher") and "Why it works" in page.text("#skill-body")
    d = page.open("/skills?kind=mistake&q=zebra", "skills-empty")
    assert "No entry matches" in d.page_source


def test_approve_and_reject_from_the_browser_and_the_campaign_continues(page, campaign):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    home, cid = campaign["home"], campaign["cid"]
    first, second = campaign["pending"]
    waiting = _cli("campaign", "resume", cid, "--wait", "--max-rounds", "1", home=home)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(waiting.stdout), daemon=True)
    reader.start()
    deadline = time.time() + 300
    while not any("waiting for review" in ln for ln in lines):
        assert waiting.poll() is None and time.time() < deadline, "".join(lines)[-3000:]
        time.sleep(0.5)
    try:
        d = page.open(f"/proposals/{first}", "proposal-before-sign-in")
        assert not d.find_elements(By.ID, "review-form")
        d.find_element(By.ID, "sign-in-to-review").click()
        page.done("login")
        d.find_element(By.ID, "token").send_keys(TOKEN)
        d.find_element(By.CSS_SELECTOR, "#login-form button[type=submit]").click()
        WebDriverWait(d, 30).until(lambda d: d.find_elements(By.ID, "review-form"))
        page.done("proposal-review-form")
        reviewer = d.find_element(By.ID, "reviewer")
        reviewer.clear()
        reviewer.send_keys("ana")
        d.find_element(By.ID, "comment").send_keys("the clip is too tight; worth a backtest")
        d.find_element(By.ID, "approve").click()
        WebDriverWait(d, 30).until(lambda d: d.find_elements(By.ID, "done"))
        page.done("proposal-approved")
        assert "Approved" in page.text("#done") and "ana" in page.text("#review-recorded")
        store = Store.for_home(home)
        rv = store.get_review(first)
        assert (rv.verdict, rv.reviewer, rv.comment) == ("approve", "ana", "the clip is too tight; worth a backtest")

        d = page.open(f"/proposals/{second}", "proposal-to-reject")
        d.find_element(By.ID, "reject").click()  # no comment: the browser asks for one, nothing is sent
        assert store.get_review(second) is None
        d.find_element(By.ID, "comment").send_keys("not this round")
        d.find_element(By.ID, "reject").click()
        WebDriverWait(d, 30).until(lambda d: d.find_elements(By.ID, "done"))
        page.done("proposal-rejected")
        assert store.get_review(second).verdict == "reject" and store.get_proposal(second).status == "rejected"

        # the campaign page follows the running campaign: it reloads itself when the ledger moves
        d = page.open(f"/campaigns/{cid}", "campaign-running")
        d.execute_script("window.__loaded_before = true")
        WebDriverWait(d, 600, poll_frequency=1).until(lambda d: d.execute_script(
            "return document.readyState === 'complete' && window.__loaded_before === undefined"))
        page.done("campaign-live-reloaded")
        waiting.wait(timeout=900)  # the waiting process saw the reviews and ran the backtest
        reader.join(10)
        assert waiting.returncode == 0, "".join(lines)[-3000:]
    finally:
        if waiting.poll() is None:
            waiting.kill()
    store = Store.for_home(home)
    (bt,) = store.list_backtests(cid)
    assert bt.proposal_ids == [first]
    assert {(b.role, b.seed) for b in store.list_branches(bt.id)} == {(r, s) for r in ("control", "treatment")
                                                                      for s in bt.seeds}
    assert store.get_decision(first) is not None and store.get_proposal(second).status == "rejected"
    assert store.get_campaign(cid).status == "stopped"  # --max-rounds 1: round 0 done, resume continues later
    d = page.open(f"/proposals/{first}", "proposal-backtested")
    assert len(d.find_elements(By.CSS_SELECTOR, "#seeds tbody tr")) == len(bt.seeds)
    assert d.find_elements(By.CSS_SELECTOR, "figure#effect svg") and "Decision" in d.page_source
    d = page.open(f"/campaigns/{cid}", "campaign-after-review")
    assert "reject" in page.text("#proposals") and page.text("#decisions")
    assert any(p.suffix == ".png" for p in page.shots.iterdir())
    print(f"screenshots: {page.shots}")
