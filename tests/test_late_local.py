"""The filter of a dead peer's late messages (cext/dpmpi_late.c) on one process: its two decisions
on hand-made requests and fragments laid out as Open MPI 5.0.11 lays them out, and its
installation in an MPI singleton. The multi-rank case is in test_mpi.py."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dpmpi import _cext, _guard
from mpi4py import MPI

ffi, lib = _cext.ffi, _cext.lib
REQ_ERROR, REQ_COMPLETE = 72, 88  # ompi_request_t: req_status.MPI_ERROR, req_complete
FRAG_BML, FRAG_REQ, BML_BTL, BML_ENDPOINT = 0x38, 0xA8, 8, 16  # mca_pml_ob1_rdma_frag_t, mca_bml_base_btl_t


def request(complete: bool, error: int):
    buf = ffi.new("char[]", 256)
    ffi.cast("void **", buf + REQ_COMPLETE)[0] = ffi.cast("void *", 1 if complete else 0)
    ffi.cast("int *", buf + REQ_ERROR)[0] = error
    return buf


def fragment(req, endpoint: int, btl: int = 0x500):
    bml = ffi.new("char[]", 32)
    ffi.cast("void **", bml + BML_BTL)[0] = ffi.cast("void *", btl)
    ffi.cast("void **", bml + BML_ENDPOINT)[0] = ffi.cast("void *", endpoint)
    frag = ffi.new("char[]", 512)
    ffi.cast("void **", frag + FRAG_BML)[0] = bml
    ffi.cast("void **", frag + FRAG_REQ)[0] = req
    return frag, bml


@pytest.mark.parametrize("complete,error,given_up", [
    (True, 75, True),    # completed in error (a cancel after its peer failed): given up
    (True, 0, False),    # completed normally
    (False, 75, False),  # error noted but not complete yet: ob1 still owns it
    (False, 0, False),   # in flight
])
def test_a_request_is_given_up_only_when_complete_with_an_error(complete, error, given_up):
    assert lib.dpmpi_late_request_given_up(request(complete, error)) == int(given_up)


def test_no_request_is_not_given_up():
    assert lib.dpmpi_late_request_given_up(ffi.NULL) == 0


def test_a_fin_is_stale_when_its_request_was_given_up_or_its_fragment_belongs_to_another_peer():
    live = request(False, 0)
    frag, _bml = fragment(live, 0x1000)
    btl, other_btl = ffi.cast("void *", 0x500), ffi.cast("void *", 0x600)
    ep, other_ep = ffi.cast("void *", 0x1000), ffi.cast("void *", 0x2000)
    assert lib.dpmpi_late_fin_stale(frag, btl, ep) == 0                # the normal FIN
    assert lib.dpmpi_late_fin_stale(frag, btl, other_ep) == 1          # reused by a send to another peer
    assert lib.dpmpi_late_fin_stale(frag, other_btl, other_ep) == 0    # through another module: not judged
    assert lib.dpmpi_late_fin_stale(frag, btl, ffi.NULL) == 0          # a BTL that names no sender
    gone, _bml2 = fragment(request(True, 75), 0x1000)
    assert lib.dpmpi_late_fin_stale(gone, btl, ep) == 1                # its send was cancelled
    assert lib.dpmpi_late_fin_stale(gone, other_btl, ffi.NULL) == 1
    assert lib.dpmpi_late_fin_stale(ffi.NULL, btl, ep) == 0


def test_installed_in_a_singleton_and_large_messages_still_arrive():
    assert _guard.filter_late_messages() == 0
    assert lib.dpmpi_late_installed() == 1
    comm = MPI.COMM_SELF.Dup()
    try:
        out = np.arange(1 << 20, dtype=np.float64)
        got = np.zeros_like(out)
        req = comm.Irecv(got, source=0, tag=3)
        comm.Send(out, dest=0, tag=3)
        req.Wait()
    finally:
        comm.Free()
    assert np.array_equal(got, out)
    assert _guard.late_messages()["dropped"] == [0, 0, 0, 0]
    assert _guard.late_messages()["by"] == "dpmpi"  # no preloaded guard in this process: dpmpi's own


def test_the_filter_stays_when_ob1_registers_its_handlers_again():
    """ob1 registers its handlers again whenever processes are added (a spawn, or lazily in a
    large job): the filter must survive that."""
    assert _guard.filter_late_messages() == 0
    assert lib.dpmpi_late_reregister_check() == 1


def test_turned_off_by_its_variable():
    code = textwrap.dedent("""
        import dpmpi
        from dpmpi import _cext, _guard
        from mpi4py import MPI
        print(_guard.filter_late_messages(), _cext.lib.dpmpi_late_installed())
    """)
    env = {"DPMPI_LATE_FILTER": "0"}
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, cwd="/",
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0"]
