/* A ULFM program in C that knows nothing of dpmpi: the ICLDisco ULFM tutorial's respawn
 * scenario. Ranks sum (logical rank + 1) with MPI_Allreduce ITERS times; when a rank fails, the
 * survivors revoke, shrink, start replacements with MPI_Comm_spawn (this program again, with
 * the argument "child"), merge with them, and order the merged communicator so that each
 * replacement takes a failed rank's number. The sum at the end equals a failure-free run's.
 *
 *   respawn ITERS [VICTIM AT]      VICTIM raises SIGKILL at iteration AT (first life only)
 */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 64

/* Merge with the new processes and order by logical rank; returns the new working communicator. */
static MPI_Comm join(MPI_Comm inter, int high, int *logical, int *iter, int *failed, int *nfailed) {
    MPI_Comm merged, ordered;
    MPI_Intercomm_merge(inter, high, &merged);
    int info[2 + MAXR];
    info[0] = *iter;
    info[1] = *nfailed;
    for (int k = 0; k < *nfailed; k++) info[2 + k] = failed[k];
    MPI_Bcast(info, 2 + MAXR, MPI_INT, 0, merged); /* rank 0 of merged: a parent (high = 0) */
    *iter = info[0];
    *nfailed = info[1];
    if (high) { /* a replacement: take the failed rank matching my rank among the new ones */
        int me;
        MPI_Comm_rank(inter, &me);
        *logical = info[2 + me];
    }
    MPI_Comm_split(merged, 0, *logical, &ordered);
    MPI_Comm_free(&merged);
    MPI_Comm_set_errhandler(ordered, MPI_ERRORS_RETURN);
    return ordered;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    int child = argc > 2 && !strcmp(argv[argc - 1], "child");
    int victim = !child && argc > 2 ? atoi(argv[2]) : -2;
    int at = !child && argc > 3 ? atoi(argv[3]) : -1;
    int wrank, logical, iter = 0, nfailed = 0, respawns = 0;
    int failed[MAXR];
    MPI_Comm comm, parent;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        logical = -1;
        comm = join(parent, 1, &logical, &iter, failed, &nfailed);
    } else {
        logical = wrank;
        MPI_Comm_dup(MPI_COMM_WORLD, &comm);
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    }
    int size;
    MPI_Comm_size(comm, &size);
    long sum = 0;
    while (iter < iters) {
        if (iter == at && victim == wrank && parent == MPI_COMM_NULL) raise(SIGKILL);
        long mine = logical + 1;
        int rc = MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, comm);
        int ok = rc == MPI_SUCCESS;
        if (ok) { /* everyone must leave this iteration together */
            int flag = 1;
            rc = MPIX_Comm_agree(comm, &flag);
            ok = rc == MPI_SUCCESS;
        }
        if (ok) {
            iter++;
            continue;
        }
        MPIX_Comm_revoke(comm);
        MPI_Comm smaller;
        MPIX_Comm_shrink(comm, &smaller);
        MPI_Comm_free(&comm);
        int alive[MAXR], n;
        MPI_Comm_size(smaller, &n);
        MPI_Allgather(&logical, 1, MPI_INT, alive, 1, MPI_INT, smaller);
        nfailed = 0;
        for (int r = 0; r < size; r++) {
            int here = 0;
            for (int k = 0; k < n; k++) here |= alive[k] == r;
            if (!here) failed[nfailed++] = r;
        }
        char *args[] = {argv[1], "child", NULL};
        MPI_Comm inter;
        MPI_Comm_spawn(argv[0], args, nfailed, MPI_INFO_NULL, 0, smaller, &inter, MPI_ERRCODES_IGNORE);
        comm = join(inter, 0, &logical, &iter, failed, &nfailed);
        MPI_Comm_free(&inter);
        MPI_Comm_free(&smaller);
        respawns++;
    }
    printf("{\"event\": \"done\", \"rank\": %d, \"wid\": %d, \"child\": %d, \"size\": %d, \"sum\": %ld, \"respawns\": %d}\n",
           logical, wrank, parent != MPI_COMM_NULL, size, sum, respawns);
    fflush(stdout);
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return 0;
}
