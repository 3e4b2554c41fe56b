"""The GPU check of issue 12: one run, one JSON summary (run by bench/gpu_check.sh, which builds
dpmpi on the GPU machine first). Sections, each bounded and skipped when the time left is short:

- versions: CUDA runtime and driver, CuPy, NCCL, the device;
- bandwidth: device -> host copies of 1 GiB into pageable, pinned (cudaHostAlloc) and registered
  (mmap + cudaHostRegister, as the snapshot's slots are) memory, timed with CUDA events;
- snapshot: staging 1 GiB of device arrays (dpmpi.gpu.devsnap: device -> a registered snapshot slot
  on its own stream, polled) against one plain cudaMemcpyAsync of the same bytes; then a whole
  Snapshot stage + commit + restore of those arrays, checked bit for bit on the device;
- nccl: init, abort and re-init of a one-rank NCCL communicator (ms);
- overhead: a ~20 ms GPU step (matmuls) with and without dpmpi.Runtime snapshotting every step;
- recovery: examples/train_mlp_cupy.py with 2 active ranks + 1 spare on the one GPU, failure-free
  and with rank 1 SIGKILLed inside its 15th NCCL allreduce; the final digests must be equal.

``--backend fake`` runs what it can of this on a CPU (no CUDA: versions, bandwidth and nccl are
skipped), to check the script itself where there is no GPU.
"""
import argparse
import contextlib
import json
import mmap
import os
import subprocess
import sys
import time
import traceback

import numpy as np

MiB, GiB = 1 << 20, 1 << 30
T0 = float(os.environ.get("GPU_CHECK_T0") or time.time())
BUDGET_S = 390.0  # of the 7 minutes, from the start of bench/gpu_check.sh (setup included)


def left() -> float:
    return BUDGET_S - (time.time() - T0)


def section(summary: dict, name: str, need_s: float, fn, *args) -> None:
    if left() < need_s:
        summary["sections"][name] = {"skipped": f"{left():.0f} s left, needs ~{need_s:.0f} s"}
        return
    t = time.time()
    try:
        result = fn(*args)
    except Exception as exc:  # noqa: BLE001 (recorded; the other sections still run)
        result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-1500:]}
    result["wall_s"] = round(time.time() - t, 2)
    summary["sections"][name] = result
    print(json.dumps({name: result}), file=sys.stderr, flush=True)


# ---- CUDA sections ------------------------------------------------------------------------------
def versions() -> dict:
    import cupy
    from cupy.cuda import nccl, runtime

    props = runtime.getDeviceProperties(0)
    name = props["name"]
    return {"cupy": cupy.__version__, "cuda_runtime": runtime.runtimeGetVersion(), "cuda_driver": runtime.driverGetVersion(),
            "nccl": nccl.get_version(), "device": name.decode() if isinstance(name, bytes) else str(name),
            "devices": runtime.getDeviceCount(), "python": sys.version.split()[0]}


def _timed_d2h(src, dst_ptr: int, reps: int = 3) -> list[float]:
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    out = []
    for _ in range(reps):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record(stream)
        cupy.cuda.runtime.memcpyAsync(dst_ptr, src.data.ptr, src.nbytes, 2, stream.ptr)
        b.record(stream)
        b.synchronize()  # (a benchmark of copies only: no NCCL work on this stream)
        out.append(cupy.cuda.get_elapsed_time(a, b))
    return out


@contextlib.contextmanager
def _registered(nbytes: int):
    """Anonymous page-aligned memory, touched, registered as pinned (as the snapshot's slots)."""
    import cupy

    mem = mmap.mmap(-1, nbytes)
    reg = np.frombuffer(mem, np.uint8)
    reg[:] = 1  # touched: no first-touch faults in the timing
    cupy.cuda.runtime.hostRegister(reg.ctypes.data, nbytes, 0)
    try:
        yield reg.ctypes.data
    finally:
        cupy.cuda.runtime.hostUnregister(reg.ctypes.data)
        del reg
        mem.close()


def bandwidth() -> dict:
    import cupy

    src = cupy.full(GiB, 7, dtype=cupy.uint8)
    pageable = np.empty(GiB, np.uint8)
    pageable[:] = 1
    pinned_mem = cupy.cuda.alloc_pinned_memory(GiB)
    res = {}
    with _registered(GiB) as reg_ptr:
        for name, ptr in (("pageable", pageable.ctypes.data), ("pinned", pinned_mem.ptr), ("registered", reg_ptr)):
            ms = _timed_d2h(src, ptr)
            res[name] = {"ms": [round(x, 3) for x in ms], "GBps_best": round(GiB / min(ms) / 1e6, 2)}
    return res


def snapshot_stage(backend: str) -> dict:
    import dpmpi
    from dpmpi.gpu import devsnap, get_backend
    from mpi4py import MPI

    be = get_backend()
    size = GiB if backend == "cupy" else 64 * MiB
    parts = 4
    arrays = {f"a{i}": be.zeros(size // parts, "uint8") for i in range(parts)}
    for i, a in enumerate(arrays.values()):
        a.fill(i + 1)
    res = {"bytes": size}
    from dpmpi.snapshot.layout import layout, total
    from dpmpi.snapshot.native import Slot

    dm = devsnap.DeviceSlots(be, arrays)
    entries = layout(arrays, {n: devsnap.describe(a) for n, a in arrays.items()})
    slot = Slot(total(entries), False)
    dm.register(slot)
    dm.to_slot(slot, entries)  # warm
    ms = []
    for _ in range(3):
        t = time.perf_counter()
        dm.to_slot(slot, entries)
        ms.append(1e3 * (time.perf_counter() - t))
    res["devsnap_stage_ms"] = [round(x, 3) for x in ms]
    res["devsnap_GBps_best"] = round(size / min(ms) / 1e6, 2)
    if backend == "cupy":  # one plain cudaMemcpyAsync of the same bytes into registered memory
        import cupy

        whole = cupy.zeros(size, cupy.uint8)
        with _registered(size) as reg_ptr:
            plain = _timed_d2h(whole, reg_ptr)
        del whole
        res["plain_memcpy_ms"] = [round(x, 3) for x in plain]
        res["plain_GBps_best"] = round(size / min(plain) / 1e6, 2)
        res["stage_vs_plain"] = round(min(plain) / min(ms), 3)  # target >= 0.8
    dm.close()
    # the whole snapshot: stage + commit, then restore after the device arrays were overwritten,
    # with 1 copy thread (the default) and 4 (the C engine checksums the slot on the CPU)
    keep = {k: be.asarray(be.to_numpy(a)) for k, a in arrays.items()}
    for threads in (1, 4):
        with dpmpi.Snapshot(MPI.COMM_SELF, arrays, replicas=0, threads=threads) as snap:
            t = time.perf_counter()
            snap.stage()
            t1 = time.perf_counter()
            snap.commit(1)
            t2 = time.perf_counter()
            for a in arrays.values():
                a.fill(0)
            snap.restore()
            t3 = time.perf_counter()
            detail = json.loads(json.dumps(snap.last_restore, default=str))
        same = all(bool((arrays[k] == keep[k]).all()) for k in arrays)
        res[f"threads{threads}"] = {"stage_ms": round(1e3 * (t1 - t), 3), "commit_ms": round(1e3 * (t2 - t1), 3),
                                    "restore_ms": round(1e3 * (t3 - t2), 3), "restore_detail": detail,
                                    "restored_bit_exact": same}
    res["restored_bit_exact"] = all(res[f"threads{n}"]["restored_bit_exact"] for n in (1, 4))
    return res


def nccl_times() -> dict:
    from cupy.cuda import nccl

    out = {}
    for round_ in ("first", "again"):
        t = time.perf_counter()
        uid = nccl.get_unique_id()
        t1 = time.perf_counter()
        comm = nccl.NcclCommunicator(1, uid, 0)
        t2 = time.perf_counter()
        comm.abort()
        t3 = time.perf_counter()
        out[round_] = {"unique_id_ms": round(1e3 * (t1 - t), 3), "init_ms": round(1e3 * (t2 - t1), 3),
                       "abort_ms": round(1e3 * (t3 - t2), 3)}
    out["used"] = _abort_after_use()
    out["behind"] = _abort_behind_init()
    out["note"] = "one rank; the 2-rank bootstrap/abort times are in recovery.*.nccl_ms"
    return out


def _one_rank(nccl):
    return nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)


def _allreduce(nccl, comm) -> float:
    """One allreduce of 1 MiB on a fresh stream, waited for by polling its event (ms)."""
    import cupy

    x = cupy.ones(MiB // 4, cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    t = time.perf_counter()
    comm.allReduce(x.data.ptr, x.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
    ev = cupy.cuda.Event()
    ev.record(stream)
    while not ev.done:
        time.sleep(1e-5)
    return 1e3 * (time.perf_counter() - t)


def _abort_after_use() -> dict:
    """Abort and destroy of a communicator that ran a collective: is the abort's second its own?"""
    from cupy.cuda import nccl

    res = {}
    for how in ("abort", "destroy"):
        comm = _one_rank(nccl)
        res[f"allreduce_ms_{how}"] = round(_allreduce(nccl, comm), 3)
        t = time.perf_counter()
        getattr(comm, how)()
        res[f"{how}_ms"] = round(1e3 * (time.perf_counter() - t), 3)
    return res


def _abort_behind_init() -> dict:
    """The old communicator aborted by a thread while the main thread makes the new one and runs a
    collective on it: can the abort leave the critical path of a rebuild?"""
    import threading

    from cupy.cuda import nccl

    old = _one_rank(nccl)
    _allreduce(nccl, old)
    done = {}

    def abort() -> None:
        t = time.perf_counter()
        old.abort()
        done["abort_ms"] = round(1e3 * (time.perf_counter() - t), 3)

    th = threading.Thread(target=abort, name="gpu-check-abort")
    t = time.perf_counter()
    th.start()
    new = _one_rank(nccl)
    t1 = time.perf_counter()
    ar = _allreduce(nccl, new)
    t2 = time.perf_counter()
    th.join()
    t3 = time.perf_counter()
    new.abort()
    return {"new_init_ms": round(1e3 * (t1 - t), 3), "new_allreduce_ms": round(ar, 3),
            "new_ready_ms": round(1e3 * (t2 - t), 3), "abort_thread_ms": done.get("abort_ms"),
            "all_done_ms": round(1e3 * (t3 - t), 3)}


# ---- jobs ---------------------------------------------------------------------------------------
def _job(repo: str, n: int, spares: int, args: list, env: dict, timeout: float, launcher: tuple = ()) -> dict:
    cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(n), "--spares", str(spares), *launcher, "--", sys.executable,
           *args]
    t = time.time()
    try:
        p = subprocess.run(cmd, cwd="/tmp", env={**os.environ, **env}, capture_output=True, text=True,
                           timeout=min(timeout, max(5.0, left() - 5)))
    except subprocess.TimeoutExpired as exc:
        return {"rc": "timeout", "wall_s": round(time.time() - t, 2), "stderr_tail": str(exc.stderr)[-1500:]}
    events = []
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return {"rc": p.returncode, "wall_s": round(time.time() - t, 2), "events": events,
            "stderr_tail": p.stderr[-1500:] if p.returncode else ""}


def _gpu_env(backend: str) -> dict:
    env = {"DPMPI_GPU_BACKEND": backend, "OPENBLAS_NUM_THREADS": "1"}
    if backend == "cupy":
        env.update(NCCL_MULTI_RANK_GPU_ENABLE="1", NCCL_MAX_CTAS="8")  # 2 ranks share the one GPU
    return env


def recovery(repo: str, backend: str, transport: str) -> dict:
    """``transport`` auto: NCCL where it can run two ranks on the one GPU (>= 2.30.3), else MPI
    through host memory (the device state, its snapshots and the restore are on the GPU either way)."""
    note = ""
    if transport == "auto":
        transport = "nccl"
        if backend == "cupy":
            from cupy.cuda import nccl

            if nccl.get_version() < 23003:
                transport = "mpi"
                note = (f"NCCL {nccl.get_version()} refuses two ranks on one GPU (needs >= 2.30.3): the gradients "
                        f"went through MPI and host memory; NCCL was not part of this recovery")
    example = os.path.join(repo, "examples", "train_mlp_cupy.py")
    args = [example, "--steps", "30", "--hidden", "1024", "--batch", "256", "--allreduce", transport]
    point = "nccl-Allreduce-enqueued" if transport == "nccl" else "step"
    kills = {f"killed_{n}": f"1:{point}@{n}:KILL" for n in (8, 15, 22)}
    out = {"transport": transport, "note": note, "kills": kills}
    for name, faults in (("failure_free", ""), *kills.items()):
        env = {**_gpu_env(backend), **({"DPMPI_FAULTS": faults} if faults else {})}
        job = _job(repo, 3, 1, args, env, 150)
        finals = {e["rank"]: e for e in job.pop("events", []) if e.get("event") == "final"}
        job["digests"] = {r: e["digest"] for r, e in sorted(finals.items())}
        job["roles"] = {r: e["role"] for r, e in sorted(finals.items())}
        job["nccl_ms"] = {r: e.get("nccl_ms") for r, e in sorted(finals.items())}
        job["recoveries"] = {r: [{k: rec.get(k) for k in ("failed_step", "restored_epoch", "detected_by", "repair_ms",
                                                           "restore_ms", "recompute_ms")} for rec in e["recoveries"]]
                             for r, e in sorted(finals.items())}
        # kill -> resumed, as the survivor saw it: repair + restore + the lost steps redone
        job["resume_ms"] = [round(sum(rec[k] or 0 for k in ("repair_ms", "restore_ms", "recompute_ms")), 3)
                            for rec in job["recoveries"].get(0, [])]
        out[name] = job
    ref = out["failure_free"]["digests"]
    out["bit_identical"] = bool(ref) and sorted(ref) == [0, 1] and all(out[k]["digests"] == ref for k in kills)
    out["ok"] = out["bit_identical"] and all(out[k]["rc"] == 0 for k in ("failure_free", *kills))
    return out


def overhead(repo: str, backend: str) -> dict:
    out = {}
    # dpmpi-run binds each rank to one core by default: with DPMPI_HELPER_CPUS=none the snapshot's
    # copy and replication threads share the step's core; by default they run on the cores no
    # process is bound to (here 15 of 16); with --map-by slot:PE=2 the rank has two
    variants = (("1core_helpers_none", (), "none"), ("1core", (), "auto"), ("2cores", ("--map-by", "slot:PE=2"), "auto"))
    for cores, launcher, helpers in variants:
        for mib, threads in ((8, 1), (64, 1), (64, 4)):
            job = _job(repo, 1, 0, [os.path.abspath(__file__), "--overhead-child", str(mib), "--backend", backend],
                       {**_gpu_env(backend), "DPMPI_COPY_THREADS": str(threads), "DPMPI_HELPER_CPUS": helpers},
                       90, launcher)
            res = [e for e in job.pop("events", []) if "overhead_pct" in e]
            out[f"{mib}MiB_threads{threads}_{cores}"] = res[0] if res else job
    return out


def overhead_child(mib: int) -> None:
    """One rank: a ~20 ms device step, 30 steps plain, then 40 under Runtime (snapshot every step);
    medians, the Runtime's over its last 30 steps (step start to step start)."""
    import dpmpi
    from dpmpi.gpu import get_backend

    comm = dpmpi.init()
    be = get_backend()
    xp = be.xp
    n = 2048 if be.name == "cupy" else 256
    a = be.asarray(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32))
    state = {"w": be.zeros(mib * MiB // 4, "float32")}

    def work(k: int) -> None:
        x = a
        for _ in range(k):
            x = xp.tanh(x @ a) * 0.01

    def end_of_step() -> None:
        be.to_numpy(state["w"][:1])  # the host learns the step is done

    def timed(k: int, steps: int) -> float:
        """The median wall time of one step (ms)."""
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            work(k)
            end_of_step()
            times.append(1e3 * (time.perf_counter() - t))
        return float(np.median(times))

    timed(1, 5)  # warm-up (cuBLAS handles, kernel compilation) before calibrating
    k = 1
    while timed(k, 3) < 20.0 and k < 1 << 16:
        k *= 2
    plain = timed(k, 30)
    rt = dpmpi.Runtime(comm, state)
    starts: list[float] = []

    parts: dict[str, list[float]] = {"enqueue": [], "commit": [], "stage": [], "end": []}

    def step(i: int) -> None:
        t0 = time.perf_counter()
        starts.append(t0)  # step to step: the work plus the runtime's own part
        work(k)
        t1 = time.perf_counter()
        with rt.update():
            t2 = time.perf_counter()  # the previous epoch's commit is behind
            state["w"][:1] += 1
            t3 = time.perf_counter()
        t4 = time.perf_counter()  # staged: the device work of the step and the copy are done
        end_of_step()
        for name, ms in zip(parts, (t1 - t0, t2 - t1, t4 - t3, time.perf_counter() - t4)):
            parts[name].append(1e3 * ms)

    rt.run(step, 40)
    intervals = np.diff(starts)[10:] * 1e3  # steady state: the first steps set up the replication
    with_rt = float(np.median(intervals))
    stats = {key: round(v, 3) for key, v in rt.snapshot.stats.items() if key.endswith("_ms")}
    stats.update({f"median_{name}_ms": round(float(np.median(v[10:])), 3) for name, v in parts.items()})
    rt.close()
    print(json.dumps({"state_mib": mib, "matmuls_per_step": k, "plain_step_ms": round(plain, 3),
                      "runtime_step_ms": round(with_rt, 3), "runtime_step_ms_max": round(float(intervals.max()), 3),
                      "snapshot_stats": stats, "overhead_pct": round(100 * (with_rt - plain) / plain, 3)}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--out", default=None)
    parser.add_argument("--backend", choices=("cupy", "fake"), default="cupy")
    parser.add_argument("--transport", choices=("auto", "nccl", "mpi"), default="auto",
                        help="the recovery's gradient transport (auto: NCCL where two ranks may share the GPU)")
    parser.add_argument("--overhead-child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["DPMPI_GPU_BACKEND"] = args.backend
    if args.overhead_child:
        overhead_child(args.overhead_child)
        return 0
    summary = {"check": "issue 12 GPU check", "backend": args.backend, "sections": {}}
    gpu = args.backend == "cupy"
    if gpu:
        section(summary, "versions", 5, versions)
        section(summary, "bandwidth", 20, bandwidth)
        section(summary, "nccl", 20, nccl_times)
    section(summary, "snapshot", 40, snapshot_stage, args.backend)
    section(summary, "recovery", 120, recovery, args.repo, args.backend, args.transport)
    section(summary, "overhead", 90, overhead, args.repo, args.backend)
    rec = summary["sections"].get("recovery", {})
    snap = summary["sections"].get("snapshot", {})
    summary["ok"] = bool(rec.get("ok")) and bool(snap.get("restored_bit_exact"))
    summary["elapsed_s"] = round(time.time() - T0, 1)
    text = json.dumps(summary, indent=1)
    print(text, flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
            f.write(text + "\n")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
