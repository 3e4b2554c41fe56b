"""Which backend this process uses (``DPMPI_GPU_BACKEND``), made once: CuPy's NCCL bindings by
default, or the fake one that runs the same code on the CPU. Kept apart from the interface
(dpmpi.gpu.backend), which both implementations import.

Owner: the process; made on first use by the thread that first asks (the main thread)."""
from __future__ import annotations

from dpmpi.gpu.backend import Backend

_BACKEND: Backend | None = None


def get() -> Backend:
    """The process's backend (``DPMPI_GPU_BACKEND``: cupy by default, or fake), made once."""
    global _BACKEND
    if _BACKEND is None:
        from dpmpi.gpu import settings

        if settings.backend_name() == "fake":
            from dpmpi.gpu.fake import FakeBackend

            _BACKEND = FakeBackend()
        else:
            from dpmpi.gpu.cupy_backend import CupyBackend

            _BACKEND = CupyBackend()
    return _BACKEND
