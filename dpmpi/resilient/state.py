"""One process's view of the job: its identity, the committed plan, its communicators. The data
only, one object per process (made by ``init`` or, in a spawned process, by ``spawned``); each
group of fields says which module changes it. Touched only by the main thread (the program's
calls, repairs, and the failure watcher's Python side; its C thread never reads it)."""
from __future__ import annotations

import array
import enum
import weakref
from typing import Callable

from mpi4py import MPI

from dpmpi import watcher
from dpmpi.comm import Comm
from dpmpi.resilient.events import Listeners, RepairEvent
from dpmpi.resilient.plan import Place, Plan, Recipe
from dpmpi.resilient.prologue import Prologue


# derived communicators made before their first compaction (holding.compact), and added to each
# later bound (twice the number kept)
COMPACT_MIN = 64


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
        # one entry per derived communicator the active ranks made, in creation order (the same
        # on every active rank); a repair keeps those still in use somewhere (derived.rebuild)
        self.recipes: list[Recipe] = []
        # this process's MPI communicator of each (the object its handle wraps; freed by the
        # program: MPI.COMM_NULL), None where this rank is not a member: kept to revoke it in a repair
        self.derived: list[MPI.Comm | None] = []
        # the program's handle of each, held weakly (a handle the program let go of, or freed, is
        # not in use any more), None where this rank is not a member
        self.handles: list[weakref.ref[Comm] | None] = []
        # on a replacement: (index, handle) of those the repair made, handed out in creation order
        self.replay: list[tuple[int, Comm | MPI.Comm]] = []
        self.live: list[int] = []  # the places of those not forgotten (holding.compact), ascending
        self.unmade: set[int] = set()  # places whose creation failed here (until the next repair)
        # places of those made outside dpmpi.Runtime's runs (the prologue, between runs): kept for
        # replacements, which make them again, even once the program freed them (holding.pin_if_outside_runs)
        self.pinned: set[int] = set()
        # -- the prologue (prologue.py): the collectives before the first snapshot, for a replacement --
        self.prologue = Prologue()
        # the program's next Respawn returns at once: the repair it is for was made (setup.overruled)
        self.repaired_for_program = False
        self.compact_at = COMPACT_MIN  # forget the unused ones when len(live) reaches this
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
