"""restore(swap=True) on one process (MPI singleton, COMM_SELF): the arrays take the snapshot's
pages instead of a copy (dpmpi.snapshot.pageswap, cext/dpmpi_pages.c), the own copy is refilled
from them in the background. The multi-rank case: tests/test_workloads.py (kills with
DPMPI_SWAP_MIN set, asserting which ranks exchanged)."""
import mmap

import numpy as np
import pytest

import dpmpi
from mpi4py import MPI


@pytest.fixture(autouse=True)
def exchange_on(monkeypatch):
    """Page exchange is off by default (DPMPI_SWAP_MIN=0): on from 1 MiB here."""
    monkeypatch.setenv("DPMPI_SWAP_MIN", str(1 << 20))


def big(seed, n=(3 << 20) // 8 + 5):
    """Two arrays over DPMPI_SWAP_MIN (1 MiB here), neither a whole number of pages, and a small
    one that is always copied."""
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal(n), "m": rng.standard_normal(n).astype(np.float32),
            "small": rng.standard_normal(100)}


def fill(arrays, seed):
    for k, v in big(seed, len(arrays["w"])).items():
        arrays[k][:] = v


def same(a, b):
    return all(np.array_equal(a[k], b[k]) for k in b)


def locked_kib():
    status = open("/proc/self/status").read()
    return int(status.split("VmLck:")[1].split()[0])


@pytest.mark.parametrize("limited", [True, False], ids=["memlock-limited", "memlock-unlimited"])
def test_a_restore_by_page_exchange_is_bit_exact_and_the_copy_is_refilled(limited, monkeypatch):
    from dpmpi.snapshot import native

    monkeypatch.setattr(native, "lock_unlimited", lambda: not limited)
    arrays, ref = big(1), big(1)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage()
        snap.commit(1)
        digest = snap.holdings()[0][1]
        locked = locked_kib()
        for seed in range(10, 15):
            fill(arrays, seed)
            assert snap.restore(swap=True) == 1
            assert snap.last_restore["swapped_mib"] > 2.9  # at least the whole pages of "w"
            assert same(arrays, ref)  # readable at once
            snap.wait_refill()
            assert snap.holdings()[0] == {1: digest}  # the own copy holds epoch 1 again
        # where a limit applies, the kernel's count of locked memory does not grow with each
        # exchange (it did when a locked range was moved); the slots are locked again
        assert locked_kib() == locked or not limited
        assert snap.locked
        fill(arrays, 20)
        snap.stage()
        snap.commit(2)
        fill(arrays, 21)
        assert snap.restore() == 2 and same(arrays, big(20))  # the copy path after exchanges
        assert snap.last_restore["swapped_mib"] == 0
        fill(arrays, 22)
        assert snap.restore(swap=True) == 2 and same(arrays, big(20))
        fill(arrays, 23)  # stage() waits for the refill itself
        snap.stage()
        snap.commit(3)
        fill(arrays, 24)
        assert snap.restore(swap=True) == 3 and same(arrays, big(23))


def test_a_corrupt_copy_is_caught_before_any_page_is_exchanged():
    arrays = big(2)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage()
        snap.commit(1)
        slot = snap._buffers.own[snap._buffers.committed]
        slot.buffer()[(1 << 20) + 123] ^= 0x01  # inside the whole pages of "w"
        fill(arrays, 3)
        with pytest.raises(dpmpi.SnapshotLostError, match="checksum"):
            snap.restore(swap=True)
        assert same(arrays, big(3))  # untouched


def test_bytes_written_before_wait_refill_are_no_error():
    """A program may write into its arrays before its update (halo rows received into the state,
    as in examples/jacobi.py): no error; the refilled copy holds, for those bytes, whichever
    version the copy thread read (the program rewrites them before using them), the rest exactly."""
    arrays = big(7)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage()
        snap.commit(1)
        fill(arrays, 8)
        assert snap.restore(swap=True) == 1
        arrays["small"][:] = 5.0  # a "halo" written at once, while the copy thread reads
        snap.wait_refill()
        fill(arrays, 9)
        assert snap.restore() == 1
        assert all(np.array_equal(arrays[k], big(7)[k]) for k in ("w", "m"))
        small = arrays["small"]
        assert np.array_equal(small, big(7)["small"]) or (small == 5.0).all()


def test_without_swap_below_the_minimum_or_by_default_nothing_is_exchanged(monkeypatch):
    arrays = big(4)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage()
        snap.commit(1)
        fill(arrays, 5)
        assert snap.restore() == 1 and snap.last_restore["swapped_mib"] == 0 and same(arrays, big(4))
    for minimum in (str(64 << 20), ""):  # above the arrays' sizes; unset (the default: never)
        monkeypatch.setenv("DPMPI_SWAP_MIN", minimum)
        with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
            snap.stage()
            snap.commit(1)
            fill(arrays, 6)
            assert snap.restore(swap=True) == 1 and snap.last_restore["swapped_mib"] == 0 and same(arrays, big(4))
            snap.wait_refill()


def test_shared_and_file_memory_keeps_its_pages(tmp_path):
    """A file mapping (np.memmap) or shared memory would lose its file or its sharers if its pages
    were exchanged: it is copied."""
    n = (2 << 20) // 8
    on_file = np.memmap(tmp_path / "w.bin", dtype=np.float64, mode="w+", shape=(n,))
    shared_map = mmap.mmap(-1, n * 8)  # MAP_SHARED anonymous
    shared = np.frombuffer(shared_map, dtype=np.float64)
    on_file[:], shared[:] = 1.5, 2.5
    with dpmpi.Snapshot(MPI.COMM_SELF, {"f": on_file, "s": shared}) as snap:
        snap.stage()
        snap.commit(1)
        on_file[:], shared[:] = -1.0, -2.0
        assert snap.restore(swap=True) == 1 and snap.last_restore["swapped_mib"] == 0
        snap.wait_refill()
    on_file.flush()
    assert (np.fromfile(tmp_path / "w.bin", dtype=np.float64) == 1.5).all()  # written through to the file
    assert (np.frombuffer(shared_map, dtype=np.float64) == 2.5).all()


def test_after_wait_refill_copy_only_the_arrays_may_change_and_the_copy_holds_the_epoch():
    """``wait_refill(copy_only=True)`` (dpmpi.Runtime's update after a restore) returns once the
    arrays are copied back into the own copy, not after the rest of that background job (a
    replacement's new slots, the re-replication's start): writing the arrays then leaves the
    epoch intact, and the next stage and restore see it."""
    arrays = big(3)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage()
        snap.commit(1)
        digest = snap.holdings()[0][1]
        fill(arrays, 30)
        assert snap.restore(swap=True) == 1 and same(arrays, big(3))
        snap.wait_refill(copy_only=True)
        assert snap.holdings()[0] == {1: digest}
        fill(arrays, 31)  # (the step's update)
        assert snap.restore(swap=True) == 1 and same(arrays, big(3))
        snap.wait_refill(copy_only=True)
        fill(arrays, 32)
        snap.stage()  # (waits for the rest of the refill job)
        snap.commit(2)
        fill(arrays, 33)
        assert snap.restore() == 2 and same(arrays, big(32))
