/* Tell this process's Open MPI that a peer has died, as soon as the failure watcher saw it end
 * through a pidfd, instead of waiting for the runtime's own report (PRRTE notices the child's
 * death and sends a PMIx event to every process: 10-15 ms on this stack, during which a repair's
 * Shrink waits).
 *
 * How: the same event PRRTE would send (PMIX_ERR_PROC_ABORTED_BY_SIG with the dead process as
 * PMIX_EVENT_AFFECTED_PROC), raised with PMIx_Notify_event in PMIX_RANGE_PROC_LOCAL: PMIx hands it
 * to this process's own handlers only. Open MPI's ULFM handler (registered for that code at
 * MPI_Init) moves it to the MPI progress engine, which marks the process failed at the next
 * opal_progress, exactly as when PRRTE reports it (a second report of the same death is ignored).
 * Only public PMIx calls; nothing of Open MPI's internals. Other processes are not told: each
 * one on the node tells itself through its own pidfds; processes on other nodes learn through
 * the runtime, as before.
 *
 * Owner and lifetime: dpmpi/watcher.py binds the functions (dpmpi_tell_bind, main thread, once)
 * and adds each local peer's PMIx name (dpmpi_tell_add, main thread, after init and after each
 * repair). The watcher thread calls dpmpi_tell_failed when a pidfd fires. The table and the
 * info arrays PMIx built for it are never freed (a process id is never reused; the table is
 * small). dpmpi_tell_close (the watcher's on_exit handler, before dpmpi's exit agreement and
 * MPI_Finalize) ends telling, after a call in progress returns: from then on peers that end
 * normally after the agreement are not reported, and PMIx is not called while it finalizes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpmpi_c.h"

#define TELL_MAX 4096
/* from pmix_common.h (PMIx Standard 4/5; stable ABI) */
#define PX_NSLEN 255
#define PX_ERR_PROC_ABORTED_BY_SIG (-402)
#define PX_RANGE_PROC_LOCAL 7
#define PX_BOOL 1
#define PX_PROC 22
#define PX_EVENT_AFFECTED_PROC "pmix.evproc"
#define PX_EVENT_DO_NOT_CACHE "pmix.evnocache"

typedef struct {
    char nspace[PX_NSLEN + 1];
    uint32_t rank;
} px_proc_t;

typedef struct {
    uint16_t type;
    size_t size;
    void *array;
} px_data_array_t;

typedef void *(*px_list_start_fn)(void);
typedef int (*px_list_add_fn)(void *, const char *, const void *, uint16_t);
typedef int (*px_list_convert_fn)(void *, px_data_array_t *);
typedef void (*px_list_release_fn)(void *);
typedef int (*px_notify_fn)(int, const px_proc_t *, uint8_t, const void *, size_t, void *, void *);

static struct {
    pthread_mutex_t mu;
    px_list_start_fn list_start;
    px_list_add_fn list_add;
    px_list_convert_fn list_convert;
    px_list_release_fn list_release;
    px_notify_fn notify;
    int bound, closed;
    int n;
    int ids[TELL_MAX];
    void *info[TELL_MAX];
    size_t ninfo[TELL_MAX];
    int told[TELL_MAX];
    atomic_long tells;
    _Atomic double last_at; /* CLOCK_REALTIME (time.time()) of the last event raised */
} t = {.mu = PTHREAD_MUTEX_INITIALIZER};

int dpmpi_tell_bind(const char *libpmix_path) {
    /* only the copy Open MPI already loaded: another one would have no client state */
    void *h = dlopen(libpmix_path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) return -1;
    pthread_mutex_lock(&t.mu);
    t.list_start = (px_list_start_fn)dlsym(h, "PMIx_Info_list_start");
    t.list_add = (px_list_add_fn)dlsym(h, "PMIx_Info_list_add");
    t.list_convert = (px_list_convert_fn)dlsym(h, "PMIx_Info_list_convert");
    t.list_release = (px_list_release_fn)dlsym(h, "PMIx_Info_list_release");
    t.notify = (px_notify_fn)dlsym(h, "PMIx_Notify_event");
    t.bound = t.list_start && t.list_add && t.list_convert && t.list_release && t.notify;
    int ok = t.bound;
    pthread_mutex_unlock(&t.mu);
    return ok ? 0 : -2;
}

static int find(int id) {
    for (int i = 0; i < t.n; i++)
        if (t.ids[i] == id) return i;
    return -1;
}

int dpmpi_tell_add(int id, const char *nspace, unsigned rank) {
    if (!nspace || !nspace[0] || strlen(nspace) > PX_NSLEN) return -3;
    pthread_mutex_lock(&t.mu);
    int rc = 0;
    if (!t.bound) {
        rc = -1;
    } else if (find(id) >= 0) {
        rc = 0;
    } else if (t.n >= TELL_MAX) {
        rc = -4;
    } else {
        px_proc_t proc;
        memset(&proc, 0, sizeof proc);
        strncpy(proc.nspace, nspace, PX_NSLEN);
        proc.rank = rank;
        bool yes = true;
        void *list = t.list_start();
        px_data_array_t arr = {0, 0, NULL};
        if (!list || t.list_add(list, PX_EVENT_AFFECTED_PROC, &proc, PX_PROC) != 0 ||
            t.list_add(list, PX_EVENT_DO_NOT_CACHE, &yes, PX_BOOL) != 0 || t.list_convert(list, &arr) != 0 ||
            arr.array == NULL || arr.size != 2) {
            rc = -5;
        } else {
            t.ids[t.n] = id;
            t.info[t.n] = arr.array; /* PMIx's copy: never freed */
            t.ninfo[t.n] = arr.size;
            t.told[t.n] = 0;
            t.n++;
        }
        if (list) t.list_release(list);
    }
    pthread_mutex_unlock(&t.mu);
    return rc;
}

int dpmpi_tell_failed(int id) {
    pthread_mutex_lock(&t.mu);
    int i = (t.bound && !t.closed) ? find(id) : -1;
    if (i < 0 || t.told[i]) {
        pthread_mutex_unlock(&t.mu);
        return 0;
    }
    t.told[i] = 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    atomic_store(&t.last_at, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    /* under the lock: dpmpi_tell_close (at exit) waits for a call in progress, so PMIx is never
     * called once the process has begun to finalize it. Source NULL: this process; no
     * callback: PMIx copies the info before it returns. */
    int rc = t.notify(PX_ERR_PROC_ABORTED_BY_SIG, NULL, PX_RANGE_PROC_LOCAL, t.info[i], t.ninfo[i], NULL, NULL);
    pthread_mutex_unlock(&t.mu);
    atomic_fetch_add(&t.tells, 1);
    return rc == 0 ? 1 : rc;
}

void dpmpi_tell_close(void) {
    pthread_mutex_lock(&t.mu);
    t.closed = 1;
    pthread_mutex_unlock(&t.mu);
}

long dpmpi_tell_count(void) { return atomic_load(&t.tells); }

double dpmpi_tell_last_at(void) { return atomic_load(&t.last_at); }
