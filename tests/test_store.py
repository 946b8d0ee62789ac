"""The campaign store on real databases: round trips, idempotent writes, constraints, two processes, migrations.

Every test that takes ``db`` (a URL) runs twice: on a SQLite file in tmp_path and on a fresh database of a real
PostgreSQL server started for the session (``tests/postgres.py``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import CheckConstraint, create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

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
    Review,
)
from evotrainer.core.errors import EvoError
from evotrainer.store import NotFound, Store, StoreError, alembic_config
from evotrainer.store.models import Base, include_name, is_fts_table

T0 = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)


def url_of(path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path) -> str:
    """The store's URL: a SQLite file in a folder that does not exist yet, or a new PostgreSQL database."""
    if request.param == "postgresql":
        return request.getfixturevalue("postgres").new_database()
    return url_of(tmp_path / "fresh" / "state.db")


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


@pytest.fixture()
def store(db):
    with Store(db) as s:
        yield s


@pytest.fixture()
def campaign(store):
    return store.create_campaign("c1", "first", {"task": "arith", "rounds": 3}, "thread-1")


def proposal(pid: str = "p1", campaign_id: str = "c1", *, created: datetime = T0, **kw) -> Proposal:
    base = dict(
        id=pid, campaign_id=campaign_id, round=1, knob="grpo.epsilon_high", old=0.2, new={"v": [0.28, None]},
        hypothesis=Hypothesis(symptom="entropy_collapse", cause="clip too tight", change="raise epsilon_high",
                              expected_effect="entropy stays up, +2 points"),
        rationale="see findings", cited_skills=["clip-higher"], brain="rules", status="pending_review",
        harness_version="h0", created=created,
    )
    base.update(kw)
    return Proposal(**base)


def finding(symptom: str = "dead_groups", severity: str = "warning", **kw) -> Finding:
    return Finding(symptom=symptom, diagnostic=f"d_{symptom}", version="1", severity=severity, confidence=0.7,
                   steps=(3, 9), metrics={"share": 0.4}, examples=[Example(rollout_id="r:1", step=3, reward=0.0)],
                   explanation=f"{symptom} seen", **kw)


def stats(effect: float = 0.03) -> BacktestStats:
    return BacktestStats(n_pairs=3, effect=effect, ci_low=effect - 0.01, ci_high=effect + 0.01, confidence=0.9,
                         method="paired-t", control_mean=0.5, treatment_mean=0.5 + effect)


# ---------------------------------------------------------------------------------------------- migrations
def test_migration_head_creates_exactly_the_orm_tables(db, store):
    engine = create_engine(db)
    try:
        insp = inspect(engine)
        tables = set(insp.get_table_names()) - {"alembic_version"}
        assert {t for t in tables if not is_fts_table(t)} == set(Base.metadata.tables)
        assert ("skills_fts" in tables) == is_sqlite(db)  # SQLite: the skills' full-text index (migration 0002)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"include_name": include_name}), Base.metadata)
        assert diff == [], f"models.py and the migrations differ; add a migration: {diff}"

        def norm(sql: str) -> str:
            return re.sub(r"\s+", " ", sql).strip()

        for name, table in Base.metadata.tables.items():  # autogenerate does not compare CHECK constraints
            declared = {c.name: norm(str(c.sqltext)) for c in table.constraints if isinstance(c, CheckConstraint)}
            reflected = {c["name"]: norm(c["sqltext"]) for c in insp.get_check_constraints(name)}
            if not is_sqlite(db):  # PostgreSQL rewrites the text (= ANY (ARRAY[…])): compare the allowed values
                declared, reflected = ({k: sorted(re.findall(r"'([^']*)'", v)) for k, v in d.items()}
                                       for d in (declared, reflected))
            assert reflected == declared, name
    finally:
        engine.dispose()


def test_migrations_are_idempotent_and_reversible(db, store):
    Store(db).close()  # second open: already at head, nothing to do
    cfg = alembic_config(db)
    command.downgrade(cfg, "base")
    engine = create_engine(db)
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    engine.dispose()
    with Store(db) as again:  # opening upgrades back to head
        assert again.list_campaigns() == []


# ---------------------------------------------------------------------------------------------- campaigns
def test_campaign_round_trip_and_create_is_idempotent(store, campaign):
    assert campaign.status == "created" and campaign.spec == {"task": "arith", "rounds": 3}
    assert campaign.created.tzinfo is not None and campaign.created.utcoffset() == timedelta(0)
    again = store.create_campaign("c1", "other name", {"x": 1}, "thread-2")
    assert again == campaign == store.get_campaign("c1")
    assert store.list_campaigns() == [campaign]

    upd = store.set_campaign("c1", status="running", mainline_version="pv0", mlflow_run_id="m1", error="boom")
    # stored 'running' with nobody holding the lease reads as interrupted (see test_lease_* for the owner side)
    assert (upd.status, upd.mainline_version, upd.mlflow_run_id, upd.error) == ("interrupted", "pv0", "m1", "boom")
    assert upd.updated >= campaign.updated and upd.created == campaign.created
    cleared = store.set_campaign("c1", error=None)
    assert cleared.error is None and cleared.status == "interrupted" and cleared.mainline_version == "pv0"
    with pytest.raises(StoreError, match="invalid campaign status 'runing'.*waiting_review"):
        store.set_campaign("c1", status="runing")


def test_not_found_names_the_id_and_what_exists(store):
    with pytest.raises(NotFound, match="campaign 'nope' not found; the store has no campaigns yet"):
        store.get_campaign("nope")
    for i in range(7):
        store.create_campaign(f"camp-{i}", "n", {}, "t")
    with pytest.raises(NotFound) as err:
        store.get_campaign("camp-x")
    msg = str(err.value)
    assert "'camp-x'" in msg and "camp-6" in msg and "…" in msg
    assert isinstance(err.value, StoreError) and isinstance(err.value, EvoError)
    with pytest.raises(NotFound, match="proposal 'p9' not found"):
        store.get_proposal("p9")
    with pytest.raises(NotFound, match="harness version 'h9' not found"):
        store.get_harness_version("h9")
    with pytest.raises(NotFound, match="policy version 'pv9' not found"):
        store.get_policy_version("pv9")
    with pytest.raises(NotFound, match="backtest 'b9' not found"):
        store.list_branches("b9")
    with pytest.raises(NotFound, match="campaign 'ghost' not found"):  # a write for an unknown parent
        store.add_proposal(proposal(campaign_id="ghost"))


# ---------------------------------------------------------------------------------------------- versions
def test_harness_and_policy_versions(store, campaign):
    h0 = store.add_harness_version("h0", None, {"grpo": {"epsilon_high": 0.2}}, [])
    assert store.add_harness_version("h0", None, {"changed": True}, [{"x": 1}]) == h0 == store.get_harness_version("h0")
    h1 = store.add_harness_version("h1", "h0", {"grpo": {"epsilon_high": 0.28}},
                                   [{"knob": "grpo.epsilon_high", "old": 0.2, "new": 0.28}])
    assert h1.parent == "h0" and h1.diff[0]["new"] == 0.28
    with pytest.raises(NotFound, match="harness version 'hx'"):
        store.add_harness_version("h2", "hx", {}, [])

    pv0 = PolicyVersion(id="pv0", campaign_id="c1", parent_id=None, harness_version="h0", checkpoint="/ck/0",
                        run_name="base", mlflow_run_id=None, eval_accuracy=0.41, step=0, created=T0)
    pv1 = pv0.model_copy(update=dict(id="pv1", parent_id="pv0", harness_version="h1", checkpoint="/ck/1",
                                     eval_accuracy=0.45, step=100, created=T0 + timedelta(minutes=5)))
    with pytest.raises(NotFound, match="policy version 'pv0'"):
        store.add_policy_version(pv1)  # parent not stored yet
    assert store.add_policy_version(pv0) == pv0
    assert store.add_policy_version(pv1) == pv1
    assert store.add_policy_version(pv1.model_copy(update={"eval_accuracy": 0.99})) == pv1  # first write wins
    assert store.get_policy_version("pv1") == pv1
    assert store.policy_lineage("c1") == [pv0, pv1]
    with pytest.raises(NotFound, match="harness version 'h7'"):
        store.add_policy_version(pv0.model_copy(update={"id": "pv2", "harness_version": "h7"}))


# ---------------------------------------------------------------------------------------------- findings
def test_findings_are_stored_once_per_run_and_round(store, campaign):
    fs = [finding("dead_groups"), finding("entropy_collapse", "critical")]
    assert store.add_findings("c1", 1, "run-a", fs) == 2
    assert store.add_findings("c1", 1, "run-a", [finding("plateau")]) == 2  # re-run: nothing replaced
    assert store.add_findings("c1", 2, "run-a", [finding("plateau", "info")]) == 1
    assert store.list_findings("c1", round=1) == fs
    assert store.list_findings("c1") == fs + [finding("plateau", "info")]
    assert store.list_findings("c1", round=1)[0].steps == (3, 9)
    assert store.list_findings("c1", round=3) == []


# ---------------------------------------------------------------------------------------------- proposals, reviews
def test_proposals_round_trip_filter_and_idempotent(store, campaign):
    store.create_campaign("c2", "second", {}, "t2")
    p1 = proposal("p1", created=T0)
    p2 = proposal("p2", created=T0 + timedelta(seconds=1), old=None, new=3, round=2)
    p3 = proposal("p3", "c2", created=T0 + timedelta(seconds=2), status="approved")
    for p in (p2, p1, p3):
        assert store.add_proposal(p) == p
    assert store.add_proposal(p1.model_copy(update={"knob": "optim.lr", "status": "approved"})) == p1
    assert store.get_proposal("p2") == p2 and store.get_proposal("p2").old is None
    assert store.get_proposal("p1").new == {"v": [0.28, None]}
    assert [p.id for p in store.list_proposals()] == ["p1", "p2", "p3"]
    assert [p.id for p in store.list_proposals(campaign_id="c1", round=2)] == ["p2"]
    assert [p.id for p in store.list_proposals(status="approved")] == ["p3"]
    assert [p.id for p in store.pending_reviews()] == ["p1", "p2"]
    assert store.set_proposal_status("p2", "skipped_budget").status == "skipped_budget"
    assert [p.id for p in store.pending_reviews()] == ["p1"]
    with pytest.raises(StoreError, match="invalid proposal status 'done'"):
        store.set_proposal_status("p1", "done")


def test_review_moves_status_once_and_conflicts_raise(store, campaign):
    store.add_proposal(proposal("p1"))
    store.add_proposal(proposal("p2", created=T0 + timedelta(seconds=1)))
    assert store.get_review("p1") is None
    r = Review(proposal_id="p1", verdict="approve", reviewer="ana", comment="ok", at=T0)
    assert store.add_review(r) == r
    assert store.get_proposal("p1").status == "approved"
    assert store.add_review(r.model_copy(update={"comment": "again", "reviewer": "bob"})) == r
    with pytest.raises(StoreError, match=r"'p1' was already reviewed: approve by ana.*refusing reject by bob"):
        store.add_review(Review(proposal_id="p1", verdict="reject", reviewer="bob", comment="no", at=T0))
    assert store.get_review("p1") == r and store.get_proposal("p1").status == "approved"

    store.add_review(Review(proposal_id="p2", verdict="reject", reviewer="bob", comment="risky", at=T0))
    assert store.get_proposal("p2").status == "rejected"
    assert store.pending_reviews() == []

    store.add_proposal(proposal("p3", status="promoted"))
    with pytest.raises(StoreError, match="'p3' is promoted"):
        store.add_review(Review(proposal_id="p3", verdict="approve", reviewer="ana", comment="", at=T0))
    assert store.get_review("p3") is None
    with pytest.raises(NotFound, match="proposal 'p4'"):
        store.add_review(Review(proposal_id="p4", verdict="approve", reviewer="ana", comment="", at=T0))



def test_proposal_pages_counts_citations_and_batched_reviews(store, campaign):
    """What the UI asks for with 1,000 proposals: pages, counts, citing proposals, reviews/decisions in one query."""
    store.create_campaign("c2", "second", {}, "t2")
    for i in range(7):
        store.add_proposal(proposal(f"p{i}", "c1" if i < 5 else "c2", created=T0 + timedelta(seconds=i),
                                    cited_skills=["clip-higher", "x_y"] if i % 2 else ["clip-higher-v2"]))
    assert [p.id for p in store.list_proposals(limit=3)] == ["p0", "p1", "p2"]
    assert [p.id for p in store.list_proposals("c1", limit=2, offset=3)] == ["p3", "p4"]
    assert store.count_proposals() == 7 and store.count_proposals("c1") == 5
    assert store.count_proposals(status="approved") == 0
    assert [p.id for p in store.pending_reviews(limit=2, offset=5)] == ["p5", "p6"]
    # exact slug membership: 'clip-higher' is not found inside 'clip-higher-v2'; LIKE wildcards are literal
    assert [p.id for p in store.list_proposals(cites="clip-higher")] == ["p1", "p3", "p5"]
    assert [p.id for p in store.list_proposals(cites="clip-higher", limit=1, offset=1)] == ["p3"]
    assert [p.id for p in store.list_proposals(cites="x_y")] == ["p1", "p3", "p5"]
    assert store.list_proposals(cites="x%y") == [] and store.list_proposals(cites="clip") == []
    assert store.proposal_counts() == {"c1": {"pending_review": 5}, "c2": {"pending_review": 2}}
    r = Review(proposal_id="p1", verdict="approve", reviewer="ana", comment="", at=T0)
    store.add_review(r)
    d = Decision(proposal_id="p1", outcome="reject", reasons=["CI below 0"], stats=stats(-0.02), at=T0)
    store.add_decision(d)
    assert store.get_reviews(["p0", "p1", "nope"]) == {"p1": r}
    assert store.get_decisions(["p1", "p2"]) == {"p1": d} and store.get_decisions([]) == {}
    assert store.proposal_counts()["c1"] == {"pending_review": 4, "approved": 1}
    store.ledger_add(LedgerEntry(campaign_id="c1", key="a", kind="segment", run_name="a", steps=5, at=T0))
    store.ledger_add(LedgerEntry(campaign_id="c1", key="b", kind="branch", run_name="b", steps=3, at=T0))
    assert store.ledger_totals() == {"c1": 8}


# ---------------------------------------------------------------------------------------------- backtests, decisions
def test_backtests_branches_and_stats(store, campaign):
    store.add_proposal(proposal("p1"))
    store.add_proposal(proposal("p2"))
    bt = store.add_backtest("bt1", "c1", 1, ["p1", "p2"], [0, 1], 50)
    assert store.add_backtest("bt1", "c1", 9, ["p1"], [7], 1) == bt == store.get_backtest("bt1")
    assert (bt.proposal_ids, bt.seeds, bt.branch_steps, bt.stats) == (["p1", "p2"], [0, 1], 50, {})
    with pytest.raises(NotFound, match="proposal 'p9'"):
        store.add_backtest("bt2", "c1", 1, ["p9"], [0], 50)

    control = BranchResult(backtest_id="bt1", proposal_id=None, role="control", seed=0, run_name="ctl-0",
                           status="finished", eval_accuracy=0.5, train_reward=0.4, gate_passed=True, steps=50)
    treat = BranchResult(backtest_id="bt1", proposal_id="p1", role="treatment", seed=0, run_name="p1-0",
                         status="failed", error="NaN loss", gate_passed=False, gate_reasons=["nan"], steps=12)
    assert store.add_branch(control) == control
    assert store.add_branch(control.model_copy(update={"eval_accuracy": 0.9})) == control  # NULL proposal still unique
    assert store.add_branch(treat) == treat
    assert store.add_branch(treat) == treat
    other_seed = control.model_copy(update={"seed": 1})
    store.add_branch(other_seed)
    assert store.list_branches("bt1") == [control, treat, other_seed]

    s1 = stats(0.03)
    assert store.set_backtest_stats("bt1", "p1", s1).stats == {"p1": s1}
    store.set_backtest_stats("bt1", "p2", stats(-0.01))
    assert store.set_backtest_stats("bt1", "p1", s1).stats == {"p1": s1, "p2": stats(-0.01)}
    with pytest.raises(StoreError, match="'p9' is not part of backtest 'bt1'; it tests: p1, p2"):
        store.set_backtest_stats("bt1", "p9", s1)
    assert [b.id for b in store.list_backtests("c1")] == ["bt1"]
    assert store.campaign_branches("c1") == [control, treat, other_seed]
    store.create_campaign("c2", "second", {}, "t2")
    assert store.campaign_branches("c2") == []


def test_decisions_one_per_proposal(store, campaign):
    store.add_proposal(proposal("p1"))
    store.add_proposal(proposal("p2"))
    d1 = Decision(proposal_id="p1", outcome="promote", reasons=["CI above 0"], stats=stats(), at=T0)
    d2 = Decision(proposal_id="p2", outcome="blocked", reasons=["gate"], gate_reasons=["kl_blowup"],
                  at=T0 + timedelta(seconds=1))
    assert store.add_decision(d1) == d1
    assert store.add_decision(d1.model_copy(update={"outcome": "reject"})) == d1
    assert store.add_decision(d2) == d2 and store.get_decision("p2").stats is None
    assert store.list_decisions("c1") == [d1, d2]
    assert store.get_decision("p1") == d1


# ---------------------------------------------------------------------------------------------- ledger, events
def test_ledger_never_counts_a_key_twice(store, campaign):
    store.create_campaign("c2", "second", {}, "t2")
    e1 = LedgerEntry(campaign_id="c1", key="segment:0", kind="segment", run_name="main-0", steps=100, at=T0)
    e2 = LedgerEntry(campaign_id="c1", key="branch:bt1:p1:0", kind="branch", run_name="p1-0", steps=50, at=T0)
    assert store.ledger_add(e1) is True
    assert store.ledger_add(e1) is False
    assert store.ledger_add(e1.model_copy(update={"steps": 999})) is False
    assert store.ledger_add(e2) is True
    assert store.ledger_add(e1.model_copy(update={"campaign_id": "c2"})) is True  # keys are per campaign
    assert store.ledger_total("c1") == 150 and store.ledger_total("c2") == 100
    assert store.ledger("c1") == [e1, e2]
    store.create_campaign("c3", "empty", {}, "t3")
    assert store.ledger_total("c3") == 0


def test_events_log(store, campaign):
    a = store.log_event("c1", "started", {"rounds": 3})
    b = store.log_event("c1", "round", {"n": 1, "findings": ["dead_groups"]})
    c = store.log_event("c1", "round", {"n": 2})
    assert store.events("c1") == [a, b, c]
    assert store.events("c1", kind="round") == [b, c]
    assert store.events("c1", limit=2) == [b, c]
    assert a.at.tzinfo is not None and b.message["findings"] == ["dead_groups"]
    with pytest.raises(StoreError, match="event kind"):
        store.log_event("c1", "", {})


def test_timestamps_come_back_in_utc(store, campaign):
    plus2 = timezone(timedelta(hours=2))
    store.add_proposal(proposal("p1", created=datetime(2026, 5, 1, 12, 0, tzinfo=plus2)))
    store.add_proposal(proposal("p2", created=datetime(2026, 5, 1, 12, 0)))  # naive: taken as UTC
    assert store.get_proposal("p1").created == datetime(2026, 5, 1, 10, 0, tzinfo=timezone.utc)
    assert store.get_proposal("p1").created.tzinfo == timezone.utc
    assert store.get_proposal("p2").created == datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)


# ---------------------------------------------------------------------------------------------- the database itself
@pytest.mark.parametrize("sql", [
    "UPDATE campaigns SET status = 'paused' WHERE id = 'c1'",
    "UPDATE proposals SET status = 'maybe' WHERE id = 'p1'",
    "UPDATE reviews SET verdict = 'meh'",
    "UPDATE decisions SET outcome = 'win'",
    "UPDATE branches SET role = 'baseline'",
    "UPDATE branches SET status = 'running'",
    "UPDATE ledger SET kind = 'eval'",
    "UPDATE findings SET severity = 'fatal'",
])
def test_check_constraints_are_enforced_by_the_database(db, store, campaign, sql):
    store.add_proposal(proposal("p1"))
    store.add_review(Review(proposal_id="p1", verdict="approve", reviewer="ana", comment="", at=T0))
    store.add_decision(Decision(proposal_id="p1", outcome="promote", reasons=[], at=T0))
    store.add_backtest("bt1", "c1", 1, ["p1"], [0], 10)
    store.add_branch(BranchResult(backtest_id="bt1", proposal_id="p1", role="treatment", seed=0, run_name=None,
                                  status="finished"))
    store.ledger_add(LedgerEntry(campaign_id="c1", key="k", kind="segment", run_name=None, steps=1, at=T0))
    store.add_findings("c1", 1, "r", [finding()])
    engine = create_engine(db)
    try:
        with pytest.raises(IntegrityError, match="CHECK constraint failed|violates check constraint"):
            with engine.begin() as conn:
                assert conn.execute(text(sql)).rowcount  # (never reached: the row exists and the CHECK fires)
    finally:
        engine.dispose()


def test_foreign_keys_are_on(db, store, campaign):
    engine = create_engine(db)
    try:
        with pytest.raises(IntegrityError, match="FOREIGN KEY|violates foreign key constraint"):
            with engine.begin() as conn:
                if is_sqlite(db):
                    conn.execute(text("PRAGMA foreign_keys = ON"))
                conn.execute(text("INSERT INTO events (campaign_id, at, kind, message) "
                                  "VALUES ('ghost', '2026-01-01 00:00:00', 'x', '{}')"))
    finally:
        engine.dispose()


def test_two_stores_share_the_file_and_a_reader_does_not_block_a_writer(db):
    a = Store(db, busy_timeout_s=1.0)
    b = Store(db, busy_timeout_s=1.0)
    try:
        a.create_campaign("c1", "n", {}, "t")
        assert b.get_campaign("c1").name == "n"
        b.add_proposal(proposal("p1"))
        assert a.pending_reviews()[0].id == "p1"

        reader = create_engine(db)
        try:
            with reader.connect() as conn:
                if is_sqlite(db):
                    assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
                    conn.exec_driver_sql("BEGIN")
                else:  # a snapshot for the whole transaction, as SQLite's WAL reader has
                    conn = conn.execution_options(isolation_level="REPEATABLE READ")
                assert conn.execute(text("SELECT count(*) FROM proposals")).scalar() == 1  # holds a read snapshot
                b.add_review(Review(proposal_id="p1", verdict="approve", reviewer="cli", comment="", at=T0))
                assert a.get_proposal("p1").status == "approved"  # committed while the reader is open
                assert conn.execute(text("SELECT status FROM proposals")).scalar() == "pending_review"  # snapshot
                conn.exec_driver_sql("COMMIT") if is_sqlite(db) else conn.commit()
                assert conn.execute(text("SELECT status FROM proposals")).scalar() == "approved"
        finally:
            reader.dispose()
    finally:
        a.close()
        b.close()


def test_a_new_file_held_by_another_opener_is_waited_for_not_refused(tmp_path):
    """Switching a file to WAL needs exclusive access, and while another connection holds the write lock SQLite
    refuses it at once, without the busy handler: an opener failed with "database is locked" (seen in CI)."""
    import sqlite3
    import threading

    path = tmp_path / "state.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE other (x)")  # a file in rollback mode ...
    holder.execute("BEGIN IMMEDIATE")  # ... whose write lock another opener holds (its own migration, say)
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        s = Store(f"sqlite:///{path}", busy_timeout_s=10.0)
        s.create_campaign("c", "n", {}, "t")
        assert s.get_campaign("c").id == "c"
        s.close()
    finally:
        release.join()
        holder.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_sqlite_checkpointer_waits_for_an_opener_holding_its_new_file(tmp_path, monkeypatch):
    """The LangGraph checkpoints file goes to WAL the same way (evotrainer.core.sqlite_wal)."""
    import sqlite3
    import threading

    from evotrainer.agent.checkpoints import CHECKPOINT_URL_ENV, checkpointer

    monkeypatch.delenv(CHECKPOINT_URL_ENV, raising=False)
    holder = sqlite3.connect(tmp_path / "checkpoints.db", isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE other (x)")
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        saver = checkpointer(tmp_path)
        assert saver.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        saver.conn.close()
    finally:
        release.join()
        holder.close()


def test_two_processes_open_a_new_file_at_once(db, tmp_path):
    url = db  # a file in a folder that does not exist yet, or an empty PostgreSQL database: both migrate it
    go = tmp_path / "go"
    code = ("import os, sys, time\nfrom evotrainer.store import Store\n"
            "while not os.path.exists(sys.argv[2]): time.sleep(0.005)\n"
            "s = Store(sys.argv[1]); s.create_campaign('c', 'n', {}, 't'); s.log_event('c', 'opened', {}); s.close()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, url, str(go)], stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    time.sleep(2)  # both imported and waiting at the line: they open the store together
    go.write_text("")
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(e[-1500:] for e in errors)  # the failing statement
    with Store(url) as s:
        assert [c.id for c in s.list_campaigns()] == ["c"]
        assert len(s.events("c")) == 2


WRITER = """
import os, sys, time
from datetime import datetime, timezone
from evotrainer.core.domain import LedgerEntry
from evotrainer.store import Store
s = Store(sys.argv[1])
while not os.path.exists(sys.argv[2]): time.sleep(0.005)
mine = 0
for i in range(30):  # the same keys as the other writer, interleaved with it
    mine += s.ledger_add(LedgerEntry(campaign_id='c', key=f'k{i}', kind='segment', run_name=None, steps=i,
                                     at=datetime.now(timezone.utc)))
    s.add_harness_version(f'h{i}', None, {'writer': os.getpid()}, [])
    s.log_event('c', 'write', {'pid': os.getpid(), 'i': i})
print(mine)
"""


def test_two_processes_write_the_same_keys_at_once_and_each_lands_once(db, tmp_path):
    with Store(db) as s:
        s.create_campaign("c", "n", {}, "t")
    go = tmp_path / "go"
    ps = [subprocess.Popen([sys.executable, "-c", WRITER, db, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True) for _ in range(2)]
    time.sleep(2)
    go.write_text("")
    outs = [p.communicate(timeout=180) for p in ps]
    assert [p.returncode for p in ps] == [0, 0], [e[-2000:] for _o, e in outs]
    with Store(db) as s:
        assert sum(int(o) for o, _e in outs) == 30  # every ledger key recorded by exactly one of them
        assert s.ledger_total("c") == sum(range(30)) and len(s.ledger("c")) == 30
        writers = {s.get_harness_version(f"h{i}").spec["writer"] for i in range(30)}
        assert writers <= {p.pid for p in ps}  # first write wins; a clash returned the winner's row
        assert len(s.events("c", kind="write")) == 60  # the log keeps every write of both


WAITER = """
import sys, time
from evotrainer.store import Store
s = Store(sys.argv[1])
print('waiting', flush=True)
deadline = time.monotonic() + 120
while s.get_review('p1') is None:  # what a campaign waiting for a review does (agent/campaign.py)
    if time.monotonic() > deadline:
        sys.exit('no review within 120 s')
    time.sleep(0.05)
r = s.get_review('p1')
print(r.verdict, r.reviewer, r.comment, s.get_proposal('p1').status)
"""


def test_a_review_approved_by_another_process_reaches_a_waiting_reader(db, tmp_path):
    from tests.conftest import REPO

    with Store(db) as s:
        s.create_campaign("c1", "n", {}, "t")
        s.add_proposal(proposal("p1"))
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, db], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    assert waiter.stdout.readline().strip() == "waiting", waiter.communicate()[1][-2000:]
    env = {**os.environ, "EVOTRAINER_STATE_URL": db}  # the CLI on another process, sharing the store by its URL
    cli = subprocess.run([sys.executable, "-m", "evotrainer.cli", "review", "approve", "p1", "--comment", "go",
                          "--reviewer", "ana", "--home", str(tmp_path / "home")], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=180)
    assert cli.returncode == 0, cli.stderr[-2000:]
    out, err = waiter.communicate(timeout=120)
    assert waiter.returncode == 0, err[-2000:]
    assert out.strip() == "approve ana go approved"


def test_for_home_uses_state_db_or_the_configured_url(tmp_path, monkeypatch):
    monkeypatch.delenv("EVOTRAINER_STATE_URL", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    with Store.for_home(home) as s:
        assert s.url == f"sqlite:///{home.resolve() / 'state.db'}"
        s.create_campaign("c1", "n", {}, "t")
    assert (home / "state.db").exists()

    elsewhere = tmp_path / "shared" / "campaigns.db"
    monkeypatch.setenv("EVOTRAINER_STATE_URL", url_of(elsewhere))
    with Store.for_home(home) as s:
        assert s.url == url_of(elsewhere)
        assert s.list_campaigns() == []
    assert elsewhere.exists()


# ---------------------------------------------------------------------------------------------- ownership (leases)
def _exited_process():
    """A ProcessRef of a real process that has exited (its pid is free, or belongs to someone else now)."""
    from evotrainer.core import procs

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ref = procs.ref(p.pid)
    p.kill()
    p.wait()
    return ref


def test_lease_refuses_a_live_owner_and_takes_over_a_gone_one(store, campaign):
    from evotrainer.core import procs
    from evotrainer.core.errors import CampaignBusy

    me = procs.this_process()
    lease = store.acquire_lease("c1", "resume")
    assert lease.took_over is None and (lease.owner.pid, lease.owner.host, lease.owner.live) == (me.pid, me.host, True)
    store.set_campaign("c1", status="running")
    assert store.get_campaign("c1").status == "running" and store.get_campaign("c1").owner.pid == me.pid
    other = procs.ProcessRef(me.host, 1, procs.start_time(1) or 0.0)  # any other live local process
    with pytest.raises(CampaignBusy, match=rf"owner pid {me.pid} on {re.escape(me.host)}.*campaign stop c1") as err:
        store.acquire_lease("c1", "resume", me=other)
    assert err.value.exit_code == 2
    assert store.renew_lease("c1", lease.token) and store.release_lease("c1", lease.token)
    assert store.get_campaign("c1").status == "interrupted" and store.get_campaign("c1").owner is None

    # the owner died: its lease is not live, the campaign reads interrupted, the next runner takes it over
    dead = _exited_process()
    store.acquire_lease("c1", "start", me=dead)
    camp = store.get_campaign("c1")
    assert (camp.status, camp.owner.pid, camp.owner.live) == ("interrupted", dead.pid, False)
    mine = store.acquire_lease("c1", "resume")
    assert mine.took_over.pid == dead.pid and mine.reason
    (ev,) = store.events("c1", kind="owner_takeover")
    assert ev.message["previous"]["pid"] == dead.pid and ev.message["by"]["pid"] == me.pid
    assert store.get_campaign("c1").status == "running"

    # a reused pid (same number, another start time) is not the owner: taken over, the living process untouched
    store.release_lease("c1", mine.token)
    store.acquire_lease("c1", "resume", me=procs.ProcessRef(me.host, me.pid, me.started - 1000.0))
    assert store.get_campaign("c1").status == "interrupted"
    again = store.acquire_lease("c1", "resume")
    assert "start time differs" in again.reason
    assert not store.renew_lease("c1", mine.token) and not store.release_lease("c1", mine.token)  # an old holder's token


def test_lease_from_another_host_lives_by_its_heartbeat(db, store, campaign):
    from evotrainer.core import procs
    from evotrainer.core.errors import CampaignBusy
    from evotrainer.store.ownership import STALE_AFTER_S

    far = procs.ProcessRef("another-host.example", 4242, 1.0)
    store.acquire_lease("c1", "resume", me=far)
    store.set_campaign("c1", status="running")
    assert store.get_campaign("c1").status == "running"  # its heartbeat is fresh
    with pytest.raises(CampaignBusy, match="owner pid 4242 on another-host.example"):
        store.acquire_lease("c1", "resume")
    old = datetime.now(timezone.utc) - timedelta(seconds=STALE_AFTER_S + 5)
    old = old.replace(tzinfo=None) if is_sqlite(db) else old  # SQLite stores naive UTC; PostgreSQL a timestamptz
    engine = create_engine(db)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE campaign_leases SET heartbeat = :t"), {"t": old})
    finally:
        engine.dispose()
    assert store.get_campaign("c1").status == "interrupted"
    assert "no heartbeat from another-host.example" in store.acquire_lease("c1", "resume").reason


def test_one_lease_among_processes_that_start_together(db, tmp_path):
    url = db
    with Store(url) as s:
        s.create_campaign("c", "n", {}, "t")
    go = tmp_path / "go"
    code = ("import os, sys, time\nfrom evotrainer.store import Store\nfrom evotrainer.core.errors import CampaignBusy\n"
            "s = Store(sys.argv[1])\nwhile not os.path.exists(sys.argv[2]): time.sleep(0.01)\n"
            "try:\n    s.acquire_lease('c', 'resume')\nexcept CampaignBusy as e:\n    print('busy', e); sys.exit(2)\n"
            "print('owner', os.getpid()); sys.stdout.flush(); time.sleep(3)\n")
    ps = [subprocess.Popen([sys.executable, "-c", code, url, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True) for _ in range(4)]
    time.sleep(2)  # let all four import and wait at the line
    go.write_text("")
    outs = [p.communicate(timeout=120) for p in ps]
    codes = sorted(p.returncode for p in ps)
    assert codes == [0, 2, 2, 2], outs
    (winner,) = [p.pid for p in ps if p.returncode == 0]
    assert all(f"owner pid {winner}" in out for p, (out, _e) in zip(ps, outs) if p.returncode == 2)


def test_recorded_processes_are_idempotent_and_forgotten(store, campaign):
    from evotrainer.core import procs

    me = procs.this_process()
    assert store.record_processes("c1", [me, me]) == 1
    assert store.record_processes("c1", [me]) == 0
    (r,) = store.list_processes("c1")
    assert (r.pid, r.host, r.role) == (me.pid, me.host, "worker") and abs(r.started - me.started) < 1e-6
    assert store.forget_processes("c1", [r.id]) == 1 and store.list_processes("c1") == []
