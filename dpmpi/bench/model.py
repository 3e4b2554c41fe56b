"""The cost model of a recovery (pure functions, no MPI): per phase, ``a + b*log2(n)`` for the
collective phases (detection, revoke, shrink, agreement, split, reassign) and ``t0 + bytes/bw``
for the restore's transfer, fitted to ``dpmpi-bench scale``'s measurements, and the published
ULFM scaling results the agreement and shrink terms are compared with.

Measured on one machine, the processes outnumber the cores from some n on, and every phase then
also grows with the processes per core. The fit has a third column for that,
``c * max(0, (n + 1) / cores - 1)`` (the spare included), and the predictions for a cluster set it
to 0 (one rank per core): it absorbs the oversubscription instead of letting it inflate ``b``.
The coefficients are non-negative (a cost does not fall as the job grows)."""
from __future__ import annotations

import itertools
import math

import numpy as np

# the phases fitted over n, and where each comes from in a recovery record (restore.phases())
PHASES = {
    "detect": ("detect_ms", None),
    "revoke": ("repair_phases_ms", "revoke"),
    "shrink": ("repair_phases_ms", "shrink"),
    "agreement": ("repair_phases_ms", "agree"),
    "split": ("repair_phases_ms", "rebuild"),
    "reassign": ("repair_phases_ms", "reassign"),
    "restore_agree": ("restore_phases_ms", "agree"),
    "restore_verify_copy": ("restore_phases_ms", ("verify", "copy")),
}

# What the published work found, as found (address and what it says); no figure is invented.
PUBLISHED = {
    "agreement": {
        "shape": "O(log n)",
        "claim": "Early Returning Agreement (ERA), the agreement of ULFM Open MPI: its logarithmic behavior is "
                 "proved and evaluated through benchmarks and two applications",
        "source": "Herault, Bouteiller, Bosilca, Gamell, Teranishi, Parashar, Dongarra, \"Practical Scalable "
                  "Consensus for Pseudo-Synchronous Distributed Systems\", SC15 (abstract)",
        "url": "https://www.icl.utk.edu/publications/export/tagged/889",
    },
    "revoke": {
        "shape": "O(log n)",
        "claim": "logarithmic revoke (reliable broadcast over a binomial graph) since ULFM-1.0; on 6,000 processes "
                 "of a Cray XC30 a revoked Barrier completes faster than a normal Barrier, its latency similar to a "
                 "small-message Broadcast",
        "source": "fault-tolerance.org, \"Logarithmic Revoke Routine\" (EuroMPI'15 paper); the paper's text",
        "url": "https://fault-tolerance.org/tag/revoke/ ; https://th4.ilovetranslation.com/EELaLpJS1hl=d",
    },
    "shrink": {
        "shape": "agreement + a communicator creation (no published figure found)",
        "claim": "MPIX_Comm_shrink derives a new communicator of the survivors; the searches of this project found "
                 "no published measurement of its time against n",
        "source": "the ULFM design paper's text (Revoke and Shrink)",
        "url": "https://th4.ilovetranslation.com/Wg9tIWnjLKr=d",
    },
}


def oversub(n: int, cores: int) -> float:
    """Processes per core beyond one: n active ranks and a spare on ``cores`` cores."""
    return max(0.0, (n + 1) / cores - 1.0)


def nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with non-negative coefficients, by trying every subset of the columns (a
    handful of columns here): the best fit among those whose coefficients are all >= 0."""
    k = x.shape[1]
    best, best_err = np.zeros(k), float(np.sum(y ** 2))
    for r in range(1, k + 1):
        for cols in itertools.combinations(range(k), r):
            coef, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
            if np.any(coef < 0):
                continue
            err = float(np.sum((x[:, cols] @ coef - y) ** 2))
            if err < best_err - 1e-12:
                full = np.zeros(k)
                full[list(cols)] = coef
                best, best_err = full, err
    return best


def fit_log(points: list[tuple[int, float]], cores: int) -> dict:
    """``ms = a + b*log2(n) + c*oversub(n)`` fitted to (n, ms) points."""
    if len(points) < 2:
        raise ValueError("a fit needs measurements at 2 or more values of n")
    n = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    x = np.column_stack([np.ones_like(n), np.log2(n), [oversub(int(v), cores) for v in n]])
    a, b, c = nnls(x, y)
    resid = x @ np.array([a, b, c]) - y
    return {"a_ms": round(float(a), 4), "b_ms_per_log2n": round(float(b), 4), "c_ms_per_oversub": round(float(c), 4),
            "rmse_ms": round(float(np.sqrt(np.mean(resid ** 2))), 4), "points": len(points)}


def predict(fit: dict, n: int) -> float:
    """The phase's time at n ranks, one rank per core (the oversubscription term left out)."""
    return fit["a_ms"] + fit["b_ms_per_log2n"] * math.log2(n)


def fit_bandwidth(points: list[tuple[int, float]]) -> dict:
    """``ms = t0 + bytes / bw`` fitted to (bytes, ms) points; bw in GB/s (None: flat)."""
    if len(points) < 2:
        raise ValueError("a bandwidth fit needs 2 or more state sizes")
    b = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    t0, per_byte = nnls(np.column_stack([np.ones_like(b), b]), y)
    return {"t0_ms": round(float(t0), 4), "gbs": round(1e-6 / per_byte, 3) if per_byte > 0 else None,
            "points": len(points)}


def transfer_ms(bw: dict, nbytes: float, link_gbs: float | None = None) -> float:
    """The restore's transfer of ``nbytes`` at the measured bandwidth, or at ``link_gbs``."""
    gbs = link_gbs or bw.get("gbs")
    return bw["t0_ms"] + (nbytes / (gbs * 1e6) if gbs else 0.0)


def phase_value(row: dict, phase: str) -> float:
    key, sub = PHASES[phase]
    v = row[key]
    if sub is None:
        return v
    if isinstance(sub, tuple):
        return sum(v.get(s, 0.0) for s in sub)
    return v.get(sub, 0.0)


def fit_all(rows: list[dict], cores: int, size_rows: list[dict], targets=(512, 4096),
            link_gbs: float = 12.5) -> dict:
    """rows: {"n": ranks, **restore.phases()} over n; size_rows: the same over state sizes (one n).
    Returns each phase's fit, the transfer's bandwidth fit and the predictions at ``targets``."""
    fits = {p: fit_log([(r["n"], phase_value(r, p)) for r in rows], cores) for p in PHASES}
    bw = fit_bandwidth([(r["state_bytes"], r["restore_phases_ms"]["transfer"]) for r in size_rows])
    nbytes = max(r["state_bytes"] for r in size_rows)
    pred = {}
    for n in targets:
        p = {ph: round(predict(f, n), 2) for ph, f in fits.items()}
        p["transfer_measured_bw"] = round(transfer_ms(bw, nbytes), 2)
        p["transfer_link"] = round(transfer_ms(bw, nbytes, link_gbs), 2)
        p["total"] = round(sum(v for k, v in p.items() if k != "transfer_measured_bw"), 2)
        pred[str(n)] = p
    return {"fits": fits, "transfer": bw, "transfer_bytes": nbytes, "link_gbs": link_gbs, "predictions": pred,
            "cores": cores}
