"""The one atomic whole-file write that every rewritten record goes through."""

from __future__ import annotations

import os
import stat

import pytest

from evotrainer.core import atomic


def test_write_replaces_the_file_with_usual_permissions_and_leaves_no_temp(tmp_path):
    target = tmp_path / "meta.json"
    target.write_text("old")
    assert atomic.write_text(target, '{"new": "ü"}\n') == target
    assert target.read_text(encoding="utf-8") == '{"new": "ü"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_a_write_that_fails_halfway_keeps_the_old_file_and_cleans_up(tmp_path):
    target = tmp_path / "SKILL.md"
    target.write_text("the old skill")
    with pytest.raises(UnicodeEncodeError):
        atomic.write_text(target, "a" * 10_000 + "é", encoding="ascii")
    assert target.read_text() == "the old skill"
    assert [p.name for p in tmp_path.iterdir()] == ["SKILL.md"]
