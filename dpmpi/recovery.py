"""``dpmpi.Recovery``: one recovery as a process of a ``dpmpi.Runtime`` saw it (``rt.history``),
with the times of its phases, and what a Runtime's records and events take from a repair. The
Runtime (``dpmpi.runtime``) makes them."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

# recoveries in a row that repaired nothing (no process had failed) in the same step: the step
# uses a communicator a repair replaced, and would fail the same way forever (stale_loop)
STALE_AFTER = 3


@dataclass
class Recovery:
    """One recovery as seen by this process (times are ``time.time()``)."""

    failed_step: int  # the newest step any survivor had started when the failure was caught
    restored_epoch: int  # the snapshot restored: execution resumed at this step
    error: str  # what this process caught ("" on a replacement)
    caught_at: float
    repaired_at: float
    restored_at: float
    resumed_at: float  # stepping again from the restored epoch
    caught_up_at: float = 0.0  # back at failed_step (work lost has been recomputed)
    repair: dict = field(default_factory=dict)  # the RepairEvent of this process
    restore: dict = field(default_factory=dict)  # the snapshot's restore breakdown
    attempts: int = 1  # repairs needed (a failure during recovery adds one)
    detected_by: str = ""  # "pidfd"/"ulfm": the failure watcher interrupted the step; "mpi": an MPI call
    noticed_at: float = 0.0  # when the watcher noticed the death (0: it did not)

    @property
    def steps_recomputed(self) -> int:
        """Whole steps whose results were lost and recomputed (the step in progress, partly
        done when the failure came, is not counted)."""
        return max(0, self.failed_step - self.restored_epoch)

    @property
    def detect_ms(self) -> float:
        """From the watcher's notice to the runtime catching it (0 when the watcher did not)."""
        return 1e3 * (self.caught_at - self.noticed_at) if self.noticed_at else 0.0

    @property
    def repair_ms(self) -> float:
        return 1e3 * (self.repaired_at - self.caught_at)

    @property
    def restore_ms(self) -> float:
        return 1e3 * (self.restored_at - self.repaired_at)

    @property
    def recompute_ms(self) -> float:
        return 1e3 * (self.caught_up_at - self.resumed_at) if self.caught_up_at else 0.0

    def caught_up(self, step: int, emit: Callable[..., None]) -> None:
        """The steps this recovery took the run back are done again: ``emit`` the "caught-up" event."""
        self.caught_up_at = time.time()
        emit("caught-up", step=step, recompute_ms=round(self.recompute_ms, 3), steps_recomputed=self.steps_recomputed)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(steps_recomputed=self.steps_recomputed, detect_ms=round(self.detect_ms, 3),
                 repair_ms=round(self.repair_ms, 3),
                 restore_ms=round(self.restore_ms, 3), recompute_ms=round(self.recompute_ms, 3))
        return d


def stale_loop(history: list[Recovery], n: int = STALE_AFTER) -> RuntimeError | None:
    """The error that ends the run when the last ``n`` recoveries were each caught in the same
    step (the newest step any survivor had started, agreed in the restore) and repaired nothing:
    no process had failed, yet the step failed on a revoked communicator. That is an mpi4py
    communicator that a repair replaced and dpmpi cannot rebuild (a ``pkl5.Intracomm`` or
    ``Dup`` made from ``comm.mpi`` before the run): run again, the step fails the same way,
    forever (seen: a livelock of repairs, 50 000 in 25 s). Every input is agreed by all ranks,
    so every rank decides the same. A replacement's own record (no error caught) does not count.
    None: go on."""
    last = history[-n:]
    if not (n > 0 and len(last) == n and all(r.error and not r.repair.get("failed") for r in last)
            and len({r.failed_step for r in last}) == 1):
        return None
    return RuntimeError(
        f"dpmpi: step {last[-1].failed_step} failed {n} times in a row on a revoked communicator while no "
        f"process had failed (each repair found nothing to replace): the step uses an mpi4py communicator "
        f"that a repair cannot rebuild, made before rt.run: a pkl5.Intracomm or a Dup made from comm.mpi, "
        f"or the .mpi of a derived communicator whose dpmpi handle was let go of. Make it inside the step, "
        f"or keep the dpmpi communicator (docs/communicators.md)")


_REPAIRED_FIELDS = ("repair", "failed", "filled", "size", "phases_ms", "total_ms")  # (the "repaired" event's)


def last_repair(comm: Any) -> dict:
    """The communicator's newest repair event as a dict ({} before any)."""
    return asdict(comm.history[-1]) if comm.history else {}


def repaired_fields(repair: dict) -> dict:
    """The fields of a Runtime's "repaired" event, from ``last_repair``."""
    return {k: repair.get(k) for k in _REPAIRED_FIELDS}


def in_prologue(comm: Any, caught: BaseException, emit: Callable[..., None]) -> Recovery:
    """A peer's failure in the program's prologue (a collective the prologue record watches, after
    a Runtime was made, before its first run): no snapshot exists, nothing is restored; after
    ``Respawn`` every rank makes the call again (``dpmpi.resilient.prologue``), the replacement once
    it has answered the calls before it from the survivors' record, and joins their first run.
    ``emit``: the Runtime's events. Returns its record."""
    caught_at = time.time()
    emit("failure", step=-1, error=type(caught).__name__, detected_by="mpi")
    comm.Respawn()  # (a failure during the repair is repaired there; one after it fails the call made again)
    repaired_at = time.time()
    repair = last_repair(comm)
    emit("repaired", **repaired_fields(repair))
    return Recovery(failed_step=-1, restored_epoch=-1, error=type(caught).__name__, caught_at=caught_at,
                    repaired_at=repaired_at, restored_at=repaired_at, resumed_at=repaired_at, repair=repair)
