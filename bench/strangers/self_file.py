"""A stranger's program: per-rank output through MPI-IO on ``COMM_SELF`` (no collective file
calls across ranks): every 10 steps each rank opens its own file, writes the step's new state at
the step's offset (``Write_at``), and closes it, before ``rt.update()`` (``AFTER=1``: after it).
Prints the digests on rank 0 (the state's / the file's).
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh self_file.py 2500 8
Forty-ninth session: written after rt.update(), 1 of 8 killed runs ended with a replacement's
file that differed from the failure-free run's (its state did not): the victim died between
its update and its write, the restored epoch already held that step, so the step (and its
write) was not redone (docs/runtime.md)."""
import hashlib, json, os, sys, tempfile
import dpmpi, numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
tag = os.environ.get("PMIX_NAMESPACE", "x").replace("/", "_")
path = os.path.join(tempfile.gettempdir(), f"dpmpi_self_file_{tag}_{r}.bin")
x = np.random.default_rng(r).random(256)
rt = dpmpi.Runtime(comm, {"x": x})
def write(k, values):
    f = MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)
    try:
        f.Write_at((k // 10) * values.nbytes, values)
    finally:
        f.Close()
def step(k):
    s = comm.allreduce(float(x.sum()))
    new = np.sin(x + 1e-4 * s) * 0.5 + 0.5
    if k % 10 == 9 and os.environ.get("AFTER") is None:
        write(k, new)  # (before rt.update(): a death before the snapshot redoes the step, the write too)
    with rt.update():
        x[:] = new
    if k % 10 == 9 and os.environ.get("AFTER") is not None:
        write(k, x)  # (after it: the state may be committed already, and the step not redone)
rt.run(step, steps)
with open(path, "rb") as fh:
    data = fh.read()
os.unlink(path)
h = hashlib.sha256(x.tobytes()).hexdigest()[:8] + "/" + hashlib.sha256(data).hexdigest()[:8]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
