"""A stranger's program (written from the README only): every 25 steps each rank runs helper
processes (``subprocess.run`` of Python one-liners, one of which exits with status 1, as a tool
that fails a check does) and keeps their output in its state; ``faulthandler`` is on, as in
many training scripts. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh subprocs.py 600 20"""
import dpmpi, sys, hashlib, json, subprocess, faulthandler
import numpy as np
from mpi4py import MPI
faulthandler.enable()
comm = dpmpi.init()
r = comm.Get_rank()
w = np.zeros(1000)
rt = dpmpi.Runtime(comm, {"w": w})


def step(k):
    extra = 0.0
    if k % 25 == 0:
        out = subprocess.run([sys.executable, "-c", f"print({k} * {r} % 7)"], capture_output=True, text=True)
        bad = subprocess.run([sys.executable, "-c", "import sys; sys.exit(1)"])
        extra = float(out.stdout.strip()) + bad.returncode
    g = np.sin(w[:1] + k + r + extra) * np.ones(1000)
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        w[...] = np.tanh(w + 1e-3 * g)


rt.run(step, int(sys.argv[1]))
d = comm.gather(hashlib.sha256(w.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
