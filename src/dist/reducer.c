/* reducer.c: a leaf's gradient from its VJP to its buffer (see reducer.h).
 * State (the context's `reducer`): one record per leaf that has a gradient
 * buffer or a deferred sum, the sum switch, and the buckets of this backward. */
#include "dist/reducer.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "backend/backend.h"
#include "context.h"
#include "dist/comm.h"
#include "dist/dist_state.h"
#include "dist/mesh.h"
#include "dist/redistribute.h"
#include "dist/reducer_buckets.h"
#include "dist/reducer_rows.h"
#include "dist/world.h"
#include "status.h"

typedef struct {
    mg_dtensor *leaf;
    mg_grad_form form;
    unsigned partial; /* LOCAL: the mesh dims (bit m) the buffer is an addend over */
    int dim;          /* ROWS: the mesh dim of the split */
    bool defer;       /* its optimizer sums its data-parallel gradient */
    mg_det_sums *det; /* the deterministic mode's sums (reducer_det.c) */
    int det_use;      /* which use of the leaf this backward's next contribution is */
} leaf_record;

struct mg_reducer {
    leaf_record *records;
    int n, cap;
    int cursor;   /* where the last lookup hit: backward meets leaves in the same order */
    bool no_sync; /* mg_set_grad_sync(0) */
    mg_buckets buckets;
};

/* The context's reducer, made on first use (mg_finalize frees it: world.h),
 * told of every heap tensor freed (mg_dtensor_on_free); NULL with a message. */
static struct mg_reducer *reducer(void) {
    mg_dist_state *c = mg_dist();
    if (c->reducer) return c->reducer;
    if (mg_world_on_finalize(mg_reducer_free) != MG_OK) return NULL;
    if (!(c->reducer = calloc(1, sizeof *c->reducer))) {
        mg_error(MG_ENOMEM, "gradient reducer: out of memory");
        return NULL;
    }
    mg_dtensor_on_free(mg_reducer_forget); /* a freed leaf's record goes with it */
    return c->reducer;
}

void mg_reducer_free(void) {
    struct mg_reducer *r = mg_dist()->reducer;
    if (!r) return;
    mg_buckets_free(&r->buckets);
    for (int i = 0; i < r->n; i++) mg_det_sums_free(r->records[i].det);
    free(r->records);
    free(r);
    mg_dist()->reducer = NULL;
    mg_dtensor_on_free(NULL);
}

static leaf_record *find(const mg_dtensor *leaf) {
    struct mg_reducer *r = mg_dist()->reducer;
    if (!r) return NULL;
    for (int k = 0; k < r->n; k++) {
        int i = (r->cursor + k) % r->n;
        if (r->records[i].leaf == leaf) {
            r->cursor = i + 1 < r->n ? i + 1 : 0;
            return &r->records[i];
        }
    }
    return NULL;
}

static leaf_record *record(mg_dtensor *leaf) {
    leaf_record *rec = find(leaf);
    if (rec) return rec;
    struct mg_reducer *r = reducer();
    if (!r) return NULL;
    if (mg_array_grow((void **)&r->records, &r->cap, r->n + 1, sizeof *r->records,
                      "gradient reducer") != MG_OK)
        return NULL;
    rec = &r->records[r->n++];
    *rec = (leaf_record){.leaf = leaf, .form = MG_GRAD_ZERO, .dim = -1};
    return rec;
}

void mg_reducer_forget(const mg_dtensor *leaf) {
    struct mg_reducer *r = mg_dist()->reducer;
    leaf_record *rec = find(leaf);
    if (!rec) return;
    mg_det_sums_free(rec->det);
    *rec = r->records[--r->n];
}

void mg_reducer_step_end(void) {
    struct mg_reducer *r = mg_dist()->reducer;
    if (!r) return;
    for (int i = 0; i < r->n;) /* leaves from the step arena are gone with it */
        if (r->records[i].leaf->flags & MG_DTENSOR_HEAP) {
            i++;
        } else {
            mg_det_sums_free(r->records[i].det);
            r->records[i] = r->records[--r->n];
        }
}

int mg_set_grad_sync(int on) {
    struct mg_reducer *r = reducer();
    if (!r) return 1;
    int was = !r->no_sync;
    r->no_sync = !on;
    return was;
}

size_t mg_reducer_buffer_bytes(void) {
    struct mg_reducer *r = mg_dist()->reducer;
    if (!r) return 0;
    size_t bytes = (size_t)r->buckets.n_packs * (size_t)MG_GRAD_BUCKET_FLOATS * sizeof(float);
    for (int i = 0; i < r->n; i++) bytes += mg_det_sums_bytes(r->records[i].det);
    return bytes;
}

int mg_grad_sync(void) {
    struct mg_reducer *r = mg_dist()->reducer;
    return !r || !r->no_sync;
}

/* ---- the buffer ------------------------------------------------------------------ */

/* A leaf's gradient lives at the leaf's placements, Partial made Replicate. */
static mg_spec grad_spec(const mg_dtensor *t) {
    mg_spec target = t->spec;
    for (int m = 0; m < target.mesh->ndim; m++)
        if (target.p[m].kind == MG_PLACE_PARTIAL) target.p[m] = MG_REPLICATE;
    return target;
}

/* The leaf's gradient buffer, made on first use (uninitialized: ZERO). */
static int grad_buffer(mg_dtensor *t, leaf_record *rec) {
    if (t->grad) return MG_OK;
    mg_spec target = grad_spec(t);
    mg_arena *arena = (t->flags & MG_DTENSOR_HEAP) ? NULL : mg_step_arena();
    int64_t local[MG_MAX_DIMS];
    mg_spec_local(&target, NULL, local, NULL);
    mg_tensor *buf = mg_tensor_alloc(arena, target.ndim, local);
    if (!buf) return mg_last_code();
    t->grad = mg_dtensor_make(&target, buf, arena);
    if (!t->grad) return mg_last_code();
    t->grad->flags |= MG_DTENSOR_GRAD;
    rec->form = MG_GRAD_ZERO;
    return MG_OK;
}

/* The mesh dims (bit m, size > 1) where `from` is Partial and `to` is not. */
static unsigned partial_dims(const mg_spec *from, const mg_spec *to) {
    unsigned dims = 0;
    for (int m = 0; m < from->mesh->ndim; m++)
        if (from->p[m].kind == MG_PLACE_PARTIAL && to->p[m].kind != MG_PLACE_PARTIAL &&
            from->mesh->shape[m] > 1)
            dims |= 1u << m;
    return dims;
}

/* from equals to except for mesh dims that are Partial in `from` and Replicate
 * in `to`: the local blocks then have the same shape and a sum over those dims
 * turns one into the other. */
static bool partial_only(const mg_spec *from, const mg_spec *to) {
    for (int m = 0; m < from->mesh->ndim; m++) {
        if (mg_placement_equal(from->p[m], to->p[m])) continue;
        if (from->p[m].kind != MG_PLACE_PARTIAL || to->p[m].kind != MG_PLACE_REPLICATE) return false;
    }
    return true;
}

/* The spec of a LOCAL buffer: the gradient's, Partial over rec->partial. */
static mg_spec local_spec(const mg_dtensor *t, const leaf_record *rec) {
    mg_spec s = grad_spec(t);
    for (int m = 0; m < s.mesh->ndim; m++)
        if (rec->partial >> m & 1u) s.p[m] = MG_PARTIAL_SUM;
    return s;
}

static int only_dim(unsigned dims) {
    for (int m = 0; m < MG_MAX_MESH_DIMS; m++)
        if (dims == 1u << m) return m;
    return -1;
}

/* A large CPU gradient summed over one comm lives in memory the comm can sum
 * without copies (a shared window when the ranks share a node, comm_shm.h).
 * It moves there the first time it is summed, so every step, the first one
 * included, sums it the same way (a resumed run continues bit for bit). The
 * move allocates collectively: every rank reaches it at the same point.
 * 1: the buffer is there; 0: it stays where it is (no shared memory here, or
 * not ours to move); negative: an error. */
static int share(mg_tensor *buf, mg_comm *comm) {
    if (mg_comm_shared_peer(comm, buf->data, buf->numel, 0)) return 1;
    if (!mg_tensor_on_host(buf) || !(buf->flags & MG_TENSOR_OWNS_DATA) ||
        buf->numel < MG_GRAD_LARGE_FLOATS || !comm->iface->alloc_shared)
        return 0;
    return mg_comm_share_tensor(comm, buf, false);
}

/* Collective: a LOCAL or ROWS buffer made FULL. */
static int settle(struct mg_reducer *r, leaf_record *rec) {
    mg_dtensor *t = rec->leaf;
    const mg_mesh *mesh = t->spec.mesh;
    mg_tensor *buf = t->grad->local;
    int rc = MG_OK;
    if (rec->form == MG_GRAD_ROWS) {
        rc = mg_rows_gather(t, rec->dim);
    } else if (rec->form == MG_GRAD_LOCAL) {
        if (mg_buckets_pending(&r->buckets, buf->data)) rc = mg_buckets_finish(&r->buckets);
        int d = only_dim(rec->partial);
        if (rc == MG_OK && d >= 0) { /* one comm: its non-blocking sum (shm slots) */
            mg_comm_request req;
            rc = mg_comm_iall_reduce(mesh->dim_comm[d], buf->data, buf->numel, &req);
            if (rc == MG_OK) rc = mg_comm_wait(mesh->dim_comm[d], &req);
        } else {
            for (int m = 0; m < mesh->ndim && rc == MG_OK; m++)
                if (rec->partial >> m & 1u)
                    rc = mg_comm_all_reduce(mesh->dim_comm[m], buf->data, buf->numel, MG_REDUCE_SUM);
        }
    }
    if (rc == MG_OK && rec->form != MG_GRAD_ZERO) rec->form = MG_GRAD_FULL;
    return rc;
}

/* The last contribution of a backward is in a LOCAL buffer: its sum starts. */
static int start_sum(struct mg_reducer *r, leaf_record *rec) {
    mg_dtensor *t = rec->leaf;
    mg_tensor *buf = t->grad->local;
    int d = only_dim(rec->partial);
    if (d < 0) return settle(r, rec); /* over several dims: one blocking sum each */
    mg_comm *comm = t->spec.mesh->dim_comm[d];
    int shared = share(buf, comm);
    if (shared < 0) return shared;
    if (shared && rec->defer) return MG_OK; /* the optimizer step sums it */
    rec->form = MG_GRAD_FULL; /* once the buckets finish */
    return mg_buckets_add(&r->buckets, comm, buf->data, buf->numel, mg_tensor_on_host(buf));
}

/* g brought to `target` (from the scratch arena; a view where no data moves;
 * into `dest`, a tensor of target's local shape, when it is not NULL and the
 * move's last step writes a tensor of that size); g itself when equal. */
static mg_dtensor *moved(mg_dtensor *g, const mg_spec *target, mg_tensor *dest) {
    if (mg_spec_equal(&g->spec, target)) return g;
    mg_arena *scratch = mg_scratch_arena();
    mg_tensor *local = NULL;
    if (mg_redistribute_is_noop(&g->spec, target)) {
        local = mg_tensor_view(scratch, g->local, g->local->ndim, g->local->shape);
    } else {
        if (dest) mg_arena_hint_data(scratch, dest->data, (size_t)(dest->numel ? dest->numel : 1) * sizeof(float));
        int rc = mg_redistribute_local(&g->spec, g->local, target, &local, scratch);
        mg_arena_hint_data(scratch, NULL, 0);
        if (rc != MG_OK) return NULL;
    }
    return local ? mg_dtensor_make(target, local, scratch) : NULL;
}

/* The contribution g into the leaf's buffer. */
static int accumulate(struct mg_reducer *r, leaf_record *rec, mg_dtensor *g) {
    mg_dtensor *t = rec->leaf, *grad = t->grad;
    mg_backend *be = mg_backend_of(grad->local);
    int rc = MG_OK;
    if (rec->form == MG_GRAD_ZERO) {
        mg_dtensor *gg = g;
        if (!partial_only(&g->spec, &grad->spec) || g->local->device != grad->local->device) {
            /* into the buffer, unless g is there already (it is the source then) */
            mg_tensor *dest = g->local->data != grad->local->data ? grad->local : NULL;
            if (!(gg = moved(g, &grad->spec, dest))) return mg_last_code();
        }
        if (gg->local->data != grad->local->data) /* not computed in place */
            be->iface->copy(be->context, gg->local, grad->local);
        rec->partial = partial_dims(&gg->spec, &grad->spec);
        rec->form = rec->partial ? MG_GRAD_LOCAL : MG_GRAD_FULL;
        return MG_OK;
    }
    if (rec->form == MG_GRAD_ROWS && (rc = settle(r, rec)) != MG_OK) return rc;
    if (rec->form == MG_GRAD_FULL && mg_buckets_pending(&r->buckets, grad->local->data) &&
        (rc = mg_buckets_finish(&r->buckets)) != MG_OK)
        return rc;
    unsigned dims = partial_dims(&g->spec, &grad->spec);
    if (rec->form == MG_GRAD_FULL && dims && partial_only(&g->spec, &grad->spec) &&
        g->local->device == grad->local->device) {
        /* a summed buffer and a part: the buffer becomes this rank's addend again
         * (kept on coordinate 0 of those dims, zero elsewhere), so the new part
         * is summed with it once, in the buckets, instead of on its own now */
        const mg_mesh *mesh = t->spec.mesh;
        bool keep = true;
        for (int m = 0; m < mesh->ndim; m++)
            if (dims >> m & 1u) keep &= mesh->coord[m] == 0;
        if (!keep) be->iface->fill(be->context, grad->local, 0.0f);
        rec->form = MG_GRAD_LOCAL;
        rec->partial = dims;
    }
    /* LOCAL: added to this rank's addend; FULL: summed on its own first */
    mg_spec at = rec->form == MG_GRAD_LOCAL ? local_spec(t, rec) : grad->spec;
    mg_dtensor *gg = moved(g, &at, NULL);
    if (!gg) return mg_last_code();
    be->iface->axpy(be->context, 1.0f, gg->local, grad->local);
    return MG_OK;
}

static int check_shape(const mg_dtensor *t, const mg_dtensor *g) {
    if (mg_shape_equal(t->spec.ndim, t->spec.shape, g->spec.ndim, g->spec.shape)) return MG_OK;
    char a[96], b[96];
    return mg_error(MG_ESTATE, "backward: gradient of shape %s for a tensor of shape %s",
                    mg_shape_format(a, sizeof a, g->spec.ndim, g->spec.shape),
                    mg_shape_format(b, sizeof b, t->spec.ndim, t->spec.shape));
}

/* The rows of a split step's weight, when they can be made from g's factors;
 * 1: done; 0: not this way. */
static int add_rows(struct mg_reducer *r, leaf_record *rec, const mg_leaf_grad *g) {
    mg_dtensor *t = rec->leaf;
    int d = mg_rows_dim(t, g->rows_a, g->rows_b);
    if (d < 0) return 0;
    int shared = share(t->grad->local, t->spec.mesh->dim_comm[d]);
    if (shared <= 0) return shared;
    int rc = rec->form == MG_GRAD_ZERO ? MG_OK : settle(r, rec); /* the sum so far, whole */
    if (rc == MG_OK)
        rc = mg_rows_compute(g->rows_a, g->rows_b, t, d, rec->form == MG_GRAD_ZERO ? 0.0f : 1.0f);
    if (rc != MG_OK) return rc;
    rec->form = MG_GRAD_ROWS;
    rec->dim = d;
    return 1;
}

/* A weight's contribution added in its GEMM (reducer_rows.h: mg_rows_add),
 * when the buffer already holds a sum at the placements the local product
 * has. 1: added; 0: not this way. */
static int add_fused(struct mg_reducer *r, leaf_record *rec, const mg_leaf_grad *g) {
    mg_dtensor *t = rec->leaf;
    if (rec->form != MG_GRAD_FULL && rec->form != MG_GRAD_LOCAL) return 0;
    if (mg_buckets_pending(&r->buckets, t->grad->local->data)) return 0; /* a sum in flight */
    mg_spec at = rec->form == MG_GRAD_LOCAL ? local_spec(t, rec) : t->grad->spec;
    return mg_rows_add(g->rows_a, g->rows_b, &at, t->grad->local);
}

/* The deterministic mode's trees so far into the buffer (FULL), if any. */
static int det_fold(leaf_record *rec) {
    mg_tensor *buf = rec->leaf->grad->local;
    int rc = mg_det_sums_fold(rec->det, buf->data, buf->numel);
    if (rc == MG_OK) rec->form = MG_GRAD_FULL;
    return rc == 1 ? MG_OK : rc; /* 1: nothing came */
}

/* The deterministic mode: each contribution summed over the ranks now, into
 * its use's micro-batch tree; the trees folded into the buffer by the last
 * contribution of a backward that syncs (reducer_det.c says why). */
static int det_add(struct mg_reducer *r, leaf_record *rec, mg_leaf_grad *g, bool last) {
    mg_dtensor *t = rec->leaf;
    int rc = MG_OK;
    if (g) {
        mg_dtensor *v = g->value(g, NULL, 0);
        if (!v) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
        if ((rc = check_shape(t, v)) != MG_OK) return rc;
        mg_dtensor *summed = moved(v, &t->grad->spec, NULL);
        if (!summed) return mg_last_code() ? mg_last_code() : MG_ECOMM;
        rc = mg_det_sums_add(&rec->det, rec->det_use++, summed->local->data, summed->local->numel);
    }
    if (rc != MG_OK || !last) return rc;
    rec->det_use = 0;
    return r->no_sync ? MG_OK : det_fold(rec);
}

int mg_reducer_add(mg_dtensor *t, mg_leaf_grad *g, bool last) {
    struct mg_reducer *r = reducer();
    leaf_record *rec = r ? record(t) : NULL;
    if (!rec) return mg_last_code();
    int rc = grad_buffer(t, rec);
    if (rc != MG_OK) return rc;
    /* (the meta backend's buffers hold no data: it counts the ordinary way) */
    if (mg_get_deterministic() && !mg_tensor_is_meta(t->grad->local))
        return det_add(r, rec, g, last);
    bool sync = !r->no_sync;
    if (g && last && sync && rec->defer && g->rows_a) {
        int done = add_rows(r, rec, g);
        if (done != 0) return done < 0 ? done : MG_OK;
    }
    if (g && g->rows_a && add_fused(r, rec, g)) g = NULL; /* added already */
    if (g) {
        mg_tensor *buf = t->grad->local;
        size_t bytes = (size_t)(buf->numel > 0 ? buf->numel : 1) * sizeof(float);
        mg_dtensor *v = g->value(g, rec->form == MG_GRAD_ZERO ? buf->data : NULL, bytes);
        if (!v) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
        if ((rc = check_shape(t, v)) != MG_OK || (rc = accumulate(r, rec, v)) != MG_OK) return rc;
    }
    if (last && sync && rec->form == MG_GRAD_LOCAL) rc = start_sum(r, rec);
    return rc;
}

int mg_reducer_poll(void) {
    struct mg_reducer *r = mg_dist()->reducer;
    return r ? mg_buckets_poll(&r->buckets) : MG_OK;
}

int mg_reducer_backward_end(void) {
    struct mg_reducer *r = mg_dist()->reducer;
    return r ? mg_buckets_finish(&r->buckets) : MG_OK;
}

/* ---- what the others ask ------------------------------------------------------------ */

mg_dtensor *mg_reducer_grad(mg_dtensor *t) {
    leaf_record *rec = find(t);
    if (!t->grad || !rec) return t->grad;
    struct mg_reducer *r = mg_dist()->reducer;
    /* sums off (an input's gradient asked for between micro-batches): what came */
    if (rec->det && det_fold(rec) != MG_OK) return NULL;
    if ((rec->form == MG_GRAD_LOCAL || rec->form == MG_GRAD_ROWS) && settle(r, rec) != MG_OK)
        return NULL;
    if (rec->form == MG_GRAD_ZERO) {
        mg_backend *be = mg_backend_of(t->grad->local);
        be->iface->fill(be->context, t->grad->local, 0.0f);
        rec->form = MG_GRAD_FULL;
    }
    return t->grad;
}

void mg_reducer_zero(mg_dtensor *t) {
    leaf_record *rec = find(t);
    if (!rec) return;
    rec->form = MG_GRAD_ZERO;
    mg_det_sums_clear(rec->det);
}

int mg_reducer_defer(mg_dtensor *t) {
    leaf_record *rec = record(t);
    if (!rec) return mg_last_code();
    rec->defer = true;
    return MG_OK;
}

bool mg_reducer_finite(const mg_dtensor *t) {
    const leaf_record *rec = find(t);
    if (!t->grad || !rec || rec->form == MG_GRAD_ZERO) return true;
    mg_tensor part = *t->grad->local;
    if (rec->form == MG_GRAD_ROWS) { /* the others' rows are stale here */
        mg_comm *c = t->spec.mesh->dim_comm[rec->dim];
        int64_t lo, hi, cols = t->spec.shape[1];
        mg_rows_slice(t->spec.shape[0], c->size, c->rank, &lo, &hi);
        part = (mg_tensor){.ndim = 1, .shape = {(hi - lo) * cols}, .numel = (hi - lo) * cols,
                           .data = part.data + lo * cols, .device = part.device};
    }
    if (part.numel == 0) return true;
    mg_backend *be = mg_backend_of(&part);
    return isfinite(be->iface->sum_squares(be->context, &part));
}

bool mg_reducer_holds(const mg_tensor *t) {
    struct mg_reducer *r = mg_dist()->reducer;
    if (!r || t->numel == 0) return false;
    uintptr_t lo = (uintptr_t)t->data, hi = (uintptr_t)(t->data + t->numel);
    for (int i = 0; i < r->n; i++) {
        const mg_dtensor *g = r->records[i].leaf->grad;
        if (!g || g->local->numel == 0 || g->local->device != t->device) continue;
        uintptr_t b = (uintptr_t)g->local->data, e = (uintptr_t)(g->local->data + g->local->numel);
        if (lo < e && b < hi) return true;
    }
    return false;
}

bool mg_reducer_deferred(const mg_dtensor *t) {
    const leaf_record *rec = find(t);
    return rec && rec->defer;
}

mg_grad_form mg_reducer_form(const mg_dtensor *t, int *dim) {
    const leaf_record *rec = find(t);
    mg_grad_form form = rec ? rec->form : MG_GRAD_ZERO;
    if (dim)
        *dim = !rec ? -1 : form == MG_GRAD_ROWS ? rec->dim : form == MG_GRAD_LOCAL ? only_dim(rec->partial) : -1;
    return form;
}
