"""Attach a repair listener to a dpmpi communicator (the contract: ``repair_begins()`` on the
main thread before a repair's first MPI call, ``repair_done(event)`` after it committed).

ADAPTER: until the contract (``comm.add_repair_listener``, commit "Repair listeners") is in the
communicator, this module adapts the older hooks in this one place: ``repair_begins`` through
the repair's interrupt set (objects with ``_interrupt()``, called at the start of each attempt)
and ``repair_done`` through ``comm.on_repair``. Remove the fallback once the contract is in main.
"""
from __future__ import annotations

import weakref
from types import SimpleNamespace
from typing import Any


class _Begins:
    """Stands in the repair's interrupt set for a listener (held weakly there and here)."""

    def __init__(self, listener: Any) -> None:
        self.ref = weakref.ref(listener)

    def _interrupt(self) -> None:
        listener = self.ref()
        if listener is not None:
            listener.repair_begins()


def _event(old: Any) -> Any:
    """The older RepairEvent with the contract's names (repair, process_id)."""
    return SimpleNamespace(repair=old.epoch, rank=old.rank, process_id=old.wid, role=old.role, failed=old.failed,
                           filled=old.filled, size=old.size)


def attach(comm: Any, listener: Any) -> Any:
    """Register ``listener`` on ``comm`` (a ``dpmpi.ResilientComm``); returns a token the
    listener must keep (the communicator holds listeners weakly). Plain communicators, which
    are never repaired, get no listener (returns None)."""
    if hasattr(comm, "add_repair_listener"):
        comm.add_repair_listener(listener)
        return listener
    state = getattr(comm, "_state", None)  # ADAPTER (see the module): the older hooks
    if state is None or not hasattr(comm, "on_repair"):
        return None
    begins = _Begins(listener)
    state.interrupt.add(begins)
    ref = weakref.ref(listener)

    def done(old_event: Any) -> None:
        target = ref()
        if target is not None:
            target.repair_done(_event(old_event))

    comm.on_repair(done)
    return begins


def detach(comm: Any, listener: Any, token: Any) -> None:
    if token is None:
        return
    if hasattr(comm, "remove_repair_listener"):
        comm.remove_repair_listener(listener)
    else:  # ADAPTER: the interrupt set forgets it; on_repair's callback finds the listener gone
        comm._state.interrupt.discard(token)
