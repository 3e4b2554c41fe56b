"""The GPU path's settings, read through dpmpi's configuration (``dpmpi/config.py`` declares
them: type, default, validation, documentation)."""
from __future__ import annotations

from dpmpi import config

ENV_BACKEND = "DPMPI_GPU_BACKEND"  # "cupy" (default) or "fake" (host buffers, MPI carries the collectives)
ENV_TIMEOUT = "DPMPI_GPU_TIMEOUT"  # seconds one NCCL operation may take before it counts as a failure
ENV_REBUILD_TIMEOUT = "DPMPI_GPU_REBUILD_TIMEOUT"  # seconds for an init, a warm-up or an abort
ENV_FAKE_FAULTS = "DPMPI_GPU_FAKE_FAULTS"  # the fake backend's faults: RANK:POINT[@N]:KIND[,...]


def backend_name() -> str:
    return str(config.get(ENV_BACKEND))


def op_timeout() -> float:
    """How long one NCCL operation may run before it counts as failed (no peer was seen to die)."""
    return float(config.get(ENV_TIMEOUT))


def rebuild_timeout() -> float:
    """The deadline of an NCCL init, a warm-up collective and an abort."""
    return float(config.get(ENV_REBUILD_TIMEOUT))


def fake_faults() -> str:
    return str(config.get(ENV_FAKE_FAULTS))
