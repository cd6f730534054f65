/* test_pipeline_exec.c (MPI): the pipeline executor (nn/pipeline_exec.h)
 * against the run it replaces. An MLP of 6 layers (the bench step's kind:
 * Linear + ReLU, MSE) is cut into stages on every pp mesh the world allows
 * (pp; pp,dp, pp,tp and pp,fsdp on 2x2; pp,dp,tp needs 8 ranks: the train
 * test has it), and one step of every schedule (gpipe, 1f1b,
 * interleaved-1f1b with 2 virtual stages, zb-h1) runs on micro-batches of
 * different sizes (a torch.chunk split with a short last one, and a
 * --microbatch-rows list). The reference is the same model, every layer, on
 * the stage's own mesh, with gradient accumulation over the same
 * micro-batches (sums off but for the last). Losses and every gradient this
 * rank holds must be bitwise equal (the same kernels add in the same order:
 * the boundary's activation and gradient only travel) and the peak number
 * of micro-batches held per rank must be the verifier's (1f1b: at most the
 * ranks; gpipe: M). Also: mg_backward_with against mg_backward of
 * sum(y * g), the split backward (Bi, then W) against one backward, and
 * mg_pipeline_make's memory check against its formula summed over the
 * machine's ranks (made when they fit, refused when not). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/backward.h"
#include "dist/mesh.h"
#include "dist/pipeline_verify.h"
#include "nn/model.h"
#include "nn/pipeline.h"
#include "nn/pipeline_exec.h"
#include "pipeline_testutil.h"
#include "status.h"
#include "testutil.h"

#define BATCH 22
#define NW 9
static const int64_t widths[NW] = {10, 12, 9, 12, 8, 11, 7, 9, 6}; /* 8 layers */

/* The MLP of these widths, Linear + ReLU (bench step's kind), seed 5. */
static mg_model_config mlp_config(void) {
    return (mg_model_config){.kind = MG_MODEL_MLP, .rows = 1, .cols = widths[0], .hidden = 1,
                             .channels = 1, .classes = widths[NW - 1], .depth = NW - 1,
                             .widths = widths, .seed = 5};
}

typedef struct {
    mg_model *model;           /* a stage's, or the whole model (the reference) */
    const mg_pipeline *p;
    const float *x, *target;   /* (BATCH, w0), (BATCH, wN) */
    const int64_t *rows;
    int64_t *starts;
} job;

/* Rows [a, a + r) of a (BATCH, w) array on the stage mesh, batch-sharded. */
static mg_dtensor *rows_of(const job *j, const float *data, int64_t w, int mb) {
    return mg_pipeline_rows(j->p, data, j->starts[mb], 2, (int64_t[]){j->rows[mb], w});
}

/* The loss of micro-batch mb: its share (rows / batch) of the batch's mean. */
static mg_dtensor *loss_of(const job *j, mg_dtensor *out, int mb) {
    mg_dtensor *t = rows_of(j, j->target, widths[NW - 1], mb);
    mg_dtensor *l = t ? mg_mse_loss(out, t) : NULL;
    return l ? mg_scale(l, (float)j->rows[mb] / (float)BATCH) : NULL;
}

static mg_dtensor *stage_forward(void *ctx, int stage, int mb, mg_dtensor *x) {
    job *j = ctx;
    const mg_pipeline *p = j->p;
    int first = mg_pipeline_stage_first(p, stage), last = mg_pipeline_stage_first(p, stage + 1);
    mg_dtensor *in = stage == 0 ? rows_of(j, j->x, widths[0], mb) : x;
    mg_dtensor *out = in ? mg_model_forward_layers(j->model, first, last, in) : NULL;
    if (out && stage == p->split.stages - 1) out = loss_of(j, out, mb);
    return out;
}

static int stage_reduce(void *ctx, int stage) {
    (void)ctx, (void)stage;
    return MG_OK;
}

/* Micro-batch mb's loss on the whole model (the reference). */
static mg_dtensor *reference_loss(void *ctx, int mb) {
    job *j = ctx;
    mg_dtensor *x = rows_of(j, j->x, widths[0], mb);
    mg_dtensor *out = x ? mg_model_forward(j->model, x) : NULL;
    return out ? loss_of(j, out, mb) : NULL;
}

/* The layers' costs are the model's: its shape built once, without
 * parameters. 1, or 0. */
static int mlp_costs(const mg_mesh *mesh, const mg_plan *plan, mg_layer_cost *costs) {
    mg_model_config mc = mlp_config();
    unsigned char none[NW] = {0};
    mg_model whole;
    if (mg_model_build(&whole, &mc, mesh, plan, none) != MG_OK) return 0;
    int rc = mg_model_layer_costs(&whole, costs);
    mg_model_free(&whole);
    return rc == MG_OK;
}

static int run_config(const mg_test_pp_config *c, char *msg, size_t len) {
    int ok = 1;
    mg_mesh *mesh;
    mg_plan plan;
    mg_pp_options o;
    mg_layer_cost costs[NW];
    mg_pipeline p;
    if (!mg_test_pp_start(c, &mesh, &plan, &o, msg, len)) return 0;
    if (!mlp_costs(mesh, &plan, costs) ||
        mg_pipeline_make(&p, mesh, &plan, &o, costs, NW - 1, BATCH) != MG_OK) {
        snprintf(msg, len, "%s: %s", c->plan, mg_last_error());
        mg_mesh_free(mesh);
        return 0;
    }
    unsigned char held[NW] = {0};
    for (int i = 0; i < NW - 1; i++) held[i] = mg_pipeline_holds(&p, i);
    mg_model_config mc = mlp_config();
    mg_model stage, ref;
    int rc = mg_model_build(&stage, &mc, p.stage_mesh, &p.stage_plan, held);
    if (rc == MG_OK) rc = mg_model_build(&ref, &mc, p.stage_mesh, &p.stage_plan, NULL);
    float x[BATCH * 10], target[BATCH * 6];
    mg_test_fill(x, BATCH * widths[0], 41);
    mg_test_fill(target, BATCH * widths[NW - 1], 42);
    int64_t starts[MG_PP_LIST_MAX];
    for (int i = 0, a = 0; i < p.microbatches; a += (int)p.rows[i], i++) starts[i] = a;
    job pj = {&stage, &p, x, target, p.rows, starts};
    job rj = pj;
    rj.model = &ref;
    mg_pp_exec *e = rc == MG_OK ? mg_pp_exec_new(&p.schedule, p.rank, p.comm, p.stage_mesh) : NULL;
    mg_pp_stage_fns fns = {&pj, stage_forward, stage_reduce};
    mg_pp_exec_stats st;
    double ref_loss = 0;
    if (!e || mg_pp_exec_step(e, &fns, &st) != MG_OK) {
        snprintf(msg, len, "%s %s: %s", c->plan, mg_pp_kind_name(c->kind), mg_last_error());
        ok = 0;
    }
    if (ok && !mg_test_accumulate(p.microbatches, reference_loss, &rj, &ref_loss)) {
        snprintf(msg, len, "reference: %s", mg_last_error());
        ok = 0;
    }
    /* the loss reaches every pipeline rank; gradients compared where held */
    double loss = st.loss;
    if (ok && mg_pipeline_sum(&p, &loss, 1) != MG_OK) ok = 0;
    int bitwise = ok && (float)loss == (float)ref_loss;
    double worst = ok ? fabs(loss - ref_loss) / fabs(ref_loss) : 1;
    for (int k = 0; ok && k < 2 * (NW - 1); k++) {
        mg_dtensor *ga, *gb;
        int held_k = mg_test_pp_grads(&stage, &ref, k, &ga, &gb, msg, len);
        if (held_k < 0) ok = 0;
        if (held_k <= 0) continue;
        mg_test_diff d = mg_test_grad_diff(ga, gb);
        bitwise &= d.bitwise;
        if (d.per_element > worst) worst = d.per_element;
    }
    /* memory: the micro-batches held at once, as the verifier counts them */
    mg_pp_sim sim = {0};
    if (ok && mg_pp_simulate(&p.schedule, NULL, MG_PP_P2P_ASYNC, &sim) == MG_OK) {
        if (st.peak_live != sim.peak_live_rank[p.rank]) {
            snprintf(msg, len, "%s %s rank %d: held %d micro-batches at once, the verifier says %d",
                     c->plan, mg_pp_kind_name(c->kind), p.rank, st.peak_live,
                     sim.peak_live_rank[p.rank]);
            ok = 0;
        }
        mg_pp_sim_free(&sim);
    }
    /* an evaluation after the step, the forwards alone on an executor sharing
     * the step's arenas: the same loss, bit for bit; its micro-batches take
     * the step's arenas first (each goes back once its output is sent) */
    mg_pp_exec *ev = ok ? mg_pp_exec_new(&p.schedule, p.rank, p.comm, p.stage_mesh) : NULL;
    mg_pp_exec_stats est;
    if (ok) {
        int prev = mg_set_grad_enabled(0);
        int erc = ev ? mg_pp_exec_share_arenas(ev, e) : mg_last_code();
        if (erc == MG_OK) erc = mg_pp_exec_forward(ev, &fns, &est);
        mg_set_grad_enabled(prev);
        double eloss = est.loss;
        if (erc == MG_OK) erc = mg_pipeline_sum(&p, &eloss, 1);
        int most = st.arenas > p.microbatches * c->v ? st.arenas : p.microbatches * c->v;
        if (erc != MG_OK) {
            snprintf(msg, len, "%s %s evaluation: %s", c->plan, mg_pp_kind_name(c->kind),
                     mg_last_error());
            ok = 0;
        } else if ((float)eloss != (float)loss) {
            snprintf(msg, len, "%s %s: the evaluation's loss %.9g is not the step's %.9g", c->plan,
                     mg_pp_kind_name(c->kind), eloss, loss);
            ok = 0;
        } else if (est.arenas < st.arenas || est.arenas > most) {
            snprintf(msg, len, "%s %s rank %d: the evaluation made the step's %d arenas %d (not "
                     "shared, or more than its %d micro-batches)", c->plan,
                     mg_pp_kind_name(c->kind), p.rank, st.arenas, est.arenas, most);
            ok = 0;
        }
    }
    ok = mg_test_agree(ok);
    bitwise = mg_test_agree(bitwise);
    double all = mg_test_max_all(worst);
    if (ok && mg_rank() == 0)
        printf("  %-10s %-16s v=%d M=%d%s%s: loss %.9g, %s (worst relative %.2e)\n", c->plan,
               mg_pp_kind_name(c->kind), c->v, p.microbatches, c->rows ? " (rows list)" : "",
               c->layers ? " (--pp-layers 3,1,2..)" : "", ref_loss,
               bitwise ? "bitwise equal" : "NOT bitwise", all);
    if (ok && !bitwise) {
        snprintf(msg, len, "%s %s: losses or gradients differ from gradient accumulation "
                           "(worst relative %.2e)", c->plan, mg_pp_kind_name(c->kind), all);
        ok = 0;
    }
    mg_step_end();
    mg_pp_exec_free(ev);
    mg_pp_exec_free(e);
    mg_model_free(&stage);
    mg_model_free(&ref);
    mg_pipeline_free(&p);
    mg_mesh_free(mesh);
    return ok;
}

START_TEST(test_schedules_equal_accumulation) {
    int w = mg_world_size();
    static const int64_t rows[4] = {5, 7, 3, 7};
    static const char *const plans[] = {"pp,dp", "pp,tp", "fsdp,pp", NULL};
    mg_test_pp_config meshes[4];
    int nm = mg_test_pp_meshes(meshes, plans);
    if (w == 2) meshes[nm++] = (mg_test_pp_config){.ndim = 2, .shape = {2, 1}, .plan = "pp,dp"};
    char msg[512] = "";
    for (int i = 0; i < nm; i++)
        for (int k = 0; k < MG_PP_KIND_COUNT; k++) {
            mg_test_pp_config c = mg_test_pp_schedule(&meshes[i], k);
            int pp = c.plan[0] == 'p' ? c.shape[0] : c.shape[1];
            if (c.v * pp > NW - 1) continue; /* more stages than layers */
            c.m = k == MG_PP_INTERLEAVED_1F1B ? 2 * pp : 4;
            if (c.m < pp) c.m = pp;
            mg_assert_all(run_config(&c, msg, sizeof msg), "%s", msg);
            if (k == MG_PP_1F1B || k == MG_PP_ZB_H1) { /* and a rows list */
                c.rows = rows;
                c.nrows = 4;
                mg_assert_all(run_config(&c, msg, sizeof msg), "%s", msg);
            }
            if (k == MG_PP_INTERLEAVED_1F1B && i == 0 && c.v * pp <= 5) {
                /* uneven stages: 3, 1, then 2 each, the last taking what is left */
                int layers[5], left = NW - 1;
                for (int s = 0; s < c.v * pp; s++) {
                    layers[s] = s == c.v * pp - 1 ? left : s == 0 ? 3 : s == 1 ? 1 : 2;
                    left -= layers[s];
                }
                c.layers = layers;
                c.nlayers = c.v * pp;
                mg_assert_all(run_config(&c, msg, sizeof msg), "%s", msg);
            }
        }
}
END_TEST

/* What the machine's `ranks` ranks need by pipeline.h's formula, rank by
 * rank: the parameters (times `copies`) over the stage group, and the peak
 * of kept activations with one backward's temporaries over its non-data
 * ranks; each pipeline rank's need counted once per rank of its group. */
static double machine_need(const mg_pipeline *p, const mg_layer_cost *costs, int copies) {
    int dp = p->data_degree > 0 ? p->data_degree : 1, group = p->mesh->size / p->ranks;
    int tp = group / dp;
    mg_pp_machine m = {.flops = 1e9, .dp = dp};
    mg_pp_stage_costs c;
    mg_pp_sim sim;
    if (mg_pp_stage_costs_make(&c, costs, &p->split, &m, p->rows, p->microbatches) != MG_OK)
        return -1;
    if (mg_pp_simulate(&p->schedule, &c.cost, MG_PP_P2P_ASYNC, &sim) != MG_OK) {
        mg_pp_stage_costs_free(&c);
        return -1;
    }
    int64_t most = 0;
    for (int i = 0; i < p->microbatches; i++) most = c.rows[i] > most ? c.rows[i] : most;
    double sum = 0;
    int v = p->schedule.virtual_stages;
    for (int r = 0; r < p->ranks; r++) {
        double params = 0, work = 0;
        for (int s = r; s < p->split.stages; s += p->ranks) {
            params += c.param_bytes[s];
            work = c.saved_bytes[s] > work ? c.saved_bytes[s] : work;
        }
        /* the live micro-batches' arenas keep a backward's temporaries too
         * (about a forward's), a rank sending input gradients one arena more,
         * the evaluation's `ranks` micro-batches a stage the rest */
        double mb = work * most;
        int live = sim.peak_live_rank[r], sends = r > 0 || v > 1, eval = p->ranks * v;
        double acts = sim.peak_bytes[r] + live * mb + (sends ? 2 * mb : 0) +
                      (eval > live + sends ? (eval - live - sends) * mb : 0);
        sum += group * (params * copies / group + acts / tp);
    }
    mg_pp_sim_free(&sim);
    mg_pp_stage_costs_free(&c);
    return sum;
}

/* The memory check of mg_pipeline_make on a machine holding every rank: a
 * pipeline whose ranks together fit is made, one a little over is refused.
 * 1f1b's first rank keeps `ranks` micro-batches, its last one: the largest
 * rank's need times the ranks over-stated the machine's, refusing runs that
 * fit. */
START_TEST(test_memory_check) {
    int w = mg_world_size();
    static const char *const plans[] = {"pp,dp", "pp,tp", NULL};
    mg_test_pp_config meshes[3];
    int nm = mg_test_pp_meshes(meshes, plans);
    for (int i = 0; i < nm; i++) {
        mg_test_pp_config *k = &meshes[i];
        k->kind = MG_PP_1F1B, k->v = 1, k->m = 4;
        mg_mesh *mesh;
        mg_plan plan;
        mg_pp_options o;
        char msg[512] = "";
        mg_assert_all(mg_test_pp_start(k, &mesh, &plan, &o, msg, sizeof msg), "%s", msg);
        mg_layer_cost costs[NW];
        mg_assert_all(mlp_costs(mesh, &plan, costs), "%s", mg_last_error());
        o.node_ranks = w;
        o.param_copies = 4; /* AdamW */
        o.machine_bytes = 1e30;
        mg_pipeline p;
        mg_assert_all(mg_pipeline_make(&p, mesh, &plan, &o, costs, NW - 1, BATCH) == MG_OK,
                      "%s: %s", k->plan, mg_last_error());
        double need = machine_need(&p, costs, o.param_copies);
        mg_pipeline_free(&p);
        mg_assert_all(need > 0, "%s: no need computed", k->plan);
        o.machine_bytes = need * 1.001;
        int rc = mg_pipeline_make(&p, mesh, &plan, &o, costs, NW - 1, BATCH);
        mg_assert_all(rc == MG_OK, "%s on %d ranks needing %.0f bytes in all: refused by a "
                      "machine of %.0f: %s", k->plan, w, need, o.machine_bytes, mg_last_error());
        mg_pipeline_free(&p);
        o.machine_bytes = need * 0.999;
        rc = mg_pipeline_make(&p, mesh, &plan, &o, costs, NW - 1, BATCH);
        mg_assert_all(rc == MG_ENOMEM && strstr(mg_last_error(), "more than its"),
                      "%s on %d ranks needing %.0f bytes in all: a machine of %.0f took it (%d)",
                      k->plan, w, need, o.machine_bytes, rc);
        mg_clear_error();
        if (mg_rank() == 0)
            printf("  memory check %-6s on %d ranks: %.0f bytes in all, made at +0.1%%, refused "
                   "at -0.1%%\n", k->plan, w, need);
        mg_mesh_free(mesh);
    }
}
END_TEST

/* y = relu(x W1^T + b1) W2^T + b2 on a batch-sharded x that requires grad. */
static mg_dtensor *small_net(mg_dtensor *x, mg_dtensor **p) {
    mg_dtensor *h = mg_relu(mg_linear(x, p[0], p[1]));
    return mg_linear(h, p[2], p[3]);
}

START_TEST(test_backward_with_and_split) {
    int w = mg_world_size();
    mg_mesh *mesh = mg_mesh_new(1, &w);
    static const int64_t shapes[4][2] = {{5, 6}, {5, 0}, {3, 5}, {3, 0}};
    mg_dtensor *p[3][4], *x[3];
    for (int r = 0; r < 3; r++) { /* three copies: reference, seeded, split */
        for (int i = 0; i < 4; i++) {
            int nd = shapes[i][1] ? 2 : 1;
            mg_tensor *t = mg_tensor_new(nd, shapes[i]);
            mg_test_fill(mg_tensor_data(t), mg_tensor_numel(t), 60 + (uint64_t)i);
            p[r][i] = mg_distribute(mesh, t, (mg_placement[]){MG_REPLICATE}, 1);
            mg_set_requires_grad(p[r][i], 1);
            mg_tensor_free(t);
        }
        mg_tensor *t = mg_tensor_new(2, (int64_t[]){8, 6});
        mg_test_fill(mg_tensor_data(t), 48, 70);
        x[r] = mg_distribute(mesh, t, (mg_placement[]){MG_SHARD(0)}, 1);
        mg_set_requires_grad(x[r], 1);
        mg_tensor_free(t);
    }
    mg_tensor *gt = mg_tensor_new(2, (int64_t[]){8, 3});
    mg_test_fill(mg_tensor_data(gt), 24, 71);
    mg_dtensor *g = mg_distribute(mesh, gt, (mg_placement[]){MG_SHARD(0)}, 1);
    /* reference: loss = sum(y * g) */
    mg_dtensor *y0 = small_net(x[0], p[0]);
    mg_assert_all(mg_backward(mg_sum(mg_mul(y0, g))) == MG_OK, "%s", mg_last_error());
    /* seeded */
    mg_dtensor *y1 = small_net(x[1], p[1]);
    mg_assert_all(mg_backward_with(y1, g) == MG_OK, "%s", mg_last_error());
    mg_assert_all(mg_backward_with(y1, g) != MG_OK && strstr(mg_last_error(), "freed"),
                  "a second backward of one graph: %s", mg_last_error());
    /* split: Bi gives x its gradient and no weight one; W the rest */
    mg_dtensor *y2 = small_net(x[2], p[2]);
    mg_dtensor *now[1] = {x[2]};
    mg_backward_weights bw = {.now = now, .n_now = 1};
    mg_assert_all(mg_backward_input(y2, g, &bw) == MG_OK, "%s", mg_last_error());
    mg_assert_all(mg_grad(x[2]) != NULL, "Bi gave the input no gradient");
    int none = 1;
    for (int i = 0; i < 4; i++) none &= mg_grad(p[2][i]) == NULL;
    mg_assert_all(none && bw.n == 4, "Bi reached the weights (%d kept)", bw.n);
    mg_assert_all(mg_backward_weight(&bw) == MG_OK, "%s", mg_last_error());
    double worst = mg_test_grad_diff(mg_grad(x[1]), mg_grad(x[0])).per_element;
    for (int i = 0; i < 4; i++) {
        double d = mg_test_grad_diff(mg_grad(p[1][i]), mg_grad(p[0][i])).per_element;
        worst = d > worst ? d : worst;
    }
    mg_assert_all(worst < 1e-6, "mg_backward_with differs from the backward of sum(y * g) by %.2e",
                  worst);
    int split_same = mg_test_grad_diff(mg_grad(x[2]), mg_grad(x[1])).bitwise;
    for (int i = 0; i < 4; i++) split_same &= mg_test_grad_diff(mg_grad(p[2][i]), mg_grad(p[1][i])).bitwise;
    mg_assert_all(split_same, "Bi then W is not bitwise one backward");
    /* a gradient of the wrong shape is refused */
    mg_dtensor *y3 = small_net(x[1], p[1]);
    mg_assert_all(mg_backward_with(y3, x[1]) != MG_OK && strstr(mg_last_error(), "(8, 6)"),
                  "%s", mg_last_error());
    mg_step_end();
    mg_dtensor_free(g);
    mg_tensor_free(gt);
    for (int r = 0; r < 3; r++) {
        mg_dtensor_free(x[r]);
        for (int i = 0; i < 4; i++) mg_dtensor_free(p[r][i]);
    }
    mg_mesh_free(mesh);
}
END_TEST

static Suite *make_suite(void) {
    const TTest *tests[] = {test_backward_with_and_split, test_schedules_equal_accumulation,
                            test_memory_check, NULL};
    return mg_test_suite("pipeline_exec", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
