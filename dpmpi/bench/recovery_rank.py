"""The rank program of ``dpmpi-bench`` restore and scale (not a user example): dpmpi.Runtime over
--arrays equal arrays (default one) of --state-mib per rank in all, made with np.zeros
("untouched": no page written before the run, except one element per step) or written once
("touched"). A fault given in DPMPI_FAULTS
(``RANK:step@K:KILL``) kills a rank; the spare takes its place and every rank restores. Each
active rank prints one JSON line at the end: its recovery records (kill -> caught -> repaired ->
restored -> resumed, the repair's phases, the restore's phases) and its state's size.

    dpmpi-run -n 5 --spares 1 -- python -m dpmpi.bench.recovery_rank --state-mib 8
"""
import argparse
import json

import numpy as np

import dpmpi


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--state-mib", type=float, default=64)
    p.add_argument("--touched", type=int, choices=(0, 1), default=0)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--arrays", type=int, default=1)
    a = p.parse_args()
    comm = dpmpi.init()  # a cold spare: it makes its arrays after it is called in
    n = max(int(a.state_mib * 2**20) // 8 // a.arrays, 8)
    state = {f"a{i}": np.zeros(n) for i in range(a.arrays)}
    if a.touched:
        for v in state.values():
            v[:] = 1.0
    rt = dpmpi.Runtime(comm, state)

    def step(k: int) -> None:
        dpmpi.faults.point("step")
        with rt.update():
            for v in state.values():
                v[:8] += 1.0  # one page written: the rest stays as made
        comm.Barrier()

    rt.run(step, a.steps)
    print(json.dumps({"event": "final", "rank": comm.Get_rank(), "size": comm.Get_size(), "role": comm.role.value,
                      "state_bytes": sum(int(v.nbytes) for v in state.values()),
                      "recoveries": [r.as_dict() for r in rt.history]}), flush=True)
    rt.close()


if __name__ == "__main__":
    main()
