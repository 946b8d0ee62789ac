"""The evidence contract: what the diagnostics consume, as a versioned JSON Schema derived from their declarations.

Why: a team that trains with TRL, verl or its own loop wants to know, before adopting the diagnostics, which
per-step metrics and per-rollout fields they read and which diagnostic needs which — the "minimal evidence
contract". Written by hand, such a list drifts from the code; here it is *computed* from what each diagnostic
declares (``needs``, ``requires_*``, ``reads``: :mod:`evotrainer.diagnostics.base`), with field meanings from
:data:`evotrainer.evidence.model.METRIC_DOCS` and :data:`evotrainer.evidence.model.ROLLOUT_DOCS`, and readers' aliases
from :mod:`evotrainer.evidence.readers`. ``tests/test_contract.py`` projects real and synthetic evidence onto each
diagnostic's declared fields and requires the same verdicts, so a diagnostic that starts reading a field it
does not declare fails the tests; and it requires ``docs/evidence-contract.schema.json`` to equal what
``evotrainer evidence contract --json`` prints.

The document is a JSON Schema (draft 2020-12) of two record types — ``metric_step`` (one per optimiser step) and
``rollout`` (one per completion), and the fields of a run's own record a diagnostic may need (``x-record``: the
recipe) — with the contract in annotation keywords a validator ignores:
``x-contract-version``, per field ``x-needed-by`` / ``x-read-by`` (diagnostics) and ``x-aliases`` (what other
tools call it, and how our readers map it), and ``x-diagnostics`` (each diagnostic's needs as alternatives,
in words, with how to supply a missing one). Bump :data:`CONTRACT_VERSION` when a field is added, removed or
changes meaning (a change to the declarations changes the published file, and the test says so).
"""

from __future__ import annotations

import fnmatch
from typing import Any, Callable

from evotrainer.diagnostics.base import Diagnostic
from evotrainer.diagnostics.builtin import BUILTIN_DIAGNOSTICS
from evotrainer.evidence.model import (
    CORRECT_WORDS,
    FULL_ROLLOUT_SCHEMA,
    LENGTH_KEYS,
    METRIC_DOCS,
    NEGATING_WORDS,
    ROLLOUT_DOCS,
    TRUNCATED_KEYS,
    VERL_METRICS,
)

CONTRACT_VERSION = "4"  # 3: meta:spec (unusual_recipe v2), rollout:truncated read by the group diagnostics;
# 4: rollout:prompt_id and group_id read by overfitting v2 (its reuse rule)
"""Version of the contract: fields, their meaning and which diagnostics need them."""

CORE_ROLLOUT_FIELDS = ("step", "prompt", "completion")
"""Every rollout record has these (the readers fill ``prompt_id`` and ``group_id`` when a tool has no such ids)."""

RECORD_DOCS = {"harness": "The recipe the run trained under (every harness knob; our jobs' meta.json): what "
                          "unusual_recipe compares with each knob's normal range. Other tools' runs carry none.",
               "spec": "The job that ran (our jobs' meta.json): its task and the levels its held-out split is scored on "
                       "(eval.difficulty), which unusual_recipe reads the training levels against. Other tools' runs "
                       "carry none."}
"""Fields of a run's own record (``Evidence.meta``) that a diagnostic may need (``'meta:KEY'``)."""

_JSON_TYPES = {"string": "string", "int32": "integer", "int64": "integer", "double": "number", "bool": "boolean"}


def _diagnostics() -> list[Diagnostic]:

    return [cls() for _, cls in sorted(BUILTIN_DIAGNOSTICS.items())]


def declared_fields(d: Diagnostic) -> tuple[list[str], list[str]]:
    """(fields named in its needs, fields it reads besides), as 'metric:NAME' / 'rollout:COLUMN'."""
    needed = list(dict.fromkeys(f for n in d.declared_needs() for f in n.fields()))
    return needed, [f for f in dict.fromkeys(d.declared_reads()) if f not in needed]


def metric_fields() -> list[str]:
    """Every per-step metric some built-in diagnostic needs or reads (patterns such as 'eval/*/greedy_accuracy'
    included), sorted."""
    out: set[str] = set()
    for d in _diagnostics():
        needed, read = declared_fields(d)
        out |= {f.split(":", 1)[1] for f in [*needed, *read] if f.startswith("metric:")}
    return sorted(out - {"*"})  # 'metric:*' (nan: which metrics a row holds) is no field of its own


_DOCS = {"eval/*/greedy_accuracy": "Held-out greedy accuracy on one earlier distribution (suite '*'), per evaluation: "
                                   "what forgetting compares with its best value."}


def _metric_doc(name: str) -> str:
    if name in _DOCS:
        return _DOCS[name]
    if name in METRIC_DOCS:
        return METRIC_DOCS[name]
    for pat, doc in METRIC_DOCS.items():
        if fnmatch.fnmatchcase(name, pat) or fnmatch.fnmatchcase(pat, name):
            return doc
    return ""


def _aliases() -> dict[str, dict[str, str]]:
    """'metric:NAME' / 'rollout:COLUMN' -> {tool: how our reader of that tool gets it}."""
    out: dict[str, dict[str, str]] = {}
    for src, dst in VERL_METRICS:
        out.setdefault(f"metric:{dst}", {}).setdefault("verl", src)
    for name in metric_fields():
        out.setdefault(f"metric:{name}", {})["trl"] = f"'{name}' in trainer_state.json log_history (same name)"
    out["metric:accuracy"] |= {
        "trl": "a correctness-named metric (log_metric) or rewards/<fn>/mean of the reward function chosen as "
               "correctness (see x-correctness)",
        "any": "--map accuracy=METRIC or --correctness METRIC"}
    out.setdefault("metric:eval/greedy_accuracy", {})["any"] = "--map eval/greedy_accuracy=METRIC"
    rollouts = {
        "step": {"trl": "step column of completions/completions_*.parquet", "verl": "step field, else the {step}.jsonl "
                 "file name"},
        "prompt": {"trl": "prompt (text, or a conversation as 'role: content' lines)", "verl": "input"},
        "completion": {"trl": "completion", "verl": "output"},
        "group_id": {"trl": "<step>:<k>, k counting prompt changes (TRL writes a group's completions together)",
                     "verl": "<step>:<k>, k numbering distinct prompts of the step (verl reorders the batch)"},
        "prompt_id": {"trl": "hash of the prompt text", "verl": "hash of the prompt text"},
        "reward": {"trl": "weighted sum of the reward-function columns (weights solved from log_history), else their "
                   "plain sum", "verl": "score"},
        "reward_correctness": {"trl": "reward_<fn> holds each reward function's column"},
        "advantage": {"trl": "advantage"},
        "correct": {"trl": "a 0/1 log_extra column or reward function named like correctness, or a zero-weight 0/1 "
                    "reward function (x-correctness)", "verl": "a 0/1 reward_extra_info key named like correctness "
                    "(acc, is_correct, …)", "any": "--map correct=COLUMN or --correctness NAME"},
        "length": {"trl": f"a column named {' / '.join(LENGTH_KEYS)}", "verl": f"a field named {' / '.join(LENGTH_KEYS)}"},
        "truncated": {"trl": f"a 0/1 column named {' / '.join(TRUNCATED_KEYS)}",
                      "verl": f"a 0/1 field named {' / '.join(TRUNCATED_KEYS)}"},
    }
    for col, tools in rollouts.items():
        out.setdefault(f"rollout:{col}", {}).update(tools)
    return out


def _diagnostic_listing() -> tuple[list[dict[str, Any]], dict[str, list[str]], dict[str, list[str]]]:
    """Each diagnostic's needs and reads, and for each field the diagnostics that need it and those that read it."""
    needed_by: dict[str, list[str]] = {}
    read_by: dict[str, list[str]] = {}
    listing = []
    for d in _diagnostics():
        needed, read = declared_fields(d)
        for f in needed:
            needed_by.setdefault(f, []).append(d.name)
        for f in read:
            read_by.setdefault(f, []).append(d.name)
        listing.append({
            "diagnostic": d.name, "version": d.version, "symptom": d.symptom,
            "needs": [{"what": n.what, "any_of": [[list(slot) for slot in opt] for opt in n.options],
                       "text": n.describe(), "supply": n.supply} for n in d.declared_needs()],
            "reads": [f for f in dict.fromkeys(d.declared_reads()) if f not in needed],
        })
    return listing, needed_by, read_by


def _annotator(needed_by: dict[str, list[str]], read_by: dict[str, list[str]]) -> Callable[[str, dict], dict]:
    """What marks a field's schema with the diagnostics that need or read it and the names readers accept for it."""
    aliases = _aliases()

    def annotate(key: str, prop: dict[str, Any]) -> dict[str, Any]:
        if key in needed_by:
            prop["x-needed-by"] = needed_by[key]
        if key in read_by:
            prop["x-read-by"] = read_by[key]
        if aliases.get(key):
            prop["x-aliases"] = dict(sorted(aliases[key].items()))
        return prop

    return annotate


def _metric_properties(annotate: Callable[[str, dict], dict]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metric step's properties, and its pattern properties (a glob such as ``rewards/*/mean`` as a regex)."""
    metric_props: dict[str, Any] = {"step": {"type": "integer", "minimum": 0, "description": "Optimiser step."}}
    patterns: dict[str, Any] = {}
    for name in metric_fields():
        prop = annotate(f"metric:{name}", {"type": ["number", "null"], "description": _metric_doc(name)})
        if any(ch in name for ch in "*?["):
            regex = "^" + fnmatch.translate(name).removeprefix("(?s:").removesuffix(")\\Z").replace(".*", "[^/]+") + "$"
            patterns[regex] = prop | {"x-pattern": name}
        else:
            metric_props[name] = prop
    return metric_props, patterns


def _rollout_properties(annotate: Callable[[str, dict], dict]) -> dict[str, Any]:
    """The rollout record's properties: the core fields required, the rest nullable."""
    rollout_props: dict[str, Any] = {}
    for f in FULL_ROLLOUT_SCHEMA:
        t = _JSON_TYPES.get(str(f.type), "string")
        rollout_props[f.name] = annotate(f"rollout:{f.name}", {
            "type": t if f.name in CORE_ROLLOUT_FIELDS else [t, "null"], "description": ROLLOUT_DOCS[f.name]})
    return rollout_props


def build_contract() -> dict[str, Any]:
    """The contract document (see the module docstring); what ``evotrainer evidence contract --json`` prints."""
    listing, needed_by, read_by = _diagnostic_listing()
    annotate = _annotator(needed_by, read_by)
    metric_props, patterns = _metric_properties(annotate)
    rollout_props = _rollout_properties(annotate)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"evotrainer-evidence-contract-v{CONTRACT_VERSION}",
        "title": "EvoTrainer evidence contract",
        "description": (
            "What EvoTrainer's diagnostics consume: per-step metrics (TRL's names) and per-rollout records. A run "
            "is evidence when it provides metric_step records and/or rollout records; each diagnostic needs one "
            "alternative of each of its needs (x-diagnostics) and says 'not enough evidence' otherwise. Fields "
            "outside the contract are kept and ignored. Printed by `evotrainer evidence contract --json`."),
        "x-contract-version": CONTRACT_VERSION,
        "type": "object",
        "properties": {
            "metrics": {"type": "array", "items": {"$ref": "#/$defs/metric_step"}},
            "rollouts": {"type": "array", "items": {"$ref": "#/$defs/rollout"}},
        },
        "$defs": {
            "metric_step": {
                "type": "object", "description": "One optimiser step's metrics, under TRL's names.",
                "required": ["step"], "properties": metric_props, "patternProperties": patterns,
                "additionalProperties": {"type": ["number", "null"]},
            },
            "rollout": {
                "type": "object", "description": "One completion and what it earned.",
                "required": list(CORE_ROLLOUT_FIELDS), "properties": rollout_props, "additionalProperties": True,
            },
        },
        "x-diagnostics": listing,
        "x-record": {k.split(":", 1)[1]: annotate(k, {"description": RECORD_DOCS[k.split(":", 1)[1]]})
                     for k in sorted({*needed_by, *read_by}) if k.startswith("meta:")},
        "x-correctness": {
            "description": (
                "Strict correctness is what separates a hacked reward from progress. When a run has no rollout "
                "column 'correct' (or no metric 'accuracy'), the readers look for a 0/1 signal under another name, "
                "use it and say so: an extra column (TRL log_extra, a verl reward_extra_info key) named like "
                "correctness, then a zero-weight reward function so named, then a reward function so named, then a "
                "zero-weight 0/1 reward function of any name; for the metric, a correctness-named metric "
                "(log_metric) or the chosen function's rewards/<fn>/mean. --correctness NAME or --map overrides."),
            "words": sorted(CORRECT_WORDS),
            "excluded_words": sorted(NEGATING_WORDS),
        },
        "x-mapping": (
            "`--map FIELD=NAME` (repeatable) or `--map-file FILE` (YAML: map: {FIELD: NAME}, correctness: NAME) names "
            "a run's own column or metric for a contract field; 'rollout:' / 'metric:' prefixes choose where a "
            "name is both. A source is looked up as a rollout column, reward_<NAME>, a metric, then rewards/<NAME>/mean."),
    }
