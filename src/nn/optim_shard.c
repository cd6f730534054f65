/* optim_shard.c: split optimizer steps over shared memory (see optim_shard.h). */
#include "nn/optim_shard.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/comm_shm.h"
#include "dist/mesh.h"
#include "dist/reducer.h"
#include "dist/reducer_buckets.h"
#include "dist/reducer_rows.h"
#include "parallel.h"
#include "status.h"

#define TILE 8192      /* floats per tile: a few tiles of every stream stay in L2 */
#define MAX_PEERS 256  /* ranks per comm a split update handles */

static mg_comm *shard_comm(const mg_param *p) {
    return p->value->spec.mesh->dim_comm[p->shard_dim];
}

/* The mesh dim whose ranks can split p's update: the value is Replicate there
 * and backward put the gradient in that dim's shared memory. */
static int shard_dim(const mg_param *p) {
    const mg_mesh *mesh = p->value->spec.mesh;
    const mg_tensor *g = p->grad ? p->grad->local : NULL;
    if (!g || !mg_tensor_on_host(g) || !mg_tensor_on_host(p->value->local)) return -1;
    for (int m = 0; m < mesh->ndim; m++) {
        mg_comm *c = mesh->dim_comm[m];
        if (p->value->spec.p[m].kind == MG_PLACE_REPLICATE && c->size > 1 && c->size <= MAX_PEERS &&
            mg_comm_shared_peer(c, g->data, g->numel, 0))
            return m;
    }
    return -1;
}

static bool is_shared(mg_comm *c, const mg_tensor *x) {
    return mg_comm_shared_peer(c, x->data, x->numel, 0) != NULL;
}

/* A parameter that can be split: its value and state move to shared memory,
 * those not there yet (all of them on its first step; a state added later on
 * its own), if every rank of the comm can move them (they own their data). */
static int share_param(const mg_optimizer *opt, mg_param *p) {
    mg_comm *c = shard_comm(p);
    int ns = mg_optimizer_state_count(opt);
    mg_tensor *move[1 + MG_PARAM_STATE_MAX];
    int nm = 0;
    if (!is_shared(c, p->value->local)) move[nm++] = p->value->local;
    for (int s = 0; s < ns; s++)
        if (!is_shared(c, p->state[s]->local)) move[nm++] = p->state[s]->local;
    float cannot = 0;
    for (int j = 0; j < nm; j++) cannot += !(move[j]->flags & MG_TENSOR_OWNS_DATA);
    int rc = mg_comm_all_reduce(c, &cannot, 1, MG_REDUCE_MAX);
    if (rc != MG_OK) return rc;
    if (cannot > 0) {
        /* a value already shared is one copy: it cannot take the ordinary step */
        if (is_shared(c, p->value->local))
            return mg_error(MG_ESTATE, "optimizer: %s is kept once per node, but one of its "
                                       "optimizer states cannot join it there", p->name);
        p->shard_dim = -1;
        return MG_OK;
    }
    rc = 1;
    for (int j = 0; j < nm && rc == 1; j++) rc = mg_comm_share_tensor(c, move[j], true);
    if (rc < 0) return rc;
    if (rc == 0) { /* no shared memory after all (the same on every rank) */
        if (is_shared(c, p->value->local))
            return mg_error(MG_ESTATE, "optimizer: %s is kept once per node, but shared memory "
                                       "for its optimizer state is not available", p->name);
        p->shard_dim = -1;
        return MG_OK;
    }
    p->one_copy = 1;
    return MG_OK;
}

int mg_optim_shard_mark(mg_param_table *t) {
    if (mg_get_deterministic()) return MG_OK; /* every sum in the reducer's tree */
    for (int i = 0; i < t->n; i++) {
        mg_dtensor *v = t->p[i].value;
        const mg_mesh *mesh = v->spec.mesh;
        int replicated = 0;
        for (int m = 0; m < mesh->ndim; m++)
            replicated |= mesh->shape[m] > 1 && v->spec.p[m].kind == MG_PLACE_REPLICATE;
        if (replicated && mg_tensor_on_host(v->local) &&
            v->local->numel >= MG_GRAD_LARGE_FLOATS) {
            int rc = mg_reducer_defer(v);
            if (rc != MG_OK) return rc;
        }
    }
    return MG_OK;
}

/* Every comm that splits an update, once (at most one per mesh dim). */
static int shard_comms(const mg_param_table *t, mg_comm **comms) {
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        if (t->p[i].shard_dim < 0) continue;
        mg_comm *c = shard_comm(&t->p[i]);
        int seen = 0;
        for (int j = 0; j < n; j++) seen |= comms[j] == c;
        if (!seen) comms[n++] = c;
    }
    return n;
}

static int barriers(const mg_param_table *t) {
    mg_comm *comms[MG_MAX_MESH_DIMS];
    int n = shard_comms(t, comms);
    for (int j = 0; j < n; j++) {
        int rc = mg_comm_barrier(comms[j]);
        if (rc != MG_OK) return rc;
    }
    return MG_OK;
}

int mg_optim_shard_begin(mg_optimizer *opt, mg_param_table *t) {
    int ns = mg_optimizer_state_count(opt);
    for (int i = 0; i < t->n; i++) {
        mg_param *p = &t->p[i];
        p->shard_dim = shard_dim(p);
        if (p->shard_dim < 0) continue;
        mg_comm *c = shard_comm(p);
        bool ready = is_shared(c, p->value->local);
        for (int s = 0; s < ns && ready; s++) ready = is_shared(c, p->state[s]->local);
        int rc = ready ? MG_OK : share_param(opt, p);
        if (rc != MG_OK) return rc;
    }
    return barriers(t);
}

int mg_optim_shard_end(mg_param_table *t) { return barriers(t); }

static mg_tensor slice(float *data, int64_t n) {
    return (mg_tensor){.ndim = 1, .shape = {n}, .numel = n, .data = data, .device = MG_DEVICE_CPU};
}

void mg_optim_shard_update(const mg_optimizer *opt, mg_param *p, float lr, int decay) {
    mg_comm *c = shard_comm(p);
    int k = c->size, r = c->rank, ns = mg_optimizer_state_count(opt);
    /* LOCAL: every rank's part to add; else summed (FULL), or this rank's rows (ROWS) */
    bool unsummed = mg_reducer_form(p->value, NULL) == MG_GRAD_LOCAL;
    mg_tensor *w = p->value->local;
    const mg_tensor *g = p->grad->local;
    if (mg_tensor_is_meta(w)) return; /* nothing to update */
    const float *grads[MAX_PEERS]; /* every rank's gradient buffer, mapped here */
    for (int q = 0; q < k; q++) grads[q] = mg_comm_shared_peer(c, g->data, g->numel, q);
    /* this rank's rows (dim 0), as the reducer slices ROWS gradients */
    int64_t rows = w->ndim > 0 ? w->shape[0] : 1, cols = rows > 0 ? w->numel / rows : 0, lo, hi;
    mg_rows_slice(rows, k, r, &lo, &hi);
    lo *= cols;
    hi *= cols;
    int64_t tiles = (hi - lo + TILE - 1) / TILE;
    MG_PAR_FOR(tiles > 1, for (int64_t t = 0; t < tiles; t++) {
        int64_t i = lo + t * TILE, m = hi - i < TILE ? hi - i : TILE;
        float sum[TILE];
        const float *gi = g->data + i;
        if (unsummed) { /* the gradient: every rank's part, added as the all-reduce adds */
            mg_shm_sum(sum, grads, k, i, m);
            gi = sum;
        }
        /* value and state are one copy for all ranks: updating this rank's
         * slice in place updates every rank's parameter */
        mg_tensor wt = slice(w->data + i, m), gt = slice((float *)gi, m), st[MG_PARAM_STATE_MAX];
        mg_tensor *sp[MG_PARAM_STATE_MAX] = {0};
        for (int s = 0; s < ns; s++) {
            st[s] = slice(p->state[s]->local->data + i, m);
            sp[s] = &st[s];
        }
        mg_optimizer_apply(opt, &wt, &gt, sp, lr, decay);
    });
}
