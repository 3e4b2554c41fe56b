"""Tier 2: fault-free MPI tests, run under pytest-mpi at 1, 2 and 4 ranks
(``mpirun --with-ft ulfm -n N pytest --with-mpi --only-mpi tests/test_mpi.py``)."""
import array

import pytest

pytestmark = pytest.mark.mpi

MPI = pytest.importorskip("mpi4py.MPI")
import dpmpi  # noqa: E402


@pytest.fixture
def comm():
    c = dpmpi.Comm(MPI.COMM_WORLD).Dup()
    yield c
    c.Free()


def test_world_wraps_comm_world():
    w = dpmpi.COMM_WORLD
    assert isinstance(w, dpmpi.Comm)
    assert w.mpi is MPI.COMM_WORLD
    assert (w.Get_rank(), w.Get_size()) == (MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size())
    assert (w.rank, w.size) == (w.Get_rank(), w.Get_size())  # attributes pass through


def test_buffer_and_pickle_methods(comm):
    n, r = comm.Get_size(), comm.Get_rank()
    out = array.array("d", [0.0])
    comm.Allreduce(array.array("d", [r + 1.0]), out)
    assert out[0] == n * (n + 1) / 2
    assert comm.allreduce(r) == sum(range(n))
    assert comm.bcast({"from": 0} if r == 0 else None, root=0) == {"from": 0}
    assert comm.allgather(r) == list(range(n))


def test_derived_communicators_are_dpmpi_comms(comm):
    r = comm.Get_rank()
    half = comm.Split(r % 2, r)
    assert isinstance(half, dpmpi.Comm)
    assert half.allreduce(1) == len(range(r % 2, comm.Get_size(), 2))
    half.Free()
    d = comm.Dup()
    assert isinstance(d, dpmpi.Comm) and d.Get_size() == comm.Get_size()
    d.Free()


def test_nonblocking_requests_are_wrapped(comm):
    n, r = comm.Get_size(), comm.Get_rank()
    recv = array.array("i", [-1])
    reqs = [comm.Irecv(recv, source=(r - 1) % n, tag=3), comm.Isend(array.array("i", [r]), dest=(r + 1) % n, tag=3)]
    assert all(isinstance(q, dpmpi.Request) for q in reqs)
    dpmpi.Request.Waitall(reqs)
    assert recv[0] == (r - 1) % n
    q = comm.isend({"r": r}, dest=(r + 1) % n, tag=4)
    assert comm.recv(source=(r - 1) % n, tag=4) == {"r": (r - 1) % n}
    q.wait()


def test_ulfm_primitives_without_failures(comm):
    r, n = comm.Get_rank(), comm.Get_size()
    assert comm.Is_revoked() is False
    assert comm.Agree(0b111 if r else 0b101) == 0b101
    flag = array.array("i", [1])
    comm.Iagree(flag).Wait()
    assert flag[0] == 1
    assert comm.Ack_failed() == 0
    g = comm.Get_failed()
    assert g.Get_size() == 0
    g.Free()
    assert comm.failed_ranks() == ()
    s = comm.Shrink()
    assert isinstance(s, dpmpi.Comm) and s.Get_size() == n and s.Get_rank() == r
    s.Free()


def test_revoke_makes_every_rank_raise_revoked_error(comm):
    # dpmpi sends one collective on a new communicator first, so revoking it is safe at 3+
    # ranks; a rank still inside that collective when a faster one revokes gets the
    # communicator all the same (revoked), not an exception.
    d = comm.Dup()
    d.Revoke()
    assert d.Is_revoked()
    with pytest.raises(dpmpi.RevokedError) as info:
        d.Barrier()
    assert info.value.Get_error_class() == MPI.ERR_REVOKED
    assert isinstance(info.value, MPI.Exception)  # mpi4py code that catches MPI.Exception still works
    s = d.Shrink()  # repair works on a revoked communicator
    assert s.allreduce(1) == comm.Get_size()
    s.Free()
    d.Free()


def test_plain_mpi_errors_become_dpmpi_errors(comm):
    with pytest.raises(dpmpi.DpmpiError) as info:
        comm.Send(array.array("i", [1]), dest=comm.Get_size() + 5)
    assert info.value.Get_error_class() == MPI.ERR_RANK
    assert type(info.value) is dpmpi.DpmpiError
    assert "Send" in str(info.value)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="mpi4py communicator"):
        dpmpi.Comm(None)
    with pytest.raises(ValueError, match="COMM_NULL"):
        dpmpi.Comm(MPI.COMM_NULL)
    with pytest.raises(TypeError, match="Agree"):
        dpmpi.COMM_WORLD.Agree("yes")
    with pytest.raises(ValueError, match="one 32-bit int"):
        dpmpi.COMM_WORLD.Iagree(array.array("d", [1.0]))
    with pytest.raises(ValueError, match="num_to_ack"):
        dpmpi.COMM_WORLD.Ack_failed(-1)


def test_fault_tolerance_is_on():
    from dpmpi import _ft

    assert _ft.library_has_ulfm()
    if MPI.COMM_WORLD.Get_size() > 1:
        assert _ft.problem() is None


def test_snapshot_buddies_hold_the_neighbours_copy_and_restore_is_exact(comm):
    import numpy as np

    r, n = comm.Get_rank(), comm.Get_size()
    a = np.full(1000 + 8 * r, r, dtype=np.int64)  # sizes differ between ranks
    snap = dpmpi.Snapshot(comm, {"a": a})
    for epoch in (1, 2, 3):
        a[:] = 10 * r + epoch
        snap.stage()
        snap.commit(epoch)
    snap.wait()
    digests = comm.allgather(snap._own[snap._committed].digest)
    if n > 1:  # the ring neighbour's copies of the last two epochs, with its checksum
        held = {s.epoch: s.digest for s in snap._held[(r - 1) % n]}
        assert set(held) == {2, 3} and held[3] == digests[(r - 1) % n]
    a[:] = -1
    assert snap.restore() == 3
    assert (a == 10 * r + 3).all()
    snap.close()



def _intercomm(comm):
    r, n = comm.Get_rank(), comm.Get_size()
    color = int(r >= n // 2)
    local = comm.Split(color, r)
    inter = local.Create_intercomm(0, comm, n // 2 if color == 0 else 0, 11)
    local.Free()
    return inter, color


@pytest.mark.mpi(min_size=2)
def test_intercommunicators_made_through_dpmpi_are_warmed_up(comm, monkeypatch):
    from dpmpi import comm as dcomm

    warmed = []
    real = dcomm._warm_up
    monkeypatch.setattr(dcomm, "_warm_up", lambda c, op: (warmed.append((op, c.Is_inter())), real(c, op)))
    inter, color = _intercomm(comm)
    assert isinstance(inter, dpmpi.Comm) and inter.Is_inter()
    half = comm.Get_size() // 2
    assert inter.Get_remote_size() == (comm.Get_size() - half if color == 0 else half)
    d = inter.Dup()
    s = inter.Split(0, comm.Get_rank())
    m = inter.Merge(high=bool(color))
    assert warmed == [("Split", False), ("Create_intercomm", True), ("Dup", True), ("Split", True), ("Merge", False)]
    assert m.allreduce(1) == comm.Get_size() and d.allreduce(1) == s.allreduce(1)
    for c in (d, s, m, inter):
        c.Free()


def test_communicators_of_this_job_are_within_it():
    from dpmpi import comm as dcomm

    assert dcomm._within_job(MPI.COMM_WORLD) and dcomm._within_job(MPI.COMM_SELF)


@pytest.mark.mpi(min_size=2)
def test_shrinking_an_intercommunicator_is_refused_instead_of_hanging(comm):
    # Open MPI 5.0.11 + ULFM never returns from MPI_Comm_shrink on an intercommunicator
    inter, _color = _intercomm(comm)
    with pytest.raises(NotImplementedError, match="intercommunicator"):
        inter.Shrink()
    assert inter.allreduce(1) == inter.Get_remote_size()  # still usable
    inter.Free()
