"""``dpmpi.Comm``: an mpi4py communicator whose failures surface as dpmpi exceptions.

mpi4py's conventions are kept: upper-case methods take buffers, lower-case ones pickle Python
objects, and every other method and attribute of the wrapped communicator is passed through
(each call goes through the same error choke point, ``dpmpi.errors.from_mpi``). The ULFM
primitives keep MPI's names: ``Revoke``, ``Is_revoked``, ``Shrink``, ``Agree``, ``Iagree``,
``Ack_failed``, ``Get_failed``. Communicators and requests that methods return come back
wrapped (``dpmpi.Comm``, ``dpmpi.Request``); ``.mpi`` gives the raw mpi4py object.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from mpi4py import MPI

from dpmpi import (_ft, _guard, _hooks, agreements, ctxcomms, init_mark, interrupts, isendrecv, message, pending_dups,
                   persistent, world_guard)
from dpmpi.calls import Wrapper, class_op, translating
from dpmpi.errors import from_mpi
from dpmpi.mpicall import dropped_world_ranks, exchange_handles, hold_context_id, sendrecv, warm_up, within_job
from dpmpi.request import Request

# Methods that create a communicator, collectively over its members, on which dpmpi sends one
# small collective before handing it out (intracommunicators and intercommunicators): with Open
# MPI 5.0.11, a revoke that reaches a process still inside the call that creates the communicator
# (seen: in ompi_comm_activate, from Intercomm_create) makes it segfault in
# ompi_comm_revoke_local, and during a repair a second failure may revoke a communicator created a
# moment ago. Not here: Spawn, Spawn_multiple, Accept, Connect, Join (their other side is another
# job, whose program may not take part in a warm-up), Idup/Ishrink (not created when they return),
# and methods that return an existing communicator (Get_parent, f2py). The creations themselves are
# listed once, in pending_dups (which makes them wait for an Idup in progress); Shrink too here.
_WARM_UP = pending_dups.CREATIONS | {"Shrink"}


ctxcomms.install()  # (mpi4py's hidden Dups of a communicator: a repair revokes them with it)

_FATAL_HANDLERS = tuple(h for h in (MPI.ERRORS_ARE_FATAL, getattr(MPI, "ERRORS_ABORT", None)) if h is not None)


def _convert(op: str, result: Any, raw: MPI.Comm | None = None) -> Any:
    if isinstance(result, MPI.Comm):
        if result == MPI.COMM_NULL:
            return result
        if op in _WARM_UP and within_job(result):
            warm_up(result, op, watch=raw)
        return Comm(result)
    if isinstance(result, MPI.Request):
        return Request(result, raw)
    if isinstance(result, tuple) and any(isinstance(r, (MPI.Comm, MPI.Request)) for r in result):
        return tuple(_convert(op, r, raw) for r in result)
    if isinstance(result, list) and result and isinstance(result[0], MPI.Request):
        return [Request(r, raw) for r in result]
    return result


def _wrapped(owner: Any, name: str, get: Callable[[], Any], raw: MPI.Comm | None) -> Any:
    """``owner.name`` for a name ``owner`` does not define: ``get()``, the wrapped mpi4py object's
    attribute; a method is wrapped by ``translating`` and cached on ``owner``, so later look-ups
    skip ``__getattr__``. Private names are not looked up."""
    if name.startswith("_"):
        raise AttributeError(name)
    attr = get()
    if not callable(attr):
        return attr
    wrapped = _method(name, attr, raw, _creation_failed if name in _WARM_UP else None)
    owner.__dict__[name] = wrapped
    return wrapped


# MPI-4 partitioned point-to-point. Open MPI 5.0.11's (ompi/mca/part/persist) sends over two
# Idups of COMM_WORLD that each process starts at its first partitioned call: a job's idle spares
# never start them, so the first partitioned exchange of a job with a spare waited for ever (a
# stranger's program, forty-ninth session; plain mpi4py on a Split of 4 of 5 ranks: until the
# fifth rank entered MPI_Finalize), and once a process died they can never complete.
_UNSUPPORTED = frozenset({"Psend_init", "Precv_init"})


def _unsupported(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"dpmpi: {name} (MPI-4 partitioned communication) is not supported: Open MPI 5.0.11 makes it "
            f"over duplicates of COMM_WORLD that every process of the job must start, which idle spares never "
            f"do (the exchange waits for ever) and which cannot be made once a process died. Use a "
            f"Send_init/Recv_init per partition, or Isend/Irecv (docs/limitations.md)")

    refuse.__name__ = name
    return refuse


def _method(name: str, fn: Callable[..., Any], raw: MPI.Comm | None,
            cause: Callable[[MPI.Exception], MPI.Exception] | None = None) -> Callable[..., Any]:
    """The bound mpi4py method ``fn`` (``raw.name``) as the program gets it: translated
    (``translating``); a matched probe returns a ``dpmpi.Message`` that knows its size; a
    nonblocking collective or a creation first waits for ``raw``'s ``Idup``s in progress
    (``pending_dups``); ``Isendrecv`` and ``Isendrecv_replace`` are a receive and a send of a copy
    (Open MPI's never fail when a peer dies) and ``Sendrecv_replace`` from ``MPI_PROC_NULL`` a
    ``Send`` (Open MPI's can segfault): ``dpmpi.isendrecv``; partitioned communication
    raises ``NotImplementedError`` (``_UNSUPPORTED``); a method that communicates on the world of
    a job with spares raises ``RuntimeError`` (``dpmpi.world_guard``)."""
    if raw is None:
        return translating(name, fn, raw, _convert, cause)
    if world_guard.guards(raw) and world_guard.refused(name):  # (the world, in a job with spares)
        return world_guard.refusal(name)
    if name in _UNSUPPORTED:
        return _unsupported(name)
    if name in isendrecv.NAMES:
        fn = isendrecv.methods(raw)[name]
    if name in message.PROBES:
        fn = message.probing(fn, raw, 2)
    wrapped = translating(name, fn, raw, _convert, cause)
    return pending_dups.guarded(name, wrapped, raw) if name in pending_dups.GUARDED else wrapped


def _creation_failed(exc: MPI.Exception) -> MPI.Exception:
    """A method that creates a communicator failed here: its context id is held
    (``dpmpi.mpicall.hold_context_id``); ``exc`` is raised as it is."""
    hold_context_id()
    return exc


def plain_method(comm: Comm, name: str) -> Callable[..., Any]:
    """``comm.<name>`` as the program gets it (hooks, error translation, wrapped results), made
    afresh from ``comm``'s handle and not cached on it (a caller that wraps the cached one)."""
    return _method(name, getattr(comm.mpi, name), comm.mpi)


class Comm(Wrapper):
    """A communicator whose failures raise ``ProcFailedError`` / ``RevokedError``.

    ``Comm(MPI.COMM_WORLD)`` wraps (it does not duplicate) an mpi4py communicator. Creating one
    that spans several processes checks, once per process, that the job is fault tolerant and
    raises ``FaultToleranceUnavailableError`` with the fix if it is not.
    """

    def __init__(self, comm: MPI.Comm | Comm) -> None:
        if isinstance(comm, Comm):
            comm = comm.mpi
        if not isinstance(comm, MPI.Comm):
            raise TypeError(
                f"dpmpi.Comm wraps an mpi4py communicator (e.g. MPI.COMM_WORLD), got {type(comm).__name__}"
            )
        if comm == MPI.COMM_NULL:
            raise ValueError("dpmpi.Comm cannot wrap MPI.COMM_NULL; pass a valid communicator")
        _ft.require(comm)
        self._comm = comm

    @property
    def mpi(self) -> MPI.Comm:
        """The wrapped mpi4py communicator."""
        return self._comm

    @interrupts.uninterrupted  # (a failure raised between caching the wrapper and replacing it left the wrong one)
    def __getattr__(self, name: str) -> Any:
        # (the look-up closes over the mpi4py object, not over this handle: a failure raised inside
        # it keeps its frame, and that frame its closure, alive in the traceback through the repair,
        # and a handle alive there counts as still in use: holding.let_go_of_unwound)
        raw = self._comm
        attr = _wrapped(self, name, lambda: sendrecv(raw) if name == "Sendrecv" else getattr(raw, name), raw)
        if name in persistent.REMADE:  # (made again under the same objects by a repair)
            attr = self.__dict__[name] = persistent.recording(self, name, attr)
        return attr

    def __repr__(self) -> str:
        try:
            return f"<dpmpi.Comm rank {self._comm.Get_rank()} of {self._comm.Get_size()}>"
        except MPI.Exception:
            return "<dpmpi.Comm (unusable)>"

    def __reduce__(self) -> tuple:
        # mpi4py pickles the predefined communicators and refuses the others (ValueError)
        if type(self) is not Comm:
            raise TypeError(f"cannot pickle a {type(self).__name__}: it belongs to this process's repair state")
        return Comm, (self._comm,)

    def Set_errhandler(self, errhandler: MPI.Errhandler) -> None:
        """mpi4py's, except that the handlers that abort the job at the first failure are refused
        (``ValueError``): dpmpi's communicators return errors, which it raises as its exceptions."""
        if errhandler in _FATAL_HANDLERS:
            raise ValueError("dpmpi: Set_errhandler(MPI.ERRORS_ARE_FATAL or MPI.ERRORS_ABORT) on a dpmpi communicator "
                             "would abort the whole job at the first failure, which dpmpi is there to survive; leave "
                             "the communicator's handler as it is (failures raise dpmpi.ProcFailedError, which "
                             "dpmpi.Runtime and Respawn repair)")
        plain_method(self, "Set_errhandler")(errhandler)

    def Set_attr(self, keyval: int, attrval: Any) -> None:
        """mpi4py's; a repair that rebuilds this communicator carries the attribute over."""
        plain_method(self, "Set_attr")(keyval, attrval)
        self.__dict__.setdefault("_attr_keys", set()).add(keyval)

    def Delete_attr(self, keyval: int) -> None:
        plain_method(self, "Delete_attr")(keyval)
        self.__dict__.get("_attr_keys", set()).discard(keyval)

    # --- ULFM, under MPI's names -------------------------------------------------------------
    def Revoke(self) -> None:
        """Revoke the communicator on every rank: pending and future operations on it fail with
        ``RevokedError`` everywhere (local call, propagates in the background)."""
        self._call("Revoke", self._comm.Revoke)

    def Is_revoked(self) -> bool:
        """Whether the communicator has been revoked (local)."""
        return bool(self._call("Is_revoked", self._comm.Is_revoked))

    def Shrink(self) -> Comm:
        """Collective over the live ranks: a new communicator without the failed ones.

        Works on a revoked communicator. The new one has carried one collective before it is
        returned. The world ranks dropped are recorded as recovered for the job's exit code.
        On an intercommunicator with Open MPI 5.0.x: ``NotImplementedError`` (its Shrink never
        returns there, and Ishrink hangs once the intercommunicator is revoked); shrink the
        intracommunicators it was made from and call ``Create_intercomm`` again."""
        if self._comm.Is_inter() and _ft.intercomm_shrink_hangs():
            raise NotImplementedError(
                "Shrink of an intercommunicator: Open MPI 5.0.x with ULFM never returns from it (upstream: "
                "open-mpi/ompi#12260); shrink the intracommunicators it was made from and call Create_intercomm again")
        init_mark.announce_own_repair(sys._getframe(1))  # (the program's own call: dpmpi-run leaves its end to it)
        new = self._call("Shrink", self._comm.Shrink)
        _guard.note_recovered(dropped_world_ranks(self._comm, new.mpi))
        return new

    def Agree(self, flag: int) -> int:
        """Fault-tolerant agreement: the bitwise AND of ``flag`` over the live ranks.

        Raises ``ProcFailedError`` while a failure has not been acknowledged (``Ack_failed``), and
        ``RevokedError`` when a repair (``Respawn``) begins before every live rank has entered it:
        the agreement could not complete then, and this rank should join the repair."""
        if isinstance(flag, bool) or not isinstance(flag, int):
            raise TypeError(f"Agree(flag) takes an int (bits to AND across ranks), got {type(flag).__name__}")
        return int(self._call("Agree", agreements.agree, self._comm, flag))

    def Iagree(self, flag: Any) -> Request:
        """Non-blocking ``Agree``; ``flag`` is a one-int buffer (e.g. ``array('i', [1])``)
        that holds the result when the returned request completes."""
        try:
            view = memoryview(flag)
        except TypeError:
            raise TypeError(
                f"Iagree(flag) takes a writable one-int buffer such as array('i', [1]), got {type(flag).__name__}"
            ) from None
        if view.readonly or view.nbytes != 4:
            raise ValueError("Iagree(flag) needs a writable buffer of exactly one 32-bit int, e.g. array('i', [1])")
        return self._call("Iagree", agreements.iagree, self._comm, flag)

    def Ack_failed(self, num_to_ack: int | None = None) -> int:
        """Acknowledge the failures known locally (all of them by default); returns how many
        failures are acknowledged in total."""
        if num_to_ack is not None and (isinstance(num_to_ack, bool) or not isinstance(num_to_ack, int) or num_to_ack < 0):
            raise ValueError(f"Ack_failed(num_to_ack) takes None or an int >= 0, got {num_to_ack!r}")
        return int(self._call("Ack_failed", self._comm.Ack_failed, num_to_ack))

    def Get_failed(self) -> MPI.Group:
        """The group of ranks known locally to have failed (local knowledge)."""
        return self._call("Get_failed", self._comm.Get_failed)

    def failed_ranks(self) -> tuple[int, ...]:
        """Ranks of this communicator known locally to have failed."""
        from dpmpi.errors import failed_ranks

        return failed_ranks(self._comm)

    def _call(self, op: str, fn: Callable[..., Any], *args: Any) -> Any:
        # (no fault points here; the failure watcher's marks only, as around every call)
        watch = _hooks.watching()
        if watch:
            _hooks.watch_enter()
        due = False
        try:
            try:
                result = fn(*args)
            except MPI.Exception as exc:
                raise from_mpi(exc, self._comm, op) from exc
            out = result if result is None else _convert(op, result, self._comm)
        finally:
            if watch:
                due = _hooks.watch_leave()
        if due:
            _hooks.interrupt()
        return out


def rebind(comm: Comm, raw: MPI.Comm) -> MPI.Comm | None:
    """Point ``comm`` at ``raw`` in place (a repair rebuilds a communicator and the program's
    handles stay valid); the methods cached for the old communicator are dropped, and its name
    and error handler carried over (the program may have set them). The mpi4py object the
    program holds (``comm.mpi``, e.g. kept in a variable before its loop, or given to a library)
    gets ``raw``'s handle in place, where both are of one class and neither is one of mpi4py's
    predefined objects; before, it kept the replaced communicator, and a step that used it
    failed on it after every repair, forever. Returns the object that holds the replaced
    communicator now (``raw`` after an exchange, else the old object), to be retired."""
    old = comm.__dict__.get("_comm")
    keep = {k: v for k, v in comm.__dict__.items() if k.startswith("_")}  # not the cached methods
    comm.__dict__.clear()
    _carry_settings(old, raw, keep.get("_attr_keys", ()))
    live, replaced = take_handle(old, raw)
    comm.__dict__.update(keep, _comm=live)
    persistent.remake(comm, live)  # the persistent requests made on it (dpmpi/persistent.py)
    return replaced


_PREDEFINED = (MPI.COMM_NULL, MPI.COMM_SELF, MPI.COMM_WORLD)  # (objects mpi4py and every module share)


def take_handle(old: MPI.Comm | None, new: MPI.Comm) -> tuple[MPI.Comm, MPI.Comm | None]:
    """``old`` (an object the program may hold) takes ``new``'s handle in place, where both are
    mpi4py communicators of one class and neither is one of mpi4py's predefined objects (the
    handles are exchanged). Returns (the object to use from now on, the one that holds the
    replaced communicator): (old, new) after an exchange, else (new, old)."""
    if old is None or old is new or type(old) is not type(new):
        return new, old
    # (by handle: also a null one, and MPI.COMM_WORLD guarded by world_guard)
    if any(obj == p for obj in (old, new) for p in _PREDEFINED):
        return new, old
    exchange_handles(old, new)
    return old, new


def _carry_settings(old: MPI.Comm | None, new: MPI.Comm, keyvals: Any = ()) -> None:
    """``old``'s name, error handler and the attributes of ``keyvals`` (those the program set
    through dpmpi) onto ``new``: local calls; the old communicator is revoked but not freed, so
    its attributes are never deleted. Nothing when either is null or the old one cannot tell."""
    if old is None or old == MPI.COMM_NULL or new == MPI.COMM_NULL or old == new:
        return
    try:
        name, handler = old.Get_name(), old.Get_errhandler()
        attrs = [(k, old.Get_attr(k)) for k in keyvals]
    except MPI.Exception:
        return
    try:
        new.Set_name(name)
        new.Set_errhandler(handler)
        for keyval, value in attrs:
            if value is not None:
                new.Set_attr(keyval, value)
    finally:
        handler.Free()


# mpi4py's class methods of communicators (Comm.Get_parent(), Comm.f2py(...), ...); the instance
# methods pass through __getattr__
for _cls, _names in ((MPI.Comm, ("Get_parent", "Join", "f2py", "fromhandle", "fromint")),
                     (MPI.Intracomm, ("Create_from_group",)), (MPI.Intercomm, ("Create_from_groups",))):
    for _name in _names:
        if hasattr(_cls, _name):
            setattr(Comm, _name, class_op(_cls, _name, _convert))


_WORLD: Comm | None = None


def world() -> Comm:
    """``dpmpi.COMM_WORLD``: a dpmpi.Comm wrapping MPI.COMM_WORLD (created once)."""
    global _WORLD
    if _WORLD is None:
        _WORLD = Comm(_PREDEFINED[2])  # (mpi4py's object, not the guarded one that dpmpi.init may put in its place)
    return _WORLD
