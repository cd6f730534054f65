/* optim.c: the optimizer step over a parameter table, gradient clipping and
 * LR schedules (see optim.h). */
#include "nn/optim.h"

#include <math.h>
#include <string.h>

#include "array.h"
#include "backend/backend.h"
#include "dist/comm.h"
#include "dist/mesh.h"
#include "exact.h"
#include "nn/optim_shard.h"
#include "status.h"

int mg_optimizer_add_state(mg_optimizer *opt, mg_param_table *t) {
    int n = mg_optimizer_state_count(opt);
    int rc = mg_optim_shard_mark(t); /* before any backward: every step alike */
    if (rc != MG_OK) return rc;
    for (int i = 0; i < t->n; i++)
        for (int s = 0; s < n; s++) {
            if (t->p[i].state[s]) continue;
            t->p[i].state[s] = mg_dtensor_zeros(&t->p[i].value->spec, NULL);
            if (!t->p[i].state[s]) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
        }
    return MG_OK;
}

int mg_optimizer_decays(const mg_optimizer *opt, const mg_param *p) {
    return !opt->decay_2d_only || p->value->spec.ndim >= 2;
}

static int check(const mg_optimizer *opt, const mg_param *p) {
    if (p->grad->local->numel != p->value->local->numel)
        return mg_error(MG_ESTATE, "optimizer: %s has %lld local elements but its gradient %lld",
                        p->name, (long long)p->value->local->numel, (long long)p->grad->local->numel);
    for (int s = 0; s < mg_optimizer_state_count(opt); s++)
        if (!p->state[s])
            return mg_error(MG_ESTATE, "optimizer: %s has no %s (call mg_optimizer_add_state)", p->name,
                            opt->kind == MG_OPTIM_ADAMW ? "AdamW state" : "momentum buffer");
    return MG_OK;
}

int mg_optimizer_step(mg_optimizer *opt, mg_param_table *t, float lr) {
    for (int i = 0; i < t->n; i++) {
        int rc = t->p[i].grad ? check(opt, &t->p[i]) : MG_OK;
        if (rc != MG_OK) return rc;
    }
    opt->step++;
    /* data-parallel parameters on one node: each rank updates its part (optim_shard.h) */
    int rc = mg_optim_shard_begin(opt, t);
    if (rc != MG_OK) return rc;
    for (int i = 0; i < t->n; i++) {
        mg_param *p = &t->p[i];
        if (!p->grad) continue;
        int decay = mg_optimizer_decays(opt, p);
        if (p->shard_dim >= 0) {
            mg_optim_shard_update(opt, p, lr, decay);
            continue;
        }
        if (p->one_copy) /* one copy per node: never updated by all */
            return mg_error(MG_ESTATE, "optimizer: %s is kept once per node and its gradient "
                                       "is no longer in shared memory; its update cannot be split",
                            p->name);
        if (mg_param_grad_in_parts(p)) /* left for a split step that is not */
            if (!(p->grad = mg_grad(p->value))) return mg_last_code();
        mg_tensor *state[MG_PARAM_STATE_MAX] = {0};
        for (int s = 0; s < mg_optimizer_state_count(opt); s++) state[s] = p->state[s]->local;
        mg_optimizer_apply(opt, p->value->local, p->grad->local, state, lr, decay);
    }
    return mg_optim_shard_end(t);
}

/* p->grad summed over the ranks (a split step may have left it unsummed). */
static int summed(mg_param *p) {
    if (p->grad && mg_param_grad_in_parts(p) && !(p->grad = mg_grad(p->value)))
        return mg_last_code();
    return MG_OK;
}

/* The deterministic mode's norm: every square (a float) added exactly, each
 * gradient element once (the shard on coordinate 0 of the dims that replicate
 * it), the ranks' sums added as integers, so the norm is the same on every mesh
 * and split. */
static int exact_norm(mg_param_table *t, const mg_mesh *mesh, mg_comm *also, double *norm) {
    mg_exact acc;
    mg_exact_zero(&acc);
    for (int i = 0; i < t->n; i++) {
        mg_param *p = &t->p[i];
        int rc = summed(p);
        if (rc != MG_OK) return rc;
        if (!p->grad) continue;
        bool first = true;
        for (int m = 0; m < mesh->ndim; m++)
            first &= p->grad->spec.p[m].kind != MG_PLACE_REPLICATE || mesh->coord[m] == 0;
        if (!first || mg_tensor_is_meta(p->grad->local)) continue; /* meta: no data */
        const float *g = p->grad->local->data;
        for (int64_t j = 0; j < p->grad->local->numel; j++) mg_exact_add(&acc, g[j] * g[j]);
    }
    int rc = mg_comm_sum_exact(mesh->world, &acc);
    if (rc == MG_OK && also) rc = mg_comm_sum_exact(also, &acc);
    if (rc != MG_OK) return rc;
    double total = mg_exact_value(&acc);
    *norm = sqrt(total); /* NaN or inf when a square was */
    return MG_OK;
}

int mg_grad_norm(mg_param_table *t, double *norm) {
    *norm = 0;
    if (t->n == 0) return MG_OK;
    if (mg_get_deterministic()) return exact_norm(t, t->p[0].value->spec.mesh, NULL, norm);
    const mg_mesh *mesh = t->p[0].value->spec.mesh;
    double local = 0;
    for (int i = 0; i < t->n; i++) {
        mg_param *p = &t->p[i];
        int rc = summed(p);
        if (rc != MG_OK) return rc;
        if (!p->grad) continue;
        mg_backend *be = mg_backend_of(p->grad->local);
        local += be->iface->sum_squares(be->context, p->grad->local) / (double)p->replication;
    }
    /* float collectives: send the double as hi + lo so no precision is lost */
    float buf[2];
    buf[0] = (float)local;
    buf[1] = (float)(local - (double)buf[0]);
    int rc = mg_comm_all_reduce(mesh->world, buf, 2, MG_REDUCE_SUM);
    if (rc != MG_OK) return rc;
    double total = (double)buf[0] + (double)buf[1];
    *norm = sqrt(total > 0 ? total : 0);
    return MG_OK;
}

int mg_grad_norm_exact(mg_param_table *t, mg_comm *also, double *norm) {
    *norm = 0;
    const mg_mesh *mesh = t->n ? t->p[0].value->spec.mesh : NULL;
    if (mesh) return exact_norm(t, mesh, also, norm);
    if (!also) return MG_OK;
    mg_exact none; /* a stage with no parameter still joins the sum */
    mg_exact_zero(&none);
    int rc = mg_comm_sum_exact(also, &none);
    if (rc != MG_OK) return rc;
    *norm = sqrt(mg_exact_value(&none));
    return MG_OK;
}

int mg_clip_grad_norm(mg_param_table *t, double max_norm, double *norm_out) {
    double norm;
    int rc = mg_grad_norm(t, &norm);
    if (rc != MG_OK) return rc;
    if (norm_out) *norm_out = norm;
    mg_clip_grads_to(t, max_norm, norm);
    return MG_OK;
}

void mg_clip_grads_to(mg_param_table *t, double max_norm, double norm) {
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return;
    for (int i = 0; i < t->n; i++) {
        mg_param *p = &t->p[i];
        if (!p->grad) continue;
        mg_backend *be = mg_backend_of(p->grad->local);
        be->iface->unary(be->context, MG_UNARY_SCALE, p->grad->local, (float)coef, p->grad->local);
    }
}

static const char *const schedule_names[] = {"constant", "cosine"};

int mg_schedule_kind_parse(const char *text, mg_schedule_kind *kind) {
    int k = 0, st = mg_name_parse(text, schedule_names, 2, "schedule", &k);
    if (st == MG_OK) *kind = (mg_schedule_kind)k;
    return st;
}

const char *mg_schedule_kind_name(mg_schedule_kind kind) { return schedule_names[kind]; }

double mg_lr_at(const mg_lr_schedule *s, int64_t step) {
    if (step < s->warmup) return s->lr * (double)(step + 1) / (double)s->warmup;
    if (s->kind == MG_SCHEDULE_CONSTANT) return s->lr;
    int64_t span = s->total - s->warmup;
    if (span <= 0) return s->lr;
    double progress = (double)(step - s->warmup) / (double)span;
    if (progress > 1) progress = 1;
    return s->lr_min + (s->lr - s->lr_min) * 0.5 * (1.0 + cos(M_PI * progress));
}
