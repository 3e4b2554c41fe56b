"""What the snapshot test programs (snap.py, cluster_snap.py) hold: each rank's arrays at an
epoch (sizes differ between ranks, not 64-byte multiples), and their digest."""
import hashlib

import numpy as np


def expected(mib, rank, epoch):
    n = int(mib * (1 << 20) / 16) + 1024 * rank + 3
    w = np.arange(n, dtype=np.float64) * (rank + 1) + epoch
    m = np.random.default_rng([rank, epoch]).integers(0, 255, size=n, dtype=np.uint8)
    return {"w": w, "m": m}


def digest(arrays):
    h = hashlib.sha256()
    for a in arrays.values():
        h.update(a.tobytes())
    return h.hexdigest()[:16]
