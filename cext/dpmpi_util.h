/* Small helpers shared by the C files of dpmpi (not part of the cffi interface). */
#ifndef DPMPI_UTIL_H
#define DPMPI_UTIL_H
#include <errno.h>
#include <stddef.h>
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
#endif
