"""The environment variables of hot swap, each read (and checked) in one place here."""
from __future__ import annotations

import os

from dpmpi import _guard
from dpmpi.resilient.plan import DEFAULT_POLICY, POLICIES

ENV_SPARES = "DPMPI_SPARES"
ENV_ON_DEPLETED = "DPMPI_ON_DEPLETED"
ENV_SPARE_POLL = "DPMPI_SPARE_POLL"
ENV_REPAIR_TIMEOUT = "DPMPI_REPAIR_TIMEOUT"  # seconds a Respawn may take before the process gives up
ENV_SPAWNED = "DPMPI_SPAWNED"  # set for the processes that policy "respawn" starts


def spares_from(value: int | None, size: int) -> int:
    """The number of spares: ``value``, else ``DPMPI_SPARES``, else 0; checked against ``size``."""
    if value is None:
        value = _guard.env_int(ENV_SPARES, 0, "the number of spare ranks")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"spares must be an int, got {type(value).__name__}")
    if value < 0 or value >= size:
        raise ValueError(f"spares={value} with {size} processes: need 0 <= spares < {size} (at least one active rank)")
    return value


def policy_from(value: str | None) -> str:
    """What a repair does when spares run out: ``value``, else ``DPMPI_ON_DEPLETED``, else "shrink"."""
    value = value if value is not None else os.environ.get(ENV_ON_DEPLETED, DEFAULT_POLICY)
    if value not in POLICIES:
        raise ValueError(f"on_depleted must be one of {POLICIES}, got {value!r}")
    return value


def spare_poll() -> float:
    """Seconds an idle spare sleeps between two polls (``DPMPI_SPARE_POLL``, default 5 ms)."""
    raw = os.environ.get(ENV_SPARE_POLL, "0.005")
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{ENV_SPARE_POLL}={raw!r} is not a number of seconds") from None


def repair_timeout() -> float:
    """Seconds a Respawn may take (``DPMPI_REPAIR_TIMEOUT``, default 60)."""
    raw = os.environ.get(ENV_REPAIR_TIMEOUT, "") or "60"
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV_REPAIR_TIMEOUT}={raw!r} is not a number of seconds; "
                         f"set e.g. {ENV_REPAIR_TIMEOUT}=60") from None
    if not value > 0:
        raise ValueError(f"{ENV_REPAIR_TIMEOUT}={raw!r}: the repair deadline must be > 0 seconds")
    return value


def spawned() -> bool:
    """Whether this process was started by a repair under policy "respawn" (``DPMPI_SPAWNED``)."""
    return os.environ.get(ENV_SPAWNED) == "1"
