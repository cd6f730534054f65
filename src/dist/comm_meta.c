/* comm_meta.c: the meta comm, the collectives of a step run on the meta
 * device (backend/meta.c) for `meshgrad plan --estimate`. One process plays
 * one rank of a mesh whose other ranks do not exist: comm.c and comm_p2p.c
 * count each call as the MPI iface's would be counted, then return at once
 * (the meta flag in struct mg_comm), so the bytes and calls are a real run's
 * to the byte. Shared memory (comm.h's alloc_shared, shared_scratch,
 * shared_peer) is meta memory when the comm's ranks would share a node, so
 * the reducer and the optimizer take the paths a one-node run takes: every
 * rank's copy is this rank's, as no data is ever read.
 * Exports mg_comm_meta_new (comm.h). */
#include <stdlib.h>

#include "array.h"
#include "context.h"
#include "dist/comm.h"
#include "status.h"

typedef struct {
    float *p;
    int64_t n;
} region;

typedef struct {
    bool node_local;
    region *shared; /* what alloc_shared handed out, freed with the comm */
    int n_shared, cap_shared;
    float *scratch[2]; /* shared_scratch: two buffers in turn, as the MPI iface's */
    int64_t scratch_n[2];
    int scratch_next;
} meta_ctx;

static mg_device_memory *memory(void) { return &mg_ctx()->memory[MG_DEVICE_META]; }

static int nothing(void) { return MG_OK; }
static int all_reduce(mg_comm *c, float *b, int64_t n, mg_reduce_op op) {
    (void)c, (void)b, (void)n, (void)op;
    return nothing();
}
static int all_gather(mg_comm *c, const float *s, int64_t n, float *r) {
    (void)c, (void)s, (void)n, (void)r;
    return nothing();
}
static int reduce_scatter(mg_comm *c, const float *s, float *r, int64_t n) {
    (void)c, (void)s, (void)r, (void)n;
    return nothing();
}
static int broadcast(mg_comm *c, float *b, int64_t n, int root) {
    (void)c, (void)b, (void)n, (void)root;
    return nothing();
}
static int barrier(mg_comm *c) {
    (void)c;
    return nothing();
}
static int p2p(mg_comm *c, const float *b, int64_t n, int peer, mg_p2p_request *req) {
    (void)c, (void)b, (void)n, (void)peer;
    req->done = 1;
    return MG_OK;
}
static int p2p_recv(mg_comm *c, float *b, int64_t n, int peer, mg_p2p_request *req) {
    return p2p(c, b, n, peer, req);
}
static int p2p_done(mg_comm *c, mg_p2p_request *req) {
    (void)c;
    req->done = 1;
    return MG_OK;
}

static float *alloc_shared(mg_comm *c, int64_t n, bool one) {
    (void)one;
    meta_ctx *x = c->context;
    if (c->size == 1 || !x->node_local || !memory()->alloc) return NULL;
    if (mg_array_grow((void **)&x->shared, &x->cap_shared, x->n_shared + 1, sizeof *x->shared,
                      "meta shared memory") != MG_OK)
        return NULL;
    float *p = memory()->alloc(memory()->ctx, (size_t)n * sizeof(float));
    if (!p) return mg_error_null(MG_ENOMEM, "meta shared memory of %lld floats", (long long)n);
    x->shared[x->n_shared++] = (region){p, n};
    return p;
}

static float *shared_scratch(mg_comm *c, int64_t n) {
    meta_ctx *x = c->context;
    int i = x->scratch_next;
    if (x->scratch_n[i] < n) {
        if (n < 2 * x->scratch_n[i]) n = 2 * x->scratch_n[i];
        float *p = alloc_shared(c, n, true);
        if (!p) return NULL;
        x->scratch[i] = p;
        x->scratch_n[i] = n;
    }
    x->scratch_next = 1 - i;
    return x->scratch[i];
}

static float *shared_peer(mg_comm *c, const float *p, int64_t n, int rank) {
    (void)rank;
    meta_ctx *x = c->context;
    for (int i = 0; i < x->n_shared; i++)
        if (p >= x->shared[i].p && p + n <= x->shared[i].p + x->shared[i].n) return (float *)p;
    return NULL;
}

static void destroy(mg_comm *c) {
    meta_ctx *x = c->context;
    if (!x) return;
    for (int i = 0; i < x->n_shared; i++) memory()->free(memory()->ctx, x->shared[i].p);
    free(x->shared);
    free(x);
    c->context = NULL;
}

static const struct mg_comm_iface meta_iface = {
    .name = "meta",
    .all_reduce = all_reduce,
    .all_gather = all_gather,
    .reduce_scatter = reduce_scatter,
    .all_to_all = all_gather,
    .broadcast = broadcast,
    .barrier = barrier,
    .alloc_shared = alloc_shared,
    .shared_peer = shared_peer,
    .shared_scratch = shared_scratch,
    .destroy = destroy,
    .isend = p2p,
    .irecv = p2p_recv,
    .p2p_test = p2p_done,
    .p2p_wait = p2p_done,
};

mg_comm *mg_comm_meta_new(int size, int rank, bool node_local) {
    mg_comm *c = calloc(1, sizeof *c);
    meta_ctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        return mg_error_null(MG_ENOMEM, "meta comm: out of memory");
    }
    x->node_local = node_local;
    c->iface = &meta_iface;
    c->context = x;
    c->mpi = MPI_COMM_NULL;
    c->size = size;
    c->rank = rank;
    c->meta = true;
    return c;
}
