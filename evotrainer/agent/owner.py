"""The one process that runs a campaign: its lease and heartbeat, the workers it starts, and how it stops.

``campaign start`` and ``campaign resume`` run inside ``Owner``:

1. **Lease.** ``Store.acquire_lease`` takes the campaign for this process in one transaction, or refuses
   (``CampaignBusy``, exit 2) naming the live owner and how to stop it. A lease whose owner is gone is taken
   over, and the takeover is an event in the campaign's history.
2. **Leftovers.** Processes recorded for the campaign by an earlier owner (its pool workers, by host, pid and
   start time) that still run are ended before any work restarts, so a branch is never trained by two
   processes into one job directory. A pid now used by another process (its start time differs) is left alone.
3. **Heartbeat.** A daemon thread renews the lease every ``HEARTBEAT_S`` seconds; if the lease was taken over
   (this owner was frozen past the limit on another host), the owner stops its pools and gives up.
4. **Workers.** ``watch(pool)`` records the pool's workers now and whenever the pool restarts them.
5. **Signals.** SIGTERM (``campaign stop``) and SIGINT (Ctrl-C) abandon the job in flight — its worker is
   ended; the job resumes from its last checkpoint next time, nothing is recorded for it — and the campaign
   stops cleanly (status ``stopped``). A second Ctrl-C raises ``KeyboardInterrupt`` at once.

Leaving the block stops the heartbeat, restores the signal handlers, forgets records of workers that are
gone and releases the lease. If the owner dies instead (``kill -9``, the OOM killer), its workers die with it
(``evotrainer.core.procs.die_with_parent``) and the campaign reads as ``interrupted`` until someone resumes it.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable

from evotrainer.core import procs
from evotrainer.store.ownership import HEARTBEAT_S


def end_leftovers(store: Any, cid: str, log: Callable[[str], None] = lambda _m: None) -> list[procs.ProcessRef]:
    """End every process recorded for campaign ``cid`` that still runs on this host; forget all the records.

    Call it only while holding the campaign's lease (no live owner can own those processes then). Records from
    another host cannot be acted on from here: they are reported in an event and forgotten.
    """
    here = procs.hostname()
    ended, elsewhere = [], []
    records = store.list_processes(cid)
    for r in records:
        if r.host != here:
            elsewhere.append({"host": r.host, "pid": r.pid})
        elif procs.end(r.pid, r.started):
            ended.append(procs.ProcessRef(r.host, r.pid, r.started))
            log(f"ended pid {r.pid}, a {r.role} left running by an earlier owner of {cid}")
    if ended or elsewhere:
        store.log_event(cid, "leftovers_ended", {"ended": [p.pid for p in ended], "host": here, "elsewhere": elsewhere})
    store.forget_processes(cid, [r.id for r in records])
    return ended


class Owner:
    """Hold campaign ``cid`` for this process while the block runs (see the module docstring)."""

    def __init__(self, store: Any, cid: str, purpose: str, log: Callable[[str], None] = lambda _m: None):
        self.store, self.cid, self.purpose, self.log = store, cid, purpose, log
        self.lease: Any = None
        self.stop_requested: str | None = None  # the signal's name once one arrived
        self.lost = False  # the lease was taken over by another process
        self._pools: list[Any] = []
        self._done = threading.Event()
        self._beat: threading.Thread | None = None
        self._old_handlers: dict[int, Any] = {}

    # ------------------------------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Owner:
        self.lease = self.store.acquire_lease(self.cid, self.purpose)
        if self.lease.took_over is not None:
            self.log(f"took over campaign {self.cid}: {self.lease.reason}")
        try:
            end_leftovers(self.store, self.cid, self.log)
            self._install_signals()
            self._beat = threading.Thread(target=self._heartbeat, name="evotrainer-lease-heartbeat", daemon=True)
            self._beat.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._beat is not None:
            self._beat.join(timeout=2 * HEARTBEAT_S)
        self._restore_signals()
        try:
            gone = [r.id for r in self.store.list_processes(self.cid)
                    if r.host == procs.hostname() and not procs.alive(r.pid, r.started)]
            self.store.forget_processes(self.cid, gone)
        finally:
            if not self.lost:
                self.store.release_lease(self.cid, self.lease.token)

    def watch(self, pool: Any) -> None:
        """Record ``pool``'s workers now and each time it starts new ones; stop it with this owner."""
        self._pools.append(pool)
        pool.on_spawn = self._record
        self._record(pool.pids())
        if self.stop_requested is not None or self.lost:
            pool.stop()

    def _record(self, pids: list[int]) -> None:
        refs = [r for r in (procs.ref(p) for p in pids) if r is not None]
        if refs:
            self.store.record_processes(self.cid, refs, role="worker")

    @property
    def stopping(self) -> bool:
        return self.stop_requested is not None or self.lost

    # ------------------------------------------------------------------------------------------ heartbeat
    def _heartbeat(self) -> None:
        warned = False
        while not self._done.wait(HEARTBEAT_S):
            try:
                mine = self.store.renew_lease(self.cid, self.lease.token)
            except Exception as err:  # noqa: BLE001 - a database hiccup must not kill the campaign
                if not warned:
                    self.log(f"could not renew the lease of {self.cid} ({type(err).__name__}: {err}); retrying")
                    warned = True
                continue
            warned = False
            if not mine:
                self.lost = True
                self.log(f"the lease of {self.cid} was taken over by another process; this one stops without "
                         "writing more")
                for pool in self._pools:
                    pool.stop()
                return

    # ------------------------------------------------------------------------------------------ signals
    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers; `campaign stop --now` still works
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _restore_signals(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.stop_requested is not None and signum == signal.SIGINT:
            self._restore_signals()
            raise KeyboardInterrupt
        self.stop_requested = name
        # no locks in a signal handler: a raw write, and pool.stop() only kills processes and sets a flag
        again = " (Ctrl-C again aborts at once)" if signum == signal.SIGINT else ""
        os.write(2, f"{name}: stopping campaign {self.cid}: the job in flight is abandoned (it resumes from its last "
                    f"checkpoint){again}; `evotrainer campaign resume {self.cid}` continues\n".encode())
        for pool in self._pools:
            pool.stop()


__all__ = ["Owner", "end_leftovers"]
