"""A stranger's program: a 1-D diffusion whose halo exchange is a neighbour collective on a
distributed-graph communicator made once (Create_dist_graph_adjacent: each rank's left and right
neighbours, periodic), under dpmpi.Runtime with a snapshot every step; rank 0 prints the ranks'
digests.
    ACTIVE=1 bench/strangers/loop.sh graph_halo.py 3000 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
nbrs = [(r - 1) % n, (r + 1) % n]
halo = comm.Create_dist_graph_adjacent(nbrs, nbrs)
u = np.random.default_rng(7 + r).random(4096)
rt = dpmpi.Runtime(comm, {"u": u})


def step(k):
    edges = np.array([u[0], u[-1]])  # to the left neighbour: my first cell; to the right: my last
    got = np.empty(2)
    halo.Neighbor_alltoall(edges, got)  # got[0] from the left (its last cell), got[1] from the right
    padded = np.concatenate(([got[0]], u, [got[1]]))
    with rt.update():
        u[:] = padded[1:-1] + 0.2 * (padded[:-2] - 2 * padded[1:-1] + padded[2:])


rt.run(step, steps)
d = comm.gather(hashlib.sha256(u.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
