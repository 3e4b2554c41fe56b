/* A test's faults in Open MPI's communicator activation (ompi_comm_activate, inside Dup, Split,
 * Create, ... once the new context id is chosen), preloaded with LD_PRELOAD beside dpmpi's guard.
 * Not in a process that replaces a failed rank (DPMPI_REPLACEMENT).
 *  - KILL_IN_ACTIVATE=R:N: the process started as world rank R SIGKILLs itself when it enters
 *    its N-th activation. Its peers are then inside the same activation, where the failure
 *    notice crashed Open MPI 5.0.11 (cext/dpmpi_revoke.c). Writes "[kill-in-activate] rank R at
 *    N" to stderr first.
 *  - FAIL_AFTER_ACTIVATE=R:N: rank R lets its N-th activation run to its end, then reports it
 *    failed (MPI_ERR_PROC_FAILED): its peers' creation of that communicator completed, rank R's
 *    failed. That is what a death during a creation can leave (the activation's agreement on the
 *    parent completes on some processes only), here with nobody dead. Writes
 *    "[fail-after-activate] rank R at N" to stderr first. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ERR_PROC_FAILED 75 /* Open MPI 5's MPI_ERR_PROC_FAILED (mpi-ext.h) */

typedef int (*fn_activate)(void **, void *, void *, const void *, const void *, bool, int);

/* whether this process is the rank that SPEC ("R:N") names, at its N-th call (counted in *calls) */
static bool due(const char *spec, int *calls, int *r, int *n) {
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    return spec && rank && !getenv("DPMPI_REPLACEMENT") && sscanf(spec, "%d:%d", r, n) == 2 && *r == atoi(rank) &&
           ++*calls == *n;
}

static void say(const char *what, int r, int n) {
    char line[80];
    int len = snprintf(line, sizeof line, "[%s] rank %d at %d\n", what, r, n);
    if (write(2, line, (size_t)len) < 0) {}
}

int ompi_comm_activate(void **newcomm, void *comm, void *bridge, const void *arg0, const void *arg1,
                       bool send_first, int mode) {
    static fn_activate real;
    static int kills, fails;
    int r, n;
    if (!real) {
        void *h = dlopen("libmpi.so.40", RTLD_NOW | RTLD_NOLOAD);
        real = h ? (fn_activate)dlsym(h, "ompi_comm_activate") : NULL;
        if (!real) abort();
    }
    if (due(getenv("KILL_IN_ACTIVATE"), &kills, &r, &n)) {
        say("kill-in-activate", r, n);
        kill(getpid(), SIGKILL);
    }
    int rc = real(newcomm, comm, bridge, arg0, arg1, send_first, mode);
    if (rc == 0 && due(getenv("FAIL_AFTER_ACTIVATE"), &fails, &r, &n)) {
        say("fail-after-activate", r, n);
        return ERR_PROC_FAILED;
    }
    return rc;
}
