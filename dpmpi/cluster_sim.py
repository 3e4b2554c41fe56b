"""A simulated multi-node cluster on one Linux machine, for node-failure tests and benches (root).

Each "node" is a network namespace (its own interface and address) whose processes also get
their own UTS namespace (hostname: Open MPI decides what is local by hostname) and mount
namespace (a private /dev/shm, as on a real node). The nodes' veth pairs are joined by a bridge
in a namespace of its own. ``mpirun`` runs in the first node; PRRTE starts ``prted`` in the
others through a launcher script given as ``--prtemca plm_ssh_agent``, which stands in for ssh::

    with Cluster(nodes=2, slots=4) as cluster:
        gate = cluster.gate()     # a FIFO the program reads a line from at the moment to strike
        job = cluster.start(["dpmpi-run", "-n", "8", *cluster.mpirun_args(), "--", ..., str(gate)])
        job.wait_event("paused", 60)  # a JSON line {"event": "paused"} on the job's stdout
        cluster.kill_ranks(1)     # every rank of node 1; its prted lives on
        cluster.kill_node(1)      # every process of node 1, prted included
        cluster.cut(1)            # node 1 goes silent: its link is down, its processes run on
        cluster.release(gate)     # the program goes on
        rc, out, err = job.finish(60)  # rc None: it hung (and was killed)

Every namespace is named ``dpmpisim<PID>-<K>-...`` after the process that made it: leaving the
``with`` block (normally, by an exception or by Ctrl-C) removes them and kills what ran in
them, and a new Cluster first removes those of earlier processes that no longer exist (a run
that was killed). Nothing outside these namespaces is changed.
"""
from __future__ import annotations

import itertools
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

PREFIX = "dpmpisim"
SUBNET = "10.77.0.0/24"  # inside the namespaces only: never seen by the host's own network
DAEMONS = ("prted", "prterun", "mpirun", "prte")  # a node's launch daemon (mpirun on the first node)


_SERIAL = itertools.count()


class ClusterError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)}: {out.stderr.strip() or out.returncode}")
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def namespaces() -> list[str]:
    """The simulator's network namespaces on this machine (any process's)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def _owner(name: str) -> int | None:
    m = re.match(rf"{PREFIX}(\d+)-", name)
    return int(m.group(1)) if m else None


def ns_pids(ns: str) -> list[int]:
    out = _ip("netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split()]


def _remove(ns: str) -> None:
    """Kill every process in ``ns`` and delete it (its veth ends go with it)."""
    for pid in ns_pids(ns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _ip("netns", "delete", ns, check=False)


def remove_leftovers() -> list[str]:
    """Remove the namespaces of simulator runs whose process is gone (a crashed or killed run)."""
    stale = [ns for ns in namespaces() if (pid := _owner(ns)) is not None and not _alive(pid)]
    for ns in stale:
        _remove(ns)
    return stale


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def stacks(pids: Sequence[int], per_process_s: float = 20.0) -> str:
    """Every thread's C stack of each process (``gdb -batch``), for the report of a hang; says so
    when gdb is not installed. The processes are stopped only while gdb reads them."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(gdb not found: no stacks)\n"
    out = []
    for pid in pids:
        out.append(f"== process {pid} ({_comm(pid)})")
        try:
            ran = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt 30"], capture_output=True,
                                 text=True, timeout=per_process_s)
            frames = [line for line in ran.stdout.splitlines() if line.startswith(("#", "Thread "))]
            why = (ran.stderr.strip().splitlines() or ["no output"])[-1]
            out += frames or [f"(gdb read no stack: {why})"]  # e.g. ptrace not permitted
        except subprocess.TimeoutExpired:
            out.append(f"(gdb did not finish in {per_process_s:g} s)")
    return "\n".join(out) + "\n"


def session_pids(sid: int) -> list[int]:
    """The processes of session ``sid`` (a job started with start_new_session: sid is its pid)."""
    from dpmpi.bench.chaos_logic import read_procs  # (the chaos bench's reading of /proc)

    return [p.pid for p in read_procs(sid).values() if p.sid == sid]


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


class Cluster:
    """``nodes`` simulated nodes of ``slots`` slots each (a context manager; see the module)."""

    def __init__(self, nodes: int = 2, slots: int = 4, workdir: str | os.PathLike | None = None) -> None:
        if not 1 <= nodes <= 200:
            raise ValueError(f"nodes={nodes}: between 1 and 200")
        if slots < 1:
            raise ValueError(f"slots={slots}: at least 1")
        if os.geteuid() != 0:
            raise ClusterError("the simulated cluster needs root (network and UTS namespaces)")
        self.nodes, self.slots = nodes, slots
        tag = f"{PREFIX}{os.getpid()}-{next(_SERIAL)}"  # several clusters in one process are apart
        self.bridge_ns = f"{tag}-br"
        self.names = [f"{tag}-n{i}" for i in range(nodes)]  # namespace == hostname of each node
        self.addrs = [f"10.77.0.{i + 1}" for i in range(nodes)]
        self._tmp = tempfile.TemporaryDirectory(prefix=f"{tag}-", dir=workdir)
        self.dir = Path(self._tmp.name)
        self.hostfile = self.dir / "hostfile"
        self.agent = self.dir / "agent.sh"
        self._made: list[str] = []
        self._gates: dict[Path, int] = {}  # FIFO -> our read-write descriptor of it

    # -- lifetime --
    def __enter__(self) -> Cluster:
        remove_leftovers()
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill everything that runs in the nodes and remove the namespaces (idempotent)."""
        for ns in reversed(self._made):
            _remove(ns)
        self._made = []
        for fd in self._gates.values():
            os.close(fd)
        self._gates = {}
        self._tmp.cleanup()

    def _netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _create(self) -> None:
        self._netns(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for i, (name, addr) in enumerate(zip(self.names, self.addrs)):
            self._netns(name)
            # made inside the bridge's namespace (no name clash with the host's interfaces)
            _ip("-n", self.bridge_ns, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", name)
            _ip("-n", self.bridge_ns, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", name, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
        self.hostfile.write_text("".join(f"{a} slots={self.slots}\n" for a in self.addrs))
        cases = "".join(f"  {a}) node={n} ;;\n" for a, n in zip(self.addrs, self.names))
        # PRRTE calls it as ssh: AGENT HOST COMMAND... (the command as one or more words)
        self.agent.write_text(
            "#!/bin/sh\n# dpmpi.cluster_sim: stands in for ssh to a simulated node\n"
            'host="$1"; shift\ncase "$host" in\n' + cases
            + '  *) echo "dpmpi.cluster_sim: unknown node $host" >&2; exit 255 ;;\nesac\n'
            + 'exec ' + self._enter_cmd('"$node"') + ' "$*"\n')
        self.agent.chmod(0o755)

    @staticmethod
    def _enter_cmd(node: str) -> str:
        # a node's namespaces: network (the node), UTS (its hostname), mount (its own /dev/shm)
        return (f"ip netns exec {node} unshare --uts --mount --propagation private /bin/sh -c "
                f"'hostname \"$0\"; mount -t tmpfs -o size=4g tmpfs /dev/shm; eval \"$1\"' {node}")

    # -- using it --
    def mpirun_args(self) -> list[str]:
        """Options for ``dpmpi-run`` (or ``mpirun --with-ft ulfm``) to launch over the nodes."""
        return ["--hostfile", str(self.hostfile), "--bind-to", "none",
                "--prtemca", "plm_ssh_agent", str(self.agent),
                "--mca", "btl_tcp_if_include", SUBNET, "--prtemca", "oob_tcp_if_include", SUBNET]

    def command(self, cmd: Sequence[str], node: int = 0) -> list[str]:
        """``cmd`` run as a process of ``node`` (the launcher runs in node 0)."""
        return ["/bin/sh", "-c", self._enter_cmd(shlex.quote(self.names[node])) + " " + shlex.quote(shlex.join(cmd))]

    def popen(self, cmd: Sequence[str], node: int = 0, **kwargs: object) -> subprocess.Popen:
        return subprocess.Popen(self.command(cmd, node), **kwargs)  # type: ignore[call-overload]

    def start(self, cmd: Sequence[str], env: dict[str, str] | None = None, node: int = 0) -> Job:
        """Start ``cmd`` in ``node`` (in a session of its own, in the cluster's scratch directory),
        its output read as it comes."""
        proc = self.popen(cmd, node, env=env, cwd=str(self.dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
        return Job(proc, lambda: [p for node in range(len(self.names)) for p in self.ranks(node)])

    def gate(self, name: str = "go") -> Path:
        """A FIFO that a program can wait on (open it, read a line) until ``release(path)``.

        The cluster holds it open for reading and writing, so neither side's open blocks (on
        Linux), whichever comes first and even when the program died before opening it."""
        path = self.dir / name
        os.mkfifo(path)
        self._gates[path] = os.open(path, os.O_RDWR)
        return path

    def release(self, path: Path) -> None:
        """Let the program waiting on the gate ``path`` go on."""
        os.write(self._gates[path], b"go\n")

    def pids(self, node: int) -> list[int]:
        return ns_pids(self.names[node])

    def ranks(self, node: int) -> list[int]:
        """The MPI processes of ``node``: the children of its launch daemon."""
        pids = self.pids(node)
        daemons = {p for p in pids if _comm(p) in DAEMONS}
        return [p for p in pids if _ppid(p) in daemons and p not in daemons]

    def daemons(self, node: int) -> list[int]:
        return [p for p in self.pids(node) if _comm(p) in DAEMONS]

    def kill_ranks(self, node: int, sig: int = signal.SIGKILL) -> list[int]:
        """Kill every MPI process of ``node`` at once; its daemon lives on. Returns their pids."""
        return self._kill(self.ranks(node), sig)

    def kill_node(self, node: int) -> list[int]:
        """SIGKILL every process of ``node``, its daemon included (the node crashed)."""
        return self._kill(self.pids(node), signal.SIGKILL)

    def cut(self, node: int) -> None:
        """``node`` goes silent: its link to the bridge is down; its processes run on."""
        _ip("-n", self.bridge_ns, "link", "set", f"p{node}", "down")

    @staticmethod
    def _kill(pids: list[int], sig: int) -> list[int]:
        killed = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                killed.append(pid)
            except ProcessLookupError:
                pass
        return killed


class Job:
    """A job started by ``Cluster.start``: its stdout's JSON lines arrive as events while it runs.

    Two reader threads (one per pipe), owned by the Job, live until the job closes its pipes;
    they touch no MPI and only append to the Job's lists and queue."""

    def __init__(self, proc: subprocess.Popen, ranks: Callable[[], list[int]] = list) -> None:
        self.proc = proc
        self._ranks = ranks  # the job's MPI processes, on every node (their stacks if it hangs)
        self.out: list[str] = []
        self.err: list[str] = []
        self.events: list[dict] = []
        self._new: queue.SimpleQueue = queue.SimpleQueue()
        self._readers = [threading.Thread(target=self._read, args=(proc.stdout, self.out, True), daemon=True),
                         threading.Thread(target=self._read, args=(proc.stderr, self.err, False), daemon=True)]
        for t in self._readers:
            t.start()

    def _read(self, stream, lines: list[str], parse: bool) -> None:
        for line in iter(stream.readline, ""):
            lines.append(line)
            if parse and line.lstrip().startswith("{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                self.events.append(event)
                self._new.put(event)
        if parse:
            self._new.put(None)  # end of output

    def wait_event(self, name: str, timeout: float) -> dict:
        """The first event ``name`` (from now on); TimeoutError if none comes in ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                event = self._new.get(timeout=max(left, 0.0))
            except queue.Empty:
                raise TimeoutError(f"no {name!r} event in {timeout} s") from None
            if event is None:
                raise TimeoutError(f"the job ended without a {name!r} event")
            if event.get("event") == name:
                return event

    def finish(self, timeout: float) -> tuple[int | None, str, str]:
        """(exit code, stdout, stderr); the exit code is None when the job hung for ``timeout``
        seconds (its session is killed then; what ran on other nodes dies with the Cluster), and
        stderr then ends with the C stacks of the job's MPI processes (``stacks``)."""
        try:
            rc: int | None = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.err.append("[hang] the stacks of the job's MPI processes:\n" + stacks(self._ranks()))
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            rc = None
        for t in self._readers:
            t.join(5.0)
        return rc, "".join(self.out), "".join(self.err)

    def by_rank(self, name: str) -> dict[int, dict]:
        return {e["rank"]: e for e in self.events if e.get("event") == name}
