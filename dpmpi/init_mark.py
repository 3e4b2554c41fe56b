"""A Python rank's side of ``dpmpi.init_loss``: tell dpmpi-run once this rank's ``MPI_Init``
has returned (one ``[dpmpi-init] RANK`` line on stderr, which dpmpi-run keeps to itself).

mpi4py initialises MPI when ``mpi4py.MPI`` is imported, without going through the exit guard's
``MPI_Init`` (libdpmpi_guard.so says it for C programs), so dpmpi's exit guard wraps that import:
a finder on ``sys.meta_path`` hands out mpi4py's own loader, wrapped to announce after it ran.
With ``mpi4py.rc.initialize = False`` it announces after the program's ``MPI.Init()`` /
``MPI.Init_thread()``; ``dpmpi.init()`` announces too. Only
under dpmpi-run (``DPMPI_STATUS=1``), only in a rank of the launched job (not in a process a
repair spawned). Owner: the main thread (imports and ``dpmpi.init``); ``_done`` set once."""
from __future__ import annotations

import importlib.abc
import os
import sys
from typing import Any

from dpmpi.init_loss import FORMED_TAG, FORMING_TAG, INIT_TAG  # (the lines dpmpi-run reads: one spelling)
from dpmpi.setup_loss import COMMITTED_TAG, REPAIRS_TAG

_rank = -1
_done = False
_committed = False
_repairs = False
# the modules between a program's call of a communicator's method and the method (dpmpi.interrupts'
# wrapper of every method, dpmpi.calls' translation): not the caller
_PLUMBING = ("dpmpi.interrupts", "dpmpi.calls")


def install(rank: int) -> None:
    """Announce this rank's MPI_Init to dpmpi-run (called by the exit guard under dpmpi-run)."""
    global _rank
    _rank = rank
    if "mpi4py.MPI" in sys.modules:
        announce()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def announce() -> None:
    """Write the line once, if MPI is initialised here and this rank belongs to the launched job."""
    global _done
    mod = sys.modules.get("mpi4py.MPI")
    if _done or _rank < 0 or mod is None:
        return
    try:
        if not mod.Is_initialized() or mod.Comm.Get_parent() != mod.COMM_NULL:
            return
    except Exception:  # never disturb the program's import
        return
    _done = True
    _say(INIT_TAG)


def announce_formation(formed: bool) -> None:
    """Tell dpmpi-run that this rank entered (``formed`` False) or came out of ``dpmpi.init``'s
    formation of the job, which it watches for a formation a death left stuck (dpmpi.init_loss).
    Under the same conditions as ``announce``."""
    if not _done:
        return
    _say(FORMED_TAG if formed else FORMING_TAG)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "mpi4py.MPI":
            return None
        sys.meta_path.remove(self)  # (one import of it per process)
        for finder in list(sys.meta_path):  # (mpi4py 4 loads MPI.<abi>.*.so through a finder of its own)
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Announcing(spec.loader)
                return spec
        return None


class _Announcing(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        try:
            initialised = module.Is_initialized()
        except Exception:
            return
        if initialised:
            announce()
            return
        for name in ("Init", "Init_thread"):  # (mpi4py.rc.initialize = False: the program calls one)
            real = getattr(module, name, None)
            if callable(real):
                setattr(module, name, _announcing_call(real))


def _announcing_call(real: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        announce()
        return result

    call.__name__, call.__doc__ = real.__name__, real.__doc__
    return call


def announce_commit() -> None:
    """Tell dpmpi-run, once, that this rank committed a snapshot: from then on a death that ends
    the job loses work, and dpmpi-run does not launch it again (dpmpi.setup_loss). Under the same
    conditions as ``announce``."""
    global _committed
    if not _done or _committed:
        return
    _committed = True
    _say(COMMITTED_TAG)


def announce_own_repair(caller: Any) -> None:
    """Tell dpmpi-run, once, that the program repairs by itself: when ``caller`` (the frame that
    called ``Respawn`` or ``Shrink``, past dpmpi's method wrappers) is the program's, not dpmpi's
    own (its Runtime, its watch of the setup). dpmpi-run then leaves a job that such a repair
    could not keep going to end as it ends, as the program chose (dpmpi.setup_loss). Under the
    same conditions as ``announce``."""
    global _repairs
    while caller is not None and caller.f_globals.get("__name__") in _PLUMBING:
        caller = caller.f_back
    name = str(caller.f_globals.get("__name__", "")) if caller is not None else ""
    if not _done or _repairs or (name.startswith("dpmpi.") and not name.startswith("dpmpi.bench.")):
        return
    _repairs = True
    _say(REPAIRS_TAG)


def _say(tag: str) -> None:
    """One of dpmpi-run's lines on stderr, in one write (it reads them line by line)."""
    try:
        os.write(2, f"{tag}{_rank}\n".encode())
    except OSError:
        pass
