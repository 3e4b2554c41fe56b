"""A stranger's program (written from the README only): each step reduces two halves of the
gradient at once, one on the main thread over ``comm`` and one on a helper thread over a
communicator split by parity (made once), then joins the thread and updates. Prints the ranks'
digests on rank 0.
    bench/strangers/loop.sh thread_comm.py 3000 20"""
import dpmpi, sys, hashlib, json, threading
import numpy as np
from mpi4py import MPI
comm = dpmpi.init()
r = comm.Get_rank()
pair = comm.Split(r % 2, r)
w = np.zeros(2048)
rt = dpmpi.Runtime(comm, {"w": w})


def step(k):
    g = np.sin(w + 0.01 * (k + r))
    h = np.cos(w - 0.01 * (k - r))
    errors = []

    def helper():
        try:
            pair.Allreduce(MPI.IN_PLACE, h)
        except Exception as exc:    # (a peer's failure: the step's own join re-raises it)
            errors.append(exc)

    t = threading.Thread(target=helper)
    t.start()
    try:
        comm.Allreduce(MPI.IN_PLACE, g)
    finally:
        t.join()
    if errors:
        raise errors[0]
    with rt.update():
        w[...] = np.tanh(w + 1e-3 * g + 1e-3 * h)


rt.run(step, int(sys.argv[1]))
d = comm.gather(hashlib.sha256(w.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
