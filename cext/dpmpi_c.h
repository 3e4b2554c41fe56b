/* dpmpi C helpers: declarations shared by the cffi cdef and the implementation.
 * Keep this file parseable by cffi: plain C declarations, no includes, no macros. */

const char *dpmpi_c_version(void);

/* ---- exit guard (see dpmpi/_guard.py) ---- */
/* Register the on_exit handler (idempotent). Called late, after MPI_Init, so that it runs
 * before any handler the MPI library registered. */
int dpmpi_exit_register(void);
/* Tell the exit handler how to end MPI: path of the loaded libmpi, COMM_WORLD handle (Open MPI
 * ABI: a pointer), whether dpmpi owns MPI_Finalize, and the Finalize watchdog in seconds. */
int dpmpi_exit_set_mpi(const char *libmpi_path, void *world, int owns_finalize, double finalize_timeout);
void dpmpi_exit_set_record(int enabled, int world_rank);
void dpmpi_exit_set_cause(const char *cause);
void dpmpi_exit_add_recovered(int world_rank);
void dpmpi_exit_set_idle_spares(const int *world_ranks, int n);
/* A spare's exit agreement was posted early (it is how an idle spare learns that the job ended):
 * the exit handler waits for that request instead of starting a new agreement. */
void dpmpi_exit_adopt_agree(void *request);
/* The exit agreement already completed (an idle spare saw the job end): exit(status) now, with
 * only MPI_Finalize (under its watchdog) left to do. */
void dpmpi_exit_after_agree(int status);
/* End this process now as a failure that peers notice: write the status record, flush, SIGKILL. */
void dpmpi_write_record(int status);
void dpmpi_die(int status);

/* ---- stall watchdog ---- */
int dpmpi_stall_start(double seconds);
void dpmpi_stall_enter(void);
void dpmpi_stall_leave(void);

/* ---- fault injection ---- */
void dpmpi_segv(void);
