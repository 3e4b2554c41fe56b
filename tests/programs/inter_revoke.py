"""Revoke a fresh intercommunicator made through dpmpi (issue 10): ``inter_revoke.py HOW WHO``.
HOW: create (Create_intercomm), dup, split, create-group (Create with a group), merge (an
intracommunicator); WHO: "all" (every rank revokes, as mpi4py's TestULFMInter.testRevoke) or a
rank. Without a warm-up, Open MPI 5.0.11 segfaults ranks still inside the creating call when the
revoke reaches them. Prints one JSON line per rank."""
import json
import sys

import dpmpi
from mpi4py import MPI

how, who = sys.argv[1], sys.argv[2]
world = dpmpi.COMM_WORLD
size, rank = world.Get_size(), world.Get_rank()
color = int(rank >= size // 2)
local = world.Split(color, rank)
inter = local.Create_intercomm(0, world, size // 2 if color == 0 else 0, 7)
made = {
    "create": lambda: inter,
    "dup": lambda: inter.Dup(),
    "split": lambda: inter.Split(0, rank),
    "create-group": lambda: inter.Create(inter.Get_group()),
    "merge": lambda: inter.Merge(high=bool(color)),
}[how]()
if who == "all" or int(who) == rank:
    made.Revoke()
try:
    made.Barrier()
    error = None
except dpmpi.RevokedError as exc:
    error = exc.Get_error_class()
print(json.dumps({"rank": rank, "inter": made.Is_inter(), "type": type(made).__name__, "revoked": made.Is_revoked(),
                  "barrier_error": error}), flush=True)
