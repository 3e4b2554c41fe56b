"""Where a one-rank ncclCommAbort / ncclCommDestroy spends its time. Prints one JSON line per
try: the call's ms after the communicator lived ``wait_ms`` since its init. NCCL 2.28's proxy
threads poll with a fixed 500 ms timeout and the abort joins them, so the prediction from its
sources is abort ~ 1000 - wait and destroy ~ 500 - wait (wait < 500). Run with
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,PROXY to see NCCL's own lines between the marks."""
import json
import time

import cupy
from cupy.cuda import nccl

x = cupy.ones(1 << 18, cupy.float32)
for how in ("abort", "destroy"):
    for wait_ms in (0, 250, 450):
        c = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
        s = cupy.cuda.Stream(non_blocking=True)
        c.allReduce(x.data.ptr, x.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s.ptr)
        e = cupy.cuda.Event()
        e.record(s)
        while not e.done:
            time.sleep(1e-5)
        time.sleep(wait_ms / 1e3)
        t = time.perf_counter()
        getattr(c, how)()
        print(json.dumps({"call": how, "wait_ms": wait_ms, "ms": round(1e3 * (time.perf_counter() - t), 3)}), flush=True)
