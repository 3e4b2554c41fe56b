"""The stall watchdog's start (``DPMPI_STALL_TIMEOUT``): its C thread (``cext/dpmpi_c.c``) ends
a rank whose main thread made no progress outside dpmpi and MPI calls for that long; the marks
around those calls are ``dpmpi._hooks``'. Before the end it sends a signal to the main thread,
on which faulthandler's handler writes that thread's traceback to stderr: the rank's last words
say where the program was stuck. Imports no MPI."""
from __future__ import annotations

import faulthandler
import signal
import threading
from typing import Any

from dpmpi import _hooks, config


def start(lib: Any, seconds: float) -> None:
    """Start the watchdog (``lib``: the C module's; ``seconds`` <= 0: none; idempotent)."""
    if seconds <= 0:
        return
    lib.dpmpi_stall_start(seconds, _dump_signal())
    _hooks.enable_stall(lib.dpmpi_stall_enter, lib.dpmpi_stall_leave)


def _dump_signal() -> int:
    """The signal for the traceback, its handler registered: SIGRTMIN+7 (+8 where the failure
    watcher's is +7). 0 (no traceback) outside the main thread, or where the program handles
    the signal itself."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGRTMIN"):
        return 0
    sig = signal.SIGRTMIN + 7
    try:
        if sig == config.get("DPMPI_WATCH_SIGNAL"):
            sig += 1
        if signal.getsignal(sig) not in (signal.SIG_DFL, None):
            return 0
        faulthandler.register(sig, file=2, all_threads=False, chain=False)  # (fd 2: where the C message goes)
    except (OSError, RuntimeError, ValueError):  # (no traceback then; the watchdog works all the same)
        return 0
    return int(sig)
