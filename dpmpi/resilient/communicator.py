"""``ResilientComm``: the active communicator that ``dpmpi.init`` returns, repairable in place."""
from __future__ import annotations

import sys
import time
from typing import Any, Callable

from mpi4py import MPI

from dpmpi import init_mark, interrupts
from dpmpi.comm import plain_method
from dpmpi.resilient import derived, holding, repair, spares
from dpmpi.resilient.derived import Tracked
from dpmpi.resilient.events import RepairEvent
from dpmpi.resilient.state import Role, State


_WORLD_ATTRS = frozenset(getattr(MPI, k) for k in ("TAG_UB", "HOST", "IO", "WTIME_IS_GLOBAL", "APPNUM")
                         if hasattr(MPI, k))


class ResilientComm(Tracked):
    """The active communicator returned by ``dpmpi.init``: repairable with ``Respawn()``."""

    def __init__(self, raw: MPI.Intracomm, state: State) -> None:
        super().__init__(raw)
        self._state = state

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            self._state.not_spare(name)
        return super().__getattr__(name)

    def Get_attr(self, keyval: int) -> Any:
        """mpi4py's; for MPI's predefined attributes of MPI_COMM_WORLD (``TAG_UB``, ``HOST``,
        ``IO``, ``WTIME_IS_GLOBAL``, ``APPNUM``), which Open MPI gives only to COMM_WORLD and its
        Dups, the world's value: this communicator is the program's world."""
        self._state.not_spare("Get_attr")
        value = plain_method(self, "Get_attr")(keyval)
        if value is None and keyval in _WORLD_ATTRS:
            value = MPI.COMM_WORLD.Get_attr(keyval)
        return value

    @property
    def role(self) -> Role:
        return self._state.role

    @property
    def process_id(self) -> int:
        """This process's identity in the job: its rank in MPI.COMM_WORLD, or, for a process
        started by a repair under policy "respawn", the id that repair gave it."""
        return self._state.process_id

    @property
    def nodes(self) -> int:
        """How many nodes (host names) the job's processes run on, spares included."""
        return len({node for node, _cpus in self._state.places.values()}) or 1

    @property
    def derived_tracked(self) -> int:
        """How many derived communicators dpmpi keeps the recipe of (the next repair remakes those
        still in use); unused ones are forgotten by each repair, and, without a failure, whenever
        the count has doubled (the same on every active rank)."""
        return holding.tracked(self._state)

    @property
    def active_size(self) -> int:
        """The number of active ranks (on a waiting spare too: the size it will join)."""
        return len(self._state.plan.actives)

    @interrupts.uninterrupted
    def Await(self) -> ResilientComm:
        """On a spare from ``dpmpi.init(wait=False)``: wait (without spinning) until this process
        takes a failed rank's place, then return this communicator, now active
        (``role is Role.RECOVERED``); if the job ends first, the process exits with status 0.
        On an active rank: returns at once."""
        if self._state.role is Role.SPARE:
            spares.wait(self._state)
        return self

    @property
    def repairs(self) -> int:
        """How many repairs this job went through (the same on every active rank)."""
        return self._state.plan.repairs

    @property
    def history(self) -> list[RepairEvent]:
        """The repairs this process took part in."""
        return list(self._state.history)

    def on_repair(self, callback: Callable[[RepairEvent], None]) -> None:
        """Call ``callback(event)`` on this process after each repair it takes part in."""
        if not callable(callback):
            raise TypeError(f"on_repair() takes a callable(event), got {type(callback).__name__}")
        self._state.callbacks.append(callback)

    @interrupts.uninterrupted
    def Respawn(self) -> ResilientComm:
        """Repair after a ProcFailedError/RevokedError: a spare takes each failed rank's place.

        Collective over the surviving active ranks (idle spares join by themselves). Returns
        this communicator, rebuilt in place: same rank numbers and size, unless spares ran out
        under policy "shrink". Derived communicators (Split, Dup, Create_group, Clone, Split_type,
        Create, Create_cart) that some rank
        still uses are rebuilt in place too; those freed or let go of everywhere are forgotten.
        Called while a failure is handled, it first clears the local variables of the frames that
        failure unwound (a communicator made in a failed step is then not in use) and drops dpmpi's
        own frames below the program's last one from the failure's traceback."""
        self._state.not_spare("Respawn")
        init_mark.announce_own_repair(sys._getframe(1))  # (the program's own call: dpmpi-run leaves its end to it)
        if self._state.repaired_for_program:  # (dpmpi.resilient.setup.overruled: repaired already)
            self._state.repaired_for_program = False
            return self
        holding.let_go_of_unwound()
        repair.run(self._state, time.time())
        return self
