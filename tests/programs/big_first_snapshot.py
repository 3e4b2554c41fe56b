"""A Runtime over a large state that numpy allocates lazily (``np.zeros``): the program's own code
between dpmpi calls is quick, while dpmpi's work on the state (its snapshot memory's allocation
and pre-faulting, the first snapshot's copy and replication) takes seconds. Prints one JSON
line per rank: its rank and the state's first value. Arguments: MIB per rank, steps (5)."""
import json
import sys

import dpmpi
import numpy as np

comm = dpmpi.init()
w = np.zeros(int(sys.argv[1]) * 131072)
rt = dpmpi.Runtime(comm, {"w": w})


def step(k):
    s = comm.allreduce(k)
    with rt.update():
        w[:8] += s


rt.run(step, int(sys.argv[2]) if len(sys.argv) > 2 else 5)
print(json.dumps({"rank": comm.Get_rank(), "w0": float(w[0])}), flush=True)
