/* dpmpi snapshot engine: snapshot memory, copy threads, and the replication thread.
 *
 * - Memory: page-aligned anonymous mappings, locked with mlock when the process may lock them
 *   (CAP_IPC_LOCK or a large enough RLIMIT_MEMLOCK), otherwise pre-faulted ordinary memory.
 * - Engine: a pool of worker threads that copy (or only read) a list of segments in fixed-size
 *   units and checksum every unit while copying. Units are claimed from an atomic counter, so
 *   any number of threads gives the same per-unit digests, folded in order into one digest.
 *   A job may be gated on the replication of the previous epoch (see below): its workers wait
 *   for it before they write, so the slot they overwrite is never one that is still needed.
 * - Replicator: one thread that posts a list of non-blocking sends and receives, then (when
 *   they all succeeded) a dissemination barrier of 1-byte messages, and polls them with short sleeps: no core spins, and
 *   Python is never needed to make progress (MPI_THREAD_MULTIPLE). MPI is reached through
 *   the one binding of the libmpi that mpi4py loaded (dpmpi_mpi.h).
 *
 * Checksum: Fletcher-style sums modulo 2^64 in 8 lanes of 64-bit words over 64-byte blocks
 * (a += word; b += a), folded with a 64-bit mixer. Any change to one word changes lane a; a
 * swap of words changes lane b. It is not cryptographic: it detects corruption, not attacks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "dpmpi_c.h"
#include "dpmpi_mpi.h"
#include "dpmpi_util.h"

/* ---------------------------------------------------------------- checksum kernels */
typedef struct {
    uint64_t a[8], b[8];
} lanes_t;

static inline uint64_t load64(const char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* n bytes, a multiple of 64; dst may be NULL (checksum only); any alignment. */
static void lanes_generic(lanes_t *c, char *dst, const char *src, size_t n) {
    uint64_t a[8], b[8];
    memcpy(a, c->a, sizeof a);
    memcpy(b, c->b, sizeof b);
    if (dst) {
        for (size_t i = 0; i < n; i += 64) {
            memcpy(dst + i, src + i, 64);
            for (int j = 0; j < 8; j++) {
                a[j] += load64(src + i + 8 * j);
                b[j] += a[j];
            }
        }
    } else {
        for (size_t i = 0; i < n; i += 64)
            for (int j = 0; j < 8; j++) {
                a[j] += load64(src + i + 8 * j);
                b[j] += a[j];
            }
    }
    memcpy(c->a, a, sizeof a);
    memcpy(c->b, b, sizeof b);
}

#if defined(__x86_64__)
/* The same sums with AVX2; stores bypass the cache (the copy is not read again soon), which is
 * what makes copy+checksum faster than a plain memcpy here. dst must be 32-byte aligned. */
__attribute__((target("avx2"))) static void lanes_avx2(lanes_t *c, char *dst, const char *src, size_t n, int stream) {
    __m256i a0 = _mm256_loadu_si256((const __m256i *)c->a), a1 = _mm256_loadu_si256((const __m256i *)(c->a + 4));
    __m256i b0 = _mm256_loadu_si256((const __m256i *)c->b), b1 = _mm256_loadu_si256((const __m256i *)(c->b + 4));
    for (size_t i = 0; i < n; i += 64) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(src + i + 32));
        if (dst && stream) {
            _mm256_stream_si256((__m256i *)(dst + i), v0);
            _mm256_stream_si256((__m256i *)(dst + i + 32), v1);
        } else if (dst) {
            _mm256_storeu_si256((__m256i *)(dst + i), v0);
            _mm256_storeu_si256((__m256i *)(dst + i + 32), v1);
        }
        a0 = _mm256_add_epi64(a0, v0);
        a1 = _mm256_add_epi64(a1, v1);
        b0 = _mm256_add_epi64(b0, a0);
        b1 = _mm256_add_epi64(b1, a1);
    }
    if (dst) _mm_sfence();
    _mm256_storeu_si256((__m256i *)c->a, a0);
    _mm256_storeu_si256((__m256i *)(c->a + 4), a1);
    _mm256_storeu_si256((__m256i *)c->b, b0);
    _mm256_storeu_si256((__m256i *)(c->b + 4), b1);
}
#endif

/* Settings from Python (dpmpi_snap_configure). Written by the main thread before the first copy
 * job starts a thread; only read afterwards. */
static int cfg_nice = 19, cfg_simd = 1, cfg_huge = 1;
static double cfg_report = 0.0;

void dpmpi_snap_configure(int nice_value, int simd, double report_after, int huge_pages) {
    cfg_nice = nice_value < 0 ? 0 : nice_value > 19 ? 19 : nice_value;
    cfg_simd = simd != 0;
    cfg_report = report_after;
    cfg_huge = huge_pages != 0;
}

static int have_avx2(void) {
#if defined(__x86_64__)
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return cached && cfg_simd;
#else
    return 0;
#endif
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Copy (dst != NULL) and checksum one unit of len bytes; `stream`: stores bypass the cache
 * (for large jobs, whose copy would only evict the program's data). */
static uint64_t do_unit(char *dst, const char *src, size_t len, int stream) {
    lanes_t c;
    memset(&c, 0, sizeof c);
    size_t body = len & ~(size_t)63;
    if (body) {
#if defined(__x86_64__)
        if (have_avx2() && (dst == NULL || ((uintptr_t)dst & 31) == 0 || !stream))
            lanes_avx2(&c, dst, src, body, stream);
        else
#endif
            lanes_generic(&c, dst, src, body);
    }
    if (len > body) { /* the tail, zero-padded to a block for the checksum */
        char tmp[64];
        memset(tmp, 0, sizeof tmp);
        memcpy(tmp, src + body, len - body);
        if (dst) memcpy(dst + body, src + body, len - body);
        lanes_generic(&c, NULL, tmp, 64);
    }
    uint64_t h = mix64(len ^ 0x9e3779b97f4a7c15ULL);
    for (int j = 0; j < 8; j++) h = mix64(h ^ c.a[j]) + c.b[j];
    return mix64(h);
}

static uint64_t fold(uint64_t h, uint64_t unit_digest) { return mix64(h ^ unit_digest) * 0x100000001b3ULL + 1; }

uint64_t dpmpi_checksum(int nseg, char *const *src, const size_t *len, size_t unit) {
    if (unit == 0) unit = DPMPI_UNIT;
    uint64_t h = 0;
    for (int s = 0; s < nseg; s++) {
        size_t off = 0;
        do { /* the same units as dpmpi_engine_start */
            size_t m = len[s] - off < unit ? len[s] - off : unit;
            h = fold(h, do_unit(NULL, src[s] + off, m, 0));
            off += m;
        } while (off < len[s]);
    }
    return h;
}

/* ---------------------------------------------------------------- memory */
static size_t page_round(size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (n == 0) n = 1;
    return (n + page - 1) / page * page;
}

/* Slots of at least 4 MiB are mapped 2 MiB-aligned and advised as transparent huge pages (where
 * the kernel's THP mode is "madvise", the default of most distributions, nothing else gets them;
 * numpy asks for them for its own large arrays). The replication's single-copy reads pin and walk
 * the pages of both processes: with 4 KiB pages a 64 MiB replication ran at 0.62-0.76x a plain
 * Sendrecv between numpy arrays, with huge pages at 0.90x (docs/benchmarks.md, eleventh session).
 * The kernel falls back to small pages when it has no free 2 MiB blocks. */
#define HUGE_SIZE ((size_t)2 << 20)
#define HUGE_FROM ((size_t)4 << 20)

/* size bytes (a multiple of the page size) of private anonymous memory starting at a multiple of
 * `align` (a power of two): beyond a page, the over-mapped head and tail are unmapped again, so
 * that munmap(p, size) frees it all. */
static void *map_aligned(size_t size, size_t align, int *err) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t span = align > page ? size + align : size; /* mmap aligns to a page by itself */
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        *err = errno;
        return NULL;
    }
    if (span == size) return raw;
    char *p = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + span > p + size) munmap(p + size, (size_t)(raw + span - (p + size)));
    return p;
}

void *dpmpi_mem_map(size_t nbytes, int *err) {
    size_t size = page_round(nbytes);
    *err = 0;
    int huge = cfg_huge && size >= HUGE_FROM;
    void *p = map_aligned(size, huge ? HUGE_SIZE : 1, err);
    if (p && huge) madvise(p, size, MADV_HUGEPAGE); /* advice: an error (no THP in this kernel) changes nothing */
    return p;
}

void *dpmpi_mem_alloc(size_t nbytes, int want_lock, int *locked, int *err) {
    void *p = dpmpi_mem_map(nbytes, err);
    *locked = 0;
    if (p) dpmpi_mem_settle(p, nbytes, want_lock, locked, err);
    return p;
}

void dpmpi_mem_settle(void *p, size_t nbytes, int want_lock, int *locked, int *err) {
    size_t size = page_round(nbytes);
    *locked = 0;
    *err = 0;
    if (want_lock) {
        *err = dpmpi_settle_pieces(p, size, 1); /* mlock faults every page in */
        *locked = *err == 0;
    }
    if (!*locked) { /* fault the pages in now, not during the first (timed) copy */
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        for (size_t i = 0; i < size; i += page) ((volatile char *)p)[i] = 0;
    }
}

/* Fault in the pages of [p, p + nbytes) writable without changing their contents, so that a
 * later copy into them runs at memory speed (measured here: a 64 MiB copy with streaming stores
 * into never-touched pages took 500-650 ms; populate ~130 ms, then the copy ~35 ms). 0, or the
 * errno of madvise (EINVAL: a kernel without MADV_POPULATE_WRITE; nothing is done then). */
int dpmpi_prefault(void *p, size_t nbytes) {
    if (!p || nbytes == 0) return 0;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)p & ~(page - 1), end = ((uintptr_t)p + nbytes + page - 1) & ~(page - 1);
    return dpmpi_settle_pieces((void *)start, end - start, 0); /* (in pieces: dpmpi_util.h) */
}

void dpmpi_mem_free(void *p, size_t nbytes, int locked) {
    if (!p) return;
    size_t size = page_round(nbytes);
    if (locked) munlock(p, size);
    munmap(p, size);
}

/* ---------------------------------------------------------------- MPI (dpmpi_mpi.h) */
static const dpmpi_mpi_api *mpi; /* set once by dpmpi_mpi_bind, before any replication job */

int dpmpi_mpi_bind(const char *libmpi_path) {
    const dpmpi_mpi_api *api = dpmpi_mpi_open(libmpi_path);
    if (!api) return -1;
    if (!api->isend || !api->irecv || !api->test || !api->error_class || !api->comm_rank || !api->comm_size)
        return -2;
    mpi = api;
    return 0;
}

/* Copy threads run at the lowest priority (DPMPI_SNAPSHOT_NICE, default 19; 0 disables): on a
 * busy core the program's own thread keeps the CPU. When the program waits for a copy (commit),
 * it copies the rest itself, at its own priority. The replication thread is NOT niced: it calls
 * MPI, and inside MPI it holds Open MPI's progress locks (the shared-memory transport's poll
 * lock, taken with a trylock by every other thread: theirs then skip the poll and wait). A
 * nice-19 thread preempted there on a node whose cores are busy kept the program's own MPI
 * calls from completing: an MLP at 2 ranks on 2 cores stepped 3x slower (270-330 ms against
 * 88-92 ms a step), even in steps that took no snapshot. */
static int snapshot_nice(void) {
    return cfg_nice;
}

static void lower_priority(void) {
    int nice_value = snapshot_nice();
    if (nice_value > 0) setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice_value);
}

/* The CPUs the snapshot's threads run on instead of their rank's own (dpmpi_snap_helper_cpus):
 * on a node with cores that no process of the job is bound to, copies and replications then take
 * no time from the program's core. Set by dpmpi.init (the main thread); read by each copy thread
 * before each job and by the replication thread before each job (a spare that takes over moves
 * every thread of it to the failed rank's CPUs: the next job moves them back). Guarded by
 * helper_mu: init may run while the threads of an earlier Snapshot exist. */
static pthread_mutex_t helper_mu = PTHREAD_MUTEX_INITIALIZER;
static cpu_set_t helper_set; /* empty: none */

int dpmpi_snap_helper_cpus(const int *cpus, int n) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n; i++)
        if (cpus[i] >= 0 && cpus[i] < CPU_SETSIZE) CPU_SET(cpus[i], &set);
    pthread_mutex_lock(&helper_mu);
    helper_set = set;
    pthread_mutex_unlock(&helper_mu);
    return CPU_COUNT(&set);
}

int dpmpi_snap_helper_count(void) {
    pthread_mutex_lock(&helper_mu);
    int n = CPU_COUNT(&helper_set);
    pthread_mutex_unlock(&helper_mu);
    return n;
}

/* The calling thread onto the helper CPUs, if there are any (else, or if the OS refuses, it
 * stays where it is). */
static void to_helper_cpus(void) {
    pthread_mutex_lock(&helper_mu);
    cpu_set_t set = helper_set;
    pthread_mutex_unlock(&helper_mu);
    if (CPU_COUNT(&set) > 0) pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Naps of a few microseconds between MPI tests are only that short with a small timer slack:
 * Linux's default (50 us) stretched each 5-20 us nap to ~60 us, and a rendezvous needs a few
 * rounds of progress per message. Set on the replication thread for its life, and on a waiting
 * caller's thread only while it drives a job (restored after). */
#define NAP_SLACK_NS 1000UL

static void sleep_ns(long ns) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void deadline_after(struct timespec *ts, double seconds) {
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += (time_t)seconds;
    ts->tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* ---------------------------------------------------------------- replicator */
/* Snapshot messages are at most 4 MiB: with Open MPI's shared-memory transport one large message
 * is one single-copy read (CMA) inside one progress call, which holds the progress engine for its
 * whole length (64 MiB: 10-30 ms here) while the program's own collectives wait. In 4 MiB pieces
 * a re-replication after a restore no longer delays the first collectives after it (time to
 * resume at 64 MiB: -15-20 ms here), at the same throughput. */
#define CHUNK ((size_t)DPMPI_CHUNK)

/* A replication job is a small state machine (post the sends and receives, test them, post the
 * barrier, test it, finish) that any thread holding `poll_mu` may advance one step at a time:
 * the replication thread does it in the background, and a thread that *waits* for the job
 * (commit, the copy gate, close) does it itself, at its own priority. A waiter never depends on
 * the replication thread being scheduled (measured when it still ran niced: with every core
 * busy, e.g. OpenBLAS threads spinning, a nice-19 thread hardly runs and a commit that waited
 * for it took 100 ms; it now runs at the program's priority, see lower_priority).
 *
 * Owner and lifetime: the struct is made by dpmpi_repl_new and freed by dpmpi_repl_free, which
 * joins the thread, only when no job is running (else it refuses and the memory is leaked on
 * purpose: requests may still be pending on it). `mu` guards the job description and `running`;
 * `poll_mu` guards the job's progress state (requests); MPI is called only with `poll_mu` held,
 * so one thread at a time tests these requests. */
enum { PH_POST, PH_DATA, PH_BARRIER, PH_DRAIN, PH_DONE };

struct dpmpi_repl {
    pthread_mutex_t mu;
    pthread_mutex_t poll_mu;
    pthread_cond_t work, done;
    pthread_t thread;
    int stop, abandon;
    uint64_t gen, seen;
    atomic_int waiters; /* threads driving the job themselves: the background thread stands back */
    /* the job */
    void *comm, *dtype;
    dpmpi_op *ops;
    int nops, barrier;
    int *op_state; /* 0 pending, 1 done, -class: failed with that MPI error class */
    int running;   /* a job is posted and not finished */
    int error;     /* MPI error class of the first failure in the job, 0 if none */
    /* the job's progress (under poll_mu) */
    int phase, failed, nreq, pending;
    int held;           /* sends held back (dpmpi_op.wait) and not posted yet */
    int pending_recv;   /* receive requests not completed yet */
    int leaked;         /* sends left to MPI, over the struct's life (see barrier_post) */
    double drain_until; /* PH_DRAIN: when sends still pending are left to MPI */
    void **reqs;
    int *owner, *rdone, *left;
    size_t *offset;     /* each request's byte offset in its op's buffer */
    int *next, *end;    /* per op: its next request to post and one past its last (receives) */
    int *inflight;      /* per op: its receives posted and not completed */
    void *breq[2];      /* the barrier round's receive and send */
    int brdone[2], bround, brank, bsize;
    char bsend, brecv;
    double started; /* when the job was started (now_s) */
    int reported;   /* whether the job described itself (job_report) */
    /* streamed sends (dpmpi_op.wait): the copy job whose progress gates them, and the release */
    dpmpi_engine *feed;
    uint64_t feed_job;
    atomic_int released;
    /* jobs started and finished over the struct's life, and the last one that failed (under mu):
     * a copy gated on job k waits for k itself, not for a later job started meanwhile */
    uint64_t started_jobs, finished_jobs, failed_job;
};

/* The MPI error class of a return code. */
static int err_class(int rc) {
    int cls = rc;
    mpi->error_class(rc, &cls);
    return cls;
}

static void job_finish(dpmpi_repl *r, int failed) {
    free(r->reqs);
    free(r->owner);
    free(r->rdone);
    free(r->left);
    free(r->offset);
    free(r->next);
    free(r->end);
    free(r->inflight);
    r->reqs = NULL;
    r->owner = r->rdone = r->left = r->next = r->end = r->inflight = NULL;
    r->offset = NULL;
    r->phase = PH_DONE;
    pthread_mutex_lock(&r->mu);
    r->error = failed;
    r->running = 0;
    r->finished_jobs = r->started_jobs;
    if (failed) r->failed_job = r->started_jobs;
    pthread_cond_broadcast(&r->done);
    pthread_mutex_unlock(&r->mu);
}

/* Receives posted at a time per receiving op (one peer and tag). With the single-copy transport
 * a receive's bytes move inside the MPI call that matches it (MPI_Irecv, or the MPI_Test that
 * sees the sender's header), so with every receive of a 64 MiB copy posted at once one MPI_Test
 * moved all of it, and a repair that asked this thread to stop waited up to 8 ms for that call to
 * return. One chunk per op at a time bounds that call to one chunk per peer; the bytes move as
 * fast (the sender's headers wait as unexpected messages, and posting the next receive copies).
 * Per op, not per job: every peer the job receives from always has a receive posted, so the
 * death of any of them fails the job (a window over the whole job once waited, in order, on a
 * live peer whose own job had failed before it posted its sends, and never posted a receive from
 * the dead one: two survivors waited for each other, and no repair started). */
#define RECV_WINDOW 1

static size_t chunk_len(const dpmpi_op *op, size_t off) { return op->len - off < CHUNK ? op->len - off : CHUNK; }

/* Post request k (its op's chunk at r->offset[k]); 0, or the MPI error class (recorded). */
static int post_one(dpmpi_repl *r, int k) {
    int i = r->owner[k];
    dpmpi_op *op = &r->ops[i];
    char *buf = (char *)op->buf + r->offset[k];
    int n = (int)chunk_len(op, r->offset[k]);
    int rc = op->send ? mpi->isend(buf, n, r->dtype, op->peer, op->tag, r->comm, &r->reqs[k])
                      : mpi->irecv(buf, n, r->dtype, op->peer, op->tag, r->comm, &r->reqs[k]);
    if (rc == 0) return 0;
    int cls = err_class(rc);
    r->failed = cls;
    pthread_mutex_lock(&r->mu);
    r->op_state[i] = -cls;
    pthread_mutex_unlock(&r->mu);
    return cls;
}

/* Post each receiving op's next chunks, in order, up to RECV_WINDOW per op; the first error stops it. */
static void post_recvs(dpmpi_repl *r) {
    for (int i = 0; i < r->nops && !r->failed; i++)
        while (!r->ops[i].send && r->inflight[i] < RECV_WINDOW && r->next[i] < r->end[i]) {
            if (post_one(r, r->next[i]++) != 0) return;
            r->inflight[i]++;
        }
}

/* Post the sends that were held back (dpmpi_op.wait) and may go now: a header once released, a
 * chunk of data once the feeding copy has written it. An op's chunks go in order (the copy
 * threads finish units out of order): its receiver's receives match them in the order posted.
 * The first error stops it. */
static void post_sends(dpmpi_repl *r) {
    int released = atomic_load(&r->released), held = 0;
    for (int k = 0; k < r->nreq && !r->failed; k++) {
        if (r->reqs[k] != NULL || r->rdone[k]) continue;
        dpmpi_op *op = &r->ops[r->owner[k]];
        if (!op->send) continue;
        if (k > 0 && r->owner[k - 1] == r->owner[k] && r->reqs[k - 1] == NULL && !r->rdone[k - 1]) {
            held++; /* (the op's previous chunk is held: this one waits behind it) */
            continue;
        }
        if ((op->wait == 2 && !released) ||
            (op->wait == 1 && r->feed &&
             !dpmpi_engine_ready(r->feed, r->feed_job, (const char *)op->buf + r->offset[k], chunk_len(op, r->offset[k])))) {
            held++;
            continue;
        }
        post_one(r, k);
    }
    r->held = held;
}

/* Once the job failed: the requests never posted are dropped (their ops never count as done),
 * so that the job ends when the posted ones have. */
static void drop_unposted(dpmpi_repl *r) {
    if (!r->failed) return;
    for (int k = 0; k < r->nreq; k++)
        if (r->reqs[k] == NULL && !r->rdone[k]) {
            r->rdone[k] = 1;
            r->pending--;
            if (!r->ops[r->owner[k]].send) r->pending_recv--;
        }
    for (int i = 0; i < r->nops; i++) r->next[i] = r->end[i];
}

static void job_post(dpmpi_repl *r) {
    int nreq = 0;
    for (int i = 0; i < r->nops; i++) nreq += (int)((r->ops[i].len + CHUNK - 1) / CHUNK) + (r->ops[i].len == 0);
    r->reqs = calloc((size_t)nreq + 1, sizeof(void *));
    r->owner = calloc((size_t)nreq + 1, sizeof(int));
    r->rdone = calloc((size_t)nreq + 1, sizeof(int));
    r->left = calloc((size_t)r->nops + 1, sizeof(int));
    r->offset = calloc((size_t)nreq + 1, sizeof(size_t));
    r->next = calloc((size_t)r->nops + 1, sizeof(int));
    r->end = calloc((size_t)r->nops + 1, sizeof(int));
    r->inflight = calloc((size_t)r->nops + 1, sizeof(int));
    int k = 0;
    for (int i = 0; i < r->nops; i++) { /* the requests, in order: an op's chunks one after the other */
        dpmpi_op *op = &r->ops[i];
        size_t off = 0;
        r->next[i] = k;
        do {
            r->owner[k] = i;
            r->offset[k++] = off;
            r->left[i]++;
            if (!op->send) r->pending_recv++;
            off += chunk_len(op, off);
        } while (off < op->len);
        r->end[i] = k;
    }
    r->nreq = r->pending = k;
    for (k = 0; k < r->nreq && !r->failed; k++) /* every send at once: the receivers pull the bytes */
        if (r->ops[r->owner[k]].send && r->ops[r->owner[k]].wait == 0) post_one(r, k);
    post_sends(r); /* (the held-back ones that may already go) */
    post_recvs(r);
    drop_unposted(r);
    r->phase = PH_DATA;
}

/* Test the data requests once; 1 if any completed. An op is marked done as soon as all its
 * requests are, so that what arrived before a failure or an abandonment still counts. */
static int job_test_data(dpmpi_repl *r) {
    int progressed = 0;
    for (int i = 0; i < r->nreq; i++) {
        if (r->rdone[i] || r->reqs[i] == NULL) continue; /* (NULL: a receive not posted yet) */
        if (atomic_load((_Atomic int *)&r->abandon)) return 1; /* job_step ends the job next */
        int flag = 0;
        int rc = mpi->test(&r->reqs[i], &flag, NULL);
        if (rc != 0) {
            int cls = err_class(rc);
            if (!r->failed) r->failed = cls;
            pthread_mutex_lock(&r->mu);
            r->op_state[r->owner[i]] = -cls;
            pthread_mutex_unlock(&r->mu);
            flag = 1;
        }
        if (flag) {
            r->rdone[i] = 1;
            r->pending--;
            if (!r->ops[r->owner[i]].send) {
                r->pending_recv--;
                r->inflight[r->owner[i]]--;
            }
            progressed = 1;
            if (--r->left[r->owner[i]] == 0) {
                pthread_mutex_lock(&r->mu);
                if (r->op_state[r->owner[i]] == 0) r->op_state[r->owner[i]] = 1;
                pthread_mutex_unlock(&r->mu);
            }
        }
    }
    post_sends(r); /* held-back sends whose bytes are ready */
    post_recvs(r); /* the next receives, as the window frees */
    drop_unposted(r);
    return progressed;
}

/* Sends still pending DRAIN_SECONDS after the job's barrier completed are left to MPI. */
#define DRAIN_SECONDS 1.0

/* Post the current barrier round, or end the barrier: finish the job, or first drain its sends.
 *
 * A rank enters the barrier once its receives are done, its sends possibly not yet: when the
 * barrier completes, every rank has received what it was sent, so sends still pending then are
 * done in all but name, and normally complete a moment later (PH_DRAIN tests them). One still
 * pending after DRAIN_SECONDS is left to MPI (never tested or freed again; Replication.close then
 * keeps the memory) and said on stderr: seen here after recoveries, a large send whose receiver
 * had matched it, received it and gone on never completed on the sender (Open MPI 5.0.11;
 * docs/limitations.md), and the job, and every later snapshot, waited for it for ever. */
static int barrier_post(dpmpi_repl *r) {
    if (r->bsize <= 1 || (1 << r->bround) >= r->bsize) {
        if (r->pending > 0) {
            r->phase = PH_DRAIN;
            r->drain_until = now_s() + DRAIN_SECONDS;
            return 1;
        }
        job_finish(r, 0);
        return 1;
    }
    int d = 1 << r->bround;
    int rc = mpi->irecv(&r->brecv, 1, r->dtype, (r->brank - d + r->bsize) % r->bsize, DPMPI_TAG_BARRIER + r->bround, r->comm,
                       &r->breq[0]);
    if (rc == 0) rc = mpi->isend(&r->bsend, 1, r->dtype, (r->brank + d) % r->bsize, DPMPI_TAG_BARRIER + r->bround, r->comm,
                                &r->breq[1]);
    if (rc != 0) {
        job_finish(r, err_class(rc));
        return 1;
    }
    r->brdone[0] = r->brdone[1] = 0;
    return 1;
}

/* A job still running after DPMPI_REPL_REPORT seconds says once, on stderr, what it waits for:
 * its phase and its pending requests (peer, tag, direction, bytes). The caller holds poll_mu. */
static void job_report(dpmpi_repl *r) {
    static const char *phases[] = {"post", "data", "barrier", "drain", "done"};
    char line[1024];
    int rank = -1, size = -1, n = 0;
    r->reported = 1;
    mpi->comm_rank(r->comm, &rank);
    mpi->comm_size(r->comm, &size);
    n += snprintf(line + n, sizeof line - (size_t)n, "dpmpi: snapshot replication job on rank %d of %d (pid %d) still "
                  "running after %.1f s, phase %s, failed %d; pending:", rank, size, (int)getpid(),
                  now_s() - r->started, phases[r->phase], r->failed);
    if (r->phase == PH_DATA || r->phase == PH_DRAIN) {
        int shown = 0;
        for (int i = 0; i < r->nreq && n < (int)sizeof line - 64; i++) {
            if (r->rdone[i]) continue;
            dpmpi_op *op = &r->ops[r->owner[i]];
            n += snprintf(line + n, sizeof line - (size_t)n, " %s %d tag %d (%zu B)", op->send ? "send to" : "recv from",
                          op->peer, op->tag, op->len);
            shown++;
        }
        if (shown < r->pending && n < (int)sizeof line - 32)
            n += snprintf(line + n, sizeof line - (size_t)n, " ... (%d in all)", r->pending);
    } else if (r->phase == PH_BARRIER) {
        int d = 1 << r->bround;
        n += snprintf(line + n, sizeof line - (size_t)n, " barrier round %d: recv from %d %s, send to %d %s", r->bround,
                      (r->brank - d + r->bsize) % r->bsize, r->brdone[0] ? "done" : "pending",
                      (r->brank + d) % r->bsize, r->brdone[1] ? "done" : "pending");
    }
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

/* Advance the job by one step (caller holds poll_mu); 1 if something completed. The requests
 * that an abandonment leaves pending are leaked, never freed: MPI may still complete them. */
static int job_step(dpmpi_repl *r) {
    if (r->phase == PH_DONE) return 0;
    if (atomic_load((_Atomic int *)&r->abandon)) {
        job_finish(r, r->failed ? r->failed : DPMPI_REPL_ABANDONED);
        return 1;
    }
    if (r->phase == PH_POST) {
        job_post(r);
        return 1;
    }
    if (cfg_report > 0 && !r->reported && now_s() - r->started > cfg_report) job_report(r);
    if (r->phase == PH_DATA) {
        int progressed = r->pending > 0 ? job_test_data(r) : 0;
        if (r->failed || !r->barrier) {
            if (r->pending > 0) return progressed;
            job_finish(r, r->failed);
            return 1;
        }
        if (r->pending_recv > 0) return progressed; /* sends may finish during the barrier */
        r->bround = 0;
        mpi->comm_rank(r->comm, &r->brank);
        mpi->comm_size(r->comm, &r->bsize);
        r->phase = PH_BARRIER;
        return barrier_post(r);
    }
    if (r->phase == PH_DRAIN) { /* every receiver has its data: a send's failure now changes nothing */
        int progressed = job_test_data(r);
        r->failed = 0;
        if (r->pending > 0 && now_s() < r->drain_until) return progressed;
        if (r->pending > 0) {
            r->leaked += r->pending;
            fprintf(stderr, "dpmpi: snapshot replication on rank %d: %d send(s) not completed %.0f s after every "
                    "receiver had its data (the barrier after them completed); left to MPI\n", r->brank, r->pending,
                    DRAIN_SECONDS);
            fflush(stderr);
        }
        job_finish(r, 0);
        return 1;
    }
    /* PH_BARRIER: a dissemination barrier of 1-byte messages. Not MPI_Ibarrier: when a revoke
     * aborts a libnbc schedule, Open MPI 5.0.x frees its send requests while they are in flight,
     * and when such a send then fails (its peer died) the process aborts with "Send error after
     * request freed" (seen here: a healthy rank killed, and the other survivors hung in Shrink).
     * These requests are never freed by dpmpi; an abandoned job leaks them. */
    int progressed = r->pending > 0 ? job_test_data(r) : 0;
    if (r->failed) { /* a send failed: its peer failed, so the barrier cannot complete either */
        job_finish(r, r->failed);
        return 1;
    }
    for (int i = 0; i < 2; i++) {
        if (r->brdone[i]) continue;
        int flag = 0;
        int rc = mpi->test(&r->breq[i], &flag, NULL);
        if (rc != 0) {
            job_finish(r, err_class(rc));
            return 1;
        }
        if (flag) r->brdone[i] = progressed = 1;
    }
    if (r->brdone[0] && r->brdone[1]) {
        r->bround++;
        return barrier_post(r);
    }
    return progressed;
}

static int job_running(dpmpi_repl *r) {
    pthread_mutex_lock(&r->mu);
    int running = r->running;
    pthread_mutex_unlock(&r->mu);
    return running;
}

/* The background thread: naps start at 5 us and double while nothing completes, up to 20 us
 * while data moves (a rendezvous needs a few rounds of progress on both sides) and 250 us in
 * the barrier (it waits for the slowest rank). It stands back while a waiter drives the job. */
static void run_job(dpmpi_repl *r) {
    long nap = 5000;
    for (;;) {
        int progressed = 0;
        if (atomic_load(&r->waiters) > 0) { /* a waiter drives: sleep until it leaves or the job ends
                                             * (polling here took the waiter's core: 20-30 % slower) */
            pthread_mutex_lock(&r->mu);
            while (atomic_load(&r->waiters) > 0 && r->running) pthread_cond_wait(&r->done, &r->mu);
            int running = r->running;
            pthread_mutex_unlock(&r->mu);
            if (!running) return;
            nap = 5000;
        }
        if (atomic_load(&r->waiters) == 0 && pthread_mutex_trylock(&r->poll_mu) == 0) {
            progressed = job_step(r);
            int finished = r->phase == PH_DONE;
            pthread_mutex_unlock(&r->poll_mu);
            if (finished) return;
        } else if (!job_running(r)) {
            return; /* a waiter finished it */
        }
        if (progressed)
            nap = 5000;
        else {
            sleep_ns(nap);
            long max_nap = r->phase == PH_BARRIER && !r->held ? 250000 : 20000; /* (held: sends to post soon) */
            if (nap < max_nap) nap *= 2;
        }
    }
}

static void *repl_main(void *arg) {
    dpmpi_repl *r = arg; /* the program's priority: see lower_priority */
    prctl(PR_SET_NAME, "dpmpi-repl", 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, NAP_SLACK_NS, 0, 0, 0);
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && r->gen == r->seen) pthread_cond_wait(&r->work, &r->mu);
        if (r->stop) break;
        r->seen = r->gen;
        pthread_mutex_unlock(&r->mu);
        to_helper_cpus();
        run_job(r);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

dpmpi_repl *dpmpi_repl_new(void) {
    dpmpi_repl *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->poll_mu, NULL);
    pthread_cond_init(&r->work, NULL);
    pthread_cond_init(&r->done, NULL);
    r->phase = PH_DONE;
    if (pthread_create(&r->thread, NULL, repl_main, r) != 0) {
        free(r);
        return NULL;
    }
    return r;
}

int dpmpi_repl_start(dpmpi_repl *r, void *comm, void *dtype, int nops, const dpmpi_op *ops, int barrier,
                     dpmpi_engine *feed, uint64_t feed_job) {
    if (!mpi) return -2;
    pthread_mutex_lock(&r->poll_mu);
    pthread_mutex_lock(&r->mu);
    if (r->running) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->poll_mu);
        return -1;
    }
    free(r->ops);
    free(r->op_state);
    r->ops = malloc(sizeof(dpmpi_op) * (size_t)(nops + 1));
    r->op_state = calloc((size_t)nops + 1, sizeof(int));
    memcpy(r->ops, ops, sizeof(dpmpi_op) * (size_t)nops);
    r->nops = nops;
    r->comm = comm;
    r->dtype = dtype;
    r->barrier = barrier;
    r->error = 0;
    r->abandon = 0;
    r->failed = 0;
    r->pending_recv = 0;
    r->started = now_s();
    r->reported = 0;
    r->feed = feed;
    r->feed_job = feed_job;
    atomic_store(&r->released, 0);
    r->phase = PH_POST;
    r->running = 1;
    r->started_jobs++;
    r->gen++;
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->poll_mu);
    return 0;
}

/* Whether job number `upto` has finished (0: the current job, if any). */
static int job_ended(dpmpi_repl *r, uint64_t upto) {
    pthread_mutex_lock(&r->mu);
    int ended = upto ? r->finished_jobs >= upto : !r->running;
    pthread_mutex_unlock(&r->mu);
    return ended;
}

/* Drive the job from the calling thread until job number `upto` (0: the current one) ends or
 * `timeout` seconds pass (< 0: no limit). Returns 0 done, 1 still running, < 0: -(MPI error
 * class) (-1 for job `upto` that failed). */
static int repl_drive(dpmpi_repl *r, double timeout, uint64_t upto) {
    double deadline = timeout < 0 ? -1.0 : now_s() + timeout;
    long nap = 2000;
    int slack = timeout != 0.0 ? prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) : -1;
    if (slack > 0) prctl(PR_SET_TIMERSLACK, NAP_SLACK_NS, 0, 0, 0);
    atomic_fetch_add(&r->waiters, 1);
    for (;;) {
        int progressed = 0;
        if (pthread_mutex_trylock(&r->poll_mu) == 0) {
            progressed = job_step(r);
            pthread_mutex_unlock(&r->poll_mu);
        }
        if (job_ended(r, upto)) break;
        if (deadline >= 0 && now_s() >= deadline) break;
        if (progressed)
            nap = 2000;
        else {
            sleep_ns(nap);
            if (nap < 50000) nap *= 2;
        }
    }
    if (atomic_fetch_sub(&r->waiters, 1) == 1) { /* the last waiter: the background thread goes on */
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->done);
        pthread_mutex_unlock(&r->mu);
    }
    if (slack > 0) prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
    pthread_mutex_lock(&r->mu);
    int rc;
    if (upto)
        rc = r->finished_jobs < upto ? 1 : (r->failed_job == upto ? -1 : 0);
    else
        rc = r->running ? 1 : (r->error ? -r->error : 0);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int dpmpi_repl_wait_progress(dpmpi_repl *r) { return repl_drive(r, -1.0, 0); }

int dpmpi_repl_wait(dpmpi_repl *r, double timeout) { return repl_drive(r, timeout, 0); }

void dpmpi_repl_release(dpmpi_repl *r) { atomic_store(&r->released, 1); }

/* For the copy threads' gate: wait for job number `upto` without calling MPI (they must not);
 * -1 if it failed. */
static int repl_wait_quiet(dpmpi_repl *r, uint64_t upto) {
    pthread_mutex_lock(&r->mu);
    while (r->finished_jobs < upto) pthread_cond_wait(&r->done, &r->mu);
    int rc = r->failed_job == upto ? -1 : 0;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* The number of the last job started (0: none): what a copy gated on it waits for (the caller
 * gates a copy on the replicator only while its last job is not collected: it may have failed). */
static uint64_t repl_last_job(dpmpi_repl *r) {
    pthread_mutex_lock(&r->mu);
    uint64_t k = r->started_jobs;
    pthread_mutex_unlock(&r->mu);
    return k;
}

int dpmpi_repl_leaked(dpmpi_repl *r) {
    pthread_mutex_lock(&r->poll_mu);
    int n = r->leaked;
    pthread_mutex_unlock(&r->poll_mu);
    return n;
}

int dpmpi_repl_op_state(dpmpi_repl *r, int i) {
    pthread_mutex_lock(&r->mu);
    int s = (i >= 0 && i < r->nops) ? r->op_state[i] : 0;
    pthread_mutex_unlock(&r->mu);
    return s;
}

void dpmpi_repl_abandon(dpmpi_repl *r) { atomic_store((_Atomic int *)&r->abandon, 1); }

int dpmpi_repl_free(dpmpi_repl *r, double timeout) {
    if (!r) return 0;
    if (dpmpi_repl_wait(r, timeout) == 1) {
        dpmpi_repl_abandon(r); /* the next step leaves; its requests leak */
        if (dpmpi_repl_wait(r, 1.0) == 1) return -1; /* stuck inside MPI: leak it all */
    }
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    free(r->ops);
    free(r->op_state);
    free(r);
    return 0;
}

/* ---------------------------------------------------------------- copy engine */

typedef struct {
    char *dst;
    const char *src;
    size_t len;
    uint64_t digest;
    atomic_int done; /* written (release): a replication fed by this job may send these bytes */
} unit_t;

struct dpmpi_engine {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t *threads;
    int nthreads, stop;
    uint64_t gen;
    /* the job */
    unit_t *units;
    size_t nunits, cap;
    atomic_size_t next;
    atomic_size_t copied;
    size_t fail_after; /* test hook: fail after copying this many bytes (SIZE_MAX: never) */
    dpmpi_repl *gate;
    uint64_t gate_job; /* the replication job number the copy waits for (repl_last_job) */
    uint64_t job;      /* this job's number (dpmpi_engine_job) */
    int left;    /* workers that finished the current job */
    int helpers; /* waiting callers copying units themselves */
    int running; /* a job is started and not finished */
    atomic_int error;
    int stream;
    pid_t pull;         /* > 0: the job's sources are this process's memory (dpmpi_engine_pull) */
    size_t batch;       /* units claimed at once (a pull of small units: one read for several) */
    atomic_int pull_errno;
    pid_t *tids;        /* the workers' thread ids, for raising their priority while a caller waits */
    atomic_int ntids;
};

#define STREAM_MIN ((size_t)8 << 20) /* jobs from 8 MiB on bypass the cache */
#define INLINE_MAX ((size_t)2 << 20) /* jobs up to 2 MiB run in the caller: a thread hand-off costs more */

/* Read len bytes at src in process pid into dst (process_vm_readv, which may return short:
 * go on from where it stopped); 0 or an errno (EFAULT for a read that made no progress). The
 * other process may have died or unmapped the range: the caller falls back to a message. */
static int pull_unit(pid_t pid, char *dst, const char *src, size_t len) {
    size_t done = 0;
    while (done < len) {
        struct iovec local = {dst + done, len - done}, remote = {(void *)(src + done), len - done};
        ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EFAULT;
        done += (size_t)n;
    }
    return 0;
}

#define PULL_BATCH 64                /* units per read (process_vm_readv takes up to IOV_MAX iovecs) */
#define PULL_SMALL ((size_t)256 << 10) /* pulls whose units average less than this are read in batches */

/* Read units [u, end) of a pull with one process_vm_readv (a read per unit cost ~5 us: a state
 * of 600 arrays of 53 KiB read in 5.5 ms against 2.7 ms for one array of the same bytes); what a
 * short read left is read unit by unit. Then each unit's digest, as run_units does. 0 or an errno. */
static int pull_batch(dpmpi_engine *e, size_t u, size_t end) {
    struct iovec local[PULL_BATCH], remote[PULL_BATCH];
    for (size_t k = u; k < end; k++) {
        local[k - u] = (struct iovec){e->units[k].dst, e->units[k].len};
        remote[k - u] = (struct iovec){(void *)e->units[k].src, e->units[k].len};
    }
    ssize_t n;
    do n = process_vm_readv(e->pull, local, (unsigned long)(end - u), remote, (unsigned long)(end - u), 0);
    while (n < 0 && errno == EINTR);
    size_t got = n < 0 ? 0 : (size_t)n;
    for (size_t k = u; k < end; k++) {
        unit_t *un = &e->units[k];
        if (got < un->len) { /* a short read: the rest of this unit, then each unit alone */
            int err = pull_unit(e->pull, un->dst + got, un->src + got, un->len - got);
            if (err) return err;
        }
        got = got < un->len ? 0 : got - un->len;
        un->digest = do_unit(NULL, un->dst, un->len, 0);
        atomic_store_explicit(&un->done, 1, memory_order_release);
    }
    return 0;
}

/* Claim and process units until none is left (workers, and callers that wait). */
static void run_units(dpmpi_engine *e) {
    for (;;) {
        if (atomic_load(&e->error)) break;
        if (e->batch > 1) {
            size_t u = atomic_fetch_add(&e->next, e->batch);
            if (u >= e->nunits) break;
            size_t end = u + e->batch < e->nunits ? u + e->batch : e->nunits;
            int err = pull_batch(e, u, end);
            if (err) {
                int expected = 0;
                atomic_store(&e->pull_errno, err);
                atomic_compare_exchange_strong(&e->error, &expected, DPMPI_ENGINE_PULL_FAILED);
                break;
            }
            continue;
        }
        size_t u = atomic_fetch_add(&e->next, 1);
        if (u >= e->nunits) break;
        unit_t *un = &e->units[u];
        if (e->fail_after != SIZE_MAX) {
            size_t before = atomic_fetch_add(&e->copied, un->len);
            if (before + un->len > e->fail_after) { /* half-write this unit, then fail */
                if (un->dst && e->pull > 0) pull_unit(e->pull, un->dst, un->src, un->len / 2);
                else if (un->dst) memcpy(un->dst, un->src, un->len / 2);
                int expected = 0;
                atomic_compare_exchange_strong(&e->error, &expected, DPMPI_ENGINE_INJECTED);
                break;
            }
        }
        if (e->pull > 0) {
            int err = pull_unit(e->pull, un->dst, un->src, un->len);
            if (err) {
                int expected = 0;
                atomic_store(&e->pull_errno, err);
                atomic_compare_exchange_strong(&e->error, &expected, DPMPI_ENGINE_PULL_FAILED);
                break;
            }
            un->digest = do_unit(NULL, un->dst, un->len, 0); /* the bytes that arrived, still in cache */
        } else {
            un->digest = do_unit(un->dst, un->src, un->len, e->stream); /* (streaming stores: fenced in it) */
        }
        atomic_store_explicit(&un->done, 1, memory_order_release);
    }
}

static void *engine_main(void *arg) {
    dpmpi_engine *e = arg;
    prctl(PR_SET_NAME, "dpmpi-copy", 0, 0, 0);
    lower_priority();
    e->tids[atomic_fetch_add(&e->ntids, 1)] = (pid_t)syscall(SYS_gettid);
    uint64_t seen = 0;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && e->gen == seen) pthread_cond_wait(&e->work, &e->mu);
        if (e->stop) break;
        seen = e->gen;
        dpmpi_repl *gate = e->gate;
        uint64_t gate_job = e->gate_job;
        pthread_mutex_unlock(&e->mu);
        to_helper_cpus();
        if (gate) { /* the previous epoch must be safe everywhere before its older slot is overwritten */
            int rc = repl_wait_quiet(gate, gate_job);
            if (rc < 0) {
                int expected = 0;
                atomic_compare_exchange_strong(&e->error, &expected, DPMPI_ENGINE_GATE_FAILED);
            }
        }
        run_units(e);
        pthread_mutex_lock(&e->mu);
        if (++e->left == e->nthreads && e->helpers == 0) {
            e->running = 0;
            pthread_cond_broadcast(&e->done);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

dpmpi_engine *dpmpi_engine_new(int nthreads) {
    if (nthreads < 1 || nthreads > 64) return NULL;
    dpmpi_engine *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->done, NULL);
    e->fail_after = SIZE_MAX;
    e->threads = calloc((size_t)nthreads, sizeof(pthread_t));
    e->tids = calloc((size_t)nthreads, sizeof(pid_t));
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&e->threads[i], NULL, engine_main, e) != 0) {
            e->nthreads = i;
            dpmpi_engine_free(e);
            return NULL;
        }
        e->nthreads = i + 1;
    }
    return e;
}

void dpmpi_engine_free(dpmpi_engine *e) {
    if (!e) return;
    dpmpi_engine_wait(e, NULL);
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < e->nthreads; i++) pthread_join(e->threads[i], NULL);
    free(e->threads);
    free(e->tids);
    free(e->units);
    free(e);
}


void dpmpi_engine_fail_after(dpmpi_engine *e, size_t nbytes) { e->fail_after = nbytes ? nbytes : SIZE_MAX; }

static int engine_start(dpmpi_engine *e, pid_t pull, int nseg, char *const *dst, char *const *src, const size_t *len,
                        size_t unit, dpmpi_repl *gate) {
    if (unit == 0) unit = DPMPI_UNIT;
    pthread_mutex_lock(&e->mu);
    if (e->running) {
        pthread_mutex_unlock(&e->mu);
        return -1;
    }
    size_t n = 0;
    for (int s = 0; s < nseg; s++) n += len[s] ? (len[s] + unit - 1) / unit : 1;
    if (n > e->cap) {
        unit_t *u = realloc(e->units, n * sizeof(unit_t));
        if (!u) {
            pthread_mutex_unlock(&e->mu);
            return -3;
        }
        e->units = u;
        e->cap = n;
    }
    size_t k = 0;
    for (int s = 0; s < nseg; s++) {
        size_t off = 0;
        do {
            size_t m = len[s] - off < unit ? len[s] - off : unit;
            e->units[k].dst = dst ? (dst[s] ? dst[s] + off : NULL) : NULL;
            e->units[k].src = src[s] + off;
            e->units[k].len = m;
            e->units[k].digest = 0;
            atomic_store(&e->units[k].done, 0);
            k++;
            off += m;
        } while (off < len[s]);
    }
    e->nunits = k;
    size_t total = 0;
    for (int s = 0; s < nseg; s++) total += len[s];
    e->stream = total >= STREAM_MIN && pull == 0;
    e->pull = pull;
    e->batch = pull > 0 && e->fail_after == SIZE_MAX && k > 1 && total / k < PULL_SMALL ? PULL_BATCH : 1;
    atomic_store(&e->next, 0);
    atomic_store(&e->copied, 0);
    atomic_store(&e->error, 0);
    atomic_store(&e->pull_errno, 0);
    e->gate_job = gate ? repl_last_job(gate) : 0;
    e->gate = e->gate_job ? gate : NULL;
    e->job++;
    e->left = 0;
    if (total <= INLINE_MAX && gate == NULL && e->fail_after == SIZE_MAX) {
        /* small: copy here (the caller has released the GIL), the job is done on return */
        run_units(e);
        pthread_mutex_unlock(&e->mu);
        return 0;
    }
    e->running = 1;
    e->gen++;
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

int dpmpi_engine_start(dpmpi_engine *e, int nseg, char *const *dst, char *const *src, const size_t *len, size_t unit,
                       dpmpi_repl *gate) {
    return engine_start(e, 0, nseg, dst, src, len, unit, gate);
}

int dpmpi_engine_pull(dpmpi_engine *e, int pid, int nseg, char *const *dst, char *const *src, const size_t *len) {
    if (pid <= 0 || !dst) return -2;
    for (int s = 0; s < nseg; s++)
        if (!dst[s]) return -2;
    return engine_start(e, (pid_t)pid, nseg, dst, src, len, 0, NULL);
}

int dpmpi_engine_pull_errno(dpmpi_engine *e) { return atomic_load(&e->pull_errno); }

uint64_t dpmpi_engine_job(dpmpi_engine *e) {
    pthread_mutex_lock(&e->mu);
    uint64_t k = e->job;
    pthread_mutex_unlock(&e->mu);
    return k;
}

int dpmpi_engine_ready(dpmpi_engine *e, uint64_t job, const char *a, size_t n) {
    pthread_mutex_lock(&e->mu); /* (a new job rewrites the units under it) */
    int ready = 1;
    if (e->job == job && e->running)
        for (size_t u = 0; u < e->nunits && ready; u++) {
            const unit_t *un = &e->units[u];
            if (un->dst && un->dst < a + n && a < un->dst + un->len &&
                !atomic_load_explicit(&un->done, memory_order_acquire))
                ready = 0;
        }
    pthread_mutex_unlock(&e->mu);
    return ready;
}

int dpmpi_engine_busy(dpmpi_engine *e) {
    pthread_mutex_lock(&e->mu);
    int b = e->running;
    pthread_mutex_unlock(&e->mu);
    return b;
}

/* Set the copy threads' nice value (errors ignored: raising a priority back needs privilege). */
static void set_workers_nice(dpmpi_engine *e, int nice_value) {
    int n = atomic_load(&e->ntids);
    for (int i = 0; i < n; i++)
        if (e->tids[i]) setpriority(PRIO_PROCESS, (id_t)e->tids[i], nice_value);
}

int dpmpi_engine_wait(dpmpi_engine *e, uint64_t *digest) {
    /* A caller that waits never waits for a thread that may not run: the copy threads run
     * niced, and on a machine whose cores are busy they hardly run.
     * 1. If the job waits for its gate (the previous epoch's replication; the slot it writes may
     *    still be needed), the caller drives that replication to its end itself;
     * 2. then it copies what is left of the job itself, at its own priority;
     * 3. units that a copy thread already holds are finished by that thread: while the caller
     *    waits for them it raises the threads' priority to its own (where the OS allows). */
    pthread_mutex_lock(&e->mu);
    dpmpi_repl *gate = e->running ? e->gate : NULL;
    uint64_t gate_job = e->gate_job;
    pthread_mutex_unlock(&e->mu);
    if (gate && repl_drive(gate, -1.0, gate_job) < 0) { /* failed gate: nothing may be written */
        int expected = 0;
        atomic_compare_exchange_strong(&e->error, &expected, DPMPI_ENGINE_GATE_FAILED);
    }
    pthread_mutex_lock(&e->mu);
    if (e->running) {
        e->helpers++;
        pthread_mutex_unlock(&e->mu);
        run_units(e);
        pthread_mutex_lock(&e->mu);
        if (--e->helpers == 0 && e->left == e->nthreads) {
            e->running = 0;
            pthread_cond_broadcast(&e->done);
        }
    }
    if (e->running) {
        int mine = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
        int theirs = snapshot_nice();
        if (theirs > mine) set_workers_nice(e, mine);
        while (e->running) pthread_cond_wait(&e->done, &e->mu);
        if (theirs > mine) set_workers_nice(e, theirs);
    }
    int err = atomic_load(&e->error);
    if (digest) {
        uint64_t h = 0;
        for (size_t u = 0; u < e->nunits; u++) h = fold(h, e->units[u].digest);
        *digest = h;
    }
    pthread_mutex_unlock(&e->mu);
    return err;
}
