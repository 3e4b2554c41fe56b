"""The nonblocking duplications (``Idup``, ``Idup_with_info``) still in progress on each
communicator, and the wait for them before another nonblocking collective or a communicator's
creation starts on it.

Open MPI 5.0.11 makes a communicator's ``Idup`` in steps, each a nonblocking allreduce on the
parent that the previous one's completion starts, inside MPI's progress. Another nonblocking
collective that the program starts on the parent meanwhile takes the next tag in the parent's
sequence: when some other thread of the process makes MPI progress (dpmpi's failure watcher and
snapshot threads always do), a rank may start the duplication's next step before the program's
collective and another rank after it, and the two ranks' messages cross (``MPI_ERR_TRUNCATE`` in
``NBC_Progress``, or a wrong result). Plain mpi4py with one helper thread that tests a request
fails so (docs/mpi-facts.md; open-mpi/ompi#2025 is open). A ``Split`` of the parent made while
its ``Idup`` is in progress hangs even with no other thread (plain mpi4py, 4 ranks: every run).
So a dpmpi communicator waits for its pending duplications before it starts a nonblocking
collective or makes a communicator from itself; blocking collectives and a persistent
collective's ``Start`` did not fail so (docs/mpi-facts.md) and do not wait.

Owner: the program's threads that call a communicator's collectives (one at a time per
communicator, as MPI requires). ``_pending`` maps a communicator's handle to the requests the
program was handed for its duplications, kept until they complete (the program's own objects:
waiting on one completes it for the program too). No dpmpi thread calls these.
"""
from __future__ import annotations

from typing import Any, Callable

from mpi4py import MPI

DUPLICATIONS = frozenset({"Idup", "Idup_with_info"})
NONBLOCKING_COLLECTIVES = frozenset({
    "Ibarrier", "Ibcast", "Igather", "Igatherv", "Iscatter", "Iscatterv", "Iallgather", "Iallgatherv",
    "Ialltoall", "Ialltoallv", "Ialltoallw", "Ireduce", "Iallreduce", "Ireduce_scatter",
    "Ireduce_scatter_block", "Iscan", "Iexscan", "Ineighbor_allgather", "Ineighbor_allgatherv",
    "Ineighbor_alltoall", "Ineighbor_alltoallv", "Ineighbor_alltoallw",
})
# blocking creations of a communicator from this one (not Shrink: a repair's, on a revoked
# communicator); dpmpi.comm warms up the same ones, and Shrink
CREATIONS = frozenset({"Dup", "Dup_with_info", "Clone", "Split", "Split_type", "Create", "Create_group",
                       "Create_from_group", "Create_intercomm", "Merge", "Create_cart", "Create_graph",
                       "Create_dist_graph", "Create_dist_graph_adjacent", "Sub"})
GUARDED = DUPLICATIONS | NONBLOCKING_COLLECTIVES | CREATIONS

_pending: dict[int, list[MPI.Request]] = {}


def _active(request: MPI.Request) -> bool:
    return MPI.Request.__bool__(request)


def settle(comm: MPI.Comm) -> None:
    """Wait for the duplications of ``comm`` still in progress (those the program has not
    completed yet); a failure among them is raised as the request's ``Wait`` raises it."""
    requests = _pending.pop(comm.handle, None)
    while requests:
        request = requests.pop(0)
        if _active(request):
            try:
                request.Wait()
            except BaseException:
                if requests:
                    _pending[comm.handle] = requests
                raise


def guarded(name: str, fn: Callable[..., Any], comm: MPI.Comm) -> Callable[..., Any]:
    """``fn``, the method ``name`` of ``comm`` as dpmpi hands it out: a nonblocking collective or
    a creation first settles ``comm``'s duplications; a duplication records its request."""
    if name in DUPLICATIONS:
        def duplicate(*args: Any, **kwargs: Any) -> Any:
            new, request = fn(*args, **kwargs)
            kept = [r for r in _pending.get(comm.handle, ()) if _active(r)]
            _pending[comm.handle] = kept + [request]
            return new, request
        duplicate.__name__ = duplicate.__qualname__ = name
        duplicate.__doc__ = fn.__doc__
        return duplicate

    def collective(*args: Any, **kwargs: Any) -> Any:
        if comm.handle in _pending:
            settle(comm)
        return fn(*args, **kwargs)
    collective.__name__ = collective.__qualname__ = name
    collective.__doc__ = fn.__doc__
    return collective
