/* reducer_rows.c: row slices of split data-parallel weight gradients (see
 * reducer_rows.h). */
#include "dist/reducer_rows.h"

#include <string.h>

#include "backend/backend.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "status.h"

void mg_rows_slice(int64_t rows, int k, int r, int64_t *lo, int64_t *hi) {
    *lo = rows * r / k;
    *hi = rows * (r + 1) / k;
}

/* t (B, F) on the CPU, its batch dim sharded over mesh dim d, whole elsewhere. */
static bool batch_rows(const mg_dtensor *t, int d) {
    const mg_mesh *mesh = t->spec.mesh;
    if (t->spec.ndim != 2 || !mg_tensor_on_host(t->local)) return false;
    for (int m = 0; m < mesh->ndim; m++) {
        mg_placement p = t->spec.p[m];
        if (m == d ? p.kind != MG_PLACE_SHARD || p.dim != 0
                   : mesh->shape[m] > 1 && p.kind != MG_PLACE_REPLICATE)
            return false;
    }
    return true;
}

int mg_rows_dim(const mg_dtensor *w, const mg_dtensor *dy, const mg_dtensor *x) {
    if (w->spec.ndim != 2) return -1;
    const mg_mesh *mesh = w->spec.mesh;
    int d = -1;
    for (int m = 0; m < mesh->ndim; m++) {
        if (mesh->shape[m] == 1) continue;
        if (w->spec.p[m].kind != MG_PLACE_REPLICATE) return -1; /* the weight whole */
        if (x->spec.p[m].kind == MG_PLACE_SHARD) {
            if (d >= 0) return -1; /* the batch split over one mesh dim only */
            d = m;
        }
    }
    return d >= 0 && batch_rows(x, d) && batch_rows(dy, d) ? d : -1;
}

/* This rank's batch rows of t (B, F) into the whole-batch staging copy. */
static void stage(float *whole, const mg_dtensor *t) {
    if (mg_tensor_is_meta(t->local)) return;
    int64_t shape[MG_MAX_DIMS], off[MG_MAX_DIMS];
    mg_spec_local(&t->spec, NULL, shape, off);
    memcpy(whole + off[0] * shape[1], t->local->data, (size_t)(shape[0] * shape[1]) * sizeof(float));
}

int mg_rows_compute(const mg_dtensor *dy, const mg_dtensor *x, mg_dtensor *w, int dim, float beta) {
    mg_comm *c = w->spec.mesh->dim_comm[dim];
    int64_t b = x->spec.shape[0], o = w->spec.shape[0], in = w->spec.shape[1];
    /* dy (B, O) then x (B, I), the whole batch, one copy for the comm's ranks */
    float *whole = mg_comm_shared_scratch(c, b * (o + in));
    if (!whole)
        return mg_last_code() ? mg_last_code()
                              : mg_error(MG_ESTATE, "backward: no shared memory for the weight "
                                                    "gradient of a split parameter");
    stage(whole, dy);
    stage(whole + b * o, x);
    int rc = mg_comm_barrier(c); /* every rank's rows are in */
    if (rc != MG_OK) return rc;
    int64_t lo, hi;
    mg_rows_slice(o, c->size, c->rank, &lo, &hi);
    mg_tensor *g = w->grad->local;
    mg_backend *be = mg_backend_of(g);
    /* dW[lo:hi, :] (+)= dy[:, lo:hi]^T x over the whole batch */
    if (hi > lo && b > 0)
        be->iface->gemm(be->context, true, false, hi - lo, in, b, 1.0f, whole + lo, o, whole + b * o,
                        in, beta, g->data + lo * in, in);
    else if (hi > lo && beta == 0.0f)
        memset(g->data + lo * in, 0, (size_t)((hi - lo) * in) * sizeof(float));
    return MG_OK;
}

int mg_rows_gather(mg_dtensor *w, int dim) {
    mg_comm *c = w->spec.mesh->dim_comm[dim];
    mg_tensor *g = w->grad->local;
    int64_t o = w->spec.shape[0], in = w->spec.shape[1];
    int rc = mg_comm_barrier(c); /* every rank's rows are final */
    if (rc != MG_OK) return rc;
    for (int q = 0; q < c->size && rc == MG_OK; q++) {
        if (q == c->rank) continue;
        const float *theirs = mg_comm_shared_peer(c, g->data, g->numel, q);
        int64_t lo, hi;
        mg_rows_slice(o, c->size, q, &lo, &hi);
        if (!theirs) rc = mg_error(MG_ESTATE, "gradient rows: a buffer left shared memory");
        else if (!mg_tensor_is_meta(g)) memcpy(g->data + lo * in, theirs + lo * in, (size_t)((hi - lo) * in) * sizeof(float));
    }
    int after = mg_comm_barrier(c); /* nobody writes its rows before all copied them */
    return rc == MG_OK ? after : rc;
}

/* On mesh dim m, the local product of dy and x is the block of `at` there. */
static bool local_block(const mg_placement at, const mg_placement a, const mg_placement b, int nd) {
    bool a_whole = a.kind == MG_PLACE_REPLICATE, b_whole = b.kind == MG_PLACE_REPLICATE;
    bool a_last = a.kind == MG_PLACE_SHARD && a.dim == nd - 1;
    bool b_last = b.kind == MG_PLACE_SHARD && b.dim == nd - 1;
    switch (at.kind) {
    case MG_PLACE_REPLICATE: return a_whole && b_whole;
    case MG_PLACE_PARTIAL: /* each rank's rows: an addend of the sum */
        return a.kind == MG_PLACE_SHARD && b.kind == MG_PLACE_SHARD && a.dim == b.dim &&
               a.dim < nd - 1;
    case MG_PLACE_SHARD: return at.dim == 0 ? a_last && b_whole : at.dim == 1 && a_whole && b_last;
    }
    return false;
}

int mg_rows_add(const mg_dtensor *dy, const mg_dtensor *x, const mg_spec *at, mg_tensor *buf) {
    int nd = dy->spec.ndim;
    if (nd < 2 || x->spec.ndim != nd || at->ndim != 2 || buf->ndim != 2 ||
        dy->local->device != buf->device || x->local->device != buf->device ||
        !mg_shape_equal(nd - 1, dy->spec.shape, nd - 1, x->spec.shape))
        return 0;
    const mg_mesh *mesh = at->mesh;
    for (int m = 0; m < mesh->ndim; m++)
        if (mesh->shape[m] > 1 && !local_block(at->p[m], dy->spec.p[m], x->spec.p[m], nd)) return 0;
    const mg_tensor *a = dy->local, *b = x->local;
    int64_t o = a->shape[nd - 1], in = b->shape[nd - 1];
    int64_t rows = o > 0 ? a->numel / o : 0;
    if (o != buf->shape[0] || in != buf->shape[1] || (in > 0 && rows != b->numel / in)) return 0;
    if (o > 0 && in > 0 && rows > 0) {
        mg_backend *be = mg_backend_of(buf);
        // buf (O, I) += dy^T (O, rows) x (rows, I)
        be->iface->gemm(be->context, true, false, o, in, rows, 1.0f, a->data, o, b->data, in, 1.0f,
                        buf->data, in);
    }
    return 1;
}
