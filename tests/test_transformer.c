/* test_transformer.c: what the op matrix does not show about the transformer
 * ops: how much they communicate, and that a table used twice gets both
 * gradients.
 * - an attention block with the qkv projection column-parallel (heads split
 *   over the ranks) and the output projection row-parallel all-reduces once
 *   forward and once backward, like the Megatron MLP;
 * - a vocab-parallel embedding all-reduces once forward, nothing backward;
 * - loss-parallel cross-entropy moves O(N) floats, never the (N, V) logits;
 * - sequence-parallel attention (q sharded on T, k and v whole) moves nothing
 *   forward and gives the same output as the single-rank run;
 * - an embedding table tied to the output head accumulates both gradients.
 * Every result is also compared with the all-Replicate run. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "meshgrad.h"
#include "testutil.h"

static mg_dtensor *ids_of(const mg_mesh *mesh, int ndim, const int64_t *shape, int64_t v,
                          mg_placement p) {
    mg_tensor *t = mg_tensor_new(ndim, shape);
    for (int64_t i = 0; i < mg_tensor_numel(t); i++)
        mg_tensor_data(t)[i] = (float)((i * 5 + 2) % v);
    mg_dtensor *d = mg_distribute(mesh, t, &p, 1);
    mg_tensor_free(t);
    return d;
}

typedef struct {
    mg_comm_stats s[MG_COLL_COUNT];
} snapshot;

static snapshot now(void) {
    snapshot s;
    mg_comm_stats_get(s.s);
    return s;
}

static int64_t calls(const snapshot *a, const snapshot *b, int kind) {
    if (kind >= 0) return b->s[kind].calls - a->s[kind].calls;
    int64_t n = 0;
    for (int k = 0; k < MG_COLL_COUNT; k++) n += b->s[k].calls - a->s[k].calls;
    return n;
}

static int64_t bytes(const snapshot *a, const snapshot *b) {
    int64_t n = 0;
    for (int k = 0; k < MG_COLL_COUNT; k++) n += b->s[k].bytes - a->s[k].bytes;
    return n;
}

/* got equals want (the all-Replicate run's) within rtol, atol; both freed */
static void same_run(mg_tensor *got, mg_tensor *want, double rtol, double atol, const char *what) {
    char msg[256];
    int ok = mg_test_close(mg_tensor_data(got), mg_tensor_data(want), mg_tensor_numel(want), rtol,
                           atol, msg, sizeof msg);
    mg_assert_all(ok, "%s: %s", what, msg);
    mg_tensor_free(got);
    mg_tensor_free(want);
}

static mg_dtensor *to_r(mg_dtensor *y) {
    return mg_redistribute(y, (mg_placement[]){MG_REPLICATE}, 1);
}

/* ---- attention block: qkv column-parallel, projection row-parallel ------------- */

enum { B = 2, T = 4, H = 4, D = 2, C = H * D };

/* y = proj(attention(heads of qkv(x))); the qkv rows of head h are (q, k, v)
 * of that head side by side, so a split of the rows is a split of the heads */
static mg_dtensor *attention_block(mg_dtensor *x, mg_dtensor *wqkv, mg_dtensor *bqkv,
                                   mg_dtensor *wp, mg_dtensor *bp) {
    mg_dtensor *qkv = mg_linear(x, wqkv, bqkv);            /* (B, T, 3C) */
    qkv = mg_reshape(qkv, 4, (int64_t[]){B, T, H, 3 * D}); /* (B, T, H, 3D) */
    mg_dtensor *qkv3[3];
    for (int i = 0; i < 3; i++)
        qkv3[i] = mg_permute(mg_narrow(qkv, 3, i * D, D), (int[]){0, 2, 1, 3}); /* (B, H, T, D) */
    mg_dtensor *a = mg_attention(qkv3[0], qkv3[1], qkv3[2], 1);
    a = mg_reshape(mg_permute(a, (int[]){0, 2, 1, 3}), 3, (int64_t[]){B, T, C});
    return mg_linear(a, wp, bp);
}

START_TEST(test_attention_block_comm) {
    int w = mg_world_size();
    mg_mesh *mesh = mg_test_mesh1d();
    mg_placement R = MG_REPLICATE;
    mg_placement place[5] = {R, MG_SHARD(0), MG_SHARD(0), MG_SHARD(1), R};
    const int64_t shapes[5][3] = {{B, T, C}, {3 * C, C}, {3 * C}, {C, C}, {C}};
    const int nds[5] = {3, 2, 1, 2, 1};
    mg_tensor *grads[2][5], *outs[2];
    for (int run = 0; run < 2; run++) { /* tensor parallel, then all Replicate */
        mg_dtensor *p[5];
        for (int i = 0; i < 5; i++) {
            p[i] = mg_test_dtensor(mesh, nds[i], shapes[i], run ? R : place[i], 30 + i);
            mg_set_requires_grad(p[i], 1);
        }
        snapshot s0 = now();
        mg_dtensor *y = attention_block(p[0], p[1], p[2], p[3], p[4]);
        mg_assert_all(y && (w == 1 || run || mg_dtensor_placements(y)[0].kind == MG_PLACE_PARTIAL),
                      "the row-parallel output should be Partial: %s", mg_last_error());
        y = to_r(y);
        mg_dtensor *loss = mg_sum(mg_mul(y, y));
        snapshot s1 = now();
        if (!run) {
            mg_assert_all(calls(&s0, &s1, MG_COLL_ALL_REDUCE) == (w > 1),
                          "forward ran %lld all-reduces",
                          (long long)calls(&s0, &s1, MG_COLL_ALL_REDUCE));
            mg_assert_all(calls(&s0, &s1, -1) == calls(&s0, &s1, MG_COLL_ALL_REDUCE),
                          "forward ran other collectives");
        }
        mg_assert_all(mg_backward(loss) == MG_OK, "%s", mg_last_error());
        snapshot s2 = now();
        if (!run) {
            mg_assert_all(calls(&s1, &s2, MG_COLL_ALL_REDUCE) == (w > 1),
                          "backward ran %lld all-reduces",
                          (long long)calls(&s1, &s2, MG_COLL_ALL_REDUCE));
            mg_assert_all(calls(&s1, &s2, -1) == calls(&s1, &s2, MG_COLL_ALL_REDUCE),
                          "backward ran other collectives");
            for (int i = 1; i < 5; i++) {
                const mg_placement *gp = mg_dtensor_placements(mg_grad(p[i]));
                mg_assert_all(gp[0].kind == place[i].kind && gp[0].dim == place[i].dim,
                              "parameter %d: its gradient is not at its placement", i);
            }
        }
        outs[run] = mg_full_tensor(y);
        for (int i = 0; i < 5; i++) grads[run][i] = mg_full_tensor(mg_grad(p[i]));
        mg_step_end();
        for (int i = 0; i < 5; i++) mg_dtensor_free(p[i]);
    }
    same_run(outs[0], outs[1], 1e-5, 1e-5, "output");
    for (int i = 0; i < 5; i++) same_run(grads[0][i], grads[1][i], 1e-4, 1e-5, "a gradient");
    mg_mesh_free(mesh);
}
END_TEST

/* ---- vocab-parallel embedding --------------------------------------------------- */

START_TEST(test_vocab_parallel_embedding_comm) {
    int w = mg_world_size();
    mg_mesh *mesh = mg_test_mesh1d();
    const int64_t v = 11, ids_shape[2] = {3, 5};
    mg_dtensor *ids = ids_of(mesh, 2, ids_shape, v, MG_REPLICATE);
    mg_tensor *g[2];
    for (int run = 0; run < 2; run++) {
        mg_dtensor *table =
            mg_test_dtensor(mesh, 2, (int64_t[]){v, 6}, run ? MG_REPLICATE : MG_SHARD(0), 40);
        mg_set_requires_grad(table, 1);
        snapshot s0 = now();
        mg_dtensor *y = mg_embedding(ids, table);
        mg_assert_all(y && (w == 1 || run || mg_dtensor_placements(y)[0].kind == MG_PLACE_PARTIAL),
                      "a vocab-parallel lookup should be Partial: %s", mg_last_error());
        y = to_r(y);
        mg_dtensor *loss = mg_sum(mg_mul(y, y));
        snapshot s1 = now();
        mg_assert_all(mg_backward(loss) == MG_OK, "%s", mg_last_error());
        snapshot s2 = now();
        if (!run) {
            mg_assert_all(calls(&s0, &s1, MG_COLL_ALL_REDUCE) == (w > 1) &&
                              calls(&s0, &s1, -1) == (w > 1),
                          "forward ran %lld collectives", (long long)calls(&s0, &s1, -1));
            mg_assert_all(calls(&s1, &s2, -1) == 0, "backward ran %lld collectives",
                          (long long)calls(&s1, &s2, -1));
            mg_assert_all(mg_dtensor_placements(mg_grad(table))[0].kind == MG_PLACE_SHARD,
                          "the table's gradient should stay Shard(0)");
        }
        g[run] = mg_full_tensor(mg_grad(table));
        mg_step_end();
        mg_dtensor_free(table);
    }
    same_run(g[0], g[1], 1e-5, 1e-6, "table gradient");
    mg_dtensor_free(ids);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- loss-parallel cross-entropy ------------------------------------------------------- */

START_TEST(test_loss_parallel_bytes) {
    int w = mg_world_size();
    mg_mesh *mesh = mg_test_mesh1d();
    const int64_t n = 8, v = 1000;
    mg_dtensor *labels = ids_of(mesh, 1, &n, v, MG_REPLICATE);
    float loss_v[2];
    mg_tensor *g[2];
    for (int run = 0; run < 2; run++) {
        mg_dtensor *logits =
            mg_test_dtensor(mesh, 2, (int64_t[]){n, v}, run ? MG_REPLICATE : MG_SHARD(1), 41);
        mg_set_requires_grad(logits, 1);
        snapshot s0 = now();
        mg_dtensor *loss = mg_cross_entropy(logits, labels);
        mg_assert_all(loss != NULL, "%s", mg_last_error());
        mg_assert_all(mg_backward(loss) == MG_OK, "%s", mg_last_error());
        snapshot s1 = now();
        if (!run) {
            /* the rows' max, sum and target logit (3N floats) and the bad-label
             * count, all-reduced: under 2 * 4 * (3N + 1) bytes a rank, where
             * gathering the logits would be (w - 1) / w * 4 N V */
            int64_t moved = bytes(&s0, &s1), logits_bytes = 4 * n * v * (w - 1) / w;
            mg_assert_all(moved <= 8 * (3 * n + 1), "loss parallel moved %lld bytes",
                          (long long)moved);
            mg_assert_all(w == 1 || moved * 50 < logits_bytes, "%lld bytes is not O(N)",
                          (long long)moved);
            mg_assert_all(mg_dtensor_placements(mg_grad(logits))[0].kind == MG_PLACE_SHARD,
                          "dlogits should stay sharded on V");
        }
        mg_tensor *lf = mg_full_tensor(loss);
        loss_v[run] = mg_tensor_data(lf)[0];
        mg_tensor_free(lf);
        g[run] = mg_full_tensor(mg_grad(logits));
        mg_step_end();
        mg_dtensor_free(logits);
    }
    mg_assert_all(fabsf(loss_v[0] - loss_v[1]) <= 1e-5f * fabsf(loss_v[1]), "loss %g vs %g",
                  loss_v[0], loss_v[1]);
    same_run(g[0], g[1], 1e-4, 1e-7, "dlogits");
    mg_dtensor_free(labels);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- sequence-parallel attention ------------------------------------------------------ */

START_TEST(test_sequence_parallel_attention) {
    mg_mesh *mesh = mg_test_mesh1d();
    const int64_t shape[4] = {2, 3, 7, 4}; /* T = 7: uneven over 2 and 4 ranks */
    mg_tensor *out[2], *gk[2];
    for (int run = 0; run < 2; run++) {
        mg_dtensor *q = mg_test_dtensor(mesh, 4, shape, run ? MG_REPLICATE : MG_SHARD(2), 50);
        mg_dtensor *k = mg_test_dtensor(mesh, 4, shape, MG_REPLICATE, 51),
                   *v = mg_test_dtensor(mesh, 4, shape, MG_REPLICATE, 52);
        mg_set_requires_grad(k, 1);
        snapshot s0 = now();
        mg_dtensor *a = mg_attention(q, k, v, 1);
        snapshot s1 = now();
        mg_assert_all(a != NULL, "%s", mg_last_error());
        if (!run) {
            mg_assert_all(calls(&s0, &s1, -1) == 0, "forward ran %lld collectives",
                          (long long)calls(&s0, &s1, -1));
            const mg_placement *p = mg_dtensor_placements(a);
            mg_assert_all(p[0].kind == MG_PLACE_SHARD && p[0].dim == 2, "output should be S(2)");
        }
        out[run] = mg_full_tensor(a);
        mg_dtensor *r = mg_test_dtensor(mesh, 4, shape, MG_REPLICATE, 53);
        mg_assert_all(mg_backward(mg_sum(mg_mul(a, r))) == MG_OK, "%s", mg_last_error());
        gk[run] = mg_full_tensor(mg_grad(k)); /* each rank's queries add to dk */
        mg_step_end();
        mg_dtensor_free(q), mg_dtensor_free(k), mg_dtensor_free(v), mg_dtensor_free(r);
    }
    same_run(out[0], out[1], 1e-5, 1e-6, "output");
    same_run(gk[0], gk[1], 1e-4, 1e-6, "dk");
    mg_mesh_free(mesh);
}
END_TEST

/* ---- a table tied to the output head ---------------------------------------------------- */

/* loss = cross_entropy(linear(embedding(ids, a), b), labels): with b = a (tied)
 * the table's gradient is the sum of the two uses' gradients */
static mg_tensor *tied_gradient(const mg_mesh *mesh, mg_placement p, bool tied,
                                mg_tensor **second) {
    const int64_t v = 9, ids_shape[2] = {2, 3};
    mg_dtensor *ids = ids_of(mesh, 2, ids_shape, v, MG_REPLICATE);
    mg_dtensor *labels = ids_of(mesh, 2, ids_shape, v - 2, MG_REPLICATE);
    mg_dtensor *a = mg_test_dtensor(mesh, 2, (int64_t[]){v, 4}, p, 60);
    mg_dtensor *b = tied ? a : mg_test_dtensor(mesh, 2, (int64_t[]){v, 4}, p, 60);
    mg_set_requires_grad(a, 1);
    mg_set_requires_grad(b, 1);
    mg_dtensor *h = mg_gelu(mg_embedding(ids, a));
    mg_dtensor *loss = mg_cross_entropy(mg_linear(h, b, NULL), labels);
    mg_assert_all(loss && mg_backward(loss) == MG_OK, "%s", mg_last_error());
    mg_tensor *g = mg_full_tensor(mg_grad(a));
    if (second) *second = mg_full_tensor(mg_grad(b));
    mg_step_end();
    mg_dtensor_free(ids), mg_dtensor_free(labels), mg_dtensor_free(a);
    if (!tied) mg_dtensor_free(b);
    return g;
}

START_TEST(test_tied_embedding) {
    mg_mesh *mesh = mg_test_mesh1d();
    mg_placement ps[2] = {MG_REPLICATE, MG_SHARD(0)};
    for (int i = 0; i < 2; i++) {
        mg_tensor *head = NULL, *emb = tied_gradient(mesh, ps[i], false, &head);
        mg_tensor *both = tied_gradient(mesh, ps[i], true, NULL);
        for (int64_t e = 0; e < mg_tensor_numel(emb); e++)
            mg_tensor_data(emb)[e] += mg_tensor_data(head)[e];
        same_run(both, emb, 1e-5, 1e-6,
                 i ? "S(0) table: the tied gradient is not the sum of both"
                   : "R table: the tied gradient is not the sum of both");
        mg_tensor_free(head);
    }
    mg_mesh_free(mesh);
}
END_TEST

static Suite *make_suite(void) {
    const TTest *tests[] = {test_attention_block_comm, test_vocab_parallel_embedding_comm,
                            test_loss_parallel_bytes, test_sequence_parallel_attention,
                            test_tied_embedding, NULL};
    return mg_test_suite("transformer", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
