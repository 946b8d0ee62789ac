"""Which diagnostics exist for a harness: the built-ins plus user files, trusted or sandboxed.

A harness names user diagnostics by file (``diagnostics.user``). Trusted files (the user's own) are
imported in-process like any plugin. Untrusted files (an LLM's revision, a colleague's snippet you have
not read) are never imported here: they are wrapped in :class:`SandboxedDiagnostic`, which runs them in a
separate process with time, memory and network limits (see :mod:`evotrainer.diagnostics.sandbox`).

Building a ``Registry`` is also how a harness's diagnostics section is validated against what exists: every
gate entry and every ``diagnostics.params`` key must name a registered diagnostic, and every parameter must be
one that diagnostic declares, with a valid value. A misspelt exploit gate would otherwise be silently no gate.
Errors name the harness file (``HarnessSpec.source_file``), the field, and the list of what exists.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evotrainer.config.harness import HarnessSpec
from evotrainer.core.domain import SEVERITY_RANK, Finding
from evotrainer.core.errors import ConfigError
from evotrainer.diagnostics.base import Diagnostic
from evotrainer.diagnostics.builtin import BUILTIN_DIAGNOSTICS
from evotrainer.diagnostics.sandbox import list_diagnostics, run_sandboxed
from evotrainer.evidence.model import Evidence


def builtin_diagnostics() -> dict[str, type[Diagnostic]]:

    return dict(BUILTIN_DIAGNOSTICS)


def load_diagnostic_file(path: Path) -> dict[str, type[Diagnostic]]:
    """Import a trusted Python file and return the Diagnostic subclasses it defines, by name."""
    if not path.is_file():
        raise ConfigError(f"user diagnostic file not found: {path}")
    mod_name = f"evotrainer_user_diag_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import user diagnostic file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - any import-time failure of user code is a config problem
        raise ConfigError(f"user diagnostic file {path} failed to import: {type(err).__name__}: {err}") from None
    found = {
        obj.name: obj
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, Diagnostic) and obj is not Diagnostic and not inspect.isabstract(obj)
        and getattr(obj, "name", None)
    }
    if not found:
        raise ConfigError(f"user diagnostic file {path} defines no Diagnostic subclass with a `name`")
    return found


class SandboxedDiagnostic:
    """Stand-in for a diagnostic defined in an untrusted file: same ``run`` contract, other process."""

    def __init__(self, path: Path, name: str, params: dict[str, Any] | None = None, timeout_s: float = 30.0,
                 memory_mb: int = 1024):
        self.path, self.name, self.params = path, name, params or {}
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.version = "sandboxed:" + hashlib.sha256(path.read_bytes()).hexdigest()[:10]

    def run(self, ev: Evidence) -> list[Finding]:

        return run_sandboxed(self.path, self.name, self.params, ev, timeout_s=self.timeout_s, memory_mb=self.memory_mb)


class Registry:
    """Name → diagnostic factory for one harness (built-ins, then user files; a user name may not shadow)."""

    def __init__(self, harness: HarnessSpec | None = None):
        self.harness = harness or HarnessSpec()
        self.classes: dict[str, type[Diagnostic]] = builtin_diagnostics()
        self.untrusted: dict[str, Path] = {}
        self.untrusted_params: dict[str, list[str] | None] = {}  # parameter names the sandbox reported
        base = Path(self.harness.source_dir or ".")
        for ud in self.harness.diagnostics.user:
            path = (base / ud.path).resolve() if not Path(ud.path).is_absolute() else Path(ud.path)
            if ud.trusted:
                for name, cls in load_diagnostic_file(path).items():
                    self._check_new(name, path)
                    self.classes[name] = cls
            else:
                if not path.is_file():
                    raise ConfigError(f"user diagnostic file not found: {path}")

                for name, pnames in list_diagnostics(path).items():
                    self._check_new(name, path)
                    self.untrusted[name] = path
                    self.untrusted_params[name] = pnames
        self._check_harness()

    def _check_harness(self) -> None:
        """Every gate entry and ``diagnostics.params`` key names a registered diagnostic; every parameter is one
        it declares, with a valid value. ConfigError naming the harness file, the field and what exists."""
        d = self.harness.diagnostics
        src = f"{self.harness.source_file}: " if self.harness.source_file else ""
        known = (f"known diagnostics (built-in, and this harness's diagnostics.user files): {', '.join(self.names())}"
                 " (see `evotrainer diagnostics list`)")
        for i, rule in enumerate(d.gate):
            if rule.diagnostic not in self.names():
                raise ConfigError(f"{src}diagnostics.gate[{i}].diagnostic: unknown diagnostic '{rule.diagnostic}', so "
                                  f"this gate would never fail; {known}")
        for name, params in d.params.items():
            if name not in self.names():
                raise ConfigError(f"{src}diagnostics.params.{name}: unknown diagnostic '{name}'; {known}")
            model = getattr(self.classes[name], "Params", None) if name in self.classes else None
            fields = getattr(model, "model_fields", None)
            allowed = list(fields) if isinstance(fields, dict) else self.untrusted_params.get(name)
            if allowed is None:
                continue  # a sandboxed (or unusual) diagnostic that does not say; its own Params checks when it runs
            takes = f"its parameters: {', '.join(allowed)}" if allowed else "it takes no parameters"
            for key in params:
                if key not in allowed:
                    raise ConfigError(f"{src}diagnostics.params.{name}.{key}: unknown parameter of '{name}'; {takes}")
            if isinstance(fields, dict):
                try:
                    model.model_validate(params)
                except ValidationError as err:
                    e = err.errors()[0]
                    where = ".".join(str(x) for x in e["loc"])
                    got = repr(e.get("input"))
                    raise ConfigError(f"{src}diagnostics.params.{name}.{where}: {e['msg']} (got "
                                      f"{got if len(got) <= 80 else got[:79] + '…'}); {takes} (see `evotrainer "
                                      "diagnostics list`)") from None

    def _check_new(self, name: str, path: Path) -> None:
        if name in self.classes or name in self.untrusted:
            raise ConfigError(f"{path}: diagnostic name '{name}' is already taken; rename it (revisions of a built-in "
                              "go through `evotrainer diagnostics revise`, not by shadowing it)")

    def names(self) -> list[str]:
        return sorted([*self.classes, *self.untrusted])

    def get(self, name: str, params: dict[str, Any] | None = None):
        merged = {**self.harness.diagnostics.params.get(name, {}), **(params or {})}
        if name in self.classes:
            try:
                return self.classes[name](merged)
            except Exception as err:  # noqa: BLE001 - pydantic ValidationError or a user class's own check
                raise ConfigError(f"diagnostics.params.{name}: {err}") from None
        if name in self.untrusted:
            return SandboxedDiagnostic(self.untrusted[name], name, merged)
        raise ConfigError(f"unknown diagnostic '{name}'; known: {', '.join(self.names())}")

    def run(self, ev: Evidence, names: list[str] | None = None) -> list[Finding]:
        findings: list[Finding] = []
        for name in names or self.names():
            findings.extend(self.get(name).run(ev))
        return sort_findings(findings)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.diagnostic, f.symptom))
