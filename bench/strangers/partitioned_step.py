"""A stranger's program: MPI-4 partitioned point-to-point (``Psend_init``/``Precv_init``) around a
ring, made in every step: each of 4 partitions marked ready as it is computed, the receiver
polling ``Parrived``, then ``Waitall`` and ``Free``. Prints the digests on rank 0.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh partitioned_step.py 2000 8
Forty-ninth session: with a spare it hung without any failure (Open MPI 5.0.11's partitioned
communication runs over Idups of COMM_WORLD that idle spares never join); dpmpi now refuses
``Psend_init``/``Precv_init`` with NotImplementedError at once (docs/limitations.md). Without a
spare (``dpmpi-run -n 4``) it runs failure-free."""
import hashlib, json, sys
import dpmpi, numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.random.default_rng(r).random(4096)
rt = dpmpi.Runtime(comm, {"x": x})
P = 4
def step(k):
    out = np.empty(2048)
    got = np.empty(2048)
    s = comm.Psend_init(out, P, (r + 1) % n, 3)
    q = comm.Precv_init(got, P, (r - 1) % n, 3)
    MPI.Prequest.Startall([s, q])
    for p in range(P):
        out[p * 512:(p + 1) * 512] = x[p * 512:(p + 1) * 512] * (p + 1)
        s.Pready(p)
    seen = 0
    while seen < P:
        seen = sum(q.Parrived(p) for p in range(P))
    MPI.Request.Waitall([s, q])
    s.Free(); q.Free()
    t = comm.allreduce(float(got.sum()))
    with rt.update():
        x[:] = np.cos(x + t * 1e-5) * 0.5 + 0.5
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
