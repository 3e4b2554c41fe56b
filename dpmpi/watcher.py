"""The failure watcher: learn of a peer's death while the main thread computes, and interrupt it.

Without it a survivor notices a death only at its next MPI call, so a long step (numpy for
250 ms, a GIL-released wait on a device) delays the repair by the rest of the step. With it:

- **Same node**: one pidfd per active peer on this node (same kernel, same pid namespace; the
  processes' identities are allgathered by ``dpmpi.init``), waited on with ``poll()`` by a C
  thread (``cext/dpmpi_watch.c``): it wakes when a peer's process ends. No MPI, no CPU while
  nothing happens.
- **Other nodes** (``DPMPI_WATCH_ULFM``: ``auto``, the default, turns it on when some pair of
  processes is not on one node, ``1`` always, ``0`` never): ULFM's own detection. A receive
  from ``MPI_ANY_SOURCE`` posted on a duplicate of the active communicator that is dpmpi's own,
  tested by the same C thread every ``DPMPI_WATCH_POLL`` seconds (default 0.01); Open MPI
  completes it in error when a process of it fails, or when a repair started elsewhere revoked
  it. The duplicate is made again after each repair (one ``Dup`` in the repair's commit).

On a notice the thread sends a signal (``DPMPI_WATCH_SIGNAL``, default ``SIGRTMIN+6``) to the main
thread. Its handler raises ``ProcFailedError`` (``RevokedError`` for a revoke) where CPython runs
signal handlers (the next call, loop iteration or function entry), and a GIL-released wait that
Python retries on a signal (``time.sleep``, a lock or ``Event.wait``) returns early with it, but
only where the program asked for it: inside ``Runtime.run``'s steps, or inside ``with
dpmpi.interrupt_on_failure():``. Never inside dpmpi's own code (a repair, a snapshot call, a
``dpmpi.Comm`` call): a notice that arrives there is raised when that code returns to the program.
A notice is sticky until the next repair re-arms the watcher with the new set of processes.

Owner and lifetime: ``dpmpi.init`` creates the one ``Watcher`` of the process (``_State.watcher``)
from the main thread and starts the C thread; the repair's first step (its listeners' ``repair_begins``)
closes the thread's MPI gate and revokes the watcher's communicator; the repair's commit
re-arms it (``Watcher.rearm``). The thread never stops; an ``on_exit`` handler closes the gate
before dpmpi's exit agreement. See docs/threads.md.
"""
from __future__ import annotations

import atexit
import os
import signal
import threading
import time
import warnings
from typing import Any

from mpi4py import MPI

from dpmpi import _guard, config, interrupts
from dpmpi.errors import ProcFailedError, RevokedError
from dpmpi.eventlog import log_event
from dpmpi.watchplan import Ident, Mode, local_peers, ulfm_needed, watched_peers

ENV_WATCH = "DPMPI_WATCH"  # 0: no watcher at all
ENV_PIDFD = "DPMPI_WATCH_PIDFD"  # 0: no pidfds (ULFM only, e.g. to measure it)
ENV_TELL = "DPMPI_WATCH_TELL"  # 0: do not tell Open MPI of a death seen through a pidfd
ENV_ULFM = "DPMPI_WATCH_ULFM"  # auto | 1 | 0
ENV_POLL = "DPMPI_WATCH_POLL"  # seconds between tests of the ULFM receive
ENV_SIGNAL = "DPMPI_WATCH_SIGNAL"  # the signal sent to the main thread
_TAG = 31_338
_PIDFD_THREAD = os.O_EXCL  # linux/pidfd.h: PIDFD_THREAD (Linux >= 6.9)
_THREAD_FD = 1 << 24  # added to a process id in the C thread's table: the fd is its watcher thread's
_TELL_ONLY = 1 << 25  # added too: tell Open MPI when it fires, but no notice (a spare's table)
SOURCES = {1: "pidfd", 2: "ulfm"}
# a notice that the main thread has not taken after this share of DPMPI_REPAIR_TIMEOUT ends the
# process (cext/dpmpi_watch.c); a guarded intercommunicator creation ends at 0.5 with its own
# cause (dpmpi.resilient.stuck_creation), the others' repair deadline is the whole of it
STUCK_SHARE = 0.6



# ---- who is where ------------------------------------------------------------------------------
def _start_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return -1


def identity() -> Ident:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            kernel = f.read().strip()
    except OSError:
        import socket

        kernel = socket.gethostname()
    try:
        st = os.stat("/proc/self/ns/pid")
        ns = (st.st_dev, st.st_ino)
    except OSError:
        ns = (0, 0)
    ok = False
    if hasattr(os, "pidfd_open"):
        try:
            os.close(os.pidfd_open(os.getpid()))
            ok = True
        except OSError:
            pass
    wtid = _start_thread() if _enabled_by_env() else 0
    nspace = os.environ.get("PMIX_NAMESPACE", "")
    try:
        prank = int(os.environ.get("PMIX_RANK", "-1"))
    except ValueError:
        prank = -1
    return Ident(kernel, ns, os.getpid(), _start_ticks(os.getpid()), ok, wtid, nspace, prank)


def _enabled_by_env(environ: Any = None) -> bool:
    return bool(config.get(ENV_WATCH, environ))


_closing_registered = False


def _register_close(ext: Any) -> None:
    """A program's own MPI.Finalize() closes the thread's MPI use first (at a normal exit the
    thread's on_exit handler does)."""
    global _closing_registered
    if not _closing_registered:
        _closing_registered = True
        _guard.before_mpi_ends(ext.lib.dpmpi_watch_close)


def _start_thread() -> int:
    """Start the C thread (idempotent; before the identities are exchanged, so that they carry its
    id) and install the signal handler in the main thread; returns the thread's kernel id."""
    global _signo
    ext = _cext()
    if _signo is None:
        _signo = 0
        if threading.get_ident() == interrupts.MAIN:
            signo = _signal_number()
            old = signal.getsignal(signo)
            if old not in (signal.SIG_DFL, None, interrupts.on_signal):
                warnings.warn(f"dpmpi: signal {signo} already has a handler; the failure watcher will not "
                              f"interrupt steps (set {ENV_SIGNAL} to a free signal)", RuntimeWarning, stacklevel=4)
            else:
                signal.signal(signo, interrupts.on_signal)
                # a mask inherited from the parent process must not hold it back
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signo})
                _signo = signo
                # the interpreter's end resets the handler to SIG_DFL (which ends the process on
                # this signal) while peers that end normally are still being noticed
                atexit.register(ext.lib.dpmpi_watch_stop_signals)
    rc = ext.lib.dpmpi_watch_start(interrupts.MAIN if _signo else 0, _signo)
    if rc < 0:
        raise OSError(-rc, f"dpmpi: cannot start the failure watcher thread: {os.strerror(-rc)}")
    # a main thread that never takes a notice (stuck inside a call the failure does not reach)
    # ends its process before the others' repair deadline (cext/dpmpi_watch.c)
    ext.lib.dpmpi_watch_set_stuck(STUCK_SHARE * config.get("DPMPI_REPAIR_TIMEOUT"))
    _register_close(ext)
    info = ext.ffi.new("dpmpi_watch_info *")
    ext.lib.dpmpi_watch_get(info)
    return int(info.tid)


def mode_from_env(procs: dict[int, Ident], environ: Any = None) -> Mode:
    env = os.environ if environ is None else environ
    enabled = _enabled_by_env(env)
    ulfm = config.get(ENV_ULFM, env)
    return Mode(enabled, enabled and ulfm_needed(procs, ulfm))


def _signal_number() -> int:
    return int(config.get(ENV_SIGNAL))


# ---- the watcher ---------------------------------------------------------------------------------
_W: Watcher | None = None  # the process's watcher (main thread: set once by start())
_signo: int | None = None  # the signal sent to the main thread (0: none; None: not set up yet)


def current() -> Watcher | None:
    """The process's watcher (None: not started, or turned off)."""
    return _W


def _cext() -> Any:
    from dpmpi import _cext

    return _cext


class Watcher:
    """The process's failure watcher (one, owned by dpmpi.init's state)."""

    def __init__(self, state: Any, mode: Mode) -> None:
        self.state = state
        self.mode = mode
        self.use_pidfd = bool(config.get(ENV_PIDFD))
        self.tell = False  # Open MPI is told of a death seen through a pidfd (start() binds PMIx)
        self.period = float(config.get(ENV_POLL))
        self.signo = 0
        self.interrupts = 0  # failures raised in the main thread by the watcher
        self.peers: list[int] = []  # the process ids watched through pidfds in this generation
        self._fds: dict[int, list[int]] = {}  # process id -> its pidfds; never closed (the C thread polls them)
        self._comm: MPI.Comm | None = None  # the ULFM receive's communicator (this generation)
        self._kept: list = []  # older ones: a receive stays pending on each, forever
        self._gen = 0
        self._info = _cext().ffi.new("dpmpi_watch_info *")
        self._fired = _cext().ffi.new("long *", 0)  # pidfds fired as nap() last saw them

    # -- start --
    def start(self) -> None:
        ext = _cext()
        _start_thread()  # (already started by identity(), normally)
        self.signo = _signo or 0
        if self.mode.ulfm:
            from dpmpi import _guard

            path = _guard.libmpi_path()
            if path is None or ext.lib.dpmpi_watch_bind_mpi(path.encode()) != 0:
                raise RuntimeError(f"dpmpi: cannot bind MPI for the failure watcher (libmpi: {path})")
        if self.use_pidfd and config.get(ENV_TELL):
            from dpmpi import _guard

            path = _guard.loaded_library("libpmix.so")
            self.tell = path is not None and ext.lib.dpmpi_tell_bind(path.encode()) == 0
        interrupts.attach(ext.lib.dpmpi_watch_noticed_ptr(), self.failure, ext.lib.dpmpi_watch_acked_ptr())

    def _pidfds(self, proc: int) -> list[int]:
        """The peer's process pidfd and, when it can be had, one on its watcher thread."""
        if proc in self._fds:
            return self._fds[proc]
        ident = self.state.procs.get(proc)
        if ident is None:
            return []
        try:
            fd = os.pidfd_open(ident.pid)
        except OSError:
            return []  # gone already (its death surfaces at the next MPI call), or not allowed
        if ident.start >= 0 and _start_ticks(ident.pid) not in (ident.start, -1):
            os.close(fd)  # the pid names another process now
            return []
        fds = [fd]
        if ident.wtid:
            # its watcher thread (PIDFD_THREAD, Linux >= 6.9): readable as soon as that thread
            # has exited, which a killed process's threads do at once, while the process counts
            # as gone only when the last of them has (its nice-19 snapshot threads can wait
            # hundreds of ms for the CPU they need to exit on a busy node)
            try:
                tfd = os.pidfd_open(ident.wtid, _PIDFD_THREAD)
                if os.path.exists(f"/proc/{ident.pid}/task/{ident.wtid}"):
                    fds.append(tfd)
                else:
                    os.close(tfd)
            except OSError:
                pass  # an older kernel: the process pidfd alone
        self._fds[proc] = fds
        return fds

    # -- each generation --
    def rearm(self) -> None:
        """After init and after each repair commits (collective over the new active communicator
        when ULFM is watched): watch the active peers of the new plan; clears the notice."""
        st = self.state
        me = st.logical()
        peers = watched_peers(st.procs, st.process_id, st.plan.actives, me >= 0, self.tell) if self.use_pidfd else []
        quiet = _TELL_ONLY if me < 0 else 0
        fds, ids = [], []
        self.peers = []
        for proc in peers:
            mine = self._pidfds(proc)
            if mine:
                self.peers.append(proc)
                ident = st.procs[proc]
                if self.tell and ident.nspace and ident.prank >= 0:
                    _cext().lib.dpmpi_tell_add(proc, ident.nspace.encode(), ident.prank)
            for i, fd in enumerate(mine):
                fds.append(fd)
                ids.append(proc + (_THREAD_FD if i else 0) + quiet)
        comm = None
        if self.mode.ulfm and me >= 0 and st.active is not None:
            from dpmpi.mpicall import warm_up
            from dpmpi.errors import from_mpi

            raw = st.active.mpi
            try:
                comm = raw.Dup()
            except MPI.Exception as exc:
                raise from_mpi(exc, raw, "failure watcher (Dup)") from exc
            warm_up(comm, "failure watcher")
            if self._comm is not None:
                self._kept.append(self._comm)
            self._comm = comm
        ext = _cext()
        handle = ext.ffi.cast("void *", MPI._handleof(comm)) if comm is not None else ext.ffi.NULL
        byte = ext.ffi.cast("void *", MPI._handleof(MPI.BYTE))
        gen = ext.lib.dpmpi_watch_set(len(fds), ext.ffi.new("int[]", fds or [0]), ext.ffi.new("int[]", ids or [0]),
                                      handle, byte, _TAG, self.period)
        if gen < 0:
            raise OSError(-gen, f"dpmpi: the failure watcher refused its peers: {os.strerror(-gen)}")
        self._gen = gen

    def nap(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` (for an idle spare), or until a watched peer ends: True then."""
        return bool(_cext().lib.dpmpi_watch_nap(seconds, self._fired))

    # -- the repair listener contract (registered by start()) --
    def repair_begins(self) -> None:
        """A repair begins on this process (before its first MPI call): the thread stops calling
        MPI, and the watcher's communicator is revoked, so that peers in a long step learn now."""
        _cext().lib.dpmpi_watch_quiesce()
        if self._comm is not None:
            try:
                self._comm.Revoke()
            except MPI.Exception:
                pass

    def repair_done(self, event: Any) -> None:
        """Nothing: the repair rearms the watcher itself (on spares too, which get no event)."""

    # -- what the program sees --
    def info(self) -> dict:
        lib = _cext().lib
        lib.dpmpi_watch_get(self._info)
        i = self._info
        source = SOURCES.get(i.source, "")
        if source == "pidfd" and i.id >= _THREAD_FD:
            source = "pidfd-thread"  # the peer's watcher thread ended before its process was gone
        return {"noticed": bool(i.noticed), "source": source, "id": int(i.id) % _THREAD_FD if source else int(i.id),
                "at": float(i.at), "generation": int(i.gen), "peers": len(self.peers), "pidfds": int(i.npeers),
                "ulfm": bool(i.ulfm),
                "told": int(_cext().lib.dpmpi_tell_count()) if self.tell else -1,
                "told_at": float(_cext().lib.dpmpi_tell_last_at()) if self.tell else 0.0,
                "wakeups": int(i.wakeups), "tests": int(i.tests), "signals": int(i.signals), "tid": int(i.tid),
                "interrupts": self.interrupts, "signal": self.signo, "poll_s": self.period}

    def noticed(self) -> bool:
        """Whether the watcher has noticed a death or a revoke in this generation (any thread: a
        read of the C thread's notice into a buffer of the caller's own; no MPI)."""
        buf = _cext().ffi.new("dpmpi_watch_info *")
        _cext().lib.dpmpi_watch_get(buf)
        return bool(buf.noticed)

    def failure(self) -> ProcFailedError | RevokedError:
        """The exception for the current notice (raised in the main thread)."""
        info = self.info()
        st = self.state
        self.interrupts += 1
        if info["source"].startswith("pidfd"):
            proc = info["id"] % _THREAD_FD
            lr = st.plan.logical(proc)
            pid = st.procs[proc].pid if proc in st.procs else -1
            exc: ProcFailedError | RevokedError = ProcFailedError(
                f"a peer process failed: rank {lr} (process {proc}, pid {pid}) ended; noticed by dpmpi's failure "
                f"watcher ({info['source']}) while this rank computed. Repair the communicator (comm.Respawn()).",
                MPI.ERR_PROC_FAILED, (lr,) if lr >= 0 else ())
        elif info["id"] == MPI.ERR_REVOKED:
            exc = RevokedError("a peer started a repair (dpmpi's failure watcher saw its communicator revoked) "
                               "while this rank computed. Repair the communicator (comm.Respawn()).", MPI.ERR_REVOKED)
        else:
            exc = ProcFailedError(f"a peer process failed; noticed by dpmpi's failure watcher (ULFM, MPI error "
                                  f"class {info['id']}) while this rank computed. Repair the communicator "
                                  f"(comm.Respawn()).", MPI.ERR_PROC_FAILED)
        exc.noticed_by = info["source"]  # type: ignore[union-attr]
        exc.noticed_at = info["at"]  # type: ignore[union-attr]
        log_event({"event": "watch-interrupt", "process_id": st.process_id, "source": info["source"], "id": info["id"],
                   "noticed_at": info["at"], "raised_at": time.time()})
        return exc


def start(state: Any, mode: Mode) -> Watcher | None:
    """Create and start the process's watcher (from dpmpi.init); None when turned off."""
    global _W
    interrupts.initialised()
    if not mode.enabled or _W is not None:
        return _W
    w = Watcher(state, mode)
    w.start()
    _W = w
    state.listeners.add(w)
    from dpmpi import _hooks

    _hooks.enable_watch(interrupts.defer_enter, interrupts.defer_leave, w.failure)
    return w


def thread_cpu_seconds(tid: int) -> float:
    """CPU time used by the thread with kernel id ``tid`` of this process (for measurements)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:  # nanoseconds on the CPU
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return -1.0


__all__ = ["current", "Watcher", "Ident", "identity", "local_peers", "ulfm_needed"]
