"""dpmpi's exceptions, and the one place where MPI errors are turned into them.

Every dpmpi exception is also an ``mpi4py.MPI.Exception`` (code written for mpi4py that catches
``MPI.Exception`` keeps working) and carries the MPI error class and, when known, the ranks
that failed.
"""
from __future__ import annotations

from mpi4py import MPI


class DpmpiError(MPI.Exception):
    """Base class of dpmpi's errors. ``Get_error_class()`` gives the MPI error class."""

    def __init__(self, message: str, ierr: int = MPI.ERR_OTHER, failed_ranks: tuple[int, ...] = ()):
        super().__init__(ierr)
        self.message = message
        #: ranks (in the communicator the error was raised on) known locally to have failed
        self.failed_ranks: tuple[int, ...] = tuple(failed_ranks)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __reduce__(self):  # picklable, e.g. to report it to another rank
        return (type(self), (self.message, self.Get_error_code(), self.failed_ranks))


class _PeerFailure(DpmpiError):
    """A peer's failure, seen by this process: each one made is counted (``failures_made``)."""

    def __init__(self, message: str, ierr: int = MPI.ERR_OTHER, failed_ranks: tuple[int, ...] = ()):
        global _made, _last
        super().__init__(message, ierr, failed_ranks)
        _made, _last = _made + 1, (type(self), message, ierr)


class ProcFailedError(_PeerFailure):
    """A peer process failed (ERR_PROC_FAILED, ERR_PROC_FAILED_PENDING, or ERR_OTHER seen
    because a peer died)."""


class RevokedError(_PeerFailure):
    """The communicator was revoked by some rank, usually because a peer failed."""


# How many ProcFailedError / RevokedError this process has made, and the last one's type, message
# and class: dpmpi.Runtime compares the count around a step, so that a failure the program's own
# ``except`` caught still ends that step in a recovery. Written by whichever thread makes one
# (under the GIL; a lost increment between two threads still leaves the count changed), read by
# the main thread; for the life of the process.
_made = 0
_last: tuple[type, str, int] | None = None


def failures_made() -> int:
    return _made


def failure_since(mark: int) -> DpmpiError | None:
    """A new exception like the last peer failure made since ``failures_made()`` was ``mark``
    (None: none made since)."""
    if _made == mark or _last is None:
        return None
    kind, message, ierr = _last
    return kind(f"{message} (caught by the program's own code, which went on)", ierr)


class FaultToleranceUnavailableError(DpmpiError):
    """The MPI library or the way the job was launched gives no fault tolerance."""


#: error classes that can mean "a peer failed" (ERR_OTHER: seen on rank 0 in Barrier)
PEER_FAILURE_CLASSES = (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED, MPI.ERR_OTHER)

# error classes that say nothing of the cause: a peer's failure when one is known on the communicator
# (ERR_INTERN: seen from Create_intercomm when a process of the peer communicator died in it)
_VAGUE = (MPI.ERR_OTHER, MPI.ERR_IN_STATUS, MPI.ERR_INTERN)

_NAMES: dict[int, str] = {}
for _name in sorted(dir(MPI)):  # error class -> its MPI name, e.g. 75 -> "ERR_PROC_FAILED"
    if _name.startswith("ERR_") and isinstance(getattr(MPI, _name), int) and _name != "ERR_LASTCODE":
        _NAMES.setdefault(getattr(MPI, _name), _name)


def failed_ranks(comm: MPI.Comm) -> tuple[int, ...]:
    """Ranks of ``comm`` that this process knows to have failed (local knowledge, never raises)."""
    try:
        failed = comm.Get_failed()
    except (MPI.Exception, NotImplementedError):
        return ()
    try:
        if failed.Get_size() == 0:
            return ()
        ranks = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())), comm.Get_group())
        return tuple(sorted(r for r in ranks if r != MPI.UNDEFINED))
    except MPI.Exception:
        return ()
    finally:
        failed.Free()


def failure_known(comm: MPI.Comm | None) -> bool:
    """Whether this process knows of a failure on ``comm``: a failed rank, or a revoke (local)."""
    return comm is not None and (bool(failed_ranks(comm)) or _is_revoked(comm))


def _is_revoked(comm: MPI.Comm) -> bool:
    try:
        return bool(comm.Is_revoked())
    except (MPI.Exception, NotImplementedError):
        return False


def from_mpi(exc: MPI.Exception, comm: MPI.Comm | None, op: str = "") -> DpmpiError:
    """Choose the dpmpi exception for an MPI error raised by ``op`` on ``comm``."""
    cls = exc.Get_error_class()
    failed = failed_ranks(comm) if comm is not None else ()
    if cls in (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING):
        kind: type[DpmpiError] = ProcFailedError
    elif cls == MPI.ERR_REVOKED:
        kind = RevokedError
    elif cls in _VAGUE and failed:
        # Measured on Open MPI 5.0.11: in a collective, rank 0 can get ERR_OTHER when a peer died;
        # mpi4py's Waitall without statuses reports a peer's death as ERR_IN_STATUS
        kind = ProcFailedError
    elif cls in _VAGUE and comm is not None and _is_revoked(comm):
        kind = RevokedError
    else:
        kind = DpmpiError
    where = f" in {op}" if op else ""
    size = ""
    if comm is not None:
        try:
            size = f" on a communicator of size {comm.Get_size()}"
        except MPI.Exception:
            pass
    name = _NAMES.get(cls, str(cls))
    msg = f"MPI error{where}{size}: {exc.Get_error_string()} (error class {name}={cls})"
    if kind is ProcFailedError:
        known = f"failed ranks known here: {list(failed)}" if failed else "the failed ranks are not known here yet"
        msg = (
            f"a peer process failed{where}{size} ({name}={cls}; {known}). "
            "Repair the communicator: comm.Revoke(), then comm.Shrink() (or comm.Respawn() on a "
            "communicator from dpmpi.init())."
        )
    elif kind is RevokedError:
        msg = (
            f"the communicator was revoked{where}{size} ({name}={cls}), usually because a peer "
            "failed. Repair the communicator: comm.Shrink() (or comm.Respawn() on a communicator "
            "from dpmpi.init())."
        )
    return kind(msg, exc.Get_error_code(), failed)


def peer_failure(exc: MPI.Exception, comm: MPI.Comm) -> DpmpiError | None:
    """An MPI error raised by mpi4py itself (not through dpmpi: ``MPI.Request.Waitall(reqs)``,
    ``comm.mpi.Allreduce(...)``) as dpmpi's ``ProcFailedError``/``RevokedError`` when a peer's
    failure caused it, judged on ``comm``; None for any other error."""
    err = from_mpi(exc, comm)
    return err if isinstance(err, (ProcFailedError, RevokedError)) else None
