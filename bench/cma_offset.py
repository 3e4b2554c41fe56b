"""How fast Open MPI's single-copy transport (CMA: the receiver reads the sender's memory with
process_vm_readv) moves 64 MiB from a dpmpi snapshot slot into a numpy array, by where the slot
starts in a page. Two ranks; the receiver's array is numpy's (its data starts 16 bytes into a
page); the sender's slot starts at offset 0 (page-aligned: how every slot started before), at the
array's own offset (what dpmpi does now: ``Buffers.shift``), and at a few others. The sender only
waits; the receiver's time from posting to completion is reported, median of the repeats.

    .venv/bin/python bench/cma_offset.py [--mib 64] [--repeats 7] [--out bench/results/cma_offset.json]

Measured on the 2-core AMD EPYC VM (2026-12-02): slot at offset 0 25.5 ms, at the array's
offset (16) 9.3 ms, at 8 24.8 ms, at 64 / 2048 8.4 / 8.2 ms. Slow exactly where the destination
lies a few bytes (8, 16) past the source in its page; most likely the kernel's `rep movsb` copy,
which some AMD cores run slowly at such short distances (glibc avoids it there for its memcpy).
"""
import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
RANK = '''
import json, statistics, sys, time
import numpy as np
from mpi4py import MPI
from dpmpi.snapshot.native import Slot, cext

comm = MPI.COMM_WORLD
n, repeats = int(sys.argv[1]) << 20, int(sys.argv[2])
chunk = 4 << 20  # (how dpmpi moves a copy: DPMPI_CHUNK)
dst = np.zeros(n, np.uint8)  # written once: its pages are there
dst_offset = int(cext().ffi.cast("uintptr_t", cext().ffi.from_buffer(dst))) % 4096
rows = []
for shift in (0, dst_offset, 8, 64, 2048):
    slot = Slot(n, False, shift) if comm.rank == 0 else None
    src = np.frombuffer(slot.buffer(), np.uint8) if slot else None
    if src is not None:
        src[:] = 7
    times = []
    for _ in range(repeats):
        comm.Barrier()
        t = time.perf_counter()
        if comm.rank == 0:
            MPI.Request.Waitall([comm.Isend([src[o:o + chunk], MPI.BYTE], 1, 5) for o in range(0, n, chunk)])
        else:
            MPI.Request.Waitall([comm.Irecv([dst[o:o + chunk], MPI.BYTE], 0, 5) for o in range(0, n, chunk)])
            times.append(1e3 * (time.perf_counter() - t))
    if comm.rank == 1:
        assert int(dst[-1]) == 7
        dst[:] = 0
        rows.append({"slot_offset": shift, "array_offset": dst_offset, "ms": round(statistics.median(times), 2),
                     "gbs": round(n / 1e9 / (statistics.median(times) / 1e3), 2)})
    del src, slot
if comm.rank == 1:
    print(json.dumps(rows), flush=True)
'''


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "cma_offset.json"))
    a = p.parse_args()
    run = pathlib.Path(sys.executable).parent / "dpmpi-run"
    with tempfile.TemporaryDirectory() as tmp:
        prog = pathlib.Path(tmp) / "rank.py"
        prog.write_text(RANK)
        out = subprocess.run([str(run), "-n", "2", "--", sys.executable, str(prog), str(a.mib), str(a.repeats)],
                             capture_output=True, text=True, timeout=300, cwd=tmp)
    if out.returncode != 0:
        sys.exit(f"cma_offset: the job failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    for r in rows:
        print(f"slot at offset {r['slot_offset']:4d} of a page, array at {r['array_offset']}: "
              f"{r['ms']:6.2f} ms ({r['gbs']} GB/s)")
    result = {"bench": "cma_offset", "mib": a.mib, "repeats": a.repeats, "rows": rows,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "cpu": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                                       if ln.startswith("model name")), "")}}
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
