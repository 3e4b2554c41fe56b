/* dpmpi page exchange: a restore that gives the registered arrays the snapshot's pages instead of
 * copying 64 MiB per rank (measured here: 0.5-0.9 ms to exchange 64 MiB, against 9 ms for the copy
 * alone and 22-24 ms with four ranks copying on two cores).
 *
 * Owner and lifetime: called on the program's thread inside Snapshot.restore(), with the
 * Snapshot quiesced (no copy thread, no replication job touches either range). Other threads of
 * the process never see a hole in the address space: MREMAP_DONTUNMAP leaves the source range
 * mapped (reading zeros) until the next move replaces it, so no concurrent mmap can land there.
 * Both ranges must be private anonymous memory (the caller checks /proc/self/maps): a shared or
 * file mapping would lose its sharing or its file. Moving a locked range with DONTUNMAP adds to
 * the kernel's locked-memory count (seen here: +64 MiB of VmLck per exchange), so where that count
 * is checked against a limit the caller has a locked slot range unlocked first (unlock_b) and
 * locks it again later (dpmpi_pages_lock), off the critical path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dpmpi_c.h"
#include "dpmpi_util.h"

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4 /* Linux >= 5.7 */
#endif

static int aligned(const void *p, size_t len) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    return ((uintptr_t)p % page) == 0 && len % page == 0 && len > 0;
}

static int move(void *from, void *to, size_t len, int keep_source) {
    int flags = MREMAP_MAYMOVE | MREMAP_FIXED | (keep_source ? MREMAP_DONTUNMAP : 0);
    return mremap(from, len, len, flags, to) == MAP_FAILED ? errno : 0;
}

int dpmpi_pages_swap(void *a, void *b, size_t len, int unlock_b) {
    if (!a || !b || !aligned(a, len) || !aligned(b, len)) return EINVAL;
    if ((char *)a < (char *)b + len && (char *)b < (char *)a + len) return EINVAL;
    void *tmp = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (tmp == MAP_FAILED) return errno;
    if (unlock_b && munlock(b, len) != 0) {
        int err = errno;
        munmap(tmp, len);
        return err;
    }
    int err = move(a, tmp, len, 1); /* a's pages to tmp; a stays mapped, empty */
    if (err) {
        munmap(tmp, len);
        return err;
    }
    err = move(b, a, len, 1); /* the snapshot's pages to a; b stays mapped, empty */
    if (err) {
        /* a's bytes back where they were if possible; either way the caller copies b into a */
        if (move(tmp, a, len, 0) != 0) munmap(tmp, len);
        return err;
    }
    /* a's old pages to b (its bytes are garbage to the caller; on failure b reads zeros) */
    if (move(tmp, b, len, 0) != 0) munmap(tmp, len);
    return 0;
}

int dpmpi_pages_lock(void *p, size_t len, int lock) {
    if (!p || len == 0) return 0;
    if (lock) return dpmpi_settle_pieces(p, len, 1); /* (in pieces: dpmpi_util.h) */
    return munlock(p, len) == 0 ? 0 : errno;
}
