"""What a restore's transfer could cost at best on this node: 64 MiB moved between two ranks by
plain MPI (one message, and 4 MiB pieces as dpmpi's restore sends them), and read by the receiver
out of the sender's memory as dpmpi's restore does on one node (``Engine.pull``: process_vm_readv
and a checksum per 1 MiB unit, by 1 copy thread and the waiting thread, then by 3 + 1), against
one process's own memcpy of the same bytes (numpy, into a written array). While the receiver
reads, the sender waits without spinning (as a holder does in the restore's last collective).
Medians of 7 repetitions, as JSON.

    cd /tmp && REPO/.venv/bin/mpirun -n 2 [--bind-to core|none] REPO/.venv/bin/python REPO/bench/transfer_probe.py [MIB]
"""
import json
import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

from dpmpi.snapshot.native import Engine

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
mib = float(sys.argv[1]) if len(sys.argv) > 1 else 64.0
n = int(mib * 2**20)
src = np.full(n, rank + 1, np.uint8)
dst = np.zeros(n, np.uint8)
dst[:] = 7  # written once: no page faults in the timed copies
piece = 4 << 20
reps = 7


def timed(fn) -> float:
    out = []
    for _ in range(reps):
        comm.Barrier()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return round(1e3 * statistics.median(out), 3)


def one_message() -> None:
    if rank == 0:
        comm.Send([src, MPI.BYTE], 1, 1)
    else:
        comm.Recv([dst, MPI.BYTE], 0, 1)


def pieces() -> None:
    if rank == 0:
        reqs = [comm.Isend([src[o:o + piece], MPI.BYTE], 1, 2) for o in range(0, n, piece)]
    else:
        reqs = [comm.Irecv([dst[o:o + piece], MPI.BYTE], 0, 2) for o in range(0, n, piece)]
    MPI.Request.Waitall(reqs)


def sleepy_barrier() -> None:
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(50e-6)


where = comm.bcast((os.getpid(), src.ctypes.data) if rank == 0 else None, root=0)
engines = {k: Engine(k) for k in (1, 3)} if rank == 1 else {}


def read(threads: int):
    def go() -> None:
        if rank == 1:
            rc, _digest = engines[threads].pull(where[0], [memoryview(dst)], [where[1]])
            assert rc == 0, rc
        sleepy_barrier()
    return go


res = {"mib": mib, "read_1plus1_threads_ms": timed(read(1)), "read_3plus1_threads_ms": timed(read(3)),
       "one_message_ms": timed(one_message), "pieces_4MiB_ms": timed(pieces),
       "memcpy_ms": timed(lambda: np.copyto(dst, src))}
allres = comm.gather(res)
if rank == 0:
    recv = allres[1]
    print(json.dumps({"probe": "transfer", "receiver": recv,
                      "GBps": {k[:-3]: round(n / v / 1e6, 2) for k, v in recv.items() if k.endswith("_ms")}}))
