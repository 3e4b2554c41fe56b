"""A large send whose completion message (FIN) reaches the sender after Open MPI cancelled the send
because its peer failed. Rank 0 posts an 8 MiB send to rank 1 (rank 1 is to read it straight from
rank 0's memory, then answer with a FIN), and is told, through the same local PMIx event dpmpi's
watcher raises, that rank 1 died: its next tests of the send cancel it (MPI_ERR_PROC_FAILED) and
Open MPI returns the send's RDMA fragment. Only then does rank 1 (released through a named pipe)
receive the message, which queues its FIN at rank 0, and die. When rank 0 handles that FIN, Open
MPI without dpmpi's filter returns the fragment a second time and finds the send, freed by the
program, in error ("Send error after request freed", a fatal error that dpmpi's guard ignores);
the corrupted free list then crashes the process at MPI_Finalize. In a real job the double return
makes two later sends share a fragment: a hang or a segfault. With the filter the
FIN is dropped. With argv[2] "ack" the send is non-contiguous (rendezvous: rank 1 answers the
first fragment with an ACK asking for the rest), and the late message is that ACK. Plain mpi4py,
no watcher; argv: the named pipe [, fin|ack]. Prints one JSON line (rank 0)."""
import json
import os
import select
import signal
import sys

import dpmpi  # noqa: F401  (before mpi4py.MPI: dpmpi ends MPI at exit)
from dpmpi import _cext, _guard
from mpi4py import MPI

pipe = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else "fin"
comm = MPI.COMM_WORLD.Dup()
comm.Set_errhandler(MPI.ERRORS_RETURN)
by = _guard.late_messages()["by"]  # before any dpmpi call: dpmpi-run's preloaded guard installed it
status = _guard.filter_late_messages()
pids = comm.allgather(os.getpid())
big = bytearray(8 << 20)
if mode == "ack":
    every_other = MPI.BYTE.Create_vector(4 << 20, 1, 2).Commit()  # 4 MiB of the 8, non-contiguous
    message = [big, 1, every_other]
else:
    message = [big, MPI.BYTE]
if comm.Get_rank() == 0:
    big[:] = b"\x5a" * len(big)
    lib = _cext.lib
    assert lib.dpmpi_tell_bind(_guard.loaded_library("libpmix.so").encode()) == 0
    assert lib.dpmpi_tell_add(1, os.environ["PMIX_NAMESPACE"].encode(), 1) == 0
    comm.Barrier()
    req = comm.Isend(message, dest=1, tag=7)
    assert lib.dpmpi_tell_failed(1) == 1
    outcome = None
    while outcome is None:  # until Open MPI has handled the report and cancelled the send
        try:
            if req.Test():
                outcome = "completed"
        except MPI.Exception as exc:
            outcome = MPI.Get_error_string(exc.Get_error_code()).split(":")[0]
    fd = os.pidfd_open(pids[1])  # (before rank 1 is released: it may be gone by the next line)
    with open(pipe, "w") as go:  # rank 1 may receive now
        go.write("go")
    select.select([fd], [], [], 60)  # rank 1 received the data, queued its FIN and died
    for _ in range(200):  # progress: the FIN is handled
        MPI.COMM_SELF.Iprobe(source=0, tag=99)
    counts = _guard.late_messages()
    print(json.dumps({"event": "done", "rank": 0, "filter": status, "by": by, "outcome": outcome,
                      "seen": counts["seen"], "dropped": counts["dropped"]}), flush=True)
else:
    comm.Barrier()
    with open(pipe) as go:  # no MPI call until rank 0 has cancelled its send
        go.read()
    if mode == "ack":  # match the first fragment and answer it; the rest never comes
        rreq = comm.Irecv(message, source=0, tag=7)
        for _ in range(2000):
            rreq.Test()
    else:
        comm.Recv(message, source=0, tag=7)
    os.kill(os.getpid(), signal.SIGKILL)
