"""One chaos job (``dpmpi-bench chaos``): a configuration, and a dpmpi-run job whose MPI processes
are found from outside (/proc) and killed at the planned times with the planned signals."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dpmpi.bench.chaos_logic import SIGNALS, WORKLOADS, Kill, Tree, below, parse_proc_tree, read_procs
from dpmpi.bench.common import PY, Launcher, source_root

@dataclass
class Config:
    workload: str
    kills: int = 1
    signals: list[str] = field(default_factory=lambda: ["KILL"])
    ranks: int = 4  # active ranks
    spares: int | None = None  # default: one per kill
    replicas: int | None = None  # buddies per snapshot (--replicas of the workload); default: one per kill
    env: dict = field(default_factory=dict)
    timeout: float = 60.0
    args: list[str] | None = None  # the workload's arguments (default: WORKLOADS)
    examples: str | None = None  # the checkout's examples/ (default: found from the current directory)
    launcher: Launcher = field(default_factory=Launcher)  # the user's placement (dpmpi-bench's --hostfile, ...)

    @property
    def n_spares(self) -> int:
        return self.kills if self.spares is None else self.spares

    @property
    def n_replicas(self) -> int:
        return max(1, self.kills) if self.replicas is None else self.replicas

    @property
    def program(self) -> str:
        examples = Path(self.examples) if self.examples else source_root() / "examples"
        return str(examples / WORKLOADS[self.workload][0])

    @property
    def program_args(self) -> list[str]:
        args = list(WORKLOADS[self.workload][1] if self.args is None else self.args)
        return args if "--replicas" in args else [*args, "--replicas", str(self.n_replicas)]

    @property
    def steps(self) -> int | None:
        a = self.program_args
        return int(a[a.index("--steps") + 1]) if "--steps" in a else None

    @property
    def name(self) -> str:
        sig = "+".join(self.signals)
        return f"{self.workload} {self.ranks}+{self.n_spares} r={self.n_replicas} kills={self.kills} {sig}"

    def key(self) -> str:
        """What a failure-free reference depends on."""
        return json.dumps([self.workload, self.ranks, self.n_spares, self.program_args, sorted(self.env.items())])


@dataclass
class Job:
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    first_step: float | None  # monotonic time of the first step line
    end: float
    start: float
    kills: list[dict]
    seen: dict  # world rank -> pid, and spawned processes, as found


def _kill_session(root: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(root, sig)
    except (ProcessLookupError, PermissionError):
        pass
    # anything below the launcher that left its process group
    try:
        procs = read_procs(root)
    except OSError:
        return
    for pid in procs:
        if pid != root and below(procs, pid, root):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def launch(cfg: Config, plan: list[Kill], log=None) -> Job:
    """Run one job, killing the plan's victims from outside. ``log``: a callable for progress."""
    n = cfg.ranks + cfg.n_spares
    cmd = cfg.launcher.dpmpi_run(n, cfg.n_spares, [PY, cfg.program, *cfg.program_args, "--progress"])
    env = dict(os.environ)
    env.update({k: str(v) for k, v in cfg.env.items()})
    env.pop("DPMPI_FAULTS", None)  # kills come from outside only
    env["PATH"] = f"{Path(PY).parent}{os.pathsep}{env.get('PATH', '')}"
    out_lines: list[str] = []
    err_lines: list[str] = []
    first_step: list[float] = []
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=str(Path(cfg.program).parent), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)

    finished: set[int] = set()  # world ranks (job-wide ids) that printed their final line

    def pump_out():
        for line in proc.stdout:
            if not first_step and '"event": "step"' in line:
                first_step.append(time.monotonic())
            if '"event": "final"' in line:
                try:
                    finished.add(int(json.loads(line)["wid"]))
                except (ValueError, KeyError, TypeError):
                    pass
            out_lines.append(line)

    def pump_err():
        for line in proc.stderr:
            err_lines.append(line)

    threads = [threading.Thread(target=pump_out, daemon=True), threading.Thread(target=pump_err, daemon=True)]
    for t in threads:
        t.start()
    deadline = start + cfg.timeout
    pending = list(plan)
    done: list[dict] = []
    seen: dict = {"world": {}, "spawned": {}}
    lock = threading.Lock()
    stop = threading.Event()

    def scan():
        # in its own thread, so that a slow read of /proc (a rank's environment waits for its
        # memory-map lock) never delays a kill; a world rank keeps its pid, so the map stays good
        envs: dict[int, dict] = {}  # pid -> environment, read once
        while not stop.is_set():
            try:
                tree = parse_proc_tree(read_procs(proc.pid, envs=envs), proc.pid)
            except OSError:
                tree = Tree({}, {}, [])
            with lock:
                seen["world"].update(tree.world)
                seen["spawned"] = {**seen["spawned"], **tree.spawned}
                seen["spawned_now"] = dict(tree.spawned)
            stop.wait(0.05)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    timed_out = False
    while True:
        if proc.poll() is not None:
            break
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            _kill_session(proc.pid)
            break
        if pending and first_step:
            due = first_step[0] + pending[0].t
            if time.monotonic() >= due:
                k = pending.pop(0)
                with lock:
                    pid = seen["world"].get(k.world_rank)
                    spawned_now = dict(seen.get("spawned_now", {}))
                spawned = False
                if k.target == "replacement" and k.world_rank >= cfg.ranks + cfg.n_spares and spawned_now:
                    pid, spawned = min(spawned_now), True
                at = time.monotonic() - first_step[0]
                record = {**asdict(k), "pid": pid, "spawned": spawned, "at": round(at, 4),
                          "late_ms": round(1e3 * (at - k.t), 1), "sent": False}
                if k.world_rank in finished and not spawned:
                    # its work is done and printed: a kill now tests no recovery, only the
                    # teardown (dpmpi-run then counts the rank as lost: it has no record)
                    record["error"] = "victim had finished (its final line was out)"
                elif pid is not None:
                    try:
                        os.kill(pid, SIGNALS[k.signal])
                        record["sent"] = True
                        record["wall"] = time.time()  # comparable with the ranks' "time" fields
                    except ProcessLookupError:
                        record["error"] = "already gone"
                else:
                    record["error"] = "not found"
                done.append(record)
                if log:
                    log(f"    kill {k.signal} world rank {k.world_rank} ({k.target}) pid {pid} at +{record['at']:.3f} s"
                        + ("" if record["sent"] else f": {record.get('error')}"))
                continue
            wait = due - time.monotonic()
            time.sleep(max(0.0, min(wait, 0.01)))
        else:
            time.sleep(0.01)
    if not timed_out:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_session(proc.pid)
    end = time.monotonic()
    if timed_out:
        proc.wait()
    for t in threads:
        t.join(timeout=10)
    stop.set()
    scanner.join(timeout=10)
    _kill_session(proc.pid)  # a stopped or stray process left behind
    # the plan's kills that never came (the job ended or hung before)
    for k in pending:
        done.append({**asdict(k), "pid": None, "sent": False, "error": "job ended before"})
    return Job(None if timed_out else proc.returncode, timed_out, "".join(out_lines), "".join(err_lines),
               first_step[0] if first_step else None, end, start, done,
               {"world": dict(seen["world"]), "spawned": dict(seen["spawned"])})

