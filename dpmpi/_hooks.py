"""What runs around every dpmpi communicator call when something asked for it: fault-injection
points (dpmpi.faults), the stall watchdog's progress marks, and the failure watcher's "no
interruption inside dpmpi" marks (dpmpi.watcher). Off by default; when off the cost on the call
path is one attribute test. Imports no MPI."""
from __future__ import annotations

from typing import Callable

#: True when enter/leave must be called around each communicator method call
on = False
_fault_hit: Callable[[str], None] | None = None
_stall_enter: Callable[[], None] | None = None
_stall_leave: Callable[[], None] | None = None
_watch_enter: Callable[[], None] | None = None
_watch_leave: Callable[[], bool] | None = None
_watch_failure: Callable[[], BaseException | None] | None = None


def _update() -> None:
    global on
    on = _fault_hit is not None or _stall_enter is not None or _watch_enter is not None


def enable_faults(hit: Callable[[str], None] | None) -> None:
    global _fault_hit
    _fault_hit = hit
    _update()


def enable_stall(enter: Callable[[], None], leave: Callable[[], None]) -> None:
    global _stall_enter, _stall_leave
    _stall_enter, _stall_leave = enter, leave
    _update()


def enable_watch(enter: Callable[[], None], leave: Callable[[], bool],
                 failure: Callable[[], BaseException | None]) -> None:
    """The failure watcher's marks, and ``failure()``: the exception to raise for its notice."""
    global _watch_enter, _watch_leave, _watch_failure
    _watch_enter, _watch_leave, _watch_failure = enter, leave, failure
    _update()


def enter(name: str) -> None:
    if _fault_hit is not None:
        _fault_hit(name)  # may end the process, raise, or hang: before the MPI call starts
    if _stall_enter is not None:
        _stall_enter()
    if _watch_enter is not None:
        _watch_enter()


def leave() -> bool:
    """True when the caller must raise the failure watcher's error once its result is safe."""
    if _stall_leave is not None:
        _stall_leave()
    return _watch_leave() if _watch_leave is not None else False


class _Idle:
    """``with idle():`` (a class, not a generator: dpmpi's snapshot calls enter it at every step,
    and a generator's context manager cost ~1.5 us per call with the watchdog off)."""

    __slots__ = ()

    def __enter__(self) -> None:
        if _stall_enter is not None:
            _stall_enter()

    def __exit__(self, *exc: object) -> None:
        if _stall_leave is not None:
            _stall_leave()


_IDLE = _Idle()


def idle() -> _Idle:
    """A wait that dpmpi owns and that may last as long as the job (an idle spare's), or dpmpi's
    own work (``interrupts.uninterrupted``): the stall watchdog (``DPMPI_STALL_TIMEOUT``) counts
    it as a call in progress, not as a hang. Before the twenty-fourth session it ended every
    spare that had waited that long, and the job's next failure found none."""
    return _IDLE


def watching() -> bool:
    """Whether the failure watcher's marks are on (for calls that skip the other hooks)."""
    return _watch_enter is not None


def watch_enter() -> None:
    if _watch_enter is not None:
        _watch_enter()


def watch_leave() -> bool:
    """True when the caller must raise the watcher's error once its result is safe."""
    return _watch_leave() if _watch_leave is not None else False


def interrupt() -> None:
    """Raise the failure the watcher noticed while a dpmpi call ran (see dpmpi.watcher)."""
    exc = _watch_failure() if _watch_failure is not None else None
    if exc is not None:
        raise exc
