"""Reading a file another tool (or a hostile user) wrote: regular files only, never a blocking open, never unbounded.

Evidence directories come from runs other tools made, and their files are untrusted bytes: a ``metrics.jsonl`` can
be a symlink to ``/dev/zero`` (read whole, it fills the memory) or a FIFO (opened, it blocks for good). Every reader
of such a file goes through :func:`open_regular`: it opens without blocking (``O_NONBLOCK``, so a FIFO cannot hang
the open), refuses anything but a regular file once it is open (``fstat`` on the descriptor, so a swap after a check
cannot slip past), and refuses a file over :func:`max_file_bytes`. A refusal is an :class:`UnreadableFile` naming
the file and the reason, which readers list as unreadable — never as an empty file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from evotrainer.core.errors import ConfigError

MAX_FILE_MB_ENV = "EVOTRAINER_MAX_FILE_MB"
"""The environment variable that sets the cap, in MiB, on one evidence file (a positive integer)."""

DEFAULT_MAX_FILE_MB = 256
"""The cap without it: a long run's ``trainer_state.json`` or a step's rollouts are a few MiB to tens of MiB."""

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class UnreadableFile(OSError):
    """A file an evidence reader refuses to read (not a regular file, or over the cap): the message names both,
    ``reason`` says why without the path (for readers that list it beside the path)."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason


def max_file_bytes() -> int:
    """The cap on one file, from ``$EVOTRAINER_MAX_FILE_MB`` (default :data:`DEFAULT_MAX_FILE_MB`)."""
    raw = os.environ.get(MAX_FILE_MB_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_FILE_MB << 20
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"${MAX_FILE_MB_ENV} is {raw!r}: set a positive whole number of MiB (the cap on one "
                          f"evidence file), or unset it for {DEFAULT_MAX_FILE_MB}")
    return int(raw) << 20


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_regular(path: str | Path, cap: int | None = None) -> int:
    """The size of ``path`` when it is (or links to) a regular file within the cap; UnreadableFile otherwise."""
    cap = max_file_bytes() if cap is None else cap
    try:
        st = os.stat(path)
    except OSError as e:
        raise UnreadableFile(path, str(e.strerror)) from None
    return _admit(path, st, cap)


def _admit(path: str | Path, st: os.stat_result, cap: int) -> int:
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFile(path, f"{_kind(st.st_mode)}, not a regular file (evidence is read from regular files "
                                   "only)")
    if st.st_size > cap:
        raise UnreadableFile(path, f"{st.st_size / 2**20:.1f} MiB, over the {cap / 2**20:.0f} MiB one evidence "
                                   f"file may have (raise ${MAX_FILE_MB_ENV} to read it)")
    return st.st_size


def open_regular(path: str | Path, cap: int | None = None) -> BinaryIO:
    """``path`` opened for reading in binary, when it is a regular file within the cap; UnreadableFile otherwise."""
    cap = max_file_bytes() if cap is None else cap
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise UnreadableFile(path, str(e.strerror)) from None
    try:
        _admit(path, os.fstat(fd), cap)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, cap: int | None = None) -> bytes:
    """The bytes of a regular file within the cap (a file that grows past it while read is refused too)."""
    cap = max_file_bytes() if cap is None else cap
    chunks, got = [], 0
    with open_regular(path, cap) as fh:  # in pieces: read(cap + 1) would allocate the whole cap for a small file
        while got <= cap and (piece := fh.read(min(1 << 20, cap + 1 - got))):
            chunks.append(piece)
            got += len(piece)
    data = b"".join(chunks)
    if len(data) > cap:
        raise UnreadableFile(path, f"grew past the {cap / 2**20:.0f} MiB one evidence file may have while it was "
                                   f"read (raise ${MAX_FILE_MB_ENV} to read it)")
    return data


def read_text(path: str | Path, cap: int | None = None) -> str:
    """:func:`read_bytes` decoded as UTF-8 (``UnicodeDecodeError`` on other bytes)."""
    return read_bytes(path, cap).decode("utf-8")


def first_line(path: str | Path, limit: int = 1 << 20) -> str:
    """The first non-blank line of a regular file, reading at most ``limit`` bytes."""
    with open_regular(path) as fh:
        head = fh.read(limit)
    return next((ln for ln in head.decode("utf-8", "replace").splitlines() if ln.strip()), "")


__all__ = ["UnreadableFile", "check_regular", "first_line", "max_file_bytes", "open_regular", "read_bytes",
           "read_text"]
