"""Campaign-driven diagnostic revision: label decided branches, catch gate misfires, fix parameters.

A campaign produces what a diagnostic's author never has: outcomes. Every decided branch is added to the
campaign's labelled archive (``HOME/campaigns/ID/archive.yaml``) with labels that come from what happened,
not from the diagnostic being judged, wherever an outcome confirms them:

- a **promoted** treatment gained held-out accuracy and passed the gate: labelled healthy;
- a **blocked** treatment whose gain the held-out interval does not confirm: labelled with the gate's
  symptoms and ``invalid`` (its score came from an exploit, so every later revision must still catch it);
- a **blocked** treatment whose held-out gain *is* confirmed (the interval would have promoted it) and
  whose gate symptoms all claim an exploit: the exploit claim is refuted by the branch's own evidence —
  a strict verifier on unseen problems cannot be gamed by the training reward — so it is labelled
  without those symptoms. This is a **false-positive misfire**;
- any other branch (controls, rejected, inconclusive) and every segment: unconfirmed. A symptom the
  diagnostics flagged at decision time is ``unknown`` (not scored: the misfire may be exactly there); a
  quiet one is taken as absent. That makes revisions conservative: a loosened threshold that starts
  flagging runs nothing was wrong with pays for it in precision.

The second misfire, a **false negative**, is a promotion after which the next segment's held-out
accuracy falls by more than ``revision.regression_tolerance`` while no diagnostic warned. The gate let a
harmful change through, so each in-process gate diagnostic is asked whether it could have caught it: the
segment is tentatively labelled with that diagnostic's symptom and its parameters are searched.

Revision is **parameters first**: every numeric parameter of the misfiring diagnostic is scaled by a
small ladder of factors or reset to its documented default (within its declared bounds), one parameter
at a time, and each candidate is replayed over the archive with
:func:`evotrainer.diagnostics.revision.evaluate_revision` (accept only if no recall on invalid runs is
lost and F1 improves). The best accepted candidate (highest F1, then the smallest change) becomes a new
harness version on the mainline and is appended to ``HOME/diagnostics/history.jsonl``; every misfire,
adopted or not, is a campaign event (kind ``diagnostic_revision``) with the candidates tried and the
scores. When no parameter change catches a false negative, the LLM brain (if configured) drafts new diagnostic
code for it, run only in the sandbox and adopted under the same rule (:mod:`evotrainer.agent.drafts`); sandboxed
diagnostics' own parameters are not searched here.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import BaseModel

from evotrainer.agent.drafts import draft_diagnostic, with_draft
from evotrainer.agent.regression import DIAGNOSTIC as REGRESSION_DIAGNOSTIC
from evotrainer.agent.state import segment_id, segment_start
from evotrainer.config.harness import HarnessSpec, diff
from evotrainer.core import atomic
from evotrainer.core.domain import SEVERITY_RANK, Finding
from evotrainer.core.errors import ConfigError
from evotrainer.core.symptoms import EXPLOIT_SYMPTOMS
from evotrainer.diagnostics.gates import check_gate
from evotrainer.diagnostics.registry import Registry
from evotrainer.diagnostics.revision import Archive, LabelledRun, RevisionResult, evaluate_revision, record
from evotrainer.evidence.model import Evidence
from evotrainer.evidence.readers import load_evidence

FACTORS = (0.5, 0.75, 1.25, 1.5, 2.0)


class Misfire(BaseModel):
    key: str
    kind: Literal["false_positive", "false_negative"]
    diagnostics: list[str]
    runs: list[str]
    proposal_id: str | None = None
    explanation: str


class RevisionOutcome(BaseModel):
    misfire: Misfire
    diagnostic: str | None
    accepted: bool
    candidate: dict[str, Any] | None
    scores: dict[str, Any] | None
    harness_version: str | None
    tried: int
    reasons: list[str]
    symptom: str | None = None  # the symptom the revised (or drafted) diagnostic reports
    drafted: bool = False  # new code drafted by the LLM brain (agent/drafts.py), not a parameter change
    tokens: int = 0  # LLM tokens the draft cost


def archive_path(home: Path, campaign_id: str) -> Path:
    return home / "campaigns" / campaign_id / "archive.yaml"


def load_archive(path: Path) -> Archive:
    return Archive.load(path) if path.exists() else Archive()


def save_archive(path: Path, archive: Archive) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, yaml.safe_dump(archive.model_dump(mode="json"), sort_keys=False))


def upsert(archive: Archive, run: LabelledRun) -> Archive:
    """Replace the entry for ``run.path`` (re-labelling is how later evidence corrects a label)."""
    return Archive(runs=[r for r in archive.runs if r.path != run.path] + [run])


def flags(findings: list[Finding]) -> list[str]:
    """Symptoms reported at warning or above: what a diagnostic 'says' about a run. Not the campaign's own
    ``regression`` finding (agent/regression.py): it is no diagnostic's verdict, and a fall that no diagnostic warned
    of is exactly the false negative :func:`label_round` looks for."""
    return sorted({f.symptom for f in findings if SEVERITY_RANK[f.severity] >= SEVERITY_RANK["warning"]
                   and f.symptom != "diagnostic_error" and f.diagnostic != REGRESSION_DIAGNOSTIC})


def tripped(gate_findings: list[Finding], harness: HarnessSpec) -> dict[str, str]:
    """{diagnostic: symptom} of the gate rules a branch failed (errors excluded: they are not verdicts)."""
    rules = {r.diagnostic: r.fail_at for r in harness.diagnostics.gate}
    return {f.diagnostic: f.symptom for f in gate_findings if f.diagnostic in rules and f.symptom != "diagnostic_error"
            and SEVERITY_RANK[f.severity] >= SEVERITY_RANK[rules[f.diagnostic]]}


def refutes_block(gate_symptoms: set[str], ci_low: float, min_effect: float) -> bool:
    """A block is refuted when the held-out interval confirms the gain and every tripped symptom claims an exploit."""
    return bool(gate_symptoms) and gate_symptoms <= EXPLOIT_SYMPTOMS and ci_low > min_effect


# ------------------------------------------------------------------------------------- parameter search
def param_candidates(cls: type, current: dict[str, Any]) -> list[tuple[dict[str, Any], float]]:
    """One-parameter changes of a diagnostic's numeric params, each with its size (|log factor|), valid only."""
    base = cls.Params.model_validate(current).model_dump()
    defaults = cls.Params().model_dump()
    out: list[tuple[dict[str, Any], float]] = []
    for name, value in base.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        ladder = [] if value == 0 else [int(round(value * f)) if isinstance(value, int) else float(f"{value * f:.6g}")
                                        for f in FACTORS]
        seen = {value}
        for new in [*ladder, defaults.get(name)]:  # the ladder, then back to the documented default
            if new is None or new in seen:
                continue
            seen.add(new)
            try:
                cls.Params.model_validate({**base, name: new})
            except Exception:  # noqa: BLE001 - pydantic says it is out of bounds: skip
                continue
            out.append(({name: new}, abs(math.log(new / value)) if new and value else 1.0))
    return out


def search(name: str, cls: type, harness: HarnessSpec, symptom: str, archive: Archive,
           load: Callable[[str], Evidence]) -> tuple[RevisionResult | None, int]:
    """Try every one-parameter candidate; return the best accepted one (or None) and how many were tried."""
    current = harness.diagnostics.params.get(name, {})
    before = cls(current)
    best: tuple[float, float, RevisionResult] | None = None
    tried = 0
    for change, size in param_candidates(cls, current):
        tried += 1
        res = evaluate_revision(before, cls({**current, **change}), symptom, archive, load,
                                {"params": change, "source": "campaign"})
        if res.accepted and (best is None or (res.after.f1, -size) > (best[0], best[1])):
            best = (res.after.f1, -size, res)
    return (best[2] if best else None), tried


def with_params(harness: HarnessSpec, name: str, change: dict[str, Any]) -> HarnessSpec:
    data = harness.model_dump(mode="json")
    data["diagnostics"]["params"][name] = {**data["diagnostics"]["params"].get(name, {}), **change}
    new = HarnessSpec.model_validate(data)
    new.source_dir = harness.source_dir
    return new


def revise(misfire: Misfire, harness: HarnessSpec, archive: Archive, classes: dict[str, type],
           load: Callable[[str], Evidence], home: Path,
           label: Callable[[Archive, str], Archive] | None = None) -> tuple[RevisionOutcome, HarnessSpec | None]:
    """Search each suspect diagnostic; adopt the single best accepted revision across them.

    ``label(archive, symptom)`` lets a false negative add its tentative label per suspect's symptom.
    """
    tried, best = 0, None
    reasons: list[str] = []
    for name in misfire.diagnostics:
        if name not in classes:
            reasons.append(f"{name}: not an in-process diagnostic (sandboxed code is revised by the LLM brain only)")
            continue
        cls = classes[name]
        arch = label(archive, cls.symptom) if label else archive
        res, n = search(name, cls, harness, cls.symptom, arch, load)
        tried += n
        if res is not None and misfire.kind == "false_positive" and res.before.invalid_recall is None:
            reasons.append(f"{name}: no run labelled invalid with {cls.symptom} in the archive, so a loosening cannot "
                           "be checked against known exploits (name one with revision.archive)")
            continue
        if res is None:
            reasons.append(f"{name}: none of {n} one-parameter candidates improved F1 without losing invalid-run recall")
        elif best is None or res.after.f1 - res.before.f1 > best[1].after.f1 - best[1].before.f1:
            best = (name, res)
    if best is None:
        return RevisionOutcome(misfire=misfire, diagnostic=None, accepted=False, candidate=None, scores=None,
                               harness_version=None, tried=tried, reasons=reasons), None
    name, res = best
    record(home, res)  # the adopted revision joins the diagnostic's version history
    new = with_params(harness, name, res.candidate["params"])
    changes = ", ".join(f"{c.path} {c.old!r} → {c.new!r}" for c in diff(harness, new))
    return RevisionOutcome(
        misfire=misfire, diagnostic=name, accepted=True, candidate=res.candidate["params"], symptom=classes[name].symptom,
        scores={"before": res.before.model_dump(exclude={"flagged"}), "after": res.after.model_dump(exclude={"flagged"})},
        harness_version=new.version, tried=tried, reasons=[f"{name}: {changes}; {res.reasons[0]}", *reasons]), new


def _adopted(harness: HarnessSpec, msg: dict[str, Any]) -> HarnessSpec:
    """``harness`` with an adopted revision re-applied from its event (a re-run after kill -9)."""
    cand = msg["candidate"]
    if isinstance(cand, dict) and "draft" in cand:
        path = Path(cand["draft"]["path"])
        try:
            same = hashlib.sha256(path.read_bytes()).hexdigest() == cand["draft"]["sha256"]
        except OSError:
            same = False
        if not same:
            raise ConfigError(f"{path}: the drafted diagnostic adopted as {msg['diagnostic']} is missing or no longer "
                              "the code that was scored (its sha256 differs); restore it from the campaign's history")
        return with_draft(harness, path, msg["diagnostic"])
    return with_params(harness, msg["diagnostic"], cand)


# ------------------------------------------------------------------------------------- campaign glue
def _memo(load: Callable[[str], Evidence]) -> Callable[[str], Evidence]:
    cache: dict[str, Evidence] = {}

    def get(p: str) -> Evidence:
        if p not in cache:
            cache[p] = load(p)
        return cache[p]

    return get


def flags_of(archive: Archive, path: str) -> list[str]:
    return next((r.unknown for r in archive.runs if r.path == path), [])


def refuted_blocks(store: Any, campaign_id: str) -> set[str]:
    """Proposal ids whose block the held-out interval refuted (revised or not): not mistakes of the change."""
    return {e.message["misfire"]["proposal_id"] for e in store.events(campaign_id, kind="diagnostic_revision")
            if e.message["misfire"].get("kind") == "false_positive" and e.message["misfire"].get("proposal_id")}


def accepted_false_positives(store: Any, campaign_id: str) -> set[str]:
    """Proposal ids whose block was refuted and whose gate diagnostic was revised (they may be re-proposed)."""
    return {e.message["misfire"]["proposal_id"] for e in store.events(campaign_id, kind="diagnostic_revision")
            if e.message.get("accepted") and e.message["misfire"].get("proposal_id")}


def label_round(ctx: Any, rnd: int, bt_id: str | None, harness: HarnessSpec, registry: Any,
                load: Callable[[str], Evidence]) -> tuple[Archive, list[Misfire]]:
    """Add this round's decided branches and segment to the campaign archive; return the misfires found."""

    store, cid = ctx.store, ctx.campaign_id
    path = archive_path(ctx.home, cid)
    archive = load_archive(path)
    misfires: list[Misfire] = []
    blocked_runs: dict[str, tuple[list[str], dict[str, str]]] = {}
    for b in (store.list_branches(bt_id) if bt_id else []):
        if b.status != "finished" or not b.run_name:
            continue
        run = str(ctx.home / "jobs" / b.run_name)
        ev = load(run)
        current = flags(registry.run(ev))
        d = store.get_decision(b.proposal_id) if b.proposal_id else None
        entry = LabelledRun(path=run, labels=[], unknown=current,
                            note=f"round {rnd} {b.role} seed {b.seed}: unconfirmed (quiet symptoms taken as absent, "
                                 "flagged ones as unknown)")
        # a promotion on the estimate (or a recorded older rule) proved no gain: unconfirmed
        if b.role == "treatment" and d is not None and d.outcome == "promote" and not (
                d.stats is not None and d.stats.rule != "superiority"):
            entry = LabelledRun(path=run, labels=[], note=f"{b.proposal_id} promoted: held-out gain confirmed, gate passed")
        elif b.role == "treatment" and d is not None and d.outcome == "blocked" and d.stats is not None:
            p = store.get_proposal(b.proposal_id)
            base = HarnessSpec.model_validate(store.get_harness_version(p.harness_version).spec)
            base.source_dir = harness.source_dir  # user diagnostic paths resolve as on the mainline
            trip = tripped(check_gate(ev, Registry(base)).findings, base)  # the gate that judged it (the mainline's)
            confirmed = d.stats.ci_low > ctx.spec.backtest.min_effect
            if refutes_block(set(trip.values()), d.stats.ci_low, ctx.spec.backtest.min_effect):
                entry = LabelledRun(path=run, labels=[], unknown=[s for s in current if s not in trip.values()],
                                    note=f"{b.proposal_id} blocked by {sorted(trip)}, refuted: held-out gain confirmed "
                                         f"(CI low {d.stats.ci_low:+.3f})")
                runs, names = blocked_runs.setdefault(b.proposal_id, ([], {}))
                runs.append(run)
                names.update(trip)
            elif trip and not confirmed:
                entry = LabelledRun(path=run, labels=sorted(set(trip.values())), invalid=True,
                                    unknown=sorted(set(current) - set(trip.values())),
                                    note=f"{b.proposal_id} blocked by {sorted(trip)}; held-out gain not confirmed")
            # else: this seed passed the gate, or a confirmed gain met a non-exploit symptom: unconfirmed
        archive = upsert(archive, entry)
    for pid, (runs, trip) in blocked_runs.items():
        misfires.append(Misfire(key=f"false_positive:{pid}", kind="false_positive", diagnostics=sorted(trip), runs=runs,
                                proposal_id=pid, explanation=f"{', '.join(sorted(trip))} blocked {pid}, but its held-out "
                                "gain is confirmed by the paired interval: the exploit claim is refuted"))
    # the round's segment: did the previous promotion regress without any warning?
    from evotrainer.store import NotFound

    try:
        seg = store.get_policy_version(segment_id(cid, rnd))
    except NotFound:
        seg = None
    if seg is not None and seg.run_name:
        run = str(ctx.home / "jobs" / seg.run_name)
        warned = flags(store.list_findings(cid, round=rnd))
        archive = upsert(archive, LabelledRun(path=run, labels=[], unknown=warned, note=f"round {rnd} segment: unconfirmed"))
        parent = segment_start(store, seg)
        tol = ctx.spec.revision.regression_tolerance
        if (parent is not None and parent.id.endswith(":promoted") and not warned and parent.eval_accuracy is not None
                and seg.eval_accuracy is not None and seg.eval_accuracy < parent.eval_accuracy - tol):
            misfires.append(Misfire(
                key=f"false_negative:r{rnd:02d}", kind="false_negative", runs=[run],
                diagnostics=[r.diagnostic for r in harness.diagnostics.gate],
                explanation=f"after promotion {parent.id} held-out accuracy fell {parent.eval_accuracy:.3f} → "
                            f"{seg.eval_accuracy:.3f} in segment {seg.run_name} and no diagnostic warned"))
    save_archive(path, archive)
    return archive, misfires


def campaign_revisions(ctx: Any, rnd: int, bt_id: str | None, harness: HarnessSpec) -> HarnessSpec:
    """Label the round, revise every new misfire, and return the (possibly revised) mainline harness."""

    if not ctx.spec.revision.enabled:
        return harness
    load = _memo(lambda p: load_evidence(p, ctx.home))
    registry = Registry(harness)
    archive, misfires = label_round(ctx, rnd, bt_id, harness, registry, load)
    done = {e.message.get("key"): e.message for e in ctx.store.events(ctx.campaign_id, kind="diagnostic_revision")}
    extra = Archive.load(ctx.spec.relative(ctx.spec.revision.archive)) if ctx.spec.revision.archive else Archive()
    for m in misfires:

        def tentative(arch: Archive, symptom: str, m: Misfire = m) -> Archive:
            for r in m.runs:
                arch = upsert(arch, LabelledRun(path=r, labels=[symptom], unknown=[u for u in flags_of(arch, r) if u != symptom],
                                                note=f"tentative: {m.explanation}"))
            return arch

        if m.key in done:  # re-run after kill -9: decided already; an adopted revision is applied again, not lost
            msg = done[m.key]
            if msg.get("accepted"):
                harness = _adopted(harness, msg)
                if m.kind == "false_negative":
                    archive = tentative(archive, msg.get("symptom") or Registry(harness).classes[msg["diagnostic"]].symptom)
                    save_archive(archive_path(ctx.home, ctx.campaign_id), archive)
            continue
        both = Archive(runs=[*extra.runs, *archive.runs])

        outcome, new = revise(m, harness, both, Registry(harness).classes, load, ctx.home,
                              tentative if m.kind == "false_negative" else None)
        if new is None and m.kind == "false_negative":  # no threshold names it: new code, from the LLM brain
            drafted = draft_diagnostic(ctx, m, harness, both, load, tentative)
            if drafted is not None:
                d, new = drafted
                outcome = outcome.model_copy(update={
                    **d, "drafted": True, "harness_version": new.version if new is not None else None,
                    "reasons": [*d["reasons"], *outcome.reasons]})
        if new is not None:
            ctx.store.add_harness_version(new.version, harness.version, new.model_dump(mode="json"),
                                          [c.model_dump(mode="json") for c in diff(harness, new)])
            if m.kind == "false_negative":  # the adopted hypothesis becomes the label
                archive = tentative(archive, outcome.symptom)
                save_archive(archive_path(ctx.home, ctx.campaign_id), archive)
            harness = new
        ctx.store.log_event(ctx.campaign_id, "diagnostic_revision", {"key": m.key, **outcome.model_dump(mode="json")})
        ctx.log(f"misfire ({m.kind}): {m.explanation}; revision "
                + ("accepted — " if outcome.accepted else "not adopted — ") + "; ".join(outcome.reasons[:2]))
    return harness
