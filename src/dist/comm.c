/* comm.c: what every communicator shares, whatever the iface: the counting
 * wrappers (mg_comm_all_reduce ... mg_comm_barrier count calls and bytes,
 * record the call in the flight recorder (flight.h), then dispatch under the
 * collective watchdog, watchdog.h), the registry that sums counters across
 * communicators, the MG_COMM_DEBUG table, and status agreement over the world.
 * Also what the MPI iface's files (comm_mpi.c, comm_p2p.c) share: the largest
 * count one MPI call is given, and MPI's errors as messages.
 * In the deterministic mode sums go to comm_tree.c instead, through the hook
 * it registers (a meta comm's are counted as they are: it sums nothing).
 * Exports: mg_comm_* (comm.h, mg_comm_on_tree_sum too), mg_coll_bytes, mg_status_agree(_rank),
 * mg_comm_mpi_max_count, mg_comm_mpi_set_max_count, mg_mpi_failed, and the
 * public mg_comm_stats_get / mg_comm_stats_reset / mg_coll_name. */
#include "dist/comm.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "context.h"
#include "dist/comm_info.h"
#include "dist/dist_state.h"
#include "dist/flight.h"
#include "dist/watchdog.h"
#include "tensor.h"
#include "status.h"

static const char *const coll_names[MG_COLL_COUNT] = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier",
    "send", "recv",
};
_Static_assert(MG_COLL_COUNT == 8, "mg_coll_kind changed: update coll_names");

const char *mg_coll_name(mg_coll_kind kind) {
    if ((int)kind < 0 || kind >= MG_COLL_COUNT) return "unknown";
    return coll_names[kind];
}

int64_t mg_coll_bytes(mg_coll_kind kind, int size, int rank, int64_t n, int root) {
    int64_t k = size, b = n * (int64_t)sizeof(float);
    if (k <= 1 || n <= 0) return 0;
    switch (kind) {
    case MG_COLL_ALL_REDUCE: return 2 * (k - 1) * b / k;
    case MG_COLL_ALL_GATHER:
    case MG_COLL_REDUCE_SCATTER:
    case MG_COLL_ALL_TO_ALL: return (k - 1) * b;
    case MG_COLL_BROADCAST: return rank == (root + size - 1) % size ? 0 : b;
    case MG_COLL_SEND: return b;
    default: return 0;
    }
}

/* ---- registry: counters of live comms (the context's `comms`), plus those of
 * comms already freed (`retired`) ---- */

void mg_comm_register(mg_comm *comm) {
    mg_dist_state *c = mg_dist();
    if (!comm) return;
    for (int i = 0; i < c->n_comms; i++)
        if (c->comms[i] == comm) return;
    /* described now, while every member makes it: the flight recorder's
     * ordinal of a communicator is then the same on all of them */
    if (!comm->meta) mg_comm_info_of(comm->mpi);
    if (mg_array_grow((void **)&c->comms, &c->cap_comms, c->n_comms + 1, sizeof *c->comms,
                      "comm registry") != MG_OK)
        return; /* counters of this comm are then not summed; nothing else breaks */
    c->comms[c->n_comms++] = comm;
}

void mg_comm_unregister(mg_comm *comm) {
    mg_dist_state *c = mg_dist();
    for (int i = 0; i < c->n_comms; i++) {
        if (c->comms[i] != comm) continue;
        /* a meta comm's counts were an estimate's, never traffic of this process */
        for (int k = 0; k < MG_COLL_COUNT && !comm->meta; k++) {
            c->retired[k].calls += comm->stats[k].calls;
            c->retired[k].bytes += comm->stats[k].bytes;
        }
        c->comms[i] = c->comms[--c->n_comms];
        return;
    }
}

void mg_comm_stats_get(mg_comm_stats out[MG_COLL_COUNT]) {
    if (!mg_arg_given(out, "mg_comm_stats_get", "out (an array of MG_COLL_COUNT mg_comm_stats)"))
        return;
    mg_dist_state *c = mg_dist();
    for (int k = 0; k < MG_COLL_COUNT; k++) out[k] = c->retired[k];
    for (int i = 0; i < c->n_comms; i++)
        for (int k = 0; k < MG_COLL_COUNT; k++) {
            out[k].calls += c->comms[i]->stats[k].calls;
            out[k].bytes += c->comms[i]->stats[k].bytes;
        }
}

void mg_comm_stats_reset(void) {
    mg_dist_state *c = mg_dist();
    memset(c->retired, 0, sizeof c->retired);
    for (int i = 0; i < c->n_comms; i++) memset(c->comms[i]->stats, 0, sizeof c->comms[i]->stats);
}

/* MPI is initialized and not yet finalized. */
static int mpi_running(void) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized && !finalized;
}

void mg_comm_stats_print(FILE *out) {
    mg_comm_stats s[MG_COLL_COUNT];
    mg_comm_stats_get(s);
    int64_t calls = 0, bytes = 0;
    int rank = 0; /* as mg_rank gives it (world.c, a file above this one) */
    if (mpi_running()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(out, "meshgrad comm stats (rank %d; bytes this rank sent):\n", rank);
    fprintf(out, "  %-15s %12s %16s %12s\n", "collective", "calls", "bytes", "MiB");
    for (int k = 0; k < MG_COLL_COUNT; k++) {
        fprintf(out, "  %-15s %12lld %16lld %12.2f\n", coll_names[k], (long long)s[k].calls,
                (long long)s[k].bytes, (double)s[k].bytes / (1 << 20));
        calls += s[k].calls;
        bytes += s[k].bytes;
    }
    fprintf(out, "  %-15s %12lld %16lld %12.2f\n", "total", (long long)calls, (long long)bytes,
            (double)bytes / (1 << 20));
}

void mg_comm_free(mg_comm *c) {
    if (!c) return;
    mg_comm_unregister(c);
    if (c->iface && c->iface->destroy) c->iface->destroy(c);
    free(c);
}

/* ---- the calls: count, record, arm the watchdog, dispatch, disarm ------------ */

/* Returns the flight record, or MG_FLIGHT_SKIP: the test hook skips the call,
 * or the comm is a meta one (counted, never run). */
static int64_t count(mg_comm *c, mg_coll_kind kind, int64_t n, int root) {
    c->stats[kind].calls++;
    c->stats[kind].bytes += mg_coll_bytes(kind, c->size, c->rank, n, root);
    if (c->meta) return MG_FLIGHT_SKIP;
    int64_t f = mg_flight_post(c->mpi, coll_names[kind], 4 * n, MG_FLIGHT_FLOAT32, -1, 0, true);
    if (f != MG_FLIGHT_SKIP) mg_watchdog_begin_comm(coll_names[kind], c->mpi);
    return f;
}

static int watched(int64_t f, int status) { /* the collective returned: disarm */
    mg_watchdog_end();
    mg_flight_done(f);
    return status;
}

static int bad_count(const char *who, int64_t n) {
    return mg_error(MG_EINVAL, "%s: count %lld is negative", who, (long long)n);
}

/* ---- the deterministic mode's sums: comm_tree.c's, through its hook ---------- */

void mg_comm_on_tree_sum(mg_comm_tree_sum_fn fn) { mg_dist()->comm_tree_sum = fn; }

static int tree_sum(mg_comm *c, const float *send, float *recv, int64_t n, int scatter) {
    mg_comm_tree_sum_fn fn = mg_dist()->comm_tree_sum;
    if (!fn) /* every comm of several ranks registers it as it is made (comm.h) */
        return mg_error(MG_ESTATE, "deterministic sum over %d ranks: the tree sums are not "
                        "registered (mg_comm_tree_start)", c->size);
    return fn(c, send, recv, n, scatter);
}

int mg_comm_all_reduce(mg_comm *c, float *buf, int64_t n, mg_reduce_op op) {
    if (n < 0) return bad_count("all_reduce", n);
    if (op != MG_REDUCE_SUM && op != MG_REDUCE_AVG && op != MG_REDUCE_MAX)
        return mg_error(MG_EINVAL, "all_reduce: unknown reduce op %d", (int)op);
    if (mg_get_deterministic() && op != MG_REDUCE_MAX && c->size > 1 && !c->meta) {
        int rc = tree_sum(c, buf, buf, n, 0);
        if (rc == MG_OK && op == MG_REDUCE_AVG && !c->meta)
            for (int64_t i = 0; i < n; i++) buf[i] /= (float)c->size;
        return rc;
    }
    int64_t f = count(c, MG_COLL_ALL_REDUCE, n, 0);
    if (f == MG_FLIGHT_SKIP) return MG_OK;
    return watched(f, c->iface->all_reduce(c, buf, n, op));
}

int mg_comm_iall_reduce(mg_comm *c, float *buf, int64_t n, mg_comm_request *req) {
    req->done = 1;
    req->mpi = MPI_REQUEST_NULL;
    req->state = NULL;
    req->shm = 0;
    req->flight = -1;
    if (n < 0) return bad_count("iall_reduce", n);
    if (mg_get_deterministic() && c->size > 1 && !c->meta) return tree_sum(c, buf, buf, n, 0);
    if (!c->iface->iall_reduce) { /* blocking, under the watchdog (a meta comm: counted) */
        int64_t f = count(c, MG_COLL_ALL_REDUCE, n, 0);
        if (f == MG_FLIGHT_SKIP) return MG_OK;
        return watched(f, c->iface->all_reduce(c, buf, n, MG_REDUCE_SUM));
    }
    c->stats[MG_COLL_ALL_REDUCE].calls++;
    c->stats[MG_COLL_ALL_REDUCE].bytes += mg_coll_bytes(MG_COLL_ALL_REDUCE, c->size, c->rank, n, 0);
    req->flight = mg_flight_post(c->mpi, coll_names[MG_COLL_ALL_REDUCE], 4 * n, MG_FLIGHT_FLOAT32,
                                 -1, 0, false);
    if (req->flight == MG_FLIGHT_SKIP) return MG_OK;
    req->done = 0;
    int rc = c->iface->iall_reduce(c, buf, n, req);
    if (req->done || rc != MG_OK) mg_flight_done(req->flight);
    return rc;
}

int mg_comm_test(mg_comm *c, mg_comm_request *req) {
    if (req->done) return MG_OK;
    int rc = c->iface->test(c, req);
    if (req->done || rc != MG_OK) mg_flight_done(req->flight);
    return rc;
}

int mg_comm_wait(mg_comm *c, mg_comm_request *req) {
    if (req->done) return MG_OK;
    mg_flight_wait_begin(req->flight);
    mg_watchdog_begin_comm(coll_names[MG_COLL_ALL_REDUCE], c->mpi);
    return watched(req->flight, c->iface->wait(c, req));
}

static float *alloc_shared(mg_comm *c, int64_t n, bool one) {
    mg_clear_error();
    if (!c->iface->alloc_shared || n <= 0) return NULL;
    if (c->meta) return c->iface->alloc_shared(c, n, one);
    int64_t f = mg_flight_post(c->mpi, "alloc_shared", 4 * n, MG_FLIGHT_FLOAT32, -1, 0, true);
    mg_watchdog_begin_comm("alloc_shared", c->mpi); /* collective: a missing rank is reported */
    float *p = c->iface->alloc_shared(c, n, one);
    watched(f, MG_OK);
    return p;
}

float *mg_comm_alloc_shared(mg_comm *c, int64_t n) { return alloc_shared(c, n, false); }
float *mg_comm_alloc_shared_one(mg_comm *c, int64_t n) { return alloc_shared(c, n, true); }

int mg_comm_share_tensor(mg_comm *c, mg_tensor *t, bool one) {
    float *shared = alloc_shared(c, t->numel, one);
    if (!shared) return mg_last_code(); /* MG_OK: none here */
    mg_device_memory *dm = &mg_ctx()->memory[MG_DEVICE_META];
    if (c->meta && t->device == MG_DEVICE_META) { /* no data to move */
        dm->free(dm->ctx, t->data);
        t->data = shared;
        t->flags &= ~(unsigned)MG_TENSOR_OWNS_DATA;
        return 1;
    }
    if (!one || c->rank == 0) memcpy(shared, t->data, (size_t)t->numel * sizeof(float));
    free(t->data);
    t->data = shared;
    t->flags &= ~(unsigned)MG_TENSOR_OWNS_DATA;
    return 1;
}

float *mg_comm_shared_scratch(mg_comm *c, int64_t n) {
    mg_clear_error();
    if (!c->iface->shared_scratch || n <= 0) return NULL;
    if (c->meta) return c->iface->shared_scratch(c, n);
    int64_t f = mg_flight_post(c->mpi, "shared_scratch", 4 * n, MG_FLIGHT_FLOAT32, -1, 0, true);
    mg_watchdog_begin_comm("shared_scratch", c->mpi);
    float *p = c->iface->shared_scratch(c, n);
    watched(f, MG_OK);
    return p;
}

float *mg_comm_shared_peer(mg_comm *c, const float *p, int64_t n, int rank) {
    if (!c->iface->shared_peer || !p || n <= 0) return NULL;
    return c->iface->shared_peer(c, p, n, rank);
}

int mg_comm_all_gather(mg_comm *c, const float *send, int64_t n, float *recv) {
    if (n < 0) return bad_count("all_gather", n);
    int64_t f = count(c, MG_COLL_ALL_GATHER, n, 0);
    if (f == MG_FLIGHT_SKIP) return MG_OK;
    return watched(f, c->iface->all_gather(c, send, n, recv));
}

int mg_comm_reduce_scatter(mg_comm *c, const float *send, float *recv, int64_t n) {
    if (n < 0) return bad_count("reduce_scatter", n);
    if (mg_get_deterministic() && c->size > 1 && !c->meta)
        return tree_sum(c, send, recv, n, 1);
    int64_t f = count(c, MG_COLL_REDUCE_SCATTER, n, 0);
    if (f == MG_FLIGHT_SKIP) return MG_OK;
    return watched(f, c->iface->reduce_scatter(c, send, recv, n));
}

int mg_comm_all_to_all(mg_comm *c, const float *send, int64_t n, float *recv) {
    if (n < 0) return bad_count("all_to_all", n);
    int64_t f = count(c, MG_COLL_ALL_TO_ALL, n, 0);
    if (f == MG_FLIGHT_SKIP) return MG_OK;
    return watched(f, c->iface->all_to_all(c, send, n, recv));
}

int mg_comm_broadcast(mg_comm *c, float *buf, int64_t n, int root) {
    if (n < 0) return bad_count("broadcast", n);
    if (root < 0 || root >= c->size)
        return mg_error(MG_EINVAL, "broadcast: root %d is not a rank of a communicator of %d", root,
                        c->size);
    int64_t f = count(c, MG_COLL_BROADCAST, n, root);
    if (f == MG_FLIGHT_SKIP) return MG_OK;
    return watched(f, c->iface->broadcast(c, buf, n, root));
}

int mg_comm_barrier(mg_comm *c) {
    int64_t f = count(c, MG_COLL_BARRIER, 0, 0);
    if (f == MG_FLIGHT_SKIP) return MG_OK;
    return watched(f, c->iface->barrier(c));
}

/* ---- agreement -------------------------------------------------------------- */

int mg_status_agree_rank(int status, int *first_rank) {
    if (!mpi_running()) {
        if (first_rank) *first_rank = status < 0 ? 0 : -1;
        return status;
    }
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    struct {
        int status, rank;
    } mine = {status, rank}, all = {status, rank};
    int64_t f = mg_flight_post(MPI_COMM_WORLD, "status_agree", 8, MG_FLIGHT_STATUS, -1, 0, true);
    if (f == MG_FLIGHT_SKIP) return status;
    mg_watchdog_begin_comm("status_agree", MPI_COMM_WORLD);
    int err = MPI_Allreduce(&mine, &all, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
    watched(f, MG_OK);
    if (err != MPI_SUCCESS) {
        if (first_rank) *first_rank = -1;
        return mg_mpi_failed(err, "agreeing on a status across ranks failed");
    }
    if (first_rank) *first_rank = all.status < 0 ? all.rank : -1;
    return all.status < 0 ? all.status : MG_OK;
}

int mg_status_agree(int status) { return mg_status_agree_rank(status, NULL); }

/* ---- MPI calls ------------------------------------------------------------------ */

void mg_comm_mpi_set_max_count(int64_t n) {
    mg_dist()->mpi_max_count = (n > 0 && n <= INT_MAX) ? n : 0;
}

int64_t mg_comm_mpi_max_count(void) {
    int64_t n = mg_dist()->mpi_max_count;
    return n > 0 ? n : INT_MAX;
}

int mg_mpi_failed(int err, const char *what, ...) {
    char text[512], s[MPI_MAX_ERROR_STRING];
    int len = 0;
    s[0] = '\0';
    MPI_Error_string(err, s, &len);
    va_list ap;
    va_start(ap, what);
    vsnprintf(text, sizeof text, what, ap);
    va_end(ap);
    return mg_error(MG_ECOMM, "%s: %s", text, s);
}
