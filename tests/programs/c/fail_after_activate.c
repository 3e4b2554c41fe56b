/* A test's fault, preloaded with LD_PRELOAD: the process started as world rank R, at its N-th
 * entry into Open MPI's communicator activation (ompi_comm_activate, inside Dup, Split, Create,
 * ...), lets the activation run to its end, then reports it failed (MPI_ERR_PROC_FAILED), with
 * FAIL_AFTER_ACTIVATE=R:N. Its peers' creation of that communicator completed: rank R's failed.
 * That is what a death during a creation can leave (the activation's agreement on the parent
 * completes on some processes only): a creation that completed on some ranks and failed on
 * others, with nobody dead. Not in a process that replaces a failed rank (DPMPI_REPLACEMENT).
 * Writes "[fail-after-activate] rank R at N" to stderr first. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ERR_PROC_FAILED 75 /* Open MPI 5's MPI_ERR_PROC_FAILED (mpi-ext.h) */

typedef int (*fn_activate)(void **, void *, void *, const void *, const void *, bool, int);

int ompi_comm_activate(void **newcomm, void *comm, void *bridge, const void *arg0, const void *arg1,
                       bool send_first, int mode) {
    static fn_activate real;
    static int calls;
    if (!real) {
        void *h = dlopen("libmpi.so.40", RTLD_NOW | RTLD_NOLOAD);
        real = h ? (fn_activate)dlsym(h, "ompi_comm_activate") : NULL;
        if (!real) abort();
    }
    int rc = real(newcomm, comm, bridge, arg0, arg1, send_first, mode);
    const char *spec = getenv("FAIL_AFTER_ACTIVATE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    int r, n;
    if (rc == 0 && spec && rank && !getenv("DPMPI_REPLACEMENT") && sscanf(spec, "%d:%d", &r, &n) == 2 &&
        r == atoi(rank) && ++calls == n) {
        char line[64];
        int len = snprintf(line, sizeof line, "[fail-after-activate] rank %d at %d\n", r, n);
        if (write(2, line, (size_t)len) < 0) {}
        return ERR_PROC_FAILED;
    }
    return rc;
}
