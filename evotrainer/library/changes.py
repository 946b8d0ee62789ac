"""What a relative intervention means for a given harness, and which way a change goes.

Why "direction": lessons must generalise over exact values. A refuted ``learning_rate 3e-4 → 9e-4`` and a
refuted ``1e-3 → 3e-3`` are the same mistake ("raising the learning rate against a plateau"), so mistake
notes are clustered by (symptom, knob, direction), and a promoted change is credited to the skill whose
intervention moves the same knob the same way. ``resolve_value`` keeps the catalog's semantics: ``set`` is the
value, ``scale`` multiplies the current value (an int knob stays an int), ``step`` shifts a [lo, hi] range.
"""

from __future__ import annotations

import re
from typing import Any

from evotrainer.library.format import Intervention


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _pair(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and len(x) == 2 and all(_number(v) for v in x)


def resolve_value(iv: Intervention, current: Any) -> Any:
    """The absolute value ``iv`` gives a knob whose value is ``current``; None when it cannot say."""
    if iv.op == "set":
        return iv.arg
    if iv.op == "scale":
        if not _number(current):
            return None
        new = current * iv.arg
        return int(round(new)) if isinstance(current, int) else float(f"{new:.6g}")
    if not _pair(current):  # step; None = the task's default level, unknown here
        return None
    return [current[0] + iv.arg, current[1] + iv.arg]


def _slug(x: Any) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(x).lower()).strip("-") or "value"


def direction(old: Any, new: Any) -> str:
    """Which way ``old → new`` moves a knob: up, down, same, on, off, to-<value> (a name) or set (a range from null).

    A number from null counts as up: the only nullable number knob is ``grpo.epsilon_high``, whose null means
    "same as epsilon", and any valid value is at least epsilon.
    """
    if isinstance(new, bool):
        return "on" if new else "off"
    if isinstance(new, str):
        return f"to-{_slug(new)}"
    if _number(new):
        if _number(old):
            return "up" if new > old else "down" if new < old else "same"
        return "up"
    if _pair(new):
        if _pair(old):
            delta = (new[0] + new[1]) - (old[0] + old[1])
            return "up" if delta > 0 else "down" if delta < 0 else "same"
        return "set"
    return "set"


def intervention_direction(iv: Intervention, current: Any) -> str:
    """The direction ``iv`` moves a knob whose value is ``current`` (from its op when the value is unknown)."""
    value = resolve_value(iv, current)
    if value is not None or iv.op == "set":
        return direction(current, value)
    if iv.op == "scale":
        return "up" if iv.arg > 1 else "down"
    return "up" if iv.arg > 0 else "down"


def knob_slug(knob: str) -> str:
    return _slug(knob)
