"""Tier 2: fault-free MPI tests, run under pytest-mpi at 1, 2 and 4 ranks
(``mpirun --with-ft ulfm -n N pytest --with-mpi --only-mpi tests/test_mpi.py``)."""
import array
import pickle

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
    assert set(snap.holdings()[r]) == {2, 3}  # its own two slots
    digests = comm.allgather(snap.holdings()[r][3])
    if n > 1:  # the ring neighbour's copies of the last two epochs, with its checksum
        held = snap.holdings()[(r - 1) % n]
        assert set(held) == {2, 3} and held[3] == digests[(r - 1) % n]
    a[:] = -1
    assert snap.restore() == 3
    assert (a == 10 * r + 3).all()
    snap.close()


def test_a_replica_sent_while_its_copy_ran_holds_exactly_the_owners_bytes(comm, monkeypatch):
    """A commit's replication sends each 4 MiB piece of the copy as soon as it is written
    (DPMPI_REPL_STREAM=1; auto where the snapshot threads have free cores), while four copy
    threads finish 1 MiB units out of order: every replica's bytes, read back, are the owner's."""
    import numpy as np

    monkeypatch.setenv("DPMPI_REPL_STREAM", "1")

    from dpmpi.snapshot.layout import from_signature

    r, n = comm.Get_rank(), comm.Get_size()
    state = {"w": np.zeros((5 << 20) // 8 + 123 * r), "m": np.zeros(3 << 18, np.float32), "k": np.zeros(7, np.int8)}
    snap = dpmpi.Snapshot(comm, state, threads=4)
    for epoch in (1, 2, 3, 4):
        for i, a in enumerate(state.values()):
            a[:] = np.arange(a.size) % 251 + 1000 * r + 10 * epoch + i
        snap.stage(epoch)  # (the background commit: streamed)
        snap.commit(epoch)
        owner = (r - 1) % n
        if n > 1:
            repl = snap._replication  # (test access: the replica slots' own bytes)
            slot = next(s for s in repl.held[owner] if s.epoch == epoch)
            recomputed = snap._buffers.checksum(slot, from_signature(repl.layouts[owner]))
            assert recomputed == slot.digest == comm.allgather(snap.holdings()[r][epoch])[owner]
    snap.close()


def test_the_restores_verification_names_every_rank_whose_copy_failed_anywhere(comm):
    """The restore's last collective (a non-blocking reduction waited for without spinning):
    every rank learns, for every rank, the largest flag any rank reported for it (1: its copy
    failed its checksum, 2: reading it failed, send it), zeros otherwise."""
    from dpmpi.snapshot.restore import verified

    r, n = comm.Get_rank(), comm.Get_size()
    assert verified(comm.mpi, {}) == [0] * n
    seen = {n - 1: 1} if r == 0 else {r: 2} if r % 2 else {}  # rank 0 saw the last rank's copy fail
    want = [max(int(i == n - 1), 2 * (i % 2)) for i in range(n)]
    assert verified(comm.mpi, seen) == want


def _intercomm(comm):
    r, n = comm.Get_rank(), comm.Get_size()
    color = int(r >= n // 2)
    local = comm.Split(color, r)
    inter = local.Create_intercomm(0, comm, n // 2 if color == 0 else 0, 11)
    local.Free()
    return inter, color


@pytest.mark.mpi(min_size=2)
def test_intercommunicators_made_through_dpmpi_are_warmed_up(comm, monkeypatch):
    from dpmpi import comm as dcomm  # the name dpmpi.Comm's methods call

    warmed = []
    real = dcomm.warm_up
    monkeypatch.setattr(dcomm, "warm_up", lambda c, op, watch=None: (warmed.append((op, c.Is_inter())), real(c, op, watch)))
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
    from dpmpi import mpicall

    assert mpicall.within_job(MPI.COMM_WORLD) and mpicall.within_job(MPI.COMM_SELF)


@pytest.mark.mpi(min_size=2)
def test_shrinking_an_intercommunicator_is_refused_instead_of_hanging(comm):
    # Open MPI 5.0.11 + ULFM never returns from MPI_Comm_shrink on an intercommunicator
    inter, _color = _intercomm(comm)
    with pytest.raises(NotImplementedError, match="intercommunicator"):
        inter.Shrink()
    assert inter.allreduce(1) == inter.Get_remote_size()  # still usable
    inter.Free()


# ---- dpmpi.Request and dpmpi.Comm behave as mpi4py's (issue 10) --------------------------------
def _ring(comm):
    r, n = comm.Get_rank(), comm.Get_size()
    return (r + 1) % n, (r - 1) % n


def test_a_completed_request_is_falsy_and_equals_request_null(comm):
    right, left = _ring(comm)
    got = array.array("i", [-1])
    r = comm.Irecv(got, source=left, tag=21)
    s = comm.Isend(array.array("i", [comm.Get_rank()]), dest=right, tag=21)
    assert isinstance(r, dpmpi.Request)
    assert bool(r) is bool(r.mpi) is True  # pending
    assert r != MPI.REQUEST_NULL and MPI.REQUEST_NULL != r and r == r.mpi and r.mpi == r
    assert dpmpi.Request.Waitall([r, s]) is True
    assert bool(r) is bool(s) is False and got[0] == left
    assert r == MPI.REQUEST_NULL and MPI.REQUEST_NULL == r and r == s
    for req in (r, r.mpi):
        with pytest.raises(TypeError, match="unhashable"):
            hash(req)


def test_mpi4py_testishrink_through_dpmpi(comm):
    # mpi4py's test_ulfm.BaseTestULFM.testIShrink, which failed through dpmpi.Comm
    shrink, request = comm.Ishrink()
    assert request
    request.Wait()
    assert not request
    assert (shrink.Get_size(), shrink.Get_rank()) == (comm.Get_size(), comm.Get_rank())
    shrink.Free()


def test_requests_of_isend_pickle_as_mpi4py_ones(comm):
    import pickle

    right, left = _ring(comm)
    q = comm.isend({"r": comm.Get_rank()}, dest=right, tag=22)
    if q:  # a pending request cannot be pickled, as with mpi4py
        with pytest.raises(ValueError):
            pickle.dumps(q.mpi)
        with pytest.raises(ValueError):
            pickle.dumps(q)
    assert comm.recv(source=left, tag=22) == {"r": left}
    q.wait()
    q.Test()  # a cached method (closure) does not stop pickling
    back = pickle.loads(pickle.dumps(q))
    assert isinstance(back, dpmpi.Request) and back == MPI.REQUEST_NULL and not back


def test_request_class_methods_take_dpmpi_requests(comm):
    right, left = _ring(comm)
    out, got = array.array("i", [7]), array.array("i", [0])
    ps, pr = comm.Send_init(out, dest=right, tag=23), comm.Recv_init(got, source=left, tag=23)
    assert isinstance(ps, dpmpi.Request) and isinstance(ps.mpi, MPI.Prequest)
    for _ in range(2):
        dpmpi.Request.Startall([ps, pr])
        assert dpmpi.Request.Waitall([pr, ps])
        assert got[0] == 7 and bool(ps) is bool(ps.mpi) is True  # persistent: inactive, not null
        got[0] = 0
    ps.Free()
    pr.Free()
    assert not ps and not pr and ps == MPI.REQUEST_NULL
    reqs = [comm.Irecv(array.array("i", [0]), source=left, tag=24 + i) for i in range(3)]
    sends = [comm.Isend(array.array("i", [i]), dest=right, tag=24 + i) for i in range(3)]
    done = set()
    while len(done) < 3:
        index = dpmpi.Request.Waitany(reqs)
        assert index not in done and not reqs[index]
        done.add(index)
    assert dpmpi.Request.Testall(sends) is True or dpmpi.Request.Waitall(sends)
    assert dpmpi.Request.Testany(reqs) == (MPI.UNDEFINED, True)  # all null: as mpi4py
    assert dpmpi.Request.Waitsome(reqs) is None and dpmpi.Request.Testsome(reqs) is None
    assert reqs[0].Get_status() is True
    try:  # an MPI-4.1 call: this Open MPI has none, and then neither has dpmpi
        expected = MPI.Request.Get_status_all([r.mpi for r in reqs])
    except NotImplementedError:
        with pytest.raises(NotImplementedError):
            dpmpi.Request.Get_status_all(reqs)
    else:
        assert dpmpi.Request.Get_status_all(reqs) == expected
    objs = [comm.irecv(source=left, tag=30 + i) for i in range(2)]
    for i in range(2):
        comm.send(i, dest=right, tag=30 + i)
    assert dpmpi.Request.waitall(objs) == [0, 1] and not any(objs)
    null = dpmpi.Request.f2py(MPI.REQUEST_NULL.py2f())
    assert isinstance(null, dpmpi.Request) and null == MPI.REQUEST_NULL


def test_mpi4pys_own_functions_take_dpmpi_requests(comm):
    """dpmpi requests are mpi4py requests (the object itself, not a copy): a program written for
    mpi4py completes them with MPI.Request.Waitall; their own methods still raise dpmpi errors."""
    right, left = _ring(comm)
    got = array.array("i", [-1])
    reqs = [comm.Irecv(got, source=left, tag=41), comm.Isend(array.array("i", [comm.Get_rank()]), dest=right, tag=41)]
    assert all(isinstance(q, MPI.Request) and q.mpi is q for q in reqs)
    assert MPI.Request.Waitall(reqs) is True and got[0] == left and not any(reqs)
    out, into = array.array("i", [9]), array.array("i", [0])
    ps, pr = comm.Send_init(out, dest=right, tag=42), comm.Recv_init(into, source=left, tag=42)
    for q in (ps, pr):
        assert isinstance(q, dpmpi.Prequest) and isinstance(q, MPI.Prequest) and isinstance(q, dpmpi.Request)
    MPI.Prequest.Startall([ps, pr])
    assert MPI.Request.Waitall([pr, ps]) and into[0] == 9 and ps and pr  # persistent: inactive, not null
    into[0] = 0
    pr.Start()
    ps.Start()
    assert pr.Wait() and ps.Wait() and into[0] == 9
    ps.Free()
    pr.Free()
    assert not ps and not pr and "handle" in repr(ps)
    with pytest.raises(dpmpi.DpmpiError, match="in Start"):  # a method's error is dpmpi's
        ps.Start()


def test_comm_truthiness_equality_pickling_and_class_methods(comm):
    import pickle

    d = comm.Dup()
    assert d and d == d.mpi and d.mpi == d and d != comm
    c = comm.Clone()
    assert isinstance(c, dpmpi.Comm) and c.Get_size() == comm.Get_size()
    d.Free()
    c.Free()
    assert bool(d) is bool(d.mpi) is False and d == MPI.COMM_NULL
    with pytest.raises(TypeError, match="unhashable"):
        hash(dpmpi.COMM_WORLD)
    with pytest.raises(TypeError, match="unhashable"):
        hash(MPI.COMM_WORLD)
    assert dpmpi.Comm.Get_parent() == MPI.COMM_NULL  # not a spawned job
    back = dpmpi.Comm.f2py(comm.py2f())
    assert isinstance(back, dpmpi.Comm) and back == comm
    world = pickle.loads(pickle.dumps(dpmpi.COMM_WORLD))
    assert isinstance(world, dpmpi.Comm) and world.mpi is MPI.COMM_WORLD
    with pytest.raises(ValueError):  # as mpi4py: only predefined communicators pickle
        pickle.dumps(comm)
    assert {"Allreduce", "Revoke", "Get_rank"} <= set(dir(comm))


def _torn():
    raise pickle.UnpicklingError("invalid load key, '\\x00'.")


class Torn:
    """Unpickles as a message that a peer's death tore would (seen: a survivor's allreduce)."""

    def __reduce__(self):
        return _torn, ()


def test_a_torn_pickled_message_is_a_peer_failure(comm):
    """A lower-case call whose received bytes do not unpickle raises ProcFailedError (the program
    repairs), as dpmpi's own exchanges do (dpmpi.mpicall.exchange); other errors stay as they are."""
    me = comm.Get_rank()
    with pytest.raises(dpmpi.ProcFailedError) as info:
        comm.sendrecv(Torn(), dest=me, source=me)
    assert isinstance(info.value.__cause__, pickle.UnpicklingError)
    with pytest.raises(ZeroDivisionError):
        comm.allreduce(1, op=lambda a, b: a / 0) if comm.Get_size() > 1 else 1 / 0
    # bytes that begin as a pickle of a protocol no pickler writes (a survivor's allreduce got such
    # a message twice while a peer died, "unsupported pickle protocol: 154"): before, the
    # ValueError ended the rank
    req = comm.Isend([b"\x80\x9a\x00\x00", MPI.BYTE], dest=me, tag=7)
    with pytest.raises(dpmpi.ProcFailedError) as info:
        comm.recv(source=me, tag=7)
    req.Wait()
    assert "unsupported pickle protocol: 154" in str(info.value.__cause__), info.value.__cause__
    # a pickle that does not decode, with no failure known: the program's error, as it is
    req = comm.Isend([b"\x80\x05\x8c\x02\xff\xfe.", MPI.BYTE], dest=me, tag=8)
    with pytest.raises(UnicodeDecodeError):
        comm.recv(source=me, tag=8)
    req.Wait()


def test_the_late_message_filter_is_installed_and_passes_every_live_message(comm):
    """dpmpi filters the control messages of a dead peer that Open MPI 5.0.11 would apply to a
    request it completed in error (cext/dpmpi_late.c). Without failures it sees the large sends'
    completion messages (FIN) and drops none; the data is exact."""
    import numpy as np

    from dpmpi import _guard

    assert _guard.filter_late_messages() == 0
    n, r = comm.Get_size(), comm.Get_rank()
    before = _guard.late_messages()
    out = np.arange(1 << 19, dtype=np.float64) + r  # 4 MiB: rendezvous, read by the receiver (RGET)
    got = np.empty_like(out)
    for _ in range(3):
        comm.Sendrecv(out, (r + 1) % n, 11, got, (r - 1) % n, 11)
        assert np.array_equal(got, np.arange(1 << 19, dtype=np.float64) + (r - 1) % n)
    after = _guard.late_messages()
    assert after["dropped"] == before["dropped"]
    if n > 1:
        assert after["seen"][0] - before["seen"][0] >= 3


def test_persistent_requests_are_made_again_in_place_when_their_communicator_is_rebuilt(comm):
    """What a repair does to the persistent requests made on a communicator it rebuilds
    (dpmpi.comm.rebind): the program's request objects get new requests on the new communicator,
    and mpi4py's own Startall/Waitall use them."""
    from dpmpi import persistent
    from dpmpi.comm import rebind

    n, r = comm.Get_size(), comm.Get_rank()
    out, inc = array.array("q", [0]), array.array("q", [-1])
    ring = [comm.Send_init(out, dest=(r + 1) % n, tag=3), comm.Recv_init(inc, source=(r - 1) % n, tag=3)]
    assert all(isinstance(q, dpmpi.Prequest) for q in ring) and persistent.tracked(comm) == 2
    before = [q.handle for q in ring]
    old, new = comm.mpi, comm.mpi.Dup()
    replaced = rebind(comm, new)  # (what a repair does, with the repaired communicator)
    assert [q.handle for q in ring] != before and all(q.error_comm is comm.mpi for q in ring)
    for k in range(3):
        out[0] = 10 * k + r
        MPI.Prequest.Startall(ring)
        MPI.Request.Waitall(ring)
        assert inc[0] == 10 * k + (r - 1) % n
    MPI.Request.Free(ring[0]), MPI.Request.Free(ring[1])
    replaced.Free()  # (the communicator it replaced; the fixture frees the new one)


def test_a_rebuilt_communicator_keeps_the_programs_name_error_handler_and_attributes(comm):
    """A repair's rebind carried none of them (a stranger's program asserting its communicator's
    name after a recovery failed on every survivor); a job-aborting handler is refused."""
    from dpmpi.comm import rebind

    key = MPI.Comm.Create_keyval()
    handler = MPI.Comm.Create_errhandler(lambda c, code: None)
    comm.Set_name("swarm")
    comm.Set_attr(key, {"cache": [1, 2]})
    comm.Set_errhandler(handler)
    for fatal in (MPI.ERRORS_ARE_FATAL, MPI.ERRORS_ABORT):
        with pytest.raises(ValueError, match="abort the whole job at the first failure"):
            comm.Set_errhandler(fatal)
    old, new = comm.mpi, comm.mpi.Dup()
    new.Set_errhandler(MPI.ERRORS_RETURN)
    rebind(comm, new)  # (what a repair does, with the repaired communicator)
    got = comm.mpi.Get_errhandler()
    assert got == handler and comm.mpi.Get_name() == "swarm"
    assert comm.Get_attr(key) == {"cache": [1, 2]}
    comm.Delete_attr(key)
    third = comm.mpi.Dup()
    rebind(comm, third)
    assert comm.Get_attr(key) is None  # deleted before: not carried
    # (the program's object holds the newest communicator in place; the others, the replaced ones)
    new.Free(), third.Free(), got.Free(), handler.Free(), MPI.Comm.Free_keyval(key)


def test_the_programs_mpi4py_object_takes_the_rebuilt_communicator_in_place(comm):
    """``comm.mpi`` kept in a variable before a repair (as for an mpi4py library) was left on the
    replaced communicator: a Runtime's step that used it failed after every repair, forever.
    rebind now exchanges the handles: the program's object holds the new communicator, and the
    object it returns holds the replaced one (to retire). Never one of mpi4py's predefined
    objects, nor objects of two classes."""
    from dpmpi.comm import rebind, take_handle

    kept, new = comm.mpi, comm.mpi.Dup()
    h_old, h_new = kept.handle, new.handle
    replaced = rebind(comm, new)
    assert comm.mpi is kept and kept.handle == h_new and replaced is new and new.handle == h_old
    assert kept.allreduce(1) == comm.Get_size()
    replaced.Free()
    other = comm.mpi.Dup()
    assert take_handle(MPI.COMM_WORLD, other) == (other, MPI.COMM_WORLD) and other.handle != MPI.COMM_WORLD.handle
    cart = other.Create_cart([other.Get_size()])
    assert take_handle(other, cart) == (cart, other)  # (an Intracomm and a Cartcomm: not exchanged)
    cart.Free(), other.Free()


def test_mpi4pys_hidden_dup_is_recorded_for_the_repair_and_forgotten_when_its_communicator_is_freed(comm):
    """pkl5's collectives run on a Dup that mpi4py caches on the communicator; a repair revokes it
    (dpmpi.ctxcomms), and its record goes when the communicator is freed (a reused handle must
    not revoke a freed Dup)."""
    from mpi4py.util import pkl5

    from dpmpi import ctxcomms

    raw = comm.mpi.Dup()
    handle, n = raw.handle, comm.Get_size()
    assert pkl5.Intracomm(raw).allgather(comm.Get_rank()) == list(range(n))
    assert pkl5.Intracomm(raw).allgather(1) == [1] * n  # (the cached Dup, recorded once)
    assert ctxcomms.recorded(handle) == 1
    raw.Free()
    assert ctxcomms.recorded(handle) == 0


def test_a_nonblocking_collective_started_while_an_idup_is_in_progress_gets_its_own_result(comm):
    """Open MPI 5.0.11 makes an Idup in steps started from MPI's progress: with another thread
    making progress, a rank that starts the duplication's next step before the program's
    Iallreduce meets a rank that starts it after (MPI_ERR_TRUNCATE or a wrong sum; plain mpi4py
    fails so). Rank 0 lets the helper thread progress between the two calls; every sum is right."""
    import threading
    import time

    import numpy as np

    helper_comm = comm.mpi.Dup()
    stop = threading.Event()

    def progress():  # (owner: this test; ends before helper_comm is freed)
        req = helper_comm.Irecv(bytearray(1), source=MPI.ANY_SOURCE, tag=7)
        while not stop.is_set():
            req.Test()
            time.sleep(0.0005)
        req.Cancel()
        req.Wait()

    thread = threading.Thread(target=progress)
    thread.start()
    sums = []
    try:
        for k in range(6):
            dup, req = comm.Idup()
            if comm.Get_rank() == 0:
                time.sleep(0.05)
            s = np.zeros(1)
            r2 = comm.Iallreduce(np.array([float(k + 1)]), s, op=MPI.SUM)
            MPI.Request.Waitall([req, r2])
            sums.append(s[0])
            assert dup.allreduce(1) == comm.Get_size()
            dup.Free()
    finally:
        stop.set()
        thread.join()
        helper_comm.Free()
    assert sums == [float((k + 1) * comm.Get_size()) for k in range(6)]


def test_matched_probes_return_dpmpi_messages_and_a_dropped_one_is_received_for_its_sender(comm):
    """Mprobe/improbe and dpmpi.Message.Probe return dpmpi.Messages that know their size
    and receive as mpi4py's do; a message the program drops unreceived is received into scratch
    memory, so that its sender's Wait completes (a matched message is off the queue a revoke
    empties: its sender waited for ever)."""
    import gc

    import numpy as np

    r, n = comm.Get_rank(), comm.Get_size()
    right, left = (r + 1) % n, (r - 1) % n
    big = 1 << 16  # (doubles: a rendezvous send, which waits for its receiver)
    req = comm.Isend(np.full(big, float(r)), dest=right, tag=3)
    msg = comm.Mprobe(source=left, tag=3)
    assert isinstance(msg, dpmpi.Message) and msg.nbytes == 8 * big
    buf = np.empty(big)
    msg.Recv(buf)
    req.Wait()
    assert buf[0] == float(left) and not msg

    req = comm.isend({"r": r}, dest=right, tag=4)
    msg = None
    while msg is None:
        msg = comm.improbe(source=left, tag=4)
    assert isinstance(msg, dpmpi.Message) and msg.recv() == {"r": left}
    req.Wait()

    req = comm.Isend(np.full(big, 1.0), dest=right, tag=5)
    msg = dpmpi.Message.Probe(comm, source=left, tag=5)
    assert isinstance(msg, dpmpi.Message) and msg.error_comm == comm.mpi
    del msg  # dropped unreceived
    gc.collect()
    req.Wait()  # (hung before: the receiver had matched the message and never received it)
    comm.Barrier()


def test_a_communicator_made_while_an_idup_of_its_parent_is_in_progress_does_not_hang(comm):
    """Open MPI 5.0.11: a Split of a communicator whose Idup is still in progress hung (plain
    mpi4py, 4 ranks, no other thread: every run). dpmpi waits for the Idup first."""
    dup, req = comm.Idup()
    sub = comm.Split(comm.Get_rank() % 2, comm.Get_rank())
    copy = comm.Dup()
    req.Wait()
    assert dup.allreduce(1) == comm.Get_size()
    assert sub.allreduce(1) == (comm.Get_size() + 1 - comm.Get_rank() % 2) // 2
    assert copy.allreduce(1) == comm.Get_size()
    for c in (dup, sub, copy):
        c.Free()


def test_partitioned_communication_is_refused_with_the_reason(comm):
    """Open MPI 5.0.11's partitioned point-to-point runs over Idups of COMM_WORLD that every
    process starts at its first call: with an idle spare a stranger's first exchange waited for
    ever, and after a death they cannot complete. dpmpi refuses it at the call, saying why."""
    import numpy as np

    for name in ("Psend_init", "Precv_init"):
        with pytest.raises(NotImplementedError, match="partitioned communication.*Send_init/Recv_init"):
            getattr(comm, name)(np.zeros(4), 2, 0, 3)


def test_isendrecv_and_sendrecv_replace_keep_mpis_semantics(comm):
    """dpmpi's Isendrecv, Isendrecv_replace and Sendrecv_replace are a receive plus a send of a copy
    (Open MPI 5.0.11's Isendrecv request never fails when a peer dies, its Sendrecv_replace can
    segfault: test_faults). What the program sees is MPI's: the data, the receive's status,
    buffers given as objects or as [buf, count, datatype] with a derived datatype on either side,
    completion by dpmpi's Wait, by mpi4py's Waitall over a mix and by Test; no warning."""
    import warnings

    import numpy as np
    from mpi4py import MPI

    import dpmpi

    r, n = comm.Get_rank(), comm.Get_size()
    right, left = (r + 1) % n, (r - 1) % n
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = np.empty(5)
        req = comm.Isendrecv(np.arange(5.0) + 10 * r, right, 7, got, left, 7)
        assert isinstance(req, dpmpi.Request)
        status = MPI.Status()
        req.Wait(status)
        assert got.tolist() == (np.arange(5.0) + 10 * left).tolist()
        assert (status.Get_source(), status.Get_tag(), status.Get_count(MPI.DOUBLE)) == (left, 7, 5)

        vec = MPI.DOUBLE.Create_vector(3, 1, 2).Commit()  # every other double of 6
        try:
            strided, packed = np.arange(6.0) + 100 * r, np.empty(3)
            every_other = np.zeros(6)
            a = comm.Isendrecv([strided, 1, vec], right, 8, packed, left, 8)
            b = comm.Isendrecv(np.arange(3.0) - r, left, 9, [every_other, 1, vec], right, 9)
            c = comm.Isend(np.full(2, r, dtype="i"), right, 10)
            d = comm.Irecv(plain := np.empty(2, dtype="i"), left, 10)
            MPI.Request.Waitall([a, b, c, d])
        finally:
            vec.Free()
        assert packed.tolist() == [100.0 * left, 100.0 * left + 2, 100.0 * left + 4]
        assert every_other.tolist() == [-right, 0, 1 - right, 0, 2 - right, 0]
        assert plain.tolist() == [left, left]

        buf = np.arange(4, dtype="i") + r
        q = comm.Isendrecv_replace(buf, right, 11, left, 11)
        ints = np.full(3, r, dtype="i8")
        q2 = comm.Isendrecv_replace([ints, 3, MPI.INT64_T], left, 12, right, 12)
        while not dpmpi.Request.Testall([q, q2]):
            pass
        assert buf.tolist() == (np.arange(4) + left).tolist()
        assert ints.tolist() == [right] * 3

        swapped = np.arange(3, dtype="i") * r
        comm.Sendrecv_replace(swapped, right, 13, left, 13, status)
        assert swapped.tolist() == (np.arange(3) * left).tolist() and status.Get_source() == left
        vec = MPI.INT.Create_vector(2, 1, 2).Commit()
        try:
            odd = np.full(4, r, dtype="i")
            comm.Sendrecv_replace([odd, 1, vec], left, 14, right, 14)
        finally:
            vec.Free()
        assert odd.tolist() == [right, r, right, r]
        edge = np.full(2, 5.0)
        comm.Sendrecv_replace(edge, MPI.PROC_NULL, 0, MPI.PROC_NULL, 0)
        assert edge.tolist() == [5.0, 5.0]
        end = np.full(2, float(r))  # (an open chain's end: dpmpi sends it, Open MPI's can segfault)
        comm.Sendrecv_replace(end, right, 15, MPI.PROC_NULL, 15, status)
        assert end.tolist() == [r, r] and status.Get_source() == MPI.PROC_NULL and status.Get_count(MPI.DOUBLE) == 0
        comm.Recv(end, left, 15)
        assert end.tolist() == [left, left]

        empty = comm.Isendrecv(bytearray(), MPI.PROC_NULL, 0, bytearray(), MPI.PROC_NULL, 0)
        empty.Wait(status)
        assert status.Get_source() == MPI.PROC_NULL
        with pytest.raises(TypeError, match="recvbuf"):
            comm.Isendrecv(np.ones(1), right)
