/* dpmpi C helpers: the exit guard, the stall watchdog, and fault-injection primitives.
 *
 * The exit guard exists because only C's exit() knows a process's real exit status, and the
 * status decides how an MPI rank must end:
 *   - status != 0: the rank failed. With Open MPI + ULFM a rank that exits with a non-zero status
 *     is never reported to its peers, and one that calls MPI_Finalize waits for them forever.
 *     So it writes a status record and ends with SIGKILL, which every survivor notices.
 *   - status == 0: the rank completed. It waits (without spinning) in a fault-tolerant agreement
 *     on COMM_WORLD until every live rank has completed, then calls MPI_Finalize under a watchdog
 *     (Finalize can hang after a failure; open-mpi/ompi#11404).
 * MPI is reached through the one binding of the libmpi that the process already loaded
 * (dpmpi_mpi.h), so the module does not link against any MPI at build time. Handles follow the
 * Open MPI ABI (pointers), the only MPI with working ULFM that dpmpi supports.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpmpi_c.h"
#include "dpmpi_mpi.h"
#include "dpmpi_util.h"

#ifndef DPMPI_C_VERSION /* set by meson.build from its project() version */
#error "build with meson: DPMPI_C_VERSION comes from meson.build"
#endif

const char *dpmpi_c_version(void) { return DPMPI_C_VERSION; }

static struct {
    int registered;
    int record;
    int rank;
    pid_t pid;       /* the process that set the record up: a forked child neither records nor ends MPI */
    int owner;       /* the process the launcher started (or what it exec'd into): records even without MPI */
    int mpi_seen;    /* this process initialised MPI: it is a rank, so it records */
    int recorded;    /* its record is written */
    int stood_down;  /* another copy of this guard (dpmpi's Python module) owns this process's end */
    char cause[512]; /* already JSON-encoded by the caller */
    int *recovered;
    size_t n_recovered, cap_recovered;
    int idle_spares[1024]; /* idle spares in the newest plan: their death loses no work */
    int n_idle_spares;
    pthread_mutex_t lock;
    /* MPI */
    void *world;
    int owns_finalize;
    double finalize_timeout;
    const dpmpi_mpi_api *mpi; /* NULL until dpmpi_exit_set_mpi bound it */
    int ulfm;                 /* the library has the agreement (MPIX_Comm_iagree, failure_ack) */
    void *adopted_request; /* a pending exit agreement posted from Python (spares) */
    int *adopted_flag;     /* ... and its buffer */
    int agreed;            /* the exit agreement is already done */
    int job_failed;        /* its result: some live process knew of a failure in the job (uniform) */
} g = {.rank = -1, .cause = "null", .lock = PTHREAD_MUTEX_INITIALIZER, .finalize_timeout = 2.0};


static void sleep_seconds(double s) {
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int mpi_active(void) {
    int init = 0, fin = 0;
    if (!g.mpi) return 0;
    if (g.mpi->initialized(&init) != 0 || !init) return 0;
    if (g.mpi->finalized(&fin) != 0 || fin) return 0;
    return 1;
}

/* One line on stderr that dpmpi-run reads to compute the job's exit code. Written by the process
 * that is the rank: the one that initialised MPI, or the one the launcher started; never by a
 * child that a rank forked or started (it inherits the environment, not the rank). */
static int records(void) { return g.record && !g.stood_down && getpid() == g.pid && (g.owner || g.mpi_seen); }

static void write_record(int status) {
    if (!records()) return;
    g.recorded = 1; /* (a later record of this process replaces it: dpmpi-run keeps the last) */
    char buf[8192];
    int n = snprintf(buf, sizeof buf, "[dpmpi-status] {\"rank\": %d, \"pid\": %ld, \"status\": %d, \"mpi\": %s, \"cause\": %s, \"recovered\": [",
                     g.rank, (long)getpid(), status, g.mpi_seen ? "true" : "false", g.cause);
    pthread_mutex_lock(&g.lock);
    for (size_t i = 0; i < g.n_recovered && n < (int)sizeof buf - 32; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, i ? ", %d" : "%d", g.recovered[i]);
    pthread_mutex_unlock(&g.lock);
    n += snprintf(buf + n, sizeof buf - (size_t)n, "], \"idle_spares\": [");
    for (int i = 0; i < g.n_idle_spares && n < (int)sizeof buf - 32; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, i ? ", %d" : "%d", g.idle_spares[i]);
    n += snprintf(buf + n, sizeof buf - (size_t)n, "]}\n");
    fflush(NULL);
    dpmpi_write_all(2, buf, (size_t)n);
}

void dpmpi_write_record(int status) { write_record(status); }

void dpmpi_die(int status) {
    write_record(status);
    fflush(NULL);
    /* A signal death is the only end Open MPI's ULFM reports to the survivors. */
    kill(getpid(), SIGKILL);
    _exit(status ? status : 1);
}

/* ---- MPI's own abort ----
 * When Open MPI 5.0.x decides to abort a process (MPI_ERRORS_ARE_FATAL, e.g. "Send error after
 * request freed", which its own code raises when a send that it freed internally fails later,
 * seen in a survivor after two ranks died together; or MPI_Abort under --with-ft ulfm), it calls
 * PMIx_Abort and then _exit(code): a non-zero exit, which ULFM does not report to the survivors,
 * so they hung in Shrink. dpmpi points libmpi's own reference to _exit (its GOT slot) at a
 * function that ends the process as a failure the survivors notice: status record, SIGKILL. */
static void mpi_exit_hook(int status) {
    if (status == 0) _exit(0);
    static const char msg[] = "dpmpi: the MPI library aborted this process; ending it by SIGKILL so that the other "
                              "ranks notice and repair around it\n";
    dpmpi_write_all(2, msg, sizeof msg - 1);
    snprintf(g.cause, sizeof g.cause, "%s", "\"the MPI library aborted the process (MPI_ERRORS_ARE_FATAL or MPI_Abort)\"");
    dpmpi_die(status);
}

/* ---- Open MPI's "Send error after request freed" ----
 * With ULFM, a revoke completes pending requests at the MPI level with MPI_ERR_REVOKED while the
 * PML may still be moving their data; MPI_Wait then frees them, and when ob1 later finishes such
 * a send it finds the error status on a freed request and calls the fatal error handler: a
 * healthy process aborts, without any process having died (measured: a revoke during an 16 MiB
 * Isend/Irecv exchange aborted every rank, 5 of 5 runs; tests/programs/revoke_inflight.py).
 * The error is the revoke the program already saw, so dpmpi drops this one call of the fatal
 * handler (libmpi's own reference to it, its PLT slot) and lets ob1 return the request. Every
 * other call of the handler goes on to Open MPI's. */
#define FREED_SEND_ERROR "Send error after request freed"
typedef void (*fn_fatal_comm)(void **, int *, ...);
static fn_fatal_comm real_fatal_comm;

static void fatal_comm_hook(void **comm, int *err, ...) {
    va_list ap;
    va_start(ap, err);
    const char *msg = va_arg(ap, const char *);
    va_end(ap);
    if (comm == NULL && msg && strcmp(msg, FREED_SEND_ERROR) == 0) {
        static atomic_int said;
        if (atomic_exchange(&said, 1) == 0) {
            static const char note[] = "dpmpi: ignored Open MPI's \"" FREED_SEND_ERROR "\" (a send that a revoke already "
                                       "ended with an error); this process goes on\n";
            dpmpi_write_all(2, note, sizeof note - 1);
        }
        return;
    }
    if (real_fatal_comm) real_fatal_comm(comm, err, msg, NULL);
    _exit(1); /* (the real handler does not return) */
}

static int patch_relocs(ElfW(Addr) base, const ElfW(Rela) *rel, size_t bytes, const ElfW(Sym) *symtab,
                        const char *strtab, const char *name, void *target) {
    int n = 0;
    long page = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; rel && i < bytes / sizeof *rel; i++) {
        const ElfW(Sym) *sym = &symtab[ELF64_R_SYM(rel[i].r_info)];
        if (strcmp(strtab + sym->st_name, name) != 0) continue;
        void **slot = (void **)(base + rel[i].r_offset);
        uintptr_t start = (uintptr_t)slot & ~(uintptr_t)(page - 1);
        if (mprotect((void *)start, (size_t)page * 2, PROT_READ | PROT_WRITE) != 0) continue;
        __atomic_store_n(slot, target, __ATOMIC_SEQ_CST);
        n++;
    }
    return n;
}

static int revoke_only; /* hook_cb patches only the revoke slot (before MPI_Init: dpmpi_hook_revoke) */

static int hook_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    int *patched = data;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "/libmpi.so")) return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 0;
    ElfW(Addr) symtab = 0, strtab = 0, jmprel = 0, rela = 0;
    size_t pltsz = 0, relasz = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: symtab = dyn->d_un.d_ptr; break;
        case DT_STRTAB: strtab = dyn->d_un.d_ptr; break;
        case DT_JMPREL: jmprel = dyn->d_un.d_ptr; break;
        case DT_PLTRELSZ: pltsz = dyn->d_un.d_val; break;
        case DT_RELA: rela = dyn->d_un.d_ptr; break;
        case DT_RELASZ: relasz = dyn->d_un.d_val; break;
        }
    }
    /* glibc relocates these addresses in place; if not, they are offsets from the load base */
    ElfW(Addr) b = info->dlpi_addr;
    if (symtab && symtab < b) symtab += b;
    if (strtab && strtab < b) strtab += b;
    if (jmprel && jmprel < b) jmprel += b;
    if (rela && rela < b) rela += b;
    if (!symtab || !strtab) return 0;
    void *h = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
    void *revoke_hook = dpmpi_revoke_local_hook(h); /* (dpmpi_revoke.c says why) */
    if (revoke_hook)
        *patched += patch_relocs(b, (const ElfW(Rela) *)jmprel, pltsz, (const ElfW(Sym) *)symtab,
                                 (const char *)strtab, "ompi_comm_revoke_local", revoke_hook);
    if (revoke_only) return 1;
    *patched += patch_relocs(b, (const ElfW(Rela) *)jmprel, pltsz, (const ElfW(Sym) *)symtab, (const char *)strtab,
                             "_exit", (void *)mpi_exit_hook);
    *patched += patch_relocs(b, (const ElfW(Rela) *)rela, relasz, (const ElfW(Sym) *)symtab, (const char *)strtab,
                             "_exit", (void *)mpi_exit_hook);
    real_fatal_comm = h ? (fn_fatal_comm)dlsym(h, "ompi_mpi_errors_are_fatal_comm_handler") : NULL;
    if (real_fatal_comm) /* only the PLT slot (direct calls); the errhandler objects keep the real address */
        *patched += patch_relocs(b, (const ElfW(Rela) *)jmprel, pltsz, (const ElfW(Sym) *)symtab,
                                 (const char *)strtab, "ompi_mpi_errors_are_fatal_comm_handler", (void *)fatal_comm_hook);
    return 1;
}

/* Only the revoke stand-in, before MPI_Init (the preloaded guard): a rank killed while the
 * others are inside MPI_Init made them segfault there, as COMM_WORLD's collectives are selected
 * late in MPI_Init (every process: a storm of backtraces instead of dpmpi-run's line). */
int dpmpi_hook_revoke(void) {
#if defined(__x86_64__) || defined(__aarch64__)
    int patched = 0;
    revoke_only = 1;
    dl_iterate_phdr(hook_cb, &patched);
    revoke_only = 0;
    return patched;
#else
    return 0;
#endif
}

int dpmpi_hook_mpi_abort(void) {
#if defined(__x86_64__) || defined(__aarch64__)
    static int done = -1;
    if (done >= 0) return done;
    int patched = 0;
    dl_iterate_phdr(hook_cb, &patched);
    done = patched;
    return patched;
#else
    return 0;
#endif
}

static atomic_int finalize_returned;

/* Set once by the heartbeat (dpmpi_hb.c, in the Python module only; C programs have none) when it
 * starts: dpmpi_hb_wait_silent, which end_mpi calls before its exit agreement and the Finalize
 * watchdog before it ends the process (1: it waited for a stopped local peer to be killed). */
static int (*_Atomic silent_peers_wait)(void);

void dpmpi_exit_wait_silent_with(int (*fn)(void)) { atomic_store(&silent_peers_wait, fn); }

static int wait_silent_peers(void) {
    int (*wait)(void) = atomic_load(&silent_peers_wait);
    return wait ? wait() : 0;
}

/* Owner: end_mpi; lifetime: from just before MPI_Finalize until it returns (then it does nothing)
 * or until the deadline (then it ends the process). Touches no MPI. */
static void *finalize_watchdog(void *arg) {
    (void)arg;
    sleep_seconds(g.finalize_timeout);
    if (atomic_load(&finalize_returned)) return NULL;
    /* a peer stopped since, which Finalize may be waiting for: the heartbeat kills it (else
     * nothing would, once this job's other processes are gone), then Finalize gets its time again */
    if (wait_silent_peers()) {
        sleep_seconds(g.finalize_timeout);
        if (atomic_load(&finalize_returned)) return NULL;
    }
    static const char msg[] = "dpmpi: MPI_Finalize did not return in time; ending the process without it\n";
    dpmpi_write_all(2, msg, sizeof msg - 1);
    if (!g.recorded) write_record(0); /* an explicit MPI_Finalize: the exit status is not known yet */
    fflush(NULL);
    _exit(0);
    return NULL;
}

/* Fault-tolerant end: a barrier that survives failures (agree; on a failure acknowledge and
 * agree again), polled with short sleeps so a rank that finishes early does not spin a core.
 *
 * The agreement's flag (an AND) also tells every live process, uniformly, whether any of them
 * knew of a failure (a repair here, or a failure that the agreement itself met). Then MPI_Finalize
 * skips its PMIx fence over the whole job (Open MPI's ompi_async_mpi_finalize, read nowhere else):
 * after a failure that fence stalled in ~1 of 5 recovered runs here until the watchdog ended the
 * process, and it is redundant with this agreement (every live process has passed it, and Open
 * MPI's fault-tolerant Finalize drains the failures and flushes with a ring barrier before it).
 * The same decision on every process matters: a fence that some processes skip waits for them. */
static int end_mpi(int at_exit) {
    static int flag;
    /* the end is a call in progress for the stall watchdog: a rank that ended waits here for
     * the others, however long they still work (before, every rank that ended more than
     * DPMPI_STALL_TIMEOUT before the last one was ended as stalled: exit code 124) */
    dpmpi_stall_enter();
    /* a C program's COMM_WORLD aborts on errors by default: the agreement must see them instead */
    if (g.world && g.mpi->comm_set_errhandler && g.mpi->errors_return)
        g.mpi->comm_set_errhandler(g.world, g.mpi->errors_return);
    /* a local peer stopped (SIGSTOP, frozen; e.g. an idle spare whose agreement was posted before):
     * the heartbeat kills it first, and this process then knows of a failure, so that no process
     * waits for it in Finalize's fence (seen: a job that never ended, or Finalize's OPAL ERROR) */
    int killed = wait_silent_peers();
    for (int attempt = 0; !g.agreed && g.world && g.ulfm && attempt < 1000; attempt++) {
        void *req = NULL;
        int done = 0, rc = 0, *result = &flag;
        pthread_mutex_lock(&g.lock);
        flag = attempt == 0 && g.n_recovered == 0 && !killed; /* 1: this process knows of no failure */
        pthread_mutex_unlock(&g.lock);
        if (attempt == 0 && g.adopted_request) { /* the agreement this process posted earlier */
            req = g.adopted_request;
            if (g.adopted_flag) result = g.adopted_flag;
        } else
            rc = g.mpi->iagree(g.world, &flag, &req);
        while (rc == 0 && !done) {
            rc = g.mpi->test(&req, &done, NULL);
            if (rc == 0 && !done) sleep_seconds(0.0005);
        }
        if (rc == 0) {
            g.job_failed = *result == 0;
            break;
        }
        g.mpi->failure_ack(g.world); /* a peer failed: acknowledge it and agree again */
    }
    if (g.job_failed && g.mpi->async_finalize) *g.mpi->async_finalize = 1;
    int quiet = g.job_failed && at_exit; /* (a crash inside this Finalize: dpmpi_fatal.c) */
    if (quiet) dpmpi_fatal_after_agreed_end(1);
    /* no failure known: a crash is the library's, or the program's (an attribute's callback), in
     * the program's own MPI_Finalize as at its exit: a status record says so (dpmpi_fatal.c) */
    static char crash_head[160];
    int recorded = !g.job_failed && records();
    if (recorded && snprintf(crash_head, sizeof crash_head, "[dpmpi-status] {\"rank\": %d, \"pid\": %ld, \"status\": 1, "
                             "\"mpi\": true, \"recovered\": [], \"idle_spares\": [], \"finalize_crash\": ",
                             g.rank, (long)getpid()) < (int)sizeof crash_head)
        dpmpi_fatal_record_finalize_crash(crash_head);
    pthread_t t;
    if (pthread_create(&t, NULL, finalize_watchdog, NULL) == 0) pthread_detach(t);
    int rc = g.mpi->finalize();
    atomic_store(&finalize_returned, 1);
    if (quiet) dpmpi_fatal_after_agreed_end(0);
    if (recorded) dpmpi_fatal_record_finalize_crash(NULL);
    return rc;
}

int dpmpi_exit_finalize(void) {
    if (!g.mpi) return -1;
    if (!mpi_active()) return g.mpi->finalize();
    return end_mpi(0);
}

void dpmpi_exit_stand_down(void) { g.stood_down = 1; }

void dpmpi_exit_now(int status) {
    if (g.stood_down || getpid() != g.pid) return;
    if (mpi_active()) snprintf(g.cause, sizeof g.cause, "\"_exit(%d) without MPI_Finalize\"", status);
    if (status != 0 && g.world && mpi_active()) dpmpi_die(status); /* a non-zero _exit: ULFM never reports it */
    if (!g.recorded) write_record(status);
}

static void on_exit_handler(int status, void *arg) {
    (void)arg;
    if (g.stood_down || getpid() != g.pid) return; /* another guard owns it; or a forked child */
    write_record(status);
    if (status != 0) {
        if (g.world && mpi_active()) { /* world is set only when there are peers */
            fflush(NULL);
            kill(getpid(), SIGKILL);
        }
        return;
    }
    if (g.owns_finalize && mpi_active()) end_mpi(1);
}

void dpmpi_exit_adopt_agree(void *request, int *flag) {
    g.adopted_request = request;
    g.adopted_flag = flag;
}

void dpmpi_exit_after_agree(int status, int clean) {
    g.agreed = 1;
    g.job_failed = !clean;
    fflush(NULL);
    exit(status);
}

int dpmpi_exit_register(void) {
    if (g.registered) return 0;
    if (on_exit(on_exit_handler, NULL) != 0) return -1;
    g.registered = 1;
    return 0;
}

int dpmpi_exit_set_mpi(const char *libmpi_path, void *world, int owns_finalize, double finalize_timeout) {
    const dpmpi_mpi_api *mpi = dpmpi_mpi_open(libmpi_path);
    if (!mpi) return -1;
    if (!mpi->initialized || !mpi->finalized || !mpi->finalize || !mpi->test) return -2;
    g.ulfm = mpi->iagree && mpi->failure_ack; /* no ULFM: Finalize plainly */
    g.mpi = mpi;
    g.mpi_seen = 1;
    g.world = world;
    g.owns_finalize = owns_finalize;
    if (finalize_timeout > 0) g.finalize_timeout = finalize_timeout;
    return g.ulfm;
}

#define OWNER_ENV "DPMPI_RANK_PID"

void dpmpi_exit_set_record(int enabled, int world_rank) {
    g.record = enabled;
    g.rank = world_rank;
    if (g.pid == getpid()) return; /* ownership is decided once per process */
    g.pid = getpid();
    /* The first process of a rank marks the environment with its pid; a process that exec'd
     * from it (env python ...) keeps the pid and stays the owner; a child it starts sees another
     * pid, and records only if it initialises MPI itself. */
    char mine[32];
    snprintf(mine, sizeof mine, "%ld", (long)g.pid);
    const char *mark = getenv(OWNER_ENV);
    if (!mark || !*mark) {
        setenv(OWNER_ENV, mine, 1);
        g.owner = 1;
    } else {
        g.owner = strcmp(mark, mine) == 0;
    }
}

void dpmpi_exit_set_cause(const char *cause) {
    snprintf(g.cause, sizeof g.cause, "%s", cause);
}

void dpmpi_exit_set_idle_spares(const int *world_ranks, int n) {
    pthread_mutex_lock(&g.lock);
    g.n_idle_spares = 0;
    for (int i = 0; i < n && i < (int)(sizeof g.idle_spares / sizeof g.idle_spares[0]); i++)
        g.idle_spares[g.n_idle_spares++] = world_ranks[i];
    pthread_mutex_unlock(&g.lock);
}

void dpmpi_exit_add_recovered(int world_rank) {
    pthread_mutex_lock(&g.lock);
    for (size_t i = 0; i < g.n_recovered; i++)
        if (g.recovered[i] == world_rank) goto out;
    if (g.n_recovered == g.cap_recovered) {
        size_t cap = g.cap_recovered ? 2 * g.cap_recovered : 16;
        int *p = realloc(g.recovered, cap * sizeof *p);
        if (!p) goto out;
        g.recovered = p;
        g.cap_recovered = cap;
    }
    g.recovered[g.n_recovered++] = world_rank;
out:
    pthread_mutex_unlock(&g.lock);
}

/* ---- stall watchdog: ends a rank whose main thread makes no progress outside MPI ---- */
static atomic_long stall_ticks;
static atomic_int stall_depth;
static double stall_limit;
static int stall_signo;        /* > 0: sent to stall_main before the end (its traceback: dpmpi/stall_watchdog.py) */
static pthread_t stall_main;

void dpmpi_stall_enter(void) {
    atomic_fetch_add_explicit(&stall_depth, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&stall_ticks, 1, memory_order_relaxed);
}

void dpmpi_stall_leave(void) {
    atomic_fetch_sub_explicit(&stall_depth, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&stall_ticks, 1, memory_order_relaxed);
}

/* Armed from the program's first dpmpi call on: before it, the process is starting (MPI_Init,
 * which takes long at scale; the program's imports: before, a program that made no dpmpi call
 * within DPMPI_STALL_TIMEOUT of importing dpmpi was ended as stalled, and dpmpi-run's relaunches
 * with it). Disarmed for good when the process's end begins (end_mpi). */
static void *stall_thread(void *arg) {
    (void)arg;
    long last = -1;
    double idle = 0, period = stall_limit / 8 > 0.05 ? stall_limit / 8 : 0.05;
    for (;;) {
        sleep_seconds(period);
        long now = atomic_load(&stall_ticks);
        if (now == 0 || now != last || atomic_load(&stall_depth) > 0) {
            last = now;
            idle = 0;
            continue;
        }
        idle += period;
        if (idle >= stall_limit) {
            char msg[200];
            int n = snprintf(msg, sizeof msg, "dpmpi: rank %d made no progress for %.1f s (DPMPI_STALL_TIMEOUT); ending it so the others can recover%s\n",
                             g.rank, idle, stall_signo > 0 ? " (where its main thread was: the stack below)" : "");
            dpmpi_write_all(2, msg, (size_t)n);
            snprintf(g.cause, sizeof g.cause, "\"stalled\"");
            if (stall_signo > 0 && pthread_kill(stall_main, stall_signo) == 0) {
                /* the handler (faulthandler's, registered by dpmpi/stall_watchdog.py) writes where the
                 * main thread was, in that thread, when it next runs; no word comes back when it
                 * is done, so a fixed wait (on a loaded node it may not run in time: then no
                 * traceback, the same end) */
                sleep_seconds(0.5);
            }
            dpmpi_die(124);
        }
    }
    return NULL;
}

int dpmpi_stall_start(double seconds, int dump_signo) {
    static int started;
    if (started || seconds <= 0) return 0;
    stall_limit = seconds;
    stall_signo = dump_signo;
    stall_main = pthread_self();
    pthread_t t;
    if (pthread_create(&t, NULL, stall_thread, NULL) != 0) return -1;
    pthread_detach(t);
    started = 1;
    return 0;
}

void dpmpi_segv(void) {
    volatile int *p = NULL;
    *p = 1;
}
