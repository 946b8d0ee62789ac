"""Whole-file writes that a reader, or a ``kill -9`` in the middle, never sees half done.

Every record EvoTrainer rewrites in place (a run's ``meta.json``, its trimmed ``metrics.jsonl``, an evaluation's
outcomes, a skill, a diagnostic's archive, a drafted analyzer) goes through :func:`write_text`: the text is
written to ``.<name>.<pid>-<thread>.tmp`` beside the target (unique to the writer, and created with the
umask's usual permissions, which :func:`tempfile.mkstemp`'s 0600 would not be) and renamed over it, which POSIX makes
atomic on one file system. A crash leaves either the old file or the new one, plus at worst a dotted ``.tmp``
file that no reader's pattern matches. This module imports nothing from the project, so every layer can use it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``text`` atomically (its folder must exist); returns ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding=encoding, newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
