/* optim_api.c: mg_optim and mg_schedule of the training API
 * (meshgrad_train.h). An mg_optim is the optimizer of `meshgrad train`
 * (nn/optim.h: the update, the split step of a data-parallel parameter whose
 * ranks share a node, clipping) over a parameter table whose entries are the
 * caller's tensors, used as they are stored; a schedule is nn/optim.h's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/mesh.h"
#include "status.h"
#include "train/api.h"

/* ---- parameters --------------------------------------------------------------- */

/* n named parameters, each a kept tensor that requires grad, no name or
 * tensor twice. Identical on every rank (no communication). */
static int check_params(const char *who, int n, mg_dtensor *const *params,
                        const char *const *names) {
    if (n < 1 || !params || !names)
        return mg_error(MG_EINVAL, "%s: %d parameters with params %s and names %s: give n >= 1 "
                        "tensors and a name for each", who, n, params ? "given" : "NULL",
                        names ? "given" : "NULL");
    for (int i = 0; i < n; i++) {
        int rc = mg_api_name_check(who, "parameter name", names[i]);
        if (rc == MG_OK) rc = mg_api_tensor_check(who, names[i], params[i], 0);
        if (rc != MG_OK) return rc;
        if (!params[i]->requires_grad)
            return mg_error(MG_EINVAL, "%s: \"%s\" does not require grad: call "
                            "mg_set_requires_grad on it first", who, names[i]);
        for (int j = 0; j < i; j++) {
            if (strcmp(names[i], names[j]) == 0)
                return mg_error(MG_EINVAL, "%s: the name \"%s\" is given twice", who, names[i]);
            if (params[i] == params[j])
                return mg_error(MG_EINVAL, "%s: \"%s\" and \"%s\" are the same tensor (it "
                                "would be updated twice): give it once", who, names[j], names[i]);
        }
    }
    return MG_OK;
}

/* A digest of names, global shapes, placements and settings. */
static uint64_t params_hash(int n, mg_dtensor *const *params, const char *const *names,
                            const float *settings, int nsettings) {
    uint64_t h = mg_api_hash(MG_API_HASH_START, settings, (size_t)nsettings * sizeof *settings);
    for (int i = 0; i < n; i++) h = mg_api_hash_tensor(h, names[i], params[i]);
    return h;
}

/* The table entry of a caller's tensor, used as it is stored. */
static void param_init(mg_param *p, const char *name, mg_dtensor *t) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->value = t;
    p->shard_dim = -1;
    p->replication = 1;
    const mg_mesh *mesh = t->spec.mesh;
    for (int d = 0; d < mesh->ndim; d++) {
        p->use[d] = t->spec.p[d];
        if (t->spec.p[d].kind == MG_PLACE_REPLICATE) p->replication *= mesh->shape[d];
    }
}

/* ---- optimizers ----------------------------------------------------------------- */

static mg_optim *optim_new(const char *who, const mg_optimizer *cfg, int rc, int n,
                           mg_dtensor *const *params, const char *const *names) {
    float settings[5] = {(float)cfg->kind, cfg->momentum, cfg->weight_decay, cfg->beta1,
                         cfg->beta2};
    if (rc == MG_OK) rc = check_params(who, n, params, names);
    uint64_t h = rc == MG_OK ? params_hash(n, params, names, settings, 5) : 0;
    h = mg_api_hash(h, &cfg->eps, sizeof cfg->eps);
    if (mg_api_agree(rc, h, who, "parameters or settings") != MG_OK) return NULL;
    mg_optim *o = calloc(1, sizeof *o);
    mg_param *p = calloc((size_t)n, sizeof *p);
    if (!o || !p) {
        free(o);
        free(p);
        return mg_error_null(MG_ENOMEM, "%s: out of memory for %d parameters", who, n);
    }
    o->opt = *cfg;
    o->params = (mg_param_table){.p = p, .n = n, .cap = n, .next_index = n};
    for (int i = 0; i < n; i++) {
        param_init(&p[i], names[i], params[i]);
        params[i]->holders++; /* mg_dtensor_free refuses it until mg_optim_free */
    }
    if ((rc = mg_optimizer_add_state(&o->opt, &o->params)) != MG_OK) {
        mg_optim_free(o);
        return NULL;
    }
    return o;
}

/* v is finite and in [lo, hi) (hi: INFINITY for none). */
static int check_setting(int rc, const char *who, const char *what, float v, float lo, float hi) {
    if (rc != MG_OK || (isfinite(v) && v >= lo && v < hi)) return rc;
    if (isinf(hi))
        return mg_error(MG_EINVAL, "%s: %s is %g; it must be a finite number >= %g", who, what,
                        (double)v, (double)lo);
    return mg_error(MG_EINVAL, "%s: %s is %g; it must be in [%g, %g)", who, what, (double)v,
                    (double)lo, (double)hi);
}

mg_optim *mg_optim_new_sgd(int n, mg_dtensor *const *params, const char *const *names,
                           float momentum, float weight_decay) {
    const char *who = "mg_optim_new_sgd";
    int rc = check_setting(MG_OK, who, "momentum", momentum, 0, INFINITY);
    rc = check_setting(rc, who, "weight_decay", weight_decay, 0, INFINITY);
    mg_optimizer cfg;
    mg_optimizer_init(&cfg, MG_OPTIM_SGD, momentum, rc == MG_OK ? weight_decay : 0);
    return optim_new(who, &cfg, rc, n, params, names);
}

mg_optim *mg_optim_new_adamw(int n, mg_dtensor *const *params, const char *const *names,
                             float beta1, float beta2, float eps, float weight_decay) {
    const char *who = "mg_optim_new_adamw";
    int rc = check_setting(MG_OK, who, "beta1", beta1, 0, 1);
    rc = check_setting(rc, who, "beta2", beta2, 0, 1);
    rc = check_setting(rc, who, "eps", eps, 0, INFINITY);
    rc = check_setting(rc, who, "weight_decay", weight_decay, 0, INFINITY);
    mg_optimizer cfg;
    mg_optimizer_init(&cfg, MG_OPTIM_ADAMW, 0, rc == MG_OK ? weight_decay : 0);
    cfg.beta1 = beta1;
    cfg.beta2 = beta2;
    cfg.eps = eps;
    return optim_new(who, &cfg, rc, n, params, names);
}

/* Collective: o given, the number x (named `what`; NULL: none) finite and
 * >= 0 (> 0 when positive), the same on every rank; rc: the caller's own
 * verdict on its other arguments. */
static int check_call(int rc, const char *who, const mg_optim *o, const char *what, double x,
                      int positive) {
    if (rc == MG_OK && !o)
        rc = mg_error(MG_EINVAL, "%s: the optimizer is NULL", who);
    else if (rc == MG_OK && what && (!isfinite(x) || x < 0 || (positive && x == 0)))
        rc = mg_error(MG_EINVAL, "%s: %s is %g; give a finite number %s 0", who, what, x,
                      positive ? ">" : ">=");
    return mg_api_agree(rc, mg_api_hash(MG_API_HASH_START, &x, sizeof x), who,
                        what ? what : "the call");
}

int mg_optim_step(mg_optim *o, float lr) {
    int rc = check_call(MG_OK, "mg_optim_step", o, "the learning rate", lr, 0);
    if (rc != MG_OK) return rc;
    mg_params_collect_grads(&o->params);
    return mg_optimizer_step(&o->opt, &o->params, lr);
}

int mg_optim_zero_grad(mg_optim *o) {
    if (!mg_arg_given(o, "mg_optim_zero_grad", "the optimizer")) return MG_EINVAL;
    return mg_params_zero_grads(&o->params);
}

int mg_optim_grad_norm(mg_optim *o, double *norm) {
    int rc = norm ? MG_OK : mg_error(MG_EINVAL, "mg_optim_grad_norm: norm is NULL");
    if ((rc = check_call(rc, "mg_optim_grad_norm", o, NULL, 0, 0)) != MG_OK) return rc;
    mg_params_collect_grads(&o->params);
    return mg_grad_norm(&o->params, norm);
}

int mg_optim_clip_grads(mg_optim *o, double max_norm, double *norm) {
    int rc = check_call(MG_OK, "mg_optim_clip_grads", o, "max_norm", max_norm, 1);
    if (rc != MG_OK) return rc;
    mg_params_collect_grads(&o->params);
    return mg_clip_grad_norm(&o->params, max_norm, norm);
}

void mg_optim_free(mg_optim *o) {
    if (!o) return;
    if (o->holders > 0) { /* they would save or load through a dangling pointer */
        mg_error(MG_ESTATE, "mg_optim_free: nothing freed: %d checkpoint(s) still hold this "
                            "optimizer (mg_ckpt_set_optim): mg_ckpt_free them first, or give them "
                            "another with mg_ckpt_set_optim",
                 o->holders);
        return;
    }
    for (int i = 0; i < o->params.n; i++) {
        o->params.p[i].value->holders--;
        for (int s = 0; s < MG_PARAM_STATE_MAX; s++) mg_dtensor_free(o->params.p[i].state[s]);
    }
    free(o->params.p);
    free(o);
}

/* ---- schedules ------------------------------------------------------------------- */

/* s: the schedule of `meshgrad train` (nn/optim.h), whose cosine ends at 0;
 * the cosine here runs from lr down to lr_min instead: s's cosine of
 * lr - lr_min, plus lr_min, after the warmup of lr. */
struct mg_schedule {
    mg_lr_schedule s;
    double lr_min;
};

static mg_schedule *schedule_new(const char *who, mg_lr_schedule s, double lr_min) {
    int rc = MG_OK;
    if (!isfinite(s.lr) || s.lr < 0)
        rc = mg_error(MG_EINVAL, "%s: lr is %g; give a finite number >= 0", who, s.lr);
    else if (!isfinite(lr_min) || lr_min < 0 || lr_min > s.lr)
        rc = mg_error(MG_EINVAL, "%s: lr_min is %g; give a number in [0, lr = %g]", who, lr_min,
                      s.lr);
    else if (s.warmup < 0)
        rc = mg_error(MG_EINVAL, "%s: warmup is %lld steps; give 0 or more", who,
                      (long long)s.warmup);
    else if (s.kind == MG_SCHEDULE_COSINE && s.total <= s.warmup)
        rc = mg_error(MG_EINVAL, "%s: total is %lld steps, not more than the %lld of warmup: the "
                      "cosine needs total > warmup", who, (long long)s.total, (long long)s.warmup);
    mg_schedule *out = rc == MG_OK ? malloc(sizeof *out) : NULL;
    if (rc == MG_OK && !out) return mg_error_null(MG_ENOMEM, "%s: out of memory", who);
    if (out) *out = (mg_schedule){s, lr_min};
    return out;
}

mg_schedule *mg_schedule_new_constant(double lr, int64_t warmup) {
    return schedule_new("mg_schedule_new_constant",
                        (mg_lr_schedule){.kind = MG_SCHEDULE_CONSTANT, .lr = lr, .warmup = warmup},
                        0);
}

mg_schedule *mg_schedule_new_cosine(double lr, double lr_min, int64_t warmup, int64_t total) {
    return schedule_new("mg_schedule_new_cosine",
                        (mg_lr_schedule){.kind = MG_SCHEDULE_COSINE, .lr = lr, .warmup = warmup,
                                         .total = total},
                        lr_min);
}

double mg_schedule_lr(const mg_schedule *s, int64_t step) {
    if (!mg_arg_given(s, "mg_schedule_lr", "the schedule")) return NAN;
    if (step < 0) {
        mg_error(MG_EINVAL, "mg_schedule_lr: step %lld is negative; steps count from 0",
                 (long long)step);
        return NAN;
    }
    if (step < s->s.warmup || s->s.kind == MG_SCHEDULE_CONSTANT) return mg_lr_at(&s->s, step);
    mg_lr_schedule down = s->s;
    down.lr -= s->lr_min;
    return mg_lr_at(&down, step) + s->lr_min;
}

void mg_schedule_free(mg_schedule *s) { free(s); }
