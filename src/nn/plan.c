/* plan.c: parallel plans (see plan.h). */
#include "nn/plan.h"

#include <stdio.h>
#include <string.h>

#include "dist/mesh.h"
#include "status.h"

/* in mg_plan_kind's order */
static const char *const plan_names[] = {"dp", "tp", "fsdp", "pp", "sp", "tp+sp"};
#define NPLANS ((int)(sizeof plan_names / sizeof plan_names[0]))

int mg_plan_parse(const char *text, mg_plan *plan) {
    memset(plan, 0, sizeof *plan);
    const char *s = text ? text : "";
    for (;;) {
        size_t len = strcspn(s, ",");
        if (plan->ndim == MG_MAX_MESH_DIMS)
            return mg_error(MG_EINVAL, "parallel plan '%s' has more than %d entries (one per mesh dim)",
                            text, MG_MAX_MESH_DIMS);
        int kind = -1;
        for (int k = 0; k < NPLANS; k++)
            if (len == strlen(plan_names[k]) && strncmp(s, plan_names[k], len) == 0) kind = k;
        if (kind < 0)
            return mg_error(MG_EINVAL,
                            "parallel plan '%s': unknown entry '%.*s'; use dp, tp, fsdp, pp, sp or "
                            "tp+sp, one per mesh dim separated by commas (e.g. dp,tp)",
                            text, (int)len, s);
        plan->kind[plan->ndim++] = (mg_plan_kind)kind;
        if (s[len] == '\0') break;
        s += len + 1;
    }
    return MG_OK;
}

char *mg_plan_format(char *buf, size_t len, const mg_plan *plan) {
    size_t used = 0;
    if (len) buf[0] = '\0';
    for (int d = 0; d < plan->ndim; d++)
        used += snprintf(buf + used, len > used ? len - used : 0, "%s%s", d ? "," : "",
                         plan_names[plan->kind[d]]);
    return buf;
}

static int is_data_parallel(mg_plan_kind k) { return k == MG_PLAN_DP || k == MG_PLAN_FSDP; }

int mg_plan_data_degree(const mg_plan *plan, const mg_mesh *mesh) {
    int degree = 1;
    for (int d = 0; d < plan->ndim && d < mesh->ndim; d++)
        if (is_data_parallel(plan->kind[d])) degree *= mesh->shape[d];
    return degree;
}

int mg_plan_check(const mg_plan *plan, const mg_mesh *mesh, int64_t batch) {
    char pb[64], mb[64];
    mg_plan_format(pb, sizeof pb, plan);
    mg_mesh_format(mb, sizeof mb, mesh);
    if (plan->ndim != mesh->ndim)
        return mg_error(MG_EINVAL,
                        "parallel plan '%s' has %d entr%s but the mesh %s is %d-D: give one plan per "
                        "mesh dim (e.g. --parallel %s)",
                        pb, plan->ndim, plan->ndim == 1 ? "y" : "ies", mb, mesh->ndim,
                        mesh->ndim == 1 ? "dp" : mesh->ndim == 2 ? "dp,tp" : "dp,tp,tp");
    int data_dims = 0;
    for (int d = 0; d < plan->ndim; d++) data_dims += is_data_parallel(plan->kind[d]);
    if (data_dims > 1)
        return mg_error(MG_EINVAL,
                        "parallel plan '%s' on mesh %s splits the batch over %d mesh dims; at most one "
                        "dim may be dp or fsdp (use tp for the others, or a 1-D mesh)",
                        pb, mb, data_dims);
    int pp_dims = 0;
    for (int d = 0; d < plan->ndim; d++) pp_dims += plan->kind[d] == MG_PLAN_PP;
    if (pp_dims > 1)
        return mg_error(MG_EINVAL,
                        "parallel plan '%s' on mesh %s has %d pp dims; a pipeline runs along one "
                        "mesh dim (e.g. --mesh 2x2 --parallel pp,dp)", pb, mb, pp_dims);
    int degree = mg_plan_data_degree(plan, mesh);
    if (batch < degree)
        return mg_error(MG_EINVAL,
                        "global batch %lld is smaller than the data-parallel degree %d of plan '%s' on "
                        "mesh %s: every data-parallel rank needs at least one row (use --batch >= %d)",
                        (long long)batch, degree, pb, mb, degree);
    return MG_OK;
}

void mg_plan_linear(const mg_plan *plan, int layer, mg_placement *w_store, mg_placement *w_use,
                    mg_placement *b_store, mg_placement *b_use) {
    int column = layer % 2 == 0;
    for (int d = 0; d < plan->ndim; d++) {
        mg_placement ws = MG_REPLICATE, wu = MG_REPLICATE, bs = MG_REPLICATE, bu = MG_REPLICATE;
        switch (plan->kind[d]) {
        case MG_PLAN_DP:
        case MG_PLAN_SP: break;
        case MG_PLAN_TP:
        case MG_PLAN_TP_SP:
            /* column-parallel: outputs split; row-parallel: inputs split, output Partial */
            ws = wu = column ? MG_SHARD(0) : MG_SHARD(1);
            bs = bu = column ? MG_SHARD(0) : MG_REPLICATE;
            break;
        case MG_PLAN_FSDP:
            ws = bs = MG_SHARD(0); /* stored sharded, gathered to Replicate for use */
            break;
        case MG_PLAN_PP: break; /* a stage's parameters live on its own ranks' mesh */
        }
        if (w_store) w_store[d] = ws;
        if (w_use) w_use[d] = wu;
        if (b_store) b_store[d] = bs;
        if (b_use) b_use[d] = bu;
    }
}

void mg_plan_batch(const mg_plan *plan, mg_placement *p) {
    for (int d = 0; d < plan->ndim; d++)
        p[d] = is_data_parallel(plan->kind[d])     ? MG_SHARD(0)
               : plan->kind[d] == MG_PLAN_SP ? MG_SHARD(1)
                                                   : MG_REPLICATE;
}

int mg_plan_has_sequence(const mg_plan *plan) {
    for (int d = 0; d < plan->ndim; d++)
        if (plan->kind[d] == MG_PLAN_SP || plan->kind[d] == MG_PLAN_TP_SP) return 1;
    return 0;
}

static int degree_of(const mg_plan *plan, const mg_mesh *mesh, mg_plan_kind a, mg_plan_kind b) {
    int degree = 1;
    for (int d = 0; d < plan->ndim && d < mesh->ndim; d++)
        if (plan->kind[d] == a || plan->kind[d] == b) degree *= mesh->shape[d];
    return degree;
}

int mg_plan_tensor_degree(const mg_plan *plan, const mg_mesh *mesh) {
    return degree_of(plan, mesh, MG_PLAN_TP, MG_PLAN_TP_SP);
}

int mg_plan_sequence_degree(const mg_plan *plan, const mg_mesh *mesh) {
    return degree_of(plan, mesh, MG_PLAN_SP, MG_PLAN_TP_SP);
}

void mg_plan_gpt_param(const mg_plan *plan, mg_gpt_role role, mg_placement *store,
                       mg_placement *use) {
    for (int d = 0; d < plan->ndim; d++) {
        mg_placement s = MG_REPLICATE, u = MG_REPLICATE;
        switch (plan->kind[d]) {
        case MG_PLAN_DP:
        case MG_PLAN_PP: /* a stage's parameters live on its own ranks' mesh */
        case MG_PLAN_SP: break;
        case MG_PLAN_FSDP: s = MG_SHARD(0); break; /* gathered to Replicate for use */
        case MG_PLAN_TP:
        case MG_PLAN_TP_SP:
            s = u = role == MG_GPT_EMBEDDING || role == MG_GPT_COLUMN ? MG_SHARD(0)
                    : role == MG_GPT_ROW                            ? MG_SHARD(1)
                                                                    : MG_REPLICATE;
            break;
        }
        if (store) store[d] = s;
        if (use) use[d] = u;
    }
}

void mg_plan_residual(const mg_plan *plan, mg_placement *p) {
    for (int d = 0; d < plan->ndim; d++)
        p[d] = is_data_parallel(plan->kind[d])                              ? MG_SHARD(0)
               : plan->kind[d] == MG_PLAN_SP || plan->kind[d] == MG_PLAN_TP_SP ? MG_SHARD(1)
                                                                                : MG_REPLICATE;
}

void mg_plan_region_input(const mg_plan *plan, mg_placement *p) {
    mg_plan_residual(plan, p);
    for (int d = 0; d < plan->ndim; d++)
        if (plan->kind[d] == MG_PLAN_TP_SP) p[d] = MG_REPLICATE;
}

int mg_plan_pp_dim(const mg_plan *plan) {
    for (int d = 0; d < plan->ndim; d++)
        if (plan->kind[d] == MG_PLAN_PP) return d;
    return -1;
}

mg_plan mg_plan_without(const mg_plan *plan, int dim) {
    mg_plan out = {0};
    for (int d = 0; d < plan->ndim; d++)
        if (d != dim) out.kind[out.ndim++] = plan->kind[d];
    if (out.ndim == 0) out = (mg_plan){.ndim = 1, .kind = {MG_PLAN_DP}};
    return out;
}
