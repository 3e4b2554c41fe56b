"""dpmpi's chaos harness: kill ranks of a running job from outside, at random times, with random
signals, and give every run one verdict (the pure logic: chaos_logic.py, one job: chaos_job.py).

    dpmpi-bench chaos --runs 6 --workloads mlp,jacobi,mlp-prim,jacobi-prim --kills 1,2
    dpmpi-bench chaos --failure-free 200 --workloads primitives
    dpmpi-bench chaos --workloads jacobi --kills 2 --run-seed 1234 --duration 2.5   # replay one run

Each run launches ``dpmpi-run -n N --spares S -- python PROGRAM ARGS --progress`` in its own
session and finds the job's MPI processes from outside: it walks /proc for processes below the
launcher (by parent chain, or in its session) whose environment has ``OMPI_COMM_WORLD_RANK``
(world rank -> pid; processes started by policy "respawn" carry ``DPMPI_SPAWNED=1``). From the
first ``step`` line on stdout it kills 1-3 of them at the planned times (seconds after that
line) with the planned signals: active ranks, idle spares, a spare that has already replaced a
killed rank, and a second victim 0-50 ms after the first (while the first repair runs). A plan
is a pure function of the run's seed, the configuration and the run's estimated duration (the
failure-free run's, or ``--duration``), so ``--run-seed`` with the same ``--duration`` replays
a run exactly: same victims, same times, same signals.

Workloads (``chaos_logic.WORKLOADS``): ``mlp`` and ``jacobi`` are the Runtime examples; ``mlp-prim`` and
``jacobi-prim`` run the same models through examples/primitives.py's hand-written loop (init,
Respawn, Snapshot, no Runtime, no close()); ``primitives`` is that program's own 1-D rod. Each
snapshot is held by as many buddies as the run kills (``--replicas``), so that two buddies killed
within milliseconds do not lose the only copy; ``--replicas 1`` shows what one replica survives.

Verdicts (one per run; see ``verdict``): ``hang`` (the hard timeout: the whole session is
killed), ``crash`` (dpmpi-run's exit code is not 0), ``wrong`` (the ranks' final digests are
missing or differ from a failure-free run of the same configuration, run once and cached),
``dirty-exit`` (exit 0 and the right digests, but stderr has an error a victim did not cause:
``OPAL ERROR``, ``Segmentation fault``, ``Address not mapped``, ``MPI_ERRORS_ARE_FATAL``,
``signal``, or dpmpi-run's account names a rank that died or failed and was not a victim),
``ok``; and ``late-kill``: a non-zero exit with every digest right, where every rank dpmpi-run
counts as lost is a victim killed after it printed its final line (its teardown: dpmpi-run has
no record of it and counts it lost), or a victim killed with its own final line unprinted after
every other rank had printed its own, each right (the others had left the program: nothing was
left to repair around it; a primitives program has no collective after its last restore). No kill
is sent to a victim whose final line the harness has already seen; ``late-kill`` covers the race
of a few milliseconds between that line and the kill. ``--failure-free N`` runs N jobs with no
kills (dirty exits of a clean job).

The seed is printed; the JSON (``--out DIR``: DIR/chaos.json) has every run's
plan, kills, exit code, digests, verdict and reasons, and the summary (configuration x verdict).
"""
from __future__ import annotations

import argparse
import os
import random
from dataclasses import asdict
from pathlib import Path

from dpmpi.bench.chaos_job import Config, launch
from dpmpi.bench.chaos_logic import (SIGNALS, VERDICTS, WORKLOADS, Kill, Proc, Tree, dirty_reasons,  # noqa: F401
                                     ended_victims, final_digests, job_digest, late_victims, parse_environ,
                                     parse_proc_tree, parse_stat, plan_run, read_procs, run_seed, summary_table,
                                     verdict)
from dpmpi.bench.common import Context, Progress, machine

class Harness:
    """Runs configurations, caches their failure-free references, and gives verdicts."""

    def __init__(self, log=print, keep_logs: str | None = None, duration: float | None = None) -> None:
        self.log = log or (lambda *_: None)
        self.keep_logs = keep_logs
        self.duration = duration  # overrides the measured one (exact replays)
        self.references: dict[str, dict] = {}

    def reference(self, cfg: Config) -> dict:
        """A failure-free run of the configuration (cached): its job digest and its duration
        from the first step line to the end. Its digest counts even when the job ended badly
        (e.g. a crash at exit after every rank printed its result); up to 3 tries."""
        key = cfg.key()
        if key in self.references:
            return self.references[key]
        tries = []
        for _ in range(3):
            job = launch(cfg, [])
            digests = final_digests(job.stdout, cfg.ranks, cfg.steps)
            v = verdict(job.returncode, job.timed_out, job_digest(digests), job_digest(digests), job.stderr, [],
                        cfg.ranks + cfg.n_spares)
            tries.append(v)
            if digests is not None and job.first_step is not None:
                break
        else:
            raise RuntimeError(f"{cfg.name}: no failure-free run printed every rank's result ({tries});\n"
                               f"{job.stderr[-3000:]}")
        ref = {"digest": job_digest(digests), "digests": digests, "duration": round(job.end - job.first_step, 3),
               "verdicts": tries}
        self.log(f"  reference {cfg.name}: digest {ref['digest']}, {ref['duration']:.2f} s of steps, "
                 f"verdict(s) {', '.join(tries)}")
        self.references[key] = ref
        return ref

    def run(self, cfg: Config, seed: int, index: int = 0, duration: float | None = None) -> dict:
        """One chaos run with this run seed; the plan is drawn over ``duration`` seconds (default:
        the harness's, else the failure-free run's)."""
        ref = self.reference(cfg)
        duration = duration or self.duration or ref["duration"]
        plan = plan_run(seed, cfg.kills, cfg.signals, cfg.ranks, cfg.n_spares, duration)
        self.log(f"  run {index} seed {seed}: " + ", ".join(
            f"{k.signal} {k.target} w{k.world_rank} @{k.t:.3f}{' close' if k.close else ''}" for k in plan))
        job = launch(cfg, plan, self.log)
        return self._result(cfg, job, ref, seed, index, plan, duration)

    def failure_free(self, cfg: Config, index: int = 0) -> dict:
        ref = self.reference(cfg)
        job = launch(cfg, [])
        return self._result(cfg, job, ref, None, index, [], None)

    def _result(self, cfg, job, ref, seed, index, plan, duration) -> dict:
        n = cfg.ranks + cfg.n_spares
        digests = final_digests(job.stdout, cfg.ranks, cfg.steps)
        victims = [k for k in job.kills if k.get("sent")]
        v = verdict(job.returncode, job.timed_out, job_digest(digests), ref["digest"], job.stderr, victims, n,
                    job.stdout, ref["digests"])
        reasons = []
        if v == "hang":
            reasons.append(f"no end in {cfg.timeout} s" + ("" if job.first_step is not None else
                           f", and no step line before that: no kill was sent ({len(job.seen['world'])} of {n} "
                           f"processes seen, {len(job.stdout.splitlines())} stdout lines)"))
        elif v == "late-kill":
            late = sorted(late_victims(job.stdout, victims))
            ended = sorted(ended_victims(job.stdout, victims, ref["digests"]) - set(late))
            reasons.append(f"exit code {job.returncode}: " + "; ".join(
                [f"victim(s) {late} killed after their final line"] * bool(late)
                + [f"victim(s) {ended} killed after every other rank's final line (their own not printed)"]
                * bool(ended)))
        elif v == "crash":
            account = [ln for ln in job.stderr.splitlines() if ln.startswith("dpmpi-run:")]
            reasons.append(f"exit code {job.returncode}" + (f": {account[-1]}" if account else ""))
        elif v == "wrong":
            reasons.append("digests missing" if digests is None else f"digests {digests} != {ref['digests']}")
        if v in ("crash", "dirty-exit", "hang", "wrong", "late-kill"):
            reasons += dirty_reasons(job.stderr, victims, n)[:8]
        result = {
            "config": cfg.name, "workload": cfg.workload, "kills_planned": cfg.kills, "ranks": cfg.ranks,
            "spares": cfg.n_spares, "signals": cfg.signals, "env": cfg.env, "index": index, "seed": seed,
            "duration": duration, "plan": [asdict(k) for k in plan], "kills": job.kills,
            "returncode": job.returncode, "timed_out": job.timed_out, "wall_s": round(job.end - job.start, 3),
            "digest": job_digest(digests), "expected": ref["digest"], "verdict": v, "reasons": reasons,
            "processes": {"world": job.seen["world"], "spawned": job.seen["spawned"]},
        }
        if seed is not None:
            result["replay"] = replay_command(cfg, seed, duration)
        if v != "ok" and self.keep_logs:
            os.makedirs(self.keep_logs, exist_ok=True)
            tag = seed if seed is not None else "ff"
            stem = Path(self.keep_logs) / f"{cfg.workload}-k{cfg.kills}-{index}-{tag}-{v}"
            Path(f"{stem}.out").write_text(job.stdout)
            Path(f"{stem}.err").write_text(job.stderr)
            result["log"] = str(stem)
        self.log(f"    -> {v}" + (f" ({'; '.join(reasons[:3])})" if reasons else "") + f" [{result['wall_s']:.1f} s]")
        return result


def replay_command(cfg: Config, seed: int, duration: float) -> str:
    parts = ["dpmpi-bench chaos", "--workloads", cfg.workload, "--kills", str(cfg.kills), "--signals",
             ",".join(cfg.signals), "--ranks", str(cfg.ranks), "--spares", str(cfg.n_spares),
             "--replicas", str(cfg.n_replicas),
             "--run-seed", str(seed), "--duration", str(duration), "--timeout", str(cfg.timeout)]
    parts += [f"--env {k}={v}" for k, v in sorted(cfg.env.items())]
    return " ".join(parts)


# ---- dpmpi-bench chaos ----------------------------------------------------------------------------
def add_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--runs", type=int, help="chaos runs per configuration")
    ap.add_argument("--workloads", type=lambda s: [w for w in s.split(",") if w],
                    help=f"from {', '.join(WORKLOADS)} (default: the two Runtime examples and their models through "
                         "the primitives program)")
    ap.add_argument("--kills", dest="kills_list", type=lambda s: [int(k) for k in s.split(",") if k],
                    help="kills per run; one configuration each (default 1,2)")
    ap.add_argument("--signals", default="KILL", help=f"signals to choose from ({','.join(SIGNALS)})")
    ap.add_argument("--replicas", type=int, default=None,
                    help="buddies holding each snapshot (default: as many as kills, so that buddies killed "
                         "close together lose nothing; 1 shows what a single replica survives)")
    ap.add_argument("--seed", type=int, default=None, help="master seed (default random; printed)")
    ap.add_argument("--run-seed", type=int, default=None, help="replay one run: this run seed, once per configuration")
    ap.add_argument("--duration", type=float, default=None,
                    help="the duration the plans are drawn over, s (default: each failure-free run's; give it to "
                         "replay)")
    ap.add_argument("--failure-free", type=int, default=0, metavar="N",
                    help="instead: N failure-free runs per workload (verdicts: dirty exits of clean jobs)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for the job (e.g. DPMPI_ON_DEPLETED=respawn, DPMPI_HEARTBEAT_TIMEOUT=2)")
    ap.add_argument("--args", default=None, help="the workload's arguments instead of the default (one string)")
    ap.add_argument("--keep-logs", default=None, metavar="DIR", help="save stdout/stderr of non-ok runs here")


def configs(ctx: Context, o) -> list[tuple[Config, int]]:
    """(configuration, runs) from the options; a clear error for unknown names (pure)."""
    from dpmpi.bench.common import BenchError

    for w in o.workloads:
        if w not in WORKLOADS:
            raise BenchError(f"chaos: unknown workload {w!r} (known: {', '.join(WORKLOADS)})")
    signals = [x.upper().removeprefix("SIG") for x in (getattr(o, "signals", None) or "KILL").split(",") if x]
    for x in signals:
        if x not in SIGNALS:
            raise BenchError(f"chaos: unknown signal {x!r} (known: {', '.join(SIGNALS)})")
    env = {}
    for item in getattr(o, "env", None) or []:
        if "=" not in item:
            raise BenchError(f"chaos: --env takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        env[k] = v
    extra = o.args.split() if getattr(o, "args", None) else None
    common = dict(replicas=getattr(o, "replicas", None), env=env, timeout=o.timeout, args=extra,
                  examples=str(ctx.root / "examples"), launcher=ctx.launcher)
    out = []
    for n in o.ranks:
        for w in o.workloads:
            if getattr(o, "failure_free", 0):
                spares = o.spares if o.spares is not None else 1
                out.append((Config(w, kills=0, signals=[], ranks=n, spares=spares, **common), o.failure_free))
                continue
            for k in o.kills_list:
                out.append((Config(w, kills=k, signals=signals, ranks=n, spares=o.spares, **common),
                            1 if getattr(o, "run_seed", None) is not None else o.runs))
    return out


def run(ctx: Context, o) -> dict:
    plan = configs(ctx, o)
    seed = o.seed if getattr(o, "seed", None) is not None else random.SystemRandom().randrange(1 << 31)
    progress = Progress("chaos", sum(runs + 1 for _c, runs in plan))  # + 1: each configuration's reference
    progress.note(f"seed {seed}" + (f", run seed {o.run_seed}" if getattr(o, "run_seed", None) is not None else ""))
    h = Harness(log=progress.note, keep_logs=getattr(o, "keep_logs", None), duration=getattr(o, "duration", None))
    results = []
    try:
        for cfg, runs in plan:
            h.reference(cfg)
            progress.step(f"{cfg.name}: reference")
            for i in range(runs):
                if getattr(o, "failure_free", 0):
                    results.append(h.failure_free(cfg, i))
                else:
                    replay = getattr(o, "run_seed", None)
                    s = replay if replay is not None else run_seed(seed, cfg.workload, cfg.kills, i)
                    results.append(h.run(cfg, s, i))
                progress.step(f"{cfg.name} #{i}: {results[-1]['verdict']}")
    except KeyboardInterrupt:
        progress.note("interrupted: writing what ran")
    summary_: dict[str, dict[str, int]] = {}
    for r in results:
        summary_.setdefault(r["config"], dict.fromkeys(VERDICTS, 0))[r["verdict"]] += 1
    return {"bench": "chaos", "machine": machine(ctx.launcher, max(c.ranks + c.n_spares for c, _r in plan)),
            "seed": seed, "run_seed": getattr(o, "run_seed", None), "summary": summary_, "references": h.references,
            "runs": results, "ok": all(r["verdict"] == "ok" for r in results)}


def summary(result: dict) -> list[str]:
    out = ["", summary_table(result["runs"])] if result["runs"] else ["no runs"]
    for r in result["runs"]:
        if r["verdict"] != "ok":
            out.append(f"{r['verdict']}: {r['config']} #{r['index']}: {'; '.join(r['reasons'][:2])}"
                       + (f"\n    replay: {r['replay']}" if r.get("replay") else ""))
    return out
