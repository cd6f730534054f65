/* param.c: the parameter table (see param.h). */
#include "nn/param.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "backend/backend.h"
#include "dist/mesh.h"
#include "dist/reducer.h"
#include "hash.h"
#include "ops/ops.h"
#include "status.h"

int mg_params_add(mg_param_table *t, const mg_mesh *mesh, const char *name, int ndim,
                  const int64_t *shape, const mg_placement *store, const mg_placement *use,
                  uint64_t seed, float lo, float hi) {
    return mg_params_add_init(t, mesh, name, ndim, shape, store, use, seed,
                              (mg_param_init){MG_INIT_UNIFORM, lo, hi});
}

static int param_fill(mg_dtensor *v, uint64_t seed, uint64_t stream, mg_param_init init) {
    if (init.kind == MG_INIT_NORMAL) return mg_dtensor_fill_normal(v, seed, stream, init.a, init.b);
    if (init.kind == MG_INIT_UNIFORM) return mg_dtensor_fill_uniform(v, seed, stream, init.a, init.b);
    mg_backend *be = mg_backend_of(v->local); /* constant: the value on every rank */
    be->iface->fill(be->context, v->local, init.a);
    return MG_OK;
}

int mg_params_add_init(mg_param_table *t, const mg_mesh *mesh, const char *name, int ndim,
                       const int64_t *shape, const mg_placement *store, const mg_placement *use,
                       uint64_t seed, mg_param_init init) {
    if (strlen(name) >= MG_PARAM_NAME_MAX)
        return mg_error(MG_EINVAL, "parameter name '%s' is longer than %d characters", name,
                        MG_PARAM_NAME_MAX - 1);
    int rc = mg_array_grow((void **)&t->p, &t->cap, t->n + 1, sizeof *t->p, "parameter table");
    if (rc != MG_OK) return rc;
    mg_spec spec;
    rc = mg_spec_make(&spec, mesh, store, mesh->ndim, ndim, shape, name);
    if (rc != MG_OK) return rc;
    mg_spec use_spec; /* validates the use placements too */
    rc = mg_spec_make(&use_spec, mesh, use, mesh->ndim, ndim, shape, name);
    if (rc != MG_OK) return rc;

    mg_param *p = &t->p[t->n];
    memset(p, 0, sizeof *p);
    p->shard_dim = -1;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->value = mg_dtensor_zeros(&spec, NULL);
    if (!p->value) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
    if (t->next_index < t->n) t->next_index = t->n;
    p->index = t->next_index;
    rc = param_fill(p->value, seed, (uint64_t)p->index, init);
    if (rc == MG_OK) rc = mg_set_requires_grad(p->value, 1);
    if (rc != MG_OK) {
        mg_dtensor_free(p->value);
        return rc;
    }
    p->replication = 1;
    for (int d = 0; d < mesh->ndim; d++) {
        p->use[d] = use_spec.p[d];
        if (!mg_placement_equal(spec.p[d], use_spec.p[d])) p->gather = 1;
        if (spec.p[d].kind == MG_PLACE_REPLICATE) p->replication *= mesh->shape[d];
    }
    t->next_index++;
    return t->n++;
}

void mg_params_free(mg_param_table *t) {
    for (int i = 0; i < t->n; i++) {
        mg_dtensor_free(t->p[i].value);
        for (int s = 0; s < MG_PARAM_STATE_MAX; s++) mg_dtensor_free(t->p[i].state[s]);
    }
    free(t->p);
    memset(t, 0, sizeof *t);
}

mg_dtensor *mg_params_use(mg_param_table *t, int i) {
    mg_param *p = &t->p[i];
    if (!p->gather) return p->value;
    /* a parameter copy: released when the ops that use it are done, gathered
     * again in backward (ops.h) */
    mg_spec target;
    if (mg_spec_make(&target, p->value->spec.mesh, p->use, p->value->spec.mesh->ndim,
                     p->value->spec.ndim, p->value->spec.shape, "parameter use") != MG_OK)
        return NULL;
    return mg_op_param_copy(p->value, &target);
}

bool mg_param_grad_in_parts(const mg_param *p) {
    mg_grad_form form = mg_reducer_form(p->value, NULL);
    return form == MG_GRAD_LOCAL || form == MG_GRAD_ROWS;
}

void mg_params_collect_grads(mg_param_table *t) {
    for (int i = 0; i < t->n; i++) { /* a gradient the optimizer sums stays in parts */
        mg_param *p = &t->p[i];
        p->grad = mg_param_grad_in_parts(p) ? p->value->grad : mg_grad(p->value);
    }
}

int mg_params_zero_grads(mg_param_table *t) {
    for (int i = 0; i < t->n; i++) {
        int rc = mg_zero_grad(t->p[i].value);
        if (rc != MG_OK) return rc;
        t->p[i].grad = NULL;
    }
    return MG_OK;
}

int mg_params_checksum_more(mg_param_table *t, int first, int n, uint64_t *out) {
    uint64_t h = *out;
    for (int i = first; i < first + n; i++) {
        mg_tensor *full = mg_full_tensor(t->p[i].value);
        if (!full) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
        h = mg_hash_bytes(h, full->data, (size_t)full->numel * sizeof(float));
        mg_tensor_free(full);
    }
    *out = h;
    return MG_OK;
}

int mg_params_checksum(mg_param_table *t, uint64_t *out) {
    *out = MG_HASH_START;
    return mg_params_checksum_more(t, 0, t->n, out);
}

int64_t mg_params_numel(const mg_param_table *t) {
    int64_t n = 0;
    for (int i = 0; i < t->n; i++)
        n += mg_shape_numel(t->p[i].value->spec.ndim, t->p[i].value->spec.shape);
    return n;
}
