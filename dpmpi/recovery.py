"""``dpmpi.Recovery``: one recovery as a process of a ``dpmpi.Runtime`` saw it (``rt.history``),
with the times of its phases. A record only: the Runtime (``dpmpi.runtime``) makes them."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


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

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(steps_recomputed=self.steps_recomputed, detect_ms=round(self.detect_ms, 3),
                 repair_ms=round(self.repair_ms, 3),
                 restore_ms=round(self.restore_ms, 3), recompute_ms=round(self.recompute_ms, 3))
        return d
