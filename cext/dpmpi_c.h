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
 * the exit handler waits for that request instead of starting a new agreement; `flag` is the
 * agreement's buffer (1 posted: this process knew of no failure; it holds the AND when done). */
void dpmpi_exit_adopt_agree(void *request, int *flag);
/* The exit agreement already completed (an idle spare saw the job end): exit(status) now, with
 * only MPI_Finalize (under its watchdog) left to do; `clean`: the agreement's result (0: some
 * process knew of a failure in the job). */
void dpmpi_exit_after_agree(int status, int clean);
/* The fault-tolerant end of MPI for an explicit MPI_Finalize (the preload library): agree on
 * COMM_WORLD until every live rank is done, then MPI_Finalize under the watchdog. */
int dpmpi_exit_finalize(void);
/* Another copy of the guard owns this process's end (the preload library, in a Python rank whose
 * dpmpi module installed its own guard): this copy writes no record and ends nothing. */
void dpmpi_exit_stand_down(void);
/* The process calls _exit(status) (no exit handlers will run): a non-zero status with MPI
 * initialised ends it as a failure the others notice; otherwise it writes the record. */
void dpmpi_exit_now(int status);
/* End this process now as a failure that peers notice: write the status record, flush, SIGKILL. */
void dpmpi_write_record(int status);
void dpmpi_die(int status);

/* Point libmpi's _exit at dpmpi_die for a non-zero status (MPI's own aborts end as failures
 * that the survivors notice). Returns the number of references patched (0: none found). */
int dpmpi_hook_mpi_abort(void);
/* Only Open MPI's revoke of a communicator still being created (dpmpi_revoke.c), before MPI_Init. */
int dpmpi_hook_revoke(void);
/* A deadline of ``seconds`` on the MPI library's fatal-signal handlers (dpmpi_fatal.c): a process
 * stuck in one ends by SIGALRM. Returns how many handlers it put itself in front of. */
int dpmpi_fatal_deadline(unsigned seconds);
/* The same with DPMPI_FATAL_DEADLINE's value (default 5 s; a bad value: the default), for the
 * preloaded guard, which reads its settings itself. */
int dpmpi_fatal_deadline_from_env(void);
/* on=1: from now on a fatal signal ends the process with exit status 0 and one line on stderr
 * instead of the library's handler; on=0: no longer. The exit guard sets it around MPI_Finalize at
 * a normal exit, once every live process has agreed to end and a failure was known (dpmpi_fatal.c
 * says why). */
void dpmpi_fatal_after_agreed_end(int on);
/* head not NULL: from now on the first fatal signal writes a status record (head, then the
 * signal's number, then its cause) before the library's handler; NULL: no longer. The exit
 * guard sets it around MPI_Finalize when no failure is known. head must live on. */
void dpmpi_fatal_record_finalize_crash(const char *head);

/* ---- stall watchdog ----
 * dpmpi_stall_start: from the main thread; dump_signo > 0: sent to it when it is found stalled,
 * 0.5 s before the end (a handler there writes its traceback), 0: none. */
int dpmpi_stall_start(double seconds, int dump_signo);
void dpmpi_stall_enter(void);
void dpmpi_stall_leave(void);

/* ---- fault injection ---- */
void dpmpi_segv(void);

/* ---- snapshots (dpmpi_snap.c; see dpmpi/snapshot/) ---- */
#define DPMPI_UNIT 1048576            /* bytes per copy/checksum unit */
#define DPMPI_ENGINE_INJECTED 1       /* the test hook stopped the copy half-way */
#define DPMPI_ENGINE_GATE_FAILED 2    /* the replication this copy waited for failed */
#define DPMPI_ENGINE_PULL_FAILED 3    /* a pull could not read the other process (dpmpi_engine_pull_errno) */
#define DPMPI_REPL_ABANDONED 100000   /* a replication job's "error class" when it was abandoned */
#define DPMPI_TAG_HDR 7101            /* replication and restore messages: a slot's header */
#define DPMPI_TAG_DATA 7102           /* ... its data */
#define DPMPI_TAG_BARRIER 7103        /* ... the replication's barrier (+ its round) */
#define DPMPI_CHUNK 4194304           /* snapshot messages of at most 4 MiB (see dpmpi_snap.c) */

typedef struct dpmpi_engine dpmpi_engine;
typedef struct dpmpi_repl dpmpi_repl;
typedef struct {
    int peer;
    int tag;
    int send; /* 1: MPI_Isend, 0: MPI_Irecv */
    void *buf;
    size_t len;
    int wait; /* sends: 0 post at once; 1 post each chunk once the job's feed (dpmpi_repl_start) has
               * copied its bytes; 2 post once dpmpi_repl_release was called */
} dpmpi_op;

/* The engine's settings (DPMPI_SNAPSHOT_NICE, DPMPI_NO_SIMD, DPMPI_REPL_REPORT,
 * DPMPI_HUGE_PAGES), validated by dpmpi.config and set once by Python before the first copy;
 * nice_value 0..19, simd 0 or 1, report_after: seconds after which a replication job still
 * running describes itself on stderr (<= 0: never); huge_pages 0 or 1: slots of 4 MiB or more
 * are advised as transparent huge pages. */
void dpmpi_snap_configure(int nice_value, int simd, double report_after, int huge_pages);
/* The CPUs (n of them; n = 0: none) that the copy and replication threads move to before their
 * next job instead of staying on their rank's CPUs (DPMPI_HELPER_CPUS; set by dpmpi.init).
 * Returns how many were valid. */
int dpmpi_snap_helper_cpus(const int *cpus, int n);
/* How many helper CPUs are set (0: the threads run on their rank's CPUs). */
int dpmpi_snap_helper_count(void);
/* Page-aligned memory (2 MiB-aligned huge pages from 4 MiB, see huge_pages), locked when allowed
 * (*locked = 1), else pre-faulted (*err = errno of mlock). */
void *dpmpi_mem_alloc(size_t nbytes, int want_lock, int *locked, int *err);
/* dpmpi_mem_alloc in two halves: the mapping (no page yet; NULL and *err on failure), then its
 * pages locked when allowed (*locked = 1), else faulted in (*err = errno of mlock). */
void *dpmpi_mem_map(size_t nbytes, int *err);
void dpmpi_mem_settle(void *p, size_t nbytes, int want_lock, int *locked, int *err);
void dpmpi_mem_free(void *p, size_t nbytes, int locked);
/* Fault in [p, p + nbytes) writable, contents unchanged (MADV_POPULATE_WRITE): 0 or an errno. */
int dpmpi_prefault(void *p, size_t nbytes);
/* Exchange the pages of [a, a + len) and [b, b + len) without copying (page-aligned, private
 * anonymous, not overlapping; unlock_b: munlock b first). 0, or an errno: then a's bytes are
 * unspecified and b's unchanged (the caller copies b into a). (dpmpi_pages.c) */
int dpmpi_pages_swap(void *a, void *b, size_t len, int unlock_b);
/* mlock (lock 1) or munlock (0) [p, p + len): 0 or an errno. */
int dpmpi_pages_lock(void *p, size_t len, int lock);
/* The checksum of segments, as a copy job over the same segments computes it. */
uint64_t dpmpi_checksum(int nseg, char *const *src, const size_t *len, size_t unit);

/* Copy threads. A job copies src[i] -> dst[i] (dst NULL or dst[i] NULL: checksum only) in units
 * of `unit` bytes (0: DPMPI_UNIT), after waiting for `gate` (may be NULL) to finish. */
dpmpi_engine *dpmpi_engine_new(int nthreads);
void dpmpi_engine_free(dpmpi_engine *e);
int dpmpi_engine_start(dpmpi_engine *e, int nseg, char *const *dst, char *const *src, const size_t *len, size_t unit,
                       dpmpi_repl *gate);
int dpmpi_engine_busy(dpmpi_engine *e);
/* The running job's number (each start takes the next; a replication job fed by it names it). */
uint64_t dpmpi_engine_job(dpmpi_engine *e);
/* 1 if job `job` has written every byte of [a, a + n) that it writes, or has ended (done or
 * failed: the caller's seal tells); 0 if some of them are still to be copied. */
int dpmpi_engine_ready(dpmpi_engine *e, uint64_t job, const char *a, size_t n);
/* Wait for the job (GIL released); returns 0 or DPMPI_ENGINE_*; *digest = the job's checksum. */
int dpmpi_engine_wait(dpmpi_engine *e, uint64_t *digest);
void dpmpi_engine_fail_after(dpmpi_engine *e, size_t nbytes); /* test hook; 0 disables */
/* A pull: like a checksum-and-copy job, but src[i] are addresses in process `pid` (same node),
 * read with process_vm_readv into dst[i] (never NULL) by the copy threads and the caller that
 * waits; each unit is checksummed once read, so the job's digest is that of the bytes that
 * arrived. No gate. A failed read ends the job with DPMPI_ENGINE_PULL_FAILED. */
int dpmpi_engine_pull(dpmpi_engine *e, int pid, int nseg, char *const *dst, char *const *src, const size_t *len);
/* The errno of the last failed pull's read (0: none; EFAULT also for a short read). */
int dpmpi_engine_pull_errno(dpmpi_engine *e);

/* Replication thread: non-blocking MPI sends/receives, then an optional barrier of point-to-point messages;
 * a thread that waits for a job drives it itself. */
int dpmpi_mpi_bind(const char *libmpi_path);
dpmpi_repl *dpmpi_repl_new(void);
/* `feed` (may be NULL) and `feed_job`: the copy job whose progress gates the sends with wait = 1. */
int dpmpi_repl_start(dpmpi_repl *r, void *comm, void *dtype, int nops, const dpmpi_op *ops, int barrier,
                     dpmpi_engine *feed, uint64_t feed_job);
/* The sends with wait = 2 (a slot's header, written once its copy was sealed) may go. */
void dpmpi_repl_release(dpmpi_repl *r);
/* 0: done, 1: still running after `timeout` seconds (< 0: no limit), < 0: -(MPI error class). */
int dpmpi_repl_wait(dpmpi_repl *r, double timeout);
/* The same without a time limit, driving MPI's progress from the calling thread while it waits
 * (for the program's thread only: the copy threads must not call MPI). */
int dpmpi_repl_wait_progress(dpmpi_repl *r);
/* Op i of the last job: 1 done, 0 pending or unknown, < 0: -(MPI error class). */
int dpmpi_repl_op_state(dpmpi_repl *r, int i);
/* How many sends its jobs left to MPI after their barrier completed (dpmpi_snap.c, barrier_post):
 * their buffers must then be kept for the life of the process. */
int dpmpi_repl_leaked(dpmpi_repl *r);
void dpmpi_repl_abandon(dpmpi_repl *r);
int dpmpi_repl_free(dpmpi_repl *r, double timeout);

/* ---- heartbeat: hung-rank detector (dpmpi_hb.c; see dpmpi/heartbeat.py) ---- */
/* Start this process's heartbeat thread (idempotent): beat in DIR/pid-<pid> every timeout/5 s
 * (at least 0.2 s apart) and SIGKILL a local peer whose beat is older than its timeout.
 * Returns 1 started, 0 nothing to do (already started, or timeout <= 0), < 0: -errno. */
int dpmpi_hb_start(const char *dir, int world_rank, double timeout);
/* The rank named in this process's file (a spawned replacement: its job-wide id). */
void dpmpi_hb_set_rank(int world_rank);
/* For tests and measurements: the thread's kernel id (0: not running), beats so far, period. */
int dpmpi_hb_thread_id(void);
long dpmpi_hb_beats(void);
double dpmpi_hb_period(void);
/* The wait end_mpi makes before its exit agreement, and the Finalize watchdog before it ends
 * the process (dpmpi_hb_wait_silent, set by dpmpi_hb_start) */
void dpmpi_exit_wait_silent_with(int (*fn)(void));

/* ---- failure watcher (dpmpi_watch.c; see dpmpi/watcher.py) ---- */
typedef struct {
    int noticed;   /* 1: a death (or a revoke) was noticed in the current generation */
    int source;    /* 1 pidfd, 2 ULFM (the receive on dpmpi's communicator failed) */
    int id;        /* pidfd: the peer's process id (world rank); ULFM: the MPI error class */
    double at;     /* time.time() when it was noticed */
    unsigned long gen;
    int npeers;    /* pidfds watched in this generation */
    int ulfm;      /* 1: a ULFM receive is watched in this generation */
    long wakeups;  /* poll() returns so far */
    long tests;    /* MPI_Test calls so far */
    long signals;  /* signals sent to the main thread so far */
    int tid;       /* the thread's kernel id (0: not started) */
} dpmpi_watch_info;

/* Start the watcher thread (idempotent): on each notice it sends signal `signo` to the thread
 * `target` (a pthread_t, e.g. threading.main_thread().ident). 1 started, 0 already, < 0: -errno. */
int dpmpi_watch_start(unsigned long target, int signo);
/* Bind MPI_Irecv/MPI_Test/MPI_Error_class from the loaded libmpi (for the ULFM part). 0 or < 0. */
int dpmpi_watch_bind_mpi(const char *libmpi_path);
/* A new generation: watch these pidfds (ids[i]: whose), and when comm is not NULL, a receive
 * from any source with `tag` on comm, tested every `period` seconds. Clears the notice. The fds
 * must stay open for the life of the process. Returns the generation (> 0) or < 0. */
int dpmpi_watch_set(int n, const int *fds, const int *ids, void *comm, void *byte_type, int tag, double period);
/* Close the MPI gate: when it returns the thread is in no MPI call and starts none until the
 * next dpmpi_watch_set with a communicator. */
void dpmpi_watch_quiesce(void);
/* Close the thread's MPI use for good, as at the process's exit (before a program's own
 * MPI_Finalize: dpmpi/_guard.py finalize). */
void dpmpi_watch_close(void);
/* Send no more signals (at interpreter exit: Python resets the handler to SIG_DFL, which would
 * end the process). */
void dpmpi_watch_stop_signals(void);
/* A notice that no handler has taken `seconds` after it was recorded ends the process as a failure
 * (0: never; dpmpi_watch.c says why). */
void dpmpi_watch_set_stuck(double seconds);
/* The notice word of the current generation (read it without a call: p[0]). */
int *dpmpi_watch_noticed_ptr(void);
/* Written 1 by the Python handler of the watcher's signal when it runs: no more re-sends. */
int *dpmpi_watch_acked_ptr(void);
void dpmpi_watch_get(dpmpi_watch_info *out);
/* Sleep up to `seconds` (the GIL released), or until a watched pidfd fires: 1 when one fired since
 * *seen (then updated), else 0. For idle spares: a repair follows a peer's end. */
int dpmpi_watch_nap(double seconds, long *seen);

/* ---- telling Open MPI of a death the watcher saw (dpmpi_tell.c) ---- */
/* Bind PMIx's event and info-list calls from the libpmix Open MPI loaded. 0, or < 0: not loaded
 * (-1), or a call is missing (-2). */
int dpmpi_tell_bind(const char *libpmix_path);
/* Process `id` (dpmpi's process id) is PMIx process (nspace, rank): prepare its event. 0 or < 0. */
int dpmpi_tell_add(int id, const char *nspace, unsigned rank);
/* (the watcher thread) Process `id` has ended: raise the local event, once per id. 1 told, 0 not
 * (unknown id, told before, closed), else PMIx's error code. */
int dpmpi_tell_failed(int id);
/* Tell no more (at exit, before dpmpi's exit agreement). */
void dpmpi_tell_close(void);
/* For tests and measurements: events raised so far, and when the last one was raised
 * (time.time()). */
long dpmpi_tell_count(void);
double dpmpi_tell_last_at(void);

/* ---- late messages from a dead peer (dpmpi_late.c) ---- */
/* Install the filters of ob1's FIN, ACK, PUT and FRAG handlers (after MPI_Init; once). 0: installed
 * (or already); negative: not installed, nothing changed (-1 binding, -2 not Open MPI 5.0.11,
 * -3/-4/-5 library, -10..-13 ob1's handler k not found: another PML, or another copy's filter
 * already in place, -20/-21 request layout check failed). */
int dpmpi_late_install(const char *libmpi_path);
int dpmpi_late_installed(void);
/* messages dropped so far, by kind: 0 FIN, 1 ACK, 2 PUT, 3 FRAG (-1: no such kind) */
long dpmpi_late_dropped(int kind);
long dpmpi_late_seen(int kind); /* messages of that kind the filter saw */
/* for tests: ob1's FIN handler registered again (as when processes are added) leaves the filter
 * in place: 1 */
int dpmpi_late_reregister_check(void);
/* the decisions, exposed for tests: a request complete with an error; a FIN that is stale */
int dpmpi_late_request_given_up(const void *req);
int dpmpi_late_fin_stale(const void *frag, const void *from_btl, const void *from_endpoint);

/* ---- Open MPI's revoke of a communicator still being created (dpmpi_revoke.c) ---- */
/* The function to put into libmpi's PLT slot for ompi_comm_revoke_local (libmpi: its dlopen
 * handle), or NULL when this libmpi's code is not the one it knows (then nothing is patched). */
void *dpmpi_revoke_local_hook(void *libmpi);
/* How many revokes of a communicator without collectives yet this process let through. */
long dpmpi_revoke_standins(void);
