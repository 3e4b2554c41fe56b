"""The two example workloads, shared by their dpmpi versions (train_mlp.py, jacobi.py) and their
plain mpi4py twins (train_mlp_mpi4py.py, jacobi_mpi4py.py): the same math, bit for bit.

- ``MLP``: data-parallel training of a 2-layer perceptron in numpy with Adam. Every step draws a
  batch from (seed, step, rank), computes gradients, averages them with one Allreduce, and updates
  the weights. The state is one flat parameter vector and Adam's two moment vectors.
- ``Jacobi``: a 2-D heat stencil on an N x N grid decomposed by rows, halos exchanged with
  Sendrecv; the state is the local block with its two halo rows.

Both are deterministic functions of (state, step, rank), so a run that recovers from a failure
ends with exactly the state of a failure-free run.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import sys
import signal
import time

# one BLAS thread per rank: MPI runs one rank per core, and extra BLAS threads fight over them
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

MiB = 1 << 20


def digest(state: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(np.ascontiguousarray(state[name]).tobytes())
    return h.hexdigest()[:16]


class MLP:
    """y = W2 tanh(W1 x + b1) + b2, trained on a fixed random teacher; Adam."""

    def __init__(self, state_mib: float, batch: int, seed: int = 1, d_in: int = 256, d_out: int = 16,
                 wait_ms: float = 0.0) -> None:
        # wait_ms: a GIL-released wait at the start of every step (time.sleep), standing in for work
        # on an accelerator that leaves the CPU idle; the math does not depend on it
        self.wait_s = wait_ms / 1e3
        # the state is params + two Adam moments: 3 x 8 bytes per parameter
        n_params = max(int(state_mib * MiB / 24), (d_in + d_out + 2) * 4)
        self.d_in, self.d_out, self.batch, self.seed = d_in, d_out, batch, seed
        self.hidden = max(4, (n_params - d_out) // (d_in + d_out + 1))
        h = self.hidden
        self.shapes = [("W1", (d_in, h)), ("b1", (h,)), ("W2", (h, d_out)), ("b2", (d_out,))]
        self.n_params = sum(int(np.prod(s)) for _n, s in self.shapes)
        teacher = np.random.default_rng([seed, 999])
        self.t1 = teacher.standard_normal((d_in, 32)) / np.sqrt(d_in)
        self.t2 = teacher.standard_normal((32, d_out))

    def initial_state(self) -> dict:
        rng = np.random.default_rng([self.seed, 0])
        params = np.empty(self.n_params)
        for name, view in self.views(params).items():
            fan_in = view.shape[0] if view.ndim == 2 else 1
            view[...] = rng.standard_normal(view.shape) / np.sqrt(fan_in) if view.ndim == 2 else 0.0
        return {"params": params, "m": np.zeros(self.n_params), "v": np.zeros(self.n_params)}

    def views(self, flat: np.ndarray) -> dict:
        out, off = {}, 0
        for name, shape in self.shapes:
            n = int(np.prod(shape))
            out[name] = flat[off:off + n].reshape(shape)
            off += n
        return out

    def batch_for(self, step: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, step, rank])
        x = rng.standard_normal((self.batch, self.d_in))
        y = np.tanh(x @ self.t1) @ self.t2
        return x, y

    def gradient(self, params: np.ndarray, step: int, rank: int) -> tuple[np.ndarray, float]:
        p = self.views(params)
        x, y = self.batch_for(step, rank)
        a = np.tanh(x @ p["W1"] + p["b1"])
        out = a @ p["W2"] + p["b2"]
        err = out - y
        loss = float(np.mean(err ** 2))
        d_out = 2.0 * err / err.size
        grad = np.empty_like(params)
        g = self.views(grad)
        g["W2"][...] = a.T @ d_out
        g["b2"][...] = d_out.sum(axis=0)
        da = (d_out @ p["W2"].T) * (1.0 - a * a)
        g["W1"][...] = x.T @ da
        g["b1"][...] = da.sum(axis=0)
        return grad, loss

    @staticmethod
    def adam(state: dict, grad: np.ndarray, step: int, lr: float = 1e-3) -> None:
        """m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g; p -= lr m^ / (sqrt(v^) + eps). Written
        as ufunc calls, not operators (the same operations in the same order, so bit for bit the
        same result): CPython runs a signal handler at a call, never between two operators. Inside
        dpmpi's ``rt.update()`` a failure is raised at the block's end in any case (docs/runtime.md)."""
        b1, b2, eps = 0.9, 0.999, 1e-8
        m, v, params = state["m"], state["v"], state["params"]
        tmp, tmp2 = np.empty_like(grad), np.empty_like(grad)
        np.multiply(m, b1, out=m)
        np.multiply(1 - b1, grad, out=tmp)
        np.add(m, tmp, out=m)
        np.multiply(v, b2, out=v)
        np.multiply(1 - b2, grad, out=tmp)
        np.multiply(tmp, grad, out=tmp)
        np.add(v, tmp, out=v)
        t = step + 1
        np.divide(m, 1 - b1 ** t, out=tmp2)
        np.multiply(lr, tmp2, out=tmp2)
        np.divide(v, 1 - b2 ** t, out=tmp)
        np.sqrt(tmp, out=tmp)
        np.add(tmp, eps, out=tmp)
        np.divide(tmp2, tmp, out=tmp2)
        np.subtract(params, tmp2, out=params)

    def step(self, comm, state: dict, step: int, update) -> float:
        """One training step on ``comm`` (a dpmpi or mpi4py communicator); ``update`` is a
        context manager factory around the state change (the dpmpi runtime's, or a no-op)."""
        rank, size = comm.Get_rank(), comm.Get_size()
        if self.wait_s > 0:
            time.sleep(self.wait_s)
        grad, loss = self.gradient(state["params"], step, rank)
        comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
        grad /= size
        with update():
            self.adam(state, grad, step)
        return loss


class Jacobi:
    """u_new = mean of the 4 neighbours on an N x N grid, top edge held at 1, others at 0."""

    def __init__(self, state_mib: float, size: int, n: int | None = None) -> None:
        # rows per rank so that the local block (with halos) is about state_mib
        self.n = n or 1024
        self.rows = max(2, int(state_mib * MiB / 8 / self.n) - 2)
        self.size = size

    def initial_state(self, rank: int) -> dict:
        u = np.zeros((self.rows + 2, self.n))
        u[1:-1, :] = np.random.default_rng([7, max(rank, 0)]).random((self.rows, self.n))  # every block evolves
        u[1:-1, 0] = u[1:-1, -1] = 0.0  # cold side edges
        if rank == 0:
            u[0, :] = 1.0  # the hot edge (a halo row that is never overwritten on rank 0)
        return {"u": u}

    def step(self, comm, state: dict, step: int, update) -> float:
        rank, size = comm.Get_rank(), comm.Get_size()
        u = state["u"]
        up = rank - 1 if rank > 0 else MPI.PROC_NULL
        down = rank + 1 if rank < size - 1 else MPI.PROC_NULL
        # halos: my first row goes up, my last row goes down
        comm.Sendrecv(u[1], dest=up, sendtag=1, recvbuf=u[-1], source=down, recvtag=1)
        comm.Sendrecv(u[-2], dest=down, sendtag=2, recvbuf=u[0], source=up, recvtag=2)
        # 0.25 * (up + down + left + right), as ufunc calls (the same operations in the same
        # order, so bit for bit the same): dpmpi's watcher can interrupt between calls, never
        # between operators (see MLP.adam)
        new = np.add(u[:-2, 1:-1], u[2:, 1:-1])
        np.add(new, u[1:-1, :-2], out=new)
        np.add(new, u[1:-1, 2:], out=new)
        np.multiply(0.25, new, out=new)
        delta = float(np.max(np.abs(np.subtract(new, u[1:-1, 1:-1])))) if new.size else 0.0
        with update():
            u[1:-1, 1:-1] = new
        return delta


def parse(doc: str, workload: str, twin: bool = False):
    """The examples' command line."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--state-mib", type=float, default=4.0, help="state per rank, MiB (default 4)")
    parser.add_argument("--progress", action="store_true", help="print a JSON line per step")
    if workload == "mlp":
        parser.add_argument("--batch", type=int, default=64, help="samples per rank per step (default 64)")
        parser.add_argument("--wait-ms", type=float, default=0.0,
                            help="a GIL-released wait per step, standing in for accelerator work (default 0)")
    else:
        parser.add_argument("--width", type=int, default=1024, help="grid columns (default 1024)")
    if twin:
        parser.add_argument("--checkpoint-dir", default=None, help="write checkpoints here, and resume from them")
        parser.add_argument("--checkpoint-every", type=int, default=0, help="checkpoint every K steps")
        parser.add_argument("--kill-rank", type=int, default=-1, help="SIGKILL this rank ...")
        parser.add_argument("--kill-step", type=int, default=-1, help="... at the start of this step (first life)")
    else:
        parser.add_argument("--snapshot-every", type=int, default=1)
        parser.add_argument("--replicas", type=int, default=1,
                            help="buddies that hold each rank's snapshot (default 1: survives any one failure)")
        parser.add_argument("--confirm-steps", action="store_true", default=None,
                            help="end each step with an agreement (default: when the job spans nodes)")
    args = parser.parse_args()
    if args.steps < 0 or args.state_mib <= 0:
        parser.error("--steps must be >= 0 and --state-mib > 0")
    if getattr(args, "wait_ms", 0.0) < 0:
        parser.error("--wait-ms must be >= 0")
    return args


def report(event: dict) -> None:
    """One JSON line on stdout (the runtime's events, and the examples' own), in one write: the
    failure watcher may interrupt a step between print()'s two writes (the text, then the newline),
    and the next line then ran on after it (seen: `make demo` failed to read one, 2 runs of 6)."""
    sys.stdout.write(json.dumps({"time": time.time(), **event}) + "\n")
    sys.stdout.flush()


def finish(rt, state: dict) -> None:
    report({"event": "final", "rank": rt.comm.Get_rank(), "wid": rt.comm.process_id, "step": rt.step,
            "digest": digest(state), "role": rt.comm.role.value, "recoveries": [r.as_dict() for r in rt.history],
            "confirmed": rt.confirmed})
    rt.close()


# ---- the plain mpi4py twins: disk checkpoints, and a restart that resumes from them ----------
def _checkpoint_path(directory: str, rank: int, step: int) -> str:
    return os.path.join(directory, f"ckpt.rank{rank:05d}.step{step:08d}.npz")


def _checkpoints(directory: str, rank: int) -> list[int]:
    paths = glob.glob(os.path.join(directory, f"ckpt.rank{rank:05d}.step*.npz"))
    return sorted(int(p[-12:-4]) for p in paths)


def save_checkpoint(directory: str, rank: int, step: int, state: dict) -> None:
    path = _checkpoint_path(directory, rank, step)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.savez(f, **state)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # a checkpoint is either whole or absent
    for old in _checkpoints(directory, rank)[:-2]:
        os.unlink(_checkpoint_path(directory, rank, old))


def load_checkpoint(comm, directory: str, state: dict) -> int:
    """The newest step every rank has a checkpoint of (0: none), loaded into ``state``."""
    rank = comm.Get_rank()
    mine = _checkpoints(directory, rank)
    common = set(mine)
    for theirs in comm.allgather(mine):
        common &= set(theirs)
    if not common:
        return 0
    step = max(common)
    with np.load(_checkpoint_path(directory, rank, step)) as saved:
        for name, array in state.items():
            array[...] = saved[name]
    return step


def plain_loop(comm, model, state: dict, args) -> None:
    """The twins' loop: the same steps as the dpmpi examples, with optional disk checkpoints."""
    rank = comm.Get_rank()
    start = 0
    if args.checkpoint_dir:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        start = load_checkpoint(comm, args.checkpoint_dir, state)
    report({"event": "resumed", "rank": rank, "step": start})
    for k in range(start, args.steps):
        if k == args.kill_step and rank == args.kill_rank and start < k:  # first life only
            report({"event": "kill", "rank": rank, "step": k})
            os.kill(os.getpid(), signal.SIGKILL)
        value = model.step(comm, state, k, contextlib.nullcontext)
        if args.progress:
            report({"event": "step", "rank": rank, "step": k, "value": value})
        if args.checkpoint_dir and args.checkpoint_every and (k + 1) % args.checkpoint_every == 0:
            save_checkpoint(args.checkpoint_dir, rank, k + 1, state)
    report({"event": "final", "rank": rank, "step": args.steps, "digest": digest(state)})
