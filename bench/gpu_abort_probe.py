"""Where a one-rank ncclCommAbort spends its time (run with NCCL_DEBUG=INFO): prints timestamps
around init, a collective and abort, so NCCL's own lines fall between them."""
import sys
import time

import cupy
from cupy.cuda import nccl

t0 = time.perf_counter()


def mark(what):
    print(f"@@ {1e3 * (time.perf_counter() - t0):9.3f} ms {what}", file=sys.stderr, flush=True)


for r in range(2):
    mark(f"init {r}")
    c = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    x = cupy.ones(1 << 18, cupy.float32)
    s = cupy.cuda.Stream(non_blocking=True)
    mark("allreduce")
    c.allReduce(x.data.ptr, x.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s.ptr)
    e = cupy.cuda.Event()
    e.record(s)
    while not e.done:
        time.sleep(1e-5)
    mark("abort")
    c.abort()
    mark("aborted")
