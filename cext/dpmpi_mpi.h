/* The one binding of the MPI library in dpmpi's C code (not part of the cffi interface).
 *
 * dpmpi does not link against MPI: the exit guard, the snapshot engine and the failure watcher
 * call Open MPI's entry points through this table, filled once by dlsym from the libmpi that the
 * process already loaded (mpi4py's, or the program's when preloaded). Handles follow the Open MPI
 * ABI (pointers), the only MPI with working ULFM that dpmpi supports. */
#ifndef DPMPI_MPI_H
#define DPMPI_MPI_H
#include <stddef.h>

typedef struct {
    int (*initialized)(int *);
    int (*finalized)(int *);
    int (*finalize)(void);
    int (*isend)(const void *, int, void *, int, int, void *, void **);
    int (*irecv)(void *, int, void *, int, int, void *, void **);
    int (*test)(void **, int *, void *);
    int (*error_class)(int, int *);
    int (*comm_rank)(void *, int *);
    int (*comm_size)(void *, int *);
    int (*comm_set_errhandler)(void *, void *);
    int (*iagree)(void *, int *, void **); /* ULFM (MPIX_Comm_iagree); NULL without */
    int (*failure_ack)(void *);            /* ULFM (MPIX_Comm_failure_ack); NULL without */
    void *errors_return; /* MPI_ERRORS_RETURN (the address of a predefined object); a program's copy first */
    _Bool *async_finalize; /* Open MPI's ompi_async_mpi_finalize: MPI_Finalize skips its PMIx fence (dpmpi_c.c) */
    int (*get_library_version)(char *, int *);
    int (*request_get_status)(void *, int *, void *);
    void *comm_self; /* MPI_COMM_SELF (Open MPI's ompi_mpi_comm_self) */
    void *byte_type; /* MPI_BYTE (Open MPI's ompi_mpi_byte) */
} dpmpi_mpi_api;

/* The table for the libmpi at `libmpi_path` (opened if it is not loaded yet), bound on the first
 * successful call and the same afterwards (thread-safe; it never changes once bound). Entry
 * points the library lacks are NULL: each user checks those it needs. NULL: cannot open it. */
const dpmpi_mpi_api *dpmpi_mpi_open(const char *libmpi_path);
#endif
