"""The exit guard: every way a rank can end is either a clean, fault-tolerant end of MPI or a
death the other ranks notice.

Measured with Open MPI 5.0.11 + ULFM over shared memory (docs/mpi-facts.md, re-measured):
survivors notice a rank that dies by a signal or by exit(0) without MPI_Finalize, but not one
that exits with a non-zero status; and a rank that ends with an uncaught exception or
``sys.exit(1)`` never ends at all, because mpi4py's exit hook calls MPI_Finalize, which waits for
the others. The guard closes that gap:

* ``mpi4py.rc.finalize = False`` (when dpmpi is imported before ``mpi4py.MPI``), so mpi4py does
  not finalize; dpmpi's C ``on_exit`` handler does, knowing the real exit status;
* status != 0 (uncaught exception, ``sys.exit(n)``, ``raise SystemExit(n)``, exit(n) from C):
  write a status record and end with SIGKILL, which the survivors notice in milliseconds;
* ``mpi4py.rc.fast_reduce = False``, so that reductions of Python objects run on the
  communicator itself and a Revoke interrupts them;
* ``os._exit(n)`` skips exit handlers, so it is wrapped to do the same;
* status == 0: agree on COMM_WORLD (fault tolerant, without spinning) until every live rank is
  done, then MPI_Finalize under a watchdog (``DPMPI_FINALIZE_TIMEOUT`` seconds, default
  2 + 0.002 x the number of processes).

The status records (one JSON line on stderr, only when ``DPMPI_STATUS=1``, which dpmpi-run sets)
let dpmpi-run compute the job's exit code: mpirun's own is 0 with ``--with-ft ulfm`` even when
every rank was killed.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any, Callable

from dpmpi import config, mca, stall_watchdog

ENV_STATUS = "DPMPI_STATUS"
ENV_FINALIZE_TIMEOUT = "DPMPI_FINALIZE_TIMEOUT"
ENV_STALL_TIMEOUT = "DPMPI_STALL_TIMEOUT"

_installed = False
_owns_finalize = False
_real_os_exit = os._exit
_real_sys_exit = sys.exit
_real_excepthook = sys.excepthook
_requested_exit: int | None = None  # last sys.exit() code, used only when mpi4py finalizes
_uncaught = False
_lib: Any = None


def world_rank_from_env() -> int:
    """This process's rank in its launch, from the launcher's environment (-1 if none)."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        value = os.environ.get(name)
        if value is not None and value.isdigit():
            return int(value)
    return -1


def _mpi() -> Any:
    """mpi4py.MPI if this process initialised MPI and has not finalised it, else None."""
    mod = sys.modules.get("mpi4py.MPI")
    if mod is None:
        return None
    try:
        if mod.Is_initialized() and not mod.Is_finalized():
            return mod
    except Exception:  # pragma: no cover - defensive: never fail on the exit path
        return None
    return None


def loaded_library(prefix: str) -> str | None:
    """The path of the loaded shared library whose file name starts with ``prefix`` (None: none)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if os.path.basename(path).startswith(prefix):
                    return path
    except OSError:
        return None
    return None


def libmpi_path() -> str | None:
    return loaded_library("libmpi.so")


def _tell_c_about_mpi() -> bool:
    """Give the C exit handler what it needs to end MPI; True when peers exist."""
    MPI = _mpi()
    if MPI is None or MPI.Is_finalized():  # (the program's own MPI.Finalize() ran: nothing left to end)
        return False
    path = libmpi_path()
    multi = MPI.COMM_WORLD.Get_size() > 1
    if path is None:
        return multi
    world = _lib.ffi.cast("void *", MPI._handleof(MPI.COMM_WORLD)) if multi else _lib.ffi.NULL
    # Every live rank has passed the exit agreement before Finalize, so a hung Finalize (seen
    # here after two ranks died together) holds nothing worth waiting long for.
    timeout = config.get(ENV_FINALIZE_TIMEOUT, default=2.0 + 0.002 * MPI.COMM_WORLD.Get_size())
    _lib.lib.dpmpi_exit_set_mpi(path.encode(), world, int(_owns_finalize), timeout)
    return multi


_before_mpi_ends: list[Callable[[], None]] = []
_real_finalize: Callable[[], None] | None = None


def before_mpi_ends(fn: Callable[[], None]) -> None:
    """``fn()`` runs before a program's own ``MPI.Finalize()`` ends MPI (dpmpi's threads that use
    MPI, the snapshots: at a normal exit their own exit handlers do it, in the same order)."""
    _before_mpi_ends.append(fn)


def take_over_finalize() -> None:
    """From ``dpmpi.init()`` on, the program's ``MPI.Finalize()`` is ``finalize`` below (mpi4py's
    is kept for a process without MPI peers)."""
    global _real_finalize
    MPI = _mpi()
    if MPI is not None and MPI.Finalize is not finalize:
        _real_finalize = MPI.Finalize
        MPI.Finalize = finalize


def finalize() -> None:
    """A program's ``MPI.Finalize()`` under dpmpi: the same end as a normal exit, now. mpi4py's own
    went straight to MPI_Finalize, whose fence waited for the idle spares (still waiting to be
    called in) and for peers already dead: the job failed even without a failure (a stranger's
    program). Here dpmpi's threads and snapshots stop using MPI, every live process passes the
    fault-tolerant exit agreement (idle spares then leave) and MPI_Finalize runs under the
    watchdog; at exit nothing is left to do."""
    MPI = _mpi()
    if MPI is None or _lib is None or MPI.Is_finalized() or not _tell_c_about_mpi():
        if _real_finalize is not None:
            _real_finalize()
        return
    for fn in list(_before_mpi_ends):
        fn()
    rc = int(_lib.lib.dpmpi_exit_finalize())
    if rc != 0:
        raise MPI.Exception(rc)


def hook_mpi_abort() -> None:
    """Once MPI is loaded: an abort by the MPI library itself (it ends the process with a
    non-zero _exit, which the survivors never notice) becomes a death they notice, and so does
    a process stuck in the library's fatal-signal handler (it ends by SIGALRM after
    ``DPMPI_FATAL_DEADLINE`` seconds: cext/dpmpi_fatal.c)."""
    if _lib is not None and _mpi() is not None:
        _lib.lib.dpmpi_hook_mpi_abort()
        _lib.lib.dpmpi_fatal_deadline(int(config.get("DPMPI_FATAL_DEADLINE")))


ENV_LATE_FILTER = "DPMPI_LATE_FILTER"
_late_status: int | None = None


def _preloaded_filter() -> Any:
    """The report function (ctypes) of dpmpi-run's preloaded guard when its late-message filter
    is installed in this process; None when there is no preloaded guard or it has no filter."""
    import ctypes

    try:
        fn = ctypes.CDLL(None).dpmpi_preload_late
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_long, [ctypes.c_int, ctypes.c_int]
    return fn if fn(0, 0) == 0 else None


def filter_late_messages() -> int:
    """Once MPI is initialised (dpmpi.Comm calls it for each communicator it wraps; the first call
    decides): the filter of Open MPI's late messages from dead peers (cext/dpmpi_late.c). Under
    dpmpi-run the preloaded guard installed it at MPI_Init, in every rank (so a plain mpi4py
    program has it too); otherwise this module installs its own now. Returns its status: 0
    installed, 1 turned off by DPMPI_LATE_FILTER=0, negative: not installed (another MPI, or a
    check failed; see cext/dpmpi_c.h)."""
    global _late_status
    if _late_status is None:
        path = libmpi_path()
        if not config.get(ENV_LATE_FILTER):
            _late_status = 1
        elif _preloaded_filter() is not None:
            _late_status = 0
        elif _lib is None or path is None or _mpi() is None:
            _late_status = -1
        else:
            _late_status = int(_lib.lib.dpmpi_late_install(path.encode()))
            # -2: not Open MPI 5.0.11; -10..-13: ob1 not in use, or another copy's filter is
            # already there: nothing to say
            if _late_status < 0 and _late_status != -2 and not -13 <= _late_status <= -10:
                import warnings

                warnings.warn(f"dpmpi: the filter of dead peers' late messages could not be installed "
                              f"(code {_late_status}, see cext/dpmpi_c.h); on Open MPI 5.0.11 a hang or a "
                              f"crash after a recovery is then possible (docs/mpi-facts.md)", RuntimeWarning,
                              stacklevel=3)
    return _late_status


def late_messages() -> dict[str, Any]:
    """The filter in this process: which copy installed it ("preload", "dpmpi" or None), and its
    counts by kind (FIN, ACK, PUT, FRAG): seen, dropped."""
    preloaded = _preloaded_filter()
    if preloaded is not None:
        return {"by": "preload", "seen": [int(preloaded(1, k)) for k in range(4)],
                "dropped": [int(preloaded(2, k)) for k in range(4)]}
    if _lib is None or not _lib.lib.dpmpi_late_installed():
        return {"by": None, "seen": [0] * 4, "dropped": [0] * 4}
    return {"by": "dpmpi", "seen": [int(_lib.lib.dpmpi_late_seen(k)) for k in range(4)],
            "dropped": [int(_lib.lib.dpmpi_late_dropped(k)) for k in range(4)]}


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # a closed or broken stream must not stop the exit path
            pass


def set_cause(cause: str) -> None:
    if _lib is not None:
        _lib.lib.dpmpi_exit_set_cause(json.dumps(cause[:400]).encode())


def note_recovered(world_ranks: list[int]) -> None:
    """Record world ranks whose failure the program repaired around (for the job's exit code)."""
    if _lib is not None:
        for r in world_ranks:
            _lib.lib.dpmpi_exit_add_recovered(int(r))


def adopt_exit_agreement(request_handle: int, flag_address: int) -> None:
    """An exit agreement this process already posted (a spare's), and the address of its int
    flag (kept alive by the caller): the exit path finishes it."""
    _lib.lib.dpmpi_exit_adopt_agree(_lib.ffi.cast("void *", request_handle), _lib.ffi.cast("int *", flag_address))


def exit_after_agreement(status: int, clean: bool = True) -> None:
    """The exit agreement completed (a spare saw the job end): flush and exit now. ``clean``: the
    agreement's result (False: some process knew of a failure in the job)."""
    _flush()
    _tell_c_about_mpi()
    _lib.lib.dpmpi_exit_after_agree(status, int(clean))


def set_record_rank(rank: int) -> None:
    """The rank this process's status record names (a spawned replacement: its job-wide id)."""
    if _lib is not None:
        _lib.lib.dpmpi_exit_set_record(int(config.get(ENV_STATUS)), rank)
        from dpmpi import heartbeat

        heartbeat.set_rank(rank)


def set_idle_spares(world_ranks: list[int]) -> None:
    """The idle spares of the newest plan: if one dies, no work is lost (for the exit code)."""
    if _lib is not None:
        _lib.lib.dpmpi_exit_set_idle_spares(_lib.ffi.new("int[]", list(world_ranks) or [0]), len(world_ranks))


def die(status: int, cause: str) -> None:
    """End this rank now as a failure the other ranks notice (SIGKILL after the status record)."""
    _flush()
    set_cause(cause)
    _tell_c_about_mpi()
    _lib.lib.dpmpi_die(int(status) or 1)


def _os_exit(status: int, /) -> None:
    if _mpi() is not None and _tell_c_about_mpi():
        if status != 0:
            die(status, f"os._exit({status})")
        set_cause("os._exit(0) without MPI_Finalize")
        _lib.lib.dpmpi_write_record(0)
    _real_os_exit(status)


def _sys_exit(status: object = None, /) -> None:
    global _requested_exit
    _requested_exit = 0 if status is None else (status if isinstance(status, int) else 1)
    if _requested_exit:
        set_cause(f"sys.exit({status!r})")
    _real_sys_exit(status)


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    global _uncaught
    _uncaught = True
    set_cause(f"uncaught {exc_type.__name__}: {exc}")
    _real_excepthook(exc_type, exc, tb)


def _at_python_exit() -> None:
    """Runs first among dpmpi's exit steps, while Python is still alive."""
    _flush()
    if _mpi() is None:
        return
    multi = _tell_c_about_mpi()
    if not _owns_finalize and multi:
        # mpi4py will call MPI_Finalize before dpmpi's C handler runs; a failing rank must not
        # get there. Only failures seen from Python are known here (documented limitation).
        if _uncaught:
            die(1, "uncaught exception")
        if _requested_exit:
            die(_requested_exit, f"sys.exit({_requested_exit})")


def _stand_down_preloaded_guard() -> None:
    """dpmpi-run preloads its C exit guard (libdpmpi_guard.so) into every rank; in a Python rank
    this module owns the end, and the preloaded copy only forwards MPI_Init and MPI_Finalize."""
    import ctypes

    try:
        ctypes.CDLL(None).dpmpi_preload_disable()
    except (OSError, AttributeError):  # not preloaded (plain mpirun, or not a dpmpi-run rank)
        pass


def install() -> None:
    """Install the guard (idempotent). Does not initialise MPI."""
    global _installed, _owns_finalize, _lib
    if _installed:
        return
    _installed = True
    from dpmpi import _cext

    _lib = _cext
    _stand_down_preloaded_guard()
    if "mpi4py.MPI" not in sys.modules:
        import mpi4py

        mpi4py.rc.finalize = False
        # mpi4py reduces pickled objects (comm.allreduce(x), reduce, scan) point-to-point on a
        # private duplicate of the communicator, which a Revoke does not reach: a rank waiting
        # there for a live peer that went into repair hangs forever (seen here). The plain
        # algorithm (gather + bcast on the communicator itself) is interrupted by a Revoke.
        mpi4py.rc.fast_reduce = False
        _owns_finalize = True
    rank = world_rank_from_env()
    from dpmpi import heartbeat

    hb_timeout = heartbeat.timeout_from_env() if rank >= 0 else 0.0  # a bad value fails here
    _lib.lib.dpmpi_exit_set_record(int(config.get(ENV_STATUS)), rank)
    if config.get(ENV_STATUS) and rank >= 0:  # under dpmpi-run: say when MPI_Init returned
        from dpmpi import init_mark

        init_mark.install(rank)
    os._exit = _os_exit
    sys.exit = _sys_exit
    sys.excepthook = _excepthook
    atexit.register(_at_python_exit)
    if rank >= 0:
        # The hung-rank detector (only in MPI ranks). Started before the exit handler is
        # registered, so that its own exit handler runs after the exit agreement and Finalize.
        heartbeat.start(rank, hb_timeout)
    # The MPI libraries register no exit handlers of their own (checked with nm), so the order
    # of registration does not matter.
    _lib.lib.dpmpi_exit_register()
    if rank < 0:
        return  # not an MPI rank (e.g. dpmpi-run itself): no watchdog (nor a fault plan: dpmpi/__init__)
    stall_watchdog.start(_lib.lib, config.get(ENV_STALL_TIMEOUT))


def mpi_defaults() -> None:
    """In a rank, before MPI starts: Open MPI settings dpmpi relies on, unless the user set them
    (``dpmpi.mca``)."""
    if "mpi4py.MPI" in sys.modules or not rank_process():
        return
    mca.set_defaults(os.environ)


def rank_process() -> bool:
    """Whether this process is an MPI rank (not e.g. dpmpi-run itself)."""
    return world_rank_from_env() >= 0

