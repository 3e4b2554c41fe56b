"""Where CPython runs a signal handler during array arithmetic: the point that bounds how soon
dpmpi's failure watcher can interrupt a step (its signal's handler raises ProcFailedError).

    python bench/signal_points.py [--mib 160] [--ops 16] [--out bench/results/signal_points.json]

A thread sends SIGUSR1 to the process 50 ms into a block of --ops in-place multiplications of
one --mib array, written three ways: straight-line operators (``a *= k`` repeated), the same
operators in a ``for`` loop, and ``np.multiply(a, k, out=a)`` calls. Reports, per way, when the
block ended and when the handler ran (ms from the block's start). No MPI.
"""
import argparse
import json
import os
import pathlib
import signal
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
K = 1.0000001


def straight(a, ops):
    # ops is fixed at 16 here: the point is that nothing between these operators is a call
    a *= K; a *= K; a *= K; a *= K; a *= K; a *= K; a *= K; a *= K  # noqa: E702
    a *= K; a *= K; a *= K; a *= K; a *= K; a *= K; a *= K; a *= K  # noqa: E702


def loop(a, ops):
    for _ in range(ops):
        a *= K


def calls(a, ops):
    np.multiply(a, K, out=a); np.multiply(a, K, out=a); np.multiply(a, K, out=a); np.multiply(a, K, out=a)  # noqa: E702
    np.multiply(a, K, out=a); np.multiply(a, K, out=a); np.multiply(a, K, out=a); np.multiply(a, K, out=a)  # noqa: E702
    np.multiply(a, K, out=a); np.multiply(a, K, out=a); np.multiply(a, K, out=a); np.multiply(a, K, out=a)  # noqa: E702
    np.multiply(a, K, out=a); np.multiply(a, K, out=a); np.multiply(a, K, out=a); np.multiply(a, K, out=a)  # noqa: E702


def one(way, a, ops, after_s=0.05) -> dict:
    handled = []
    signal.signal(signal.SIGUSR1, lambda s, f: handled.append(time.perf_counter()))
    sent = []

    def fire():
        time.sleep(after_s)
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGUSR1)

    t = threading.Thread(target=fire)
    t0 = time.perf_counter()
    t.start()
    way(a, ops)
    ended = time.perf_counter()
    t.join()
    len(a)  # a call: the handler has run by now
    return {"block_ms": round(1e3 * (ended - t0), 1), "sent_ms": round(1e3 * (sent[0] - t0), 1),
            "handled_ms": round(1e3 * (handled[0] - t0), 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=float, default=160.0)
    p.add_argument("--ops", type=int, default=16, help="for the loop (the other two ways always do 16)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "signal_points.json"))
    a = p.parse_args()
    arr = np.ones(int(a.mib * 2**20) // 8)
    res = {"bench": "signal_points", "python": ".".join(map(str, os.sys.version_info[:3])), "mib": a.mib,
           "ways": {name: one(fn, arr, a.ops) for name, fn in
                    (("straight-line operators", straight), ("operators in a for loop", loop),
                     ("np.multiply calls", calls))}}
    for name, r in res["ways"].items():
        print(f"{name}: block {r['block_ms']} ms, signal sent at {r['sent_ms']} ms, handled at {r['handled_ms']} ms")
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
