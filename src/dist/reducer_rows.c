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
    if (t->spec.ndim != 2 || t->local->device != MG_DEVICE_CPU) return false;
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
        else memcpy(g->data + lo * in, theirs + lo * in, (size_t)((hi - lo) * in) * sizeof(float));
    }
    int after = mg_comm_barrier(c); /* nobody writes its rows before all copied them */
    return rc == MG_OK ? after : rc;
}
