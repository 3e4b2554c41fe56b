"""What a repair tells: its event (``RepairEvent``, also written to the events log, see
``dpmpi.eventlog``) and the repair listeners of a process."""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from dpmpi.resilient.plan import Filled


class SparesDepletedWarning(UserWarning):
    """Not enough spares: the job continues with fewer ranks (policy "shrink")."""


@dataclass
class RepairEvent:
    """One repair as seen by one process."""

    repair: int  # how many repairs the job went through, this one included
    rank: int  # logical rank after the repair (-1: this process stays a spare)
    process_id: int  # this process's identity (ResilientComm.process_id)
    role: str
    failed: list[int]  # logical ranks (before the repair) that failed
    filled: dict[int, Filled]  # failed logical rank -> how its place was filled
    renumber: dict[int, int]  # logical rank before -> after, for every rank that keeps a place
    size: int  # size of the active communicator after the repair
    attempts: int
    detected_at: float  # time.time() when this process saw the failure (or joined)
    phases_ms: dict[str, float] = field(default_factory=dict)  # revoke, shrink, agree, reassign, rebuild
    total_ms: float = 0.0
    repaired_at: float = 0.0  # time.time() when this process held the usable new communicator
    # how the committed attempt learned the live processes and the base plan: "quick" (every
    # process held the same plan) or "allgather" (docs/design.md, the repair protocol)
    reassigned: str = ""
    # the derived communicators the repair remade (their operation, in creation order) and which
    # of them this process still held when it began (positions in ``rebuilt``); empty on a spare.
    # One a step makes and frees has no business here: some rank still held it (docs/spares.md)
    rebuilt: list[str] = field(default_factory=list)
    held_here: list[int] = field(default_factory=list)


class Listeners:
    """The repair listeners of one process, weakly held, in registration order. Owned by the
    process's state; touched only by the main thread (registration and repairs)."""

    def __init__(self) -> None:
        self._refs: list[weakref.ref] = []

    def add(self, listener: Any) -> None:
        if not any(obj is listener for obj in self.snapshot()):
            self._refs.append(weakref.ref(listener))

    def discard(self, listener: Any) -> None:
        self._refs = [r for r in self._refs if r() is not None and r() is not listener]

    def snapshot(self) -> list[Any]:
        """The live listeners now (a repair iterates over this copy)."""
        live = [r() for r in self._refs]
        self._refs = [r for r, obj in zip(self._refs, live) if obj is not None]
        return [obj for obj in live if obj is not None]
