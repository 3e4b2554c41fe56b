"""Intercommunicators that repairs rebuild: ``local.Create_intercomm(local_leader, comm,
remote_leader, tag)`` whose peer communicator is the active one (``comm``, what ``dpmpi.init``
returned) and whose ``local`` is derived from it, and the ``Merge`` of such a one; ``Dup`` of it
is rebuilt as any ``Dup``. dpmpi.resilient.derived records them as recipes (plan.Recipe), each
group its own call (its leaders and tag; its ``high``), as for any recipe over a derived parent
(recipe_entries). The remote leader is recorded as a rank of the active communicator, a logical
rank. Before the thirty-seventh session no repair rebuilt them (a one-time ``RuntimeWarning``),
and a program that kept one hung at its first failure (bench/strangers/intercomm_halves.py).

Other ways to make or use one stay as mpi4py's, not rebuilt: another peer communicator, and a
``Split`` of an intercommunicator (warned once).

Pure, but ``make`` (collective over both groups, as MPI's calls)."""
from __future__ import annotations

from typing import Any

from mpi4py import MPI

OPS = ("Create_intercomm", "Merge")
ON_INTER = ("Dup", "Merge")  # what repairs rebuild when made from an intercommunicator


def own_args(op: str, args: tuple, active_size: int) -> tuple:
    """What this rank's call is recorded as; a bad argument raises here, before any collective."""
    if op == "Merge":
        return (bool(args[0]),)
    for name, value in zip(("local_leader", "remote_leader", "tag"), args):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"Create_intercomm {name} must be an int, got {value!r}")
    local_leader, remote_leader, tag = args
    if not 0 <= remote_leader < active_size:
        raise ValueError(f"Create_intercomm remote_leader {remote_leader} is not a rank of the peer communicator "
                         f"(size {active_size})")
    return (local_leader, remote_leader, tag)


def renumbered(args: dict[int, Any], renumber: dict[int, int]) -> dict[int, Any]:
    """A ``Create_intercomm``'s record after a repair that renumbered the logical ranks: the remote
    leader's new rank, None where a shrink dropped it (then it cannot be made again)."""
    local_leader, remote_leader, tag = args[-1]
    return {-1: (local_leader, renumber.get(remote_leader), tag)}


def make(op: str, recorded: tuple, parent: MPI.Comm, active: MPI.Intracomm) -> MPI.Comm | None:
    """Make the intercommunicator again on the rebuilt ``parent`` (None: it cannot be)."""
    if op == "Merge":
        return parent.Merge(recorded[0])
    local_leader, remote_leader, tag = recorded
    if remote_leader is None:
        return None
    return parent.Create_intercomm(local_leader, active, remote_leader, tag)
