"""dpmpi: keep an MPI job running when one of its ranks dies.

``import dpmpi`` is cheap and does not initialise MPI: it installs the exit guard (so that any
way this rank dies is noticed by the others, see ``dpmpi._guard``) and loads a fault plan from
``DPMPI_FAULTS`` if one is set. Import dpmpi *before* ``mpi4py.MPI`` so that dpmpi, not mpi4py,
ends MPI at exit (a fault-tolerant end instead of a plain MPI_Finalize that can hang).

The communicator API is loaded on first use::

    import dpmpi
    comm = dpmpi.COMM_WORLD          # a dpmpi.Comm wrapping MPI.COMM_WORLD
    try:
        comm.Allreduce(sendbuf, recvbuf)
    except (dpmpi.ProcFailedError, dpmpi.RevokedError):
        comm.Revoke()
        comm = comm.Shrink()
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dpmpi import _guard, config

_guard.install()
_guard.mpi_defaults()
if _guard.rank_process() and config.is_set("DPMPI_FAULTS"):  # a plan for this job's ranks
    from dpmpi import faults as _faults

    _faults.load_env()

if TYPE_CHECKING:  # pragma: no cover
    from dpmpi import faults
    from dpmpi._version import __version__
    from dpmpi.comm import Comm
    from dpmpi.message import Message
    from dpmpi.request import Prequest, Request
    from dpmpi.resilient import (
        Filled,
        RepairEvent,
        ResilientComm,
        Role,
        SparesDepletedError,
        SparesDepletedWarning,
        init,
    )
    from dpmpi.recovery import Recovery
    from dpmpi.runtime import Runtime
    from dpmpi.snapshot import Snapshot, SnapshotCopyError, SnapshotLostError
    from dpmpi.interrupts import interrupt_on_failure
    from dpmpi.errors import (
        DpmpiError,
        FaultToleranceUnavailableError,
        ProcFailedError,
        RevokedError,
    )

_LAZY = {
    "Comm": "dpmpi.comm",
    "Request": "dpmpi.request",
    "Prequest": "dpmpi.request",
    "Message": "dpmpi.message",
    "DpmpiError": "dpmpi.errors",
    "ProcFailedError": "dpmpi.errors",
    "RevokedError": "dpmpi.errors",
    "FaultToleranceUnavailableError": "dpmpi.errors",
    "init": "dpmpi.resilient",
    "Role": "dpmpi.resilient",
    "ResilientComm": "dpmpi.resilient",
    "RepairEvent": "dpmpi.resilient",
    "Filled": "dpmpi.resilient",
    "SparesDepletedWarning": "dpmpi.resilient",
    "SparesDepletedError": "dpmpi.resilient",
    "Runtime": "dpmpi.runtime",
    "Recovery": "dpmpi.recovery",
    "Snapshot": "dpmpi.snapshot",
    "SnapshotLostError": "dpmpi.snapshot",
    "SnapshotCopyError": "dpmpi.snapshot",
    "interrupt_on_failure": "dpmpi.interrupts",
    "__version__": "dpmpi._version",  # importlib.metadata: ~50 ms, paid only when asked for
}

# the public names: those above (__version__ among them), plus COMM_WORLD and faults
__all__ = sorted([*_LAZY, "COMM_WORLD", "faults"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name == "COMM_WORLD":
        from dpmpi.comm import world

        value = world()
    elif name == "faults":
        value = importlib.import_module("dpmpi.faults")
    else:
        raise AttributeError(f"module 'dpmpi' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
