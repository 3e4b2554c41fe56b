"""A stranger's program that survives the loss of the whole job (a node crash ends an Open MPI 5
job: docs/cluster.md) by running again: in-memory snapshots for single deaths, ``persist_dir``
every 10 steps, and at start ``Snapshot.load`` when the directory holds files, going on at the
step they hold (``dpmpi.epochs.step_of``, as cluster.md says). The global step is kept in the
state, so that a second restart resumes right too. The same Jacobi-like update as
persist_step.py. Prints the digests and the step it started at on rank 0.
    DIR=/tmp/rs; rm -rf $DIR; dpmpi-run -n 5 --spares 1 -- python restart_step.py 600 $DIR  (kill
    the whole job midway, run it again: the digests equal a run never killed)"""
import hashlib, json, os, sys
import dpmpi, numpy as np
steps, where = int(sys.argv[1]), sys.argv[2]
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
os.makedirs(where, exist_ok=True)
u = np.cos(np.arange(4096) * (r + 1) / 4096.0)
v = np.zeros(4096)
done = np.zeros(1, dtype=np.int64)  # the global steps done, across restarts
state = {"u": u, "v": v, "done": done}
if any(name.endswith(".dpmpi") for name in os.listdir(where)):
    dpmpi.Snapshot.load(comm, state, where)
start = int(done[0])
rt = dpmpi.Runtime(comm, state, persist_dir=where, persist_every=10)
def step(k):
    mean = comm.allreduce(float(u.mean())) / n  # (a global term: every rank's state matters)
    with rt.update():
        v[:] = 0.9 * v + 0.1 * (np.roll(u, 1) - u)
        u[:] = u + 0.2 * v + 1e-3 * (mean - u) + 1e-6 * (start + k)
        done[0] = start + k + 1
rt.run(step, steps - start)
h = hashlib.sha256(u.tobytes() + v.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "started_at": start, "recoveries": len(rt.history)}), flush=True)
