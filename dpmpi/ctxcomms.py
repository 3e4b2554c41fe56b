"""mpi4py's hidden duplicates of a communicator, which a repair must revoke with it.

``mpi4py.util.pkl5`` runs its collectives (``bcast``, ``gather``, ``scatter``, ``allgather``,
``alltoall``) as point-to-point messages on a ``Dup`` of the program's communicator that mpi4py
makes on first use and caches on it (``MPI._commctx_intra`` / ``MPI._commctx_inter``). dpmpi
does not see that ``Dup``: after a death, a survivor blocked in such a collective waited for a
live peer that had left for the repair, forever (a stranger's program, twenty-second session:
one survivor in ``MPI_Probe`` on the hidden communicator, the others in the repair's
``Shrink``). ``install`` wraps both functions so that each hidden duplicate is recorded under
the communicator it duplicates, and ``revoke_hidden(comm)`` (called by the repair for every
communicator it revokes) revokes them too, which ends the blocked call with ``ERR_REVOKED`` on
every member. A record is dropped when its communicator is freed (an attribute's delete
callback), so a reused handle never revokes a freed duplicate.

Owner and lifetime: the records are module state, written by the program's thread (inside its
pkl5 calls, and by ``MPI_Comm_free``'s callback in whichever thread frees the communicator) and
read by the repair, which runs in the program's thread; every access holds the GIL.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from mpi4py import MPI

_hidden: dict[int, list[MPI.Comm]] = {}  # a communicator's handle -> its hidden duplicates
_keyval: int | None = None  # the attribute whose delete callback drops a record
_NAMES = ("_commctx_intra", "_commctx_inter")


def install() -> None:
    """Wrap mpi4py's hidden-duplicate functions (idempotent), also where ``mpi4py.util.pkl5``
    already imported them."""
    pkl5 = sys.modules.get("mpi4py.util.pkl5")
    for name in _NAMES:
        real = getattr(MPI, name, None)
        if real is None:
            continue  # (another mpi4py: nothing hidden to record)
        if not getattr(real, "_dpmpi_records", False):
            real = _recording(real)
            setattr(MPI, name, real)
        if pkl5 is not None and getattr(pkl5, name, None) is not None:
            setattr(pkl5, name, real)


def _recording(real: Callable[[MPI.Comm], Any]) -> Callable[[MPI.Comm], Any]:
    def commctx(comm: MPI.Comm) -> Any:
        out = real(comm)
        _record(comm, [c for c in out if isinstance(c, MPI.Comm)])
        return out

    commctx._dpmpi_records = True  # type: ignore[attr-defined]
    commctx.__doc__ = real.__doc__
    return commctx


def _forget(comm: MPI.Comm, keyval: int, value: Any) -> None:
    _hidden.pop(value, None)


def _record(comm: MPI.Comm, dups: list[MPI.Comm]) -> None:
    global _keyval
    key = comm.handle
    known = _hidden.get(key)
    if known is None:
        if _keyval is None:
            _keyval = MPI.Comm.Create_keyval(delete_fn=_forget)
        comm.Set_attr(_keyval, key)
        known = _hidden[key] = []
    for dup in dups:
        if dup != MPI.COMM_NULL and all(dup.handle != k.handle for k in known):
            known.append(dup)


def revoke(comm: MPI.Comm) -> None:
    """Revoke ``comm`` and its hidden duplicates (local call; revoking propagates to their other
    members); nothing if it is already revoked or unusable."""
    revoke_hidden(comm)
    try:
        comm.Revoke()
    except MPI.Exception:
        pass


def revoke_hidden(comm: MPI.Comm) -> int:
    """Revoke the hidden duplicates of ``comm`` that this process made (local call; revoking
    propagates to their other members). Returns how many."""
    n = 0
    for dup in _hidden.get(comm.handle, ()):
        try:
            dup.Revoke()
            n += 1
        except MPI.Exception:
            pass  # already revoked, or unusable
    return n


def recorded(handle: int) -> int:
    """How many hidden duplicates are recorded for the communicator whose handle was ``handle``
    (``comm.handle``; 0 once it is freed)."""
    return len(_hidden.get(handle, ()))
