/* dpmpi's exit guard for ranks that are not Python (C, C++, anything linked against libmpi):
 * a library that dpmpi-run puts into LD_PRELOAD of every rank.
 *
 * It gives such a rank what dpmpi's Python module gives a Python rank (see dpmpi_c.c):
 *   - a status record on stderr when the process ends (for dpmpi-run's exit code), also for a
 *     process that never initialises MPI;
 *   - exit with a non-zero status while MPI is initialised (exit(3) without MPI_Finalize, an
 *     abort by the MPI library): a death by SIGKILL, which ULFM reports to the others;
 *   - MPI_Finalize (the program's own, or at exit(0) without one): a fault-tolerant agreement
 *     on COMM_WORLD until every live rank is done, then Finalize under a watchdog (a Finalize
 *     after a failure can hang in Open MPI 5.0.11).
 *   - the filter of a dead peer's late messages (dpmpi_late.c), installed after MPI_Init in
 *     every rank, Python ones too (dpmpi_preload_late reports it to dpmpi's Python module).
 * It intercepts MPI_Init, MPI_Init_thread, MPI_Finalize, MPI_Comm_spawn (see below), _exit and MPIX_Comm_shrink (a shrink
 * repairs around the ranks it drops, as dpmpi's Shrink records; the PMPI_ entry points stay
 * Open MPI's). In a Python rank, dpmpi's own guard calls dpmpi_preload_disable() when it is
 * imported: then this library only forwards the calls. Everything here except those entry points
 * (and dpmpi_preload_late) is hidden (built with -fvisibility=hidden), so it never interposes on
 * dpmpi's Python module.
 *
 * Threads: none of its own except the Finalize watchdog of dpmpi_c.c (no MPI calls). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dpmpi_c.h"

#define EXPORT __attribute__((visibility("default")))

typedef int (*fn_init)(int *, char ***);
typedef int (*fn_init_thread)(int *, char ***, int, int *);
typedef int (*fn_void)(void);
typedef int (*fn_size)(void *, int *);

static int disabled;
static int armed;

EXPORT void dpmpi_preload_disable(void) {
    disabled = 1;
    dpmpi_exit_stand_down();
}

static char libmpi_path[4096];

static int find_libmpi(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (info->dlpi_name && strstr(info->dlpi_name, "/libmpi.so")) {
        snprintf(libmpi_path, sizeof libmpi_path, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

/* The loaded libmpi (also one loaded locally, e.g. by a dlopen'ed module), its path in
 * libmpi_path; NULL when none is loaded. */
static void *libmpi(void) {
    libmpi_path[0] = '\0';
    dl_iterate_phdr(find_libmpi, NULL);
    return libmpi_path[0] ? dlopen(libmpi_path, RTLD_NOW | RTLD_NOLOAD) : NULL;
}

/* Open MPI's own entry point `name`: the next definition after this library, or libmpi's. */
static void *real(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (f) return f;
    void *h = libmpi();
    return h ? dlsym(h, name) : NULL;
}

static int records_wanted(void) {
    const char *status = getenv("DPMPI_STATUS");
    return status && strcmp(status, "1") == 0;
}

static int world_rank(void) {
    static const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return -1;
}

__attribute__((constructor)) static void preload_start(void) {
    dpmpi_exit_set_record(records_wanted(), world_rank());
    /* (Open MPI registers no exit handlers of its own, so registering this early is fine) */
    dpmpi_exit_register();
}

/* The filter of a dead peer's late messages (dpmpi_late.c), in every rank, Python ones too: a
 * plain mpi4py program under dpmpi-run makes no dpmpi communicator, so only this copy is there
 * early enough for it (dpmpi's Python module then reports this copy's; without the preload it
 * installs its own). 2: not tried (MPI not initialised yet), 1: DPMPI_LATE_FILTER=0, else
 * dpmpi_late_install's code. */
static int late_status = 2;

static void install_late_filter(void) {
    const char *late = getenv("DPMPI_LATE_FILTER");
    int off = late && (!strcmp(late, "0") || !strcasecmp(late, "false") || !strcasecmp(late, "no") ||
                       !strcasecmp(late, "off"));
    if (off) {
        late_status = 1;
    } else if (late_status == 2 && libmpi()) {
        late_status = dpmpi_late_install(libmpi_path);
    }
}

/* For dpmpi's Python module (ctypes): what 0: the status above; 1: messages of `kind` seen; 2:
 * dropped. */
EXPORT long dpmpi_preload_late(int what, int kind) {
    if (what == 0) return late_status;
    return what == 1 ? dpmpi_late_seen(kind) : dpmpi_late_dropped(kind);
}

/* Whether this process was started by MPI_Comm_spawn (a repair's replacement): its
 * MPI_COMM_WORLD is another job's. */
static int spawned(void *h) {
    typedef int (*fn_get_parent)(void **);
    fn_get_parent get_parent = h ? (fn_get_parent)dlsym(h, "PMPI_Comm_get_parent") : NULL;
    void *parent = NULL, *comm_null = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_null");
    return get_parent && get_parent(&parent) == 0 && parent && parent != comm_null;
}

/* After a successful MPI_Init*: libmpi's aborts become deaths the others notice, and its
 * spurious "Send error after request freed" abort is dropped (in every rank, Python ones too:
 * dpmpi's Python guard hooks them again with its own copy when a dpmpi communicator is made);
 * its late-message filter installed (above); then bind the exit path to this libmpi and
 * COMM_WORLD. */
static void arm(void) {
    dpmpi_hook_mpi_abort();
    dpmpi_fatal_deadline_from_env(); /* (a process stuck in libmpi's SIGSEGV handler hung the job) */
    install_late_filter();
    if (disabled || armed) return;
    void *h = libmpi();
    /* A program's own reference to MPI_COMM_WORLD may have moved the object into the program
     * (a copy relocation): the global lookup finds the copy that libmpi itself uses. */
    void *world = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_world");
    if (!world && h) world = dlsym(h, "ompi_mpi_comm_world");
    fn_size size = h ? (fn_size)dlsym(h, "MPI_Comm_size") : NULL;
    if (!world || !size) {
        fprintf(stderr, "dpmpi: the exit guard found no Open MPI libmpi in this process; it only records the status\n");
        return;
    }
    int n = 1;
    size(world, &n);
    double timeout = 2.0 + 0.002 * n;
    const char *t = getenv("DPMPI_FINALIZE_TIMEOUT");
    if (t && *t) {
        char *end;
        double v = strtod(t, &end);
        if (end != t && *end == '\0' && v >= 0) timeout = v;
        else fprintf(stderr, "dpmpi: ignoring DPMPI_FINALIZE_TIMEOUT=%s (not a number of seconds >= 0)\n", t);
    }
    if (spawned(h)) {
        dpmpi_exit_set_record(records_wanted(), -1); /* spawned: no rank of the job */
        n = 2; /* it has peers (its parents) even alone in its MPI_COMM_WORLD */
    }
    if (dpmpi_exit_set_mpi(libmpi_path, n > 1 ? world : NULL, 1, timeout) < 0) return;
    armed = 1;
}

/* Under dpmpi-run, tell it that this rank's MPI_Init returned (dpmpi/init_loss.py: a rank that
 * dies before that leaves the others inside MPI_Init for ever, and dpmpi-run ends the job). Not
 * in a process a repair spawned (its rank numbers are another job's). One write(2): no stdio. */
static void announce_init(void) {
    if (!records_wanted() || spawned(libmpi())) return;
    char line[48];
    int n = snprintf(line, sizeof line, "[dpmpi-init] %d\n", world_rank());
    if (n > 0 && write(2, line, (size_t)n) < 0) { /* nothing to do: dpmpi-run then cannot tell */ }
}

EXPORT int MPI_Init(int *argc, char ***argv) {
    fn_init f = (fn_init)real("PMPI_Init");
    if (!f) return 16; /* MPI_ERR_OTHER */
    dpmpi_hook_revoke(); /* (a death during MPI_Init: the others must not segfault in it) */
    int rc = f(argc, argv);
    if (rc == 0) {
        announce_init();
        arm();
    }
    return rc;
}

EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    fn_init_thread f = (fn_init_thread)real("PMPI_Init_thread");
    if (!f) return 16;
    dpmpi_hook_revoke();
    int rc = f(argc, argv, required, provided);
    if (rc == 0) {
        announce_init();
        arm();
    }
    return rc;
}

/* ---- a shrink is a repair: the ranks it dropped were repaired around (for the exit code) ---- */
typedef int (*fn_shrink)(void *, void **);
typedef int (*fn_comm_group)(void *, void **);
typedef int (*fn_group_diff)(void *, void *, void **);
typedef int (*fn_group_size)(void *, int *);
typedef int (*fn_translate)(void *, int, const int *, void *, int *);
typedef int (*fn_group_free)(void **);

static void note_dropped(void *old, void *new) {
    fn_comm_group comm_group = (fn_comm_group)real("PMPI_Comm_group");
    fn_group_diff difference = (fn_group_diff)real("PMPI_Group_difference");
    fn_group_size group_size = (fn_group_size)real("PMPI_Group_size");
    fn_translate translate = (fn_translate)real("PMPI_Group_translate_ranks");
    fn_group_free group_free = (fn_group_free)real("PMPI_Group_free");
    void *world = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_world");
    if (!comm_group || !difference || !group_size || !translate || !group_free || !world) return;
    void *og = NULL, *ng = NULL, *dg = NULL, *wg = NULL;
    int k = 0;
    if (comm_group(old, &og) == 0 && comm_group(new, &ng) == 0 && comm_group(world, &wg) == 0 &&
        difference(og, ng, &dg) == 0 && group_size(dg, &k) == 0 && k > 0) {
        int *in = calloc((size_t)k, sizeof *in), *out = calloc((size_t)k, sizeof *out);
        if (in && out) {
            for (int i = 0; i < k; i++) in[i] = i;
            if (translate(dg, k, in, wg, out) == 0)
                for (int i = 0; i < k; i++)
                    if (out[i] >= 0) dpmpi_exit_add_recovered(out[i]); /* (MPI_UNDEFINED < 0: not of this world) */
        }
        free(in);
        free(out);
    }
    void **groups[] = {&og, &ng, &dg, &wg};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        if (*groups[i]) group_free(groups[i]);
}

EXPORT int MPIX_Comm_shrink(void *comm, void **newcomm) {
    fn_shrink f = (fn_shrink)real("PMPIX_Comm_shrink");
    if (!f) return 16;
    int rc = f(comm, newcomm);
    if (rc == 0 && armed && !disabled) note_dropped(comm, *newcomm);
    return rc;
}

/* ---- processes started by MPI_Comm_spawn get the guard too ----
 * Open MPI's spawn does not pass on the environment dpmpi-run gave the ranks; the info key
 * PMIX_ENVAR (NAME=VALUE lines) does. A spawned process's record names no rank of the job
 * (its MPI_COMM_WORLD rank is in the spawned job): it is written with rank -1, which dpmpi-run
 * does not count; its guard still turns a failure into a death the others notice. */
typedef int (*fn_spawn)(const char *, char **, int, void *, int, void *, void **, int *);
typedef int (*fn_info_new)(void **);
typedef int (*fn_info_dup)(void *, void **);
typedef int (*fn_info_valuelen)(void *, const char *, int *, int *);
typedef int (*fn_info_set)(void *, const char *, const char *);
typedef int (*fn_info_free)(void **);

static void *spawn_info(void *info) {
    fn_info_new create = (fn_info_new)real("PMPI_Info_create");
    fn_info_dup dup = (fn_info_dup)real("PMPI_Info_dup");
    fn_info_valuelen valuelen = (fn_info_valuelen)real("PMPI_Info_get_valuelen");
    fn_info_set set = (fn_info_set)real("PMPI_Info_set");
    void *null = dlsym(RTLD_DEFAULT, "ompi_mpi_info_null");
    const char *preload = getenv("LD_PRELOAD"), *status = getenv("DPMPI_STATUS");
    if (!create || !dup || !valuelen || !set || !null || !preload) return NULL;
    int len = 0, flag = 0;
    if (info != null && valuelen(info, "PMIX_ENVAR", &len, &flag) == 0 && flag) return NULL; /* the caller's own */
    void *mine = NULL;
    if ((info == null ? create(&mine) : dup(info, &mine)) != 0) return NULL;
    char value[8192];
    snprintf(value, sizeof value, "LD_PRELOAD=%s\nDPMPI_STATUS=%s", preload, status ? status : "0");
    set(mine, "PMIX_ENVAR", value);
    return mine;
}

EXPORT int MPI_Comm_spawn(const char *command, char **argv, int maxprocs, void *info, int root, void *comm,
                          void **intercomm, int *errcodes) {
    fn_spawn f = (fn_spawn)real("PMPI_Comm_spawn");
    if (!f) return 16;
    void *mine = armed && !disabled ? spawn_info(info) : NULL;
    int rc = f(command, argv, maxprocs, mine ? mine : info, root, comm, intercomm, errcodes);
    if (mine) {
        fn_info_free info_free = (fn_info_free)real("PMPI_Info_free");
        if (info_free) info_free(&mine);
    }
    return rc;
}

/* ---- _exit: skips the exit handlers, so the guard acts here ----
 * (a shell's `exit 4`, a C program's _exit(3); Python's os._exit in a rank whose dpmpi guard
 * stood this one down only passes through) */
EXPORT void _exit(int status) {
    if (!disabled) dpmpi_exit_now(status);
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

EXPORT void _Exit(int status) { _exit(status); }

EXPORT int MPI_Finalize(void) {
    if (armed && !disabled) return dpmpi_exit_finalize();
    fn_void f = (fn_void)real("PMPI_Finalize");
    return f ? f() : 16;
}
