/* A test's fault, preloaded with LD_PRELOAD beside dpmpi's guard: the process started as world
 * rank R SIGKILLs itself when it enters Open MPI's communicator activation (ompi_comm_activate,
 * inside Dup, Split, Create, ... once the new context id is chosen) for the N-th time, with
 * KILL_IN_ACTIVATE=R:N. Its peers are then inside the same activation, where the failure
 * notice crashed Open MPI 5.0.11 (cext/dpmpi_revoke.c). Not in a process that replaces a failed
 * rank (DPMPI_REPLACEMENT). Writes "[kill-in-activate] rank R at N" to stderr first. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    const char *spec = getenv("KILL_IN_ACTIVATE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    int r, n;
    if (spec && rank && !getenv("DPMPI_REPLACEMENT") && sscanf(spec, "%d:%d", &r, &n) == 2 && r == atoi(rank) &&
        ++calls == n) {
        char line[64];
        int len = snprintf(line, sizeof line, "[kill-in-activate] rank %d at %d\n", r, n);
        if (write(2, line, (size_t)len) < 0) {}
        kill(getpid(), SIGKILL);
    }
    return real(newcomm, comm, bridge, arg0, arg1, send_first, mode);
}
