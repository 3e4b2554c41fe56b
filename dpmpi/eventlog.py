"""The events log (``DPMPI_EVENTS=path``): one JSON line per record, appended by every process of
the job (repairs, idle spares' exits, the failure watcher's interruptions, the runtime)."""
from __future__ import annotations

import json
import os

from dpmpi import config

ENV_EVENTS = "DPMPI_EVENTS"


def log_event(record: dict) -> None:
    """Append ``record`` as one JSON line to the events log, if ``DPMPI_EVENTS`` names one."""
    path = config.raw(ENV_EVENTS)
    if not path:
        return
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)  # one write of a short line with O_APPEND: lines do not interleave
    finally:
        os.close(fd)
