"""A stranger's program (written from the README only): a model with many parameter arrays, as a deep
network has (300 of them, 64 B to 128 KiB each, ~14 MiB in all, float32 and float64), all given to
dpmpi.Runtime by name (`plain` as a second argument: no Runtime, the baseline). Each step computes a
"gradient" per array from the step number, Allreduces all of them as one flat buffer, and applies an
SGD step with momentum (a second array per parameter: 600 arrays of state). Prints the ranks'
digests and the run's seconds per step on rank 0.
    ACTIVE=1 bench/strangers/loop.sh many_arrays.py 200 10"""
import contextlib
import hashlib
import json
import sys
import time

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(7)  # the same shapes on every rank
sizes = rng.integers(16, 16 << 10, 300)
params = {f"layer{i}.w": rng.standard_normal(s).astype(np.float32 if i % 3 else np.float64)
          for i, s in enumerate(sizes)}
moms = {f"layer{i}.m": np.zeros_like(p) for i, p in enumerate(params.values())}
plain = len(sys.argv) > 2 and sys.argv[2] == "plain"
rt = None if plain else dpmpi.Runtime(comm, {**params, **moms}, snapshot_every=5)
flat = np.empty(sum(p.size for p in params.values()))


def step(k):
    at = 0
    for i, p in enumerate(params.values()):
        flat[at:at + p.size] = np.sin(p[: p.size] * 0.5 + (k + r + i) * 1e-3)
        at += p.size
    comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
    with contextlib.nullcontext() if plain else rt.update():
        at = 0
        for m, p in zip(moms.values(), params.values()):
            g = flat[at:at + p.size].astype(p.dtype)
            m[...] = 0.9 * m + g / n
            p[...] -= 0.01 * m
            at += p.size


t0 = time.perf_counter()
if plain:
    for k in range(steps):
        step(k)
else:
    rt.run(step, steps)
took = time.perf_counter() - t0
h = hashlib.sha256(b"".join(a.tobytes() for a in (*params.values(), *moms.values()))).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": hashlib.sha256("".join(d).encode()).hexdigest()[:16],
                      "recoveries": len(rt.history) if rt else 0, "s_per_step": round(took / steps, 5),
                      "restore_ms": [round(x.restore_ms, 1) for x in rt.history] if rt else []}), flush=True)
