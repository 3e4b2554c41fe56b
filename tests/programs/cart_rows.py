"""A 2 x 2 Cartesian grid made before the loop, with its row and column communicators from
``cart.Sub`` (bench/strangers/cart_sub.py: before the twenty-fifth session no repair rebuilt
them and the job hung at its first failure). Every step adds the row's and the column's sums of
the ranks' numbers to the state; prints each rank's state after N steps (failure-free: the row
sum and the column sum, N times), the handles' types, and whether ``Sub`` of a communicator that
is not Cartesian raises AttributeError as mpi4py's does."""
import json
import sys

import dpmpi
import numpy as np

n = int(sys.argv[1])
comm = dpmpi.init()
cart = comm.Create_cart([2, 2], periods=[False, False])
row, col = cart.Sub([False, True]), cart.Sub([True, False])
try:
    comm.Sub([True])
    refused = False
except AttributeError:
    refused = True
r = comm.Get_rank()
x = np.zeros(2, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    s = (row.allreduce(r), col.allreduce(r))
    with rt.update():
        x[:] += s


rt.run(step, n)
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "types": [type(c).__name__ for c in (row, col)],
                  "refused": refused, "role": comm.role.value, "recoveries": len(rt.history)}), flush=True)
