"""Issue 13's figures from one ``bench/issue13_cores.sh`` output folder, as a markdown table
beside the targets: what each bench saved as JSON, or, for a bench cut by its time limit before
it wrote its JSON, the per-kill lines of its log. Prints the table; reads only.

    python bench/issue13_table.py OUT_DIR
"""
import json
import os
import re
import statistics
import sys

KILL_LINE = re.compile(r"\] (\S+) dpmpi kill \d+ \(\+(\d+) ms into the step\): resume ([\d.]+) ms \(detect ([\d.]+), "
                       r"repair ([\d.]+), restore ([\d.]+)\), (\d+) step\(s\) recomputed"
                       r"(?:, back where it failed after ([\d.]+) ms)?")
RELAUNCH_LINE = re.compile(r"\] (\S+) relaunch \(checkpoint every 1\) kill \d+: relaunched and reloaded (\d+) ms")


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def e2e_rows(out, name):
    """{workload: {resume, detect, repair, restore, back, recomputed, kills, relaunch, ratio}} from
    the bench's JSON, else from its log's lines (a run its limit cut)."""
    data = load(os.path.join(out, name, "e2e.json"))
    rows = {}
    if data:
        for label, w in data.get("workloads", {}).items():
            d, runs = w.get("dpmpi") or {}, w.get("dpmpi_runs") or []
            every1 = (w.get("baseline") or {}).get("every1") or {}
            rows[label] = {"resume": d.get("resume_ms"), "detect": d.get("detect_ms"), "repair": d.get("repair_ms"),
                           "restore": d.get("restore_ms"), "back": d.get("caught_up_ms"), "kills": d.get("n"),
                           "recomputed": sum(1 for r in runs if r.get("steps_recomputed")),
                           "relaunch": every1.get("reloaded_ms"), "ratio": w.get("resume_speedup_vs_relaunch"),
                           "source": "json"}
        return rows
    try:
        with open(os.path.join(out, f"{name}.log")) as f:
            text = f.read()
    except OSError:
        return rows
    kills, relaunch = {}, {}
    for m in KILL_LINE.finditer(text):
        kills.setdefault(m.group(1), []).append(m.groups())
    for m in RELAUNCH_LINE.finditer(text):
        relaunch.setdefault(m.group(1), []).append(float(m.group(2)))
    for label, ks in kills.items():
        resume = median([float(k[2]) for k in ks])
        back = median([float(k[7]) for k in ks if k[7]])
        reload_ms = median(relaunch.get(label, []))
        rows[label] = {"resume": resume, "detect": median([float(k[3]) for k in ks]),
                       "repair": median([float(k[4]) for k in ks]), "restore": median([float(k[5]) for k in ks]),
                       "back": back, "kills": len(ks), "recomputed": sum(1 for k in ks if int(k[6])),
                       "relaunch": reload_ms, "ratio": round(reload_ms / resume, 1) if reload_ms and resume else None,
                       "source": "log (the bench's limit cut it before its JSON)"}
    return rows


def repair_row(out, name):
    data = load(os.path.join(out, name, "repair.json"))
    if not data or not data.get("spare_path"):
        return None
    p = data["spare_path"][0]
    return {"ranks": p.get("ranks"), "median": p["kill_to_repaired_ms"]["median"], "max": p["kill_to_repaired_ms"]["max"],
            "n": p["kill_to_repaired_ms"]["n"], "shrink": (p.get("phases_ms") or {}).get("shrink", {}).get("median")}


def ranks_row(out, setting):
    """Medians over the jobs of restore_ranks.py: the replacement's transfer, the survivors'
    slowest copy back, and kill -> every rank restored."""
    try:
        with open(os.path.join(out, f"ranks_{setting}.jsonl")) as f:
            jobs = [json.loads(line) for line in f if line.startswith("{")]
    except (OSError, ValueError):
        return None
    transfer, copy, restored = [], [], []
    for job in jobs:
        ranks = job.get("ranks") or []
        new = [r for r in ranks if r.get("by") == "new"]
        old = [r for r in ranks if r.get("by") != "new"]
        if new:
            transfer.append((new[0].get("restore_ms") or {}).get("transfer"))
        if old:
            copy.append(max((r.get("restore_ms") or {}).get("copy") or 0.0 for r in old))
        restored.append(max((r.get("restored") or 0.0) for r in ranks) if ranks else None)
    return {"jobs": len(jobs), "transfer": median(transfer), "copy": median(copy), "restored": median(restored)}


def fmt(v, unit=" ms"):
    return "-" if v is None else f"{v}{unit}"


def main(out):
    lines = [f"Issue 13's figures from `{out}`", "", "| figure | measured | target |", "|---|---|---|"]
    for label, r in e2e_rows(out, "e2e").items():
        lines.append(f"| time to resume, {label} ({r['kills']} kills; {r['source']}) | **{fmt(r['resume'])}** "
                     f"(detect {fmt(r['detect'])}, repair {fmt(r['repair'])}, restore {fmt(r['restore'])}) | <= 40 ms |")
        lines.append(f"| relaunch + reload (every step) over time to resume, {label} | {fmt(r['relaunch'])}, "
                     f"**{fmt(r['ratio'], 'x')}** | >= 15x |")
    for name, what in (("killat", "default"), ("killat_nostream", "DPMPI_REPL_STREAM=0")):
        for label, r in e2e_rows(out, name).items():
            lines.append(f"| kill -> back where it failed, {label}, kills at 0/25/50/75 % ({what}; {r['source']}) | "
                         f"**{fmt(r['back'])}** (time to resume {fmt(r['resume'])}; {r['recomputed']} of {r['kills']} "
                         f"recomputed a step) | <= 140 ms |")
    for name, target in (("repair41", "<= 10 ms"), ("repair82", "<= 12 ms")):
        r = repair_row(out, name)
        if r:
            lines.append(f"| kill -> repaired, {r['ranks']} ({r['n']} kills) | **{fmt(r['median'])}** (max {fmt(r['max'])}, "
                         f"shrink {fmt(r['shrink'])}) | {target} |")
    for mode in ("compute", "wait"):
        d = load(os.path.join(out, f"safe_{mode}.json"))
        if d:
            by = d.get("by_setting", {})
            cells = "; ".join(f"DPMPI_REPL_STREAM={s}: safe {fmt(v.get('stage_to_safe_ms'))}, synchronous commit "
                              f"{fmt(v.get('sync_commit_ms'))}" for s, v in by.items())
            lines.append(f"| stage -> safe, {d.get('ranks')} ranks, {d.get('mib')} MiB, {mode} step "
                         f"({d.get('step_ms')} ms) | {cells} | sooner with streaming |")
    for setting in ("auto", "messages", "threads3"):
        r = ranks_row(out, setting)
        if r:
            lines.append(f"| restore_ranks {setting} ({r['jobs']} jobs): replacement's transfer / survivors' copy / "
                         f"kill -> all restored | {fmt(r['transfer'])} / {fmt(r['copy'])} / {fmt(r['restored'])} | |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    raise SystemExit(main(sys.argv[1]))
