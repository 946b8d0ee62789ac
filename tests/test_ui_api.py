"""The review dashboard over HTTP (FastAPI's TestClient): every page, escaping, and the token / CSRF / Origin /
Host rules of approve, reject and stop. The store and the job directory are small but real (SQLite in tmp_path,
Parquet rollouts); the browser test (``test_ui_browser.py``) runs the same app against a real campaign.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from evotrainer.core.domain import (
    BacktestStats,
    BranchResult,
    Decision,
    Example,
    Finding,
    Hypothesis,
    LedgerEntry,
    PolicyVersion,
    Proposal,
)
from evotrainer.evidence.model import ROLLOUT_SCHEMA
from evotrainer.library.format import Evidence, Intervention, Skill, Trigger
from evotrainer.library.loader import write_skill
from evotrainer.store import Store
from evotrainer.ui import create_app
from evotrainer.ui.charts import Series, decimate, interval_chart, line_chart, ticks
from evotrainer.ui.security import CSRF_COOKIE, SESSION_COOKIE, check_bind, is_loopback
from tests.conftest import REPO

TOKEN = "test-token-0123456789abcdef"
BASE = "http://127.0.0.1:8765"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
XSS_PROMPT = "<script>window.__xss = 1</script>12+7="
XSS_COMPLETION = '<img src=x onerror="window.__xss = 2">19 & </pre><b>bold</b>'
CID = "demo-20261101120000"


def _job(home: Path, name: str, steps: range, *, truncated: bool = False, evals: dict[int, float] | None = None) -> None:
    """A job directory as the trainer leaves it: meta.json, metrics.jsonl, one rollout Parquet per step."""
    d = home / "jobs" / name
    (d / "rollouts").mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"name": name, "run_id": f"mlflow-{name[-8:]}", "status": "finished",
                                             "steps_done": steps[-1], "spec": {"task": "arith"}}))
    with open(d / "metrics.jsonl", "w") as fh:
        for s in steps:
            row = {"step": s, "reward": 0.3 + 0.01 * s, "accuracy": 0.25 + 0.01 * s, "entropy": 0.5 - 0.005 * s,
                   "loss": 0.01, "completions/mean_length": 4.0, "completions/clipped_ratio": 0.9 if truncated else 0.0}
            fh.write(json.dumps(row) + "\n")
            if evals and s in evals:
                fh.write(json.dumps({"step": s, "eval/greedy_accuracy": evals[s]}) + "\n")
    for s in steps:
        n = 8
        df = pd.DataFrame({
            "run_id": "r", "step": s, "prompt_id": [f"arith:{i % 2}" for i in range(n)],
            "group_id": [f"{s}:{i % 2}" for i in range(n)], "prompt": XSS_PROMPT, "completion": XSS_COMPLETION,
            "reward_correctness": 0.0, "reward_format": 0.0,
            "reward": [float(i % 3 == 0) for i in range(n)], "correct": [i % 3 == 0 for i in range(n)],
            "well_formed": True, "n_candidates": 1, "length": 6, "truncated": truncated, "advantage": 0.0,
            "difficulty": 1})
        for col in ROLLOUT_SCHEMA.names:  # columns this test does not care about stay null
            if col not in df:
                df[col] = None
        pq.write_table(pa.Table.from_pandas(df, schema=ROLLOUT_SCHEMA, preserve_index=False),
                       d / "rollouts" / f"step_{s:06d}.parquet")


def _proposal(pid: str, rnd: int, created: datetime, *, campaign: str = CID, status: str = "pending_review",
              knob: str = "grpo.epsilon_high", old=None, new=0.28, cites=("clip-higher",)) -> Proposal:
    return Proposal(id=pid, campaign_id=campaign, round=rnd, knob=knob, old=old, new=new,
                    hypothesis=Hypothesis(symptom="entropy_collapse", cause="the symmetric clip throttles rare tokens",
                                          change="raise epsilon_high", expected_effect="entropy stays up, +2 points"),
                    rationale="</p><script>window.__xss = 3</script> see the findings", cited_skills=list(cites),
                    brain="heuristic", status=status, harness_version="h0", created=created)


@pytest.fixture()
def home(tmp_path) -> Path:
    """One campaign waiting for review in round 1 after a promotion in round 0, and a second campaign."""
    h = tmp_path / "home"
    store = Store.for_home(h)
    spec = {"task": "arith", "autonomy": "review", "budget": {"total_steps": 100}, "brain": {"kind": "heuristic"},
            "backtest": {"branch_steps": 4, "seeds": 2, "min_effect": 0.01, "confidence": 0.8}}
    store.create_campaign(CID, "demo", spec, CID)
    store.create_campaign("other-20261101130000", "other", {**spec, "autonomy": "auto"}, "t2")
    store.add_harness_version("h0", None, {}, [])
    store.add_harness_version("h1", "h0", {}, [{"path": "grpo.epsilon_high", "old": None, "new": 0.28}])
    seg0, ctl, trt = f"{CID}__r00__segment", f"{CID}__r00__control__s1", f"{CID}__r00__treatment1__s1"
    _job(h, seg0, range(1, 5), truncated=True, evals={1: 0.20, 4: 0.30})
    _job(h, ctl, range(5, 9), evals={8: 0.31})
    _job(h, trt, range(5, 9), evals={8: 0.36})
    store.add_policy_version(PolicyVersion(id=f"{CID}:r00:segment", campaign_id=CID, parent_id=None, harness_version="h0",
                                           checkpoint="ck", run_name=seg0, mlflow_run_id="run-seg0", eval_accuracy=0.30,
                                           step=4, created=T0))
    store.add_policy_version(PolicyVersion(id=f"{CID}:r00:promoted", campaign_id=CID, parent_id=f"{CID}:r00:segment",
                                           harness_version="h1", checkpoint="ck", run_name=trt, mlflow_run_id="run-trt",
                                           eval_accuracy=0.36, step=8, created=T0 + timedelta(minutes=5)))
    store.set_campaign(CID, status="waiting_review", mainline_version=f"{CID}:r00:promoted", mlflow_run_id="run-camp")
    finding = Finding(symptom="truncation", diagnostic="truncation", version="1", severity="critical", confidence=0.9,
                      steps=(1, 4), metrics={"truncated_share": 0.9},
                      examples=[Example(rollout_id="r:1", step=3, prompt=XSS_PROMPT, completion=XSS_COMPLETION,
                                        reward=0.0, correct=False)],
                      explanation="90% of completions hit max_completion_length <b>unfinished</b>")
    store.add_findings(CID, 0, seg0, [finding])
    store.add_findings(CID, 1, seg0, [finding])
    store.add_proposal(_proposal(f"{CID}:r00:p0", 0, T0, status="approved"))
    store.add_proposal(_proposal(f"{CID}:r01:p0", 1, T0 + timedelta(minutes=10), knob="optim.learning_rate", old=3e-5,
                                 new=9e-5, cites=("clip-higher", "lr-too-high-note")))
    store.add_proposal(_proposal(f"{CID}:r01:p1", 1, T0 + timedelta(minutes=11), knob="grpo.temperature", old=1.0,
                                 new=1.2, cites=()))
    store.add_proposal(_proposal("other-20261101130000:r00:p0", 0, T0 + timedelta(minutes=1),
                                 campaign="other-20261101130000"))
    bt = f"{CID}:r00:backtest"
    store.add_backtest(bt, CID, 0, [f"{CID}:r00:p0"], [1], 4)
    store.add_branch(BranchResult(backtest_id=bt, proposal_id=None, role="control", seed=1, run_name=ctl,
                                  status="finished", eval_accuracy=0.31, steps=4))
    store.add_branch(BranchResult(backtest_id=bt, proposal_id=f"{CID}:r00:p0", role="treatment", seed=1, run_name=trt,
                                  status="finished", eval_accuracy=0.36, gate_passed=True, steps=4))
    stats = BacktestStats(n_pairs=1, effect=0.05, ci_low=0.02, ci_high=0.08, confidence=0.8, method="paired-t",
                          control_mean=0.31, treatment_mean=0.36)
    store.set_backtest_stats(bt, f"{CID}:r00:p0", stats)
    store.add_decision(Decision(proposal_id=f"{CID}:r00:p0", outcome="promote", reasons=["effect +0.050 above 0.01"],
                                stats=stats, at=T0 + timedelta(minutes=4)))
    store.set_proposal_status(f"{CID}:r00:p0", "promoted")
    for key, kind, steps in ((seg0, "segment", 4), (ctl, "branch", 4), (trt, "branch", 4)):
        store.ledger_add(LedgerEntry(campaign_id=CID, key=key, kind=kind, run_name=key, steps=steps, at=T0))
    store.log_event(CID, "brain", {"round": 1, "notes": "<script>x</script>"})
    store.log_event(CID, "kept_branch", {"round": 0, "arm": f"{CID}:r00:p0", "chosen": trt, "split": "selection",
                                         "n": 300, "candidates": [{"run": trt, "seed": 1, "step": 8,
                                                                   "selection_accuracy": 0.345, "decision_accuracy": 0.36}]})
    store.close()
    return h


@pytest.fixture()
def library(tmp_path) -> Path:
    """The seed library's clip-higher, plus a mistake note that cites our campaign."""
    lib = tmp_path / "skills"
    (lib / "clip-higher").mkdir(parents=True)
    (lib / "clip-higher" / "SKILL.md").write_bytes((REPO / "skills" / "clip-higher" / "SKILL.md").read_bytes())
    body = "\n\n".join(f"## {h}\nText <script>window.__xss = 4</script> for {h.lower()}."
                       for h in ("What was tried", "What went wrong", "Correct approach", "Generalisable strategy",
                                 "Anti-patterns"))
    write_skill(lib, Skill(
        name="Raising the learning rate when it is already high", slug="lr-too-high-note", kind="mistake",
        description="Tripling an already high learning rate blew up the KL.", body="# Note\n\n" + body,
        triggers=[Trigger(symptom="plateau", domains=["math"])],
        intervention=Intervention(knob="optim.learning_rate", op="scale", arg=3.0),
        evidence=[Evidence(campaign=CID, task="arith", proposal=f"{CID}:r00:p0", value=9e-5, effect=-0.04,
                           ci_low=-0.07, ci_high=-0.01, seeds=[1, 2], outcome="reject", date=T0.date())]))
    return lib


def client(home: Path, library: Path | None = None, **kw) -> TestClient:
    return TestClient(create_app(home, TOKEN, library=library, **kw), base_url=BASE, follow_redirects=False)


def csrf_of(c: TestClient) -> str:
    """The CSRF field of this client's browser session (any page's forms carry it; the login page has one)."""
    html = c.get("/login").text
    return re.search(r'name="csrf_token" value="([0-9a-f]+)"', html).group(1)


def signed_in(c: TestClient) -> str:
    field = csrf_of(c)
    r = c.post("/login", data={"token": TOKEN, "csrf_token": field, "next": "/reviews"}, headers={"Origin": BASE})
    assert r.status_code == 303 and r.headers["location"] == "/reviews" and c.cookies.get(SESSION_COOKIE)
    assert TOKEN not in c.cookies.get(SESSION_COOKIE)  # the cookie holds an HMAC, never the token
    return field


# ---------------------------------------------------------------------------------------------- pages
def test_every_page_renders_with_the_data_and_untrusted_text_escaped(home, library):
    c = client(home, library)
    pages = {
        "/": ["demo", "waiting review", "1 waiting", "20.0 % → <strong>36.0 %</strong>", "12 / 100"],
        f"/campaigns/{CID}": ["Lineage", "grpo.epsilon_high", "promote", "run-seg0", "<svg", "held-out accuracy",
                              "effect +0.050 above 0.01", f"{CID}__r00__segment", "Kept branches",
                              "seed 1: 34.5 % (decision split 36.0 %, step 8)",
                              # 4 segment steps + 4 of the kept branch in the lineage, of 12 spent
                              "useful share <strong>66.7 %</strong>: 4 in mainline segments, 4 in kept branches, 4 in "
                              "branches not kept"],
        "/reviews": ["optim.learning_rate", "grpo.temperature", "other-20261101130000:r00:p0"],
        f"/proposals/{CID}:r00:p0": ["Backtest", "seed 1: control vs treatment", "+5.00", "passed", "promote",
                                     "Clip-higher"],
        f"/proposals/{CID}:r01:p0": ["Sign in with the dashboard token", "truncation", "lr-too-high-note",
                                     "Raising the learning rate when it is already high"],
        "/skills": ["clip-higher", "lr-too-high-note", "2 entries"],
        "/skills/lr-too-high-note": ["Evidence (our backtests)", "-4.00", f"{CID}:r01:p0", "Anti-patterns"],
        "/diagnose": [f"{CID}__r00__segment", f"{CID}__r00__control__s1"],
        f"/diagnose/{CID}__r00__segment": ["truncation", "critical", "example rollout"],
    }
    for url, wanted in pages.items():
        r = c.get(url)
        assert r.status_code == 200, (url, r.text[:2000])
        for w in wanted:
            assert w in r.text, (url, w)
        # untrusted text: never raw HTML, always escaped
        assert "<script>window.__xss" not in r.text and "<img src=x" not in r.text and "<b>" not in r.text, url
        assert "script-src 'self'" in r.headers["content-security-policy"] and r.headers["x-frame-options"] == "DENY"
    proposal = c.get(f"/proposals/{CID}:r01:p0").text
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;12+7=" in proposal
    assert "&lt;img src=x onerror=&#34;window.__xss = 2&#34;&gt;19 &amp; &lt;/pre&gt;" in proposal
    assert "&lt;/p&gt;&lt;script&gt;window.__xss = 3&lt;/script&gt;" in proposal  # the rationale
    assert "&lt;script&gt;window.__xss = 4&lt;/script&gt;" in c.get("/skills/lr-too-high-note").text  # markdown body
    assert "&lt;script&gt;window.__xss = 1" in c.get(f"/diagnose/{CID}__r00__segment").text
    # the review queue is oldest first, across campaigns
    queue = c.get("/reviews").text
    order = [queue.index(x) for x in (f"{CID}:r01:p0", f"{CID}:r01:p1")]
    assert queue.index("other-20261101130000:r00:p0") < order[0] < order[1]
    state = c.get(f"/campaigns/{CID}/state.json").json()
    assert state["status"] == "waiting_review" and state["spent"] == 12 and state["stamp"]


def test_missing_things_are_404_and_empty_states_say_what_to_do(tmp_path, home, library):
    c = client(home, library)
    for url in ("/campaigns/nope", "/proposals/nope", "/skills/nope", "/diagnose/nope", "/skills?lib=campaign:nope",
                "/no-such-page"):
        r = c.get(url)
        assert r.status_code == 404, url
        assert "<script" not in r.text.split("</head>")[1]
    r = c.get("/diagnose/..%2F..%2Fetc")  # not a name at all: refused by the name rule before any route (400)
    assert r.status_code == 400 and "is not a valid name" in r.text
    assert "existing campaigns include" in c.get("/campaigns/nope").text
    empty = client(tmp_path / "empty", tmp_path / "no-library")
    assert "evotrainer campaign start campaigns/arith-demo.yaml" in empty.get("/").text
    assert "Nothing is waiting for a person" in empty.get("/reviews").text
    assert "evotrainer train --task arith" in empty.get("/diagnose").text
    r = empty.get("/skills")
    assert r.status_code == 400 and "--library" in r.text


def test_skills_search_filters_and_history(home, library):
    c = client(home, library)
    hits = c.get("/skills", params={"q": "learning rate blew up"}).text.split('id="skills"')[1]
    assert "lr-too-high-note" in hits and hits.index("lr-too-high-note") < hits.find("clip-higher") % len(hits)
    assert "No entry matches" in c.get("/skills", params={"q": "zebra"}).text
    assert "clip-higher" not in c.get("/skills", params={"kind": "mistake"}).text.split('id="skills"')[1]
    only_math = c.get("/skills", params={"domain": "math"}).text.split('id="skills"')[1]
    assert "lr-too-high-note" in only_math and "clip-higher" in only_math  # no domain listed = any domain
    assert "lr-too-high-note" not in c.get("/skills", params={"symptom": "entropy_collapse"}).text.split('id="skills"')[1]
    assert "No entry matches" in c.get("/skills", params={"status": "deprecated"}).text
    page = c.get("/skills/clip-higher").text
    history = page.split('id="history"')[1]
    assert f"{CID}:r00:p0" in history and f"{CID}:r01:p0" in history and "+5.00 [+2.00, +8.00]" in history
    assert "DAPO" in page and "<h2>Why it works</h2>" in page  # the markdown body is rendered


# ---------------------------------------------------------------------------------------------- security
def test_review_needs_token_csrf_and_same_origin(home, library):
    pid = f"{CID}:r01:p0"
    url = f"/proposals/{pid}/review"
    c = client(home, library)
    field = csrf_of(c)
    form = {"verdict": "approve", "comment": "looks right", "reviewer": "ana", "csrf_token": field}
    same = {"Origin": BASE}
    assert c.post(url, data=form, headers=same).status_code == 401  # no token at all
    assert c.post(url, data=form, headers={**same, "Authorization": "Bearer wrong-token-000000000"}).status_code == 403
    c.cookies.set(SESSION_COOKIE, "forged")
    assert c.post(url, data=form, headers=same).status_code == 403
    c.cookies.delete(SESSION_COOKIE)
    # wrong token on the login form: 403 and no session
    r = c.post("/login", data={"token": "nope", "csrf_token": field}, headers=same)
    assert r.status_code == 403 and not c.cookies.get(SESSION_COOKIE)
    field = signed_in(c)
    form["csrf_token"] = field
    assert c.post(url, data={**form, "csrf_token": "0" * 64}, headers=same).status_code == 403  # bad CSRF
    assert c.post(url, data={k: v for k, v in form.items() if k != "csrf_token"}, headers=same).status_code == 403
    assert c.post(url, data=form, headers={"Origin": "http://evil.example"}).status_code == 403  # foreign Origin
    assert c.post(url, data=form, headers={"Origin": "null"}).status_code == 403
    assert c.post(url, data=form, headers={"Referer": "http://evil.example/x"}).status_code == 403
    # a session from another browser (its own CSRF cookie) cannot replay this browser's field
    other = client(home, library)
    signed_in(other)
    assert other.post(url, data=form, headers=same).status_code == 403
    store = Store.for_home(home)
    assert store.get_review(pid) is None and store.get_proposal(pid).status == "pending_review"
    # everything right: recorded, and the page says what happens next
    r = c.post(url, data=form, headers=same)
    assert r.status_code == 303 and r.headers["location"] == f"/proposals/{CID}%3Ar01%3Ap0?done=approve"
    rv = store.get_review(pid)
    assert (rv.verdict, rv.reviewer, rv.comment) == ("approve", "ana", "looks right")
    assert store.get_proposal(pid).status == "approved"
    page = c.get(r.headers["location"]).text
    assert "Approved." in page and "continues at once" in page and 'id="review-recorded"' in page
    # the same rules as the CLI: not twice, and a rejection needs a reason
    again = c.post(url, data=form, headers=same)
    assert again.status_code == 409 and "not waiting for review" in again.text
    r = c.post(f"/proposals/{CID}:r01:p1/review", data={**form, "verdict": "reject", "comment": " "}, headers=same)
    assert r.status_code == 409 and "needs a comment" in r.text and store.get_review(f"{CID}:r01:p1") is None
    r = c.post(f"/proposals/{CID}:r01:p1/review", data={**form, "verdict": "reject", "comment": "too hot"},
               headers=same)
    assert r.status_code == 303 and store.get_proposal(f"{CID}:r01:p1").status == "rejected"
    assert c.post(f"/proposals/{CID}:r01:p1/review", data={**form, "verdict": "maybe"}, headers=same).status_code == 400
    # a script may use the bearer token instead of the session, CSRF still applies
    script = client(home, library)
    f2 = csrf_of(script)
    r = script.post("/proposals/other-20261101130000:r00:p0/review", headers={"Authorization": f"Bearer {TOKEN}"},
                    data={"verdict": "approve", "comment": "", "reviewer": "bot", "csrf_token": f2})
    assert r.status_code == 303 and store.get_review("other-20261101130000:r00:p0").reviewer == "bot"


def test_stop_campaign_and_sign_out_need_the_same_checks(home, library):
    c = client(home, library)
    field = csrf_of(c)
    assert c.post(f"/campaigns/{CID}/stop", data={"csrf_token": field}, headers={"Origin": BASE}).status_code == 401
    signed_in(c)
    assert c.post(f"/campaigns/{CID}/stop", data={"csrf_token": "x"}, headers={"Origin": BASE}).status_code == 403
    r = c.post(f"/campaigns/{CID}/stop", data={"csrf_token": field}, headers={"Origin": BASE})
    assert r.status_code == 303 and "done=stop" in r.headers["location"]
    store = Store.for_home(home)
    assert store.get_campaign(CID).status == "stopped" and store.events(CID, kind="stop")
    assert c.post(f"/campaigns/{CID}/stop", data={"csrf_token": field}, headers={"Origin": BASE}).status_code == 409
    assert c.post("/logout", data={"csrf_token": "bad"}, headers={"Origin": BASE}).status_code == 403
    assert c.post("/logout", data={"csrf_token": field}, headers={"Origin": BASE}).status_code == 303
    assert not c.cookies.get(SESSION_COOKIE)


def test_token_link_host_check_and_non_loopback_binds(home, library):
    c = client(home, library)
    r = c.get(f"/reviews?token={TOKEN}&page=1")
    assert r.status_code == 303 and r.headers["location"] == "/reviews?page=1" and c.cookies.get(SESSION_COOKIE)
    assert 'id="review-form"' in c.get(f"/proposals/{CID}:r01:p0").text  # signed in: the form is there
    bad = client(home, library)
    r = bad.get("/reviews?token=wrong")
    assert r.status_code == 403 and "is not this dashboard" in r.text and not bad.cookies.get(SESSION_COOKIE)
    assert bad.get("/", headers={"Host": "evil.example:8765"}).status_code == 400  # DNS rebinding
    assert bad.get("/", headers={"Host": "localhost:8765"}).status_code == 200
    assert bad.get("/").cookies.get(CSRF_COOKIE) is None  # the CSRF cookie is set once per browser
    # bound to every interface: every page needs the session (or the bearer token)
    wide = client(home, library, host="0.0.0.0")
    r = wide.get(f"/campaigns/{CID}")
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
    assert wide.get("/login").status_code == 200 and wide.get("/static/app.css").status_code == 200
    assert wide.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert wide.get("/", headers={"Host": "evotrainer.lan:8765", "Authorization": f"Bearer {TOKEN}"}).status_code == 200
    # ?next= never leaves the site
    field = csrf_of(wide)
    r = wide.post("/login", data={"token": TOKEN, "csrf_token": field, "next": "//evil.example/"}, headers={"Origin": BASE})
    assert r.status_code == 303 and r.headers["location"] == "/"


def test_non_loopback_bind_without_token_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("EVOTRAINER_UI_TOKEN", raising=False)
    from evotrainer.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["ui", "--host", "0.0.0.0", "--home", str(tmp_path / "h")])
    assert r.exit_code == 2 and "refusing to bind 0.0.0.0" in r.output and "EVOTRAINER_UI_TOKEN" in r.output
    r = runner.invoke(app, ["ui", "--host", "192.168.1.10", "--home", str(tmp_path / "h")], env={"EVOTRAINER_UI_TOKEN": "short"})
    assert r.exit_code == 2 and "at least 16" in r.output
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("[::1]") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.0.0.1")
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", TOKEN)


# ---------------------------------------------------------------------------------------------- charts
def test_line_chart_is_valid_svg_with_axes_ticks_legend_and_escaped_names():
    svg = line_chart([Series("a<b>", [(1, 0.2), (2, 0.4), (3, float("nan")), (4, 0.35)]),
                      Series("evals", [(4, 0.5)], line=False)], title="t & u", y_label="acc")
    root = ET.fromstring(str(svg))
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "t & u" in texts and "a<b>" in texts and "acc" in texts and "step" in texts
    assert any(t == "0.2" for t in texts) and "4" in texts  # y and x tick labels
    paths = list(root.iter("{http://www.w3.org/2000/svg}path"))
    assert len(paths) == 1 and paths[0].get("d").count("L") == 2  # the NaN point is dropped
    assert "no data yet" in str(line_chart([Series("x", [])], title="empty"))
    flat = ET.fromstring(str(line_chart([Series("x", [(0, 1.0), (5, 1.0)])], title="flat")))
    assert list(flat.iter("{http://www.w3.org/2000/svg}path"))
    assert ticks(0, 1, 5) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0] and ticks(1, 4, 6, integer=True) == [1, 2, 3, 4] and ticks(3, 97, 5) == [0, 20, 40, 60, 80, 100]
    iv = ET.fromstring(str(interval_chart(0.05, 0.02, 0.08, per_seed=[0.04, 0.06], threshold=0.01, confidence=0.8)))
    label = iv.get("aria-label")
    assert "+5.00 points" in label and "80% interval +2.00 … +8.00" in label


def test_long_series_are_decimated_keeping_spikes():
    pts = [(float(i), 0.5) for i in range(10_000)]
    pts[7_777] = (7_777.0, 9.0)
    few = decimate(pts, 0, 9_999, 200)
    assert len(few) <= 400 and (7_777.0, 9.0) in few and few == sorted(few)
    svg = str(line_chart([Series("grad_norm", pts)], title="long"))
    assert len(svg) < 40_000 and 'class="tick">10<' in svg  # the y axis reaches the spike


def test_lineage_tree_shows_a_fork_beside_the_mainline(home, library):
    store = Store.for_home(home)
    store.add_policy_version(PolicyVersion(id=f"{CID}:r00:control", campaign_id=CID, parent_id=f"{CID}:r00:segment",
                                           harness_version="h0", checkpoint="ck", run_name=None, mlflow_run_id=None,
                                           eval_accuracy=0.31, step=8, created=T0 + timedelta(minutes=6)))
    tree = client(home, library, mlflow_url="http://127.0.0.1:5000").get(f"/campaigns/{CID}").text
    lineage = tree.split('id="lineage"')[1].split("</section>")[0]
    assert lineage.index("r00 segment") < lineage.index("fork") < lineage.index("r00 control")
    assert 'class="node mainline"' in lineage and "r00 promoted" in lineage
    assert 'href="http://127.0.0.1:5000/#/runs/run-seg0"' in lineage  # MLflow ids become links with --mlflow-url


def test_cli_and_dashboard_share_reviews_summary_and_history(home, library):
    """`review approve`, `campaign status` and `skills history` run the same functions (evotrainer.reports.summaries)."""
    from evotrainer.cli import app

    runner = CliRunner()
    h = ["--home", str(home)]
    r = runner.invoke(app, ["review", "reject", f"{CID}:r01:p1", "--comment", " ", "--reviewer", "bo", *h])
    assert r.exit_code == 2 and "needs a comment" in r.output
    r = runner.invoke(app, ["review", "approve", f"{CID}:r01:p1", "--reviewer", "bo", *h])
    assert r.exit_code == 0 and "approved" in r.output
    page = client(home, library).get(f"/proposals/{CID}:r01:p1").text
    assert "by <strong>bo</strong>" in page and 'id="review-form"' not in page
    doc = json.loads(runner.invoke(app, ["campaign", "status", CID, "--json", *h]).stdout)
    assert doc["budget"] == {"spent": 12, "total": 100} and doc["accuracy"] == {"start": 0.2, "end": 0.36}
    assert doc["decisions"][0]["old"] is None and doc["decisions"][0]["new"] == 0.28
    hist = json.loads(runner.invoke(app, ["skills", "history", "clip-higher", "--json", "--library", str(library), *h]).stdout)
    assert [x["proposal"] for x in hist["proposals"]] == [f"{CID}:r00:p0", "other-20261101130000:r00:p0",
                                                          f"{CID}:r01:p0"]  # across campaigns, oldest first


def test_a_running_campaign_without_a_live_owner_is_interrupted_everywhere(home, library):
    """Stored 'running' whose owner died: the list, the page, the poll and the CLI all say interrupted, with the
    command that resumes it; there is nothing to stop. A live owner (this process holds the lease) is running."""
    from evotrainer.cli import app

    store = Store.for_home(home)
    store.set_campaign(CID, status="running")
    c = client(home, library)
    assert 'b-interrupted' in c.get("/").text
    page = c.get(f"/campaigns/{CID}").text
    assert 'id="interrupted"' in page and f"evotrainer campaign resume {CID} --home {home}" in page
    assert 'id="stop-campaign"' not in page
    assert c.get(f"/campaigns/{CID}/state.json").json()["status"] == "interrupted"
    plain = CliRunner().invoke(app, ["campaign", "status", "--home", str(home)])
    assert f"{CID}  interrupted" in plain.stdout
    signed_in(c)
    r = c.post(f"/campaigns/{CID}/stop", data={"csrf_token": csrf_of(c)}, headers={"Origin": BASE})
    assert r.status_code == 409 and "interrupted" in r.text
    lease = store.acquire_lease(CID, "resume")
    try:
        page = c.get(f"/campaigns/{CID}").text
        assert 'b-running' in page and 'id="owner"' in page and 'id="stop-campaign"' in page
    finally:
        store.release_lease(CID, lease.token)
