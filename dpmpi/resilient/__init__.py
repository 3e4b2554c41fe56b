"""Hot swap: spare ranks take a failed rank's place, so the program keeps its rank numbers.

``dpmpi.init(spares=S)`` (collective over COMM_WORLD) makes the last S world ranks spares (on
several nodes, S ranks spread over the nodes: ``dpmpi.placement``) and returns the *active* communicator to the others. Each process has a fixed identity, its
*process id* (its world rank, or the id a repair under policy "respawn" gave it); each active
process also has a *logical rank*, its rank in the active communicator. ``comm.Respawn()``
(collective over the surviving actives, and the idle spares, which join by themselves) rebuilds
the active communicator with a spare in each failed logical rank's place.

The protocol, run by every live process of the job:

1. revoke the derived communicators, the active communicator and the job-wide protocol
   communicator ("world"), so that every active rank leaves what it was doing (even a
   collective on a derived communicator that the dead process was not part of) and every idle
   spare wakes up;
2. shrink the protocol communicator (actives and spares; the dead drop out);
3. check in the shrunk communicator's warm-up that every process holds the same plan (else
   allgather what each process knows: identity, the committed plan, derived-communicator
   recipes) and compute the new plan, a pure function of that (``plan_repair``): failed
   logical ranks are filled from the idle spares in order; when there are too few, the
   ``on_depleted`` policy decides ("shrink": continue with fewer, renumbered ranks;
   "abort": ``SparesDepletedError``);
4. split the new active communicator (key = logical rank) and rebuild the derived ones;
5. agree (the commit point). Any failure before the commit restarts at 1 with the newest
   protocol communicator: a failure during repair (an active rank, an idle spare, or the spare
   being swapped in) is simply one more dead process for the next attempt.

An idle spare waits without spinning: it polls (with sleeps) a receive from itself on the
protocol communicator, which only a revoke completes, and its exit agreement on COMM_WORLD,
which completes when every active rank has ended; then it exits with status 0 without running
user code.

The modules, from the bottom up (each imports only those above it in this list):

- ``plan``: the pure decisions (``Plan``, ``plan_repair``, the newest view of a repair,
  derived-communicator ``Recipe``s and their renumbering, which CPUs a replacement takes);
- ``settings``: the environment variables; ``events``: ``RepairEvent``, the repair listeners
  (the events log is ``dpmpi.eventlog``); ``affinity``: this process's node and CPUs;
- ``state``: one process's view of the job (the data; ``Role``);
- ``derived``: derived communicators, made and rebuilt; ``watchdog``: the repair
  deadline; ``spawn``: policy "respawn", the parents' side;
- ``repair``: the attempts and the commit; ``spares``: an idle spare's wait and exit;
- ``communicator``: ``ResilientComm``; ``spawned``: a spawned process joins;
  ``start``: ``dpmpi.init``.
"""
from __future__ import annotations

from dpmpi.resilient.communicator import ResilientComm
from dpmpi.eventlog import ENV_EVENTS, log_event
from dpmpi.resilient.events import Listeners, RepairEvent, SparesDepletedWarning
from dpmpi.resilient.plan import POLICIES, Filled, Plan, SparesDepletedError, plan_repair
from dpmpi.resilient.settings import (
    ENV_ON_DEPLETED,
    ENV_REPAIR_TIMEOUT,
    ENV_SPARE_POLL,
    ENV_SPARES,
    ENV_SPAWNED,
)
from dpmpi.resilient.start import current, init
from dpmpi.resilient.state import Role

__all__ = [
    "init", "current", "Role", "ResilientComm", "RepairEvent", "Listeners", "log_event", "Filled", "Plan",
    "plan_repair", "SparesDepletedError", "SparesDepletedWarning", "POLICIES", "ENV_SPARES",
    "ENV_ON_DEPLETED", "ENV_EVENTS", "ENV_SPARE_POLL", "ENV_REPAIR_TIMEOUT", "ENV_SPAWNED",
]
