/* Small helpers shared by the C files of dpmpi (not part of the cffi interface). */
#ifndef DPMPI_UTIL_H
#define DPMPI_UTIL_H
#include <errno.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

/* write(2) all of buf, retrying on EINTR and short writes; gives up silently on an error (it is
 * used on exit and failure paths, where there is nobody left to tell). */
static inline void dpmpi_write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* mlock(2) (lock) or MADV_POPULATE_WRITE (!lock) of [p, p + len), p page-aligned, in pieces of
 * DPMPI_SETTLE_PIECE. Each call holds the process's memory-map lock (mmap_lock) while it faults
 * every page in, and a thread that maps or unmaps memory meanwhile (malloc in a new arena,
 * opendir: the heartbeat's scan) waits for the whole call: one mlock of 1.15 GiB held such a
 * thread 4.5-5.5 s here, in 32 MiB pieces at most 0.3 s. A rank whose snapshot memory was
 * locked in one call had its heartbeat thread held so for 10 s, and a peer killed it as hung
 * (fifty-second session, 384 MiB per rank on a loaded 2-core VM). Returns 0 or the errno of
 * the first piece that failed; an mlock that fails unlocks the pieces it had locked. */
#define DPMPI_SETTLE_PIECE ((size_t)32 << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux >= 5.14 */
#endif
static inline int dpmpi_settle_pieces(void *p, size_t len, int lock) {
    size_t done = 0;
    while (done < len) {
        size_t n = len - done < DPMPI_SETTLE_PIECE ? len - done : DPMPI_SETTLE_PIECE;
        int rc = lock ? mlock((char *)p + done, n) : madvise((char *)p + done, n, MADV_POPULATE_WRITE);
        if (rc != 0) {
            int err = errno;
            if (lock && done) munlock(p, done);
            return err;
        }
        done += n;
    }
    return 0;
}
#endif
