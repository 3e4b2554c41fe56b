/* A deadline on the fatal-signal handlers that the MPI library installed.
 *
 * Open MPI installs a handler for SIGABRT, SIGBUS, SIGFPE and SIGSEGV (its opal_signal setting)
 * that prints the signal and a backtrace, then raises the signal again. backtrace() is not
 * async-signal-safe: its first call loads libgcc_s (dlopen, malloc), and the unwinder takes the
 * loader's lock. A signal that lands while the thread holds one of those locks leaves the
 * process inside the handler for ever: alive to ULFM, its heartbeat thread still beating, so no
 * one repairs around it and the job hangs (seen in chaos: a Jacobi rank sent SIGSEGV printed the
 * handler's first four lines and no frame; the others waited for it until the 60 s limit).
 *
 * dpmpi_fatal_deadline() puts a handler of its own in front of each such handler found: it sets
 * SIGALRM to its default action (end the process), unblocks it in this thread and arms
 * alarm(seconds), then runs the library's handler. If that returns (it raised the signal again,
 * pending until then), the process ends by that signal as before; if it hangs, SIGALRM ends the
 * process and the others repair around it. It also calls backtrace() once now, so that the
 * handler's own call does not load libgcc_s.
 *
 * After a job's end was agreed with a failure known, MPI_Finalize itself crashed in survivors of
 * programs that made one-sided windows in every step (fiftieth session, bench/strangers/
 * sync_step.py, two ranks killed: about 1 job in 10 here): glibc's "free(): invalid pointer" in a
 * cleanup under opal_finalize_cleanup_domain, or a SIGSEGV on a jump into the heap, in a process
 * whose status 0 dpmpi-run had already recorded. The heap was corrupted earlier, most likely by
 * Open MPI's error path for a window whose creation a death cut short (not proven; a core of that
 * path shows the same abort: ompi_osc_sm_free from ompi_osc_base_select in MPI_Win_allocate).
 * Nothing is left to do at that point: every live process has passed the exit agreement, and the
 * results are out. So from dpmpi_fatal_after_agreed_end(1) (the exit guard's end_mpi, just before
 * MPI_Finalize at a normal exit, only when the agreement knew of a failure) until MPI_Finalize
 * returns, a fatal signal ends the process with _exit(0) and one line saying so, as the Finalize
 * watchdog does for a Finalize that hangs. A crash in a failure-free job's Finalize (at its exit
 * or the program's own) keeps the library's handler, after a status record that says so (before
 * the fifty-second session dpmpi-run counted that process as completed at its exit, exit code 0
 * whatever the crash, and as "killed by a signal" in a C program's own MPI_Finalize:
 * dpmpi_fatal_record_finalize_crash).
 *
 * Owner: the thread that initialised MPI calls it, once per copy of this code (the preloaded
 * guard at MPI_Init, the Python module at its first dpmpi communicator: the second copy wraps
 * the first's handler, harmless); the saved actions are written before the new handler is
 * installed and only read afterwards, from a signal handler. Nothing here is ever freed. */
#define _GNU_SOURCE
#include <execinfo.h>
#include <stdint.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpmpi_c.h"
#include "dpmpi_util.h"

static const int fatal_signals[] = {SIGABRT, SIGBUS, SIGFPE, SIGSEGV, SIGILL};
#define N_FATAL (sizeof fatal_signals / sizeof fatal_signals[0])
static struct sigaction saved[N_FATAL];
static volatile sig_atomic_t wrapped[N_FATAL];
static unsigned deadline_s;
static volatile sig_atomic_t armed;

/* Written by dpmpi_fatal_after_agreed_end (the exit guard, around MPI_Finalize at a normal exit);
 * read only by in_front. */
static volatile sig_atomic_t after_agreed_end;

void dpmpi_fatal_after_agreed_end(int on) { after_agreed_end = on != 0; }

/* Written by dpmpi_fatal_record_finalize_crash (the exit guard, around MPI_Finalize at a normal
 * exit with no failure known: the process's status record, with status 0, is out); read only by
 * in_front. Not NULL: a fatal signal first writes a status record that replaces it (dpmpi-run
 * keeps a process's last), then runs the library's handler as before. */
static const char *volatile crash_record_head;

void dpmpi_fatal_record_finalize_crash(const char *head) { crash_record_head = head; }

static size_t sig_digits(int sig, char num[2]) {
    size_t k = 0;
    if (sig >= 10) num[k++] = (char)('0' + sig / 10 % 10);
    num[k++] = (char)('0' + sig % 10);
    return k;
}

static void write_crash_record(const char *head, int sig) { /* (async-signal-safe: write only) */
    static const char mid[] = ", \"cause\": \"MPI_Finalize crashed (signal ";
    static const char tail[] = ")\"}\n";
    char num[2];
    size_t k = sig_digits(sig, num);
    size_t n = 0;
    while (head[n]) n++;
    dpmpi_write_all(2, head, n);
    dpmpi_write_all(2, num, k);
    dpmpi_write_all(2, mid, sizeof mid - 1);
    dpmpi_write_all(2, num, k);
    dpmpi_write_all(2, tail, sizeof tail - 1);
}

static void end_quietly(int sig) { /* (async-signal-safe: write and _exit only) */
    static const char head[] = "dpmpi: MPI_Finalize crashed (signal ";
    static const char tail[] = ") after every live process had agreed to end, a failure known; "
                               "ending this process without it, exit status 0\n";
    char num[2];
    size_t k = sig_digits(sig, num);
    dpmpi_write_all(2, head, sizeof head - 1);
    dpmpi_write_all(2, num, k);
    dpmpi_write_all(2, tail, sizeof tail - 1);
    _exit(0);
}

static void in_front(int sig, siginfo_t *info, void *ctx) {
    if (after_agreed_end) end_quietly(sig);
    const char *record = crash_record_head;
    if (record) {
        crash_record_head = NULL; /* (once: the library's handler raises the signal again) */
        write_crash_record(record, sig);
    }
    size_t i = 0;
    while (i < N_FATAL && fatal_signals[i] != sig) i++;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGALRM, &dfl, NULL);
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    sigprocmask(SIG_UNBLOCK, &alrm, NULL);
    if (!armed) { /* once: a handler that returns on a fault that recurs (the same instruction) must
                   * not push the deadline back at every entry */
        armed = 1;
        alarm(deadline_s);
    }
    if (i == N_FATAL || !wrapped[i]) { /* (not reached: installed only over a saved handler) */
        sigaction(sig, &dfl, NULL);
        raise(sig);
        return;
    }
    const struct sigaction *prev = &saved[i];
    if (prev->sa_flags & SA_SIGINFO) prev->sa_sigaction(sig, info, ctx);
    else prev->sa_handler(sig);
}

int dpmpi_fatal_deadline(unsigned seconds) {
    if (seconds == 0) return 0;
    const char *delay = getenv("OMPI_MCA_opal_abort_delay"); /* (a user waiting to attach a debugger) */
    if (delay && *delay && strcmp(delay, "0") != 0) return 0;
    deadline_s = seconds;
    void *frame[1];
    (void)backtrace(frame, 1);
    int n = 0;
    for (size_t i = 0; i < N_FATAL; i++) {
        struct sigaction cur;
        if (wrapped[i] || sigaction(fatal_signals[i], NULL, &cur) != 0) continue;
        int has_handler = (cur.sa_flags & SA_SIGINFO) ? cur.sa_sigaction != NULL
                                                      : (cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN);
        if (!has_handler) continue;
        saved[i] = cur;
        wrapped[i] = 1;
        struct sigaction mine = cur;
        mine.sa_flags |= SA_SIGINFO;
        mine.sa_sigaction = in_front;
        if (sigaction(fatal_signals[i], &mine, NULL) == 0) n++;
        else wrapped[i] = 0;
    }
    return n;
}

int dpmpi_fatal_deadline_from_env(void) {
    const char *v = getenv("DPMPI_FATAL_DEADLINE");
    long seconds = 5;
    if (v && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (end != v && *end == '\0' && n >= 0 && n <= 3600) seconds = n;
    }
    return dpmpi_fatal_deadline((unsigned)seconds);
}
