"""The environment variables of hot swap (declared, typed and validated in ``dpmpi.config``),
each read in one place here."""
from __future__ import annotations

from dpmpi import config
from dpmpi.resilient.plan import POLICIES

ENV_SPARES = "DPMPI_SPARES"
ENV_ON_DEPLETED = "DPMPI_ON_DEPLETED"
ENV_SPARE_POLL = "DPMPI_SPARE_POLL"
ENV_REPAIR_TIMEOUT = "DPMPI_REPAIR_TIMEOUT"  # seconds a Respawn may take before the process gives up
ENV_SPAWNED = "DPMPI_SPAWNED"  # set for the processes that policy "respawn" starts


def spares_from(value: int | None, size: int) -> int:
    """The number of spares: ``value``, else ``DPMPI_SPARES``, else 0; checked against ``size``."""
    if value is None:
        value = config.get(ENV_SPARES)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"spares must be an int, got {type(value).__name__}")
    if value < 0 or value >= size:
        raise ValueError(f"spares={value} with {size} processes: need 0 <= spares < {size} (at least one active rank)")
    return value


def policy_from(value: str | None) -> str:
    """What a repair does when spares run out: ``value``, else ``DPMPI_ON_DEPLETED``, else "shrink"."""
    value = value if value is not None else config.get(ENV_ON_DEPLETED)
    if value not in POLICIES:
        raise ValueError(f"on_depleted must be one of {POLICIES}, got {value!r}")
    return value


def spare_poll() -> float:
    """Seconds an idle spare sleeps between two polls (``DPMPI_SPARE_POLL``)."""
    return float(config.get(ENV_SPARE_POLL))


def repair_timeout() -> float:
    """Seconds a Respawn may take (``DPMPI_REPAIR_TIMEOUT``)."""
    return float(config.get(ENV_REPAIR_TIMEOUT))


def spawned() -> bool:
    """Whether this process was started by a repair under policy "respawn" (``DPMPI_SPAWNED``)."""
    return bool(config.get(ENV_SPAWNED))
