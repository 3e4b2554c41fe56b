"""dpmpi's GPU path: NCCL communicators (through CuPy) that recover with dpmpi's communicators,
and snapshots of device arrays.

``NcclComm(comm)``: see ``dpmpi.gpu.nccl``. The backend is CuPy's NCCL unless
``DPMPI_GPU_BACKEND=fake`` (host buffers, collectives over MPI, for machines without a GPU);
``get_backend()`` returns the process's backend (its ``zeros``/``asarray`` make device arrays).
CuPy is imported only when the CuPy backend is first used.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dpmpi.gpu.select import get as get_backend
from dpmpi.gpu.nccl import NcclComm

__all__ = ["NcclComm", "get_backend", "is_device_array"]


def is_device_array(array: Any) -> bool:
    """Whether ``array`` is a device array of the process's backend. Makes no backend: CuPy is
    not imported (an array of a CuPy never imported cannot be one), NCCL is not needed."""
    import sys

    from dpmpi.gpu import settings

    if type(array) is np.ndarray:  # (a host array, the common case: no setting read, ~5 us)
        return False
    if settings.backend_name() == "fake":
        from dpmpi.gpu.fake import DeviceArray

        return isinstance(array, DeviceArray)
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(array, cupy.ndarray)
