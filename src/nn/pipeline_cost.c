/* pipeline_cost.c: layer costs of the MLP, the stage split (balanced or
 * given), and the per-stage costs of a pipeline plan (see pipeline_cost.h).
 * Exports: mg_layer_costs_mlp, mg_pp_split_make, mg_pp_stage_costs_make,
 * mg_pp_stage_costs_free. */
#include "nn/pipeline_cost.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

int mg_layer_costs_mlp(const int64_t *widths, int n, mg_layer_cost *layers) {
    if (n < 2) return mg_error(MG_EINVAL, "an MLP needs at least 2 widths (one layer); got %d", n);
    for (int i = 0; i < n; i++)
        if (widths[i] < 1)
            return mg_error(MG_EINVAL, "MLP width %d is %lld; widths must be >= 1", i,
                            (long long)widths[i]);
    for (int i = 0; i + 1 < n; i++) {
        double in = (double)widths[i], out = (double)widths[i + 1];
        int last = i + 2 == n;
        mg_layer_cost *l = &layers[i];
        memset(l, 0, sizeof *l);
        snprintf(l->name, sizeof l->name, "fc%d", i + 1);
        l->tie = MG_LAYER_ALONE;
        /* y = x W^T + b, then ReLU (or, last, the loss): per row */
        l->forward_flops = 2 * in * out + out + out;
        l->backward_input_flops = (i == 0 ? 0 : 2 * in * out) + out;
        l->backward_weight_flops = 2 * in * out + out;
        l->out_floats = out;
        /* x for dW; the ReLU's input (last: the prediction and the target) */
        l->saved_floats = in + (last ? 2 * out : out);
        l->params = in * out + out;
        l->gemm_in = widths[i];
        l->gemm_out = widths[i + 1];
    }
    return MG_OK;
}

/* ---- the split ---------------------------------------------------------------- */

/* Units: layers tied together. unit_first[u] is the first layer of unit u;
 * returns the number of units. */
static int make_units(const mg_layer_cost *layers, int n, int *unit_first) {
    int u = 0;
    for (int i = 0; i < n; i++) {
        int joins_prev = i > 0 && (layers[i].tie == MG_LAYER_WITH_PREV ||
                                   layers[i - 1].tie == MG_LAYER_WITH_NEXT);
        if (!joins_prev) unit_first[u++] = i;
    }
    unit_first[u] = n;
    return u;
}

static double layer_flops(const mg_layer_cost *l) {
    return l->forward_flops + l->backward_input_flops + l->backward_weight_flops;
}

/* Balanced: the cut of U units into S stages with the smallest largest stage
 * (prefix sums P; best[s][u]: the best largest stage of the first u units in
 * s stages). Ties: the later boundary, so later stages take the extra. */
static int balance(const double *P, int U, int S, int *cut /* S + 1 */) {
    double *best = malloc((size_t)(S + 1) * (size_t)(U + 1) * sizeof *best);
    int *from = malloc((size_t)(S + 1) * (size_t)(U + 1) * sizeof *from);
    if (!best || !from) {
        free(best);
        free(from);
        return mg_error(MG_ENOMEM, "pipeline stages: out of memory");
    }
#define AT(a, s, u) a[(size_t)(s) * (size_t)(U + 1) + (size_t)(u)]
    for (int u = 0; u <= U; u++) AT(best, 1, u) = P[u];
    for (int s = 2; s <= S; s++)
        for (int u = s; u <= U; u++) {
            AT(best, s, u) = DBL_MAX;
            for (int j = s - 1; j < u; j++) {
                double m = AT(best, s - 1, j) > P[u] - P[j] ? AT(best, s - 1, j) : P[u] - P[j];
                if (m < AT(best, s, u)) {
                    AT(best, s, u) = m;
                    AT(from, s, u) = j;
                }
            }
        }
    cut[S] = U;
    for (int s = S; s > 1; s--) cut[s - 1] = AT(from, s, cut[s]);
    cut[0] = 0;
#undef AT
    free(best);
    free(from);
    return MG_OK;
}

int mg_pp_split_make(mg_pp_split *split, const mg_layer_cost *layers, int n, int ranks, int v,
                     const int *counts, int ncounts) {
    memset(split, 0, sizeof *split);
    int S = ranks * v;
    if (ranks < 1 || v < 1 || S > MG_PP_MAX_STAGES)
        return mg_error(MG_EINVAL, "pipeline stages: %d ranks x %d virtual stages: give 1 to %d "
                                   "stages in all", ranks, v, MG_PP_MAX_STAGES);
    int *unit_first = malloc((size_t)(n + 1) * sizeof *unit_first);
    double *P = malloc((size_t)(n + 1) * sizeof *P);
    int *cut = malloc((size_t)(S + 1) * sizeof *cut);
    int rc = !unit_first || !P || !cut ? mg_error(MG_ENOMEM, "pipeline stages: out of memory") : MG_OK;
    int U = rc == MG_OK ? make_units(layers, n, unit_first) : 0;
    char stages_text[80];
    if (v > 1)
        snprintf(stages_text, sizeof stages_text, "%d ranks x %d virtual stages = %d stages", ranks,
                 v, S);
    else
        snprintf(stages_text, sizeof stages_text, "%d pipeline stages", S);
    if (rc == MG_OK && counts) {
        int sum = 0, zero = -1;
        for (int i = 0; i < ncounts; i++) {
            sum += counts[i];
            if (counts[i] < 1 && zero < 0) zero = i;
        }
        if (ncounts != S)
            rc = mg_error(MG_EINVAL, "--pp-layers has %d entries but there are %s: give one "
                                     "layer count per stage", ncounts, stages_text);
        else if (zero >= 0)
            rc = mg_error(MG_EINVAL, "--pp-layers gives stage %d %d layers: every stage needs at "
                                     "least one", zero, counts[zero]);
        else if (sum != U)
            rc = mg_error(MG_EINVAL, "--pp-layers sums to %d layers but the model has %d: the "
                                     "counts must add up to the model's layers", sum, U);
        else {
            cut[0] = 0;
            for (int s = 0; s < S; s++) cut[s + 1] = cut[s] + counts[s];
        }
    } else if (rc == MG_OK) {
        if (S > U)
            rc = mg_error(MG_EINVAL, "%s need at least one layer each, but the model has %d "
                                     "layers: use fewer pipeline ranks%s or a deeper model",
                          stages_text, U, v > 1 ? " or virtual stages" : "");
        else if (v > 1 && U % S != 0)
            rc = mg_error(MG_EINVAL, "%s do not divide the model's %d layers: use a layer "
                                     "count that %d divides, other --virtual-stages, or "
                                     "--pp-layers", stages_text, U, S);
        else {
            double *flops = P; /* prefix sums of the units' compute */
            flops[0] = 0;
            for (int u = 0; u < U; u++) {
                double f = 0;
                for (int i = unit_first[u]; i < unit_first[u + 1]; i++) f += layer_flops(&layers[i]);
                flops[u + 1] = flops[u] + f;
            }
            rc = balance(flops, U, S, cut);
        }
    }
    if (rc == MG_OK) {
        split->stages = S;
        split->units = U;
        split->layers = n;
        for (int s = 0; s <= S; s++) split->first[s] = unit_first[cut[s]];
    }
    free(unit_first);
    free(P);
    free(cut);
    return rc;
}

/* ---- per-stage costs ----------------------------------------------------------- */

void mg_pp_stage_costs_free(mg_pp_stage_costs *c) {
    free(c->forward);
    free(c->backward_input);
    free(c->backward_weight);
    free(c->act_bytes);
    free(c->saved_bytes);
    free(c->reduce);
    free(c->param_bytes);
    free(c->rows);
    memset(c, 0, sizeof *c);
}

int mg_pp_stage_costs_make(mg_pp_stage_costs *c, const mg_layer_cost *layers,
                           const mg_pp_split *split, const mg_pp_machine *m, const int64_t *rows,
                           int microbatches) {
    memset(c, 0, sizeof *c);
    size_t S = (size_t)split->stages;
    c->forward = calloc(S, sizeof(double));
    c->backward_input = calloc(S, sizeof(double));
    c->backward_weight = calloc(S, sizeof(double));
    c->act_bytes = calloc(S, sizeof(double));
    c->saved_bytes = calloc(S, sizeof(double));
    c->reduce = calloc(S, sizeof(double));
    c->param_bytes = calloc(S, sizeof(double));
    c->rows = calloc((size_t)microbatches, sizeof(int64_t));
    if (!c->forward || !c->backward_input || !c->backward_weight || !c->act_bytes ||
        !c->saved_bytes || !c->reduce || !c->param_bytes || !c->rows) {
        mg_pp_stage_costs_free(c);
        return mg_error(MG_ENOMEM, "pipeline costs: out of memory");
    }
    int dp = m->dp > 1 ? m->dp : 1;
    for (size_t s = 0; s < S; s++) {
        for (int i = split->first[s]; i < split->first[s + 1]; i++) {
            const mg_layer_cost *l = &layers[i];
            c->forward[s] += l->forward_flops / m->flops;
            c->backward_input[s] += l->backward_input_flops / m->flops;
            c->backward_weight[s] += l->backward_weight_flops / m->flops;
            c->saved_bytes[s] += 4.0 * l->saved_floats;
            c->param_bytes[s] += 4.0 * l->params;
            c->act_bytes[s] = 4.0 * l->out_floats; /* the stage's last layer's output */
        }
        if (dp > 1) /* a ring all-reduce of the stage's gradients over dp ranks */
            c->reduce[s] = m->latency + (m->bandwidth > 0 ? 2.0 * (dp - 1) / dp * c->param_bytes[s] /
                                                                m->bandwidth
                                                          : 0.0);
    }
    for (int i = 0; i < microbatches; i++) c->rows[i] = (rows[i] + dp - 1) / dp;
    c->cost = (mg_pp_cost){.forward = c->forward,
                           .backward_input = c->backward_input,
                           .backward_weight = c->backward_weight,
                           .act_bytes = c->act_bytes,
                           .saved_bytes = c->saved_bytes,
                           .reduce = c->reduce,
                           .rows = c->rows,
                           .latency = m->latency,
                           .bandwidth = m->bandwidth,
                           .core_share = m->core_share};
    return MG_OK;
}
