/* Late messages from a dead peer: drop the ones that Open MPI 5.0.11's ob1 would apply to a request
 * it has already given up, instead of letting them corrupt its free lists.
 *
 * The defect (Open MPI, not dpmpi; seen here as ~1 job in 30 of a kill loop hanging or a survivor
 * segfaulting after a recovery): when a peer fails, ULFM completes each pending send to it in
 * error by cancelling it (mca_pml_ob1_send_request_cancel). For a large send (RGET: the peer reads
 * the data straight from this process and answers with a FIN message naming this side's RDMA
 * fragment) the cancel returns that fragment to ob1's free list at once. A FIN the peer wrote into
 * this process's shared-memory queue just before it died is still handled afterwards, by whichever
 * thread polls the queue next: it completes the fragment again, so the fragment goes back to the
 * free list twice (or completes the unrelated send that took it meanwhile). Two later sends then
 * share one fragment: one of them never completes although its receiver has the data (the hangs),
 * or a free list hands out a request in use (the segfaults in mca_pml_ob1_send_request_start_rdma /
 * _schedule_once). The same holds for the other control messages that name a request (ACK, PUT
 * for a send; FRAG for a receive) when the request was completed in error by such a cancel.
 *
 * What this does: after MPI_Init it replaces ob1's handlers for those four message types in the
 * BTLs' table of handlers (mca_btl_base_active_message_trigger, read by every BTL at each message;
 * and in ob1's later registrations, through mca_bml.bml_register) with filters that drop a message when the request it names is already complete with an error
 * (it was given up: nothing may touch it any more), or, for a FIN, when it came through the same
 * BTL module as the fragment's transfer but from another peer (the fragment was reused).
 * Everything else goes to ob1's own handler unchanged. Messages seen and dropped are counted
 * (dpmpi_late_seen, _dropped).
 *
 * This reads Open MPI's internal structures, so it is installed only for the Open MPI it was
 * written against (library version string "Open MPI v5.0.11", dpmpi's embedded MPI) and only
 * when each assumption checks out at install time: the handlers found in the table are ob1's
 * exported ones, and a request completed on MPI_COMM_SELF shows its tag and completion where
 * this file expects them. Otherwise nothing is changed and the reason is returned.
 *
 * Owner and lifetime: installed once per process, by the thread that initialised MPI: by
 * dpmpi-run's preloaded exit guard (dpmpi_preload.c) right after MPI_Init, in every rank; where
 * there is none (plain mpirun), by dpmpi/_guard.py's filter_late_messages when the first dpmpi
 * communicator is made. The table entries and mca_bml.bml_register are written with
 * pointer-sized aligned stores that the BTLs' polling threads read atomically. The filters run
 * in whatever thread polls a BTL, hold no lock and touch only the message and the request or
 * fragment it names (which ob1 never frees: its free lists keep their memory until
 * MPI_Finalize). Never uninstalled: after MPI_Finalize no BTL polls. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "dpmpi_c.h"
#include "dpmpi_mpi.h"

/* ---- Open MPI 5.0.11 (x86_64 and aarch64 LP64, no heterogeneous or debug build) ---- */
#define TAG_MAX 255                 /* MCA_BTL_TAG_MAX: entries in the handlers' table */
/* mca_btl_base_receive_descriptor_t: endpoint, then the segments (whose first field is the address) */
#define DESC_ENDPOINT 0
#define DESC_SEGMENTS 8
/* ob1 headers: 2-byte common header, then 8-byte aligned fields */
#define FIN_FRAG 16                 /* mca_pml_ob1_fin_hdr_t.hdr_frag */
#define ACK_SRC_REQ 8               /* mca_pml_ob1_ack_hdr_t.hdr_src_req: the send request */
#define PUT_REQ 8                   /* mca_pml_ob1_rdma_hdr_t.hdr_req: the send request */
#define FRAG_DST_REQ 24             /* mca_pml_ob1_frag_hdr_t.hdr_dst_req: the receive request */
/* mca_pml_ob1_rdma_frag_t (offsets checked against start_rdma's and the FIN handler's code) */
#define RFRAG_BML 0x38              /* rdma_bml: mca_bml_base_btl_t *: its btl module at 8, endpoint at 16 */
#define BML_BTL 8
#define BML_ENDPOINT 16
#define RFRAG_REQ 0xa8              /* rdma_req */
/* ompi_request_t: req_status at 64 (MPI_SOURCE, MPI_TAG, MPI_ERROR, ...), req_complete at 88
 * (1: REQUEST_COMPLETED); checked at install on a real request */
#define REQ_TAG 68
#define REQ_ERROR 72
#define REQ_COMPLETE 88

typedef void (*am_fn)(void *btl, const void *desc);
typedef struct {
    am_fn cbfunc;
    void *cbdata;
} am_entry;

enum { K_FIN, K_ACK, K_PUT, K_FRAG, K_N };
static const char *const handler_names[K_N] = {
    "mca_pml_ob1_recv_frag_callback_fin", "mca_pml_ob1_recv_frag_callback_ack",
    "mca_pml_ob1_recv_frag_callback_put", "mca_pml_ob1_recv_frag_callback_frag"};

static am_fn orig[K_N];

/* ob1 registers its handlers again (mca_bml.bml_register) whenever processes are added: a spawn,
 * a connection to another job, or lazily at the first message to a peer in a large job
 * (mpi_add_procs_cutoff). Each registration goes through this wrapper, which puts the filter in
 * place of the handler it wraps. mca_bml_base_module_t: bml_register is its 8th pointer. */
#define BML_REGISTER 0x38
typedef int (*register_fn)(uint8_t tag, am_fn cbfunc, void *cbdata);
static register_fn orig_register;
static register_fn *register_at; /* &mca_bml.bml_register */
static am_entry *table_at;
static int tags[K_N];
static atomic_long dropped[K_N], seen[K_N];
static atomic_int installed;

static inline void *field_ptr(const void *base, size_t off) { return *(void *const volatile *)((const char *)base + off); }

/* The first segment's bytes (the ob1 header); NULL when the message is too short for `need`. */
static const char *header(const void *desc, size_t need) {
    const void *seg = field_ptr(desc, DESC_SEGMENTS);
    if (!seg) return NULL;
    const char *addr = field_ptr(seg, 0);
    size_t len = *(const size_t *)((const char *)seg + 8);
    return (addr && len >= need) ? addr : NULL;
}

/* A request ob1 has given up on: complete, with an error (a cancel after its peer failed). */
int dpmpi_late_request_given_up(const void *req) {
    if (!req) return 0;
    void *complete = field_ptr(req, REQ_COMPLETE);
    int err = *(const volatile int *)((const char *)req + REQ_ERROR);
    return complete == (void *)1 && err != 0;
}

/* A FIN is stale when its fragment's request was given up, or when the fragment now belongs to a
 * transfer with another peer than the FIN's sender (it was returned and reused): judged only when
 * the FIN came through the same BTL module as the fragment's transfer, where each peer has one
 * endpoint (a FIN may come back through another module, e.g. another network interface). */
int dpmpi_late_fin_stale(const void *frag, const void *from_btl, const void *from_endpoint) {
    if (!frag) return 0;
    if (dpmpi_late_request_given_up(field_ptr(frag, RFRAG_REQ))) return 1;
    const void *bml = field_ptr(frag, RFRAG_BML);
    if (!bml || !from_btl || !from_endpoint || field_ptr(bml, BML_BTL) != from_btl) return 0;
    const void *owner = field_ptr(bml, BML_ENDPOINT);
    return owner && owner != from_endpoint;
}

static void on_fin(void *btl, const void *desc) {
    atomic_fetch_add_explicit(&seen[K_FIN], 1, memory_order_relaxed);
    const char *h = header(desc, FIN_FRAG + 8);
    if (h && dpmpi_late_fin_stale(field_ptr(h, FIN_FRAG), btl, field_ptr(desc, DESC_ENDPOINT))) {
        atomic_fetch_add(&dropped[K_FIN], 1);
        return;
    }
    orig[K_FIN](btl, desc);
}

#define REQUEST_FILTER(name, kind, offset)                                      \
    static void name(void *btl, const void *desc) {                             \
        atomic_fetch_add_explicit(&seen[kind], 1, memory_order_relaxed);        \
        const char *h = header(desc, (offset) + 8);                             \
        if (h && dpmpi_late_request_given_up(field_ptr(h, (offset)))) {         \
            atomic_fetch_add(&dropped[kind], 1);                                \
            return;                                                             \
        }                                                                       \
        orig[kind](btl, desc);                                                  \
    }
REQUEST_FILTER(on_ack, K_ACK, ACK_SRC_REQ)
REQUEST_FILTER(on_put, K_PUT, PUT_REQ)
REQUEST_FILTER(on_frag, K_FRAG, FRAG_DST_REQ)

static const am_fn filters[K_N] = {on_fin, on_ack, on_put, on_frag};

static int on_register(uint8_t tag, am_fn cbfunc, void *cbdata) {
    for (int k = 0; k < K_N; k++)
        if (cbfunc == orig[k]) cbfunc = filters[k];
    return orig_register(tag, cbfunc, cbdata);
}

/* Complete a receive on MPI_COMM_SELF and check where its tag, error and completion lie. Its
 * buffers are static: a request that did not complete is never left pending on freed memory. */
static int check_request_layout(const dpmpi_mpi_api *mpi, void *comm_self, void *byte) {
    const int tag = 0x5eed;
    static char in, out;
    in = 0;
    out = 7;
    void *rreq = NULL, *sreq = NULL;
    if (mpi->irecv(&in, 1, byte, 0, tag, comm_self, &rreq) != 0 || !rreq) return -20;
    int ok = field_ptr(rreq, REQ_COMPLETE) == NULL;
    if (mpi->isend(&out, 1, byte, 0, tag, comm_self, &sreq) != 0) ok = 0;
    int flag = 0;
    for (int i = 0; i < 1000000 && !flag; i++)
        if (mpi->request_get_status(rreq, &flag, NULL) != 0) break;
    ok = ok && flag && field_ptr(rreq, REQ_COMPLETE) == (void *)1 &&
         *(int *)((char *)rreq + REQ_TAG) == tag && *(int *)((char *)rreq + REQ_ERROR) == 0 && in == 7;
    for (int i = 0, done = 0; i < 1000000 && !done && rreq; i++) mpi->test(&rreq, &done, NULL);
    for (int i = 0, done = 0; i < 1000000 && !done && sreq; i++) mpi->test(&sreq, &done, NULL);
    return ok ? 0 : -21;
}

int dpmpi_late_install(const char *libmpi_path) {
    if (atomic_load(&installed)) return 0;
    const dpmpi_mpi_api *mpi = dpmpi_mpi_open(libmpi_path);
    if (!mpi || !mpi->get_library_version || !mpi->request_get_status || !mpi->comm_self || !mpi->byte_type)
        return -1;
    char version[8192] = {0};
    int len = 0;
    if (mpi->get_library_version(version, &len) != 0 || !strstr(version, "Open MPI v5.0.11")) return -2;
    void *h = dlopen(libmpi_path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) return -3;
    am_entry *table = dlsym(h, "mca_btl_base_active_message_trigger");
    if (!table) return -4;
    int where[K_N];
    for (int k = 0; k < K_N; k++) {
        am_fn fn = (am_fn)dlsym(h, handler_names[k]);
        where[k] = -1;
        for (int t = 0; fn && t < TAG_MAX; t++)
            if (table[t].cbfunc == fn) where[k] = t;
        if (where[k] < 0) return -10 - k; /* ob1 not in use, or not the ob1 expected */
        orig[k] = fn;
    }
    char *bml = dlsym(h, "mca_bml");
    register_fn *reg = bml ? (register_fn *)(bml + BML_REGISTER) : NULL;
    if (!reg || !*reg) return -5;
    int rc = check_request_layout(mpi, mpi->comm_self, mpi->byte_type);
    if (rc != 0) return rc;
    orig_register = *reg;
    register_at = reg;
    table_at = table;
    for (int k = 0; k < K_N; k++) tags[k] = where[k];
    __atomic_store_n(reg, on_register, __ATOMIC_RELEASE);
    for (int k = 0; k < K_N; k++)
        __atomic_store_n(&table[where[k]].cbfunc, filters[k], __ATOMIC_RELEASE);
    atomic_store(&installed, 1);
    return 0;
}

int dpmpi_late_installed(void) { return atomic_load(&installed); }

long dpmpi_late_dropped(int kind) { return (kind >= 0 && kind < K_N) ? atomic_load(&dropped[kind]) : -1; }

long dpmpi_late_seen(int kind) { return (kind >= 0 && kind < K_N) ? atomic_load(&seen[kind]) : -1; }

/* For tests: register ob1's FIN handler again, as ob1 does when processes are added, and say
 * whether the filter is still the one in the table (1), or -1 when not installed. */
int dpmpi_late_reregister_check(void) {
    if (!atomic_load(&installed)) return -1;
    (*register_at)((uint8_t)tags[K_FIN], orig[K_FIN], NULL);
    return table_at[tags[K_FIN]].cbfunc == on_fin;
}
