"""Persistent point-to-point requests made on a dpmpi communicator (``Send_init``, ``Bsend_init``,
``Ssend_init``, ``Rsend_init``, ``Recv_init``), made again when a repair rebuilds that
communicator, under the same request objects.

A program typically makes its halo exchange's persistent requests once, before its loop, and
starts them every step (``MPI.Prequest.Startall(halo)``, mpi4py's own call). They belong to the
communicator they were made on; after a repair that communicator is revoked, so their next
``Startall`` failed (a stranger's program: ``MPI_ERR_REQUEST: invalid request`` on some ranks, a
revoked request's error on others, and the job ended). So dpmpi records how each one was made
(the method, its arguments: the same buffers, peers and tags), and when ``dpmpi.comm.rebind``
points the communicator at the repaired one, makes each live request again on it (a local call)
and puts the new MPI handle into the program's request object in place (mpi4py's
``MPI._addressof``): the program's list of requests stays valid, whoever calls ``Start``. The old
request is kept for the life of the process (it may still be active on the revoked
communicator). A request that cannot be made again (a peer's rank gone after a repair that shrank
the communicator) keeps its old handle and fails at its next start; a warning says so.

Not remade: persistent collectives (``Allreduce_init``, ...; their creation is collective and a
replacement makes its own) and partitioned requests (``Psend_init``, ``Precv_init``).

Owner: the program's thread (requests are made there; ``remake`` runs inside a repair, on the
same thread). The record holds the arguments (buffers included) as long as the request lives.
"""
from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable

from mpi4py import MPI

from dpmpi.mpicall import exchange_handles, keep_forever

REMADE = frozenset({"Send_init", "Bsend_init", "Ssend_init", "Rsend_init", "Recv_init"})

# id(comm) -> (a weak reference to the dpmpi communicator, [(weak request, method, args, kwargs)])
_made: dict[int, tuple[weakref.ref, list[tuple[weakref.ref, str, tuple, dict]]]] = {}


def recording(comm: Any, name: str, make: Callable[..., Any]) -> Callable[..., Any]:
    """``make`` (the communicator's method ``name``, wrapped by dpmpi), recording each request
    it returns for ``remake``."""
    owner = weakref.ref(comm)  # (the method is cached on the communicator: no reference cycle)

    def call(*args: Any, **kwargs: Any) -> Any:
        req = make(*args, **kwargs)
        comm = owner()
        if comm is None:
            return req
        key = id(comm)
        if key not in _made or _made[key][0]() is not comm:
            _made[key] = (weakref.ref(comm, lambda _r, k=key: _made.pop(k, None)), [])
        entries = _made[key][1]
        entries[:] = [e for e in entries if e[0]() is not None]
        entries.append((weakref.ref(req), name, args, kwargs))
        return req
    call.__name__ = call.__qualname__ = name
    call.__doc__ = getattr(make, "__doc__", None)
    return call


def tracked(comm: Any) -> int:
    """How many live persistent requests made on ``comm`` a repair would make again."""
    entry = _made.get(id(comm))
    if entry is None or entry[0]() is not comm:
        return 0
    return sum(1 for e in entry[1] if e[0]() is not None)


def remake(comm: Any, raw: MPI.Comm) -> None:
    """Make every live request recorded for ``comm`` again on ``raw`` (its repaired
    communicator), in place. Called by ``dpmpi.comm.rebind``."""
    entry = _made.get(id(comm))
    if entry is None or entry[0]() is not comm or raw == MPI.COMM_NULL:
        return
    for ref, name, args, kwargs in entry[1]:
        req = ref()
        if req is None:
            continue
        try:
            new = getattr(raw, name)(*args, **kwargs)
        except MPI.Exception as exc:
            warnings.warn(f"dpmpi: a persistent request ({name}) made before a repair could not be made again on the "
                          f"repaired communicator ({exc.Get_error_string()}); its next start fails. Make it again "
                          f"after the repair", RuntimeWarning, stacklevel=2)
            continue
        _swap(req, new)
        req.error_comm = raw


def _swap(req: MPI.Request, new: MPI.Request) -> None:
    """Put ``new``'s handle into ``req`` (the program's object); ``new`` keeps the old one, for
    the life of the process."""
    exchange_handles(req, new)
    keep_forever(new)
