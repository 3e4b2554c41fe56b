"""What the snapshot test programs (snap.py, cluster_snap.py) share: each rank's arrays at an
epoch (sizes differ between ranks, not 64-byte multiples), their digest, and the restore step."""
import hashlib

import numpy as np

import dpmpi


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


def restore(snap, state, mib, rank, log, fields, swap=False):
    """Restore ``snap`` and check ``state`` bit for bit against the restored epoch; the epoch to
    go on from, or None when the snapshot is lost (one JSON line each way, via ``log``, with
    ``fields()`` and ``rank()`` read after the restore)."""
    try:
        got = snap.restore(swap=swap)
    except dpmpi.SnapshotLostError as lost:
        log("lost", ranks=list(lost.ranks), message=str(lost))
        return None
    ok = digest(state) == digest(expected(mib, rank(), got))
    log("restored", epoch=got, ok=ok, detail=snap.last_restore, **fields())
    return got + 1
