"""Confining the process that is about to run untrusted code: Landlock, seccomp, and no root to lose.

A sandboxed diagnostic (code a user named untrusted, or code an LLM drafted) runs in a child process that confines
itself, in this order, before it imports the untrusted file (see :mod:`evotrainer.diagnostics.sandbox`):

- **Landlock** (Linux >= 5.13) limits the file system: read below the interpreter, its packages, ``evotrainer`` and
  ``/usr``, ``/lib*``; write only in the child's own directory, where it may not make device nodes, sockets or
  FIFOs. With ABI 6 it also may not signal a process outside its domain nor reach an abstract unix socket. No
  maintained Python binding exists on PyPI, so the three syscalls go through ``ctypes`` here.
- **No root.** A child started by root drops to ``nobody`` (uid and gid 65534, no supplementary groups), so it keeps
  no capability: no ``CAP_DAC_READ_SEARCH`` (``open_by_handle_at`` past Landlock), ``CAP_MKNOD``,
  ``CAP_SYS_NICE``, ``CAP_FOWNER``. The kernel's own permission checks then apply to it as to any user.
- **seccomp** (through ``pyseccomp``, libseccomp's API: libseccomp resolves names per architecture, and it kills a
  call made through another ABI, i386 ``int 0x80`` or x32, so the filter cannot be bypassed that way) refuses with
  ``EPERM``, for any user, root or not:

  - sockets of any family: the network namespace covers IP, but not pathname unix sockets (docker.sock, a
    PostgreSQL socket), which Landlock up to ABI 7 does not scope;
  - new processes (``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD``; ``clone3`` answers ``ENOSYS`` so libc
    falls back to ``clone``, whose flags a filter can read), ``execve``, and leaving the process group
    (``setsid``, ``setpgid``). So the process tree is one process: its ``RLIMIT_AS`` bounds the memory it maps, no
    descendant can outlive the deadline or hold the parent's pipes, and a cgroup (this kind of host has only v1,
    not delegated) is not needed to bound a tree. Files it writes in its directory are capped at 64 MiB each
    (``RLIMIT_FSIZE``) and ``memfd_create`` is refused; a ``TMPDIR`` on tmpfs would still hold its files in memory;
  - metadata changes anywhere (``chmod``, ``chown``, extended attributes, ``utime``, ``mknod``): Landlock has no
    right for them;
  - file attributes through an open file (``ioctl`` ``FS_IOC_SETFLAGS`` / ``FS_IOC_FSSETXATTR``), and
    ``truncate`` by path;
  - another process's priority, affinity, scheduling and limits (``setpriority``, ``sched_set*`` but
    ``sched_setaffinity`` on itself, ``ioprio_set``, ``prlimit64`` that sets);
  - what would step around the rest: namespaces and mounts, ``ptrace``, ``process_vm_*``, ``pidfd_getfd``,
    ``io_uring`` (its requests open files and sockets where seccomp does not see them), ``bpf``,
    ``perf_event_open``, ``userfaultfd``, keyrings, kernel modules, ``open_by_handle_at``.

  The filter is synchronised to every thread (``TSYNC``): the thread pools numpy and Arrow start during the
  trusted imports run under it too, and a child with a thread outside it refuses to run the code. What it also
  stops, for code that needs it: copying a file's mode (``shutil.copy2``), ``Path.touch`` of an existing file, and
  asyncio (its self-pipe is a socket pair).

:func:`confinement` tells which of these this machine offers, and :func:`missing` what it lacks; code an LLM drafted
runs only where nothing is missing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from pathlib import Path

import evotrainer

FULL = "landlock+signals+seccomp"
"""What :func:`confinement` says on a machine that offers every mechanism above."""

NOBODY = 65534
"""The uid and gid a child started by root runs the untrusted code as."""

# Landlock (include/uapi/linux/landlock.h): syscalls, access rights by ABI version, scopes.
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # the same numbers on x86_64 and aarch64
_PR_SET_NO_NEW_PRIVS = 38
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_MAKE_CHAR, _FS_MAKE_SOCK, _FS_MAKE_FIFO, _FS_MAKE_BLOCK = 1 << 6, 1 << 9, 1 << 10, 1 << 11
_FS_BASE = (1 << 13) - 1  # execute .. make_sym: the ABI 1 rights
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NO_SPECIAL_FILES = ~(_FS_MAKE_CHAR | _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK)
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

_CLONE_THREAD = 0x00010000
_DENIED = (
    "socket", "socketpair", "fork", "vfork", "execve", "execveat", "setsid", "setpgid",
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "utime", "utimes", "utimensat", "futimesat", "mknod", "mknodat", "truncate",
    "setxattrat", "removexattrat", "file_setattr", "memfd_create",
    "setpriority", "sched_setscheduler", "sched_setparam", "sched_setattr", "ioprio_set", "setrlimit",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsmount", "move_mount", "open_tree",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "pidfd_open", "kcmp",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "swapon", "swapoff", "reboot",
    "acct", "quotactl", "migrate_pages", "move_pages", "mbind", "set_mempolicy",
)
"""The syscalls the filter refuses outright (``EPERM``); see the module docstring for why each group."""
_NUMBERS = {"fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "file_setattr": 469}
"""Calls newer than some libseccomp builds, by number (the same on every architecture since Linux 5.x)."""
_IOCTL_SETATTR = (0x40086602, 0x401C5820)  # FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR: attributes through an open file


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or the platform is not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return max(0, int(libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))))
    except (OSError, AttributeError):
        return 0


def seccomp_available() -> bool:
    """Whether this kernel filters syscalls (``Seccomp:`` in ``/proc/self/status``) and libseccomp can be loaded."""
    try:
        with open("/proc/self/status") as fh:
            if "Seccomp:" not in fh.read():
                return False
        import pyseccomp  # noqa: F401  (raises RuntimeError where libseccomp.so is absent)
    except (OSError, ImportError, RuntimeError):
        return False
    return True


def _mode(landlock: int, seccomp: bool) -> str:
    parts = (["landlock"] if landlock >= 1 else []) + (["signals"] if landlock >= 6 else []) + \
        (["seccomp"] if seccomp else [])
    return "+".join(parts) or "unrestricted"


def confinement() -> str:
    """How a sandboxed child would be confined on this machine: :data:`FULL` (``landlock+signals+seccomp``) where
    the kernel offers everything, else the parts it offers (``landlock``, ``landlock+seccomp``, ``seccomp``...), or
    ``unrestricted``."""
    return _mode(landlock_abi(), seccomp_available())


def missing(mode: str | None = None) -> list[str]:
    """What ``mode`` (this machine's :func:`confinement` by default) lacks of :data:`FULL`, each said as what the
    sandbox then cannot stop."""
    have = set((mode or confinement()).split("+"))
    why = {"landlock": "Landlock (Linux >= 5.13): the code could read the campaign's files and write outside its "
                       "directory",
           "signals": "Landlock ABI 6 (Linux >= 6.12): the code could signal the campaign's processes",
           "seccomp": "seccomp with libseccomp: the code could reach unix sockets, fork past its limits, and change "
                      "files' metadata"}
    return [text for part, text in why.items() if part not in have]


def readable_roots() -> list[Path]:
    """What a sandboxed child may read: the interpreter and its libraries, the installed packages, evotrainer."""
    import site


    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages(),
             str(Path(evotrainer.__file__).resolve().parent), "/usr", "/lib", "/lib64", "/lib32", "/bin",
             f"/proc/{os.getpid()}", "/dev/null", "/dev/urandom", "/dev/zero"}
    return [Path(r) for r in sorted(roots) if r and os.path.exists(r)]


def restrict_filesystem(workdir: Path) -> str:
    """Landlock the calling process (and what it starts): read below :func:`readable_roots`, write only below
    ``workdir``; with ABI 6, no signals or abstract sockets outside the domain. Returns the mode it reached
    (``landlock+signals``, ``landlock`` or ``unrestricted``)."""
    abi = landlock_abi()
    if abi < 1:
        return "unrestricted"
    libc = ctypes.CDLL(None, use_errno=True)
    handled = _FS_BASE | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0) | \
        (_FS_IOCTL_DEV if abi >= 5 else 0)
    fields = [handled] + ([0] if abi >= 4 else []) + ([_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL] if abi >= 6 else [])
    attr = (ctypes.c_uint64 * len(fields))(*fields)
    ruleset = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return "unrestricted"

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    def allow(path: Path, access: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            rights = (access if path.is_dir() else access & _FILE_RIGHTS) & handled
            rule = PathBeneath(rights, fd)
            if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule),
                            ctypes.c_uint32(0)) != 0:
                print(f"sandbox: Landlock refused a rule for {path} (it stays unreadable)", file=sys.stderr)
        finally:
            os.close(fd)

    try:
        for root in readable_roots():
            allow(root, _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR)
        allow(Path("/dev/null"), _FS_READ_FILE | _FS_WRITE_FILE)
        allow(workdir, handled & _NO_SPECIAL_FILES)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(_SYS_RESTRICT, ctypes.c_int(ruleset),
                                                                              ctypes.c_uint32(0)) != 0:
            return "unrestricted"
    finally:
        os.close(ruleset)
    return _mode(abi, False)


def drop_root() -> str:
    """Run on as ``nobody`` when started as root (no supplementary groups, so no capability is left). Returns the
    user the process now is; raises ``OSError`` when root cannot be dropped."""
    if os.geteuid() != 0:
        return str(os.geteuid())
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    if os.geteuid() == 0 or os.getegid() == 0:
        raise OSError(errno.EPERM, "still root after setresuid")
    import site

    unreadable = [p for p in (sys.prefix, *site.getsitepackages()) if os.path.isdir(p)
                  and not os.access(p, os.R_OK | os.X_OK)]
    if unreadable:  # lazy imports of the untrusted code would fail one by one: refuse once, saying why
        raise OSError(errno.EACCES, f"{', '.join(unreadable)} cannot be read by nobody (uid {NOBODY}): make the "
                                    "interpreter and its packages world-readable, or run as a user who is not root")
    return "nobody"


def restrict_syscalls() -> bool:
    """Load the seccomp filter of the module docstring into the calling process. False where it cannot be."""
    if not seccomp_available():
        return False
    import pyseccomp as sc

    refuse = sc.ERRNO(errno.EPERM)
    flt = sc.SyscallFilter(sc.ALLOW)
    for name in _DENIED:
        try:
            flt.add_rule(refuse, name)
        except OSError:  # a name this libseccomp does not know: refuse it by its number where it has one
            if name in _NUMBERS:
                flt.add_rule(refuse, _NUMBERS[name])
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    flt.add_rule(refuse, "clone", sc.Arg(0, sc.MASKED_EQ, _CLONE_THREAD, 0))
    flt.add_rule(refuse, "sched_setaffinity", sc.Arg(0, sc.NE, 0))
    flt.add_rule(refuse, "prlimit64", sc.Arg(2, sc.NE, 0))
    for request in _IOCTL_SETATTR:
        flt.add_rule(refuse, "ioctl", sc.Arg(1, sc.EQ, request))
    # every thread, not only this one: numpy's and Arrow's pools started during the trusted imports
    flt.set_attr(sc.Attr.CTL_TSYNC, 1)
    try:
        flt.load()
    except OSError:
        return False
    return all_threads_filtered()


def all_threads_filtered() -> bool:
    """Whether every thread of this process runs under a seccomp filter (``Seccomp: 2`` in its status)."""
    try:
        tasks = os.listdir("/proc/self/task")
        for tid in tasks:
            with open(f"/proc/self/task/{tid}/status") as fh:
                if "Seccomp:\t2" not in fh.read():
                    return False
    except OSError:
        return False
    return bool(tasks)
