/* The one binding of the MPI library (see dpmpi_mpi.h). Compiled into the Python module and into
 * the preloaded exit guard (each its own table). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

#include "dpmpi_mpi.h"

static dpmpi_mpi_api api;
static _Atomic(const dpmpi_mpi_api *) bound; /* &api once it is filled: written once, then read lock-free */
static pthread_mutex_t bind_mu = PTHREAD_MUTEX_INITIALIZER;

#define BIND(field, name) (api.field = (__typeof__(api.field))dlsym(h, name))

const dpmpi_mpi_api *dpmpi_mpi_open(const char *libmpi_path) {
    if (atomic_load(&bound) || !libmpi_path) return atomic_load(&bound);
    pthread_mutex_lock(&bind_mu);
    if (!atomic_load(&bound)) {
        void *h = dlopen(libmpi_path, RTLD_NOW | RTLD_NOLOAD);
        if (!h) h = dlopen(libmpi_path, RTLD_NOW);
        if (h) {
            BIND(initialized, "MPI_Initialized");
            BIND(finalized, "MPI_Finalized");
            BIND(finalize, "MPI_Finalize");
            BIND(isend, "MPI_Isend");
            BIND(irecv, "MPI_Irecv");
            BIND(test, "MPI_Test");
            BIND(error_class, "MPI_Error_class");
            BIND(comm_rank, "MPI_Comm_rank");
            BIND(comm_size, "MPI_Comm_size");
            BIND(comm_set_errhandler, "MPI_Comm_set_errhandler");
            BIND(iagree, "MPIX_Comm_iagree");
            BIND(failure_ack, "MPIX_Comm_failure_ack");
            api.errors_return = dlsym(RTLD_DEFAULT, "ompi_mpi_errors_return"); /* a program's copy first */
            if (!api.errors_return) BIND(errors_return, "ompi_mpi_errors_return");
            BIND(async_finalize, "ompi_async_mpi_finalize");
            BIND(get_library_version, "MPI_Get_library_version");
            BIND(request_get_status, "MPI_Request_get_status");
            /* predefined objects: a program's copy first (a copy relocation moves the object that
             * libmpi itself uses into the program) */
            api.comm_self = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_self");
            if (!api.comm_self) BIND(comm_self, "ompi_mpi_comm_self");
            api.byte_type = dlsym(RTLD_DEFAULT, "ompi_mpi_byte");
            if (!api.byte_type) BIND(byte_type, "ompi_mpi_byte");
            atomic_store(&bound, &api);
        }
    }
    pthread_mutex_unlock(&bind_mu);
    return atomic_load(&bound);
}
