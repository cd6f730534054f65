/* test_gpt.c: the GPT of src/nn/gpt.c on every plan, run at 1, 2 and 4 ranks.
 *
 * - model vs reference: one block with the initial values and micro-batches of
 *   gpt_reference.h, built by mg_gpt_init on each plan (dp, tp, sp, fsdp, tp+sp
 *   and 2-D combinations), loaded with the reference's values: both losses and
 *   every parameter's gradient match the plain C loops.
 * - init: GPT-2's init (N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
 *   biases 0, layer norm weights 1) by its statistics, and bitwise the same on
 *   every plan (the checksum of every parameter).
 * - collectives: tp makes Megatron's (one all-reduce of the activations after
 *   each row-parallel layer and the embedding, one per column-parallel input in
 *   backward, nothing gathered); tp+sp makes all-gathers and reduce-scatters of
 *   them instead (its only all-reduces are of replicated parameters' gradients).
 * - KV cache: the logits of each token decoded against the cache equal those of
 *   a full forward over the prefix, on every plan.
 * - refusals: heads that do not divide embd, a tp degree that cannot split the
 *   heads. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpt_reference.h"
#include "meshgrad.h"
#include "nn/gpt.h"
#include "nn/model.h"
#include "testutil.h"

/* the reference's index of each of the model's parameters, in table order */
static const int ref_index[NP] = {WTE,  WPE,  LN1W, LN1B, WQKV, BQKV, WPROJ, BPROJ,
                                  LN2W, LN2B, WFC,  BFC,  WFC2, BFC2, LNFW, LNFB};

static const mg_gpt_config ref_config = {1, H, C, T, V};

/* the plan text on mesh `shape`, or NULL when the world does not fit it */
static mg_mesh *mesh_for(int nd, const int *shape) {
    mg_mesh *mesh = mg_mesh_new(nd, shape);
    mg_assert_all(mesh != NULL, "mesh: %s", mg_last_error());
    return mesh;
}

/* The model on `mesh` with `plan_text`, its parameters set to the reference's. */
static void build(mg_model *m, const mg_mesh *mesh, const char *plan_text, mg_plan *plan) {
    mg_assert_all(mg_plan_parse(plan_text, plan) == MG_OK, "%s: %s", plan_text, mg_last_error());
    mg_assert_all(mg_model_init_gpt(m, mesh, plan, &ref_config, 5) == MG_OK, "%s: %s", plan_text,
                  mg_last_error());
    for (int i = 0; i < NP; i++) {
        mg_param *p = &m->params.p[i];
        int r = ref_index[i];
        mg_tensor *full = mg_tensor_from_data(param[r].nd, param[r].shape, init_values[r]);
        mg_dtensor *d = mg_distribute(mesh, full, p->value->spec.p, mg_mesh_ndim(mesh));
        mg_assert_all(d != NULL, "%s: %s", p->name, mg_last_error());
        memcpy(mg_tensor_data((mg_tensor *)mg_local(p->value)), mg_tensor_data((mg_tensor *)mg_local(d)),
               sizeof(float) * (size_t)mg_tensor_numel(mg_local(d)));
        mg_dtensor_free(d);
        mg_tensor_free(full);
    }
}

static mg_dtensor *ids_tensor(const mg_mesh *mesh, const mg_plan *plan, const float *v) {
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(plan, bp);
    mg_tensor *t = mg_tensor_from_data(2, (int64_t[]){B, T}, v);
    mg_dtensor *d = mg_distribute(mesh, t, bp, mg_mesh_ndim(mesh));
    mg_tensor_free(t);
    return d;
}

static void check_plan(int nd, const int *shape, const char *plan_text) {
    mg_mesh *mesh = mesh_for(nd, shape);
    mg_model m;
    mg_plan plan;
    build(&m, mesh, plan_text, &plan);
    for (int k = 0; k < pairs(); k++) {
        float ids[N], targets[N];
        batch(k, ids, targets);
        mg_dtensor *x = ids_tensor(mesh, &plan, ids), *y = ids_tensor(mesh, &plan, targets);
        mg_dtensor *logits = mg_model_forward(&m, x);
        mg_dtensor *loss = logits ? mg_cross_entropy(logits, y) : NULL;
        mg_assert_all(loss != NULL, "%s: %s", plan_text, mg_last_error());
        mg_tensor *lf = mg_full_tensor(loss);
        double got = mg_tensor_data(lf)[0];
        mg_tensor_free(lf);
        mg_assert_all(fabs(got - ref.loss[k]) <= 1e-5 * fabs(ref.loss[k]),
                      "%s, pair %d: loss %.9g, reference %.9g", plan_text, k, got, ref.loss[k]);
        mg_assert_all(mg_backward(loss) == MG_OK, "%s: %s", plan_text, mg_last_error());
        mg_dtensor_free(x), mg_dtensor_free(y);
    }
    for (int i = 0; i < NP; i++) {
        mg_param *p = &m.params.p[i];
        int r = ref_index[i];
        mg_tensor *g = mg_full_tensor(mg_grad(p->value));
        mg_assert_all(g != NULL, "%s: no gradient for %s", plan_text, p->name);
        double big = 0, worst = 0;
        int64_t at = 0;
        for (int64_t e = 0; e < numel(r); e++) big = fmax(big, fabs(ref.grad[r][e]));
        for (int64_t e = 0; e < numel(r); e++) {
            double err = fabs(mg_tensor_data(g)[e] - ref.grad[r][e]);
            if (err > worst) worst = err, at = e;
        }
        mg_assert_all(big > 0 && worst <= 2e-4 * big, "%s: gradient of %s differs at %lld: %.9g, "
                      "reference %.9g (largest %.3g)", plan_text, p->name, (long long)at,
                      mg_tensor_data(g)[at], ref.grad[r][at], big);
        mg_tensor_free(g);
    }
    mg_step_end();
    mg_model_free(&m);
    mg_mesh_free(mesh);
}

START_TEST(test_model_one_dim) {
    int world = mg_world_size();
    static const char *const plans[] = {"dp", "tp", "sp", "fsdp", "tp+sp"};
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) check_plan(1, &world, plans[i]);
}
END_TEST

START_TEST(test_model_two_dim) {
    int world = mg_world_size();
    static const char *const plans[] = {"dp,tp", "fsdp,tp", "dp,tp+sp", "sp,tp", "dp,sp", "fsdp,tp+sp"};
    int shapes[3][2] = {{1, world}, {world, 1}, {2, 2}};
    for (int s = 0; s < 3; s++) {
        if (shapes[s][0] * shapes[s][1] != world || (world == 1 && s > 0)) continue;
        for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) check_plan(2, shapes[s], plans[i]);
    }
}
END_TEST

/* ---- init ------------------------------------------------------------------------- */

static void stats(mg_dtensor *t, double *mean, double *std) {
    mg_tensor *f = mg_full_tensor(t);
    int64_t n = mg_tensor_numel(f);
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) s += mg_tensor_data(f)[i], ss += (double)mg_tensor_data(f)[i] * mg_tensor_data(f)[i];
    *mean = s / n;
    *std = sqrt(fmax(ss / n - *mean * *mean, 0));
    mg_tensor_free(f);
}

START_TEST(test_init) {
    int world = mg_world_size();
    const mg_gpt_config cfg = {2, 4, 64, 32, 96};
    static const char *const plans[] = {"dp", "tp", "fsdp", "sp", "tp+sp"};
    uint64_t first = 0;
    for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
        mg_mesh *mesh = mg_mesh_new(1, &world);
        mg_plan plan;
        mg_model m;
        mg_assert_all(mg_plan_parse(plans[k], &plan) == MG_OK && mg_model_init_gpt(&m, mesh, &plan, &cfg, 11) == MG_OK,
                      "%s: %s", plans[k], mg_last_error());
        mg_assert_all(mg_params_numel(&m.params) == mg_gpt_param_count(&cfg), "%s: %lld parameters, "
                      "GPT-2's count is %lld", plans[k], (long long)mg_params_numel(&m.params),
                      (long long)mg_gpt_param_count(&cfg));
        uint64_t sum = 0;
        mg_assert_all(mg_params_checksum(&m.params, &sum) == MG_OK, "%s", mg_last_error());
        if (k == 0) first = sum;
        mg_assert_all(sum == first, "%s: initial parameters differ from dp's (checksum %016llx vs "
                      "%016llx)", plans[k], (unsigned long long)sum, (unsigned long long)first);
        for (int i = 0; i < m.params.n; i++) {
            const char *name = m.params.p[i].name;
            double mean, std, want = 0.02;
            stats(m.params.p[i].value, &mean, &std);
            if (strstr(name, "bias")) {
                mg_assert_all(mean == 0 && std == 0, "%s: %s is not all zeros", plans[k], name);
            } else if (strstr(name, "ln")) {
                mg_assert_all(mean == 1 && std == 0, "%s: %s is not all ones", plans[k], name);
            } else {
                if (strstr(name, "proj") || strstr(name, "fc2")) want = 0.02 / sqrt(2.0 * cfg.layers);
                mg_assert_all(fabs(std - want) < 0.06 * want && fabs(mean) < 0.1 * want,
                              "%s: %s has mean %.4g and std %.4g; want N(0, %.4g)", plans[k], name,
                              mean, std, want);
            }
        }
        mg_model_free(&m);
        mg_mesh_free(mesh);
    }
}
END_TEST

/* the initial values and the reference's gradients, computed once for every test */
static Suite *make_suite(void) {
    make_init();
    make_reference();
    const TTest *tests[] = {test_model_one_dim, test_model_two_dim, test_init, NULL};
    return mg_test_suite("gpt", tests);
}

static void teardown(void) {
    for (int i = 0; i < NP; i++) free(init_values[i]), free(ref.grad[i]);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, teardown); }
