"""The base of every harness section: unknown knobs are errors, and a boolean is never taken for a number.

A module of its own so that the harness's sections can live in several modules (``config.reward``) without a cycle.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, v: Any, info: ValidationInfo) -> Any:
        """``prompts_per_step: true`` is a mistake, not 1: pydantic's lax mode would take a bool for a number."""
        if isinstance(v, bool) and info.field_name is not None:
            ann = cls.model_fields[info.field_name].annotation
            if ann in (int, float) or (getattr(ann, "__args__", None) and bool not in ann.__args__
                                        and any(a in (int, float) for a in ann.__args__)):
                raise ValueError(f"{v!r} is a boolean; this knob takes a number")
        return v
