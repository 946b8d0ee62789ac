"""The skill library on real files and a real SQLite store: format, lint, index, retrieval, curation, CLI."""

from __future__ import annotations

import json
import shutil
from datetime import date, datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evotrainer.cli.skills import skills_app
from evotrainer.config.harness import HarnessSpec
from evotrainer.core.bm25 import BM25
from evotrainer.core.domain import BacktestStats, Decision, Finding, Hypothesis, Proposal
from evotrainer.core.errors import ConfigError
from evotrainer.library.candidates import to_candidates
from evotrainer.library.curation import (
    AddOp,
    CurationError,
    DeprecateOp,
    MergeOp,
    UpdateEvidenceOp,
    apply,
    known_mistake,
    read_log,
    record_outcome,
)
from evotrainer.library.format import SKILL_FILE, Evidence, Skill, dump_skill, parse_skill, section_problems
from evotrainer.library.index import library_key, sync, text_scores
from evotrainer.library.loader import CURATION_LOG, Library, lint_library, write_skill
from evotrainer.library.retrieve import retrieve, search
from evotrainer.store import Store

REPO = Path(__file__).resolve().parents[1]
SEEDS = REPO / "skills"
runner = CliRunner()

SKILL_BODY = """# Test skill

## When to use
When the test says so.

## Why it works
Because the mechanism is tested.

## How to apply
Set the knob.

## When not to
When the test says not to.
"""

MISTAKE_BODY = """## What was tried
Something.

## What went wrong
It failed.

## Correct approach
Something else.

## Generalisable strategy
Think first.

## Anti-patterns
- Doing it again.
"""


def write_text(root: Path, slug: str, text: str) -> Path:
    (root / slug).mkdir(parents=True, exist_ok=True)
    f = root / slug / SKILL_FILE
    f.write_text(text)
    return f


def skill_text(*, name="Test skill", symptom="entropy_collapse", knob="grpo.entropy_coef", op="set", arg="0.01",
               extra="", body=SKILL_BODY, kind="skill") -> str:
    return (f"---\nname: {name}\ndescription: a test entry\nkind: {kind}\ntriggers:\n- symptom: {symptom}\n"
            f"intervention:\n  knob: {knob}\n  op: {op}\n  arg: {arg}\nsources:\n- title: A paper\n{extra}---\n{body}")


def finding(symptom: str, severity: str = "critical", confidence: float = 0.9, metrics: dict | None = None,
            explanation: str | None = None) -> Finding:
    return Finding(symptom=symptom, diagnostic=symptom, version="1", severity=severity, confidence=confidence,
                   metrics=metrics or {}, explanation=explanation or f"{symptom} in the recent window")


def evidence(outcome: str, effect: float | None = -0.02, proposal: str = "p1", campaign: str = "c1", **kw) -> Evidence:
    return Evidence(campaign=campaign, task="arith", proposal=proposal, effect=effect,
                    ci_low=None if effect is None else effect - 0.01, ci_high=None if effect is None else effect + 0.01,
                    seeds=[0, 1, 2], outcome=outcome, date=date(2026, 1, 2), **kw)


@pytest.fixture()
def lib_dir(tmp_path) -> Path:
    """A copy of the seed library that a test may change."""
    dst = tmp_path / "skills"
    shutil.copytree(SEEDS, dst)
    return dst


@pytest.fixture()
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'state.db'}") as s:
        yield s


# ---------------------------------------------------------------------------------------------- seed library
def test_seed_library_lints_clean_and_is_big_enough():
    lib = Library.load(SEEDS)  # strict: raises on any problem
    assert lint_library(SEEDS) == []
    skills = [s for s in lib if s.kind == "skill"]
    assert len(skills) >= 12
    unavailable = [s.slug for s in skills if not s.intervention.available]
    assert len(unavailable) >= 4, unavailable
    assert all(s.intervention.unavailable_reason for s in skills if s.slug in unavailable)
    assert all(s.sources and s.evidence == [] and s.counters.uses == 0 for s in skills)
    for slug, arxiv in [("clip-higher", "2503.14476"), ("high-entropy-tokens", "2506.01939"),
                        ("asymmetric-error-penalty", "2602.21420"), ("no-std-scaling", "2503.20783")]:
        assert arxiv in [x.arxiv for x in lib.get(slug).sources], slug
    result = runner.invoke(skills_app, ["lint", "--library", str(SEEDS)])
    assert result.exit_code == 0, result.output
    assert f"ok: {len(lib)} entries" in result.stdout


def test_every_seed_file_round_trips_byte_for_byte():
    files = sorted(SEEDS.glob(f"*/{SKILL_FILE}"))
    assert len(files) >= 12
    for f in files:
        text = f.read_text()
        skill = parse_skill(text, f.parent.name)
        assert dump_skill(skill) == text, f"{f} is not in canonical form"
        assert parse_skill(dump_skill(skill), skill.slug) == skill


def test_hand_written_file_keeps_its_body_and_data_and_then_is_a_fixed_point(tmp_path):
    body = "\n# Title\n\nPreamble line with trailing spaces   \n\n" + SKILL_BODY.split("\n", 2)[2] + "\n\n```\n## not a heading\n```\n"
    text = ("---\n# a comment the canonical form drops\nversion: 3\nstatus: active\nkind: skill\n"
            "name: \"Hand written\"\ndescription: >\n  folded text\n  over two lines\n"
            "sources: [{title: X, arxiv: '2503.14476'}, {title: Y, url: 'https://example.org/y'}]\n"
            "counters: {helpful: 2, harmful: 1, uses: 4}\n"
            "intervention: {knob: data.difficulty, op: step, arg: 1}\n"
            "triggers:\n  - {symptom: too_easy, weight: 0.5, domains: [math],"
            " conditions: [{metric: all_correct_share, op: '>=', value: 0.6}]}\n"
            "evidence:\n  - {campaign: c1, task: arith, proposal: p1, effect: 0.03, ci_low: 0.01, ci_high: 0.05,"
            " seeds: [0, 1], outcome: promote, date: 2026-01-02, value: [2, 2]}\n"
            "---\n" + body)
    first = parse_skill(text, "hand-written")
    assert first.body == body  # verbatim, fenced pseudo-heading included
    assert first.description == "folded text over two lines\n"
    out = dump_skill(first)
    assert out != text and out.endswith(body)
    second = parse_skill(out, "hand-written")
    assert second == first
    assert dump_skill(second) == out
    assert out.index("name:") < out.index("kind:") < out.index("triggers:") < out.index("version:")
    # written by write_skill and read back by the loader: same entry
    write_skill(tmp_path / "lib", first)
    assert Library.load(tmp_path / "lib").get("hand-written") == first


# ---------------------------------------------------------------------------------------------- lint
def test_lint_reports_every_kind_of_malformed_file_with_path_and_field(tmp_path):
    root = tmp_path / "lib"
    write_text(root, "good", skill_text())
    bad = {
        "no-front-matter": ("# just markdown\n" + SKILL_BODY, "front matter", "must start with a '---' line"),
        "bad-yaml": ("---\nname: [unclosed\n---\n" + SKILL_BODY, "front matter", "not valid YAML at line"),
        "unknown-symptom": (skill_text(symptom="entropy_colapse"), "triggers.0.symptom", "unknown symptom 'entropy_colapse'"),
        "unknown-knob": (skill_text(knob="grpo.entropy_coeff"), "intervention", "unknown knob 'grpo.entropy_coeff'"),
        "bad-value": (skill_text(knob="grpo.loss_type", arg="token"), "intervention", "not a valid value of grpo.loss_type"),
        "bad-scale": (skill_text(knob="data.drop_all_wrong", op="scale", arg="2"), "intervention", "is not numeric"),
        "missing-section": (skill_text(body=SKILL_BODY.replace("## When not to", "## Caveats")), "body",
                            "missing section '## When not to'"),
        "mistake-sections": (skill_text(kind="mistake"), "body", "missing section '## What was tried'"),
        "unknown-key": (skill_text(extra="tags: [x]\n"), "tags", "unknown key; allowed here: name, description"),
        "bad-arxiv": (skill_text(extra="").replace("- title: A paper\n", "- title: A paper\n  arxiv: '25.1'\n"),
                      "sources.0.arxiv", "should match pattern"),
        "no-reason": (skill_text(extra="").replace("  arg: 0.01\n", "  arg: 0.01\n  available: false\n"),
                      "intervention", "needs unavailable_reason"),
        "Bad_Slug": (skill_text(), "slug", "not a valid slug"),
        "dangling-merge": (skill_text(extra="status: deprecated\nmerged_into: nowhere\ndeprecated_reason: merged\n"),
                           "merged_into", "'nowhere' is not an entry of this library"),
    }
    for slug, (text, _, _) in bad.items():
        write_text(root, slug, text)
    (root / "empty-folder").mkdir()
    (root / "README.md").write_text("not a skill; ignored")

    problems = lint_library(root)
    by_path = {}
    for p in problems:
        by_path.setdefault(Path(p.path).parent.name if p.path.endswith(SKILL_FILE) else Path(p.path).name, []).append(p)
    assert "good" not in by_path and "README.md" not in by_path
    assert [p.field for p in by_path["dangling-merge"]] == ["merged_into"]
    assert by_path["empty-folder"][0].field == "(file)"
    for slug, (_, field, message) in bad.items():
        got = by_path.get(slug)
        assert got, f"no problem reported for {slug}"
        assert any(p.field == field and message in p.message for p in got), (slug, [p.line() for p in got])
        assert all(p.path.endswith(f"{slug}/{SKILL_FILE}") for p in got)

    lib = Library.load(root, strict=False)
    assert [s.slug for s in lib] == ["dangling-merge", "good"]  # parseable; only its link is wrong
    with pytest.raises(ConfigError) as err:
        Library.load(root)
    assert f"unknown-symptom/{SKILL_FILE}: triggers.0.symptom: unknown symptom" in str(err.value)

    result = runner.invoke(skills_app, ["lint", "--library", str(root)])
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == len(problems)
    assert any(f"unknown-knob/{SKILL_FILE}: intervention: " in line for line in lines)
    as_json = json.loads(runner.invoke(skills_app, ["lint", "--json", "--library", str(root)]).stdout)
    assert len(as_json["problems"]) == len(problems) and as_json["entries"] == 2


def test_body_sections_unknown_duplicate_and_empty():
    dup = SKILL_BODY + "\n## When to use\nagain\n"
    assert any("appears twice" in p for p in section_problems(dup, "skill"))
    empty = SKILL_BODY.replace("Set the knob.", "")
    assert section_problems(empty, "skill") == ["section '## How to apply' is empty"]
    assert section_problems(MISTAKE_BODY, "mistake") == []
    assert section_problems("## when to use\nx\n## WHY IT WORKS\nx\n## How to apply\nx\n## When not to\nx\n", "skill") == []


def test_missing_library_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="skill library not found"):
        Library.load(tmp_path / "nope")
    result = runner.invoke(skills_app, ["list", "--library", str(tmp_path / "nope")])
    assert result.exit_code == 2


# ---------------------------------------------------------------------------------------------- retrieval
ENTROPY = finding("entropy_collapse", metrics={"ratio": 0.1},
                  explanation="mean entropy fell from 1.3 to 0.1: the policy stopped exploring")
TRUNCATION = finding("truncation", metrics={"truncated_share": 0.45},
                     explanation="45% of completions hit max_completion_length without finishing")


@pytest.mark.parametrize("with_store", [False, True])
def test_retrieval_puts_the_right_skill_first(with_store, store):
    lib = Library.load(SEEDS)
    st = store if with_store else None
    hits = retrieve(lib, [ENTROPY], domain="math", k=5, store=st)
    assert hits[0].slug in ("clip-higher", "entropy-bonus"), [h.slug for h in hits]
    assert all("entropy_collapse" in h.skill.symptoms for h in hits)
    assert hits[0].trigger == pytest.approx(0.9) and 0 < hits[0].text <= 1 and hits[0].evidence == 0
    assert hits[0].score == pytest.approx(hits[0].trigger + 0.35 * hits[0].text)
    assert "entropy_collapse critical" in hits[0].explain()

    hits = retrieve(lib, [TRUNCATION], k=3, store=st)
    assert hits[0].slug in ("overlong-penalty", "longer-completions"), [h.slug for h in hits]
    # two symptoms at once: a skill answering both outranks the ones answering one
    both = retrieve(lib, [finding("dead_groups", "warning", 0.8), finding("too_easy", "warning", 0.8)], k=3, store=st)
    assert both[0].slug in ("drop-solved", "difficulty-targeted") and len(both[0].matched) == 2


def test_retrieval_a_deprecated_skill_is_not_first(lib_dir):
    lib = Library.load(lib_dir)
    s = lib.get("clip-higher")
    write_skill(lib_dir, s.model_copy(update={"status": "deprecated", "deprecated_reason": "refuted twice",
                                              "counters": s.counters.model_copy(update={"harmful": 2, "uses": 2})}))
    lib = Library.load(lib_dir)
    hits = retrieve(lib, [ENTROPY], k=100)
    assert "clip-higher" not in [h.slug for h in hits]
    hits = retrieve(lib, [ENTROPY], k=100, include_deprecated=True)
    assert hits[0].slug != "clip-higher" and hits[-1].slug == "clip-higher"


def test_retrieval_conditions_domains_evidence_and_availability(tmp_path):
    root = tmp_path / "lib"
    write_text(root, "conditional", skill_text(name="Conditional", extra="").replace(
        "- symptom: entropy_collapse\n", "- symptom: entropy_collapse\n  conditions:\n  - {metric: ratio, op: '<', value: 0.3}\n"))
    write_text(root, "code-only", skill_text(name="Code only").replace(
        "- symptom: entropy_collapse\n", "- symptom: entropy_collapse\n  domains: [code]\n"))
    write_text(root, "plain", skill_text(name="Plain"))
    write_text(root, "proven", skill_text(name="Proven", extra=(
        "counters: {helpful: 2, harmful: 0, uses: 2}\nevidence:\n"
        "- {campaign: c, task: arith, proposal: p1, effect: 0.04, outcome: promote, date: 2026-01-01}\n"
        "- {campaign: c, task: arith, proposal: p2, effect: 0.05, outcome: promote, date: 2026-01-02}\n")))
    write_text(root, "not-yet", skill_text(name="Not yet").replace(
        "  arg: 0.01\n", "  arg: 0.01\n  available: false\n  unavailable_reason: needs a new knob\n"))
    lib = Library.load(root)
    low = {h.slug: h for h in retrieve(lib, [finding("entropy_collapse", metrics={"ratio": 0.1})], domain="math", k=10)}
    high = {h.slug: h for h in retrieve(lib, [finding("entropy_collapse", metrics={"ratio": 0.8})], domain="math", k=10)}
    unknown = {h.slug: h for h in retrieve(lib, [finding("entropy_collapse")], domain="math", k=10)}
    assert low["conditional"].trigger == pytest.approx(0.9)
    assert high["conditional"].trigger == 0  # condition fails: the trigger does not fire (text may still match)
    assert unknown["conditional"].trigger == pytest.approx(0.45)  # metric missing: halved
    assert low["code-only"].trigger == pytest.approx(0.45)  # domain mismatch: halved
    assert retrieve(lib, [finding("entropy_collapse")], domain="code", k=10)[0].slug in ("code-only", "proven")
    assert low["proven"].evidence > 0.3 and low["plain"].evidence == 0
    ranked = [h.slug for h in retrieve(lib, [finding("entropy_collapse", metrics={"ratio": 0.1})], domain="math", k=10)]
    assert ranked[0] == "proven" and ranked[-1] == "not-yet"
    assert low["not-yet"].score == pytest.approx(0.5 * (low["not-yet"].trigger + 0.35 * low["not-yet"].text))
    assert all(h.trigger == 0 for h in retrieve(lib, [finding("nan")], k=5))  # no trigger: at most text matches


def test_search_and_bm25(store):
    lib = Library.load(SEEDS)
    with_store = search(lib, "soft overlong punishment length buffer", store=store)
    without = search(lib, "soft overlong punishment length buffer")
    assert with_store[0].slug == without[0].slug == "overlong-penalty"
    assert with_store[0].text == 1.0
    assert search(lib, "zzzz qqqq") == [] and search(lib, "zzzz qqqq", store=store) == []
    bm = BM25(["entropy entropy collapse", "length penalty", "entropy bonus term"])
    scores = bm.scores("entropy")
    assert scores[0] > scores[2] > 0 and scores[1] == 0


# ---------------------------------------------------------------------------------------------- index
def test_index_resync_picks_up_added_edited_and_removed_files(lib_dir, store):
    lib = Library.load(lib_dir)
    first = sync(store, lib)
    assert len(first.added) == len(lib) and not first.changed and not first.removed
    assert sync(store, lib).unchanged == sorted(s.slug for s in lib)  # nothing changed: nothing rewritten

    f = lib_dir / "clip-higher" / SKILL_FILE
    f.write_text(f.read_text().replace("## When not to\n", "## When not to\n- A brand-new caveat about quokkas.\n"))
    shutil.rmtree(lib_dir / "entropy-bonus")
    report = sync(store, Library.load(lib_dir))
    assert report.changed == ["clip-higher"] and report.removed == ["entropy-bonus"] and not report.added
    key = library_key(lib)
    assert "quokkas" in store.get_skill(key, "clip-higher").body
    gone = store.get_skill(key, "entropy-bonus")  # marked, not deleted
    assert gone.removed is not None and gone.name
    assert "entropy-bonus" not in [s.slug for s in store.list_skills(key)]
    assert "entropy-bonus" in [s.slug for s in store.list_skills(key, include_removed=True)]
    assert [m.slug for m in store.search_skills(key, "quokkas")] == ["clip-higher"]
    assert "entropy-bonus" not in text_scores(Library.load(lib_dir), "entropy bonus coefficient", store=store)

    write_skill(lib_dir, lib.get("entropy-bonus"))  # it comes back: changed, no longer removed
    back = sync(store, Library.load(lib_dir))
    assert back.changed == ["entropy-bonus"] and store.get_skill(key, "entropy-bonus").removed is None


# ---------------------------------------------------------------------------------------------- curation ops
def _new_skill(slug: str, kind: str = "skill", outcomes: tuple[str, ...] = ("promote",), knob: str = "grpo.temperature",
               arg=1.3, **kw) -> Skill:
    return Skill(name=slug, description="d", kind=kind, triggers=[{"symptom": "dead_groups"}],
                 intervention={"knob": knob, "op": "set", "arg": arg},
                 evidence=[evidence(o, proposal=f"p{i}") for i, o in enumerate(outcomes)],
                 counters={"helpful": len(outcomes), "uses": len(outcomes)}, slug=slug, sources=[{"title": "t"}],
                 body=SKILL_BODY if kind == "skill" else MISTAKE_BODY, **kw)


def test_add_is_refused_without_confirming_evidence(lib_dir):
    with pytest.raises(ValueError, match="needs at least one evidence entry with outcome promote"):
        AddOp(skill=_new_skill("hotter", outcomes=("reject",)), actor="user", why="test")
    with pytest.raises(CurationError, match="outcome promote"):
        apply(lib_dir, {"op": "add", "skill": _new_skill("hotter", outcomes=()).model_dump(), "actor": "u", "why": "w"})
    with pytest.raises(ValueError, match="outcome reject or blocked"):
        AddOp(skill=_new_skill("bad-note", kind="mistake", outcomes=("promote",)), actor="user", why="test")
    assert not (lib_dir / "hotter").exists() and read_log(lib_dir) == []

    written = apply(lib_dir, AddOp(skill=_new_skill("hotter"), actor="campaign:c1", why="promoted in c1"))
    assert written[0].slug == "hotter" and Library.load(lib_dir).get("hotter").evidence[0].outcome == "promote"
    with pytest.raises(CurationError, match="exists already"):
        apply(lib_dir, AddOp(skill=_new_skill("hotter"), actor="campaign:c1", why="again"))
    log = read_log(lib_dir)
    assert [(e.op, e.slug, e.actor) for e in log] == [("add", "hotter", "campaign:c1")]


def test_update_evidence_bumps_counters_and_version(lib_dir):
    before = Library.load(lib_dir).get("clip-higher")
    apply(lib_dir, UpdateEvidenceOp(slug="clip-higher", evidence=evidence("promote", 0.03), helpful=1, actor="user", why="w"))
    apply(lib_dir, UpdateEvidenceOp(slug="clip-higher", evidence=evidence("reject", -0.01, "p2"), harmful=1, actor="user",
                                    why="w"))
    apply(lib_dir, UpdateEvidenceOp(slug="clip-higher", evidence=evidence("inconclusive", 0.0, "p3"), actor="user", why="w"))
    after = Library.load(lib_dir).get("clip-higher")
    assert (after.counters.helpful, after.counters.harmful, after.counters.uses) == (1, 1, 3)
    assert after.version == before.version + 3
    assert [e.proposal for e in after.evidence] == ["p1", "p2", "p3"]
    assert after.body == before.body and after.sources == before.sources
    with pytest.raises(ValueError, match="not both"):
        UpdateEvidenceOp(slug="clip-higher", evidence=evidence("reject"), helpful=1, harmful=1, actor="u", why="w")
    with pytest.raises(CurationError, match="no entry 'nope'"):
        apply(lib_dir, UpdateEvidenceOp(slug="nope", evidence=evidence("reject"), actor="u", why="w"))
    assert len(read_log(lib_dir)) == 3


def test_merge_keeps_both_evidence_lists_and_deprecates_the_other(lib_dir):
    apply(lib_dir, AddOp(skill=_new_skill("hot-a", outcomes=("promote",)), actor="u", why="w"))
    apply(lib_dir, AddOp(skill=_new_skill("hot-b", outcomes=("promote", "promote"), arg=1.4), actor="u", why="w"))
    apply(lib_dir, MergeOp(into="hot-a", source="hot-b", actor="user", why="same change, two values"))
    lib = Library.load(lib_dir)  # strict: the merged library is still valid
    a, b = lib.get("hot-a"), lib.get("hot-b")
    assert len(a.evidence) == 3 and (a.counters.helpful, a.counters.uses) == (3, 3) and a.version == 2
    assert b.status == "deprecated" and b.merged_into == "hot-a" and "same change" in b.deprecated_reason
    assert len(b.evidence) == 2  # nothing lost on the merged-away file either
    assert (lib_dir / "hot-b" / SKILL_FILE).is_file()
    entry = read_log(lib_dir)[-1]
    assert entry.op == "merge" and entry.files == [f"hot-a/{SKILL_FILE}", f"hot-b/{SKILL_FILE}"]
    with pytest.raises(CurationError, match="not near-duplicates"):
        apply(lib_dir, MergeOp(into="hot-a", source="clip-higher", actor="u", why="w"))
    with pytest.raises(CurationError, match="deprecated"):
        apply(lib_dir, MergeOp(into="hot-a", source="hot-b", actor="u", why="w"))


def test_deprecate_only_when_harmful_outweighs_helpful(lib_dir):
    apply(lib_dir, UpdateEvidenceOp(slug="raise-lr", evidence=evidence("promote", 0.02), helpful=1, actor="u", why="w"))
    apply(lib_dir, UpdateEvidenceOp(slug="raise-lr", evidence=evidence("reject", -0.02, "p2"), harmful=1, actor="u", why="w"))
    with pytest.raises(CurationError, match="harmful 1 does not outweigh helpful 1"):
        apply(lib_dir, DeprecateOp(slug="raise-lr", actor="user", why="I do not like it"))
    assert Library.load(lib_dir).get("raise-lr").active
    apply(lib_dir, UpdateEvidenceOp(slug="raise-lr", evidence=evidence("reject", -0.03, "p3"), harmful=1, actor="u", why="w"))
    apply(lib_dir, DeprecateOp(slug="raise-lr", actor="user", why="refuted twice"))
    s = Library.load(lib_dir).get("raise-lr")
    assert s.status == "deprecated" and s.deprecated_reason == "refuted twice" and len(s.evidence) == 3
    assert [e.op for e in read_log(lib_dir)] == ["update_evidence"] * 3 + ["deprecate"]


# ---------------------------------------------------------------------------------------------- record_outcome
def test_two_rejections_of_one_symptom_knob_direction_make_one_mistake_note(lib_dir):
    ops1 = record_outcome(lib_dir, symptom="plateau", knob="optim.learning_rate", old=3e-4, value=9e-4, outcome="reject",
                          evidence={"campaign": "c1", "task": "arith", "proposal": "p1", "effect": -0.04, "ci_low": -0.07,
                                    "ci_high": -0.01, "seeds": [0, 1, 2], "date": "2026-01-02"}, actor="campaign:c1")
    ops2 = record_outcome(lib_dir, symptom="plateau", knob="optim.learning_rate", old=1e-3, value=2e-3, outcome="reject",
                          evidence=evidence("reject", -0.03, "p7", "c2"), actor="campaign:c2")
    lib = Library.load(lib_dir)
    notes = [s for s in lib if s.kind == "mistake"]
    assert [n.slug for n in notes] == ["mistake-optim-learning-rate-up-plateau"]
    note = notes[0]
    assert [e.proposal for e in note.evidence] == ["p1", "p7"] and note.evidence[0].value == 9e-4
    assert (note.counters.helpful, note.counters.uses, note.version) == (2, 2, 2)
    assert "optim.learning_rate" in note.body and "-0.040" in note.body and "`raise-lr`" not in note.body
    assert note.intervention.knob == "optim.learning_rate" and note.triggers[0].domains == ["math"]
    text = (lib_dir / note.slug / SKILL_FILE).read_text()  # curated files are canonical too
    assert dump_skill(parse_skill(text, note.slug)) == text and "  date: 2026-01-02\n" in text
    assert "  seeds: [0, 1, 2]\n" in text
    # the skill that recommends the same direction took the blame, and was deprecated at the second refutation
    raise_lr = lib.get("raise-lr")
    assert (raise_lr.counters.harmful, raise_lr.counters.uses) == (2, 2) and raise_lr.status == "deprecated"
    assert [o.op for o in ops1] == ["update_evidence", "add"]
    assert [o.op for o in ops2] == ["update_evidence", "deprecate", "update_evidence"]
    log = read_log(lib_dir)
    assert len(log) == len(ops1) + len(ops2)
    assert len((lib_dir / CURATION_LOG).read_text().strip().splitlines()) == 5
    assert {e.actor for e in log} == {"campaign:c1", "campaign:c2"}
    assert known_mistake(lib, symptom="plateau", knob="optim.learning_rate", old=3e-4, value=6e-4) == note
    assert known_mistake(lib, symptom="plateau", knob="optim.learning_rate", old=3e-4, value=1e-4) is None
    # a lower learning rate against a plateau is another cluster: another note
    record_outcome(lib_dir, symptom="plateau", knob="optim.learning_rate", old=3e-4, value=1e-4, outcome="reject",
                   evidence=evidence("reject", -0.01, "p9"), actor="campaign:c2")
    assert "mistake-optim-learning-rate-down-plateau" in Library.load(lib_dir)


def test_a_promoted_outcome_updates_the_matching_skill_or_adds_one(lib_dir):
    ops = record_outcome(lib_dir, symptom="entropy_collapse", knob="grpo.epsilon_high", old=None, value=0.28,
                         outcome="promote", evidence=evidence("promote", 0.05), actor="campaign:c1")
    assert [(o.op, o.slug) for o in ops] == [("update_evidence", "clip-higher")]
    s = Library.load(lib_dir).get("clip-higher")
    assert (s.counters.helpful, s.counters.uses, s.evidence[0].effect, s.evidence[0].value) == (1, 1, 0.05, 0.28)

    # no skill moves top_p down: a new skill is written, with the evidence that confirmed it
    ops = record_outcome(lib_dir, symptom="repetition", knob="grpo.top_p", old=1.0, value=0.9, outcome="promote",
                         evidence=evidence("promote", 0.02, "p2"), actor="campaign:c1")
    assert [o.op for o in ops] == ["add"]
    new = Library.load(lib_dir).get("grpo-top-p-down")
    assert new.kind == "skill" and new.evidence[0].outcome == "promote" and new.intervention.op == "scale"
    assert new.intervention.arg == pytest.approx(0.9) and "+0.020" in new.body
    # a later promotion of the same direction goes to that new skill
    record_outcome(lib_dir, symptom="repetition", knob="grpo.top_p", old=0.9, value=0.8, outcome="promote",
                   evidence=evidence("promote", 0.01, "p3"), actor="campaign:c2")
    assert Library.load(lib_dir).get("grpo-top-p-down").counters.helpful == 2

    # a refuted change leaves a mistake note; its later promotion counts against the note
    record_outcome(lib_dir, symptom="dead_groups", knob="grpo.temperature", old=1.0, value=1.2, outcome="reject",
                   evidence=evidence("reject", -0.02, "p4"), actor="campaign:c1")
    ops = record_outcome(lib_dir, symptom="dead_groups", knob="grpo.temperature", old=1.0, value=1.2, outcome="promote",
                         evidence=evidence("promote", 0.03, "p5"), actor="campaign:c1")
    lib = Library.load(lib_dir)
    note = lib.get("mistake-grpo-temperature-up-dead-groups")
    assert (note.counters.helpful, note.counters.harmful) == (1, 1)
    assert lib.get("temperature-up").counters.helpful == 1 and lib.get("temperature-up").counters.harmful == 1
    assert [o.op for o in ops] == ["update_evidence", "update_evidence"]


def test_blocked_inconclusive_and_failed_outcomes(lib_dir):
    record_outcome(lib_dir, symptom="answer_spraying", knob="reward.correctness.match", old="exact", value="contains",
                   outcome="blocked", evidence=evidence("blocked", 0.06, note="gate answer_spraying: warning"),
                   actor="campaign:c1")
    lib = Library.load(lib_dir)
    note = lib.get("mistake-reward-correctness-match-to-contains-answer-spraying")
    assert "gate answer_spraying: warning" in note.body and "`strict-correctness`" in note.body
    assert note.evidence[0].outcome == "blocked"

    ops = record_outcome(lib_dir, symptom="truncation", knob="grpo.max_completion_length", old=16, value=32,
                         outcome="inconclusive", evidence=evidence("inconclusive", 0.0), actor="campaign:c1")
    s = Library.load(lib_dir).get("longer-completions")
    assert [o.slug for o in ops] == ["longer-completions"]
    assert (s.counters.helpful, s.counters.harmful, s.counters.uses, len(s.evidence)) == (0, 0, 1, 1)
    assert not any(x.kind == "mistake" and "max-completion" in x.slug for x in Library.load(lib_dir))

    assert record_outcome(lib_dir, symptom="truncation", knob="grpo.max_completion_length", old=16, value=32,
                          outcome="failed", evidence={}, actor="campaign:c1") == []
    with pytest.raises(CurationError, match="differs from the decision"):
        record_outcome(lib_dir, symptom="truncation", knob="grpo.max_completion_length", old=16, value=32,
                       outcome="reject", evidence=evidence("promote"), actor="campaign:c1")
    with pytest.raises(ValueError, match="unknown symptom"):
        record_outcome(lib_dir, symptom="truncated", knob="grpo.max_completion_length", old=16, value=32,
                       outcome="reject", evidence=evidence("reject"), actor="campaign:c1")


def test_concurrent_refutations_still_make_one_note(lib_dir):
    import threading

    barrier, errors = threading.Barrier(4), []

    def refute(i: int) -> None:
        try:
            barrier.wait()
            record_outcome(lib_dir, symptom="truncation", knob="grpo.max_completion_length", old=16, value=32 + i,
                           outcome="reject", evidence=evidence("reject", -0.01, f"p{i}", f"c{i}"), actor=f"campaign:c{i}")
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=refute, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    note = Library.load(lib_dir).get("mistake-grpo-max-completion-length-up-truncation")
    assert sorted(e.proposal for e in note.evidence) == ["p0", "p1", "p2", "p3"] and note.counters.helpful == 4


def test_record_outcome_starts_an_empty_library(tmp_path):
    root = tmp_path / "fresh"
    ops = record_outcome(root, symptom="too_hard", knob="data.drop_all_wrong", old=False, value=True, outcome="reject",
                         evidence=evidence("reject"), actor="campaign:c1")
    assert [o.op for o in ops] == ["add"]
    lib = Library.load(root)
    assert [s.slug for s in lib] == ["mistake-data-drop-all-wrong-on-too-hard"] and lint_library(root) == []
    assert "No skill in the library answers too_hard" in lib.skills[0].body


# ---------------------------------------------------------------------------------------------- candidates
def test_skills_become_candidates_resolved_against_the_harness(lib_dir):
    record_outcome(lib_dir, symptom="plateau", knob="optim.learning_rate", old=3e-4, value=9e-4, outcome="promote",
                   evidence=evidence("promote", 0.04), actor="campaign:c1")
    lib = Library.load(lib_dir)
    harness = HarnessSpec()
    cands = {c.id: c for c in to_candidates(lib.skills, harness)}
    assert cands["clip-higher"].value == 0.28 and cands["clip-higher"].source.endswith("arXiv 2503.14476")
    assert cands["longer-completions"].value == 32 and isinstance(cands["longer-completions"].value, int)
    assert cands["raise-lr"].value == pytest.approx(9e-4) and cands["raise-lr"].effects == [0.04]
    for dropped in ("harder-curriculum",  # data.difficulty is null: a step cannot be resolved
                    "reset-kl-reference",  # needs beta > 0
                    "token-level-loss",  # already dapo: a no-op
                    "median-baseline", "rollout-replay"):  # unavailable
        assert dropped not in cands, dropped
    stepped = {c.id: c for c in to_candidates(lib.skills, harness.with_knob("data.difficulty", [2, 2]))}
    assert stepped["harder-curriculum"].value == [3, 3] and stepped["easier-curriculum"].value == [1, 1]
    hits = retrieve(lib, [ENTROPY], k=3)
    assert [c.id for c in to_candidates(hits, harness)] == [h.slug for h in hits if h.available]



def test_reloading_a_library_sees_every_edit_although_parsed_files_are_memoised(lib_dir):
    first = Library.load(lib_dir).get("raise-lr")
    f = lib_dir / "raise-lr" / SKILL_FILE
    f.write_text(f.read_text().replace("name: Raise the learning rate", "name: Raise the LR"))
    assert Library.load(lib_dir).get("raise-lr").name.startswith("Raise the LR")
    f.write_text(f.read_text().replace("kind: skill", "kind: lesson"))
    lib = Library.load(lib_dir, strict=False)
    assert lib.find("raise-lr") is None and any(p.field == "kind" for p in lib.problems)
    assert first.name.startswith("Raise the learning rate")  # an earlier load's objects are untouched

def test_a_relative_skill_counts_the_backtests_of_the_same_move(lib_dir):
    """×3 from 3e-4 helped, ×3 from 9e-4 overshot: each starting point sees the evidence for its own move."""
    record_outcome(lib_dir, symptom="plateau", knob="optim.learning_rate", old=3e-4, value=9e-4, outcome="promote",
                   evidence=evidence("promote", 0.04, proposal="p1", value=9e-4), actor="campaign:c1")
    record_outcome(lib_dir, symptom="plateau", knob="optim.learning_rate", old=9e-4, value=2.7e-3, outcome="reject",
                   evidence=evidence("reject", -0.05, proposal="p2", value=2.7e-3), actor="campaign:c1")
    lib = Library.load(lib_dir)

    def raise_lr(lr: float) -> list[float]:
        return {c.id: c for c in to_candidates(lib.skills, HarnessSpec().with_knob("optim.learning_rate", lr))}["raise-lr"].effects

    assert raise_lr(3e-4) == [0.04]  # 3e-4 * 3 is 9e-4 up to rounding
    assert raise_lr(9e-4) == [-0.05]
    assert sorted(raise_lr(1e-4)) == [-0.05, 0.04]  # a move never tried: the skill's whole record

# ---------------------------------------------------------------------------------------------- CLI
def test_cli_list_show_search(lib_dir, tmp_path):
    record_outcome(lib_dir, symptom="plateau", knob="optim.learning_rate", old=3e-4, value=9e-4, outcome="reject",
                   evidence=evidence("reject", -0.04), actor="campaign:c1")
    lib = ["--library", str(lib_dir)]
    doc = json.loads(runner.invoke(skills_app, ["list", "--json", "--kind", "mistake", *lib]).stdout)
    assert [s["slug"] for s in doc["skills"]] == ["mistake-optim-learning-rate-up-plateau"]
    doc = json.loads(runner.invoke(skills_app, ["list", "--json", "--symptom", "truncation", *lib]).stdout)
    assert {"longer-completions", "overlong-penalty", "mask-truncated"} <= {s["slug"] for s in doc["skills"]}
    assert all("truncation" in s["symptoms"] for s in doc["skills"])
    assert runner.invoke(skills_app, ["list", "--kind", "skills", *lib]).exit_code == 2
    assert runner.invoke(skills_app, ["list", "--symptom", "truncated", *lib]).exit_code == 2
    table = runner.invoke(skills_app, ["list", *lib])
    assert table.exit_code == 0 and "clip-higher" in table.stdout

    shown = runner.invoke(skills_app, ["show", "clip-higher", *lib])
    assert shown.exit_code == 0 and "## Why it works" in shown.stdout and "2503.14476" in shown.stdout
    doc = json.loads(runner.invoke(skills_app, ["show", "clip-higher", "--json", *lib]).stdout)
    assert doc["intervention"]["knob"] == "grpo.epsilon_high" and doc["body"].startswith("# Clip-higher")
    missing = runner.invoke(skills_app, ["show", "nope", *lib])
    assert missing.exit_code == 2 and "no skill 'nope'" in missing.output

    home = ["--home", str(tmp_path / "home")]
    doc = json.loads(runner.invoke(skills_app, ["search", "soft overlong punishment", "--json", *lib, *home]).stdout)
    assert doc["hits"][0]["slug"] == "overlong-penalty" and "skill" not in doc["hits"][0]
    text = runner.invoke(skills_app, ["search", "learning rate plateau", *lib, *home])
    assert text.exit_code == 0 and "mistake-optim-learning-rate-up-plateau" in text.stdout


def test_cli_history_lists_the_proposals_that_cited_a_skill(tmp_path, lib_dir):
    home = tmp_path / "home"
    home.mkdir()
    t0 = datetime(2026, 1, 2, tzinfo=timezone.utc)
    with Store.for_home(home) as st:
        for cid in ("c1", "c2"):
            st.create_campaign(cid, cid, {}, f"t-{cid}")
        for pid, cid, cited in (("p1", "c1", ["clip-higher"]), ("p2", "c2", ["clip-higher", "entropy-bonus"]),
                                ("p3", "c2", ["entropy-bonus"])):
            st.add_proposal(Proposal(id=pid, campaign_id=cid, round=1, knob="grpo.epsilon_high", old=None, new=0.28,
                                     hypothesis=Hypothesis(symptom="entropy_collapse", cause="clip too tight",
                                                           change="raise epsilon_high", expected_effect="more exploring"),
                                     rationale="r", cited_skills=cited, brain="heuristic", status="promoted",
                                     harness_version="h0", created=t0))
        st.add_decision(Decision(proposal_id="p1", outcome="promote", reasons=["better"], at=t0,
                                 stats=BacktestStats(n_pairs=3, effect=0.04, ci_low=0.01, ci_high=0.07, confidence=0.9,
                                                     method="paired-t", control_mean=0.5, treatment_mean=0.54)))
    result = runner.invoke(skills_app, ["history", "clip-higher", "--json", "--home", str(home), "--library", str(lib_dir)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["in_library"] is True
    assert [(r["campaign"], r["proposal"], r["outcome"]) for r in doc["proposals"]] == [("c1", "p1", "promote"),
                                                                                          ("c2", "p2", None)]
    assert doc["proposals"][0]["effect"] == 0.04
    text = runner.invoke(skills_app, ["history", "clip-higher", "--home", str(home), "--library", str(lib_dir)])
    assert "c1 r1 p1" in text.stdout and "promote  effect +0.040 [+0.010, +0.070]" in text.stdout
    none = runner.invoke(skills_app, ["history", "lower-lr", "--home", str(home), "--library", str(lib_dir)])
    assert "no proposal cites 'lower-lr'" in none.stdout
