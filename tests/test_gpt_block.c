/* test_gpt_block.c: a GPT block on every kind of parallelism, against plain
 * single-rank C loops (not meshgrad ops).
 *
 * The block: token embedding + learned positions, layer norm, qkv linear
 * (rows of head h: its q, k, v side by side, so a split of the rows is a split
 * of the heads), narrow into q, k, v, heads by reshape and permute, causal
 * attention, projection, residual, layer norm, GELU MLP, residual, final layer
 * norm, output head tied to the embedding table, cross-entropy over B * T.
 *
 * Each run makes two forward/backward pairs in one step (two micro-batches:
 * the gradients add up, as in PyTorch) on a mesh of the world size with one
 * plan per mesh dim: dp (batch sharded), tp (Megatron: qkv and fc
 * column-parallel, proj and fc2 row-parallel, table vocab-parallel so the head
 * is loss-parallel), vocab (the table alone), seq (ids sharded on T), fsdp
 * (every parameter Shard(0)); 1-D meshes and 2-D combinations. Both losses and
 * every parameter's gradient must match the reference (gpt_reference.h), computed in double.
 * MG_GPT_PAIRS=1 runs one pair per step (an engine that refuses a second
 * backward before mg_step_end fails the default two). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_reference.h"
#include "meshgrad.h"
#include "testutil.h"

/* ---- the same block with meshgrad ops ------------------------------------------------ */

static mg_dtensor *gpt_loss(mg_dtensor **w, mg_dtensor *ids, mg_dtensor *targets) {
    mg_dtensor *x = mg_add(mg_embedding(ids, w[WTE]), w[WPE]); /* (B, T, C) */
    mg_dtensor *qkv = mg_linear(mg_layer_norm(x, w[LN1W], w[LN1B], EPS), w[WQKV], w[BQKV]);
    qkv = mg_reshape(qkv, 4, (int64_t[]){B, T, H, 3 * D});
    mg_dtensor *head[3];
    for (int s = 0; s < 3; s++) /* q, k, v: (B, H, T, D) */
        head[s] = mg_permute(mg_narrow(qkv, 3, s * D, D), (int[]){0, 2, 1, 3});
    mg_dtensor *a = mg_attention(head[0], head[1], head[2], 1);
    a = mg_reshape(mg_permute(a, (int[]){0, 2, 1, 3}), 3, (int64_t[]){B, T, C});
    x = mg_add(x, mg_linear(a, w[WPROJ], w[BPROJ]));
    mg_dtensor *u = mg_linear(mg_layer_norm(x, w[LN2W], w[LN2B], EPS), w[WFC], w[BFC]);
    x = mg_add(x, mg_linear(mg_gelu(u), w[WFC2], w[BFC2]));
    mg_dtensor *logits = mg_linear(mg_layer_norm(x, w[LNFW], w[LNFB], EPS), w[WTE], NULL);
    return mg_cross_entropy(logits, targets);
}

/* ---- plans ------------------------------------------------------------------------------ */

typedef enum { DP, TP, VOCAB, SEQ, FSDP } plan;
static const char *const plan_names[] = {"dp", "tp", "vocab", "seq", "fsdp"};

static mg_placement place_param(plan p, int i) {
    switch (p) {
    case TP:
        if (i == WQKV || i == BQKV || i == WFC || i == BFC || i == WTE) return MG_SHARD(0);
        if (i == WPROJ || i == WFC2) return MG_SHARD(1);
        return MG_REPLICATE;
    case VOCAB: return i == WTE ? MG_SHARD(0) : MG_REPLICATE;
    case FSDP: return MG_SHARD(0);
    default: return MG_REPLICATE;
    }
}

static mg_placement place_data(plan p) {
    return p == DP || p == FSDP ? MG_SHARD(0) : p == SEQ ? MG_SHARD(1) : MG_REPLICATE;
}

static mg_dtensor *data_tensor(const mg_mesh *mesh, const float *v, const mg_placement *p) {
    mg_tensor *t = mg_tensor_from_data(2, (int64_t[]){B, T}, v);
    mg_dtensor *d = mg_distribute(mesh, t, p, mg_mesh_ndim(mesh));
    mg_tensor_free(t);
    return d;
}

/* the block on mesh `shape` with plans[m] on mesh dim m; every loss and gradient
 * against the reference */
static void check_plans(int nd, const int *shape, const plan *plans) {
    char what[96];
    int used = snprintf(what, sizeof what, "mesh %d", shape[0]);
    for (int m = 1; m < nd; m++) used += snprintf(what + used, sizeof what - used, "x%d", shape[m]);
    used += snprintf(what + used, sizeof what - used, " plan");
    for (int m = 0; m < nd; m++)
        used +=
            snprintf(what + used, sizeof what - used, "%s%s", m ? "," : " ", plan_names[plans[m]]);
    mg_mesh *mesh = mg_mesh_new(nd, shape);
    mg_assert_all(mesh != NULL, "%s: %s", what, mg_last_error());
    mg_dtensor *w[NP];
    for (int i = 0; i < NP; i++) {
        mg_placement p[MG_MAX_MESH_DIMS];
        for (int m = 0; m < nd; m++) p[m] = place_param(plans[m], i);
        mg_tensor *t = mg_tensor_from_data(param[i].nd, param[i].shape, init_values[i]);
        w[i] = mg_distribute(mesh, t, p, nd);
        mg_tensor_free(t);
        mg_assert_all(w[i] != NULL, "%s: %s", what, mg_last_error());
        mg_set_requires_grad(w[i], 1);
    }
    mg_placement dp[MG_MAX_MESH_DIMS];
    for (int m = 0; m < nd; m++) dp[m] = place_data(plans[m]);
    for (int k = 0; k < pairs(); k++) { /* micro-batches of one step */
        float ids[N], targets[N];
        batch(k, ids, targets);
        mg_dtensor *di = data_tensor(mesh, ids, dp), *dt = data_tensor(mesh, targets, dp);
        mg_dtensor *loss = gpt_loss(w, di, dt);
        mg_assert_all(loss != NULL, "%s, pair %d forward: %s", what, k, mg_last_error());
        mg_tensor *lf = mg_full_tensor(loss);
        double got = mg_tensor_data(lf)[0];
        mg_tensor_free(lf);
        mg_assert_all(fabs(got - ref.loss[k]) <= 1e-5 * fabs(ref.loss[k]),
                      "%s, pair %d: loss %.9g, "
                      "reference %.9g",
                      what, k, got, ref.loss[k]);
        int rc = mg_backward(loss);
        mg_assert_all(rc == MG_OK, "%s, pair %d backward: %s", what, k, mg_last_error());
        mg_dtensor_free(di), mg_dtensor_free(dt);
    }
    for (int i = 0; i < NP; i++) {
        mg_tensor *g = mg_full_tensor(mg_grad(w[i]));
        mg_assert_all(g != NULL, "%s: no gradient for %s", what, param[i].name);
        float *gv = mg_tensor_data(g);
        double big = 0, worst = 0;
        int64_t at = 0;
        for (int64_t e = 0; e < numel(i); e++) big = fmax(big, fabs(ref.grad[i][e]));
        for (int64_t e = 0; e < numel(i); e++)
            if (fabs(gv[e] - ref.grad[i][e]) > worst) worst = fabs(gv[e] - ref.grad[i][e]), at = e;
        mg_assert_all(big > 0 && worst <= 2e-4 * big,
                      "%s: gradient of %s differs at %lld: %.9g, "
                      "reference %.9g (largest %.3g)",
                      what, param[i].name, (long long)at, gv[at], ref.grad[i][at], big);
        const mg_placement *gp = mg_dtensor_placements(mg_grad(w[i])),
                           *pp = mg_dtensor_placements(w[i]);
        for (int m = 0; m < nd; m++)
            mg_assert_all(gp[m].kind == pp[m].kind && gp[m].dim == pp[m].dim,
                          "%s: the gradient of %s is not at its placements", what, param[i].name);
        mg_tensor_free(g);
    }
    mg_step_end();
    for (int i = 0; i < NP; i++) mg_dtensor_free(w[i]);
    mg_mesh_free(mesh);
}

START_TEST(test_one_dim_plans) {
    int world = mg_world_size();
    for (plan p = DP; p <= FSDP; p++) check_plans(1, &world, &p);
}
END_TEST

START_TEST(test_two_dim_plans) {
    int world = mg_world_size();
    static const plan combos[][2] = {{DP, TP}, {SEQ, TP}, {FSDP, TP}, {DP, VOCAB}, {FSDP, SEQ}};
    int shapes[3][2] = {{1, world}, {world, 1}, {2, 2}};
    for (int s = 0; s < 3; s++) {
        if (shapes[s][0] * shapes[s][1] != world || (world == 1 && s > 0)) continue;
        for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++)
            check_plans(2, shapes[s], combos[c]);
    }
}
END_TEST

static Suite *make_suite(void) {
    make_init();
    make_reference();
    const TTest *tests[] = {test_one_dim_plans, test_two_dim_plans, NULL};
    return mg_test_suite("gpt_block", tests);
}

static void teardown(void) {
    for (int i = 0; i < NP; i++) free(init_values[i]), free(ref.grad[i]);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, teardown); }
