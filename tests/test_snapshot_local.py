"""dpmpi.Snapshot on one process (MPI singleton, COMM_SELF): the C copy engine, double buffering,
checksums, the mlock fallback, persistence, and bad input. The multi-rank and fault cases are in
test_snapshot.py."""
import ctypes
import inspect
import mmap
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import dpmpi
from dpmpi import jobid
from dpmpi.snapshot.native import Engine
from mpi4py import MPI


def state(seed=0, n=100_003):
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal(n),  # 800,024 bytes: not a multiple of the 64-byte block
        "m": rng.integers(0, 2**31, size=(37, 11), dtype=np.int32),
        "b": bytearray(rng.bytes(77)),
    }


def fill(arrays, seed):
    fresh = state(seed, n=len(arrays["w"]))
    for k in arrays:
        arrays[k][:] = fresh[k]


def same(a, b):
    return all(bytes(memoryview(a[k])) == bytes(memoryview(b[k])) for k in a)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_round_trip_is_bit_exact(threads):
    arrays = state(1)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays, threads=threads) as snap:
        snap.stage()
        snap.commit(1)
        fill(arrays, 2)
        assert not same(arrays, state(1))
        assert snap.restore() == 1
        assert same(arrays, state(1))
        assert snap.epoch == 1 and snap.locked  # root here: CAP_IPC_LOCK


def test_an_array_in_fortran_order_round_trips():
    """Refused as "not C-contiguous" before the twenty-first session (its bytes are contiguous)."""
    f = np.asfortranarray(np.arange(24.0).reshape(4, 6))
    c = np.arange(5.0)
    with dpmpi.Snapshot(MPI.COMM_SELF, {"f": f, "c": c}) as snap:
        snap.stage()
        snap.commit(1)
        f[1, :] = -1.0
        c += 1.0
        assert snap.restore() == 1
    assert np.array_equal(f, np.arange(24.0).reshape(4, 6)) and f.flags.f_contiguous
    assert np.array_equal(c, np.arange(5.0))


def _draw(gen):
    if isinstance(gen, random.Random):
        return np.array([gen.random() for _ in range(4)])
    return gen.random_sample(4) if isinstance(gen, np.random.RandomState) else gen.random(4)


def test_a_random_generator_in_the_state_draws_again_what_it_drew_after_the_epoch():
    """A generator made once and drawn from in every step was not part of the state before the
    twenty-second session: a recovered run drew other numbers (bench/strangers/rng_state.py)."""
    gens = {"pcg": np.random.default_rng(7), "mt": np.random.Generator(np.random.MT19937(7)),
            "legacy": np.random.RandomState(7), "python": random.Random(7)}
    w = np.zeros(3)
    with dpmpi.Snapshot(MPI.COMM_SELF, {"w": w, **gens}) as snap:
        snap.stage()
        snap.commit(1)
        after = {k: _draw(g) for k, g in gens.items()}
        w += 1.0
        assert snap.restore() == 1
        again = {k: _draw(g) for k, g in gens.items()}
    assert all(np.array_equal(after[k], again[k]) for k in gens) and not w.any()


def test_a_random_generator_is_read_back_from_the_snapshot_files_too(tmp_path):
    rng, w = np.random.default_rng(3), np.arange(3.0)
    with dpmpi.Snapshot(MPI.COMM_SELF, {"w": w, "rng": rng}, persist_dir=tmp_path) as snap:
        snap.stage()
        snap.commit(1)
        snap.wait()
    after = rng.random(4)
    w[:] = 0.0
    assert dpmpi.Snapshot.load(MPI.COMM_SELF, {"w": w, "rng": rng}, tmp_path) == 1
    assert np.array_equal(rng.random(4), after) and np.array_equal(w, np.arange(3.0))


def test_checksum_does_not_depend_on_the_number_of_threads():
    digests = set()
    for threads in (1, 2, 4):
        with dpmpi.Snapshot(MPI.COMM_SELF, state(3), threads=threads) as snap:
            snap.stage()
            snap.commit(1)
            digests.add(snap.holdings()[0][1])
    assert len(digests) == 1


def test_c_checksum_matches_the_copy_engine_and_sees_every_byte():
    from dpmpi._cext import ffi, lib

    data = bytearray(np.random.default_rng(4).bytes(3 * (1 << 20) + 13))  # 3 units and a tail
    ptr = ffi.from_buffer(data)
    one = lib.dpmpi_checksum(1, ffi.new("char *[]", [ptr]), ffi.new("size_t[]", [len(data)]), 0)
    engine = Engine(2)
    assert engine.checksum([ptr], [len(data)]) == one
    for pos in (0, 63, 64, 1 << 20, len(data) - 1):  # first, block edge, unit edge, tail
        data[pos] ^= 0x10
        assert lib.dpmpi_checksum(1, ffi.new("char *[]", [ptr]), ffi.new("size_t[]", [len(data)]), 0) != one
        data[pos] ^= 0x10
    swapped = bytearray(data)
    swapped[0:8], swapped[8:16] = data[64:72], data[0:8]
    swapped[64:72] = data[8:16]  # same multiset of words in lane 0 and 1, different places
    sp = ffi.from_buffer(swapped)
    assert lib.dpmpi_checksum(1, ffi.new("char *[]", [sp]), ffi.new("size_t[]", [len(data)]), 0) != one


def _threads_named(name):
    """{thread id: nice value} of this process's threads called ``name``."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != name:
                    continue
            with open(f"/proc/self/task/{tid}/stat") as f:
                out[int(tid)] = int(f.read().rsplit(")", 1)[1].split()[16])  # field 19: nice
        except FileNotFoundError:
            continue
    return out


def test_only_the_copy_threads_run_niced():
    """The replication thread calls MPI and holds Open MPI's progress locks there: niced, it kept
    a busy node's program waiting (docs/threads.md, invariant 11). The copy threads never call
    MPI and run at DPMPI_SNAPSHOT_NICE (19)."""
    from dpmpi.snapshot.replicator import Replicator

    mine = os.getpriority(os.PRIO_PROCESS, 0)
    before = set(_threads_named("dpmpi-repl"))
    repl, engine = Replicator(), Engine(2)
    try:
        deadline = time.monotonic() + 10  # each thread names itself and sets its priority as it starts
        while True:
            repl_threads = {t: n for t, n in _threads_named("dpmpi-repl").items() if t not in before}
            copy_threads = _threads_named("dpmpi-copy")
            started = len(repl_threads) == 1 and len(copy_threads) >= 2 and all(copy_threads.values())
            if started or time.monotonic() > deadline:
                break
            time.sleep(0.001)
        assert list(repl_threads.values()) == [mine], repl_threads
        assert len(copy_threads) >= 2 and all(n == max(mine, 19) for n in copy_threads.values()), copy_threads
    finally:
        assert repl.close(1.0)
        del engine


def _vm_flags(address):
    """The VmFlags of the mapping of this process that holds ``address``."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


HUGE_SLOT = """
from dpmpi.snapshot.native import Slot, cext
slot = Slot(8 << 20, False)
base = int(cext().ffi.cast("uintptr_t", slot.ptr)) - slot.shift
print(base % (2 << 20) == 0, base)
"""


@pytest.mark.parametrize("setting", ["", "0"])
def test_large_slots_ask_for_huge_pages_unless_turned_off(setting, tmp_path):
    """Slots of 4 MiB or more are 2 MiB-aligned and advised MADV_HUGEPAGE (the replication's
    single-copy reads ran 1.2-1.4x faster); DPMPI_HUGE_PAGES=0 turns it off."""
    program = HUGE_SLOT + textwrap.dedent(inspect.getsource(_vm_flags)) + "print('hg' in _vm_flags(base))\n"
    env = dict(os.environ, DPMPI_HUGE_PAGES=setting)
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)  # the installed dpmpi, not the checkout's
    assert out.returncode == 0, out.stderr
    aligned, _base, advised = out.stdout.split()
    assert aligned == "True" or setting == "0", out.stdout
    # (a kernel built without transparent huge pages refuses the advice: nothing to see there)
    if setting == "0" or os.path.isdir("/sys/kernel/mm/transparent_hugepage"):
        assert advised == ("False" if setting == "0" else "True"), out.stdout


def _address(buf):
    from dpmpi.snapshot.native import cext
    return int(cext().ffi.cast("uintptr_t", cext().ffi.from_buffer(buf)))


def test_slots_start_at_the_arrays_offset_in_a_page_and_replica_slots_at_their_owners():
    """The kernel's copy between processes ran 3-4x slower here when its destination lay a few
    bytes past its source in a page (a page-aligned slot restored into numpy arrays, which start
    16 bytes into a page): own slots start where most registered bytes start in their page, and
    the replica slots of an owner where the owner's own slots start."""
    from dpmpi.snapshot.buffers import Buffers
    from dpmpi.snapshot.layout import layout, signature
    from dpmpi.snapshot.replication import Replication

    raw = np.zeros((4 << 20) + 4096, np.uint8)
    big = raw[40:40 + (4 << 20)]  # most of the bytes, 40 bytes past numpy's own offset
    arrays = {"small": np.zeros(10), "big": big}
    entries = layout(arrays)
    buffers = Buffers(arrays, entries, 1, False)
    big_entry = next(e for e in entries if e.name == "big")
    for slot in buffers.own:
        assert (_address(slot.buffer()) + big_entry.offset) % 4096 == _address(big) % 4096
    assert buffers.shift == _address(big) % 4096
    repl = Replication(None, entries, 1, False, 0, buffers.shift)
    repl.owners, repl.layouts, repl.shifts = (1,), {1: signature(entries)}, {1: 48}
    repl.make_slots()
    first = repl.held[1]
    assert [s.shift for s in first] == [48, 48] and all(_address(s.buffer()) % 4096 == 48 for s in first)
    repl.shifts = {1: 16}  # a replacement whose own slots start elsewhere: the slots that may hold
    repl.make_slots()      # its copy are kept (a restore's re-replication counts on them)
    assert repl.held[1] is first
    repl.layouts = {1: signature(layout({"big": np.zeros(3 << 20)}))}
    repl.make_slots()  # another size: made again, where the owner's slots start
    assert repl.held[1] is not first and [s.shift for s in repl.held[1]] == [16, 16]
    buffers.engine.wait()


def test_a_copy_stopped_half_way_never_touches_the_committed_epoch():
    arrays = state(10, n=3 << 20)  # 24 MiB: the copy is stopped inside the third 1 MiB unit
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage()
        snap.commit(1)
        fill(arrays, 11)
        snap.stage()
        snap.commit(2)
        fill(arrays, 12)
        snap._inject_copy_failure(2 * (1 << 20) + 512)
        snap.stage()
        with pytest.raises(dpmpi.SnapshotCopyError, match="epoch 2 is intact"):
            snap.commit(3)
        snap._inject_copy_failure(0)
        fill(arrays, 13)
        assert snap.restore() == 2
        assert same(arrays, state(11, n=3 << 20))


def test_an_exception_between_stage_and_commit_keeps_the_previous_epoch():
    arrays = state(20)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage()
        snap.commit(5)
        fill(arrays, 21)
        snap.stage()  # staged, never committed: the program failed here
        fill(arrays, 22)
        assert snap.restore() == 5
        assert same(arrays, state(20))
        fill(arrays, 23)  # and it goes on normally
        snap.stage()
        snap.commit(6)
        fill(arrays, 24)
        assert snap.restore() == 6 and same(arrays, state(23))


def test_a_flipped_byte_in_the_snapshot_is_caught():
    arrays = state(30)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage()
        snap.commit(1)
        slot = snap._buffers.own[snap._buffers.committed]  # the committed slot
        slot.buffer()[12345] ^= 0x01
        with pytest.raises(dpmpi.SnapshotLostError, match="checksum"):
            snap.restore()


def test_a_restore_at_most_an_epoch_takes_the_newest_not_past_it_and_drops_the_newer():
    """``restore(at_most=E)`` (dpmpi.Runtime, a failure between two runs: not the next run's
    start): the newest epoch not past E; the newer one is dropped, so that E's successor can be
    committed again. Without a bound, the newest."""
    arrays = state(40)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage()
        snap.commit(2)
        fill(arrays, 41)
        snap.stage()
        snap.commit(3)
        fill(arrays, 42)
        assert snap.restore(at_most=2) == 2 and same(arrays, state(40)) and snap.epoch == 2
        assert snap.holdings() == {0: {2: snap.holdings()[0][2]}}  # (3 dropped)
        fill(arrays, 43)
        snap.stage()
        snap.commit(3)  # (again: the run's start taken anew)
        fill(arrays, 44)
        assert snap.restore(at_most=5) == 3 and same(arrays, state(43))
        assert snap.restore() == 3
        with pytest.raises(ValueError, match="at_most"):
            snap.restore(at_most=-1)


def test_the_runtimes_epochs_take_a_runs_start_between_two_steps():
    """dpmpi.epochs: the state after a step, then a later run's start at that step, then the next
    step's, in growing epochs; events count steps."""
    from dpmpi import epochs

    seq = [epochs.after(0), epochs.after(4), epochs.run_start(4), epochs.after(5), epochs.run_start(5)]
    assert seq == sorted(set(seq))
    assert [epochs.step_of(e) for e in seq] == [0, 4, 4, 5, 5] and epochs.step_of(-1) == -1
    assert epochs.by_step({0: 10, 8: 11, 9: 12}) == {0: 10, 4: 11}
    # a Runtime's persist_every=K: the states after every K-th step (not the runs' starts), as before
    k = epochs.every(5)
    assert [s for s in range(30) if epochs.after(s) % k == 0] == [0, 5, 10, 15, 20, 25]
    assert all(epochs.run_start(s) % k for s in range(30)) and epochs.every(0) == 0 and epochs.every(-1) == -1


def test_arrays_that_still_hold_the_restored_epoch_are_not_copied():
    arrays = state(31)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage()
        snap.commit(1)
        assert snap.restore(arrays_hold=1) == 1 and same(arrays, state(31))
        assert snap.last_restore["kept"] is True  # nothing copied
        fill(arrays, 32)  # modified: the caller no longer promises anything
        assert snap.restore() == 1 and same(arrays, state(31)) and snap.last_restore["kept"] is False
        fill(arrays, 33)
        snap.stage()
        snap.commit(2)
        fill(arrays, 34)
        # a promise about another epoch than the one restored changes nothing
        assert snap.restore(arrays_hold=1) == 2 and same(arrays, state(33)) and snap.last_restore["kept"] is False
        with pytest.raises(ValueError, match="arrays_hold"):
            snap.restore(arrays_hold=-1)
        assert snap.restore(carry=7) == 2 and snap.last_restore["carried"] == 7  # the largest over ranks (one here)
        assert snap.restore() == 2 and snap.last_restore["carried"] == -1
        with pytest.raises(ValueError, match="carry"):
            snap.restore(carry=-2)
        with pytest.raises(TypeError, match="carry"):
            snap.restore(carry=1.5)


def test_memory_falls_back_to_unlocked_with_one_warning(tmp_path):
    """A child without CAP_IPC_LOCK and with RLIMIT_MEMLOCK of 64 KiB cannot lock 2 x 1 MiB."""
    code = textwrap.dedent("""
        import resource, warnings, json, numpy as np
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536))
        import dpmpi
        from mpi4py import MPI
        a = np.arange(1 << 17, dtype=np.float64)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s1 = dpmpi.Snapshot(MPI.COMM_SELF, {"a": a})
            s2 = dpmpi.Snapshot(MPI.COMM_SELF, {"a": a})
        s1.stage(); s1.commit(1); a[:] = -1; s1.restore()
        print(json.dumps({"locked": [s1.locked, s2.locked], "ok": bool((a == np.arange(1 << 17)).all()),
                          "warnings": [str(w.message) for w in caught]}))
    """)
    cmd = [sys.executable, "-c", code]
    if os.geteuid() == 0:  # root locks regardless of the limit: drop the capability
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) is needed to drop CAP_IPC_LOCK as root"
        cmd = [setpriv, "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["locked"] == [False, False] and result["ok"]
    assert len(result["warnings"]) == 1 and "not locked" in result["warnings"][0]
    assert "ulimit -l" in result["warnings"][0]


def test_persisted_epochs_reload_and_a_corrupt_file_is_refused(tmp_path):
    arrays = state(40)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays, persist_dir=tmp_path, persist_every=2) as snap:
        for epoch in range(1, 8):
            fill(arrays, 40 + epoch)
            snap.stage()
            snap.commit(epoch)
        snap.wait()
    (e4, tag), (e6, tag6) = listing(tmp_path)
    assert (e4, e6) == (4, 6) and tag == tag6 and len(tag) == 16  # (this job's tag, per Snapshot: jobid)
    fresh = state(99)
    assert dpmpi.Snapshot.load(MPI.COMM_SELF, fresh, tmp_path) == 6
    assert same(fresh, state(46))
    path = tmp_path / f"rank00000.epoch0000000006.{tag}.dpmpi"
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0xFF  # inside the last array
    path.write_bytes(bytes(raw))
    with pytest.raises(dpmpi.SnapshotLostError, match="checksum"):
        dpmpi.Snapshot.load(MPI.COMM_SELF, state(99), tmp_path)


def listing(directory):
    """(epoch, tag) of each snapshot file in ``directory`` (rank 0's), sorted."""
    return sorted((int(n.split(".")[1][len("epoch"):]), n.split(".")[2]) for n in os.listdir(directory))


def test_a_job_prunes_only_its_own_files_and_load_takes_the_job_that_wrote_last(tmp_path, monkeypatch):
    """Two jobs, one persist_dir: the later job's files carry its own tag (dpmpi.jobid), so its
    pruning leaves the earlier job's newer epochs alone (before the fifty-first session it kept
    those and deleted its own), and Snapshot.load takes the newest epoch of the job that wrote
    last (the earlier job's epoch 8 is newer, but older on disk). Files without a tag (written
    before) still load; files of other arrays are not candidates; files of more ranks than the
    loading job's are refused."""
    arrays = state(40)
    for tag, epochs in (("a" * 16, range(1, 9)), ("b" * 16, range(1, 5))):
        monkeypatch.setattr(jobid, "_tag", tag)
        with dpmpi.Snapshot(MPI.COMM_SELF, arrays, persist_dir=tmp_path, persist_every=2) as snap:
            for epoch in epochs:
                fill(arrays, (100 if tag[0] == "a" else 200) + epoch)
                snap.stage()
                snap.commit(epoch)
            snap.wait()
    (e2, tb), (e4, tb4), (e6, ta), (e8, ta8) = listing(tmp_path)
    assert (e2, e4, e6, e8) == (2, 4, 6, 8) and tb == tb4 and ta == ta8 and ta != tb
    later = time.time() + 5
    for name in os.listdir(tmp_path):  # (the b job's files are the newest on disk anyway; made certain)
        if tb in name:
            os.utime(tmp_path / name, (later, later))
    fresh = state(99)
    assert dpmpi.Snapshot.load(MPI.COMM_SELF, fresh, tmp_path) == 4 and same(fresh, state(204))
    for name in os.listdir(tmp_path):
        if ta in name:  # the earlier job's files, as written before the tags: load reads them
            os.rename(tmp_path / name, tmp_path / name.replace(f".{ta}", ""))
        else:
            os.unlink(tmp_path / name)
    assert dpmpi.Snapshot.load(MPI.COMM_SELF, fresh, tmp_path) == 8 and same(fresh, state(108))
    # files of other arrays (another Snapshot's, newer) are not candidates
    monkeypatch.setattr(jobid, "_tag", "c" * 16)
    other = {"z": np.arange(5.0)}
    with dpmpi.Snapshot(MPI.COMM_SELF, other, persist_dir=tmp_path) as snap:
        snap.stage()
        snap.commit(9)
        snap.wait()
    assert dpmpi.Snapshot.load(MPI.COMM_SELF, fresh, tmp_path) == 8 and same(fresh, state(108))
    with pytest.raises(dpmpi.SnapshotLostError, match="no epoch of these arrays"):
        dpmpi.Snapshot.load(MPI.COMM_SELF, {"z": np.zeros(6)}, tmp_path)
    # a directory that a job of two ranks wrote, loaded by one: refused (it took rank 0's part alone)
    shutil.copy(tmp_path / "rank00000.epoch0000000008.dpmpi", tmp_path / "rank00001.epoch0000000008.dpmpi")
    with pytest.raises(ValueError, match="epoch 8 for more ranks than the 1 of this job"):
        dpmpi.Snapshot.load(MPI.COMM_SELF, state(99), tmp_path)


def test_bad_input_gets_errors_that_name_the_problem():
    a = np.zeros(100)
    with pytest.raises(ValueError, match="'x' is not contiguous"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"x": a[::2]})
    with pytest.raises(ValueError, match="'y' is not contiguous"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"y": np.asfortranarray(np.zeros((4, 6)))[:, ::2]})
    ro = np.zeros(10)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="'r' is read-only"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"r": ro})
    with pytest.raises(TypeError, match="'l' is a list"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"l": [1, 2]})
    # accepted before the fourteenth session: object references restored into another process
    with pytest.raises(TypeError, match="'o' holds Python object references"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"o": np.array([1, "a"], dtype=object)})
    with pytest.raises(TypeError, match="'s' holds Python object references"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"s": np.zeros(3, dtype=[("v", "f8"), ("tag", "O")])})
    with pytest.raises(ValueError, match="'k' is a numpy scalar"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"k": np.int64(0)})
    # accepted before the twenty-fourth session: the mask was not restored (a silent wrong result)
    with pytest.raises(TypeError, match="'m' is a numpy masked array"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"m": np.ma.masked_array(np.zeros(4), mask=[0, 1, 0, 0])})
    with pytest.raises(TypeError, match="non-empty dict"):
        dpmpi.Snapshot(MPI.COMM_SELF, {})
    with pytest.raises(TypeError, match="dpmpi.Comm or an mpi4py Intracomm"):
        dpmpi.Snapshot("world", {"a": a})
    with pytest.raises(ValueError, match="replicas=2 on a communicator of size 1"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"a": a}, replicas=2)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"a": a}, threads=0)
    with pytest.raises(ValueError, match="persist_every needs persist_dir"):
        dpmpi.Snapshot(MPI.COMM_SELF, {"a": a}, persist_every=3)
    snap = dpmpi.Snapshot(MPI.COMM_SELF, {"a": a})
    with pytest.raises(ValueError, match="restore\\(\\) before any commit"):
        snap.restore()
    with pytest.raises(ValueError, match="commit\\(\\) without stage\\(\\)"):
        snap.commit(1)
    snap.stage()
    with pytest.raises(ValueError, match="already called"):
        snap.stage()
    snap.commit(3)
    snap.stage()
    with pytest.raises(ValueError, match="epochs must grow; the last committed epoch is 3"):
        snap.commit(3)
    with pytest.raises(TypeError, match="epoch must be an int"):
        snap.commit(4.0)
    snap.commit(4)
    a.dtype = np.int64  # same bytes, another dtype: changed since registration
    with pytest.raises(ValueError, match="'a' changed since registration"):
        snap.stage()
    snap.close()
    with pytest.raises(ValueError, match="closed"):
        snap.stage()


def test_a_resized_buffer_is_refused():
    buf = bytearray(1000)
    snap = dpmpi.Snapshot(MPI.COMM_SELF, {"buf": buf})
    buf.extend(b"x" * 10)
    with pytest.raises(ValueError, match="'buf' changed since registration"):
        snap.stage()
    snap.close()


def test_background_commit_with_stage_epoch():
    arrays = state(50)
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        snap.stage(1)  # committed in the background as soon as the copy is done
        with pytest.raises(ValueError, match="already called"):
            snap.stage(2)
        snap.commit(1)
        assert snap.epoch == 1
        fill(arrays, 51)
        snap.stage(2)
        with pytest.raises(ValueError, match=r"commit\(3\) after stage\(epoch=2\)"):
            snap.commit(3)
        fill(arrays, 52)
        assert snap.restore() == 2 and same(arrays, state(51))
        with pytest.raises(ValueError, match="epochs must grow"):
            snap.stage(2)


def test_a_dropped_snapshot_is_freed_at_once():
    """No reference cycle among a Snapshot's parts: one dropped without close() (nothing
    running) frees its memory at once, not at some later garbage collection."""
    import gc
    import weakref

    a = np.zeros(1000)
    gc.disable()
    try:
        snap = dpmpi.Snapshot(MPI.COMM_SELF, {"a": a})
        snap.stage()
        snap.commit(1)
        ref = weakref.ref(snap)
        del snap
        assert ref() is None
    finally:
        gc.enable()


def test_the_engine_reads_another_processs_memory_and_checksums_what_arrived():
    """A restore's read (Engine.pull, process_vm_readv), here of this process's own memory: the
    bytes and checksum of a copy job; an address that is not mapped fails with EFAULT; the test
    hook stops a read half-way."""
    from dpmpi.snapshot.native import Codes, cext

    ffi = cext().ffi
    engine = Engine(1)
    for n in (1000, 3 << 20, 20 << 20 | 77):  # run here (small), and on the copy threads
        src = np.random.default_rng(n).integers(0, 255, n, dtype=np.uint8)
        dst = np.zeros(n, np.uint8)
        want = engine.checksum([ffi.from_buffer(src)], [n])
        rc, got = engine.pull(os.getpid(), [memoryview(dst)], [int(ffi.cast("uintptr_t", ffi.from_buffer(src)))])
        assert (rc, got) == (0, want) and np.array_equal(src, dst)
    rc, _ = engine.pull(os.getpid(), [memoryview(dst)[:4096]], [4096])
    assert (rc, engine.pull_errno()) == (Codes.pull_failed(), 14)  # EFAULT
    engine.inject(0, pull=True)
    dst[:] = 0
    rc, _ = engine.pull(os.getpid(), [memoryview(dst)], [int(ffi.cast("uintptr_t", ffi.from_buffer(src)))])
    assert rc == Codes.injected() and 0 < np.count_nonzero(dst == src) < n
    rc, got = engine.pull(os.getpid(), [memoryview(dst)], [int(ffi.cast("uintptr_t", ffi.from_buffer(src)))])
    assert (rc, got) == (0, want)  # (the hook stops one read only)


def test_a_pull_of_many_small_arrays_reads_them_in_batches_and_reports_a_bad_one():
    """Many small segments (a state of many arrays) are read several per process_vm_readv: the
    bytes and the checksum are those of a copy job over the same segments; a segment that is not
    mapped, in the middle of a batch, fails with EFAULT after the segments before it arrived."""
    from dpmpi.snapshot.native import Codes, cext

    ffi = cext().ffi
    engine = Engine(1)
    rng = np.random.default_rng(5)
    for count, most in ((150, 40000), (700, 9000), (10, 5000)):  # on the copy threads, and run here (small)
        srcs = [rng.integers(0, 255, int(rng.integers(1, most)), dtype=np.uint8) for _ in range(count)]
        dsts = [np.zeros_like(a) for a in srcs]
        addrs = [int(ffi.cast("uintptr_t", ffi.from_buffer(a))) for a in srcs]
        want = engine.checksum([ffi.from_buffer(a) for a in srcs], [a.nbytes for a in srcs])
        rc, got = engine.pull(os.getpid(), [memoryview(d) for d in dsts], addrs)
        assert (rc, got) == (0, want) and all(np.array_equal(a, d) for a, d in zip(srcs, dsts))
    for d in dsts:
        d[:] = 0
    rc, _ = engine.pull(os.getpid(), [memoryview(d) for d in dsts], addrs[:6] + [4096] + addrs[7:])
    assert (rc, engine.pull_errno()) == (Codes.pull_failed(), 14)  # EFAULT
    assert all(np.array_equal(srcs[i], dsts[i]) for i in range(6))


def test_registering_arrays_never_written_makes_their_pages_resident():
    """A Snapshot faults its arrays' pages in when it registers them (then a restore never
    writes into pages that are not there: ~0.1 GB/s; restores do not fault them again), many
    arrays that have no pages yet here; a restore writes them back bit for bit."""
    P = mmap.PAGESIZE

    def resident(a: np.ndarray) -> int:
        return _resident(a.ctypes.data, a.nbytes)

    maps = [mmap.mmap(-1, (256 + i) * P) for i in range(64)]  # anonymous: no page until written
    arrays = {f"a{i}": np.frombuffer(m, np.uint8) for i, m in enumerate(maps)}
    assert sum(resident(a) for a in arrays.values()) == 0
    with dpmpi.Snapshot(MPI.COMM_SELF, arrays) as snap:
        assert [resident(a) for a in arrays.values()] == [a.nbytes // P for a in arrays.values()]
        for i, a in enumerate(arrays.values()):
            a[::97] = i + 1
        want = {k: a.copy() for k, a in arrays.items()}
        snap.stage()
        snap.commit(1)
        for a in arrays.values():
            a[:] = 0
        assert snap.restore() == 1
        assert all(np.array_equal(arrays[k], want[k]) for k in arrays)
    arrays.clear()


def _resident(address: int, nbytes: int) -> int:
    """How many of the pages of [address, address + nbytes) are resident (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    pages = -(-nbytes // mmap.PAGESIZE)
    vec = ctypes.create_string_buffer(pages)
    assert libc.mincore(address - address % mmap.PAGESIZE, pages * mmap.PAGESIZE, vec) == 0
    return sum(b & 1 for b in vec.raw)


def test_a_lazy_slot_has_no_pages_until_settled_then_is_locked():
    """A replacement's own slots are mapped only (its Snapshot is made on the path to its first
    restore: locking 2 x 64 MiB there took ~15 ms of its time to resume); ``settle`` (its first
    write: the refill after a direct restore, a receive, a stage) locks them, once."""
    from dpmpi.snapshot.native import Slot

    nbytes = 8 << 20
    lazy, eager = Slot(nbytes, True, lazy=True), Slot(nbytes, True)
    assert (lazy.settled, lazy.locked, _resident(lazy.address, nbytes)) == (False, False, 0)
    assert eager.settled and eager.locked and _resident(eager.address, nbytes) == nbytes // mmap.PAGESIZE
    lazy.settle()
    assert lazy.settled and lazy.locked and _resident(lazy.address, nbytes) == nbytes // mmap.PAGESIZE
    lazy.buffer()[:4] = b"abcd"
    lazy.settle()  # (once: the bytes stay)
    assert bytes(lazy.buffer()[:4]) == b"abcd"
    unlocked = Slot(nbytes, False, lazy=True)
    unlocked.settle()  # (lock_memory=False: faulted in, not locked)
    assert not unlocked.locked and _resident(unlocked.address, nbytes) == nbytes // mmap.PAGESIZE
