"""What runs around every dpmpi communicator call when something asked for it: fault-injection
points (dpmpi.faults) and the stall watchdog's progress marks. Off by default; when off the
cost on the call path is one attribute test. Imports no MPI."""
from __future__ import annotations

from typing import Callable

#: True when enter/leave must be called around each communicator method call
on = False
_fault_hit: Callable[[str], None] | None = None
_stall_enter: Callable[[], None] | None = None
_stall_leave: Callable[[], None] | None = None


def _update() -> None:
    global on
    on = _fault_hit is not None or _stall_enter is not None


def enable_faults(hit: Callable[[str], None] | None) -> None:
    global _fault_hit
    _fault_hit = hit
    _update()


def enable_stall(enter: Callable[[], None], leave: Callable[[], None]) -> None:
    global _stall_enter, _stall_leave
    _stall_enter, _stall_leave = enter, leave
    _update()


def enter(name: str) -> None:
    if _fault_hit is not None:
        _fault_hit(name)  # may end the process, raise, or hang: before the MPI call starts
    if _stall_enter is not None:
        _stall_enter()


def leave() -> None:
    if _stall_leave is not None:
        _stall_leave()
