"""What each dashboard page shows, as plain data: the store, the job directories and the skill library, read once.

Why a layer between the routes and the templates: a page must stay fast with 1,000 proposals and 500 skills,
so every query here is batched (reviews and decisions of a page in one query each, counts by GROUP BY,
pages of 50) and every file read is cached by the file's size and modification time — a job's metrics
(``evidence.read_metrics``), a library folder (``Library.load``, re-indexed into the store only when a file
changed), a run's diagnosis. The summary of a campaign, the recording of a review and a skill's history come
from ``evotrainer.reports.summaries``, the same functions the CLI prints.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from evotrainer.core.domain import SEVERITY_RANK, Finding, Proposal
from evotrainer.core.errors import ConfigError, EvoError
from evotrainer.core.names import is_name
from evotrainer.core.runmeta import run_meta_dict
from evotrainer.diagnostics.registry import Registry
from evotrainer.evidence.model import read_metrics
from evotrainer.evidence.readers import read_job_dir
from evotrainer.library.index import library_key, sync
from evotrainer.library.loader import Library, resolve_library
from evotrainer.reports.summaries import campaign_summary, mainline_accuracy, skill_history, start_accuracy
from evotrainer.store import NotFound, Store
from evotrainer.ui.charts import Series, interval_chart, line_chart

PAGE = 50
LEDGER_ROWS = 100
TRAIN_METRICS = (("reward", "reward (weighted total)"), ("accuracy", "training accuracy (strict)"),
                 ("entropy", "entropy (nats/token)"), ("completions/mean_length", "mean completion length (tokens)"),
                 ("kl", "KL to reference"), ("frac_reward_zero_std", "dead groups (share)"))


class FileCache:
    """``read(path)`` cached by the (size, mtime) of ``stamp_of(path)``, least recently used entries dropped."""

    def __init__(self, read: Callable[[Path], Any], stamp_of: Callable[[Path], Any], maxsize: int = 512):
        self._read, self._stamp_of, self._max = read, stamp_of, maxsize
        self._items: OrderedDict[Path, tuple[Any, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[Path, threading.Lock] = {}

    def _hit(self, path: Path, stamp: Any) -> tuple[bool, Any]:
        with self._lock:
            hit = self._items.get(path)
            if hit is not None and hit[0] == stamp:
                self._items.move_to_end(path)
                return True, hit[1]
            return False, None

    def __call__(self, path: Path) -> Any:
        stamp = self._stamp_of(path)
        found, value = self._hit(path, stamp)
        if found:
            return value
        with self._lock:
            loading = self._loading.setdefault(path, threading.Lock())
        with loading:  # two requests for the same cold file: the second waits for the first's result
            found, value = self._hit(path, stamp)
            if found:
                return value
            value = self._read(path)
            with self._lock:
                self._items[path] = (stamp, value)
                self._items.move_to_end(path)
                while len(self._items) > self._max:
                    self._items.popitem(last=False)
        return value


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
        return st.st_mtime_ns, st.st_size
    except OSError:
        return 0, 0


def _library_stamp(root: Path) -> tuple:
    """Names, sizes and times of every SKILL.md (a few ms for 500 entries): changes when any file does."""
    try:
        with os.scandir(root) as it:
            dirs = sorted(e.name for e in it if e.is_dir())
    except OSError:
        return ()
    return tuple((d, _stat(root / d / "SKILL.md")) for d in dirs)


def _chart_metrics(run_dir: Path) -> pd.DataFrame:
    """A run's metrics for its charts; none when the file cannot be read (the findings say why)."""
    try:
        return read_metrics(run_dir)
    except Exception:  # noqa: BLE001 - an unreadable or hostile file (no step, nested too deep): no charts
        return pd.DataFrame({"step": []})


def page_of(total: int, page: int, size: int = PAGE) -> dict[str, int]:
    pages = max(1, math.ceil(total / size))
    page = min(max(1, page), pages)
    return {"page": page, "pages": pages, "total": total, "offset": (page - 1) * size, "size": size}


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class Views:
    """Page data for one home (its store, its jobs) and a default skill library."""

    def __init__(self, home: Path, store: Store, library: Path | None = None, mlflow_url: str | None = None):
        self.home = home
        self.jobs = home / "jobs"
        self.store = store
        self.library = resolve_library(library)
        self.mlflow_url = (mlflow_url or "").rstrip("/") or None
        self.metrics = FileCache(_chart_metrics, lambda d: _stat(d / "metrics.jsonl"))
        self._meta = FileCache(self._read_meta, lambda d: _stat(d / "meta.json"), maxsize=2048)
        self._libs = FileCache(self._load_library, _library_stamp, maxsize=16)
        self._diagnoses = FileCache(self._diagnose, self._run_stamp, maxsize=32)
        self._charts: dict[tuple, dict] = {}
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Load (and index) the default library ahead of the first visit: 500 entries take a second or two."""
        try:
            self.library_of("default")
        except EvoError:
            pass  # no library there: the Skills page says so when it is opened

    # ------------------------------------------------------------------------------------------ helpers
    def mlflow_link(self, run_id: str | None) -> str | None:
        return f"{self.mlflow_url}/#/runs/{run_id}" if run_id and self.mlflow_url else None

    @staticmethod
    def _read_meta(run_dir: Path) -> dict[str, Any]:
        return run_meta_dict(run_dir)

    def meta(self, run_name: str | None) -> dict[str, Any]:
        return self._meta(self.jobs / run_name) if run_name else {}

    def run_metrics(self, run_name: str | None) -> pd.DataFrame:
        return self.metrics(self.jobs / run_name) if run_name else pd.DataFrame({"step": []})

    @staticmethod
    def points(df: pd.DataFrame, column: str) -> list[tuple[float, float]]:
        if column not in df or "step" not in df:
            return []
        part = df[["step", column]].dropna()
        return list(zip(part["step"].astype(float), part[column].astype(float)))

    # ------------------------------------------------------------------------------------------ campaigns
    def campaigns(self) -> list[dict[str, Any]]:
        """Every campaign, newest first, with budget, accuracy start → now and proposal counts (batched)."""
        spent = self.store.ledger_totals()
        counts = self.store.proposal_counts()
        rows = []
        for c in reversed(self.store.list_campaigns()):
            lineage = self.store.policy_lineage(c.id)
            n = counts.get(c.id, {})
            rows.append({"campaign": c, "task": c.spec.get("task", "?"), "spent": spent.get(c.id, 0),
                         "total": (c.spec.get("budget") or {}).get("total_steps"),
                         "start": start_accuracy(self.home, lineage, self.metrics), "now": mainline_accuracy(c, lineage),
                         "pending": n.get("pending_review", 0), "proposals": sum(n.values()),
                         "promoted": n.get("promoted", 0), "autonomy": c.spec.get("autonomy", "?")})
        return rows

    def pending_count(self) -> int:
        return self.store.count_proposals(status="pending_review")

    def campaign(self, cid: str, page: int = 1, dpage: int = 1) -> dict[str, Any]:
        s = campaign_summary(self.home, cid, self.store, read=self.metrics)
        camp = self.store.get_campaign(cid)
        state = self.state(cid)
        lineage = s["lineage"]
        by_id = {pv["id"]: pv for pv in lineage}
        chain = self._mainline_chain(by_id, camp.mainline_version)
        props = s["proposals"]
        decided = {d["proposal_id"]: d for d in s["decisions"]}
        key = (cid, state["stamp"], len(lineage))
        with self._lock:
            charts = self._charts.get(key)
        if charts is None:  # the charts read every mainline run's metrics: redrawn only when the campaign moved
            charts = self._campaign_charts(cid, s, chain)
            with self._lock:
                self._charts[key] = charts
                while len(self._charts) > 32:
                    self._charts.pop(next(iter(self._charts)))
        pg = page_of(len(props), page)
        shown = list(reversed(props))[pg["offset"]: pg["offset"] + pg["size"]]
        dpg = page_of(len(s["decisions"]), dpage, size=25)
        ledger = self.store.ledger(cid)
        by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for e in ledger:
            label = {"segment": "segments", "branch": "backtest branches"}.get(e.kind, e.kind)
            by_kind[label][0] += 1
            by_kind[label][1] += e.steps
        return {"summary": s, "campaign": camp, "tree": self._tree(lineage, by_id, chain, s["versions"], props, decided),
                "charts": charts, "proposals": shown, "pager": pg, "reviews": self.store.get_reviews([p["id"] for p in shown]),
                "decisions": list(reversed(s["decisions"]))[dpg["offset"]: dpg["offset"] + dpg["size"]], "dpager": dpg,
                "ledger": ledger[::-1][:LEDGER_ROWS], "ledger_total": len(ledger), "ledger_by_kind": dict(by_kind),
                "events": self.store.events(cid, limit=40)[::-1], "campaign_run": self.mlflow_link(camp.mlflow_run_id),
                "pending": [p for p in props if p["status"] == "pending_review"],
                "stoppable": camp.status in ("created", "running", "waiting_review"), "state": state}

    def state(self, cid: str) -> dict[str, Any]:
        """What the page polls to know that something changed (status, steps spent, proposals, reviews)."""
        camp = self.store.get_campaign(cid)
        n = self.store.proposal_counts().get(cid, {})
        doc = {"status": camp.status, "updated": camp.updated.isoformat(), "spent": self.store.ledger_total(cid),
               "proposals": n, "mainline": camp.mainline_version}
        return {**doc, "stamp": json.dumps(doc, sort_keys=True)}

    @staticmethod
    def _mainline_chain(by_id: dict[str, dict], head: str | None) -> list[dict]:
        chain, seen = [], set()
        while head and head in by_id and head not in seen:
            seen.add(head)
            chain.append(by_id[head])
            head = by_id[head]["parent_id"]
        return chain[::-1]

    def _tree(self, lineage: list[dict], by_id: dict[str, dict], mainline: list[dict], versions: list[dict],
              props: list[dict], decided: dict[str, dict]) -> list[list[dict]]:
        """Policy versions as a tree of chains: a node's mainline child continues its chain, any other child
        (after a rollback) starts a fork. Each node carries what changed on the edge into it (a harness diff,
        or nothing), its MLflow run, and for a segment the single-factor changes tried from it."""
        diffs = {v["version"]: v["diff"] for v in versions}
        tried: dict[int, list[dict]] = defaultdict(list)
        for p in props:
            tried[p["round"]].append({"proposal": p, "decision": decided.get(p["id"])})
        kids: dict[str, list[dict]] = defaultdict(list)
        roots = []
        for pv in lineage:
            parent = by_id.get(pv["parent_id"] or "")
            edge = []
            if parent is not None and parent["harness_version"] != pv["harness_version"]:
                edge = diffs.get(pv["harness_version"]) or self._harness_diff(pv["harness_version"])
            m = re.search(r":r(\d+):segment$", pv["id"])
            node = {"pv": pv, "edge": edge, "tried": tried.get(int(m.group(1)), []) if m else [],
                    "forks": [], "link": self.mlflow_link(pv["mlflow_run_id"])}
            (kids[parent["id"]] if parent is not None else roots).append(node)
        on_main = {pv["id"] for pv in mainline}

        def chain_from(node: dict) -> list[dict]:
            out = [node]
            while kids.get(node["pv"]["id"]):
                children = kids[node["pv"]["id"]]
                nxt = next((k for k in children if k["pv"]["id"] in on_main), children[-1])
                node["forks"] = [chain_from(k) for k in children if k is not nxt]
                out.append(nxt)
                node = nxt
            return out

        return [chain_from(r) for r in roots]

    def _harness_diff(self, version: str) -> list[dict]:
        try:
            return list(self.store.get_harness_version(version).diff)
        except NotFound:
            return []

    def _campaign_charts(self, cid: str, s: dict, chain: list[dict]) -> dict:
        acc = [(0.0, s["accuracy"]["start"])] if s["accuracy"]["start"] is not None else []
        acc += [(pv["step"], pv["eval_accuracy"]) for pv in chain if pv["eval_accuracy"] is not None]
        seg_steps = {int(m.group(1)): pv["step"] for pv in s["lineage"]
                     if (m := re.search(r":r(\d+):segment$", pv["id"]))}
        bts = {b.id: b for b in self.store.list_backtests(cid)}
        ctl, trt = [], []
        for br in self.store.campaign_branches(cid):
            bt = bts.get(br.backtest_id)
            if bt is None or br.eval_accuracy is None or bt.round not in seg_steps:
                continue
            (ctl if br.role == "control" else trt).append((seg_steps[bt.round] + br.steps, br.eval_accuracy))
        accuracy = line_chart(
            [Series("mainline", acc, markers=True), Series("control branches", ctl, line=False, hollow=True, color="#555555"),
             Series("treatment branches", trt, line=False, color="#D55E00")],
            title="held-out accuracy (greedy)", y_label="accuracy", y_min=0.0, width=860, height=300,
            empty="no held-out evaluation yet: the first segment reports one when it ends")
        frames = [self.run_metrics(pv["run_name"]) for pv in chain if pv["run_name"]]
        frames = [f for f in frames if len(f)]
        mainline = pd.concat(frames).drop_duplicates("step", keep="last").sort_values("step") if frames else None
        training = []
        for col, label in TRAIN_METRICS:
            pts = self.points(mainline, col) if mainline is not None else []
            if pts:
                training.append(line_chart([Series(col, pts)], title=label, y_label="", width=420, height=210))
        return {"accuracy": accuracy, "training": training}

    # ------------------------------------------------------------------------------------------ proposals
    def review_queue(self, page: int = 1) -> dict[str, Any]:
        pg = page_of(self.pending_count(), page)
        items = self.store.pending_reviews(limit=pg["size"], offset=pg["offset"])
        names = {c.id: c.name for c in self.store.list_campaigns()}
        return {"items": items, "pager": pg, "names": names}

    def proposal(self, pid: str) -> dict[str, Any]:
        p = self.store.get_proposal(pid)
        camp = self.store.get_campaign(p.campaign_id)
        findings = self.store.list_findings(p.campaign_id, round=p.round)
        findings = sorted(findings, key=lambda f: -SEVERITY_RANK[f.severity])
        shown = [f for f in findings if not (f.severity == "info" and f.confidence == 0.0)]
        unknown = sorted({f.diagnostic for f in findings if f.severity == "info" and f.confidence == 0.0})
        bt = next((b for b in self.store.list_backtests(p.campaign_id) if pid in b.proposal_ids), None)
        spec_bt = camp.spec.get("backtest") or {}
        decision = self.store.get_decision(pid)
        seeds = self._seeds(bt, pid) if bt else []
        st = (bt.stats.get(pid) if bt else None) or (decision.stats if decision else None)
        effect = None if st is None else interval_chart(
            st.effect, st.ci_low, st.ci_high, per_seed=[x["diff"] for x in seeds if x["diff"] is not None],
            threshold=spec_bt.get("min_effect"), confidence=st.confidence, title="effect on held-out accuracy",
            width=680)
        return {"p": p, "campaign": camp, "review": self.store.get_review(pid), "decision": decision,
                "findings": shown, "unknown": unknown, "cited": self.cited(p), "backtest": bt, "seeds": seeds,
                "stats": st, "effect_chart": effect, "spec_backtest": spec_bt,
                "siblings": [x for x in self.store.list_proposals(p.campaign_id, round=p.round) if x.id != pid]}

    def cited(self, p: Proposal) -> list[dict[str, Any]]:
        """The cited slugs, resolved in the campaign's own library copy, else the default library."""
        own = self.home / "campaigns" / p.campaign_id / "library"
        out = []
        for slug in p.cited_skills:
            hit, key = None, None
            for k, root in ((f"campaign:{p.campaign_id}", own), ("default", self.library)):
                lib = self._libs(root) if root.is_dir() else None
                if lib is not None and slug in lib:
                    hit, key = lib.get(slug), k
                    break
            out.append({"slug": slug, "skill": hit, "lib": key})
        return out

    def _seeds(self, bt, pid: str) -> list[dict[str, Any]]:
        branches = self.store.list_branches(bt.id)
        out = []
        for seed in bt.seeds:
            ctl = next((b for b in branches if b.role == "control" and b.seed == seed), None)
            trt = next((b for b in branches if b.proposal_id == pid and b.seed == seed), None)
            series, runs = [], []
            for role, br, color, dashed in (("control", ctl, "#555555", True), ("treatment", trt, "#0072B2", False)):
                if br is None:
                    continue
                m = self.run_metrics(br.run_name)
                series.append(Series(f"{role} training accuracy", self.points(m, "accuracy"), color=color, dashed=dashed))
                series.append(Series(f"{role} held-out", self.points(m, "eval/greedy_accuracy"), color=color,
                                     line=False, hollow=role == "control"))
                run_id = self.meta(br.run_name).get("run_id")
                runs.append({"role": role, "branch": br, "run_id": run_id, "link": self.mlflow_link(run_id)})
            diff = (trt.eval_accuracy - ctl.eval_accuracy) if ctl and trt and ctl.eval_accuracy is not None \
                and trt.eval_accuracy is not None else None
            chart = line_chart(series, title=f"seed {seed}: control vs treatment", y_label="accuracy", y_min=0.0,
                               width=440, height=250, empty="branches not run yet")
            out.append({"seed": seed, "control": ctl, "treatment": trt, "diff": diff, "chart": chart, "runs": runs})
        return out

    # ------------------------------------------------------------------------------------------ skills
    def libraries(self) -> dict[str, Path]:
        """The libraries a person can browse: the default one and each campaign's curated copy."""
        libs = {"default": self.library}
        for c in reversed(self.store.list_campaigns()):
            own = self.home / "campaigns" / c.id / "library"
            if own.is_dir():
                libs[f"campaign:{c.id}"] = own
        return libs

    def _load_library(self, root: Path) -> Library:

        lib = Library.load(root, strict=False)
        sync(self.store, lib)  # the store's search index follows the files (only on a change: this is cached)
        return lib

    def library_of(self, key: str) -> tuple[str, Library]:
        libs = self.libraries()
        if key not in libs:
            raise NotFound(f"library '{key}' not found; libraries: {', '.join(libs)}")
        root = libs[key]
        if not root.is_dir():
            raise ConfigError(f"skill library not found: {root} (pass --library to `evotrainer ui`, or set "
                              "$EVOTRAINER_LIBRARY)")
        return key, self._libs(root)

    def skills(self, key: str, q: str = "", kind: str = "", symptom: str = "", domain: str = "", status: str = "",
               page: int = 1) -> dict[str, Any]:
        key, lib = self.library_of(key)
        scores: dict[str, float] | None = None
        if q.strip():

            hits = self.store.search_skills(library_key(lib), q, limit=max(len(lib), 1))
            top = max((h.score for h in hits), default=0.0) or 1.0
            scores = {h.slug: h.score / top for h in hits}
        rows = []
        for s in lib.filter(kind=kind or None, symptom=symptom or None):
            if status and s.status != status:
                continue
            if domain and not any(not t.domains or domain in t.domains for t in s.triggers):
                continue
            if scores is not None and s.slug not in scores:
                continue
            rows.append(s)
        if scores is not None:
            rows.sort(key=lambda s: (s.status == "deprecated", -scores[s.slug], s.slug))
        pg = page_of(len(rows), page)
        domains = sorted({d for s in lib.skills for t in s.triggers for d in t.domains})
        symptoms = sorted({x for s in lib.skills for x in s.symptoms})
        return {"key": key, "lib": lib, "rows": rows[pg["offset"]: pg["offset"] + pg["size"]], "pager": pg,
                "scores": scores or {}, "domains": domains, "symptoms": symptoms, "libraries": self.libraries(),
                "problems": lib.problems}

    def skill(self, key: str, slug: str) -> dict[str, Any]:
        key, lib = self.library_of(key)
        try:
            s = lib.get(slug)
        except ConfigError as err:
            raise NotFound(str(err)) from None
        return {"key": key, "lib": lib, "s": s, "entry": lib.entry(slug), "history": skill_history(self.store, slug)}

    # ------------------------------------------------------------------------------------------ diagnose
    def runs(self, q: str = "", page: int = 1) -> dict[str, Any]:
        entries = []
        if self.jobs.is_dir():
            with os.scandir(self.jobs) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False) and not e.name.startswith(".") and \
                            (not q or q.lower() in e.name.lower()):
                        entries.append((e.stat().st_mtime, e.name))
        entries.sort(reverse=True)
        pg = page_of(len(entries), page)
        rows = []
        for mtime, name in entries[pg["offset"]: pg["offset"] + pg["size"]]:
            meta = self.meta(name)
            rows.append({"name": name, "mtime": mtime, "status": meta.get("status", "?"),
                         "steps": meta.get("steps_done"), "task": (meta.get("spec") or {}).get("task"),
                         "role": ((meta.get("spec") or {}).get("tags") or {}).get("evotrainer.role")})
        return {"rows": rows, "pager": pg, "q": q}

    def run_dir(self, name: str) -> Path:
        """A job directory directly under HOME/jobs (no other path is served)."""
        path = self.jobs / name
        if not is_name(name) or path.is_symlink() or not path.is_dir() or path.resolve().parent != self.jobs.resolve():
            raise NotFound(f"run '{name}' not found under {self.jobs} (a link to a directory elsewhere is not "
                           "served); the Diagnose page lists the runs there")
        return path

    def _run_stamp(self, run_dir: Path) -> tuple:
        roll = run_dir / "rollouts"
        return _stat(run_dir / "metrics.jsonl"), _stat(roll), _stat(run_dir / "meta.json")

    @staticmethod
    def _diagnose(run_dir: Path) -> dict[str, Any]:

        ev = read_job_dir(run_dir)
        findings = Registry().run(ev)
        return {"summary": ev.summary(), "findings": findings}

    def diagnose(self, name: str) -> dict[str, Any]:
        run_dir = self.run_dir(name)
        d = self._diagnoses(run_dir)
        findings: list[Finding] = d["findings"]
        m = self.run_metrics(name)
        charts = []
        for cols, title, y in ((("reward", "accuracy"), "reward and training accuracy", ""),
                               (("eval/greedy_accuracy",), "held-out accuracy", "accuracy"),
                               (("entropy",), "entropy", "nats/token"),
                               (("completions/mean_length", "completions/clipped_ratio"), "completion length", "")):
            series = [Series(c, self.points(m, c)) for c in cols]
            if any(s.points for s in series):
                charts.append(line_chart(series, title=title, y_label=y, width=420, height=210))
        return {"name": name, "meta": self.meta(name), "summary": d["summary"], "charts": charts,
                "findings": [f for f in findings if not (f.severity == "info" and f.confidence == 0.0)],
                "unknown": sorted({f.diagnostic for f in findings if f.severity == "info" and f.confidence == 0.0})}


__all__ = ["Views", "FileCache", "page_of", "PAGE"]
