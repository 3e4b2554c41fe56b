"""The GPU path's pure decisions and the fake backend's local parts (no MPI job, no GPU)."""

import numpy as np
import pytest
from mpi4py import MPI

from dpmpi.gpu import backend as gpu_backend
from dpmpi.gpu import cupy_backend, fake, poll, settings


def test_decide_order():
    d = poll.decide
    assert d(True, None, False, 0, 1) == "done"
    assert d(True, "unhandled cuda error", False, 0, 1) == "async-error"  # results undefined: not done
    assert d(True, None, True, 5, 1) == "done"  # whole results win; the notice ends the next wait
    assert d(False, None, True, 0, 1) == "peer-failed"
    assert d(False, None, False, 1, 1) == "deadline"
    assert d(False, None, False, 0.5, 1) == "wait"


def test_naps_grow_to_a_millisecond():
    naps, nap = [], 0.0
    for _ in range(12):
        nap = poll.next_nap(nap)
        naps.append(nap)
    assert naps[0] == 20e-6 and naps == sorted(naps) and naps[-1] == 1e-3
    nap = 0.0
    for _ in range(12):  # a copy's wait: capped lower (it ends with the program's step)
        nap = poll.next_nap(nap, poll.COPY_NAP_MAX)
    assert nap == 100e-6


def test_unique_id_round_trip_as_cupy_signed_chars():
    raw = bytes(range(128))[::-1]
    cid = cupy_backend.id_from_bytes(raw)
    assert len(cid) == 128 and min(cid) >= -128 and max(cid) <= 127
    assert cupy_backend.id_to_bytes(cid) == raw
    assert cupy_backend.id_to_bytes((-1, -128, 127)) == b"\xff\x80\x7f"


def test_op_names():
    assert gpu_backend.op_name("SUM") == "sum" and gpu_backend.op_name(MPI.MAX) == "max"
    with pytest.raises(ValueError, match="NCCL reduces with one of"):
        gpu_backend.op_name(MPI.BAND)


def test_fake_fault_specs():
    got = fake.parse_faults("1:collective@5:HANG, 0:abort:hang,2:collective:ASYNC_ERROR")
    assert got == [fake.FakeFault(1, "collective", 5, "HANG"), fake.FakeFault(0, "abort", 1, "HANG"),
                   fake.FakeFault(2, "collective", 1, "ASYNC_ERROR")]
    for bad in ("1:abort:ASYNC_ERROR", "x:collective:HANG", "1:collective@0:HANG", "1:step:HANG", "1:collective"):
        with pytest.raises(ValueError, match=settings.ENV_FAKE_FAULTS):
            fake.parse_faults(bad)


def test_settings_refuse_bad_values(monkeypatch):
    monkeypatch.setenv(settings.ENV_BACKEND, "rocm")
    with pytest.raises(ValueError, match="DPMPI_GPU_BACKEND='rocm': use one of cupy, fake"):
        settings.backend_name()
    monkeypatch.setenv(settings.ENV_TIMEOUT, "-1")
    with pytest.raises(ValueError, match="DPMPI_GPU_TIMEOUT='-1' is out of range"):
        settings.op_timeout()
    monkeypatch.setenv(settings.ENV_TIMEOUT, "2.5")
    assert settings.op_timeout() == 2.5


def test_fake_streams_copy_in_order_and_events_poll():
    be = fake.FakeBackend()
    dev = be.asarray(np.arange(8, dtype=np.float32))
    assert be.is_device(dev) and not be.is_device(np.zeros(2)) and be.is_device(dev * 2)
    host = bytearray(32)
    s = be.new_stream()
    be.to_host_async(dev, host, s)
    ev = be.record(s)
    assert bytes(host) == bytes(32)  # nothing runs before the event is polled (as on a device)
    assert be.event_done(ev)
    assert np.frombuffer(host, np.float32).tolist() == list(range(8))
    back = be.zeros(8, "float32")
    be.to_device_async(host, back, s)
    assert be.event_done(be.record(s)) and np.array_equal(back, dev)
    with pytest.raises(ValueError, match="copy of 32 bytes into a buffer of 16"):
        be.to_host_async(dev, bytearray(16), s)


def test_fake_pinned_registration_rules():
    be = fake.FakeBackend()
    buf = bytearray(64)
    h = be.register_host(buf)
    with pytest.raises(RuntimeError, match="registered already"):
        be.register_host(buf)
    be.unregister_host(h)
    with pytest.raises(RuntimeError, match="never registered"):
        be.unregister_host(h)


def test_cupy_backend_says_what_is_missing(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_cupy(name, *args, **kwargs):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cupy)
    with pytest.raises(ImportError, match=r"pip install 'dpmpi\[gpu\]'.*DPMPI_GPU_BACKEND=fake"):
        cupy_backend.CupyBackend()


def test_snapshot_of_fake_device_arrays_round_trip(monkeypatch):
    """Device arrays in a Snapshot: copied straight into the registered slots on the backend's own
    stream, restored to the device after the checksum; host arrays beside them as before; the
    slots are unregistered at close; a corrupt device part of a slot is caught."""
    import dpmpi
    from dpmpi.gpu import select as gb

    monkeypatch.setenv(settings.ENV_BACKEND, "fake")
    monkeypatch.setattr(gb, "_BACKEND", None)
    be = gb.get()
    rng = np.random.default_rng(3)
    dev = be.asarray(rng.standard_normal(10_007))
    dev_i = be.asarray(rng.integers(0, 99, size=(7, 5), dtype=np.int32))
    host = rng.standard_normal(33)
    before = (dev.copy(), dev_i.copy(), host.copy())
    with dpmpi.Snapshot(MPI.COMM_SELF, {"w": dev, "i": dev_i, "h": host}) as snap:
        assert len(be.registered) == 2  # the two own slots, which the device copies go straight into
        snap.stage()
        snap.commit(1)
        dev[...] = 0
        dev_i[...] = -1
        host[...] = 7
        assert snap.restore() == 1
        assert np.array_equal(dev, before[0]) and np.array_equal(dev_i, before[1])
        assert np.array_equal(host, before[2])
        assert be.is_device(dev)  # the program's arrays
        assert set(snap.arrays) == {"w", "i", "h"} and snap.arrays["w"] is dev
        dev[...] = 5
        snap.stage()
        snap.commit(2)
        slot = snap._buffers.own[snap._buffers.committed]
        slot.buffer()[8] ^= 0x01  # inside "w": a device array's bytes are checksummed too
        dev[...] = 0
        with pytest.raises(dpmpi.SnapshotLostError, match="checksum"):
            snap.restore()
        # the copy to the device ran while the checksum was checked (as a host array's copy back
        # checks on the way): the device holds the corrupt copy, and the restore failed for it
        assert np.count_nonzero(dev != 5) == 1
    assert be.registered == {}  # unregistered before the memory went
    monkeypatch.setattr(gb, "_BACKEND", None)


class _Never:
    """A backend whose work never completes, and a communicator with an optional async error."""

    def __init__(self, error=None):
        self.error = error

    def event_done(self, event):
        return False

    def async_error(self):
        return self.error


def test_waits_end_without_a_device():
    from dpmpi.errors import DpmpiError, ProcFailedError

    with pytest.raises(ProcFailedError, match="asynchronous error"):
        poll.wait(_Never(), None, _Never("unhandled system error"), None, 5.0, "NcclComm.Allreduce")
    with pytest.raises(ProcFailedError, match="did not complete within 0.05 s"):
        poll.wait(_Never(), None, _Never(), None, 0.05, "NcclComm.Allreduce")
    with pytest.raises(DpmpiError, match="did not finish a copy") as info:  # a copy needs no peer
        poll.wait(_Never(), None, None, None, 0.05, "device snapshot")
    assert not isinstance(info.value, ProcFailedError)


def test_operation_arguments_are_checked_before_anything_runs():
    be = fake.FakeBackend()
    a, b = be.zeros(6, "float32"), be.zeros(12, "float32")
    assert gpu_backend.check_pair(be, "Allreduce", MPI.IN_PLACE, a, (1, 1), 2) == (a, a)
    assert gpu_backend.check_pair(be, "Allgather", a, b, (2, 1), 2) == (a, b)
    with pytest.raises(ValueError, match="ratio 1:2"):
        gpu_backend.check_pair(be, "Allgather", b, a, (2, 1), 2)
    with pytest.raises(TypeError, match="sendbuf is float64, recvbuf is float32"):
        gpu_backend.check_pair(be, "Allreduce", be.zeros(6, "float64"), a, (1, 1), 2)
    with pytest.raises(TypeError, match="must be a device array of the fake backend"):
        gpu_backend.check_array(be, "Bcast", "buf", np.zeros(3))
    with pytest.raises(ValueError, match="C-contiguous"):
        gpu_backend.check_array(be, "Bcast", "buf", be.zeros((4, 4), "int32")[:, 1])
    with pytest.raises(TypeError, match="dtype complex128"):
        gpu_backend.check_array(be, "Bcast", "buf", be.zeros(2, "complex128"))
