/* The e2e recovery bench's setup written with Fenix (Sandia's C resilience library: spare ranks,
 * longjmp back to Fenix_Init after a failure, synchronous in-memory snapshots with a partner),
 * to set dpmpi's figures beside Fenix's on the same machine. Built by bench/fenix_e2e.py against
 * a Fenix checkout the user provides (dpmpi ships no Fenix code).
 *
 *   mpirun --with-ft ulfm -n A+1 fenix_e2e STATE_MIB STEPS STEP_MS VICTIM KILL_STEP OFFSET_S KILL_FILE PASSES
 *
 * Each active rank holds STATE_MIB of doubles and runs STEPS steps of about STEP_MS: relaxation
 * passes over its state (PASSES of them; 0: calibrated by rank 0 to STEP_MS), then an Allreduce of
 * a residual; after each step the state and the step number are stored and committed (Fenix's
 * in-memory RAID, partner mirroring). Logical rank VICTIM kills itself with SIGKILL OFFSET_S
 * seconds into step KILL_STEP (in its first life only), writing its kill time to KILL_FILE first.
 * One JSON line per event on stdout: "back" (every rank, at the start of its first step after the
 * recovery, with that step), "final" (every rank: its state's checksum, for the bit-for-bit check
 * against a failure-free run). Times are CLOCK_REALTIME seconds. */
#include <fenix.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Everything the program keeps across Fenix's longjmp lives in statics. */
static double *u;
static size_t n;
static int step, steps, passes, victim, kill_step, role, rank, size, recovered, failed_step = -1;
static double step_ms, offset_s;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One relaxation sweep over u[a, b) (in place, left to right). */
static double relax_range(size_t a, size_t b) {
    double r = 0.0;
    if (a < 1) a = 1;
    if (b > n - 1) b = n - 1;
    for (size_t i = a; i < b; i++) {
        double v = 0.25 * u[i - 1] + 0.5 * u[i] + 0.25 * u[i + 1];
        r += fabs(v - u[i]);
        u[i] = v;
    }
    return r;
}

static double relax(void) { return relax_range(1, n - 1); }

#define CHUNK ((size_t)1 << 17) /* 1 MiB of doubles: the kill's time is checked between chunks */

static uint64_t digest(void) {
    uint64_t h = 1469598103934665603ULL;
    const unsigned char *p = (const unsigned char *)u;
    for (size_t i = 0; i < n * sizeof(double); i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ULL;
    }
    return h;
}

/* The victim's end: its kill time and offset into the step go to KILL_FILE (a file, not stdout:
 * mpirun's forwarding of a killed process's last output is not reliable), then SIGKILL. At the
 * latest at the end of the step's compute, if the step is shorter than the offset. */
static const char *kill_file;

static void die(double t0) {
    double t = now();
    FILE *f = fopen(kill_file, "w");
    if (f) {
        fprintf(f, "{\"event\": \"kill\", \"rank\": %d, \"step\": %d, \"time\": %.6f, \"offset\": %.6f}\n", rank,
                step, t, t - t0);
        fclose(f);
    }
    raise(SIGKILL);
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: fenix_e2e STATE_MIB STEPS STEP_MS VICTIM KILL_STEP OFFSET_S KILL_FILE PASSES\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    n = (size_t)(atof(argv[1]) * 1048576.0 / sizeof(double));
    steps = atoi(argv[2]);
    step_ms = atof(argv[3]);
    victim = atoi(argv[4]);
    kill_step = atoi(argv[5]);
    offset_s = atof(argv[6]);
    kill_file = argv[7];
    passes = atoi(argv[8]); /* 0: calibrate (rank 0 times one sweep) */
    u = malloc(n * sizeof(double));
    MPI_Comm world, comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &world);
    int error = 0;
    Fenix_Init(&role, world, &comm, &argc, &argv, 1, 0, MPI_INFO_NULL, &error);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    Fenix_Data_group_create(0, comm, 0, 2, FENIX_DATA_POLICY_IN_MEMORY_RAID, (int[]){1, size / 2}, &error);
    if (role == FENIX_ROLE_INITIAL_RANK) {
        for (size_t i = 0; i < n; i++) u[i] = (double)((i * 7 + (size_t)rank * 13) % 1000) / 1000.0;
        step = 0;
        Fenix_Data_member_create(0, 1, u, (int)n, MPI_DOUBLE);
        Fenix_Data_member_create(0, 2, &step, 1, MPI_INT);
        /* calibrate: passes per step so that a step lasts about step_ms */
        if (passes <= 0) {
            double *saved = malloc(n * sizeof(double)), t = now();
            memcpy(saved, u, n * sizeof(double));
            relax();
            double one = now() - t;
            memcpy(u, saved, n * sizeof(double));
            free(saved);
            passes = (int)(step_ms / 1e3 / (one > 1e-6 ? one : 1e-6) + 0.5);
            if (passes < 1) passes = 1;
        }
        MPI_Bcast(&passes, 1, MPI_INT, 0, comm);
        Fenix_Data_member_store(0, 1, FENIX_DATA_SUBSET_FULL);
        Fenix_Data_member_store(0, 2, FENIX_DATA_SUBSET_FULL);
        Fenix_Data_commit(0, NULL);
    } else {
        int flag = 0;
        failed_step = step; /* a survivor's step when the failure reached it (the victim's own is lost) */
        MPI_Allreduce(MPI_IN_PLACE, &failed_step, 1, MPI_INT, MPI_MAX, comm);
        MPI_Allreduce(MPI_IN_PLACE, &passes, 1, MPI_INT, MPI_MAX, comm);
        Fenix_Data_member_restore(0, 1, u, (int)n, FENIX_DATA_SNAPSHOT_LATEST, NULL);
        Fenix_Data_member_restore(0, 2, &step, 1, FENIX_DATA_SNAPSHOT_LATEST, NULL);
        Fenix_Data_member_attr_set(0, 1, FENIX_DATA_MEMBER_ATTRIBUTE_BUFFER, u, &flag);
        Fenix_Data_member_attr_set(0, 2, FENIX_DATA_MEMBER_ATTRIBUTE_BUFFER, &step, &flag);
        recovered = 1;
    }
    while (step < steps) {
        if (recovered) {
            printf("{\"event\": \"back\", \"rank\": %d, \"step\": %d, \"time\": %.6f, \"failed_step\": %d}\n", rank, step,
                   now(), failed_step);
            fflush(stdout);
            recovered = 0;
        }
        double t0 = now(), r = 0.0;
        int dies = rank == victim && role == FENIX_ROLE_INITIAL_RANK && step == kill_step;
        for (int p = 0; p < passes; p++) {
            for (size_t a = 1; a < n - 1; a += CHUNK) {
                int last = p == passes - 1 && a + CHUNK >= n - 1;
                if (dies && (now() - t0 >= offset_s || last)) die(t0);
                r += relax_range(a, a + CHUNK);
            }
        }
        MPI_Allreduce(MPI_IN_PLACE, &r, 1, MPI_DOUBLE, MPI_SUM, comm);
        step++;
        Fenix_Data_member_store(0, 1, FENIX_DATA_SUBSET_FULL);
        Fenix_Data_member_store(0, 2, FENIX_DATA_SUBSET_FULL);
        Fenix_Data_commit(0, NULL);
    }
    printf("{\"event\": \"final\", \"rank\": %d, \"digest\": \"%016llx\", \"passes\": %d}\n", rank,
           (unsigned long long)digest(), passes);
    fflush(stdout);
    Fenix_Finalize();
    MPI_Finalize();
    return 0;
}
