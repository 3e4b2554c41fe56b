"""dpmpi-bench's figures (PNG), from the JSON results of an --out directory. matplotlib is optional
(``pip install "dpmpi[bench]"``): ``available()`` says whether it is there, and ``make_all``
returns the files it wrote, or the reason it wrote none. Each figure is made only when its
results are there."""
from __future__ import annotations

import math
from pathlib import Path

from dpmpi.bench import model

PHASE_COLORS = {"detect": "#4C72B0", "repair": "#DD8452", "restore": "#55A868", "recompute": "#C44E52"}
REPAIR_COLORS = {"revoke": "#8172B3", "shrink": "#DD8452", "reassign": "#937860", "rebuild": "#DA8BC3",
                 "agree": "#4C72B0"}


def available() -> str | None:
    """None when matplotlib can be used, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except Exception as exc:  # ImportError, or a broken backend
        return f"matplotlib is not available ({exc.__class__.__name__}: {exc}); pip install \"dpmpi[bench]\""
    return None


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def recovery_timeline(results: dict, out: Path) -> Path | None:
    """Stacked bars: kill -> detected -> repaired -> restored -> caught up, per e2e workload and
    state size, and per rank count of the scale sweep."""
    import matplotlib.pyplot as plt

    bars: list[tuple[str, dict]] = []
    for name, w in results.get("e2e", {}).get("workloads", {}).items():
        d = w["dpmpi"]
        if d.get("resume_ms") is not None:
            bars.append((f"{w['workload']}\n{w['state_mib']:g} MiB",
                         {"detect": d["detect_ms"], "repair": d["repair_ms"], "restore": d["restore_ms"],
                          "recompute": d["recompute_ms"]}))
    for n, r in results.get("scale", {}).get("by_ranks", {}).items():
        bars.append((f"scale\n{n}+1 ranks", {"detect": r["detect_ms"], "repair": r["repair_ms"],
                                             "restore": r["restore_ms"], "recompute": r["recompute_ms"]}))
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(6.5, 1.0 * len(bars) + 2), 4.8))
    x = range(len(bars))
    bottom = [0.0] * len(bars)
    for phase, color in PHASE_COLORS.items():
        vals = [max(0.0, b[1][phase] or 0.0) for b in bars]
        ax.bar(x, vals, bottom=bottom, color=color, label=phase, width=0.65)
        bottom = [u + v for u, v in zip(bottom, vals)]
    for i, total in enumerate(bottom):
        ax.text(i, total, f"{total:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), [b[0] for b in bars], fontsize=8)
    ax.set_ylabel("time after the kill (ms)")
    ax.set_title("Recovery per phase (medians)\nkill -> detected -> repaired -> restored -> caught up", fontsize=10)
    ax.legend(title="phase", fontsize=8)
    ax.set_ylim(0, max(bottom) * 1.15)
    return _save(fig, out / "recovery_timeline.png")


def resume_vs_state(results: dict, out: Path) -> Path | None:
    """Per workload: time to resume and to catch up against the state size, dpmpi beside the
    relaunch + reload of the mpi4py twin (checkpoints every 10 and every step)."""
    import matplotlib.pyplot as plt

    by_w: dict[str, list[dict]] = {}
    for w in results.get("e2e", {}).get("workloads", {}).values():
        by_w.setdefault(w["workload"], []).append(w)
    if not by_w:
        return None
    fig, axes = plt.subplots(1, len(by_w), figsize=(5.2 * len(by_w), 4.4), squeeze=False)
    series = [("dpmpi: kill -> resumed", lambda w: w["dpmpi"]["resume_ms"], "#4C72B0", "o-"),
              ("dpmpi: kill -> caught up", lambda w: w["dpmpi"]["caught_up_ms"], "#4C72B0", "o--"),
              ("relaunch: kill -> reloaded", lambda w: w["baseline"]["every10"]["reloaded_ms"], "#C44E52", "s-"),
              ("relaunch, ckpt every 10: caught up", lambda w: w["baseline"]["every10"]["caught_up_ms"], "#C44E52",
               "s--"),
              ("relaunch, ckpt every step: caught up", lambda w: w["baseline"]["every1"]["caught_up_ms"], "#DD8452",
               "^:")]
    for ax, (name, ws) in zip(axes[0], sorted(by_w.items())):
        ws = sorted(ws, key=lambda w: w["state_mib"])
        xs = [w["state_mib"] for w in ws]
        for label, get, color, style in series:
            ys = [get(w) for w in ws]
            pts = [(x, y) for x, y in zip(xs, ys) if y]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_xlabel("state per rank (MiB)")
        ax.set_ylabel("time after the kill (ms, log)")
        ax.set_title(f"{name}: time to resume vs state size")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="best")
    return _save(fig, out / "resume_vs_state.png")


def overhead_tradeoff(results: dict, out: Path) -> Path | None:
    """Per workload: failure-free overhead (bars) and the expected lost work per failure (line),
    against the snapshot interval."""
    import matplotlib.pyplot as plt

    ws = results.get("overhead", {}).get("workloads", {})
    if not ws:
        return None
    fig, axes = plt.subplots(1, len(ws), figsize=(4.8 * len(ws), 4.2), squeeze=False)
    for ax, (name, ov) in zip(axes[0], ws.items()):
        rows = {int(k): r for k, r in ov["by_snapshot_every"].items() if int(k) > 0}
        ks = sorted(rows)
        ax.bar([str(k) for k in ks], [rows[k]["overhead_pct"] for k in ks], color="#4C72B0",
               label="failure-free overhead (%)")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xlabel("snapshot every K steps")
        ax.set_ylabel("overhead vs no snapshots (%)", color="#4C72B0")
        ax2 = ax.twinx()
        ax2.plot([str(k) for k in ks], [rows[k]["expected_lost_ms"] for k in ks], "o-", color="#C44E52",
                 label="expected lost work per failure (ms)")
        ax2.set_ylabel("expected lost work per failure (ms)", color="#C44E52")
        ax2.set_ylim(bottom=0)
        ax.set_title(f"{name}, {ov['state_mib']:g} MiB/rank, step {rows[ks[0]]['step_ms']:.0f} ms", fontsize=10)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    fig.suptitle("Snapshot interval: what it costs without failures vs what a failure loses (K/2 steps)", fontsize=10)
    return _save(fig, out / "overhead_tradeoff.png")


def repair_vs_ranks(results: dict, out: Path) -> Path | None:
    """Left: the repair's phases per rank count, measured (stacked). Right: the model's shrink and
    agreement terms to 4096 ranks, one rank per core, with the measured points."""
    import matplotlib.pyplot as plt

    sc = results.get("scale", {})
    by_n = sc.get("by_ranks", {})
    if not by_n:
        return None
    ns = sorted(by_n, key=int)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 4.6))
    bottom = [0.0] * len(ns)
    for phase, color in REPAIR_COLORS.items():
        vals = [by_n[n]["repair_phases_ms"].get(phase, 0.0) for n in ns]
        ax.bar(ns, vals, bottom=bottom, color=color, label="split" if phase == "rebuild" else phase)
        bottom = [u + v for u, v in zip(bottom, vals)]
    ax.plot(ns, [by_n[n]["detect_ms"] for n in ns], "k^--", label="kill -> detected")
    over = [n for n in ns if by_n[n].get("oversubscribed")]
    if over and not sc.get("machine", {}).get("launcher"):
        ax.axvspan(ns.index(over[0]) - 0.5, len(ns) - 0.5, color="grey", alpha=0.12,
                   label=f"oversubscribed ({sc.get('cores')} cores)")
    ax.set_xlabel("active ranks (+ 1 spare)")
    ax.set_ylabel("ms (slowest survivor)")
    ax.set_title("Repair phases vs ranks (measured)")
    ax.legend(fontsize=7, loc="best")
    m = sc.get("model")
    if m:
        grid = [2 ** i for i in range(1, 13)]
        for phase, color in (("shrink", REPAIR_COLORS["shrink"]), ("agreement", REPAIR_COLORS["agree"])):
            f = m["fits"][phase]
            bx.plot(grid, [model.predict(f, n) for n in grid], "-", color=color,
                    label=f"{phase}: {f['a_ms']:.2f} + {f['b_ms_per_log2n']:.2f}*log2(n) ms")
            key = "shrink" if phase == "shrink" else "agree"
            measured = [int(n) for n in ns]
            bx.plot(measured, [by_n[n]["repair_phases_ms"][key] for n in ns], "o", color=color,
                    label=f"{phase}: measured here")
            if f["c_ms_per_oversub"]:  # the fit on this machine, its oversubscription term included
                bx.plot(measured, [model.predict(f, n) + f["c_ms_per_oversub"] * model.oversub(n, m["cores"])
                                   for n in measured], "--", color=color, alpha=0.6,
                        label=f"{phase}: fit here (+ {f['c_ms_per_oversub']:.2f} ms per extra process/core)")
        for n in (512, 4096):
            bx.axvline(n, color="grey", linestyle=":", linewidth=0.8)
        bx.set_xscale("log", base=2)
        bx.set_xlabel("ranks (log2)")
        bx.set_ylabel("ms")
        bx.set_title("Model (one rank per core) vs measured; dotted: 512, 4096")
        bx.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: the lines fill the axes
    else:
        bx.text(0.5, 0.5, "no model (needs 2+ rank counts and state sizes)", ha="center", transform=bx.transAxes)
        bx.set_axis_off()
    return _save(fig, out / "repair_vs_ranks.png")


def make_all(results: dict, out: Path) -> tuple[list[Path], str | None]:
    """(figures written, why none were) from {subcommand: result}."""
    why = available()
    if why:
        return [], why
    made = []
    for fn in (recovery_timeline, resume_vs_state, overhead_tradeoff, repair_vs_ranks):
        p = fn(results, out)
        if p is not None:
            made.append(p)
    return made, None


def fmt_ms(v) -> str:
    """A time for a table: '-' when missing."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"
