"""``dpmpi-bench report``: one Markdown page (DIR/report.md) with the tables of every result in an
--out directory and the plots (made here, when matplotlib is there). Pure functions turn each
result into Markdown; ``write`` reads the files and writes the page."""
from __future__ import annotations

import json
import time
from pathlib import Path

from dpmpi.bench import model, plots
from dpmpi.bench.plots import fmt_ms

NAMES = ("repair", "restore", "snapshot", "e2e", "overhead", "chaos", "scale", "watcher")
FIGURES = {
    "recovery_timeline.png": "Recovery per phase (detect, repair, restore, recompute)",
    "resume_vs_state.png": "Time to resume vs state size, dpmpi beside relaunch + reload",
    "overhead_tradeoff.png": "Failure-free overhead vs snapshot interval, beside the expected lost work",
    "repair_vs_ranks.png": "Repair phases vs ranks, and the model's shrink and agreement terms",
}


def table(head: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out + [""]


def load(out: Path) -> dict:
    res = {}
    for name in NAMES:
        p = out / f"{name}.json"
        if p.is_file():
            res[name] = json.loads(p.read_text())
    return res


def md_repair(r: dict) -> list[str]:
    rows = []
    for c in r["spare_path"] + r["respawn_path"]:
        ph = c["phases_ms"]
        rows.append([c["ranks"], c["policy"], f"{c['ok']}/{c['kills']}", fmt_ms(c["kill_to_detected_ms"].get("median")),
                     fmt_ms(c["kill_to_repaired_ms"].get("median")),
                     ", ".join(f"{p} {fmt_ms(v.get('median'))}" for p, v in ph.items())])
    idle = "; ".join(f"{s['ranks']}: {s['cpu_fraction']}" for s in r["idle_spare"])
    return ["## Repair (hot swap)", ""] + table(
        ["ranks (active+spares)", "policy", "ok", "kill -> detected (ms)", "kill -> repaired (ms)",
         "phases, slowest survivor (ms, medians)"], rows) + [f"Idle spare CPU (cpu time / wall time): {idle}", ""]


def md_restore(r: dict) -> list[str]:
    rows = [[f"{v['state_mib']:g}" if "state_mib" in v else k, v.get("arrays", 1),
             v["summary"]["untouched"]["copy_ms_median"], v["summary"]["touched"]["copy_ms_median"], v["ratio_copy"],
             v["summary"]["touched"]["restore_total_ms_median"], v.get("vs_one_array", {}).get("touched", "")]
            for k, v in r["by_state_mib"].items()]
    return [f"## Restore ({r['active']} active + 1 cold spare)", ""] + table(
        ["MiB per rank", "arrays", "copy into untouched arrays (ms)", "copy into touched arrays (ms)", "ratio",
         "whole restore (ms)", "restore vs one array"], rows)


def md_snapshot(r: dict) -> list[str]:
    rows = [[s["mib"], s["threads1"]["copyto_gbs"], s["threads1"]["stage_commit_gbs"],
             s["threads2"]["stage_commit_gbs"], s.get("restore_ms")] for s in r["stage_commit"]]
    out = ["## Snapshot", ""] + table(["MiB", "numpy.copyto (GB/s)", "stage+commit, 1 thread (GB/s)",
                                       "2 threads (GB/s)", "restore (ms)"], rows)
    out += table(["MiB", "replication (GB/s)", "Sendrecv (GB/s)", "ratio"],
                 [[x["mib"], x["replication_gbs"], x["sendrecv_gbs"], x["ratio_vs_sendrecv"]]
                  for x in r["replication"]])
    o = r["overlap"]
    return out + [f"Compute kept while a {o['state_mib']} MiB snapshot is copied and replicated: "
                  f"{o['fraction_kept']:.0%} of its speed alone. Targets: `{json.dumps(r['targets'])}`", ""]


def md_e2e(r: dict) -> list[str]:
    rows = []
    for name, w in r["workloads"].items():
        d, b10, b1 = w["dpmpi"], w["baseline"]["every10"], w["baseline"]["every1"]
        rows.append([name, fmt_ms(w["step_ms"]), fmt_ms(d["resume_ms"]),
                     f"{fmt_ms(d['detect_ms'])} / {fmt_ms(d['repair_ms'])} / {fmt_ms(d['restore_ms'])}",
                     fmt_ms(d["caught_up_ms"]), fmt_ms(b10["reloaded_ms"]), fmt_ms(b10["caught_up_ms"]),
                     fmt_ms(b1["caught_up_ms"]), f"{d['n']}+{b10['n']}+{b1['n']}"])
    return [f"## End to end: time to resume ({r['active']} active + 1 spare) vs relaunch + reload", ""] + table(
        ["workload", "step (ms)", "dpmpi: kill -> resumed (ms)", "detect / repair / restore (ms)",
         "dpmpi: kill -> caught up (ms)", "relaunch: kill -> reloaded (ms)", "relaunch, ckpt every 10: caught up (ms)",
         "relaunch, ckpt every step: caught up (ms)", "runs (dpmpi+10+1)"], rows)


def md_overhead(r: dict) -> list[str]:
    out = [f"## Failure-free overhead vs snapshot interval ({r['ranks']} ranks, {r['state_mib']:g} MiB per rank)", ""]
    for w, ov in r["workloads"].items():
        rows = [[k, fmt_ms(x["step_ms"]), x["overhead_pct"], fmt_ms(x["extra_ms_per_snapshot"]), x["hidden_fraction"],
                 fmt_ms(x["expected_lost_ms"])] for k, x in ov["by_snapshot_every"].items()]
        out += [f"**{w}** (plain copy of the state {ov['copy_ms']} ms, synchronous snapshot "
                f"{ov['sync_snapshot_ms']} ms)", ""] + table(
                    ["snapshot every K", "step (ms)", "overhead (%)", "extra per snapshot (ms)", "hidden fraction",
                     "expected lost work per failure (ms)"], rows)
    for w, why in r.get("failed", {}).items():
        out += [f"{w}: failed (`{why[-200:]}`)", ""]
    return out


def md_chaos(r: dict) -> list[str]:
    from dpmpi.bench.chaos_logic import VERDICTS

    rows = [[c, *[v[x] for x in VERDICTS]] for c, v in r["summary"].items()]
    return [f"## Chaos (seed {r['seed']})", ""] + table(["configuration", *VERDICTS], rows)


def md_watcher(r: dict) -> list[str]:
    rows = [[m, d["noticed_ms"]["median"], d["repaired_ms"]["median"], d["noticed_by"]]
            for m, d in r["detection"].items()]
    return ["## Failure watcher", ""] + table(["mode", "kill -> noticed (ms)", "kill -> repaired (ms)", "by"], rows)


def md_scale(r: dict) -> list[str]:
    """The scale section: measured per n, the model, the predictions, the published results."""
    out = ["## Scale: repair and restore phases vs ranks", "", r["note"], ""]
    rows = []
    for n, x in r["by_ranks"].items():
        rp, rs = x["repair_phases_ms"], x["restore_phases_ms"]
        rows.append([f"{n}+1", x["processes_per_core"], fmt_ms(x["detect_ms"]), fmt_ms(rp["revoke"]),
                     fmt_ms(rp["shrink"]), fmt_ms(rp["agree"]), fmt_ms(rp["rebuild"]), fmt_ms(rp["reassign"]),
                     fmt_ms(x["repair_ms"]),
                     fmt_ms(rs["transfer"]), fmt_ms(x["restore_ms"])])
    out += table(["ranks", "processes/core", "detect", "revoke", "shrink", "agree", "split", "reassign",
                  "repair (all)", "restore transfer", "restore (all)"], rows)
    m = r.get("model")
    if not m:
        return out + [f"No model: {r.get('model_skipped')}", ""]
    out += ["Model per phase: `a + b*log2(n) + c*max(0, (n+1)/cores - 1)` (ms; non-negative least squares; the "
            "last term is this machine's oversubscription and is left out of the predictions); restore transfer: "
            f"`t0 + bytes/bandwidth`, measured bandwidth {m['transfer']['gbs']} GB/s, predicted at "
            f"{m['link_gbs']} GB/s for {m['transfer_bytes'] / 2**20:g} MiB.", ""]
    rows = []
    for ph, f in m["fits"].items():
        pub = model.PUBLISHED.get(ph)
        rows.append([ph, f["a_ms"], f["b_ms_per_log2n"], f["c_ms_per_oversub"], f["rmse_ms"],
                     fmt_ms(m["predictions"]["512"][ph]), fmt_ms(m["predictions"]["4096"][ph]),
                     f"{pub['shape']} [{ph}]" if pub else ""])
    rows.append(["restore transfer", m["transfer"]["t0_ms"], "", "", "",
                 fmt_ms(m["predictions"]["512"]["transfer_link"]), fmt_ms(m["predictions"]["4096"]["transfer_link"]),
                 "bytes / link bandwidth"])
    rows.append(["**total**", "", "", "", "", fmt_ms(m["predictions"]["512"]["total"]),
                 fmt_ms(m["predictions"]["4096"]["total"]), ""])
    out += table(["phase", "a (ms)", "b (ms per log2 n)", "c (ms per extra process/core)", "fit rmse (ms)",
                  "model at 512 (ms)", "model at 4096 (ms)", "published"], rows)
    for ph, pub in model.PUBLISHED.items():
        out.append(f"- [{ph}] {pub['claim']}. {pub['source']}: {pub['url']}")
    return out + [""]


SECTIONS = {"repair": md_repair, "restore": md_restore, "snapshot": md_snapshot, "e2e": md_e2e,
            "overhead": md_overhead, "chaos": md_chaos, "scale": md_scale, "watcher": md_watcher}


def render(results: dict, figures: list[str], plots_note: str | None, out_name: str = "") -> str:
    """The page (pure): a header, the figures (or why they are missing), a section per result."""
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    lines = ["# dpmpi bench report", "", f"Results in `{out_name}`; written {when}.", ""]
    any_r = next(iter(results.values()), None)
    if any_r and any_r.get("machine"):
        mch = any_r["machine"]
        lines += [f"Machine: {mch.get('cpus')} cores, {mch.get('platform')}; launcher options "
                  f"{mch.get('launcher') or 'none (dpmpi-run defaults)'}"
                  + ("; --quick runs (short sweeps)" if any(r.get("quick") for r in results.values()) else "")
                  + ". The load average (1 min) says how busy the machine was around each run:", ""]
        lines += table(["result", "wall (s)", "load average at start", "at end"],
                       [[n, r.get("wall_s"), (r.get("machine") or {}).get("loadavg", ["-"])[0],
                         ((r.get("machine") or {}).get("loadavg_end") or ["-"])[0]] for n, r in results.items()])
    if not results:
        lines += ["No results found (run `dpmpi-bench all --quick --out DIR` first).", ""]
    lines += ["## Figures", ""]
    if plots_note:
        lines += [f"Plots skipped: {plots_note}.", ""]
    for f in figures:
        lines += [f"![{FIGURES.get(f, f)}]({f})", "", f"*{FIGURES.get(f, f)}*", ""]
    for name in NAMES:
        if name in results:
            try:
                lines += SECTIONS[name](results[name])
            except (KeyError, TypeError, ValueError) as exc:
                lines += [f"## {name}", "", f"(this result could not be read: {exc.__class__.__name__} {exc})", ""]
    return "\n".join(lines)


def write(out: Path) -> str:
    """Plots and report.md in ``out``; returns a line saying what was written."""
    if not out.is_dir():
        from dpmpi.bench.common import BenchError

        raise BenchError(f"report: no results directory {out}")
    results = load(out)
    made, why = plots.make_all(results, out) if results else ([], None)
    page = render(results, [p.name for p in made], why, str(out))
    (out / "report.md").write_text(page)
    return (f"wrote {out / 'report.md'} ({len(results)} results, {len(made)} plots"
            + (f"; plots skipped: {why}" if why else "") + ")")
