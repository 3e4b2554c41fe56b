"""One process's view of the job: its identity, the committed plan, its communicators. The data
only, one object per process (made by ``init`` or, in a spawned process, by ``spawned``); each
group of fields says which module changes it. Touched only by the main thread (the program's
calls, repairs, and the failure watcher's Python side; its C thread never reads it)."""
from __future__ import annotations

import array
import enum
from typing import Callable

from mpi4py import MPI

from dpmpi import watcher
from dpmpi.comm import Comm
from dpmpi.resilient.events import Listeners, RepairEvent
from dpmpi.resilient.plan import Place, Plan, Recipe


class Role(enum.Enum):
    INITIAL = "INITIAL"  # has not lived through a repair
    SURVIVOR = "SURVIVOR"  # lived through at least one repair
    RECOVERED = "RECOVERED"  # a spare that took a failed rank's place
    SPARE = "SPARE"  # a spare not called in yet (dpmpi.init(wait=False)): see ResilientComm.Await


class State:
    """Everything one process knows about the job's composition."""

    def __init__(self, world: MPI.Intracomm, plan: Plan, policy: str, poll: float, process_id: int) -> None:
        # -- the repair (repair.py) --
        self.world = world  # protocol communicator: every live process (actives and spares)
        self.plan = plan
        self.policy = policy
        self.process_id = process_id  # this process's identity: its world rank, or the id a repair gave it
        self.role = Role.INITIAL
        self.history: list[RepairEvent] = []
        self.callbacks: list[Callable[[RepairEvent], None]] = []
        # the ResilientComm the program holds (on a spare not called in: one wrapping COMM_SELF);
        # a repair rebuilds it in place
        self.active: Comm | None = None
        self.graveyard: list[MPI.Comm] = []  # replaced communicators, retired (never freed) after the next commit
        # objects with their own communicators and MPI threads (snapshots, the failure watcher,
        # NCCL communicators): told before a repair's first MPI call and after it commits
        self.listeners = Listeners()
        # process id -> (node, CPUs) of the place it holds: where it was bound at start, or the
        # place of the rank it replaced (a replacement takes that rank's CPUs when on the same node)
        self.places: dict[int, Place] = {}
        # -- derived communicators (derived.py) --
        self.recipes: list[Recipe] = []  # in creation order
        self.derived: list[Comm | MPI.Comm] = []  # MPI.COMM_NULL where this rank is not a member
        self.replay: list[Comm | MPI.Comm] = []  # prebuilt for a replacement, served in creation order
        # -- an idle spare (spares.py) --
        self.poll = poll  # seconds between two polls
        self.exit_flag = array.array("i", [1])
        self.exit_req: MPI.Request | None = None
        # -- respawn (spawn.py) --
        self.intercomms: list[MPI.Intercomm] = []  # to processes spawned by repairs
        # -- the failure watcher (decided by init, rearmed by each repair) --
        self.procs: dict[int, watcher.Ident] = {}  # process id -> where it runs
        self.watch_mode = watcher.Mode(False, False)  # decided at init, the same everywhere
        self.watcher: watcher.Watcher | None = None

    def not_spare(self, what: str) -> None:
        if self.role is Role.SPARE:
            raise RuntimeError(f"comm.{what}: this process is a spare that has not been called in yet; "
                               f"call comm.Await() first (dpmpi.Runtime.run does)")

    def logical(self) -> int:
        """This process's logical rank in the committed plan (-1: a spare)."""
        return self.plan.logical(self.process_id)
