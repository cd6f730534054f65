/* test_llama_ops.c: the Llama family's ops beyond test_ops's cases (which
 * hold them to finite differences and to one process on every placement), at
 * 1, 2 and 4 ranks:
 * - mg_attention_gqa with kv_heads == heads gives mg_attention's output and
 *   gradients in the same bits, on batch, heads, sequence and Partial
 *   placements;
 * - bad input to mg_rms_norm, mg_rope, mg_attention_gqa and mg_attention_at
 *   (shapes that do not fit, heads that kv_heads does not divide, an odd
 *   head dim, a rope sharded on D, kv_heads that does not split over the
 *   ranks sharding the heads, bad eps, theta, pos0 and position, NULL
 *   inputs; mg_attention given fewer k, v heads, which names the grouped
 *   call): NULL and one line naming the call and what is wrong, and the next
 *   op runs;
 * - a pos0 that differs between the ranks is refused by the backward's
 *   comparison of the ranks' graphs. */
#include <stdbool.h>

#include "testutil.h"

static mg_mesh *mesh; /* 1-D, the world */

/* ---- kv_heads == heads: mg_attention's bits ---------------------------------------- */

typedef struct {
    mg_tensor *out, *grad[3];
} att_result;

/* r (Replicate) as Partial addends, each rank's r / ranks (exact: 1, 2 or 4
 * ranks); r is freed */
static mg_dtensor *partial_of(mg_dtensor *r) {
    if (!r) return NULL;
    const mg_tensor *l = mg_local(r);
    mg_tensor *part = mg_tensor_from_data(mg_tensor_ndim(l), mg_tensor_shape(l),
                                          mg_tensor_data((mg_tensor *)l));
    float *x = mg_tensor_data(part);
    for (int64_t k = 0; k < mg_tensor_numel(part); k++) x[k] /= (float)mg_world_size();
    mg_placement p = MG_PARTIAL_SUM;
    mg_dtensor *t = mg_from_local(mesh, part, &p, 1, mg_dtensor_ndim(r), mg_dtensor_shape(r));
    mg_tensor_free(part);
    mg_dtensor_free(r);
    return t;
}

static void att_run(bool gqa, const mg_placement *p, int causal, att_result *r) {
    static const int64_t shape[3][4] = {{2, 4, 5, 4}, {2, 4, 5, 4}, {2, 4, 5, 3}};
    mg_dtensor *in[3];
    for (int i = 0; i < 3; i++) {
        in[i] = mg_test_dtensor(mesh, 4, shape[i], p[i], 70 + i);
        if (p[i].kind == MG_PLACE_PARTIAL) in[i] = partial_of(in[i]);
        ck_assert_ptr_nonnull(in[i]);
        mg_set_requires_grad(in[i], 1);
    }
    mg_dtensor *y = gqa ? mg_attention_gqa(in[0], in[1], in[2], causal)
                        : mg_attention(in[0], in[1], in[2], causal);
    mg_assert_all(y != NULL, "attention: %s", mg_last_error());
    r->out = mg_full_tensor(y);
    mg_dtensor *w = mg_test_dtensor(mesh, 4, (int64_t[]){2, 4, 5, 3}, MG_REPLICATE, 79);
    mg_assert_all(mg_backward(mg_sum(mg_mul(y, w))) == MG_OK, "backward: %s", mg_last_error());
    for (int i = 0; i < 3; i++) r->grad[i] = mg_full_tensor(mg_grad(in[i]));
    mg_step_end();
    for (int i = 0; i < 3; i++) mg_dtensor_free(in[i]);
    mg_dtensor_free(w);
}

static bool same_bits(const mg_tensor *a, const mg_tensor *b) {
    return a && b && mg_tensor_numel(a) == mg_tensor_numel(b) &&
           memcmp(mg_tensor_data((mg_tensor *)a), mg_tensor_data((mg_tensor *)b),
                  (size_t)mg_tensor_numel(a) * sizeof(float)) == 0;
}

START_TEST(test_gqa_even_is_attention) {
    /* q, k, v placements: all Replicate, batch, heads, sequence parallel (q on
     * T), v Partial */
    const mg_placement R = MG_REPLICATE, P = MG_PARTIAL_SUM, S0 = MG_SHARD(0),
                       S1 = MG_SHARD(1), S2 = MG_SHARD(2);
    const mg_placement place[][3] = {{R, R, R}, {S0, S0, S0}, {S1, S1, S1}, {S2, R, R}, {R, R, P}};
    for (size_t c = 0; c < sizeof place / sizeof place[0]; c++)
        for (int causal = 0; causal < 2; causal++) {
            const mg_placement *p = place[c];
            att_result a, g;
            att_run(false, p, causal, &a);
            att_run(true, p, causal, &g);
            mg_assert_all(same_bits(a.out, g.out), "placements %zu causal %d: outputs differ", c,
                          causal);
            for (int i = 0; i < 3; i++)
                mg_assert_all(same_bits(a.grad[i], g.grad[i]),
                              "placements %zu causal %d: gradients of input %d differ", c, causal,
                              i);
            mg_tensor_free(a.out), mg_tensor_free(g.out);
            for (int i = 0; i < 3; i++) mg_tensor_free(a.grad[i]), mg_tensor_free(g.grad[i]);
        }
}
END_TEST

/* ---- bad input ---------------------------------------------------------------------- */

static mg_dtensor *made[8];
static int n_made;

/* (ndim, shape) of test data at placement p (1-D mesh), freed after the case */
static mg_dtensor *input(int ndim, const int64_t *shape, mg_placement p) {
    mg_dtensor *t = mg_test_dtensor(mesh, ndim, shape, p, 90 + n_made);
    ck_assert_ptr_nonnull(t);
    made[n_made++] = t;
    return t;
}
#define IN(p, ...) input((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                         (int64_t[]){__VA_ARGS__}, p)
#define R MG_REPLICATE

static mg_dtensor *rms_weight_short(void) { return mg_rms_norm(IN(R, 2, 3, 6), IN(R, 5), 1e-5f); }
static mg_dtensor *rms_weight_2d(void) { return mg_rms_norm(IN(R, 2, 6), IN(R, 1, 6), 1e-5f); }
static mg_dtensor *rms_scalar(void) { return mg_rms_norm(input(0, NULL, R), NULL, 1e-5f); }
static mg_dtensor *rms_eps(void) { return mg_rms_norm(IN(R, 2, 6), NULL, -1.0f); }
static mg_dtensor *rms_eps_nan(void) { return mg_rms_norm(IN(R, 2, 6), NULL, NAN); }
static mg_dtensor *rms_null(void) { return mg_rms_norm(NULL, IN(R, 6), 1e-5f); }
static mg_dtensor *rope_3d(void) { return mg_rope(IN(R, 2, 3, 4), 0, 10000.0f); }
static mg_dtensor *rope_odd(void) { return mg_rope(IN(R, 2, 3, 2, 5), 0, 10000.0f); }
static mg_dtensor *rope_theta(void) { return mg_rope(IN(R, 2, 3, 2, 4), 0, 0.0f); }
static mg_dtensor *rope_theta_inf(void) { return mg_rope(IN(R, 2, 3, 2, 4), 0, INFINITY); }
static mg_dtensor *rope_pos0(void) { return mg_rope(IN(R, 2, 3, 2, 4), -1, 10000.0f); }
static mg_dtensor *rope_d_shard(void) { return mg_rope(IN(MG_SHARD(3), 2, 3, 2, 8), 0, 1e4f); }
static mg_dtensor *rope_null(void) { return mg_rope(NULL, 0, 10000.0f); }
static mg_dtensor *gqa_not_dividing(void) {
    return mg_attention_gqa(IN(R, 2, 4, 5, 4), IN(R, 2, 3, 5, 4), IN(R, 2, 3, 5, 4), 1);
}
static mg_dtensor *gqa_more_kv(void) {
    return mg_attention_gqa(IN(R, 2, 2, 5, 4), IN(R, 2, 4, 5, 4), IN(R, 2, 4, 5, 4), 1);
}
static mg_dtensor *gqa_batch(void) {
    return mg_attention_gqa(IN(R, 2, 4, 5, 4), IN(R, 1, 2, 5, 4), IN(R, 1, 2, 5, 4), 1);
}
static mg_dtensor *gqa_head_dim(void) {
    return mg_attention_gqa(IN(R, 2, 4, 5, 4), IN(R, 2, 2, 5, 2), IN(R, 2, 2, 5, 4), 1);
}
static mg_dtensor *gqa_lengths(void) {
    return mg_attention_gqa(IN(R, 2, 4, 5, 4), IN(R, 2, 2, 5, 4), IN(R, 2, 2, 4, 4), 1);
}
static mg_dtensor *gqa_kv_differ(void) {
    return mg_attention_gqa(IN(R, 2, 4, 5, 4), IN(R, 2, 2, 5, 4), IN(R, 2, 1, 5, 4), 1);
}
static mg_dtensor *gqa_3d(void) {
    return mg_attention_gqa(IN(R, 4, 5, 4), IN(R, 2, 5, 4), IN(R, 2, 5, 4), 1);
}
/* 2 query heads a rank, one k, v head for all: it does not split over the ranks */
static mg_dtensor *gqa_tp_uneven(void) {
    int64_t h = 2 * mg_world_size();
    mg_placement s1 = MG_SHARD(1);
    return mg_attention_gqa(IN(s1, 2, h, 5, 4), IN(s1, 2, 1, 5, 4), IN(s1, 2, 1, 5, 4), 1);
}
static mg_dtensor *gqa_tp_q_only(void) { /* the same with only q sharded on its heads */
    int64_t h = 2 * mg_world_size();
    return mg_attention_gqa(IN(MG_SHARD(1), 2, h, 5, 4), IN(R, 2, 1, 5, 4), IN(R, 2, 1, 5, 4), 1);
}
static mg_dtensor *attention_fewer_kv(void) { /* mg_attention points to the grouped call */
    return mg_attention(IN(R, 2, 4, 5, 4), IN(R, 2, 2, 5, 4), IN(R, 2, 2, 5, 4), 1);
}
static mg_dtensor *at_negative(void) {
    return mg_attention_at(IN(R, 2, 4, 1, 4), IN(R, 2, 2, 5, 4), IN(R, 2, 2, 5, 4), -1);
}
static mg_dtensor *at_lengths(void) { /* k and v of different lengths */
    return mg_attention_at(IN(R, 2, 4, 1, 4), IN(R, 2, 2, 5, 4), IN(R, 2, 2, 4, 4), 2);
}
static mg_dtensor *gqa_null(void) {
    return mg_attention_gqa(IN(R, 2, 4, 5, 4), NULL, IN(R, 2, 2, 5, 4), 1);
}

static const struct {
    const char *name;
    mg_dtensor *(*fn)(void);
    const char *want; /* in the message, after the call's name */
    bool sharded;     /* refused only where a mesh dim of 2 ranks or more shards it */
} bad[] = {
    {"mg_rms_norm", rms_weight_short, "weight (5) does not fit x (2, 3, 6)", false},
    {"mg_rms_norm", rms_weight_2d, "weight (1, 6) does not fit", false},
    {"mg_rms_norm", rms_scalar, "x is 0-d", false},
    {"mg_rms_norm", rms_eps, "eps is -1", false},
    {"mg_rms_norm", rms_eps_nan, "eps is nan", false},
    {"mg_rms_norm", rms_null, "x is NULL", false},
    {"mg_rope", rope_3d, "is not (B, T, H, D)", false},
    {"mg_rope", rope_odd, "odd head dim D = 5", false},
    {"mg_rope", rope_theta, "theta is 0", false},
    {"mg_rope", rope_theta_inf, "theta is inf", false},
    {"mg_rope", rope_pos0, "pos0 is -1", false},
    {"mg_rope", rope_d_shard, "sharded on its head dim D", true},
    {"mg_rope", rope_null, "x is NULL", false},
    {"mg_attention_gqa", gqa_not_dividing, "kv_heads must divide heads", false},
    {"mg_attention_gqa", gqa_more_kv, "kv_heads must divide heads", false},
    {"mg_attention_gqa", gqa_batch, "do not fit", false},
    {"mg_attention_gqa", gqa_head_dim, "do not fit", false},
    {"mg_attention_gqa", gqa_lengths, "do not fit", false},
    {"mg_attention_gqa", gqa_kv_differ, "do not fit", false},
    {"mg_attention_gqa", gqa_3d, "do not fit", false},
    {"mg_attention_gqa", gqa_tp_uneven, "make kv_heads a multiple of", true},
    {"mg_attention_gqa", gqa_tp_q_only, "make kv_heads a multiple of", true},
    {"mg_attention_gqa", gqa_null, "q, k or v is NULL", false},
    {"mg_attention_at", at_negative, "position -1", false},
    {"mg_attention_at", at_lengths, "do not fit", false},
    {"mg_attention", attention_fewer_kv, "fewer heads than q: mg_attention_gqa", false},
};

START_TEST(test_bad_input) {
    bool split = mg_world_size() > 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n_made = 0;
        mg_dtensor *y = bad[i].fn();
        const char *msg = mg_last_error();
        if (bad[i].sharded && !split) { /* one rank: nothing is split, it runs */
            mg_assert_all(y != NULL, "case %zu (%s) on one rank: %s", i, bad[i].name, msg);
        } else {
            char want[160];
            snprintf(want, sizeof want, "%s: ", bad[i].name);
            mg_assert_all(y == NULL, "case %zu (%s ... %s) was not refused", i, bad[i].name,
                          bad[i].want);
            mg_assert_all(strncmp(msg, want, strlen(want)) == 0 && strstr(msg, bad[i].want) &&
                              !strchr(msg, '\n'),
                          "case %zu: \"%s\" is not one line \"%s...%s...\"", i, msg, want,
                          bad[i].want);
        }
        mg_step_end();
        for (int k = 0; k < n_made; k++) mg_dtensor_free(made[k]);
    }
    /* the next op runs */
    n_made = 0;
    mg_dtensor *y = mg_rope(IN(MG_SHARD(1), 2, 4, 2, 4), 3, 10000.0f);
    mg_assert_all(y != NULL, "rope after the refusals: %s", mg_last_error());
    mg_step_end();
    mg_dtensor_free(made[0]);
}
END_TEST

/* rope's first position is one of the arguments the ranks compare before a
 * backward: a rank's own is refused there, naming the op */
START_TEST(test_rank_own_pos0) {
    mg_dtensor *x = mg_test_dtensor(mesh, 4, (int64_t[]){2, 4, 2, 4}, MG_REPLICATE, 5);
    mg_assert_all(x && mg_set_requires_grad(x, 1) == MG_OK, "%s", mg_last_error());
    int rc = mg_backward(mg_sum(mg_rope(x, mg_rank() == 1 ? 5 : 0, 10000.0f)));
    if (mg_world_size() > 1)
        mg_assert_all(rc != MG_OK && strstr(mg_last_error(), "recorded different graphs") &&
                          strstr(mg_last_error(), "(here: rope"),
                      "a rank's own pos0: rc %d, %s", rc, mg_last_error());
    else
        mg_assert_all(rc == MG_OK, "one rank: %s", mg_last_error());
    mg_step_end();
    mg_dtensor_free(x);
}
END_TEST

static Suite *make_suite(void) {
    mesh = mg_test_mesh1d();
    if (!mesh) return NULL;
    const TTest *tests[] = {test_gqa_even_is_attention, test_bad_input, test_rank_own_pos0, NULL};
    return mg_test_suite("llama_ops", tests);
}

static void teardown(void) { mg_mesh_free(mesh); }

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, teardown); }
