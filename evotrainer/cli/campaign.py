"""``evotrainer campaign``: start, resume, follow, stop, confirm and roll back autonomous campaigns."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Optional

import typer

from evotrainer.cli.common import HomeOpt, JsonOpt, err_console, out_console, seconds
from evotrainer.cli.common import emit_json as _emit_json
from evotrainer.cli.common import guard as _guard

campaign_app = typer.Typer(no_args_is_help=True, help="Autonomous campaigns: diagnose, propose, backtest, promote.")


def _say(as_json: bool):
    return (lambda m: err_console.print(f"[dim]{m}", highlight=False)) if as_json else (
        lambda m: out_console.print(m, highlight=False))


@campaign_app.command("start")
def campaign_start(
    spec: Path = typer.Argument(..., help="Campaign spec YAML (see campaigns/arith-demo.yaml)."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="At a review, wait for a person instead of exiting."),
    max_rounds: Optional[int] = typer.Option(None, "--max-rounds", min=1, help="Stop after N rounds (resume continues)."),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="Override the spec's seed (mainline data order, "
                                       "the brain's draws, and the warm start unless policy.seed is set)."),
    home: Optional[Path] = HomeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Start a campaign and run it until it finishes (or waits for a review with --no-wait)."""
    from evotrainer.agent.campaign import start_campaign
    from evotrainer.core.home import resolve_home

    def body() -> None:
        h = resolve_home(home)
        cid = start_campaign(spec, h, log=_say(as_json), wait=wait, max_rounds=max_rounds, seed=seed)
        _print_status(h, cid, as_json)
        _exit_if_failed(h, cid)

    _guard(body, as_json)


def _exit_if_failed(home: Path, cid: str) -> None:
    """Exit 1 when the campaign failed (nothing could be trained: its status line above says why)."""
    from evotrainer.store import Store

    if Store.for_home(home).get_campaign(cid).status == "failed":
        raise typer.Exit(code=1)


@campaign_app.command("resume")
def campaign_resume(
    cid: str = typer.Argument(..., help="Campaign id."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="At a review, wait for a person instead of exiting."),
    max_rounds: Optional[int] = typer.Option(None, "--max-rounds", min=1, help="Stop after N rounds in total."),
    home: Optional[Path] = HomeOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Continue a campaign from where it stopped (a kill, a stop, a review). Exit 2 if another process runs it."""
    from evotrainer.agent.campaign import run_campaign
    from evotrainer.core.home import resolve_home

    def body() -> None:
        h = resolve_home(home)
        run_campaign(cid, h, log=_say(as_json), wait=wait, max_rounds=max_rounds)
        _print_status(h, cid, as_json)
        _exit_if_failed(h, cid)

    _guard(body, as_json)


@campaign_app.command("status")
def campaign_status(cid: Optional[str] = typer.Argument(None, help="Campaign id (default: all)."),
                    home: Optional[Path] = HomeOpt, as_json: bool = JsonOpt) -> None:
    """Lineage, budget spent and every decision with its reason."""
    from evotrainer.core.home import resolve_home

    def body() -> None:
        h = resolve_home(home)
        if cid is None:
            from evotrainer.store import Store

            camps = Store.for_home(h).list_campaigns()
            if as_json:
                _emit_json({"campaigns": [c.model_dump(mode="json") for c in camps]}, "campaigns")
                return
            if not camps:
                out_console.print("no campaigns yet: evotrainer campaign start campaigns/arith-demo.yaml")
            for c in camps:
                owner = f"  owner pid {c.owner.pid} on {c.owner.host}" if c.owner and c.owner.live else ""
                out_console.print(f"{c.id}  {c.status}  mainline {c.mainline_version}{owner}", highlight=False)
            return
        _print_status(h, cid, as_json)

    _guard(body, as_json)


@campaign_app.command("stop")
def campaign_stop(cid: str,
                  now: bool = typer.Option(False, "--now", help="End the owner and its workers at once (SIGKILL)."),
                  wait_s: float = typer.Option(30.0, "--wait", min=0, callback=seconds(86400), help="Seconds to wait for the owner to exit."),
                  home: Optional[Path] = HomeOpt, as_json: bool = JsonOpt) -> None:
    """Stop a campaign: its owner abandons the job in flight and exits (resume continues it); --now kills it at once."""
    from evotrainer.agent.campaign import stop_campaign
    from evotrainer.core.home import resolve_home

    def body() -> None:
        res = stop_campaign(cid, resolve_home(home), now=now, wait_s=wait_s)
        if as_json:
            _emit_json(res.model_dump(mode="json"), "stop")
            return
        out_console.print(f"campaign {cid}: {res.message}", highlight=False)

    _guard(body, as_json)


@campaign_app.command("confirm")
def campaign_confirm(cid: str, seed: Optional[int] = typer.Option(None, help="Seed of the fresh problems (default eval.seed + 1)."),
                     n: Optional[int] = typer.Option(None, "--n", help="Problems to evaluate (default: the spec's "
                                                     "confirm_n, else eval.n); more narrow the gain's s.e."),
                     home: Optional[Path] = HomeOpt, as_json: bool = JsonOpt) -> None:
    """Evaluate the base policy and the mainline on fresh held-out problems (none the campaign decided on)."""
    from evotrainer.agent.confirm import confirm
    from evotrainer.core.home import resolve_home

    def body() -> None:
        c = confirm(resolve_home(home), cid, seed, n=n)
        if as_json:
            _emit_json(c.model_dump(mode="json"), "confirmation")
            return
        out_console.print(f"{cid}: {c.describe()}", highlight=False)

    _guard(body, as_json)


@campaign_app.command("rollback")
def campaign_rollback(cid: str, version: str = typer.Argument(..., help="Policy version id (see campaign status)."),
                      home: Optional[Path] = HomeOpt) -> None:
    """Return the mainline to an earlier policy version (and its harness); exit 2 while a process runs the campaign."""
    from evotrainer.agent.campaign import rollback
    from evotrainer.core.home import resolve_home

    _guard(lambda: (rollback(cid, version, resolve_home(home), log=_say(False)),
                    out_console.print(f"{cid}: mainline is now {version}")))


def _print_status(home: Path, cid: str, as_json: bool) -> None:
    """``campaign status``: the summary's JSON document, or the same read as text, one part after another."""
    from evotrainer.reports.summaries import campaign_summary

    doc = campaign_summary(home, cid)
    if as_json:
        _emit_json(doc, "campaign")
        return
    c = doc["campaign"]
    out_console.print(f"[bold]{c['id']}[/] {c['status']}  budget {doc['budget']['spent']}/{doc['budget']['total']} steps"
                      f"  held-out accuracy {doc['accuracy']['start']} → {doc['accuracy']['end']}")
    o = c.get("owner")
    if c["status"] == "running" and o:
        out_console.print(f"owner: pid {o['pid']} on {o['host']} ({o['purpose']}, heartbeat {o['heartbeat']})",
                          highlight=False)
    elif c["status"] == "interrupted":
        dead = f" (owner pid {o['pid']} on {o['host']} is gone)" if o else ""
        out_console.print(f"[yellow]interrupted[/]: no process runs it{dead}; continue with: {doc['resume']}",
                          highlight=False)
    elif doc["resume"]:
        out_console.print(f"continue with: {doc['resume']}", highlight=False)
    if doc["confirmation"] is not None:
        from evotrainer.agent.confirm import Confirmation

        out_console.print("confirmed on " + Confirmation.model_validate(doc["confirmation"]).describe(), highlight=False)
    _print_lineage(doc)
    _print_decisions(doc)
    _print_spend(doc, home)


def _print_lineage(doc: dict[str, Any]) -> None:
    """The mainline's versions and what each round did to it: kept, held, explored, stuck, rolled back."""
    out_console.print("[bold]lineage[/]")
    for pv in doc["lineage"]:
        out_console.print(f"  {pv['id']}  step {pv['step']}  harness {pv['harness_version']}  "
                          f"eval {pv['eval_accuracy']}  ← {pv['parent_id']}")
    for k in doc["kept"]:
        m = k.get("merged") or {}
        if m.get("kept"):
            seeds = ", ".join(f"{x['selection_accuracy']}" for x in k["candidates"])
            out_console.print(f"  [bold]kept[/] round {k['round']}: {k['chosen']}, the average of the {len(m['from'])} "
                              f"{k['arm']} seeds (step {m['step']}, selection split {m['selection_accuracy']}; the seeds "
                              f"{seeds})", highlight=False)
            continue
        chosen = next((x for x in k["candidates"] if x["run"] == k["chosen"]), {})
        others = ", ".join(f"{x['selection_accuracy']}" for x in k["candidates"] if x["run"] != k["chosen"])
        avg = f"; their average {m['selection_accuracy']}, below every seed" if m else ""
        out_console.print(f"  [bold]kept[/] round {k['round']}: {k['chosen']} ({k['arm']} arm, step {chosen.get('step')}, "
                          f"selection split {chosen.get('selection_accuracy')}; the others {others or 'none'}{avg})",
                          highlight=False)
    for m in doc["explore_modes"]:
        out_console.print(f"  [bold]{'healthy' if m['healthy'] else 'troubled'}[/] round {m['round']}: {m['reason']}; "
                          f"branches not kept may take {m['allowance']:g} steps in all (share {m['share']:g})",
                          highlight=False)
    for m in doc["movements"]:
        if m["stuck"]:
            out_console.print(f"  [bold]stuck[/] round {m['round']}: {m['reason']}; only changes that enlarge the "
                              "update may be backtested", highlight=False)
    for r in doc["rollbacks"]:
        if r["auto"]:
            out_console.print(f"  [bold]rolled back[/] round {r['round']}: {r['from']} ({r['from_accuracy']:.3f}) fell "
                              f"more than {r['margin']:.3f} below {r['to']} ({r['to_accuracy']:.3f})", highlight=False)
        else:
            out_console.print(f"  [bold]rolled back[/] by hand to {r['to']}", highlight=False)


def _print_decisions(doc: dict[str, Any]) -> None:
    """Every backtest's decision, the harness versions they made, and the diagnostics revised."""
    out_console.print("[bold]decisions[/]")
    for d in doc["decisions"]:
        out_console.print(f"  {d['proposal_id']}  {d['knob']}={d['new']!r}: [bold]{d['outcome']}[/] — {'; '.join(d['reasons'])}",
                          highlight=False)
    if not doc["decisions"]:
        out_console.print("  none yet")
    if len(doc["versions"]) > 1:
        out_console.print("[bold]harness versions[/] (each one change)")
        for v in doc["versions"][1:]:
            changes = ", ".join(f"{c['path']} {c['old']!r} → {c['new']!r}" for c in v["diff"])
            out_console.print(f"  {v['version']}  {changes}  (from {v['policy']})", highlight=False)
    for r in doc["revisions"]:
        verdict = "adopted" if r["accepted"] else "not adopted"
        out_console.print(f"[bold]diagnostic revision[/] {r['misfire']['kind']}: {verdict} — {'; '.join(r['reasons'][:2])}",
                          highlight=False)
    outcomes = Counter(d["outcome"] for d in doc["decisions"])
    if outcomes:
        out_console.print("[bold]summary[/] " + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items()))
                          + f"; {len(doc['versions']) - 1} harness version(s) after the start")


def _print_spend(doc: dict[str, Any], home: Path) -> None:
    """Where the budget and the seconds went, and where to look next."""
    c = doc["campaign"]
    sp = doc["spend"]
    if sp["spent"]:
        out_console.print(f"[bold]budget[/] {sp['spent']} steps: {sp['mainline_segments']} mainline segments + "
                          f"{sp['kept_branches']} in kept branches (the mainline's own steps: useful share "
                          f"{sp['useful_share']:.0%}), {sp['discarded']} in branches not kept; {sp['screened']} "
                          f"change(s) screened out on recorded rollouts (0 steps)", highlight=False)
    js = doc["seconds"]
    if js["jobs"]:
        out_console.print(f"[bold]job seconds[/] {js['jobs']:.0f} s in {js['sessions']} job session(s): trainer "
                          f"{js['trainer']:.0f} s, held-out evaluation {js['eval']:.0f} s, setup {js['setup']:.0f} s, "
                          + (f"warm start {js['warm_start']:.0f} s, " if js.get("warm_start") else "")
                          + f"other {js['other']:.0f} s", highlight=False)
    ps = doc["process_seconds"]
    if ps["laps"]:
        top = ", ".join(f"{k} {v:.0f} s" for k, v in list(ps["own"].items())[:4])
        out_console.print(f"[bold]campaign process[/] {ps['own_total']:.0f} s of its own work ({top}); waited "
                          f"{ps['jobs']:.0f} s on job sessions and {ps['scoring']:.0f} s on scoring in the worker",
                          highlight=False)
    out_console.print("[bold]where to look[/]")
    out_console.print(f"  MLflow UI:  mlflow ui --backend-store-uri {doc['where']['mlflow']}", highlight=False)
    out_console.print(f"  state DB:   {doc['where']['state']}", highlight=False)
    out_console.print(f"  runs:       {home / 'jobs'}   archive: {home / 'campaigns' / c['id'] / 'archive.yaml'}", highlight=False)
