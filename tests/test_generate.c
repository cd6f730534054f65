/* test_generate.c: the KV cache of generation (mg_gpt_cache, the cached
 * forwards of src/nn/gpt.c and src/nn/llama_forward.c through
 * mg_model_forward_cached), run at 1, 2 and 4 ranks, for the GPT and for a
 * Llama whose k and v have half the heads of q.
 *
 * - cache vs full forward: on every plan (dp, tp, sp, fsdp, tp+sp and the 2-D
 *   combinations), a model with parameters of unit scale (so that the logits are
 *   not all near zero) decodes 4 sequences, each from a prompt of another
 *   length (1, 6, 11 and the whole ctx) and then one token at a time against
 *   the cache, reusing one cache (each prompt refills it from position 0, as
 *   the sliding window of `meshgrad generate` does). The logits of every
 *   position equal those of mg_gpt_forward over the whole sequences within
 *   1e-5 of the largest logit (they reach about 5; the difference is about
 *   3e-6 to 1e-5, reassociation: a token's products run other kernels than
 *   the whole sequence's).
 * - the deterministic mode (mg_set_deterministic): the same with models wide
 *   enough for its tensor-parallel splits (embd 256), and the cached logits,
 *   a prompt alone and then token by token, bitwise those of the batch of 4
 *   through the full forward, on every plan.
 * - refusals: a token past ctx, a position that is not the cache's next one,
 *   and a prompt longer than ctx give NULL and a message, never a crash. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "meshgrad.h"
#include "dist/mesh.h"
#include "nn/gpt.h"
#include "nn/llama.h"
#include "nn/model.h"
#include "status.h"
#include "testutil.h"

enum { B = 4, T = 16, V = 64 };
static const mg_lm_config gpt = {.kind = MG_MODEL_GPT, .gpt = {2, 4, 32, T, V}};
/* 8 heads of q, 4 of k and v: a tp of 4 splits both */
static const mg_lm_config llama = {
    .kind = MG_MODEL_LLAMA,
    .llama = {.layers = 2, .heads = 8, .kv_heads = 4, .embd = 32, .ctx = T, .vocab = V,
              .hidden = 96, .rope_theta = 10000, .norm_eps = 1e-5, .tied = 1}};

/* The deterministic mode's: every dim a tp of 4 splits halves to its shard */
static const mg_lm_config gpt_wide = {.kind = MG_MODEL_GPT, .gpt = {2, 8, 256, T, V}};
static const mg_lm_config llama_wide = {
    .kind = MG_MODEL_LLAMA,
    .llama = {.layers = 2, .heads = 8, .kv_heads = 8, .embd = 256, .ctx = T, .vocab = V,
              .hidden = 512, .rope_theta = 10000, .norm_eps = 1e-5, .tied = 1}};

/* Every parameter: uniform draws by global index (the same on every mesh) of
 * scale 0.5, norm weights in [0.8, 1.2]. */
static void set_params(mg_model *m) {
    for (int i = 0; i < m->params.n; i++) {
        mg_param *p = &m->params.p[i];
        int ln_weight = (strstr(p->name, "ln") || strstr(p->name, "norm")) &&
                        mg_dtensor_ndim(p->value) == 1;
        mg_assert_all(mg_dtensor_fill_uniform(p->value, 17, (uint64_t)i, ln_weight ? 0.8f : -0.5f,
                                              ln_weight ? 1.2f : 0.5f) == MG_OK,
                      "%s: %s", p->name, mg_last_error());
    }
}

/* ids (rows, n) of `data` at placements p (NULL: Replicate) */
static mg_dtensor *ids_tensor(const mg_mesh *mesh, const mg_placement *p, int64_t rows, int64_t n,
                              const float *data) {
    mg_placement rep[MG_MAX_MESH_DIMS];
    for (int d = 0; d < mg_mesh_ndim(mesh); d++) rep[d] = MG_REPLICATE;
    mg_tensor *t = mg_tensor_from_data(2, (int64_t[]){rows, n}, data);
    mg_dtensor *x = mg_distribute(mesh, t, p ? p : rep, mg_mesh_ndim(mesh));
    mg_tensor_free(t);
    return x;
}

/* The largest |a - b| of V logits, and the largest |b|. */
static void compare(const float *a, const float *b, double *diff, double *big) {
    for (int k = 0; k < V; k++) {
        *diff = fmax(*diff, fabs((double)a[k] - (double)b[k]));
        *big = fmax(*big, fabs((double)b[k]));
    }
}

/* The cached logits of row r at `pos`; freed arena. NULL on failure. */
static int cached(mg_model *m, mg_gpt_cache *c, const mg_mesh *mesh, const float *ids, int64_t n,
                  int64_t pos, float *out) {
    mg_dtensor *x = ids_tensor(mesh, NULL, 1, n, ids);
    mg_dtensor *y = x ? mg_model_forward_cached(m, c, x, pos) : NULL;
    mg_tensor *f = y ? mg_full_tensor(y) : NULL;
    int ok = f && mg_tensor_numel(f) == V;
    if (ok) memcpy(out, mg_tensor_data(f), sizeof(float) * V);
    mg_tensor_free(f);
    mg_dtensor_free(x);
    mg_step_end();
    return ok;
}

static void check_plan(const mg_lm_config *cfg, int nd, const int *shape, const char *plan_text,
                       int det) {
    mg_assert_all(mg_set_deterministic(det) == MG_OK, "%s", mg_last_error());
    mg_mesh *mesh = mg_mesh_new(nd, shape);
    mg_assert_all(mesh != NULL, "mesh: %s", mg_last_error());
    mg_plan plan;
    mg_model m;
    mg_assert_all(mg_plan_parse(plan_text, &plan) == MG_OK &&
                      mg_model_build_lm(&m, mesh, &plan, cfg, 3, NULL) == MG_OK,
                  "%s %s: %s", mg_model_kind_name(cfg->kind), plan_text, mg_last_error());
    set_params(&m);
    float ids[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (float)((i * 37 + i / 5 * 11 + 3) % V);
    mg_placement bp[MG_MAX_MESH_DIMS];
    mg_plan_batch(&plan, bp);
    mg_dtensor *x = ids_tensor(mesh, bp, B, T, ids);
    int prev = mg_set_grad_enabled(0);
    mg_dtensor *logits = x ? mg_model_forward(&m, x) : NULL; // logits: (B, T, V)
    mg_tensor *ref = logits ? mg_full_tensor(logits) : NULL;
    mg_assert_all(ref != NULL, "%s: full forward: %s", plan_text, mg_last_error());
    mg_step_end();
    mg_dtensor_free(x);

    mg_gpt_cache c;
    mg_assert_all(mg_model_cache_init(&m, &c, mesh, &plan) == MG_OK, "%s: %s", plan_text,
                  mg_last_error());
    double diff = 0, big = 0;
    float got[V];
    for (int r = 0; r < B; r++) {
        const float *row = ids + r * T;
        int64_t n0 = r == B - 1 ? T : 1 + 5 * r; /* the prompt */
        mg_assert_all(cached(&m, &c, mesh, row, n0, 0, got), "%s: row %d: prompt of %lld: %s",
                      plan_text, r, (long long)n0, mg_last_error());
        compare(got, mg_tensor_data(ref) + ((int64_t)r * T + n0 - 1) * V, &diff, &big);
        for (int64_t pos = n0; pos < T; pos++) {
            mg_assert_all(cached(&m, &c, mesh, row + pos, 1, pos, got), "%s: row %d: token at "
                          "%lld: %s", plan_text, r, (long long)pos, mg_last_error());
            compare(got, mg_tensor_data(ref) + ((int64_t)r * T + pos) * V, &diff, &big);
        }
        mg_assert_all(c.len == T, "%s: the cache holds %lld positions, want %d", plan_text,
                      (long long)c.len, T);
    }
    char mesh_text[32];
    double tol = det ? 0 : 1e-5 * big;
    mg_assert_all(big > 1 && diff <= tol, "%s %s on mesh %s%s: cached logits differ "
                  "from the full forward's by %.3g (want <= %g: 1e-5 of the largest logit, %.3g)",
                  mg_model_kind_name(cfg->kind), plan_text,
                  mg_mesh_format(mesh_text, sizeof mesh_text, mesh),
                  det ? ", deterministic" : "", diff, tol, big);

    /* refusals: past ctx, not the next position, a prompt longer than ctx */
    float longer[T + 1] = {0};
    mg_assert_all(!cached(&m, &c, mesh, ids, 1, T, got), "%s: a token at position ctx was taken",
                  plan_text);
    mg_assert_all(strstr(mg_last_error(), "cached forward") != NULL, "message: %s", mg_last_error());
    mg_assert_all(cached(&m, &c, mesh, ids, 3, 0, got), "%s: %s", plan_text, mg_last_error());
    mg_assert_all(!cached(&m, &c, mesh, ids, 1, 5, got), "%s: a token at 5 after 3 was taken",
                  plan_text);
    mg_assert_all(!cached(&m, &c, mesh, longer, T + 1, 0, got), "%s: a prompt of ctx + 1 was taken",
                  plan_text);
    mg_clear_error();
    mg_set_grad_enabled(prev);
    mg_tensor_free(ref);
    mg_gpt_cache_release(&c);
    mg_model_free(&m);
    mg_mesh_free(mesh);
    mg_set_deterministic(0);
}

/* Every plan on the meshes of this world: 1-D ones on (world), 2-D ones on
 * 2x2 at 4 ranks, 1x2 and 2x1 at 2, 1x1 at 1. */
static void every_plan(const mg_lm_config *const models[2], int det) {
    static const char *const plans[] = {"dp",      "tp",      "sp",       "fsdp",
                                        "tp+sp",   "dp,tp",   "fsdp,tp",  "dp,tp+sp", "sp,tp"};
    int world = mg_world_size();
    int meshes[3][2] = {{world, 1}, {world == 4 ? 2 : 1, world == 4 ? 2 : world}, {world, 1}};
    int n2 = world == 2 ? 2 : 1; /* 2-D meshes to run: 1x2 and 2x1 at 2 ranks */
    for (int j = 0; j < 2; j++)
        for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
            if (!strchr(plans[i], ',')) {
                check_plan(models[j], 1, meshes[0], plans[i], det);
                continue;
            }
            for (int k = 0; k < n2; k++) check_plan(models[j], 2, meshes[1 + k], plans[i], det);
        }
}

START_TEST(test_cache_every_plan) {
    const mg_lm_config *const models[2] = {&gpt, &llama};
    every_plan(models, 0);
}
END_TEST

START_TEST(test_cache_deterministic) {
    const mg_lm_config *const models[2] = {&gpt_wide, &llama_wide};
    every_plan(models, 1);
}
END_TEST

static Suite *make_suite(void) {
    const TTest *tests[] = {test_cache_every_plan, test_cache_deterministic, NULL};
    return mg_test_suite("generate", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
