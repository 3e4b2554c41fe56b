"""The measuring parts of ``dpmpi-bench snapshot`` (not a user example). ``--local SIZES``: one
process, stage+commit against numpy.copyto. Otherwise run by both ranks of a 2-rank dpmpi-run job:
replication against a plain Sendrecv of the same bytes, and a numpy compute loop on
rank 0 alone and while snapshots are staged, committed and replicated. Rank 0 writes the JSON.

    python -m dpmpi.bench.snapshot_rank OUT.json --local 1,16,64 --reps 5
    dpmpi-run -n 2 -- python -m dpmpi.bench.snapshot_rank OUT.json --repl-sizes 16,64 --reps 5
"""
import argparse
import json
import statistics
import time

import numpy as np

MiB = 1 << 20


def median(xs):
    return statistics.median(xs) if xs else None


def local_part(sizes, reps):
    import dpmpi
    from mpi4py import MPI

    rows = []
    for mib in sizes:
        n = mib * MiB
        src = np.random.default_rng(mib).integers(0, 255, n, dtype=np.uint8)
        dst = np.empty_like(src)
        np.copyto(dst, src)  # fault the destination in, as the snapshot slots are
        row = {"mib": mib}
        for threads in (1, 2):
            snap = dpmpi.Snapshot(MPI.COMM_SELF, {"x": src}, replicas=0, threads=threads)
            snap.stage()
            snap.commit(0)  # warm
            base, mine, restore = [], [], []
            epoch = 1
            for _ in range(reps):
                t = time.perf_counter()
                np.copyto(dst, src)
                base.append(time.perf_counter() - t)
                t = time.perf_counter()
                snap.stage()
                snap.commit(epoch, durable=False)  # the local copy only
                mine.append(time.perf_counter() - t)
                epoch += 1
                if threads == 1:
                    t = time.perf_counter()
                    snap.restore()
                    restore.append(time.perf_counter() - t)
            snap.close()
            tb, tm = median(base), median(mine)
            row[f"threads{threads}"] = {"copyto_gbs": round(n / tb / 1e9, 2),
                                        "stage_commit_gbs": round(n / tm / 1e9, 2),
                                        "ratio_vs_copyto": round(tb / tm, 3)}
            if restore:
                row["restore_ms"] = round(1e3 * median(restore), 3)
        row["two_vs_one_thread"] = round(row["threads2"]["stage_commit_gbs"] / row["threads1"]["stage_commit_gbs"], 3)
        rows.append(row)
        print(f"{mib:5d} MiB  copyto {row['threads1']['copyto_gbs']:6.2f} GB/s | stage+commit 1 thread "
              f"{row['threads1']['stage_commit_gbs']:6.2f} GB/s ({row['threads1']['ratio_vs_copyto']:.2f}x) | "
              f"2 threads {row['threads2']['stage_commit_gbs']:6.2f} GB/s ({row['two_vs_one_thread']:.2f}x one) | "
              f"restore {row.get('restore_ms')} ms", flush=True)
        del src, dst
    return rows


def mpi_part(sizes, reps, out_path, compute_mib):
    """Run by both ranks of a 2-rank dpmpi-run job."""
    import dpmpi

    comm = dpmpi.COMM_WORLD
    raw = comm.mpi
    rank = comm.Get_rank()
    other = 1 - rank
    result = {"replication": [], "overlap": {}}
    for mib in sizes:
        n = mib * MiB
        a = np.random.default_rng(rank).integers(0, 255, n, dtype=np.uint8)
        b = np.empty_like(a)
        snap = dpmpi.Snapshot(comm, {"a": a}, replicas=1)
        snap.stage()
        snap.commit(0)
        snap.wait()
        base, repl = [], []
        for epoch in range(1, reps + 1):
            raw.Barrier()
            t = time.perf_counter()
            raw.Sendrecv(a, dest=other, recvbuf=b, source=other)
            base.append(time.perf_counter() - t)
            raw.Barrier()
            snap.stage()
            t = time.perf_counter()
            snap.commit(epoch, durable=False)  # waits for the local copy, then replication starts
            snap.wait()
            repl.append(time.perf_counter() - t - snap.stats["commit_wait_ms"] / 1e3)
        snap.close()
        tb, tr = median(base), median(repl)
        result["replication"].append({"mib": mib, "sendrecv_gbs": round(n / tb / 1e9, 2),
                                      "replication_gbs": round(n / tr / 1e9, 2),
                                      "ratio_vs_sendrecv": round(tb / tr, 3)})
    # compute overlap: rank 0 computes while its snapshot is copied and replicated; rank 1 is the
    # replication partner, told what to do by messages it polls for with sleeps (never spinning)
    n = compute_mib * MiB
    state = np.random.default_rng(rank).integers(0, 255, n, dtype=np.uint8)
    snap = dpmpi.Snapshot(comm, {"s": state}, replicas=1)
    x = np.random.default_rng(3).standard_normal((96, 96))
    y = np.empty_like(x)

    def chunk():
        for _ in range(5):
            np.matmul(x, x, out=y)
            np.tanh(y, out=x)
            np.multiply(x, 0.5, out=x)
        return 5

    rates = {"alone": [], "with_snapshots": []}
    windows = []
    cpu_fraction = []  # the computing thread's CPU time / wall time in each window
    epoch = 0
    cmd = np.zeros(1, dtype=np.int64)
    if rank == 0:
        for round_ in range(4 * reps):
            epoch += 1
            if round_ % 2 == 0:  # alone, for as long as the last snapshot window (or 50 ms)
                raw.Send(np.array([0], dtype=np.int64), dest=1)
                span = windows[-1] if windows else 0.05
                it, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < span:
                    it += chunk()
                rates["alone"].append(it / (time.perf_counter() - t0))
                continue
            raw.Send(np.array([epoch], dtype=np.int64), dest=1)
            it, t0, c0 = 0, time.perf_counter(), time.thread_time()
            snap.stage()
            while snap.busy():  # the staging copy runs on the C thread (no replication runs yet)
                it += chunk()
            snap.commit(epoch, durable=False)  # the copy is done: returns at once, replication starts
            while snap.busy():  # the replication runs on the C thread
                it += chunk()
            windows.append(time.perf_counter() - t0)
            cpu_fraction.append((time.thread_time() - c0) / windows[-1])
            rates["with_snapshots"].append(it / windows[-1])
        raw.Send(np.array([-1], dtype=np.int64), dest=1)
    else:
        while True:
            req = raw.Irecv(cmd, source=0)
            while not req.Test():
                time.sleep(0.0005)
            if cmd[0] < 0:
                break
            if cmd[0] > 0:
                snap.stage()
                snap.commit(int(cmd[0]), durable=False)
                snap.wait()  # blocks in C without spinning
    snap.close()
    if rank == 0:
        alone, withs = median(rates["alone"]), median(rates["with_snapshots"])
        result["overlap"] = {"state_mib": compute_mib, "loop_rate_alone": round(alone, 1),
                             "loop_rate_with_snapshots": round(withs, 1), "fraction_kept": round(withs / alone, 3),
                             "window_ms": round(1e3 * median(windows), 2),
                             "main_thread_cpu_fraction": round(median(cpu_fraction), 3)}
        with open(out_path, "w") as f:
            json.dump(result, f)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--repl-sizes", default="16,64,256")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--compute-mib", type=int, default=64)
    p.add_argument("--local", default=None, help="MiB sizes: the one-process part")
    a = p.parse_args()
    if a.local:
        rows = local_part([int(s) for s in a.local.split(",")], a.reps)
        with open(a.out, "w") as f:
            json.dump(rows, f)
        return
    mpi_part([int(s) for s in a.repl_sizes.split(",")], a.reps, a.out, a.compute_mib)


if __name__ == "__main__":
    main()
