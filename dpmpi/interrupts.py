"""Where the failure watcher may interrupt the main thread, and where it may not.

The program opts in around a region (``Runtime.run``'s steps, ``with
dpmpi.interrupt_on_failure():``): inside it, a peer's death noticed by the watcher (dpmpi.watcher)
raises ``ProcFailedError`` in the main thread where CPython runs signal handlers (the next call,
loop iteration or function entry; not between arithmetic operators on arrays). dpmpi's own code
(decorated with ``uninterrupted``, and every ``dpmpi.Comm`` call through ``dpmpi._hooks``) defers
it until it returns to the program, and so does ``held`` for the program's ``Runtime.update`` block.

Owner and lifetime: all the state here belongs to the main thread and is touched only by it (the
signal handler runs in the main thread too). ``attach`` is called once, by the watcher's start in
``dpmpi.init``, with the C thread's notice word and the function that builds the exception.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator, TypeVar

from dpmpi import _hooks

F = TypeVar("F", bound=Callable[..., Any])

MAIN = threading.main_thread().ident
_arm = 0  # depth of regions where the program asked to be interrupted
_defer = 0  # depth of dpmpi's own code inside them: no interruption there
_noticed: Any = None  # cffi int* to the C notice word (None: no watcher)
_failure: Callable[[], BaseException] | None = None  # the exception for the current notice
_acked: Any = None  # cffi int* the handler sets: the C thread stops sending the signal again
_initialised = False  # dpmpi.init ran in this process (with or without a watcher)
_get_ident = threading.get_ident


def initialised() -> None:
    """dpmpi.init ran (interrupt_on_failure is allowed from now on, watcher or not)."""
    global _initialised
    _initialised = True


def attach(noticed: Any, failure: Callable[[], BaseException], acked: Any = None) -> None:
    """The watcher started: its C notice word (``noticed[0]`` non-zero once a death is noticed),
    the function that makes the exception to raise, and the word the handler sets when it runs
    (``acked[0] = 1``: until then the C thread sends its signal again)."""
    global _noticed, _failure, _acked
    _noticed, _failure, _acked = noticed, failure, acked


def noticed_failure() -> BaseException | None:
    """The exception for a peer's death that the watcher noticed and no repair has cleared yet
    (None: none noticed, or no watcher)."""
    if _noticed is None or _failure is None or not _noticed[0]:
        return None
    return _failure()


def _due() -> bool:
    return _arm > 0 and _defer == 0 and _noticed is not None and bool(_noticed[0])


def defer_enter() -> None:
    """dpmpi code starts (main thread): no interruption until defer_leave."""
    global _defer
    if _get_ident() == MAIN:
        _defer += 1


def defer_leave() -> bool:
    """dpmpi code ends; True when the caller must raise ``current().failure()`` now (armed, a
    notice arrived meanwhile)."""
    global _defer
    if _get_ident() != MAIN:
        return False
    _defer -= 1
    # No call after reading the notice: CPython runs a pending signal handler at a call, and the
    # handler does nothing in this frame (_SKIP), so a notice read as 0 just before a call at
    # which its signal was then handled was lost until the next dpmpi call (found by
    # tests/test_watcher_local.py, which tries every such point).
    return _defer == 0 and _arm > 0 and _noticed is not None and _noticed[0] != 0


class _Held:
    """``held()``'s block (a class, not a generator context manager: ~3 us less, and
    ``uninterrupted`` runs one around every communicator attribute look-up, ``comm.rank``)."""

    __slots__ = ()

    def __enter__(self) -> None:
        defer_enter()

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        due = defer_leave()
        if due and exc_type is None:  # (the block's own exception goes on as it is)
            raise _failure()  # type: ignore[misc]


_HELD = _Held()


def held() -> _Held:
    """A block never interrupted (dpmpi's own code, ``uninterrupted``; the program's
    ``Runtime.update``: the state's modification, which the program's threads may be doing while
    the main thread waits for them): a failure noticed inside is raised at its end."""
    return _HELD


def uninterrupted(fn: F) -> F:
    """Decorator for dpmpi's own entry points (repairs, snapshot calls): never interrupted inside;
    a failure noticed meanwhile is raised when they return to an armed program. The stall
    watchdog (``DPMPI_STALL_TIMEOUT``) counts them as calls in progress, as it does MPI calls:
    before the fifty-first session a Snapshot of 256 MiB per rank (its memory's pre-faulting,
    the first copy and replication) with ``DPMPI_STALL_TIMEOUT=1`` ended every healthy rank as
    stalled, failure-free."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _HELD, _hooks.idle():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class _Armed:
    """``with armed():`` the main thread is interrupted by a peer's death (see the module)."""

    __slots__ = ("on",)

    def __init__(self, on: bool) -> None:
        self.on = on and _failure is not None and _get_ident() == MAIN

    def __enter__(self) -> None:
        global _arm
        if not self.on:
            return
        _arm += 1
        if _defer == 0 and _noticed[0]:  # noticed before: raise at once
            _arm -= 1
            self.on = False
            raise _failure()  # type: ignore[misc]

    def __exit__(self, *exc: Any) -> None:
        global _arm
        if self.on:
            _arm -= 1


def armed(on: bool = True) -> _Armed:
    return _Armed(on)


# The handler never raises inside these: they keep the counters consistent, and each deals with
# a notice itself when it is done (__enter__ raises, defer_leave tells its caller to, __exit__
# leaves the region, after which the next region or MPI call reports the failure).
_SKIP = {f.__code__ for f in (defer_enter, defer_leave, _due)} | {
    _Armed.__enter__.__code__, _Armed.__exit__.__code__, _Armed.__init__.__code__}


# Where an exception raised by the handler would break Python's own bookkeeping: inside
# ``threading.Thread.start`` (its wait for the new thread), the new thread then failed on its own
# "del _limbo[self]" with a KeyError traceback on stderr, its target never run (a stranger's step
# starting a helper thread); inside asyncio (an event loop cut while ``asyncio.run`` built it
# failed in its ``__del__``, "Exception ignored" and "coroutine ... was never awaited" on stderr:
# a stranger's step fetching its inputs with ``asyncio.run``; both twenty-fourth session)
_FRAGILE = {threading.Thread.start.__code__}
_FRAGILE_PACKAGES = ("asyncio.",)


def _not_here(frame: Any) -> bool:
    """Whether the handler must not raise in ``frame``: one inside an object's ``__del__``
    (called by the collector wherever the program happened to be: an exception raised there is
    printed, "Exception ignored in", and lost, so the interruption would be too; seen: a request
    dropped in a stranger's step), or inside one of the ``_FRAGILE`` functions or packages."""
    for _ in range(64):
        if frame is None:
            return False
        if frame.f_code.co_name == "__del__" or frame.f_code in _FRAGILE:
            return True
        if str(getattr(frame, "f_globals", {}).get("__name__", "")).startswith(_FRAGILE_PACKAGES):
            return True
        frame = getattr(frame, "f_back", None)
    return False


_handling = False  # the handler is running (main thread only)


def on_signal(signum: int, frame: Any) -> None:
    """The handler of the watcher's signal (installed by dpmpi.watcher in the main thread). Not
    re-entered: a re-sent signal that CPython handles at a call inside this handler (in
    ``_not_here``) returns at once. Before, that nested call's frame was the handler's own, not
    skipped, so it raised while the outer call ran inside ``armed().__exit__`` before the count
    went down: the thread stayed armed and the next dpmpi call inside the runtime's recovery
    raised the failure there (1 run of ``make test``, twenty-fifth session, after the twenty-fourth
    session's ``_not_here``)."""
    global _handling
    if _handling:
        return
    _handling = True
    try:
        _handle(frame)
    finally:
        _handling = False


def _handle(frame: Any) -> None:
    """``on_signal``'s work: raise the failure in ``frame`` when it is due there."""
    if _not_here(frame):
        return  # not acknowledged: the watcher sends the signal again, which lands after it
    if _acked is not None:
        _acked[0] = 1  # a handler ran for the notice: from here on Python deals with it
    if frame is not None and frame.f_code in _SKIP:
        # Nothing to do (see _SKIP). Not a re-sent signal: signal.pthread_kill runs the handler
        # again at once, in this frame, which is not skipped; that nested call raised before
        # __exit__ decremented the count, leaving the main thread armed for good, so that a
        # later failure was raised inside the runtime's recovery (seen: 1 in 20 loaded runs).
        return
    if _due():
        raise _failure()  # type: ignore[misc]


# (a re-sent signal handled as on_signal begins, before its guard is set: that nested call's frame)
_SKIP.add(on_signal.__code__)


@contextlib.contextmanager
def interrupt_on_failure() -> Iterator[None]:
    """Opt in (programs using the primitives; ``Runtime.run`` does it around each step): inside
    the block, a peer's death raises ``ProcFailedError`` in the main thread at its next call or
    loop iteration (not between arithmetic operators on arrays), and ``time.sleep`` or a
    lock/``Event`` wait returns early with it. dpmpi's own calls inside the block are never
    interrupted (the failure is raised when they return). A failure noticed before the block
    raises at its start. Needs ``dpmpi.init()``; without a
    watcher (``DPMPI_WATCH=0``, another thread than the main one) the block runs uninterrupted
    and failures surface at the next MPI call, as without it."""
    if not _initialised:
        raise RuntimeError("dpmpi.interrupt_on_failure() needs dpmpi.init() first (the watcher learns the job's "
                           "processes there)")
    with armed():
        yield
