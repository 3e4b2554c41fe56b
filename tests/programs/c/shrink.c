/* A ULFM program in C that knows nothing of dpmpi: ranks sum their numbers with MPI_Allreduce
 * ITERS times on a duplicate of MPI_COMM_WORLD; when a rank fails, the survivors revoke, shrink
 * and go on with fewer ranks (the ICLDisco ULFM tutorial's shrink scenario). At the end each
 * rank prints one line and calls MPI_Finalize.
 *
 *   shrink ITERS [MODE VICTIM AT]
 *     MODE kill: VICTIM raises SIGKILL at iteration AT      (VICTIM -1: every rank does)
 *          exit: VICTIM calls exit(3) at iteration AT without MPI_Finalize
 *          fail: VICTIM returns 3 from main at iteration AT after MPI_Finalize-less cleanup
 *          finalize-exit: VICTIM calls MPI_Finalize at the end, then returns 3
 *          finalize-abort: VICTIM's MPI_Finalize calls abort() (a COMM_SELF attribute's delete
 *          callback), no failure before
 *     a 5th argument "norepair": after a failure the survivors stop, print and call MPI_Finalize
 *     (the tutorial's error-handler scenario) instead of shrinking
 */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int abort_on_delete(MPI_Comm c, int key, void *value, void *extra) {
    (void)c, (void)key, (void)value, (void)extra;
    abort();
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    const char *mode = argc > 2 ? argv[2] : "";
    int victim = argc > 3 ? atoi(argv[3]) : -2;
    int at = argc > 4 ? atoi(argv[4]) : -1;
    int repair = !(argc > 5 && !strcmp(argv[5], "norepair"));
    int wrank;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int shrinks = 0;
    long sum = 0;
    for (int i = 0; i < iters;) {
        if (i == at && (victim == wrank || victim == -1)) {
            if (!strcmp(mode, "kill")) raise(SIGKILL);
            if (!strcmp(mode, "exit")) exit(3);
            if (!strcmp(mode, "fail")) return 3;
        }
        long mine = wrank + 1;
        int rc = MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, comm);
        if (rc != MPI_SUCCESS) {
            int cls;
            MPI_Error_class(rc, &cls);
            if (cls != MPIX_ERR_PROC_FAILED && cls != MPIX_ERR_REVOKED) {
                fprintf(stderr, "rank %d: unexpected error class %d\n", wrank, cls);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            if (!repair) break;
            MPIX_Comm_revoke(comm);
            MPI_Comm smaller;
            MPIX_Comm_shrink(comm, &smaller);
            MPI_Comm_free(&comm);
            comm = smaller;
            MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
            shrinks++;
            continue; /* this iteration again, on the smaller communicator */
        }
        i++;
    }
    int size;
    MPI_Comm_size(comm, &size);
    printf("{\"event\": \"done\", \"wid\": %d, \"size\": %d, \"sum\": %ld, \"shrinks\": %d}\n", wrank, size, sum, shrinks);
    fflush(stdout);
    MPI_Comm_free(&comm);
    if (!strcmp(mode, "finalize-abort") && victim == wrank) {
        int key;
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, abort_on_delete, &key, NULL);
        MPI_Comm_set_attr(MPI_COMM_SELF, key, NULL);
    }
    MPI_Finalize();
    return !strcmp(mode, "finalize-exit") && victim == wrank ? 3 : 0;
}
