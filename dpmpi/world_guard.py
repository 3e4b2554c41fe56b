"""``MPI.COMM_WORLD`` after ``dpmpi.init()`` in a job with spares: a call that communicates on it
raises at once, with what to use instead, where it used to wait for ever.

The world holds the job's idle spares, which wait inside ``dpmpi.init()`` and never take part in
the program's calls: a ``MPI.COMM_WORLD.Barrier()`` (or ``allreduce``, ``bcast``, a ``send`` to
a spare's rank...) after ``dpmpi.init()`` hung silently (a stranger's first program, fifty-first
session: 4 active ranks + 1 spare, killed by its time limit with nothing on stderr). Once a rank
died the world also holds a dead process, and a replacement has another rank there than in the
active communicator. So, where ``dpmpi.init()`` made spares, it replaces the module attribute
``mpi4py.MPI.COMM_WORLD`` by an object of the same handle (an ``MPI.Intracomm``) whose methods
that communicate raise ``RuntimeError``; its local methods (``Get_rank``, ``Get_size``,
``Get_group``, attributes, names, error handlers, ``Abort``...) work as before, and so do
dpmpi's own calls on the world (its exit agreement). ``dpmpi.COMM_WORLD`` refuses the same
methods (``dpmpi.comm``).

Not reached: an object taken before ``dpmpi.init()`` returned (``from mpi4py.MPI import
COMM_WORLD`` at the top of a program, ``world = MPI.COMM_WORLD``), and C code (a library that
uses ``MPI_COMM_WORLD`` itself): those still wait (docs/limitations.md).

Owner: the main thread, in ``dpmpi.init`` (``install``, once per process); the module attribute
is then read by any thread."""
from __future__ import annotations

import sys
from typing import Any, Callable

from mpi4py import MPI

_ORIGINAL = MPI.COMM_WORLD  # (mpi4py's own object; dpmpi.comm captures it too, at its import)

# The methods of a communicator that do not communicate: allowed on the guarded world. Every
# other callable attribute (collectives, point to point, probes, creations, persistent requests,
# ULFM's Agree/Shrink/Revoke, Spawn, Set_info: collective) is refused.
LOCAL = frozenset({
    "Abort", "Ack_failed", "Attach_buffer", "Call_errhandler", "Cart_map", "Compare", "Create_errhandler",
    "Create_keyval", "Delete_attr", "Detach_buffer", "Free_keyval", "Get_attr", "Get_errhandler", "Get_failed",
    "Get_group", "Get_info", "Get_name", "Get_parent", "Get_rank", "Get_size", "Get_topology", "Graph_map",
    "Is_inter", "Is_intra", "Is_revoked", "Set_attr", "Set_errhandler", "Set_name", "f2py", "fromhandle",
    "fromint", "py2f", "toint",
})

_spares: tuple[int, ...] | None = None  # the idle spares' world ranks when installed; None: not installed


def refused(name: str) -> bool:
    """Whether ``name`` is a method that the guarded world refuses (a public name not in LOCAL)."""
    return not name.startswith("_") and name not in LOCAL


def guards(comm: Any) -> bool:
    """Whether calls on the mpi4py communicator ``comm`` are refused: the guard is installed and
    ``comm`` has the world's handle."""
    return _spares is not None and isinstance(comm, MPI.Comm) and comm == _ORIGINAL


def refusal(name: str) -> Callable[..., Any]:
    """What ``MPI.COMM_WORLD.<name>`` gives the program: a function that raises."""
    spares = _spares or ()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"dpmpi: MPI.COMM_WORLD.{name}() after dpmpi.init() would wait for ever: the world holds the job's "
            f"spare process(es) (world ranks {list(spares)} at the start), which never take part in the program's "
            f"calls, and once a rank died a dead process too. Use the communicator dpmpi.init() returned")

    refuse.__name__ = name
    return refuse


class _GuardedWorld(MPI.Intracomm):
    """``MPI.COMM_WORLD``'s handle; its methods that communicate raise, except for dpmpi's own
    calls (a caller in a ``dpmpi`` module)."""

    def __getattribute__(self, name: str) -> Any:
        attr = MPI.Intracomm.__getattribute__(self, name)
        if not refused(name) or not callable(attr):
            return attr
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller == "dpmpi" or caller.startswith("dpmpi."):
            return attr
        return refusal(name)


def install(spares: tuple[int, ...]) -> None:
    """After ``dpmpi.init()`` made the ``spares`` (their world ranks; nothing when none): from
    now on ``MPI.COMM_WORLD`` is the guarded world."""
    global _spares
    if not spares or _spares is not None:
        return
    _spares = tuple(spares)
    MPI.COMM_WORLD = _GuardedWorld(_ORIGINAL)
