/* The late-FIN scenario of tests/programs/late_fin.py in a C program that knows nothing of dpmpi
 * (the filter comes from dpmpi-run's preloaded exit guard). Rank 0 posts an 8 MiB send to rank 1
 * and tells itself that rank 1 died (the local PMIx event dpmpi's watcher raises; PMIx is reached
 * through dlsym, its types declared here as in cext/dpmpi_tell.c); its tests of the send end it
 * with MPIX_ERR_PROC_FAILED. Then rank 1, released through the named pipe argv[1], receives the
 * message (its FIN reaches rank 0 after the cancel) and kills itself. Rank 0 makes progress,
 * prints one JSON line and finalizes. */
#include <dlfcn.h>
#include <fcntl.h>
#include <mpi.h>
#include <mpi-ext.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct { char nspace[256]; uint32_t rank; } px_proc_t;
typedef struct { uint16_t type; size_t size; void *array; } px_data_array_t;

static void tell_self_failed(int rank) {
    void *h = dlopen("libpmix.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (!h) { fprintf(stderr, "late_fin: no libpmix loaded\n"); exit(5); }
    void *(*start)(void) = (void *(*)(void))dlsym(h, "PMIx_Info_list_start");
    int (*add)(void *, const char *, const void *, uint16_t) = dlsym(h, "PMIx_Info_list_add");
    int (*convert)(void *, px_data_array_t *) = dlsym(h, "PMIx_Info_list_convert");
    int (*notify)(int, const px_proc_t *, uint8_t, const void *, size_t, void *, void *) = dlsym(h, "PMIx_Notify_event");
    px_proc_t proc;
    memset(&proc, 0, sizeof proc);
    snprintf(proc.nspace, sizeof proc.nspace, "%s", getenv("PMIX_NAMESPACE"));
    proc.rank = (uint32_t)rank;
    bool yes = true;
    px_data_array_t arr = {0, 0, NULL};
    void *list = start();
    add(list, "pmix.evproc", &proc, 22 /* PMIX_PROC */);
    add(list, "pmix.evnocache", &yes, 1 /* PMIX_BOOL */);
    convert(list, &arr);
    if (notify(-402 /* PMIX_ERR_PROC_ABORTED_BY_SIG */, NULL, 7 /* PMIX_RANGE_PROC_LOCAL */, arr.array, arr.size, NULL,
               NULL) != 0) {
        fprintf(stderr, "late_fin: PMIx_Notify_event failed\n");
        exit(5);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, pid = (int)getpid();
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int pids[2];
    MPI_Allgather(&pid, 1, MPI_INT, pids, 1, MPI_INT, comm);
    const int n = 8 << 20;
    char *big = malloc(n);
    memset(big, 0x5a, n);
    MPI_Barrier(comm);
    if (rank == 0) {
        MPI_Request req;
        MPI_Isend(big, n, MPI_BYTE, 1, 7, comm, &req);
        tell_self_failed(1);
        int done = 0, rc = MPI_SUCCESS;
        while (!done && rc == MPI_SUCCESS) rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        int cls = MPI_SUCCESS;
        MPI_Error_class(rc, &cls);
        int go = open(argv[1], O_WRONLY);  /* rank 1 may receive now */
        if (write(go, "go", 2) != 2) return 6;
        close(go);
        struct pollfd p = {.fd = (int)syscall(SYS_pidfd_open, pids[1], 0), .events = POLLIN};
        poll(&p, 1, 60000);  /* rank 1 received the data, queued its FIN and died */
        for (int i = 0; i < 200; i++) {
            int flag;
            MPI_Iprobe(0, 99, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
        }
        printf("{\"event\": \"done\", \"rank\": 0, \"proc_failed\": %d}\n", cls == MPIX_ERR_PROC_FAILED);
        fflush(stdout);
    } else {
        char buf[8];
        int go = open(argv[1], O_RDONLY);  /* no MPI call until rank 0 has cancelled its send */
        if (read(go, buf, sizeof buf) <= 0) return 6;
        MPI_Recv(big, n, MPI_BYTE, 0, 7, comm, MPI_STATUS_IGNORE);
        raise(SIGKILL);
    }
    MPI_Finalize();
    return 0;
}
