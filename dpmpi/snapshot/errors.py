"""The snapshot's own errors (re-exported by ``dpmpi`` and ``dpmpi.snapshot``)."""
from __future__ import annotations

from mpi4py import MPI

from dpmpi.errors import DpmpiError


class SnapshotLostError(DpmpiError):
    """No epoch survives for every rank: a rank and every holder of its copies failed together.
    ``ranks`` lists the logical ranks whose state is lost (``failed_ranks``, inherited, stays
    empty: the lost ranks are not necessarily the processes that failed)."""

    def __init__(self, message: str, ierr: int = MPI.ERR_OTHER, ranks: tuple[int, ...] = ()):
        super().__init__(message, ierr)
        self.ranks = tuple(ranks)

    def __reduce__(self):  # type: ignore[override]
        return (type(self), (self.message, self.Get_error_code(), self.ranks))


class SnapshotCopyError(DpmpiError):
    """A staging copy did not complete; the committed snapshot is unchanged."""
