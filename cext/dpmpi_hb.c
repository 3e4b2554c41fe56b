/* dpmpi heartbeat: a hung-rank detector for the ranks of one job on one node.
 *
 * ULFM notices ranks that die, not ranks that stop (SIGSTOP, a frozen process): one of those
 * hangs the whole job. So every rank keeps a heartbeat in node-local shared memory, and every
 * rank watches the others on its node; a rank silent for longer than its timeout T is sent
 * SIGKILL, which ULFM does notice, and the survivors recover as from any death.
 *
 * Where the heartbeat lives: one 64-byte file per process, /dev/shm/dpmpi-hb-<job>/pid-<pid>
 * (the directory is chosen in dpmpi/heartbeat.py), mapped MAP_SHARED. The owner stores
 * CLOCK_MONOTONIC (shared by every process of a node) into `beat_ns` every T/5 seconds (at least
 * 0.2 s apart): one store to memory, no system call, no disk. A file is created under a temporary
 * name, filled, then renamed into place, so a watcher never maps a half-written one.
 *
 * Owner and lifetime of the thread (there is one per process, "dpmpi-hb"):
 *  - Started by dpmpi_hb_start(), called once from dpmpi/_guard.py's install() in processes that
 *    are MPI ranks (never in dpmpi-run itself). Later calls do nothing.
 *  - Touches only: the static `hb` below (allocated once, never freed), its own mapping and the
 *    mappings of its peers' files (private to this thread: mapped and unmapped only here), the
 *    job directory, /proc/PID/stat, kill(2) and write(2) on fd 2. No Python object, no GIL, no
 *    MPI, no stdio, no lock shared with another thread. All signals are blocked in it.
 *  - Never stopped or joined: it runs until the process is gone. During exit (dpmpi's on_exit
 *    handler, its exit agreement, MPI_Finalize and its watchdog) it keeps beating, so a rank that
 *    is slow to end normally is never judged hung while it still runs; since nothing it uses is
 *    ever freed, it cannot crash at exit. The on_exit handler registered here (before dpmpi's
 *    own, so it runs after it: after the exit agreement and Finalize) marks the file done,
 *    removes it, and removes the job directory when it is the last one out.
 *  - A child made by fork() has no such thread, and its exit handler leaves the parent's file
 *    alone (the handler checks the pid).
 *
 * Judging a peer: its beat is older than its own T (each file carries its owner's T), its pid
 * still names the same process (start time, /proc/PID/stat field 22; not a zombie), and this
 * watcher wins the compare-and-swap of the file's state from ALIVE to KILLED, so exactly one
 * watcher acts. Silence counts only while the watcher itself ran on time: a peer's silence is
 * measured from its last beat or from the watcher's last own gap of more than two periods
 * (stopped, starved, the whole machine stalled), whichever is later, so a watcher that runs
 * again before its peers after a stall of the machine does not count the stall against them
 * (chaos saw a survivor killed that way after a 47-s stall of the VM). Files of processes that
 * are gone (ended without their exit handler, or killed) are removed by whoever sees them, and a
 * starting process removes the directories of this user's ended jobs (every process gone).
 *
 * Limitation: only processes on the same node watch each other; a rank alone on its node is
 * not watched.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "dpmpi_c.h"
#include "dpmpi_util.h"

#define HB_MAGIC 0x42485044u /* "DPHB" */
#define HB_VERSION 1u
#define HB_ALIVE 1
#define HB_DONE 2
#define HB_KILLED 3
#define HB_MAX_PEERS 1024 /* peers watched per process (more local ranks: the rest unwatched) */
#define HB_MIN_PERIOD_NS 200000000LL
#define HB_DIR_PREFIX "dpmpi-hb-"

typedef struct {
    uint32_t magic;
    uint32_t version;
    int32_t pid;
    _Atomic int32_t rank;
    uint64_t start_ticks; /* /proc/PID/stat field 22: guards against pid reuse */
    int64_t timeout_ns;   /* the owner's T: peers judge it by this */
    _Atomic int64_t beat_ns;
    _Atomic int32_t state;
    char pad[20];
} hb_file;

_Static_assert(sizeof(hb_file) == 64, "heartbeat file layout");

typedef struct {
    ino_t ino; /* 0: free */
    pid_t pid;
    hb_file *map;
} hb_peer;

static struct {
    atomic_int started;
    pid_t pid;
    char dir[256];
    char path[600];
    hb_file *me;
    int64_t timeout_ns, period_ns;
    atomic_long beats;
    atomic_int tid;
    /* CLOCK_MONOTONIC since when this process's watch thread has run on time (no gap of more
     * than two periods): written by that thread only, read by dpmpi_hb_wait_silent's caller */
    _Atomic int64_t awake_since;
    hb_peer peers[HB_MAX_PEERS];
} hb;

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns(int64_t ns) {
    struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}


/* Start time (field 22 of /proc/PID/stat) of a live, non-zombie process; 0 when there is none.
 * ``state``, when given, gets its state (field 3: 'T' stopped by a signal, 't' by a tracer, ...). */
static uint64_t proc_stat(pid_t pid, char *state) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name (field 2) may hold spaces and ')' */
    if (!p || p[1] != ' ') return 0;
    p += 2; /* field 3: state */
    if (*p == 'Z' || *p == 'X' || *p == 'x') return 0;
    if (state) *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return 0;
        p++;
    }
    return strtoull(p, NULL, 10);
}

static uint64_t start_ticks(pid_t pid) { return proc_stat(pid, NULL); }

static int same_process(pid_t pid, uint64_t ticks) {
    return pid > 0 && ticks != 0 && start_ticks(pid) == ticks;
}

static void unlink_peer(const char *name) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", hb.dir, name);
    unlink(path);
}

/* How long a peer whose last beat is BEAT has been silent, as this process's watch thread saw it. */
static int64_t silence(int64_t now, int64_t beat) {
    int64_t since = atomic_load(&hb.awake_since);
    return now - (beat > since ? beat : since);
}

static void judge(hb_peer *p, const char *name, int64_t now) {
    hb_file *f = p->map;
    int32_t state = atomic_load(&f->state);
    int64_t age = silence(now, atomic_load(&f->beat_ns));
    if (state == HB_ALIVE && age <= f->timeout_ns) return;
    if (!same_process(f->pid, f->start_ticks)) { /* gone: a leftover (ended without its handler, killed) */
        if (state != HB_ALIVE || age > f->timeout_ns) unlink_peer(name);
        return;
    }
    if (state != HB_ALIVE) return; /* done (ending normally) or being killed by another watcher */
    int32_t expected = HB_ALIVE;
    if (!atomic_compare_exchange_strong(&f->state, &expected, HB_KILLED)) return; /* another watcher acts */
    age = silence(mono_ns(), atomic_load(&f->beat_ns));
    if (age <= f->timeout_ns) { /* it beat again meanwhile */
        atomic_store(&f->state, HB_ALIVE);
        return;
    }
    char pstate = '?'; /* for the line: 'T' stopped; 'D' blocked in the kernel, ends when its call returns */
    proc_stat(f->pid, &pstate);
    if (kill(f->pid, SIGKILL) != 0) return;
    char msg[288];
    int n = snprintf(msg, sizeof msg,
                     "[dpmpi] rank %d (pid %d) sent no heartbeat for %.1f s: killed (SIGKILL) so the job can recover"
                     " (DPMPI_HEARTBEAT_TIMEOUT=%g, seen by pid %d, its /proc state %c)\n",
                     (int)atomic_load(&f->rank), (int)f->pid, (double)(mono_ns() - atomic_load(&f->beat_ns)) / 1e9,
                     (double)f->timeout_ns / 1e9, (int)hb.pid, pstate);
    dpmpi_write_all(2, msg, (size_t)n);
    unlink_peer(name);
}

static hb_peer *peer_for(const struct dirent *e, pid_t pid) {
    hb_peer *free_slot = NULL;
    for (int i = 0; i < HB_MAX_PEERS; i++) {
        hb_peer *p = &hb.peers[i];
        if (p->ino == e->d_ino && p->pid == pid) return p;
        if (!p->ino && !free_slot) free_slot = p;
    }
    if (!free_slot) return NULL;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", hb.dir, e->d_name);
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return NULL;
    struct stat st;
    void *m = MAP_FAILED;
    /* a file is complete before it gets its name, and files never shrink: no SIGBUS */
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(hb_file) && st.st_ino == e->d_ino)
        m = mmap(NULL, sizeof(hb_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return NULL;
    hb_file *f = m;
    if (f->magic != HB_MAGIC || f->version != HB_VERSION || f->pid != pid) {
        munmap(m, sizeof(hb_file));
        return NULL;
    }
    free_slot->ino = e->d_ino;
    free_slot->pid = pid;
    free_slot->map = f;
    return free_slot;
}

/* The pid of a peer's heartbeat file "pid-N" (not this process's); 0 for any other entry. */
static pid_t peer_pid(const struct dirent *e) {
    if (strncmp(e->d_name, "pid-", 4) != 0) return 0;
    char *end;
    long pid = strtol(e->d_name + 4, &end, 10);
    return *end || pid <= 0 || pid == hb.pid ? 0 : (pid_t)pid;
}

/* A heartbeat file read whole with pread (not mapped): 1 when it could be. */
static int read_beat(const char *path, hb_file *f) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    ssize_t n = pread(fd, f, sizeof *f, 0);
    close(fd);
    return n == (ssize_t)sizeof *f;
}

static void scan(int64_t now) {
    static unsigned char seen[HB_MAX_PEERS];
    memset(seen, 0, sizeof seen);
    DIR *d = opendir(hb.dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            pid_t pid = peer_pid(e);
            if (!pid) continue;
            hb_peer *p = peer_for(e, pid);
            if (!p) continue;
            seen[p - hb.peers] = 1;
            judge(p, e->d_name, now);
        }
        closedir(d);
    }
    for (int i = 0; i < HB_MAX_PEERS; i++) /* files that went away: drop their mappings */
        if (hb.peers[i].ino && !seen[i]) {
            munmap(hb.peers[i].map, sizeof(hb_file));
            hb.peers[i].ino = 0;
            hb.peers[i].map = NULL;
        }
}

static void *hb_thread(void *arg) {
    (void)arg;
    atomic_store(&hb.tid, (int)syscall(SYS_gettid));
    int64_t last = atomic_load(&hb.awake_since);
    for (;;) {
        sleep_ns(hb.period_ns);
        int64_t now = mono_ns();
        atomic_store(&hb.me->beat_ns, now);
        atomic_fetch_add(&hb.beats, 1);
        int64_t gap = now - last;
        last = now;
        /* this thread was itself not running (stopped, starved, blocked in the kernel): it did
         * not see its peers meanwhile, so their silence counts from now */
        if (gap > 2 * hb.period_ns) {
            atomic_store(&hb.awake_since, now);
            continue;
        }
        scan(now);
    }
    return NULL;
}

/* Remove the files in DIR of processes that are gone (or whose pid names another process now);
 * returns how many files of live processes remain. */
static int sweep(const char *dir, pid_t self) {
    int live = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int tmp = strncmp(e->d_name, "tmp-", 4) == 0;
        if (!tmp && strncmp(e->d_name, "pid-", 4) != 0) continue;
        char *end;
        long pid = strtol(e->d_name + 4, &end, 10);
        if (*end || pid <= 0) continue;
        if (pid == self) {
            live++;
            continue;
        }
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (tmp) { /* being written: its owner either renames it soon or is gone */
            if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) unlink(path);
            else live++;
            continue;
        }
        hb_file f;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        ssize_t n = pread(fd, &f, sizeof f, 0);
        close(fd);
        /* gone, a zombie, or its pid now names another process */
        if (n == (ssize_t)sizeof f && !same_process(f.pid, f.start_ticks)) unlink(path);
        else live++;
    }
    closedir(d);
    return live;
}

/* Directories of earlier jobs on this node whose processes are all gone: the ranks of a job
 * that ended through the Finalize watchdog (_exit, no exit handlers) leave theirs behind. Only
 * names starting with HB_DIR_PREFIX (dpmpi/heartbeat.py's DIR_PREFIX) beside this job's. */
static void sweep_old_jobs(void) {
    char parent[256];
    snprintf(parent, sizeof parent, "%s", hb.dir);
    char *slash = strrchr(parent, '/');
    if (!slash || slash == parent) return;
    *slash = 0;
    if (strncmp(slash + 1, HB_DIR_PREFIX, strlen(HB_DIR_PREFIX)) != 0) return; /* not in the usual place (tests) */
    DIR *d = opendir(parent);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, HB_DIR_PREFIX, strlen(HB_DIR_PREFIX)) != 0 || strcmp(e->d_name, slash + 1) == 0) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", parent, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
        if (sweep(path, 0) == 0) rmdir(path); /* fails if a process of that job just arrived */
    }
    closedir(d);
}

/* Seconds until the job's silent peers on this node would be judged: alive (the same process),
 * still ALIVE in their file, and stopped (state 'T' or 't': its last beat may be as recent as
 * any live peer's) or without a beat for more than two periods (frozen); the longest of
 * (its T - its silence) + one period. 0: none. Reads the files with pread (the watch thread's
 * mappings are its own); any thread. */
static double silent_wait(void) {
    double longest = 0;
    DIR *d = opendir(hb.dir);
    if (!d) return 0;
    int64_t now = mono_ns();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!peer_pid(e)) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", hb.dir, e->d_name);
        hb_file f;
        if (!read_beat(path, &f) || f.magic != HB_MAGIC || f.state != HB_ALIVE) continue;
        char state = 0;
        if (f.pid <= 0 || f.start_ticks == 0 || proc_stat(f.pid, &state) != f.start_ticks) continue; /* gone */
        if (state != 'T' && state != 't' && now - f.beat_ns <= 2 * hb.period_ns) continue;
        /* the watch thread judges the silence it saw itself (silence()): that is what is left */
        double left = (double)(f.timeout_ns - silence(now, f.beat_ns) + hb.period_ns) / 1e9;
        if (left > longest) longest = left;
    }
    closedir(d);
    return longest;
}

/* Called by a process about to end (dpmpi's exit before its agreement, the Finalize watchdog
 * before _exit, this file's exit handler): while
 * a peer of the job on this node is silent, wait, beating, until the watch thread (which runs
 * on) has judged it, or it beat again or ended; at most its T + two periods from now. Without
 * this the job's other processes, ended within seconds, left a SIGSTOPped idle spare to a T it
 * never reached: mpirun waited for it forever (seen in chaos). Returns at once (0) with no
 * silent peer, or when the heartbeat is off; 1 when it waited. */
static int dpmpi_hb_wait_silent(void) {
    if (!atomic_load(&hb.started) || !hb.me || getpid() != hb.pid) return 0;
    int64_t deadline = 0;
    for (;;) {
        double left = silent_wait();
        if (left <= 0) return deadline != 0;
        int64_t now = mono_ns();
        if (!deadline) deadline = now + (int64_t)(left * 1e9) + hb.period_ns;
        if (now >= deadline) return 1;
        sleep_ns(hb.period_ns / 4);
    }
}

/* After dpmpi's own exit handler (the exit agreement and MPI_Finalize): this process ends
 * normally, so it leaves the watch (once no local peer of the job is silent: dpmpi_hb_wait_silent),
 * and the last one out removes the directory. */
static void hb_on_exit(int status, void *arg) {
    (void)status;
    (void)arg;
    if (getpid() != hb.pid || !hb.me) return; /* a forked child: not its file */
    dpmpi_hb_wait_silent();
    int32_t expected = HB_ALIVE;
    atomic_compare_exchange_strong(&hb.me->state, &expected, HB_DONE);
    unlink(hb.path);
    sweep(hb.dir, 0); /* leftovers of processes gone without their exit handler */
    rmdir(hb.dir); /* fails while other processes are still in it */
}

int dpmpi_hb_start(const char *dir, int world_rank, double timeout) {
    int expected = 0;
    if (timeout <= 0 || !dir || !*dir) return 0;
    if (!atomic_compare_exchange_strong(&hb.started, &expected, 1)) return 0;
    int err = 0;
    if (snprintf(hb.dir, sizeof hb.dir, "%s", dir) >= (int)sizeof hb.dir) {
        err = ENAMETOOLONG;
        goto fail;
    }
    hb.pid = getpid();
    hb.timeout_ns = (int64_t)(timeout * 1e9);
    hb.period_ns = hb.timeout_ns / 5 > HB_MIN_PERIOD_NS ? hb.timeout_ns / 5 : HB_MIN_PERIOD_NS;
    atomic_store(&hb.awake_since, mono_ns());
    uint64_t ticks = start_ticks(hb.pid);
    if (!ticks) {
        err = ENOENT; /* no /proc */
        goto fail;
    }
    sweep_old_jobs();
    char tmp[600];
    snprintf(hb.path, sizeof hb.path, "%s/pid-%d", hb.dir, (int)hb.pid);
    snprintf(tmp, sizeof tmp, "%s/tmp-%d", hb.dir, (int)hb.pid);
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) { /* the last one out may remove the directory meanwhile */
        if (mkdir(hb.dir, 0700) != 0 && errno != EEXIST) {
            err = errno;
            goto fail;
        }
        fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != ENOENT) {
            err = errno;
            goto fail;
        }
    }
    if (fd < 0) {
        err = ENOENT;
        goto fail;
    }
    if (ftruncate(fd, sizeof(hb_file)) != 0) {
        err = errno;
        close(fd);
        unlink(tmp);
        goto fail;
    }
    void *m = mmap(NULL, sizeof(hb_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        err = errno;
        unlink(tmp);
        goto fail;
    }
    hb.me = m; /* never unmapped: the thread uses it until the process is gone */
    hb.me->pid = hb.pid;
    atomic_store(&hb.me->rank, world_rank);
    hb.me->start_ticks = ticks;
    hb.me->timeout_ns = hb.timeout_ns;
    atomic_store(&hb.me->beat_ns, mono_ns());
    atomic_store(&hb.me->state, HB_ALIVE);
    hb.me->version = HB_VERSION;
    hb.me->magic = HB_MAGIC;
    if (rename(tmp, hb.path) != 0) {
        err = errno;
        unlink(tmp);
        goto fail;
    }
    /* registered before dpmpi's exit handler, so it runs after it (on_exit runs in reverse) */
    on_exit(hb_on_exit, NULL);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* signals go to the program's threads, not this one */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, hb_thread, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        err = rc;
        atomic_store(&hb.me->state, HB_DONE);
        unlink(hb.path);
        goto fail;
    }
    pthread_setname_np(t, "dpmpi-hb");
    dpmpi_exit_wait_silent_with(dpmpi_hb_wait_silent);
    return 1;
fail:
    return -(err ? err : EINVAL);
}

void dpmpi_hb_set_rank(int world_rank) {
    if (hb.me) atomic_store(&hb.me->rank, world_rank);
}

int dpmpi_hb_thread_id(void) { return atomic_load(&hb.tid); }

long dpmpi_hb_beats(void) { return atomic_load(&hb.beats); }

double dpmpi_hb_period(void) { return (double)hb.period_ns / 1e9; }
