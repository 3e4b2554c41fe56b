"""Graph communicators made once before a dpmpi.Runtime loop and used in every step through
neighbour collectives: a ring made with Create_dist_graph_adjacent (weighted: each rank hears its
left neighbour) and one made with Create_graph (each rank hears both neighbours). Before the
fifteenth session a repair rebuilt neither (a one-time warning), and the job hung at its first
failure. Prints each rank's state after N steps."""
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
left, right = (r - 1) % n, (r + 1) % n
dist = comm.Create_dist_graph_adjacent([left], [right], sourceweights=[1], destweights=[1])
graph = comm.Create_graph([2 * (i + 1) for i in range(n)], [e for i in range(n) for e in ((i - 1) % n, (i + 1) % n)])
x = np.zeros(2, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    heard = np.zeros(1, dtype=np.int64)
    dist.Neighbor_allgather(np.array([r * k], dtype=np.int64), heard)
    both = graph.neighbor_allgather(r)
    with rt.update():
        x[:] += (int(heard[0]), sum(both))


rt.run(step, steps)
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "recoveries": len(rt.history),
                  "role": comm.role.value, "types": [type(c).__name__ for c in (dist, graph)],
                  "neighbours": dist.Get_dist_neighbors()[:2]}), flush=True)
