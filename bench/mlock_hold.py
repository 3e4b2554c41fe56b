"""How long one mlock(2) of a large region holds another thread of the process that maps and
unmaps memory (malloc in a new arena, opendir: as dpmpi's heartbeat thread does), in one call
against pieces (cext/dpmpi_util.h: dpmpi_settle_pieces locks snapshot memory in 32 MiB pieces).

    python bench/mlock_hold.py MIB [PIECE_MIB]     e.g. 1152 (one call), then 1152 32

Three regions of MIB MiB (advised as huge pages, as the snapshot slots are), each locked in
PIECE_MIB pieces (default: one call); prints the total time and the other thread's longest gap
between two of its mmap + munmap + listdir rounds. Needs the right to lock that much (root)."""
import ctypes
import mmap
import os
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PROT_RW, MAP_PRIVATE_ANON, MADV_HUGEPAGE = 3, 0x22, 14

size = int(sys.argv[1]) << 20
piece = int(sys.argv[2]) << 20 if len(sys.argv) > 2 else size
gaps, stop = [], threading.Event()


def other() -> None:
    last = time.perf_counter()
    while not stop.is_set():
        m = mmap.mmap(-1, 1 << 16)  # an mmap and a munmap: the mm's lock, for writing
        m.close()
        os.listdir("/dev/shm")
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        time.sleep(0.001)


t = threading.Thread(target=other)
t.start()
time.sleep(0.2)
t0 = time.perf_counter()
for _ in range(3):
    p = libc.mmap(None, size, PROT_RW, MAP_PRIVATE_ANON, -1, 0)
    libc.madvise(p, size, MADV_HUGEPAGE)
    for off in range(0, size, piece):
        if libc.mlock(p + off, min(piece, size - off)) != 0:
            sys.exit(f"mlock: {os.strerror(ctypes.get_errno())}")
total = time.perf_counter() - t0
stop.set()
t.join()
print(f"3 x {size >> 20} MiB in {piece >> 20} MiB pieces: {total:.2f} s; the other thread's longest gap {max(gaps):.3f} s")
