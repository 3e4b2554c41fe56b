"""Failure-watcher test program: a dpmpi.Runtime whose steps are long.

Each step: a compute phase (--work sleep: a GIL-released wait standing for a device; numpy: a
loop of small numpy operations), one Allreduce of an integer contribution, then an update phase
that is long too: the state changes chunk by chunk with more work between chunks, so a failure
there is raised at the update's end (the survivors' state holds the step's update, which the
runtime restores away). Integer state: the final
state is exact whatever the reduction order, so the test computes it itself (``expected``).
The work of a step is cut in 8 ticks (4 before the Allreduce, 4 in the update). Fault points:
"step" (start of a step), "tick" (before each eighth of the step's work), "chunk" (each chunk
of the update). Also used by dpmpi-bench watcher. One JSON line per event on stdout.
"""
import argparse
import hashlib
import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import dpmpi  # noqa: E402
from dpmpi import watcher  # noqa: E402
from mpi4py import MPI  # noqa: E402

N = 4096
CHUNKS = 4
TICKS = 8  # per step: 4 before the Allreduce, 4 in the update (one per chunk)


def contribution(k: int, rank: int) -> np.ndarray:
    return np.arange(N, dtype=np.int64) * (k + 1) + 7 * rank + k * k


def expected(steps: int, size: int) -> str:
    x = np.zeros(N, dtype=np.int64)
    for k in range(steps):
        x += sum(contribution(k, r) for r in range(size))
    return digest(x)


def digest(x: np.ndarray) -> str:
    return hashlib.sha256(x.tobytes()).hexdigest()[:16]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--work", choices=["sleep", "numpy"], default="sleep")
    p.add_argument("--seconds", type=float, default=2.0, help="sleep per step (half before the Allreduce)")
    p.add_argument("--iters", type=int, default=4000, help="numpy loop iterations per step")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--no-interrupt", action="store_true")
    args = p.parse_args()

    comm = dpmpi.init(wait=False)
    x = np.zeros(N, dtype=np.int64)
    rt = dpmpi.Runtime(comm, {"x": x}, replicas=args.replicas, interrupt=not args.no_interrupt)

    def out(event, **fields):
        print(json.dumps({"event": event, "rank": comm.Get_rank(), "wid": comm.process_id, "time": time.time(),
                          **fields}), flush=True)

    rt.on_event(lambda e: out(e["event"], **{k: v for k, v in e.items() if k not in ("event", "rank", "time")}))
    a = np.linspace(0.0, 1.0, 2048)

    def work(fraction: float) -> None:
        nonlocal a
        if args.work == "sleep":
            time.sleep(args.seconds * fraction)
        else:
            for _ in range(int(args.iters * fraction)):
                a = np.sin(a) * 0.5 + 0.25

    def step(k: int) -> None:
        t0 = time.time()
        dpmpi.faults.point("step")
        for _ in range(TICKS - CHUNKS):
            dpmpi.faults.point("tick")
            work(1 / TICKS)
        g = contribution(k, comm.Get_rank())
        comm.Allreduce(MPI.IN_PLACE, g)
        with rt.update():
            for c in range(CHUNKS):
                dpmpi.faults.point("chunk")
                dpmpi.faults.point("tick")
                x[c::CHUNKS] += g[c::CHUNKS]
                work(1 / TICKS)
        out("step", step=k, t0=t0, t1=time.time())

    rt.run(step, args.steps)
    w = watcher.current()
    info = w.info() if w is not None else {}
    if info:
        info["thread_cpu_s"] = watcher.thread_cpu_seconds(info["tid"])
    out("final", step=rt.step, digest=digest(x), role=comm.role.value, recoveries=[r.as_dict() for r in rt.history],
        watch=info, process_cpu_s=time.process_time())
    sys.stdout.flush()


if __name__ == "__main__":
    main()
