"""What dpmpi-run does about a lost node (docs/cluster.md).

When a node's Open MPI daemon (``prted``) dies, or the node goes silent, Open MPI 5.0.x's PRRTE
ends the whole job, whatever ``--runtime-options`` say. dpmpi-run cannot repair that; it makes
sure the job ends, and says which node was lost:

* keepalives on PRRTE's TCP connections between daemons (unless the user sets any
  ``oob_tcp_keepalive_*``), so that a silent node is noticed: 10 s idle, then 3 probes 2 s
  apart (~16 s). Without them a job with a node cut off was still hung 30 s later;
* PRRTE's message "PRTE has lost communication with a remote daemon" came in only some of the
  runs, so dpmpi-run also asks for PRRTE's error-manager trace (``errmgr_base_verbose 5``),
  whose ``Comm failure: daemon [...,K] - aborting`` came every time, and keeps that trace from
  the user unless they asked for it themselves (``LostDaemon``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

DAEMON_LOST = "PRTE has lost communication with a remote daemon"
_DAEMON_LOST_NODE = "Remote daemon:"
ERRMGR_VERBOSE = "errmgr_base_verbose"
_ERRMGR_TRACE = re.compile(r"^\[[^\]]+\] \[[^\]]+\] (errmgr[:_]dvm|Comm failure)")
_DAEMON_ABORT = re.compile(r"Comm failure: daemon \[[^\]]*,(\d+)\] - aborting")
KEEPALIVE = (("oob_tcp_keepalive_time", "10"), ("oob_tcp_keepalive_intvl", "2"), ("oob_tcp_keepalive_probes", "3"))


def traces_errmgr(user_args: list[str]) -> bool:
    """Whether the user asked for PRRTE's error-manager trace themselves (then it is theirs)."""
    return ERRMGR_VERBOSE in user_args


def mpirun_options(user_args: list[str]) -> list[str]:
    """What dpmpi-run adds to mpirun's command line for a lost node (nothing the user set)."""
    cmd: list[str] = []
    if not any(a.startswith("oob_tcp_keepalive") for a in user_args):
        for name, value in KEEPALIVE:
            cmd += ["--prtemca", name, value]
    if not traces_errmgr(user_args):
        cmd += ["--prtemca", ERRMGR_VERBOSE, "5"]
    return cmd


@dataclass
class LostDaemon:
    """What mpirun's stderr says about a lost daemon, line by line (owned by dpmpi-run's stderr
    pump; read by its main thread once mpirun has ended)."""

    show_trace: bool = True  # pass PRRTE's error-manager trace on to the user
    daemon: str | None = None  # the lost daemon's number ("?" until the trace names it)
    host: str | None = None  # its node, when PRRTE's message named it
    _in_message: bool = False

    def note(self, line: str) -> bool:
        """Note a line; False when it is not for the user (the trace dpmpi-run asked for)."""
        if DAEMON_LOST in line:
            self._in_message = True
            self.daemon = self.daemon or "?"
        elif _DAEMON_LOST_NODE in line and self._in_message:
            self.host = self.host or line.rsplit(" on node ", 1)[-1].strip()
            self._in_message = False
        abort = _DAEMON_ABORT.search(line)
        if abort and self.daemon in (None, "?"):
            self.daemon = abort.group(1)
        return self.show_trace or not _ERRMGR_TRACE.search(line)

    @property
    def node(self) -> str | None:
        """Which node was lost, in words (None: none was)."""
        if self.host:
            return f"node {self.host}"
        if self.daemon is not None:
            return f"the node of PRRTE daemon {self.daemon}"
        return None
