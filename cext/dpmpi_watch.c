/* dpmpi failure watcher: notice a peer's death while the program's main thread computes, and
 * tell that thread at once (a signal), instead of at its next MPI call.
 *
 * Two sources, both watched by one C thread ("dpmpi-watch"):
 *  - pidfds: for each active peer on this node (same kernel and pid namespace), one on its
 *    process and one on its own watcher thread (PIDFD_THREAD, Linux >= 6.9), opened by
 *    dpmpi/watcher.py; poll() wakes the thread when either ends. The thread's end comes first
 *    when the peer was killed: a process is reported gone only once all its threads have exited,
 *    and a killed process's nice-19 snapshot threads can wait hundreds of ms for the CPU they
 *    need to exit on a busy node (measured here). No MPI, no CPU while nothing happens.
 *  - ULFM (optional, for peers on other nodes): a receive from MPI_ANY_SOURCE posted on a
 *    communicator of dpmpi's own (a duplicate of the active one); Open MPI completes it in error
 *    (ERR_PROC_FAILED_PENDING) when a process of it fails, or ERR_REVOKED when a peer started a
 *    repair (which revokes it). Open MPI only reports that from inside an MPI call, so the
 *    thread tests it every `period` seconds: poll()'s timeout.
 *
 * Owner and lifetime (one thread per process):
 *  - Started by dpmpi_watch_start(), called once by dpmpi/watcher.py from dpmpi.init(). Never
 *    stopped or joined: it runs until the process is gone, and everything it touches is static
 *    (never freed), so it cannot crash at exit. All signals are blocked in it.
 *  - A "generation" is one set of peers: dpmpi_watch_set() (after init and after each repair
 *    commits) replaces the set, clears the notice and wakes the thread through an eventfd. A
 *    notice is recorded only for the generation it belongs to, so a death seen just before a
 *    repair cannot interrupt the step after it.
 *  - It calls MPI (MPI_Irecv, MPI_Test, MPI_Error_class) only with `mpi_mu` held and only while
 *    the gate is open: dpmpi_watch_set() with a communicator opens it for that generation;
 *    dpmpi_watch_quiesce() closes it and returns once no call is in progress. A repair calls
 *    quiesce before its first MPI call; the process's exit closes it for good (an on_exit
 *    handler registered after dpmpi's, so it runs before dpmpi's exit agreement and
 *    MPI_Finalize). The request it posts is never freed (invariant 4 of docs/threads.md): it
 *    stays pending on a static buffer, on a communicator that is never freed.
 *  - A pidfd that fires is also told to this process's Open MPI (dpmpi_tell.c), right after the
 *    signal, so that the repair does not wait for the runtime's own report of the death.
 *  - On a notice it sends a signal (`signo`) to the main thread; what the signal does there
 *    (raise ProcFailedError, or nothing) is decided by dpmpi/interrupts.py's handler, which first
 *    sets `acked` (unless it ran inside a `__del__`, where a raise is lost: then it waits for the
 *    next signal). Until it has, the thread sends the signal again, RESEND_MAX times at most,
 *    2, 4, 8, ... ms apart: CPython can take a signal without running its handler before a
 *    blocking call that the signal then does not interrupt (it arrived while the main thread
 *    waited for the GIL; seen: a 250 ms time.sleep ran to its end in 3 of ~40 e2e jobs). When the
 *    interpreter ends, Python resets its handlers to SIG_DFL, whose action for this real-time
 *    signal is to end the process: so an atexit hook stops the signals first
 *    (dpmpi_watch_stop_signals), while peers that end normally are still noticed during the
 *    exit agreement.
 *  - A notice that no handler has taken `stuck_s` seconds after it was recorded (the main thread
 *    never came back to Python: it stays inside a call that the failure does not reach) ends the
 *    process as a failure (status record, SIGKILL), so that the others' repair, which waits for
 *    it in its Shrink, completes without it. Before (fiftieth session), the others reached their
 *    repair deadline and ended one by one while the stuck process lived on: seen with a survivor
 *    inside the allgather of Open MPI's one-sided `sm` component in `MPI_Win_allocate`, over its
 *    private copy of the communicator that no revoke reaches (bench/strangers/sync_step.py, one
 *    kill in 40 jobs): the job shrank to that one rank. dpmpi/watcher.py sets `stuck_s` to 0.6 of
 *    DPMPI_REPAIR_TIMEOUT (the others' deadline is all of it, counted from their entering the
 *    repair); 0 (the default here): never. Not while this process repairs (from
 *    dpmpi_watch_quiesce to the next dpmpi_watch_set): a death noticed while its main thread is
 *    inside the repair's Shrink is taken after it, and the repair has its own deadline.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "dpmpi_c.h"
#include "dpmpi_mpi.h"
#include "dpmpi_util.h"

#define WATCH_MAX 1024
#define SRC_PIDFD 1
#define SRC_ULFM 2
#define OMPI_ANY_SOURCE (-1) /* Open MPI's MPI_ANY_SOURCE */
/* flags added to a process id in the table (watcher.py's _THREAD_FD, _TELL_ONLY): the fd is that
 * process's watcher thread; tell Open MPI when it fires but record no notice (a spare's table) */
#define WATCH_THREAD_FD (1 << 24)
#define WATCH_TELL_ONLY (1 << 25)


static struct {
    pthread_mutex_t mu; /* the configuration and the notice */
    int started, closed;
    int efd;
    pthread_t target;
    int signo;
    unsigned long gen;
    int n;
    int fds[WATCH_MAX], ids[WATCH_MAX];
    void *comm, *byte_type;
    int tag;
    double period;
    /* the notice of the current generation (noticed: read by Python through a pointer) */
    atomic_int noticed;
    int source, id;
    double at;
    /* set by Python's handler when it runs (through a pointer); until then the signal is sent
     * again at resend_at (monotonic seconds), resends times so far */
    atomic_int acked;
    int resends;
    double resend_at, resend_gap;
    /* when the notice was recorded (monotonic seconds), and how long it may stay without a handler
     * taking it before the process ends itself (0: never) */
    double noticed_mono, stuck_s;
    int repairing; /* from dpmpi_watch_quiesce (a repair begins) to the next dpmpi_watch_set */
    /* the MPI gate */
    pthread_mutex_t mpi_mu;
    int mpi_ok;
    unsigned long mpi_gen;
    const dpmpi_mpi_api *mpi; /* NULL until dpmpi_watch_bind_mpi */
    /* counters */
    atomic_long wakeups, tests, signals;
    atomic_int tid;
} w = {.mu = PTHREAD_MUTEX_INITIALIZER, .mpi_mu = PTHREAD_MUTEX_INITIALIZER, .efd = -1};

/* idle spares nap on this (dpmpi_watch_nap) and wake when a pidfd fires: a repair follows */
static pthread_mutex_t nap_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nap_cv = PTHREAD_COND_INITIALIZER;
static long fired; /* pidfds that fired so far (under nap_mu) */

static char recv_buf[8]; /* what the receive would get (nobody sends): static, never freed */

#define RESEND_MAX 8
#define RESEND_FIRST_S 0.002

static double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_real(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Seconds until the signal must be sent again (-1: never), and send it if due now: a notice of
 * the current generation whose signal no handler has taken yet. */
static double resend_due(void) {
    double wait = -1.0;
    pthread_mutex_lock(&w.mu);
    if (atomic_load(&w.noticed) && !atomic_load(&w.acked) && w.signo > 0 && w.resends < RESEND_MAX) {
        double now = now_mono();
        if (now >= w.resend_at) {
            atomic_fetch_add(&w.signals, 1);
            w.resends++;
            w.resend_gap *= 2.0;
            w.resend_at = now + w.resend_gap;
            pthread_kill(w.target, w.signo);
        }
        if (w.resends < RESEND_MAX) wait = w.resend_at - now > 0 ? w.resend_at - now : 0.0;
    }
    pthread_mutex_unlock(&w.mu);
    return wait;
}

/* Seconds until a notice that no handler has taken counts as stuck (-1: none pending); when it
 * does now, end the process as a failure (does not return). */
static double stuck_due(void) {
    pthread_mutex_lock(&w.mu);
    /* (not during a repair: its main thread is inside Shrink etc. with a notice it takes after;
     * the repair has its own deadline) */
    int armed = atomic_load(&w.noticed) && !atomic_load(&w.acked) && w.signo > 0 && w.stuck_s > 0 && !w.closed &&
                !w.repairing;
    double left = armed ? w.noticed_mono + w.stuck_s - now_mono() : -1.0, limit = w.stuck_s;
    pthread_mutex_unlock(&w.mu);
    if (!armed || left > 0) return left;
    char cause[512];
    snprintf(cause, sizeof cause,
             "\"stuck in a call for %g s after a peer's death was noticed (a call that the failure does not reach, "
             "e.g. inside Open MPI over a communicator that no revoke reaches): ended so that the others' repair "
             "completes without it (0.6 of DPMPI_REPAIR_TIMEOUT)\"", limit);
    static const char line[] = "dpmpi: this process's main thread stayed inside a call after a peer's death was "
                               "noticed, past 0.6 of DPMPI_REPAIR_TIMEOUT: ending it as a failure\n";
    dpmpi_write_all(2, line, sizeof line - 1);
    dpmpi_exit_set_cause(cause);
    dpmpi_die(1);
    return -1.0;
}

void dpmpi_watch_set_stuck(double seconds) {
    pthread_mutex_lock(&w.mu);
    w.stuck_s = seconds > 0 ? seconds : 0.0; /* (read after each notice, which this thread records) */
    pthread_mutex_unlock(&w.mu);
}

/* Record a notice for generation `gen` (if it is still the current one and has none yet), then
 * signal the main thread. */
static void notice(unsigned long gen, int source, int id) {
    pthread_mutex_lock(&w.mu);
    if (gen == w.gen && !atomic_load(&w.noticed)) {
        w.source = source;
        w.id = id;
        w.at = now_real();
        w.noticed_mono = now_mono();
        atomic_store(&w.acked, 0);
        atomic_store(&w.noticed, 1);
        if (w.signo > 0) { /* under the lock: after dpmpi_watch_stop_signals() none is sent */
            atomic_fetch_add(&w.signals, 1);
            w.resends = 0;
            w.resend_gap = RESEND_FIRST_S;
            w.resend_at = now_mono() + w.resend_gap;
            pthread_kill(w.target, w.signo);
        }
    }
    pthread_mutex_unlock(&w.mu);
}

static pthread_mutex_t started_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;

static void *watch_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&started_mu);
    atomic_store(&w.tid, (int)syscall(SYS_gettid));
    pthread_cond_broadcast(&started_cv);
    pthread_mutex_unlock(&started_mu);
    static struct pollfd pf[WATCH_MAX + 1];
    static int fds[WATCH_MAX], ids[WATCH_MAX], done[WATCH_MAX], slot_of[WATCH_MAX];
    unsigned long gen = 0;
    int n = 0, have_comm = 0, posted = 0, ulfm_done = 0;
    void *comm = NULL, *byte_type = NULL, *req = NULL;
    int tag = 0;
    double period = 0.01;
    int first = 1;
    for (;;) {
        pthread_mutex_lock(&w.mu);
        if (first || w.gen != gen) { /* a new generation: take its configuration */
            first = 0;
            gen = w.gen;
            n = w.n;
            for (int i = 0; i < n; i++) {
                fds[i] = w.fds[i];
                ids[i] = w.ids[i];
                done[i] = 0;
            }
            comm = w.comm;
            byte_type = w.byte_type;
            tag = w.tag;
            period = w.period > 0 ? w.period : 0.01;
            have_comm = comm != NULL;
            posted = 0; /* a request of an older generation stays pending, untouched, forever */
            ulfm_done = 0;
        }
        pthread_mutex_unlock(&w.mu);
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            pf[k].fd = fds[i];
            pf[k].events = POLLIN;
            pf[k].revents = 0;
            slot_of[k] = i;
            k++;
        }
        pf[k].fd = w.efd;
        pf[k].events = POLLIN;
        pf[k].revents = 0;
        int timeout = (have_comm && !ulfm_done) ? (int)(period * 1000.0 + 0.5) : -1;
        if (timeout == 0) timeout = 1;
        double resend = resend_due();
        if (resend >= 0) {
            int ms = (int)(resend * 1000.0) + 1;
            if (timeout < 0 || ms < timeout) timeout = ms;
        }
        double stuck = stuck_due();
        if (stuck >= 0) {
            int ms = (int)(stuck * 1000.0) + 1;
            if (timeout < 0 || ms < timeout) timeout = ms;
        }
        int rc = poll(pf, (nfds_t)(k + 1), timeout);
        atomic_fetch_add(&w.wakeups, 1);
        if (rc < 0 && errno != EINTR) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL); /* should not happen; never spin */
            continue;
        }
        if (rc > 0 && (pf[k].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(w.efd, &v, sizeof v);
            (void)r;
        }
        for (int j = 0; rc > 0 && j < k; j++) {
            if (pf[j].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) {
                int i = slot_of[j];
                done[i] = 1; /* level-triggered: do not wake for it again */
                /* the main thread first (PMIx_Notify_event may wait for PMIx's own thread), then
                 * Open MPI: the repair the signal starts needs it only at its shrink */
                if (!(ids[i] & WATCH_TELL_ONLY)) notice(gen, SRC_PIDFD, ids[i]);
                dpmpi_tell_failed(ids[i] % WATCH_THREAD_FD); /* (% drops both flags) */
                pthread_mutex_lock(&nap_mu);
                fired++;
                pthread_cond_broadcast(&nap_cv);
                pthread_mutex_unlock(&nap_mu);
            }
        }
        if (have_comm && !ulfm_done) {
            pthread_mutex_lock(&w.mpi_mu);
            if (w.mpi_ok && w.mpi_gen == gen) {
                int code;
                if (!posted) {
                    code = w.mpi->irecv(recv_buf, 1, byte_type, OMPI_ANY_SOURCE, tag, comm, &req);
                    if (code == 0) posted = 1;
                } else {
                    int flag = 0;
                    atomic_fetch_add(&w.tests, 1);
                    code = w.mpi->test(&req, &flag, NULL);
                    if (code == 0 && flag) posted = 0; /* a message (nobody sends one): post again */
                }
                if (code != 0) {
                    int cls = code;
                    w.mpi->error_class(code, &cls);
                    ulfm_done = 1;
                    pthread_mutex_unlock(&w.mpi_mu);
                    notice(gen, SRC_ULFM, cls);
                    continue;
                }
            }
            pthread_mutex_unlock(&w.mpi_mu);
        }
    }
    return NULL;
}

static void watch_on_exit(int status, void *arg) {
    (void)status;
    (void)arg;
    pthread_mutex_lock(&w.mpi_mu);
    w.mpi_ok = 0;
    pthread_mutex_unlock(&w.mpi_mu);
    pthread_mutex_lock(&w.mu);
    w.closed = 1;
    pthread_mutex_unlock(&w.mu);
    dpmpi_tell_close(); /* peers that end after the exit agreement have not failed */
}

void dpmpi_watch_close(void) { watch_on_exit(0, NULL); }

int dpmpi_watch_start(unsigned long target, int signo) {
    pthread_mutex_lock(&w.mu);
    if (w.started) {
        pthread_mutex_unlock(&w.mu);
        return 0;
    }
    w.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w.efd < 0) {
        int err = errno;
        pthread_mutex_unlock(&w.mu);
        return -err;
    }
    w.target = (pthread_t)target;
    w.signo = signo;
    /* registered after dpmpi's exit handler, so it runs before it (on_exit runs in reverse):
     * the gate is closed before the exit agreement and MPI_Finalize */
    on_exit(watch_on_exit, NULL);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* no signal is ever handled by this thread */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, watch_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(w.efd);
        w.efd = -1;
        pthread_mutex_unlock(&w.mu);
        return -rc;
    }
    pthread_setname_np(t, "dpmpi-watch");
    w.started = 1;
    pthread_mutex_unlock(&w.mu);
    /* its kernel id is part of this process's identity (peers watch this thread's end) */
    pthread_mutex_lock(&started_mu);
    while (atomic_load(&w.tid) == 0) pthread_cond_wait(&started_cv, &started_mu);
    pthread_mutex_unlock(&started_mu);
    return 1;
}

int dpmpi_watch_bind_mpi(const char *libmpi_path) {
    const dpmpi_mpi_api *api = dpmpi_mpi_open(libmpi_path);
    if (!api) return -1;
    if (!api->irecv || !api->test || !api->error_class) return -2;
    pthread_mutex_lock(&w.mpi_mu);
    w.mpi = api;
    pthread_mutex_unlock(&w.mpi_mu);
    return 0;
}

int dpmpi_watch_set(int n, const int *fds, const int *ids, void *comm, void *byte_type, int tag, double period) {
    if (n < 0 || n > WATCH_MAX) return -EINVAL;
    pthread_mutex_lock(&w.mu);
    if (!w.started) {
        pthread_mutex_unlock(&w.mu);
        return -ESRCH;
    }
    if (comm != NULL && (w.closed || !w.mpi)) comm = NULL; /* exiting, or MPI not bound */
    /* the gate first: the thread may be testing the previous generation's request */
    pthread_mutex_lock(&w.mpi_mu);
    w.mpi_ok = comm != NULL;
    w.mpi_gen = w.gen + 1;
    pthread_mutex_unlock(&w.mpi_mu);
    w.gen += 1;
    w.n = n;
    for (int i = 0; i < n; i++) {
        w.fds[i] = fds[i];
        w.ids[i] = ids[i];
    }
    w.comm = comm;
    w.byte_type = byte_type;
    w.tag = tag;
    w.period = period;
    atomic_store(&w.noticed, 0);
    w.repairing = 0;
    w.resends = 0;
    w.source = 0;
    w.id = 0;
    w.at = 0.0;
    unsigned long gen = w.gen;
    uint64_t one = 1;
    ssize_t r = write(w.efd, &one, sizeof one);
    (void)r;
    pthread_mutex_unlock(&w.mu);
    return (int)(gen & 0x7fffffff);
}

void dpmpi_watch_stop_signals(void) {
    pthread_mutex_lock(&w.mu);
    w.signo = 0;
    pthread_mutex_unlock(&w.mu);
}

void dpmpi_watch_quiesce(void) {
    pthread_mutex_lock(&w.mpi_mu); /* waits for a call in progress */
    w.mpi_ok = 0;
    pthread_mutex_unlock(&w.mpi_mu);
    pthread_mutex_lock(&w.mu);
    w.repairing = 1;
    pthread_mutex_unlock(&w.mu);
}

int *dpmpi_watch_noticed_ptr(void) { return (int *)&w.noticed; }

int *dpmpi_watch_acked_ptr(void) { return (int *)&w.acked; }

void dpmpi_watch_get(dpmpi_watch_info *out) {
    pthread_mutex_lock(&w.mu);
    out->noticed = atomic_load(&w.noticed);
    out->source = w.source;
    out->id = w.id;
    out->at = w.at;
    out->gen = w.gen;
    out->npeers = w.n;
    out->ulfm = w.comm != NULL;
    pthread_mutex_unlock(&w.mu);
    out->wakeups = atomic_load(&w.wakeups);
    out->tests = atomic_load(&w.tests);
    out->signals = atomic_load(&w.signals);
    out->tid = atomic_load(&w.tid);
}

int dpmpi_watch_nap(double seconds, long *seen) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long ns = until.tv_nsec + (long)(seconds * 1e9);
    until.tv_sec += ns / 1000000000L;
    until.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(&nap_mu);
    while (fired == *seen) {
        if (pthread_cond_timedwait(&nap_cv, &nap_mu, &until) == ETIMEDOUT) break;
    }
    int woke = fired != *seen;
    *seen = fired;
    pthread_mutex_unlock(&nap_mu);
    return woke;
}
