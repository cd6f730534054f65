/* pipeline.c: pp as a plan on a mesh dim (see pipeline.h). */
#include "nn/pipeline.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "context.h"
#include "dist/dtensor.h"
#include "hash.h"
#include "dist/mesh.h"
#include "dist/pipeline_verify.h"
#include "ops/ops_state.h"
#include "status.h"

void mg_pp_options_defaults(mg_pp_options *o) {
    memset(o, 0, sizeof *o);
    o->kind = MG_PP_1F1B;
    o->virtual_stages = 1;
    o->node_ranks = 1;
    o->param_copies = 2;
}

int mg_pp_int_list_parse(const char *text, int64_t *out, int max, int64_t lo) {
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno == ERANGE || v < lo || v > INT_MAX || n == max ||
            (*end && *end != ',') || (*end && !end[1]))
            return -1;
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    return n;
}

int mg_pp_int_list(const char *flag, const char *text, int64_t *out, int max, int64_t lo) {
    int n = mg_pp_int_list_parse(text, out, max, lo);
    if (n > 0) return n;
    if (n == 0) return mg_error(MG_EINVAL, "%s is empty: give counts separated by commas", flag);
    if (max == 1)
        return mg_error(MG_EINVAL, "%s '%s' is not a count from %lld to %d", flag, text,
                        (long long)lo, INT_MAX);
    return mg_error(MG_EINVAL, "%s '%s' is not a list of at most %d counts from %lld to "
                               "%d separated by commas (e.g. 3,3,2)", flag, text, max,
                    (long long)lo, INT_MAX);
}

void mg_pipeline_free(mg_pipeline *p) {
    if (!p) return;
    mg_mesh_free(p->stage_mesh);
    mg_pp_schedule_free(&p->schedule);
    free(p->rows);
    memset(p, 0, sizeof *p);
}

/* The rows of each micro-batch: the list given, or the batch split. */
static int micro_rows(mg_pipeline *p, const mg_pp_options *o, int64_t batch) {
    int m = o->nrows ? o->nrows : o->microbatches ? o->microbatches : 8;
    if (o->nrows && o->microbatches && o->microbatches != o->nrows)
        return mg_error(MG_EINVAL, "--microbatches %d but --microbatch-rows lists %d micro-batches: "
                                   "give one of them", o->microbatches, o->nrows);
    if (m > MG_PP_MAX_MICROBATCHES)
        return mg_error(MG_EINVAL, "--microbatches %d: at most %d", m, MG_PP_MAX_MICROBATCHES);
    p->microbatches = m;
    p->rows = calloc((size_t)m, sizeof *p->rows);
    if (!p->rows) return mg_error(MG_ENOMEM, "pipeline: out of memory");
    if (o->nrows) {
        int64_t sum = 0;
        for (int i = 0; i < m; i++) sum += p->rows[i] = o->rows[i];
        if (sum != batch)
            return mg_error(MG_EINVAL, "--microbatch-rows sums to %lld rows but the batch has %lld: "
                                       "the micro-batches must add up to the batch",
                            (long long)sum, (long long)batch);
    } else {
        int rc = mg_pp_microbatch_rows(batch, m, p->rows);
        if (rc != MG_OK) return rc;
    }
    for (int i = 0; i < m; i++)
        if (p->rows[i] < p->data_degree)
            return mg_error(MG_EINVAL, "micro-batch %d has %lld rows, fewer than the %d "
                                       "data-parallel ranks that share it: use fewer micro-batches "
                                       "or a larger batch", i, (long long)p->rows[i],
                            p->data_degree);
    return MG_OK;
}

/* Ascending doubles, for qsort. */
static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The memory of each pipeline rank: its stages' parameters (with their
 * gradients and optimizer state) and the activations they keep at the
 * schedule's simulated peak. Both are split as evenly as any plan of the
 * stage group could split them (parameters over all its ranks, activations
 * over all but the data-parallel ones, which take rows), so the need is never
 * over-stated; nor is the machine's: its ranks are taken to be the ones that
 * need the least (1f1b's first rank keeps `ranks` micro-batches, its last
 * one), not as many copies of the largest. A run over the machine's memory is
 * refused before anything is made (a --batch of 10^6 windows would otherwise
 * fill the memory for minutes until the kernel kills the job). */
/* The activation memory of pipeline rank r (before any tensor parallel split):
 * what its micro-batches keep at the schedule's simulated peak, and what the
 * executor's arenas keep beyond it. A micro-batch's arena is reused from a
 * pool and keeps its high-water: its forward's and then its backward's
 * temporaries, about as much again (the executor's measured mb_bytes), so
 * every live micro-batch counts twice; a rank that sends input gradients
 * holds one arena more while the last is in flight; and the evaluation's
 * `ranks` micro-batches a stage (forwards only, each at most the largest
 * training micro-batch: mg_pipeline_eval_rows) take the same arenas and make
 * up the rest. The program's own memory (its libraries, MPI's buffers) is
 * not counted: the prediction sits that much under the ranks' peak RSS
 * (docs/PERFORMANCE.md "Pipelines"). */
static double activation_bytes(const mg_pipeline *p, const mg_pp_stage_costs *c,
                               const mg_pp_sim *sim, int r, int64_t most_here) {
    int v = p->schedule.virtual_stages;
    double mb = 0; /* the largest micro-batch's forward on this rank */
    for (int s = r; s < p->split.stages; s += p->ranks) {
        double b = c->saved_bytes[s] * (double)most_here;
        mb = b > mb ? b : mb;
    }
    int live = sim->peak_live_rank[r], sends = r > 0 || v > 1;
    int arenas = live + sends, eval = p->ranks * v;
    return sim->peak_bytes[r] + live * mb + (sends ? 2 * mb : 0) +
           (eval > arenas ? (eval - arenas) * mb : 0);
}

static int check_memory(const mg_pipeline *p, const mg_pp_options *o, const mg_layer_cost *layers) {
    if (!(o->machine_bytes > 0)) return MG_OK;
    int group = p->mesh->size / p->ranks, tp = group / (p->data_degree > 0 ? p->data_degree : 1);
    mg_pp_machine m = {.flops = 1e9, .dp = p->data_degree};
    mg_pp_stage_costs c;
    mg_pp_sim sim;
    double *needs = malloc((size_t)p->ranks * sizeof *needs);
    if (!needs) return mg_error(MG_ENOMEM, "pipeline: out of memory");
    int rc = mg_pp_stage_costs_make(&c, layers, &p->split, &m, p->rows, p->microbatches);
    if (rc != MG_OK) {
        free(needs);
        return rc;
    }
    if ((rc = mg_pp_simulate(&p->schedule, &c.cost, MG_PP_P2P_ASYNC, &sim)) != MG_OK) {
        mg_pp_stage_costs_free(&c);
        free(needs);
        return rc;
    }
    int64_t most = 0, most_here = 0; /* rows of the largest micro-batch, in all and a rank's */
    for (int i = 0; i < p->microbatches; i++) {
        most = p->rows[i] > most ? p->rows[i] : most;
        most_here = c.rows[i] > most_here ? c.rows[i] : most_here;
    }
    double need = 0, params = 0, acts = 0;
    int worst = 0;
    for (int r = 0; r < p->ranks; r++) {
        double pb = 0;
        for (int s = r; s < p->split.stages; s += p->ranks) pb += c.param_bytes[s];
        pb *= (double)o->param_copies / group;
        double ab = activation_bytes(p, &c, &sim, r, most_here) / (tp > 0 ? tp : 1);
        needs[r] = pb + ab;
        if (pb + ab > need) need = pb + ab, params = pb, acts = ab, worst = r;
    }
    int live = sim.peak_live_rank[worst];
    mg_pp_sim_free(&sim);
    mg_pp_stage_costs_free(&c);
    /* this machine's ranks: the on_node smallest of the mesh's (each pipeline
     * rank's need `group` times) */
    int on_node = o->node_ranks > 0 ? o->node_ranks : 1;
    qsort(needs, (size_t)p->ranks, sizeof *needs, by_value);
    double node = 0;
    for (int r = 0, left = on_node; r < p->ranks && left > 0; r++) {
        int k = left < group ? left : group;
        node += k * needs[r];
        left -= k;
    }
    free(needs);
    if (node <= o->machine_bytes) return MG_OK;
    const double G = 1073741824.0;
    return mg_error(MG_ENOMEM, "pipeline rank %d needs about %.1f GiB (parameters with their "
                    "gradients and optimizer state %.1f; the activations of %d micro-batch%s of up "
                    "to %lld rows, with their backwards' temporaries, %.1f), %.1f GiB for this "
                    "machine's %d rank%s, more than its %.1f GiB of memory: use a smaller --batch, more --microbatches, a schedule "
                    "that keeps fewer micro-batches (gpipe keeps all of them, 1f1b at most the "
                    "stages') or a smaller model", worst, need / G, params / G, live,
                    live == 1 ? "" : "es", (long long)most, acts / G, node / G, on_node,
                    on_node == 1 ? "" : "s", o->machine_bytes / G);
}

int mg_pipeline_make(mg_pipeline *p, const mg_mesh *mesh, const mg_plan *plan,
                     const mg_pp_options *o, const mg_layer_cost *layers, int nlayers,
                     int64_t batch) {
    memset(p, 0, sizeof *p);
    p->dim = mg_plan_pp_dim(plan);
    if (p->dim < 0 || plan->ndim != mesh->ndim)
        return mg_error(MG_EINVAL, "pipeline: the plan has no pp entry for the mesh's dims");
    p->mesh = mesh;
    p->ranks = mesh->shape[p->dim];
    p->rank = mesh->coord[p->dim];
    p->comm = mesh->dim_comm[p->dim];
    p->stage_plan = mg_plan_without(plan, p->dim);
    p->data_degree = mg_plan_data_degree(plan, mesh);
    int rc = micro_rows(p, o, batch);
    if (rc == MG_OK)
        rc = mg_pp_split_make(&p->split, layers, nlayers, p->ranks, o->virtual_stages,
                              o->nlayers ? o->layers : NULL, o->nlayers);
    if (rc == MG_OK)
        rc = mg_pp_schedule_make(&p->schedule, o->kind, p->ranks, o->virtual_stages,
                                 p->microbatches);
    if (rc == MG_OK) rc = mg_pp_verify(&p->schedule, NULL, NULL);
    if (rc == MG_OK) rc = check_memory(p, o, layers);
    if (rc != MG_OK) { /* decided from the flags alone: the same on every rank */
        mg_pipeline_free(p);
        return rc;
    }
    p->stage_mesh = mg_mesh_sub(mesh, p->dim);
    if (!p->stage_mesh) {
        rc = mg_last_code();
        mg_pipeline_free(p);
    }
    return rc;
}

bool mg_pipeline_holds(const mg_pipeline *p, int layer) {
    for (int s = p->rank; s < p->split.stages; s += p->ranks)
        if (layer >= p->split.first[s] && layer < p->split.first[s + 1]) return true;
    return false;
}

mg_dtensor *mg_pipeline_rows(const mg_pipeline *p, const float *data, int64_t start, int ndim,
                             const int64_t *shape) {
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(&p->stage_plan, bp);
    mg_spec spec;
    if (mg_spec_make(&spec, p->stage_mesh, bp, p->stage_mesh->ndim, ndim, shape, "micro-batch") !=
        MG_OK)
        return NULL;
    int64_t local[MG_MAX_DIMS], off[MG_MAX_DIMS];
    mg_spec_local(&spec, NULL, local, off);
    mg_tensor *t = mg_tensor_alloc(mg_step_arena(), ndim, local);
    if (!t) return NULL;
    int64_t row = t->numel / (local[0] > 0 ? local[0] : 1);
    mg_backend *be = mg_backend_of(t);
    if (t->numel > 0) be->iface->from_host(be->context, t->data, data + (start + off[0]) * row, t->numel);
    return mg_dtensor_make(&spec, t, mg_step_arena());
}

int64_t mg_pipeline_eval_rows(const mg_pipeline *p) {
    int64_t most = 0;
    for (int i = 0; i < p->microbatches; i++) most = p->rows[i] > most ? p->rows[i] : most;
    return most * p->ranks;
}

double mg_pipeline_step_loss(double loss) {
    mg_ops_state *c = mg_ops();
    if (!mg_get_deterministic()) return loss;
    if (c->det_loss_rows == 0) return 0;
    return (float)(mg_exact_value(&c->det_loss) / (double)c->det_loss_rows);
}

int mg_pipeline_sum(const mg_pipeline *p, double *v, int n) {
    float buf[2 * 16]; /* each double as hi + lo, so no precision is lost */
    for (int k = 0; k < n; k += 16) {
        int m = n - k < 16 ? n - k : 16;
        for (int i = 0; i < m; i++) {
            buf[2 * i] = (float)v[k + i];
            buf[2 * i + 1] = (float)(v[k + i] - (double)buf[2 * i]);
        }
        int rc = mg_comm_all_reduce(p->comm, buf, 2 * m, MG_REDUCE_SUM);
        if (rc != MG_OK) return rc;
        for (int i = 0; i < m; i++) v[k + i] = (double)buf[2 * i] + (double)buf[2 * i + 1];
    }
    return MG_OK;
}

int mg_pipeline_update(const mg_pipeline *p, mg_param_table *params, mg_param_table *counted,
                       mg_optimizer *opt, double lr, double clip, double *norm) {
    int rc = MG_OK;
    *norm = 0;
    if (clip > 0 && mg_get_deterministic()) {
        rc = mg_grad_norm_exact(counted ? counted : params, p->comm, norm);
        if (rc == MG_OK) mg_clip_grads_to(params, clip, *norm);
    } else if (clip > 0) { /* the stages' squared norms add up */
        double stage_norm = 0;
        rc = mg_grad_norm(counted ? counted : params, &stage_norm);
        double sq = stage_norm * stage_norm;
        if (rc == MG_OK) rc = mg_pipeline_sum(p, &sq, 1);
        *norm = sqrt(sq);
        if (rc == MG_OK) mg_clip_grads_to(params, clip, *norm);
    }
    if (rc == MG_OK) rc = mg_optimizer_step(opt, params, (float)lr);
    return rc;
}

/* h as two floats' bits, to a pipeline rank or from one. */
static int pass_hash(const mg_pipeline *p, uint64_t *h, int peer, int send) {
    float w[2];
    memcpy(w, h, sizeof w);
    mg_p2p_request req;
    int rc = send ? mg_comm_isend(p->comm, w, 2, peer, &req) : mg_comm_irecv(p->comm, w, 2, peer, &req);
    if (rc == MG_OK) rc = mg_comm_p2p_wait(p->comm, &req);
    if (!send) memcpy(h, w, sizeof w);
    return rc;
}

int mg_pipeline_checksum(const mg_pipeline *p, int (*hash)(void *ctx, int stage, uint64_t *h),
                         void *ctx, uint64_t *out) {
    uint64_t h = MG_HASH_START;
    int S = p->split.stages, rc = MG_OK;
    for (int s = 0; s < S && rc == MG_OK; s++) {
        int owner = s % p->ranks, prev = (s + p->ranks - 1) % p->ranks;
        if (owner != p->rank) continue;
        if (s > 0 && prev != p->rank) rc = pass_hash(p, &h, prev, 0);
        if (rc == MG_OK) rc = hash(ctx, s, &h);
        if (rc == MG_OK && s + 1 < S && (s + 1) % p->ranks != p->rank)
            rc = pass_hash(p, &h, (s + 1) % p->ranks, 1);
    }
    float w[2];
    memcpy(w, &h, sizeof w);
    if (rc == MG_OK) rc = mg_comm_broadcast(p->comm, w, 2, (S - 1) % p->ranks);
    memcpy(out, w, sizeof w);
    return rc;
}
