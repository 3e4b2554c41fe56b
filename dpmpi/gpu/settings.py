"""The GPU path's settings: every ``DPMPI_GPU_*`` variable is read here and nowhere else (the
lead moves them into dpmpi's configuration module when it lands in main)."""
from __future__ import annotations

import os

ENV_BACKEND = "DPMPI_GPU_BACKEND"  # "cupy" (default) or "fake" (host buffers, MPI carries the collectives)
ENV_TIMEOUT = "DPMPI_GPU_TIMEOUT"  # seconds one NCCL operation may take before it counts as a failure
ENV_REBUILD_TIMEOUT = "DPMPI_GPU_REBUILD_TIMEOUT"  # seconds for an init, a warm-up or an abort
ENV_FAKE_FAULTS = "DPMPI_GPU_FAKE_FAULTS"  # the fake backend's faults: RANK:POINT[@N]:KIND[,...]
BACKENDS = ("cupy", "fake")
DEFAULT_TIMEOUT = 300.0
DEFAULT_REBUILD_TIMEOUT = 30.0


def backend_name() -> str:
    raw = os.environ.get(ENV_BACKEND, "").strip().lower() or "cupy"
    if raw not in BACKENDS:
        raise ValueError(f"{ENV_BACKEND}={raw!r}: use 'cupy' (NCCL through CuPy, the default) or 'fake' "
                         f"(host buffers, collectives over MPI: for machines without a GPU)")
    return raw


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{name}={raw!r}: a deadline must be > 0 seconds")
    return value


def op_timeout() -> float:
    """How long one NCCL operation may run before it counts as failed (no peer was seen to die)."""
    return _seconds(ENV_TIMEOUT, DEFAULT_TIMEOUT)


def rebuild_timeout() -> float:
    """The deadline of an NCCL init, a warm-up collective and an abort."""
    return _seconds(ENV_REBUILD_TIMEOUT, DEFAULT_REBUILD_TIMEOUT)


def fake_faults() -> str:
    return os.environ.get(ENV_FAKE_FAULTS, "")
