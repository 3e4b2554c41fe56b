"""Heartbeat test program, no MPI: start the heartbeat thread on DIR (as rank RANK, timeout T),
print "ready", then do ACTION:

  wait       watch the others until stdin closes, then exit 0
  stop       SIGSTOP itself (the detector should SIGKILL it)
  sleep S    time.sleep(S), then exit 0 (must not be killed: the C thread keeps beating)
  spin S     a pure-Python loop holding the GIL for S seconds, then exit 0
  fork-exit  fork a child that exits through exit handlers, wait for it, then wait as above
"""
import os
import signal
import sys
import time

from dpmpi import _cext

directory, rank, timeout, action, *rest = sys.argv[1:]
rc = _cext.lib.dpmpi_hb_start(directory.encode(), int(rank), float(timeout))
assert rc == 1, rc
assert _cext.lib.dpmpi_hb_start(directory.encode(), int(rank), float(timeout)) == 0  # idempotent
print("ready", flush=True)
if action == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)
elif action == "sleep":
    time.sleep(float(rest[0]))
elif action == "spin":
    end = time.monotonic() + float(rest[0])
    while time.monotonic() < end:
        pass
elif action == "fork-exit":
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # runs the inherited C exit handlers: they must leave the parent's file alone
    os.waitpid(pid, 0)
    print("child-done", flush=True)
    sys.stdin.read()
elif action == "wait":
    sys.stdin.read()
print("exiting", flush=True)
