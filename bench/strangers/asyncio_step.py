"""A stranger's program (written from the README only): each step fetches its two inputs with
``asyncio.run`` (two coroutines that wait 2 ms each, as an async data client would), then
reduces and updates. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh asyncio_step.py 800 20"""
import dpmpi, sys, hashlib, json, asyncio
import numpy as np
from mpi4py import MPI
comm = dpmpi.init()
r = comm.Get_rank()
w = np.zeros(1024)
rt = dpmpi.Runtime(comm, {"w": w})


async def fetch(k, part):
    await asyncio.sleep(0.002)
    return np.sin(np.arange(512) * 0.01 + k + r + part)


async def inputs(k):
    return await asyncio.gather(fetch(k, 0), fetch(k, 1))


def step(k):
    a, b = asyncio.run(inputs(k))
    g = np.concatenate([a, b]) + 0.1 * w
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        w[...] = np.tanh(w - 1e-3 * g)


rt.run(step, int(sys.argv[1]))
d = comm.gather(hashlib.sha256(w.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
