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
 * every parameter's gradient must match the reference, computed in double.
 * MG_GPT_PAIRS=1 runs one pair per step (an engine that refuses a second
 * backward before mg_step_end fails the default two). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "meshgrad.h"
#include "testutil.h"

enum { B = 2, T = 4, C = 8, H = 4, D = 2, V = 11, F = 4 * C, N = B * T };
#define EPS 1e-5f

enum {
    WTE,
    WPE,
    LN1W,
    LN1B,
    WQKV,
    BQKV,
    WPROJ,
    BPROJ,
    LN2W,
    LN2B,
    WFC,
    BFC,
    WFC2,
    BFC2,
    LNFW,
    LNFB,
    NP
};
static const struct {
    const char *name;
    int nd;
    int64_t shape[2];
} param[NP] = {
    {"wte", 2, {V, C}},      {"wpe", 2, {T, C}},   {"ln1.w", 1, {C}},    {"ln1.b", 1, {C}},
    {"wqkv", 2, {3 * C, C}}, {"bqkv", 1, {3 * C}}, {"wproj", 2, {C, C}}, {"bproj", 1, {C}},
    {"ln2.w", 1, {C}},       {"ln2.b", 1, {C}},    {"wfc", 2, {F, C}},   {"bfc", 1, {F}},
    {"wfc2", 2, {C, F}},     {"bfc2", 1, {C}},     {"lnf.w", 1, {C}},    {"lnf.b", 1, {C}},
};

static int64_t numel(int i) {
    return param[i].shape[0] * (param[i].nd == 2 ? param[i].shape[1] : 1);
}

/* the initial values, the same for the reference and every run */
static float *init_values[NP];

static void make_init(void) {
    for (int i = 0; i < NP; i++) {
        init_values[i] = malloc(numel(i) * sizeof(float));
        mg_test_fill(init_values[i], numel(i), 200 + i);
        bool ln_weight = i == LN1W || i == LN2W || i == LNFW;
        for (int64_t e = 0; e < numel(i); e++)
            init_values[i][e] =
                ln_weight ? 1.0f + 0.2f * init_values[i][e] : 0.5f * init_values[i][e];
    }
}

/* micro-batch m: ids and targets (B, T) */
static void batch(int m, float *ids, float *targets) {
    for (int i = 0; i < N; i++) {
        ids[i] = (float)((i * 7 + 3 + 5 * m) % V);
        targets[i] = (float)((i * 4 + 1 + 3 * m) % V);
    }
}

/* ---- the reference: plain loops in double ------------------------------------------ */

typedef struct {
    double *p[NP], *g[NP];
} ref_model;

/* y (rows, n) = x (rows, k) w^T + b */
static void lin_f(const double *x, int rows, int k, const double *w, const double *b, int n,
                  double *y) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < n; j++) {
            double s = b ? b[j] : 0;
            for (int i = 0; i < k; i++) s += x[r * k + i] * w[j * k + i];
            y[r * n + j] = s;
        }
}

/* dx += dy w, dw += dy^T x, db += sum dy */
static void lin_b(const double *x, const double *dy, int rows, int k, int n, const double *w,
                  double *dx, double *dw, double *db) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < n; j++) {
            double g = dy[r * n + j];
            if (db) db[j] += g;
            for (int i = 0; i < k; i++) {
                dx[r * k + i] += g * w[j * k + i];
                dw[j * k + i] += g * x[r * k + i];
            }
        }
}

static void ln_f(const double *x, const double *w, const double *b, double *y, double *xhat,
                 double *rstd) {
    for (int r = 0; r < N; r++) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++) mean += x[r * C + c] / C;
        for (int c = 0; c < C; c++) var += (x[r * C + c] - mean) * (x[r * C + c] - mean) / C;
        rstd[r] = 1 / sqrt(var + EPS);
        for (int c = 0; c < C; c++) {
            xhat[r * C + c] = (x[r * C + c] - mean) * rstd[r];
            y[r * C + c] = xhat[r * C + c] * w[c] + b[c];
        }
    }
}

static void ln_b(const double *dy, const double *xhat, const double *rstd, const double *w,
                 double *dx, double *dw, double *db) {
    for (int r = 0; r < N; r++) {
        double a = 0, bb = 0;
        for (int c = 0; c < C; c++) {
            double g = dy[r * C + c] * w[c];
            a += g;
            bb += g * xhat[r * C + c];
            dw[c] += dy[r * C + c] * xhat[r * C + c];
            db[c] += dy[r * C + c];
        }
        for (int c = 0; c < C; c++)
            dx[r * C + c] += rstd[r] * (dy[r * C + c] * w[c] - a / C - xhat[r * C + c] * bb / C);
    }
}

#define QKV(b, t, h, s, d) ((((b)*T + (t)) * 3 * C) + (h)*3 * D + (s)*D + (d))

/* causal attention over qkv (N, 3C) -> a (N, C); p (B, H, T, T) kept */
static void attn_f(const double *qkv, double *a, double *p) {
    double scale = 1 / sqrt((double)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double *pr = p + ((b * H + h) * T + i) * T, m = -INFINITY, s = 0;
                for (int j = 0; j < T; j++) {
                    double dot = 0;
                    for (int d = 0; d < D; d++)
                        dot += qkv[QKV(b, i, h, 0, d)] * qkv[QKV(b, j, h, 1, d)];
                    pr[j] = j <= i ? dot * scale : -INFINITY;
                    m = fmax(m, pr[j]);
                }
                for (int j = 0; j < T; j++) s += pr[j] = exp(pr[j] - m);
                for (int j = 0; j < T; j++) pr[j] /= s;
                for (int d = 0; d < D; d++) {
                    double o = 0;
                    for (int j = 0; j < T; j++) o += pr[j] * qkv[QKV(b, j, h, 2, d)];
                    a[(b * T + i) * C + h * D + d] = o;
                }
            }
}

static void attn_b(const double *qkv, const double *p, const double *da, double *dqkv) {
    double scale = 1 / sqrt((double)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const double *pr = p + ((b * H + h) * T + i) * T;
                double dp[T], dot = 0;
                for (int j = 0; j < T; j++) {
                    dp[j] = 0;
                    for (int d = 0; d < D; d++) {
                        double g = da[(b * T + i) * C + h * D + d];
                        dp[j] += g * qkv[QKV(b, j, h, 2, d)];
                        dqkv[QKV(b, j, h, 2, d)] += pr[j] * g;
                    }
                    dot += pr[j] * dp[j];
                }
                for (int j = 0; j < T; j++) {
                    double ds = pr[j] * (dp[j] - dot) * scale;
                    for (int d = 0; d < D; d++) {
                        dqkv[QKV(b, i, h, 0, d)] += ds * qkv[QKV(b, j, h, 1, d)];
                        dqkv[QKV(b, j, h, 1, d)] += ds * qkv[QKV(b, i, h, 0, d)];
                    }
                }
            }
}

static double gelu(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double gelu_grad(double x) {
    double k = sqrt(2 / M_PI), t = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

#define NEW(n) double *n = calloc(N * (size_t)F * 4, sizeof(double)) /* big enough for any */

/* one forward and backward of the reference; gradients added into m->g */
static double ref_pair(ref_model *m, const float *ids, const float *targets) {
    NEW(x0);
    NEW(h1);
    NEW(xh1);
    NEW(rs1);
    NEW(qkv);
    NEW(p);
    NEW(a);
    NEW(y);
    NEW(x1);
    NEW(h2);
    NEW(xh2);
    NEW(rs2);
    NEW(u);
    NEW(mm);
    NEW(m2);
    NEW(x2);
    NEW(hf);
    NEW(xhf);
    NEW(rsf);
    NEW(lg);
    NEW(dlg);
    NEW(dhf);
    NEW(dx2);
    NEW(dm);
    NEW(du);
    NEW(dh2);
    NEW(dx1);
    NEW(da);
    NEW(dqkv);
    NEW(dh1);
    double **P = m->p, **G = m->g;
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++)
            x0[r * C + c] = P[WTE][(int)ids[r] * C + c] + P[WPE][(r % T) * C + c];
    ln_f(x0, P[LN1W], P[LN1B], h1, xh1, rs1);
    lin_f(h1, N, C, P[WQKV], P[BQKV], 3 * C, qkv);
    attn_f(qkv, a, p);
    lin_f(a, N, C, P[WPROJ], P[BPROJ], C, y);
    for (int e = 0; e < N * C; e++) x1[e] = x0[e] + y[e];
    ln_f(x1, P[LN2W], P[LN2B], h2, xh2, rs2);
    lin_f(h2, N, C, P[WFC], P[BFC], F, u);
    for (int e = 0; e < N * F; e++) mm[e] = gelu(u[e]);
    lin_f(mm, N, F, P[WFC2], P[BFC2], C, m2);
    for (int e = 0; e < N * C; e++) x2[e] = x1[e] + m2[e];
    ln_f(x2, P[LNFW], P[LNFB], hf, xhf, rsf);
    lin_f(hf, N, C, P[WTE], NULL, V, lg);
    double loss = 0;
    for (int r = 0; r < N; r++) { /* cross-entropy, mean over the N positions */
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, lg[r * V + v]);
        for (int v = 0; v < V; v++) s += exp(lg[r * V + v] - mx);
        int t = (int)targets[r];
        loss += (mx + log(s) - lg[r * V + t]) / N;
        for (int v = 0; v < V; v++) dlg[r * V + v] = (exp(lg[r * V + v] - mx) / s - (v == t)) / N;
    }
    lin_b(hf, dlg, N, C, V, P[WTE], dhf, G[WTE], NULL);
    ln_b(dhf, xhf, rsf, P[LNFW], dx2, G[LNFW], G[LNFB]);
    lin_b(mm, dx2, N, F, C, P[WFC2], dm, G[WFC2], G[BFC2]);
    for (int e = 0; e < N * F; e++) du[e] = dm[e] * gelu_grad(u[e]);
    lin_b(h2, du, N, C, F, P[WFC], dh2, G[WFC], G[BFC]);
    for (int e = 0; e < N * C; e++) dx1[e] = dx2[e];
    ln_b(dh2, xh2, rs2, P[LN2W], dx1, G[LN2W], G[LN2B]);
    lin_b(a, dx1, N, C, C, P[WPROJ], da, G[WPROJ], G[BPROJ]);
    attn_b(qkv, p, da, dqkv);
    lin_b(h1, dqkv, N, C, 3 * C, P[WQKV], dh1, G[WQKV], G[BQKV]);
    double *dx0 = dx1; /* the residual carries dx1 through; ln1 adds to it */
    ln_b(dh1, xh1, rs1, P[LN1W], dx0, G[LN1W], G[LN1B]);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) {
            G[WTE][(int)ids[r] * C + c] += dx0[r * C + c];
            G[WPE][(r % T) * C + c] += dx0[r * C + c];
        }
    double *all[] = {x0, h1, xh1, rs1, qkv, p,   a,   y,   x1, h2, xh2, rs2, u,  mm,   m2,
                     x2, hf, xhf, rsf, lg,  dlg, dhf, dx2, dm, du, dh2, dx1, da, dqkv, dh1};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    return loss;
}

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

static int pairs(void) {
    const char *s = getenv("MG_GPT_PAIRS");
    return s && atoi(s) > 0 ? atoi(s) : 2;
}

typedef struct {
    double loss[4];
    double *grad[NP];
} reference;

static reference ref;

static void make_reference(void) {
    ref_model m;
    for (int i = 0; i < NP; i++) {
        m.p[i] = malloc(numel(i) * sizeof(double));
        m.g[i] = calloc(numel(i), sizeof(double));
        for (int64_t e = 0; e < numel(i); e++) m.p[i][e] = init_values[i][e];
    }
    float ids[N], targets[N];
    for (int k = 0; k < pairs(); k++) {
        batch(k, ids, targets);
        ref.loss[k] = ref_pair(&m, ids, targets);
    }
    for (int i = 0; i < NP; i++) {
        ref.grad[i] = m.g[i];
        free(m.p[i]);
    }
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
