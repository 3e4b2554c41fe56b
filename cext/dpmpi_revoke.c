/* Open MPI's revoke of a communicator that is still being created.
 *
 * ompi_comm_revoke_local(comm, coll_only) calls comm->c_coll->coll_revoke_local(comm) without
 * checking c_coll, and a communicator being created (Dup, Split, Create, Shrink, ...) is entered
 * in the table of communicators when its context id is chosen, before its collectives are
 * selected at the end of its activation: until then c_coll is NULL. Two events revoke such a
 * communicator, and each one segfaulted the process in Open MPI 5.0.11 (fault address 0x450):
 *   - a failure notice: ompi_errhandler_proc_failed_internal revokes the collectives of every
 *     communicator holding the dead process, the one being activated included (seen in the
 *     stranger programs that make a communicator in every step, 3 of 20 to 6 of 12 runs with
 *     a kill from outside, and once in a repair's Shrink);
 *   - a revoke message that overtakes the activation: a rank that left Dup revokes the new
 *     communicator while the others still wait in Dup (4 of 6 ranks crashed, every run:
 *     tests/programs/revoke_fresh.py).
 * dpmpi takes libmpi's own PLT slot for ompi_comm_revoke_local (every caller in libmpi goes
 * through it). When c_coll is NULL, the real function runs with a stand-in table whose entries
 * all point to standin_revoke: the real function calls that entry (the collectives' own revoke,
 * which has nothing to do for a communicator without collective modules) after the PML has
 * marked the communicator revoked and before it wakes the waiting requests; standin_revoke puts
 * c_coll back to NULL there, so the stand-in is never seen once the activation is woken. Every
 * other effect of the revoke (ANY_SOURCE off, the PML's purge, coll_revoked/comm_revoked set,
 * waiting requests woken) is Open MPI's own: the activation then fails on that process with
 * the error of the revoke, or its collectives fail once they are selected.
 *
 * Threads: the hook runs on whichever thread's progress delivers the event (the program's, the
 * snapshot replicator's, the failure watcher's). The NULL path holds one recursive mutex (an
 * intercommunicator's revoke revokes its local communicator through the same slot), so two
 * threads never stand in for the same communicator at once. If the activation's own thread sets
 * the real table meanwhile, the real function uses it and the stand-in's compare-and-swap finds
 * it there and leaves it. The stand-in table is allocated once and never freed (lifetime: the
 * process). The offsets come from the function's own code (the load of c_coll and the indirect
 * call); if that code is not recognised, nothing is patched and Open MPI's behaviour is kept. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dpmpi_c.h"

typedef bool (*fn_revoke_local)(void *comm, bool coll_only);
static fn_revoke_local real_revoke_local;
static long coll_off;                /* offset of c_coll in ompi_communicator_t */
static void **standin_table;         /* revoke slot / 8 + 1 entries, all standin_revoke */
static pthread_mutex_t standin_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static atomic_long stood_in;         /* how many revokes ran with the stand-in (dpmpi_revoke_standins) */

static void *_Atomic *coll_slot(void *comm) { return (void *_Atomic *)((char *)comm + coll_off); }

static int standin_revoke(void *comm) {
    void *expected = (void *)standin_table;
    atomic_compare_exchange_strong(coll_slot(comm), &expected, NULL);
    return 0;
}

static bool revoke_local_hook(void *comm, bool coll_only) {
    void *cur = atomic_load(coll_slot(comm));
    if (cur != NULL && cur != (void *)standin_table) return real_revoke_local(comm, coll_only);
    pthread_mutex_lock(&standin_lock);
    void *expected = NULL;
    bool r;
    if (atomic_compare_exchange_strong(coll_slot(comm), &expected, (void *)standin_table)) {
        atomic_fetch_add(&stood_in, 1);
        r = real_revoke_local(comm, coll_only);
        standin_revoke(comm); /* (if the real function returned early: already revoked) */
    } else {
        r = real_revoke_local(comm, coll_only); /* the activation set the real table meanwhile */
    }
    pthread_mutex_unlock(&standin_lock);
    return r;
}

static int32_t disp32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* `mov D1(%rbx),%rax; mov %rbx,%rdi; call *D2(%rax)` (x86-64): D1 is c_coll's offset in the
 * communicator, D2 the collectives' revoke entry in the table. */
static int find_offsets(const unsigned char *code, long *c_off, long *s_off) {
#if defined(__x86_64__)
    for (int i = 0; i < 160; i++) {
        const unsigned char *p = code + i;
        if (p[0] == 0x48 && p[1] == 0x8b && p[2] == 0x83 && p[7] == 0x48 && p[8] == 0x89 && p[9] == 0xdf &&
            p[10] == 0xff && p[11] == 0x90) {
            *c_off = disp32(p + 3);
            *s_off = disp32(p + 12);
            return *c_off > 0 && *c_off < 4096 && *s_off >= 0 && *s_off < 8192 && *s_off % 8 == 0;
        }
    }
#else
    (void)code, (void)c_off, (void)s_off;
#endif
    return 0;
}

void *dpmpi_revoke_local_hook(void *libmpi) {
    if (real_revoke_local) return (void *)revoke_local_hook;
    void *real = libmpi ? dlsym(libmpi, "ompi_comm_revoke_local") : NULL;
    long c_off, s_off;
    if (!real || !find_offsets(real, &c_off, &s_off)) return NULL;
    void **table = malloc(((size_t)s_off / 8 + 1) * sizeof(void *));
    if (!table) return NULL;
    for (long i = 0; i <= s_off / 8; i++) table[i] = (void *)standin_revoke;
    coll_off = c_off;
    standin_table = table;
    real_revoke_local = (fn_revoke_local)real;
    return (void *)revoke_local_hook;
}

long dpmpi_revoke_standins(void) { return atomic_load(&stood_in); }
