/* comm_mpi.c: the MPI implementation of the comm iface, for host buffers.
 * One MPI call per collective when the count fits in an int; larger counts are
 * split into pieces of at most the MPI count limit (mg_comm_mpi_max_count,
 * comm.c; all_gather and all_to_all address the strided pieces with a resized
 * datatype, reduce_scatter packs them). A communicator of one rank makes no
 * MPI call. MPI errors come back as MG_ECOMM with MPI's own message.
 * reduce_scatter calls MPI_Reduce_scatter with equal counts rather than
 * MPI_Reduce_scatter_block: same result, and Open MPI 4.1's block variant is
 * far slower.
 * Non-blocking sums (iall_reduce) are rings over point-to-point (comm_ring.h),
 * or one pass over shared memory for buffers from alloc_shared (comm_shm.h).
 * Every comm that sums across ranks is made here, so here the deterministic
 * mode's tree sums (comm_tree.c) are registered with comm.c.
 * Exports: mg_comm_mpi_new. */
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/comm_ring.h"
#include "dist/comm_shm.h"
#include "status.h"

#define MG_MPI_RINGS 8 /* non-blocking sums in flight per comm */

typedef struct {
    int *counts; /* one per rank, for MPI_Reduce_scatter */
    mg_ring rings[MG_MPI_RINGS];
    int64_t rings_started; /* the next sum's ring: rings_started mod MG_MPI_RINGS */
    int64_t ring_id[MG_MPI_RINGS]; /* which sum each ring serves (its rings_started) */
    int tag;
    mg_shm shm; /* set up on the first alloc_shared */
    bool shm_ready;
    float *scratch[2]; /* shared_scratch: two one-copy buffers, handed out in turn */
    int64_t scratch_n[2];
    int scratch_next;
} mpi_ctx;

static int mpi_failed(const mg_comm *c, const char *what, int err) {
    return mg_mpi_failed(err, "%s over %d ranks failed", what, c->size);
}

/* A datatype of m floats whose extent is `stride` floats: one strided piece. */
static int piece_type(int64_t m, int64_t stride, MPI_Datatype *type) {
    MPI_Datatype contig;
    int err = MPI_Type_contiguous((int)m, MPI_FLOAT, &contig);
    if (err != MPI_SUCCESS) return err;
    err = MPI_Type_create_resized(contig, 0, (MPI_Aint)stride * (MPI_Aint)sizeof(float), type);
    MPI_Type_free(&contig);
    if (err != MPI_SUCCESS) return err;
    return MPI_Type_commit(type);
}

static int mpi_all_reduce(mg_comm *c, float *buf, int64_t n, mg_reduce_op op) {
    if (c->size == 1 || n == 0) return MG_OK; /* sum, avg and max of one addend */
    MPI_Op mop = op == MG_REDUCE_MAX ? MPI_MAX : MPI_SUM;
    int64_t most = mg_comm_mpi_max_count();
    for (int64_t o = 0; o < n; o += most) {
        int m = (int)(n - o < most ? n - o : most);
        int err = MPI_Allreduce(MPI_IN_PLACE, buf + o, m, MPI_FLOAT, mop, c->mpi);
        if (err != MPI_SUCCESS) return mpi_failed(c, "all_reduce", err);
    }
    if (op == MG_REDUCE_AVG) {
        float s = 1.0f / (float)c->size;
        for (int64_t i = 0; i < n; i++) buf[i] *= s;
    }
    return MG_OK;
}

static float *mpi_alloc_shared(mg_comm *c, int64_t n, bool one) {
    mpi_ctx *x = c->context;
    int err = MPI_SUCCESS;
    if (c->size == 1) return NULL;
    if (!x->shm_ready) {
        err = mg_shm_init(&x->shm, c->mpi);
        if (err != MPI_SUCCESS) {
            mpi_failed(c, "shared memory set-up", err);
            return NULL;
        }
        x->shm_ready = true;
    }
    float *p = one ? mg_shm_alloc_one(&x->shm, n, &err) : mg_shm_alloc(&x->shm, n, &err);
    if (err != MPI_SUCCESS) mpi_failed(c, "shared window", err);
    return p;
}

/* Non-blocking sums: through shared memory when buf is in a shared window of
 * this comm (comm_shm.h), else as rings (comm_ring.h); counts above the limit
 * are summed blocking. Sums take shm slots and rings in turn, waiting for the
 * previous holder when it is still busy: the same choice on every rank. */
static int mpi_iall_reduce(mg_comm *c, float *buf, int64_t n, mg_comm_request *req) {
    mpi_ctx *x = c->context;
    int64_t offset;
    const mg_shm_buffer *sb = x->shm_ready ? mg_shm_find(&x->shm, buf, n, &offset) : NULL;
    if (sb && sb->one) {
        req->done = 1;
        return mg_error(MG_EINVAL, "iall_reduce: the buffer is one copy shared by every rank "
                                   "(mg_comm_alloc_shared_one); there is nothing to sum");
    }
    if (sb) {
        int err;
        mg_shm_op *op = mg_shm_start(&x->shm, sb, offset, n, &err);
        if (err != MPI_SUCCESS) {
            req->done = 1;
            return mpi_failed(c, "iall_reduce", err);
        }
        req->state = op;
        req->shm = 1;
        req->id = op->id;
        return MG_OK;
    }
    if (c->size == 1 || n == 0 || n > mg_comm_mpi_max_count()) {
        req->done = 1;
        return mpi_all_reduce(c, buf, n, MG_REDUCE_SUM);
    }
    /* rings in turn, like the shm slots: which one (and whether this sum
     * waits for it) is the same on every rank, whatever finished first here */
    int slot = (int)(x->rings_started % MG_MPI_RINGS);
    mg_ring *r = &x->rings[slot];
    if (r->busy) {
        int err = mg_ring_wait(r);
        if (err != MPI_SUCCESS) {
            req->done = 1;
            return mpi_failed(c, "iall_reduce", err);
        }
    }
    x->ring_id[slot] = req->id = x->rings_started++;
    x->tag = (x->tag + 1) % 30000; /* every rank starts them in the same order */
    int err = mg_ring_start(r, c->mpi, buf, n, 100 + x->tag);
    req->state = r;
    if (err != MPI_SUCCESS) {
        req->done = 1;
        r->busy = false;
        return mpi_failed(c, "iall_reduce", err);
    }
    return MG_OK;
}

/* A sum whose shm slot or ring a later sum took was waited for by that one. */
static bool taken_over(const mpi_ctx *x, const mg_comm_request *req) {
    if (req->shm) return ((const mg_shm_op *)req->state)->id != req->id;
    return x->ring_id[(const mg_ring *)req->state - x->rings] != req->id;
}

static int mpi_test(mg_comm *c, mg_comm_request *req) {
    mpi_ctx *x = c->context;
    if (taken_over(x, req)) {
        req->done = 1;
        return MG_OK;
    }
    int err = req->shm ? mg_shm_progress(&x->shm, req->state, &req->done)
                       : mg_ring_progress(req->state, &req->done);
    if (err != MPI_SUCCESS) {
        req->done = 1;
        return mpi_failed(c, "iall_reduce", err);
    }
    return MG_OK;
}

static int mpi_wait(mg_comm *c, mg_comm_request *req) {
    mpi_ctx *x = c->context;
    if (taken_over(x, req)) {
        req->done = 1;
        return MG_OK;
    }
    int err = req->shm ? mg_shm_wait(&x->shm, req->state) : mg_ring_wait(req->state);
    req->done = 1;
    return err == MPI_SUCCESS ? MG_OK : mpi_failed(c, "iall_reduce", err);
}

/* The collectives from send to recv that make no MPI call: nothing to move (n is
 * 0), or one rank (its block copied). 1 when it is one of those (done). */
static int no_call(const mg_comm *c, const float *send, float *recv, int64_t n) {
    if (n > 0 && c->size > 1) return 0;
    if (n > 0 && recv != send) memmove(recv, send, (size_t)n * sizeof(float));
    return 1;
}

/* all_gather (gather, in place as MPI_IN_PLACE when in_place) or all_to_all of
 * blocks of n floats, above the count limit: in pieces of at most that many floats of
 * every block, addressed with a strided datatype (piece_type). */
static int in_pieces(mg_comm *c, const float *send, int64_t n, float *recv, int gather,
                     int in_place) {
    int64_t most = mg_comm_mpi_max_count();
    for (int64_t o = 0; o < n; o += most) {
        int64_t m = n - o < most ? n - o : most;
        MPI_Datatype piece;
        int err = piece_type(m, n, &piece);
        if (err == MPI_SUCCESS) {
            if (gather)
                err = MPI_Allgather(in_place ? MPI_IN_PLACE : send + o, (int)m, MPI_FLOAT,
                                    recv + o, 1, piece, c->mpi);
            else
                err = MPI_Alltoall(send + o, 1, piece, recv + o, 1, piece, c->mpi);
            MPI_Type_free(&piece);
        }
        if (err != MPI_SUCCESS) return mpi_failed(c, gather ? "all_gather" : "all_to_all", err);
    }
    return MG_OK;
}

static int mpi_all_gather(mg_comm *c, const float *send, int64_t n, float *recv) {
    if (no_call(c, send, recv, n)) return MG_OK;
    int in_place = send == recv + (int64_t)c->rank * n;
    if (n <= mg_comm_mpi_max_count()) {
        int err = MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)n, MPI_FLOAT, recv, (int)n,
                                MPI_FLOAT, c->mpi);
        return err == MPI_SUCCESS ? MG_OK : mpi_failed(c, "all_gather", err);
    }
    return in_pieces(c, send, n, recv, 1, in_place);
}

static int mpi_reduce_scatter(mg_comm *c, const float *send, float *recv, int64_t n) {
    if (no_call(c, send, recv, n)) return MG_OK;
    int *counts = ((mpi_ctx *)c->context)->counts;
    if (n <= mg_comm_mpi_max_count()) {
        for (int r = 0; r < c->size; r++) counts[r] = (int)n;
        int err = MPI_Reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, c->mpi);
        return err == MPI_SUCCESS ? MG_OK : mpi_failed(c, "reduce_scatter", err);
    }
    /* pack piece [o, o+m) of every rank's block side by side, then reduce-scatter */
    int64_t k = c->size, step = mg_comm_mpi_max_count();
    float *pack = malloc((size_t)(k * step) * sizeof(float));
    if (!pack)
        return mg_error(MG_ENOMEM, "reduce_scatter: out of memory for a %lld-float staging buffer",
                        (long long)(k * step));
    int status = MG_OK;
    for (int64_t o = 0; o < n && status == MG_OK; o += step) {
        int64_t m = n - o < step ? n - o : step;
        for (int64_t r = 0; r < k; r++)
            memcpy(pack + r * m, send + r * n + o, (size_t)m * sizeof(float));
        for (int r = 0; r < c->size; r++) counts[r] = (int)m;
        int err = MPI_Reduce_scatter(pack, recv + o, counts, MPI_FLOAT, MPI_SUM, c->mpi);
        if (err != MPI_SUCCESS) status = mpi_failed(c, "reduce_scatter", err);
    }
    free(pack);
    return status;
}

static int mpi_all_to_all(mg_comm *c, const float *send, int64_t n, float *recv) {
    if (no_call(c, send, recv, n)) return MG_OK;
    if (n <= mg_comm_mpi_max_count()) {
        int err = MPI_Alltoall(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, c->mpi);
        return err == MPI_SUCCESS ? MG_OK : mpi_failed(c, "all_to_all", err);
    }
    return in_pieces(c, send, n, recv, 0, 0);
}

static int mpi_broadcast(mg_comm *c, float *buf, int64_t n, int root) {
    if (c->size == 1) return MG_OK;
    int64_t most = mg_comm_mpi_max_count();
    for (int64_t o = 0; o < n; o += most) {
        int m = (int)(n - o < most ? n - o : most);
        int err = MPI_Bcast(buf + o, m, MPI_FLOAT, root, c->mpi);
        if (err != MPI_SUCCESS) return mpi_failed(c, "broadcast", err);
    }
    return MG_OK;
}

/* With shared windows, the barrier also hands over what was written to them:
 * stores before it are visible to every rank's loads after it. */
static int mpi_barrier(mg_comm *c) {
    if (c->size == 1) return MG_OK;
    mpi_ctx *x = c->context;
    int err = x->shm_ready ? mg_shm_fence(&x->shm) : MPI_SUCCESS;
    if (err == MPI_SUCCESS) err = MPI_Barrier(c->mpi);
    if (err == MPI_SUCCESS && x->shm_ready) err = mg_shm_fence(&x->shm);
    return err == MPI_SUCCESS ? MG_OK : mpi_failed(c, "barrier", err);
}

static float *mpi_shared_scratch(mg_comm *c, int64_t n) {
    mpi_ctx *x = c->context;
    int i = x->scratch_next;
    if (x->scratch_n[i] < n) { /* the old window stays until the comm is freed */
        if (n < 2 * x->scratch_n[i]) n = 2 * x->scratch_n[i]; /* grow by doubling */
        float *p = mpi_alloc_shared(c, n, true);
        if (!p) return NULL;
        x->scratch[i] = p;
        x->scratch_n[i] = n;
    }
    x->scratch_next = 1 - i;
    return x->scratch[i];
}

static float *mpi_shared_peer(mg_comm *c, const float *p, int64_t n, int rank) {
    mpi_ctx *x = c->context;
    return x->shm_ready ? mg_shm_peer(&x->shm, p, n, rank) : NULL;
}

/* The MPI_Comm belongs to the caller. */
static void mpi_destroy(mg_comm *c) {
    mpi_ctx *x = c->context;
    if (!x) return;
    for (int i = 0; i < MG_MPI_RINGS; i++) mg_ring_free(&x->rings[i]);
    if (x->shm_ready) mg_shm_free(&x->shm);
    free(x->counts);
    free(x);
    c->context = NULL;
}

static const struct mg_comm_iface mpi_iface = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .all_to_all = mpi_all_to_all,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .iall_reduce = mpi_iall_reduce,
    .test = mpi_test,
    .wait = mpi_wait,
    .alloc_shared = mpi_alloc_shared,
    .shared_peer = mpi_shared_peer,
    .shared_scratch = mpi_shared_scratch,
    .destroy = mpi_destroy,
    .isend = mg_comm_mpi_isend, /* comm_p2p.c */
    .irecv = mg_comm_mpi_irecv,
    .p2p_test = mg_comm_mpi_p2p_test,
    .p2p_wait = mg_comm_mpi_p2p_wait,
};

mg_comm *mg_comm_mpi_new(MPI_Comm mpi) {
    if (mpi == MPI_COMM_NULL) return mg_error_null(MG_EINVAL, "mg_comm_mpi_new: MPI_COMM_NULL");
    mg_comm *c = calloc(1, sizeof *c);
    if (!c) return mg_error_null(MG_ENOMEM, "mg_comm_mpi_new: out of memory");
    int err = MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    if (err == MPI_SUCCESS) err = MPI_Comm_rank(mpi, &c->rank);
    if (err == MPI_SUCCESS) err = MPI_Comm_size(mpi, &c->size);
    if (err != MPI_SUCCESS) {
        free(c);
        mg_mpi_failed(err, "mg_comm_mpi_new");
        return NULL;
    }
    mpi_ctx *x = calloc(1, sizeof *x);
    if (x) x->counts = calloc((size_t)c->size, sizeof(int));
    if (x && !x->counts) {
        free(x);
        x = NULL;
    }
    c->context = x;
    if (!c->context) {
        free(c);
        return mg_error_null(MG_ENOMEM, "mg_comm_mpi_new: out of memory");
    }
    c->iface = &mpi_iface;
    c->mpi = mpi;
    mg_comm_tree_start(); /* the deterministic mode's sums (comm.h) */
    return c;
}
