/* ops_cases.h: the op cases shared by the op test suites: each case names an
 * op, its inputs (global shapes, which get gradients, whether a Partial
 * placement makes sense for them, what data they hold) and a function that
 * applies the op. Also the helpers that build inputs for a placement list
 * (Partial inputs get real addends: noise that sums to the value) and the loss
 * L = sum(op(x) * r) with a fixed random r, so every gradient is non-trivial. */
#ifndef MG_OPS_CASES_H
#define MG_OPS_CASES_H

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "meshgrad.h"
#include "testutil.h"

/* DATA_LABELS: class indices for input 0's last dim; DATA_IDS: row indices of
 * input 1 (a table) */
enum { DATA_RANDOM = 0, DATA_AWAY_FROM_ZERO, DATA_LABELS, DATA_IDS };

typedef mg_dtensor *(*op_apply)(mg_dtensor **in);

typedef struct op_case {
    const char *name;
    int n_in;
    int ndim[3];
    int64_t shape[3][4];
    bool grad[3];
    bool partial_ok[3];
    int data[3];
    op_apply fn;
} op_case;

/* NULL when the op takes the placements p (p[i][m]: input i on mesh dim m of
 * a mesh of nd dims, sizes shape), else a part of the one line it refuses
 * them with (case_refuses) */
typedef const char *(*op_refuses)(const op_case *c, mg_placement p[3][4], int nd,
                                  const int *shape);

static mg_dtensor *apply_permute(mg_dtensor **in) { return mg_permute(in[0], (int[]){2, 0, 1}); }
static mg_dtensor *apply_permute021(mg_dtensor **in) { return mg_permute(in[0], (int[]){0, 2, 1}); }
static mg_dtensor *apply_transpose(mg_dtensor **in) { return mg_transpose(in[0], 0, 1); }
static mg_dtensor *apply_linear(mg_dtensor **in) { return mg_linear(in[0], in[1], in[2]); }
static mg_dtensor *apply_linear_nobias(mg_dtensor **in) { return mg_linear(in[0], in[1], NULL); }
static mg_dtensor *apply_matmul(mg_dtensor **in) { return mg_matmul(in[0], in[1]); }
static mg_dtensor *apply_sum(mg_dtensor **in) { return mg_sum(in[0]); }
static mg_dtensor *apply_sum_dim1(mg_dtensor **in) { return mg_sum_dims(in[0], 1, (int[]){1}, 0); }
static mg_dtensor *apply_sum_dim0_keep(mg_dtensor **in) { return mg_sum_dims(in[0], 1, (int[]){0}, 1); }
static mg_dtensor *apply_mean(mg_dtensor **in) { return mg_mean(in[0]); }
static mg_dtensor *apply_mean_dims(mg_dtensor **in) { return mg_mean_dims(in[0], 2, (int[]){0, 2}, 0); }
static mg_dtensor *apply_expand_rows(mg_dtensor **in) { return mg_expand(in[0], 2, (int64_t[]){4, 5}); }
static mg_dtensor *apply_expand_lead(mg_dtensor **in) { return mg_expand(in[0], 2, (int64_t[]){3, 5}); }
static mg_dtensor *apply_expand_cols(mg_dtensor **in) { return mg_expand(in[0], 3, (int64_t[]){2, 4, 6}); }
static mg_dtensor *apply_reshape_flat(mg_dtensor **in) { return mg_reshape(in[0], 1, (int64_t[]){24}); }
static mg_dtensor *apply_reshape_split(mg_dtensor **in) { return mg_reshape(in[0], 3, (int64_t[]){4, 3, 2}); }
static mg_dtensor *apply_reshape_merge(mg_dtensor **in) { return mg_reshape(in[0], 2, (int64_t[]){8, 5}); }
static mg_dtensor *apply_add(mg_dtensor **in) { return mg_add(in[0], in[1]); }
static mg_dtensor *apply_sub(mg_dtensor **in) { return mg_sub(in[0], in[1]); }
static mg_dtensor *apply_mul(mg_dtensor **in) { return mg_mul(in[0], in[1]); }
static mg_dtensor *apply_scale(mg_dtensor **in) { return mg_scale(in[0], -1.5f); }
static mg_dtensor *apply_relu(mg_dtensor **in) { return mg_relu(in[0]); }
static mg_dtensor *apply_gelu(mg_dtensor **in) { return mg_gelu(in[0]); }
static mg_dtensor *apply_silu(mg_dtensor **in) { return mg_silu(in[0]); }
static mg_dtensor *apply_ce(mg_dtensor **in) { return mg_cross_entropy(in[0], in[1]); }
static mg_dtensor *apply_mse(mg_dtensor **in) { return mg_mse_loss(in[0], in[1]); }
static mg_dtensor *apply_redistribute_r(mg_dtensor **in) {
    mg_placement p[4] = {MG_REPLICATE, MG_REPLICATE, MG_REPLICATE, MG_REPLICATE};
    return mg_redistribute(in[0], p, mg_mesh_ndim(mg_dtensor_mesh(in[0])));
}
static mg_dtensor *apply_redistribute_s1(mg_dtensor **in) {
    mg_placement p[4] = {MG_SHARD(1), MG_SHARD(1), MG_SHARD(1), MG_SHARD(1)};
    return mg_redistribute(in[0], p, mg_mesh_ndim(mg_dtensor_mesh(in[0])));
}
static mg_dtensor *apply_softmax(mg_dtensor **in) { return mg_softmax(in[0], -1); }
static mg_dtensor *apply_softmax_dim0(mg_dtensor **in) { return mg_softmax(in[0], 0); }
static mg_dtensor *apply_log_softmax(mg_dtensor **in) { return mg_log_softmax(in[0], 1); }
static mg_dtensor *apply_layer_norm(mg_dtensor **in) {
    return mg_layer_norm(in[0], in[1], in[2], 1e-5f);
}
static mg_dtensor *apply_layer_norm_plain(mg_dtensor **in) {
    return mg_layer_norm(in[0], NULL, NULL, 1e-5f);
}
static mg_dtensor *apply_embedding(mg_dtensor **in) { return mg_embedding(in[0], in[1]); }
static mg_dtensor *apply_attention(mg_dtensor **in) { return mg_attention(in[0], in[1], in[2], 0); }
static mg_dtensor *apply_attention_causal(mg_dtensor **in) {
    return mg_attention(in[0], in[1], in[2], 1);
}
static mg_dtensor *apply_rms_norm(mg_dtensor **in) { return mg_rms_norm(in[0], in[1], 1e-5f); }
static mg_dtensor *apply_rms_norm_plain(mg_dtensor **in) {
    return mg_rms_norm(in[0], NULL, 1e-5f);
}
static mg_dtensor *apply_rope(mg_dtensor **in) { return mg_rope(in[0], 0, 10000.0f); }
/* later positions and a small theta: every pair turns by a sizeable angle */
static mg_dtensor *apply_rope_pos0(mg_dtensor **in) { return mg_rope(in[0], 7, 50.0f); }
static mg_dtensor *apply_attention_gqa(mg_dtensor **in) {
    return mg_attention_gqa(in[0], in[1], in[2], 0);
}
static mg_dtensor *apply_attention_gqa_causal(mg_dtensor **in) {
    return mg_attention_gqa(in[0], in[1], in[2], 1);
}
/* two queries at positions 2 and 3 against a cache of 5 keys: the last is
 * never read (its gradients are 0) */
static mg_dtensor *apply_attention_at(mg_dtensor **in) { return mg_attention_at(in[0], in[1], in[2], 2); }

/* rope: a shard of D (on a mesh dim of more than one rank) */
static const char *rope_refuses(const op_case *c, mg_placement p[3][4], int nd,
                                const int *shape) {
    (void)c;
    for (int m = 0; m < nd; m++)
        if (p[0][m].kind == MG_PLACE_SHARD && p[0][m].dim == 3 && shape[m] > 1)
            return "sharded on its head dim D";
    return NULL;
}

/* grouped-query attention: heads sharded (any input, mesh dims of more than
 * one rank) over more ranks than kv_heads splits evenly over */
static const char *gqa_refuses(const op_case *c, mg_placement p[3][4], int nd,
                               const int *shape) {
    int64_t h = c->shape[0][1], kv = c->shape[1][1], ranks = 1;
    if (h == kv) return NULL;
    for (int m = 0; m < nd; m++) {
        bool heads = false;
        for (int i = 0; i < 3; i++)
            heads |= p[i][m].kind == MG_PLACE_SHARD && p[i][m].dim == 1 && shape[m] > 1;
        if (heads) ranks *= shape[m];
    }
    return kv % ranks ? "kv_heads" : NULL;
}

static mg_dtensor *apply_narrow(mg_dtensor **in) { return mg_narrow(in[0], 1, 1, 3); }
static mg_dtensor *apply_narrow_dim0(mg_dtensor **in) { return mg_narrow(in[0], 0, 2, 2); }
/* three narrows of one intermediate along `dim` (two overlap), joined along
 * it: the three gradients summed into the intermediate's (in place where dim
 * is whole, as GPT's q, k, v of one qkv) */
static mg_dtensor *narrow_three(mg_dtensor *x, int dim) {
    mg_dtensor *t = mg_scale(x, 1.5f);
    if (!t) return NULL;
    const mg_dtensor *parts[3] = {mg_narrow(t, dim, 0, 3), mg_narrow(t, dim, 2, 3),
                                  mg_narrow(t, dim, 1, 2)};
    return parts[0] && parts[1] && parts[2] ? mg_cat(3, parts, dim) : NULL;
}
/* narrows of t that is also used whole: t's first gradient is add's, the one
 * of v = t + t * t (not the engine's to add into: u's is the same tensor), the
 * narrows' sum is the engine's, then a narrow and mul's two gradients are
 * added into it in place */
static mg_dtensor *apply_narrow_and_whole(mg_dtensor **in) {
    mg_dtensor *t = mg_scale(in[0], 1.5f);
    mg_dtensor *u = mg_mul(t, t);
    const mg_dtensor *a = mg_narrow(t, 1, 0, 3);
    const mg_dtensor *b = mg_narrow(t, 1, 2, 3);
    mg_dtensor *v = mg_add(t, u);
    return a && b && v ? mg_cat(3, (const mg_dtensor *const[]){a, v, b}, 1) : NULL;
}
static mg_dtensor *apply_narrow_three(mg_dtensor **in) { return narrow_three(in[0], 1); }
static mg_dtensor *apply_narrow_three_dim0(mg_dtensor **in) { return narrow_three(in[0], 0); }
static mg_dtensor *apply_cat(mg_dtensor **in) {
    return mg_cat(2, (const mg_dtensor *const[]){in[0], in[1]}, -1);
}
/* four tensors, one of them twice: a tree of nodes, and two gradients summed */
static mg_dtensor *apply_cat_tree(mg_dtensor **in) {
    return mg_cat(4, (const mg_dtensor *const[]){in[0], in[1], in[2], in[0]}, 0);
}
/* the seed: linear(x.permute(0, 2, 1), w, b) */
static mg_dtensor *apply_seed(mg_dtensor **in) {
    mg_dtensor *xt = mg_permute(in[0], (int[]){0, 2, 1});
    return xt ? mg_linear(xt, in[1], in[2]) : NULL;
}

#define T true
#define F false
static const op_case op_cases[] = {
    {"permute", 1, {3}, {{3, 4, 5}}, {T}, {T}, {0}, apply_permute},
    {"permute021", 1, {3}, {{2, 5, 3}}, {T}, {T}, {0}, apply_permute021},
    {"transpose", 1, {2}, {{4, 6}}, {T}, {T}, {0}, apply_transpose},
    {"linear", 3, {2, 2, 1}, {{5, 6}, {3, 6}, {3}}, {T, T, T}, {T, T, T}, {0}, apply_linear},
    {"linear3d", 3, {3, 2, 1}, {{2, 5, 6}, {7, 6}, {7}}, {T, T, T}, {F, F, F}, {0}, apply_linear},
    {"linear_nobias", 2, {2, 2}, {{4, 6}, {5, 6}}, {T, T}, {T, T}, {0}, apply_linear_nobias},
    {"matmul_batched", 2, {3, 3}, {{2, 3, 4}, {2, 4, 5}}, {T, T}, {T, T}, {0}, apply_matmul},
    {"matmul_2d_weight", 2, {3, 2}, {{2, 3, 4}, {4, 5}}, {T, T}, {T, T}, {0}, apply_matmul},
    {"sum", 1, {2}, {{4, 6}}, {T}, {T}, {0}, apply_sum},
    {"sum_dim1", 1, {2}, {{5, 6}}, {T}, {T}, {0}, apply_sum_dim1},
    {"sum_dim0_keepdim", 1, {2}, {{5, 6}}, {T}, {T}, {0}, apply_sum_dim0_keep},
    {"mean", 1, {2}, {{4, 7}}, {T}, {T}, {0}, apply_mean},
    {"mean_dims", 1, {3}, {{2, 3, 4}}, {T}, {T}, {0}, apply_mean_dims},
    {"expand_rows", 1, {2}, {{1, 5}}, {T}, {T}, {0}, apply_expand_rows},
    {"expand_lead", 1, {1}, {{5}}, {T}, {T}, {0}, apply_expand_lead},
    {"expand_cols", 1, {3}, {{2, 4, 1}}, {T}, {T}, {0}, apply_expand_cols},
    {"reshape_flat", 1, {2}, {{4, 6}}, {T}, {T}, {0}, apply_reshape_flat},
    {"reshape_split", 1, {2}, {{4, 6}}, {T}, {T}, {0}, apply_reshape_split},
    {"reshape_merge", 1, {3}, {{2, 4, 5}}, {T}, {T}, {0}, apply_reshape_merge},
    {"add_broadcast", 2, {2, 1}, {{4, 6}, {6}}, {T, T}, {T, T}, {0}, apply_add},
    {"sub", 2, {2, 2}, {{5, 3}, {5, 3}}, {T, T}, {T, T}, {0}, apply_sub},
    {"mul_outer", 2, {2, 2}, {{4, 1}, {1, 6}}, {T, T}, {T, T}, {0}, apply_mul},
    {"scale", 1, {2}, {{3, 5}}, {T}, {T}, {0}, apply_scale},
    {"relu", 1, {2}, {{4, 5}}, {T}, {T}, {DATA_AWAY_FROM_ZERO}, apply_relu},
    {"gelu", 1, {2}, {{4, 5}}, {T}, {T}, {0}, apply_gelu},
    {"silu", 1, {3}, {{2, 3, 4}}, {T}, {T}, {0}, apply_silu},
    {"cross_entropy", 2, {2, 1}, {{6, 5}, {6}}, {T, F}, {T, F}, {0, DATA_LABELS}, apply_ce},
    {"mse_loss", 2, {2, 2}, {{4, 3}, {4, 3}}, {T, T}, {T, T}, {0}, apply_mse},
    {"redistribute_to_R", 1, {2}, {{5, 3}}, {T}, {T}, {0}, apply_redistribute_r},
    {"redistribute_to_S1", 1, {2}, {{5, 3}}, {T}, {T}, {0}, apply_redistribute_s1},
    {"seed_permute_linear", 3, {3, 2, 1}, {{2, 10, 4}, {5, 10}, {5}}, {T, T, T}, {F, F, F}, {0},
     apply_seed},
    /* the transformer ops; T = 3 and B = H = 2 leave empty shards at 4 ranks */
    {"softmax", 1, {2}, {{4, 5}}, {T}, {T}, {0}, apply_softmax},
    {"softmax_dim0", 1, {3}, {{3, 4, 2}}, {T}, {T}, {0}, apply_softmax_dim0},
    {"log_softmax", 1, {2}, {{4, 5}}, {T}, {T}, {0}, apply_log_softmax},
    {"layer_norm", 3, {3, 1, 1}, {{2, 3, 6}, {6}, {6}}, {T, T, T}, {T, T, T}, {0},
     apply_layer_norm},
    {"layer_norm_plain", 1, {2}, {{3, 6}}, {T}, {T}, {0}, apply_layer_norm_plain},
    {"embedding", 2, {2, 2}, {{2, 3}, {5, 4}}, {F, T}, {F, T}, {DATA_IDS, 0}, apply_embedding},
    {"attention", 3, {4, 4, 4}, {{2, 2, 3, 2}, {2, 2, 3, 2}, {2, 2, 3, 2}}, {T, T, T}, {T, T, T},
     {0}, apply_attention},
    {"attention_causal", 3, {4, 4, 4}, {{2, 2, 3, 2}, {2, 2, 3, 2}, {2, 2, 3, 3}}, {T, T, T},
     {T, T, T}, {0}, apply_attention_causal},
    /* the Llama family's: RMS norm, rotary embedding (T = 3 and 4: empty and
     * whole shards along T), grouped-query attention with kv_heads 2 of 4, 1 of
     * 2 and 2 of 2, and from a position into a longer cache */
    {"rms_norm", 2, {3, 1}, {{2, 3, 6}, {6}}, {T, T}, {T, T}, {0}, apply_rms_norm},
    {"rms_norm_plain", 1, {2}, {{3, 6}}, {T}, {T}, {0}, apply_rms_norm_plain},
    {"rope", 1, {4}, {{2, 3, 2, 4}}, {T}, {T}, {0}, apply_rope},
    {"rope_pos0", 1, {4}, {{1, 4, 2, 6}}, {T}, {T}, {0}, apply_rope_pos0},
    {"attention_gqa", 3, {4, 4, 4}, {{2, 4, 3, 2}, {2, 2, 3, 2}, {2, 2, 3, 2}}, {T, T, T},
     {T, T, T}, {0}, apply_attention_gqa},
    {"attention_gqa_mqa", 3, {4, 4, 4}, {{1, 2, 4, 2}, {1, 1, 4, 2}, {1, 1, 4, 3}}, {T, T, T},
     {T, T, T}, {0}, apply_attention_gqa_causal},
    {"attention_gqa_even", 3, {4, 4, 4}, {{2, 2, 3, 2}, {2, 2, 3, 2}, {2, 2, 3, 3}}, {T, T, T},
     {T, T, T}, {0}, apply_attention_gqa_causal},
    {"attention_at", 3, {4, 4, 4}, {{2, 4, 2, 2}, {2, 2, 5, 2}, {2, 2, 5, 3}}, {T, T, T},
     {T, T, T}, {0}, apply_attention_at},
    {"narrow", 1, {2}, {{4, 6}}, {T}, {T}, {0}, apply_narrow},
    {"narrow_dim0", 1, {2}, {{5, 3}}, {T}, {T}, {0}, apply_narrow_dim0},
    {"narrow_three", 1, {2}, {{3, 5}}, {T}, {T}, {0}, apply_narrow_three},
    {"narrow_three_dim0", 1, {3}, {{6, 2, 3}}, {T}, {T}, {0}, apply_narrow_three_dim0},
    {"narrow_and_whole", 1, {2}, {{3, 5}}, {T}, {T}, {0}, apply_narrow_and_whole},
    {"cat", 2, {2, 2}, {{3, 4}, {3, 2}}, {T, T}, {T, T}, {0}, apply_cat},
    {"cat_tree", 3, {2, 2, 2}, {{2, 3}, {1, 3}, {3, 3}}, {T, T, T}, {F, F, F}, {0}, apply_cat_tree},
    {"cross_entropy_3d", 2, {3, 2}, {{2, 3, 5}, {2, 3}}, {T, F}, {T, F}, {0, DATA_LABELS}, apply_ce},
};
#undef T
#undef F
static const int n_op_cases = (int)(sizeof op_cases / sizeof op_cases[0]);

/* the cases whose op refuses some placements; NULL for the others */
static inline op_refuses case_refuses(const op_case *c) {
    static const struct {
        const char *name;
        op_refuses fn;
    } refusing[] = {{"rope", rope_refuses},
                    {"rope_pos0", rope_refuses},
                    {"attention_gqa", gqa_refuses},
                    {"attention_gqa_mqa", gqa_refuses},
                    {"attention_gqa_even", gqa_refuses},
                    {"attention_at", gqa_refuses}};
    for (size_t i = 0; i < sizeof refusing / sizeof refusing[0]; i++)
        if (strcmp(c->name, refusing[i].name) == 0) return refusing[i].fn;
    return NULL;
}

/* The full (global) data of input i of a case, identical on every rank. */
static inline mg_tensor *case_input(const op_case *c, int i) {
    mg_tensor *t = mg_tensor_new(c->ndim[i], c->shape[i]);
    float *x = mg_tensor_data(t);
    int64_t n = mg_tensor_numel(t);
    mg_test_fill(x, n, 1000 + 17 * i + (uint64_t)strlen(c->name));
    if (c->data[i] == DATA_AWAY_FROM_ZERO)
        for (int64_t k = 0; k < n; k++) x[k] = x[k] >= 0 ? x[k] + 0.1f : x[k] - 0.1f;
    if (c->data[i] == DATA_LABELS || c->data[i] == DATA_IDS) {
        int64_t classes = c->data[i] == DATA_IDS ? c->shape[1][0] : c->shape[0][c->ndim[0] - 1];
        for (int64_t k = 0; k < n; k++) x[k] = (float)((k * 7 + 3) % classes);
    }
    return t;
}

/* A dtensor holding `full` with placements p. Partial mesh dims hold real
 * addends: coordinate 0 of the Partial sub-grid holds full - (K-1)/4, the
 * others 1/4 (K = product of the Partial dims' sizes). */
static inline mg_dtensor *case_dtensor(const mg_mesh *mesh, const mg_tensor *full,
                                       const mg_placement *p) {
    int nd = mg_mesh_ndim(mesh);
    const int *shape = mg_mesh_shape(mesh), *coord = mg_mesh_coord(mesh);
    mg_placement q[4];
    int K = 1, index = 0;
    for (int m = 0; m < nd; m++) {
        q[m] = p[m].kind == MG_PLACE_PARTIAL ? MG_REPLICATE : p[m];
        if (p[m].kind == MG_PLACE_PARTIAL) {
            index = index * shape[m] + coord[m];
            K *= shape[m];
        }
    }
    mg_dtensor *r = mg_distribute(mesh, full, q, nd);
    if (!r || K == 1) {
        if (r && K == 1) {
            for (int m = 0; m < nd; m++) q[m] = p[m];
            /* Partial on size-1 dims only: same data */
            mg_dtensor *t = mg_from_local(mesh, mg_local(r), q, nd, mg_tensor_ndim(full),
                                          mg_tensor_shape(full));
            mg_dtensor_free(r);
            return t;
        }
        return r;
    }
    const mg_tensor *l = mg_local(r);
    mg_tensor *addend = mg_tensor_from_data(mg_tensor_ndim(l), mg_tensor_shape(l),
                                            mg_tensor_data((mg_tensor *)l));
    float *a = mg_tensor_data(addend);
    int64_t n = mg_tensor_numel(addend);
    for (int64_t k = 0; k < n; k++) a[k] = index == 0 ? a[k] - (float)(K - 1) * 0.25f : 0.25f;
    mg_dtensor *t = mg_from_local(mesh, addend, p, nd, mg_tensor_ndim(full), mg_tensor_shape(full));
    mg_tensor_free(addend);
    mg_dtensor_free(r);
    return t;
}

#endif
