"""Fault injection: make a chosen rank die in a chosen way at a chosen point.

A plan is a list of ``Fault(rank, point, kind, count)``:

* ``rank``  -- the world rank that fails (the process started as that rank; a process that
  replaced a failed one never fails: a rank fails only in its first life);
* ``point`` -- where: the name of a ``dpmpi.Comm`` method (``"Allreduce"``: counted on every
  call through any dpmpi communicator, the fault fires before the call starts), a name the
  program passes to ``dpmpi.faults.point(name)``, or ``"time"`` (seconds after dpmpi was
  imported: faults any program, even a plain mpi4py one launched with dpmpi-run);
* ``count`` -- the N-th time the point is reached (N >= 1), or the seconds for ``"time"``;
* ``after`` -- seconds to wait after that before failing (default 0: at once), e.g. to fail in
  the middle of a step that begins at a point (``2:step@20+0.05:KILL``);
* ``kind``  -- one of ``Kind``: KILL, TERM, SEGV, ABORT (SIGKILL, SIGTERM, a real segmentation
  fault, ``os.abort()``), EXIT (``os._exit(3)``), SYSEXIT (``sys.exit(3)``), EXCEPTION (raises
  ``InjectedFault``, uncaught unless the program catches it), HANG (the rank stops making
  progress: it sleeps forever; survivors only recover from that with ``DPMPI_STALL_TIMEOUT``),
  STOP (the process stops itself with SIGSTOP, every thread with it; the hung-rank detector,
  ``DPMPI_HEARTBEAT_TIMEOUT``, kills it).

From code: ``dpmpi.faults.plan([Fault(2, "Allreduce", Kind.KILL, 50)])``. From the environment,
without editing the program: ``DPMPI_FAULTS="2:Allreduce@50:KILL"``; several faults are
separated by ``,``; ``@N`` defaults to 1; ``0:time@1.5:TERM`` fires 1.5 s after start.
Before it fires, the rank writes one line to stderr:
``[dpmpi-fault] {"rank": 2, "point": "Allreduce", "count": 50, "kind": "KILL", "time": ...}``.
"""
from __future__ import annotations

import atexit
import enum
import json
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, NoReturn

from dpmpi import _guard, _hooks, config

ENV_FAULTS = "DPMPI_FAULTS"
#: set to "1" in processes that replace a failed rank (they never re-fail)
ENV_REPLACEMENT = "DPMPI_REPLACEMENT"
EXIT_STATUS = 3


class Kind(enum.Enum):
    KILL = "KILL"
    TERM = "TERM"
    SEGV = "SEGV"
    ABORT = "ABORT"
    EXIT = "EXIT"
    SYSEXIT = "SYSEXIT"
    EXCEPTION = "EXCEPTION"
    HANG = "HANG"
    STOP = "STOP"


KILL, TERM, SEGV, ABORT, EXIT, SYSEXIT, EXCEPTION, HANG, STOP = Kind  # module-level names: faults.KILL, ...


class InjectedFault(RuntimeError):
    """Raised by an EXCEPTION fault."""


TIME_POINT = "time"
STEP_POINT = "step"  # reached by dpmpi.Runtime before each step (runtime_step)


@dataclass(frozen=True)
class Fault:
    rank: int
    point: str
    kind: Kind
    count: float = 1
    after: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 0:
            raise ValueError(f"Fault rank must be an int >= 0 (a world rank), got {self.rank!r}")
        if not isinstance(self.point, str) or not self.point or any(c in self.point for c in ":@,; "):
            raise ValueError(
                f"Fault point must be a non-empty name without ':@,; ' (e.g. 'Allreduce', 'step' or 'time'), got {self.point!r}"
            )
        if isinstance(self.kind, str):
            object.__setattr__(self, "kind", _kind(self.kind))
        if not isinstance(self.kind, Kind):
            raise ValueError(f"Fault kind must be one of {', '.join(k.value for k in Kind)}, got {self.kind!r}")
        count = self.count
        if isinstance(count, bool) or not isinstance(count, (int, float)) or not math.isfinite(count):
            raise ValueError(f"Fault count must be a number, got {count!r}")
        if self.point == TIME_POINT:
            if count < 0:
                raise ValueError(f"a 'time' fault needs seconds >= 0, got {count!r}")
        elif count != int(count) or count < 1:
            raise ValueError(f"Fault count is the N-th time the point is reached: an int >= 1, got {count!r}")
        else:
            object.__setattr__(self, "count", int(count))
        after = self.after
        if isinstance(after, bool) or not isinstance(after, (int, float)) or not math.isfinite(after) or after < 0:
            raise ValueError(f"Fault after is seconds >= 0, got {after!r}")
        if after and self.point == TIME_POINT:
            raise ValueError("a 'time' fault takes its seconds after '@'; '+SECONDS' is for the other points")

    def spec(self) -> str:
        delay = f"+{self.after:g}" if self.after else ""
        return f"{self.rank}:{self.point}@{self.count}{delay}:{self.kind.value}"


def _kind(name: str) -> Kind:
    try:
        return Kind[name.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown fault kind {name!r}; use one of {', '.join(k.value for k in Kind)}") from None


def parse(spec: str) -> list[Fault]:
    """Parse ``"RANK:POINT[@N][+SECONDS]:KIND[,...]"`` (the ``DPMPI_FAULTS`` syntax)."""
    if not isinstance(spec, str):
        raise TypeError(f"a fault spec is a string like '2:Allreduce@50:KILL', got {type(spec).__name__}")
    faults = []
    for item in (part.strip() for part in spec.replace(";", ",").split(",")):
        if not item:
            continue
        fields = item.split(":")
        if len(fields) != 3:
            raise ValueError(f"bad fault {item!r}: write RANK:POINT[@N]:KIND, e.g. 2:Allreduce@50:KILL")
        rank_s, point_s, kind_s = (f.strip() for f in fields)
        if not rank_s.isdigit():
            raise ValueError(f"bad fault {item!r}: the rank {rank_s!r} is not an int >= 0")
        point_s, _, after_s = point_s.partition("+")
        point, _, count_s = point_s.partition("@")
        try:
            count: float = float(count_s) if point == TIME_POINT else int(count_s or 1)
        except ValueError:
            what = "a number of seconds" if point == TIME_POINT else "an int >= 1 (the N-th time the point is reached)"
            raise ValueError(f"bad fault {item!r}: {count_s!r} after '@' is not {what}") from None
        try:
            after = float(after_s) if after_s else 0.0
        except ValueError:
            raise ValueError(f"bad fault {item!r}: {after_s!r} after '+' is not a number of seconds") from None
        faults.append(Fault(int(rank_s), point, _kind(kind_s), count, after))
    return faults


# ---- the plan of this process -------------------------------------------------------------
_lock = threading.Lock()
_pending: dict[str, list[Fault]] = {}
_counts: dict[str, int] = {}
_deferred: Fault | None = None  # a time fault that must act in the main thread
_planned: list[Fault] = []  # this process's faults, and those carried out (the report at exit)
_fired: set[Fault] = set()
_runtime_steps = False  # a dpmpi.Runtime reaches point "step" itself (runtime_step)


def first_life() -> bool:
    return not config.get(ENV_REPLACEMENT)


def my_rank() -> int:
    rank = _guard.world_rank_from_env()
    return 0 if rank < 0 else rank


def plan(faults: Iterable[Fault] | str | None) -> list[Fault]:
    """Replace this process's fault plan; returns the faults that apply to this process.

    Every rank may be given the whole plan: each keeps only its own faults, and none in a
    process that replaced a failed rank."""
    if faults is None:
        faults = []
    elif isinstance(faults, str):
        faults = parse(faults)
    faults = list(faults)
    for f in faults:
        if not isinstance(f, Fault):
            raise TypeError(f"plan() takes Fault objects or a spec string, got {type(f).__name__}")
    rank = my_rank()
    mine = [f for f in faults if f.rank == rank] if first_life() else []
    global _runtime_steps
    _runtime_steps = False
    with _lock:
        _planned[:] = mine
        _fired.clear()
        _pending.clear()
        _counts.clear()
        for f in mine:
            if f.point == TIME_POINT:
                _start_timer(f)
            else:
                _pending.setdefault(f.point, []).append(f)
    _hooks.enable_faults(hit if _pending else None)
    return mine


def clear() -> None:
    plan(None)


def unfired() -> list[Fault]:
    """This process's planned faults that have not been carried out (yet)."""
    return [f for f in _planned if f not in _fired]


def _report_unfired() -> None:
    """At a normal exit: say which of this process's planned faults never fired (a misspelt
    point, a count beyond the run, a point the program never reaches), so that a fault test that
    tested nothing does not pass for one that recovered."""
    for f in unfired():
        if f.point == TIME_POINT:
            why = f"it ended before {f.count:g} s"
        else:
            why = f"point '{f.point}' was reached {_counts.get(f.point, 0)} time(s)"
            if not _counts.get(f.point):
                why += (f" (points are the names of dpmpi.Comm methods, '{TIME_POINT}', '{STEP_POINT}' (each "
                        f"step of a dpmpi.Runtime) and the names a program passes to dpmpi.faults.point)")
        try:
            sys.stderr.write(f"dpmpi: the planned fault {f.spec()} did not fire in this process: {why}\n")
            sys.stderr.flush()
        except Exception:
            pass


atexit.register(_report_unfired)  # (says nothing when no fault was planned here)


def load_env() -> list[Fault]:
    """Load the plan from ``DPMPI_FAULTS`` (a bad spec raises ValueError naming it)."""
    spec = config.raw(ENV_FAULTS)
    try:
        return plan(parse(spec))
    except ValueError as exc:
        raise ValueError(f"{ENV_FAULTS}={spec!r}: {exc}") from None


def point(name: str) -> None:
    """Mark that the program reached point ``name`` (fires the fault planned there, if any).
    Once a ``dpmpi.Runtime`` runs its steps, it reaches ``"step"`` itself, before each step, and
    the program's own ``point("step")`` calls are not counted (each step counts once)."""
    if _pending and not (_runtime_steps and name == STEP_POINT):
        hit(name)


def pointed(name: str, value: Any) -> Any:
    """``value``, after ``point(name)`` (a point right after a call that made it)."""
    point(name)
    return value


def runtime_step() -> None:
    """Called by ``dpmpi.Runtime`` right before each step: point ``"step"``, so that
    ``RANK:step@N:KILL`` faults any Runtime program, not only those that mark their steps."""
    global _runtime_steps
    _runtime_steps = True
    if _pending:
        hit(STEP_POINT)


def hit(name: str) -> None:
    faults = _pending.get(name)
    if not faults:
        return
    with _lock:
        n = _counts.get(name, 0) + 1
        _counts[name] = n
        due = [f for f in faults if f.count == n]
    for f in due:
        if f.after:
            _start_timer(f, f.after)
        else:
            inject(f)


def _announce(f: Fault) -> None:
    line = json.dumps({"rank": f.rank, "point": f.point, "count": f.count, "kind": f.kind.value, "time": time.time()})
    try:
        sys.stdout.flush()
        sys.stderr.write(f"[dpmpi-fault] {line}\n")
        sys.stderr.flush()
    except Exception:
        pass


def inject(f: Fault) -> None:
    """Carry out fault ``f`` now, in the calling thread."""
    _fired.add(f)
    _announce(f)
    kind = f.kind
    where = f"{f.point}@{f.count}"
    if kind is Kind.KILL:
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind is Kind.TERM:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    elif kind is Kind.SEGV:
        from dpmpi import _cext

        signal.signal(signal.SIGSEGV, signal.SIG_DFL)
        _cext.lib.dpmpi_segv()
    elif kind is Kind.ABORT:
        os.abort()
    elif kind is Kind.EXIT:
        os._exit(EXIT_STATUS)  # the guard's os._exit when dpmpi is installed
    elif kind is Kind.SYSEXIT:
        sys.exit(EXIT_STATUS)
    elif kind is Kind.EXCEPTION:
        raise InjectedFault(f"injected fault on rank {f.rank} at {where}")
    elif kind is Kind.HANG:
        _hang()
    elif kind is Kind.STOP:
        os.kill(os.getpid(), signal.SIGSTOP)
    _wait_for_signal()


def _hang() -> NoReturn:
    while True:  # stop making progress without using a core
        time.sleep(3600)


def _wait_for_signal() -> NoReturn:
    while True:  # a signal sent to oneself is delivered at once; this is never reached in practice
        time.sleep(0.01)


# ---- time faults ----------------------------------------------------------------------------
_MAIN_THREAD_KINDS = (Kind.EXCEPTION, Kind.SYSEXIT, Kind.HANG)


def _start_timer(f: Fault, seconds: float | None = None) -> None:
    """Fail ``seconds`` from now (default: a time fault's own seconds) on a thread of its own."""
    global _deferred
    seconds = float(f.count) if seconds is None else seconds
    if f.kind in _MAIN_THREAD_KINDS:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("a 'time' fault of kind EXCEPTION, SYSEXIT or HANG must be planned from the main thread")
        _deferred = f
        signal.signal(signal.SIGUSR2, _on_deferred)

    def fire() -> None:
        time.sleep(seconds)
        if f.kind in _MAIN_THREAD_KINDS:
            os.kill(os.getpid(), signal.SIGUSR2)  # Python runs the handler in the main thread
        else:
            inject(f)

    threading.Thread(target=fire, name=f"dpmpi-fault-{f.spec()}", daemon=True).start()


def _on_deferred(signum: int, frame: object) -> None:
    if _deferred is not None:
        inject(_deferred)
