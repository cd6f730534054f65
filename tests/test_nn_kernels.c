/* test_nn_kernels.c: the CPU kernels of the network ops (cpu_nn.c,
 * cpu_layer_norm.c, cpu_attention.c) against plain reference loops in
 * double: softmax and log_softmax, layer norm, embedding, cross-entropy over
 * a shard of the classes, fused attention (causal on global positions, tiles
 * crossed, empty sides), each forward and backward. Where a kernel takes
 * statistics summed over a split row, the row is split in two here, the
 * halves' statistics are combined as the op does across ranks, and the result
 * must equal the whole row's. Layer norm and softmax in the same bits wherever a row sits in the
 * batch, on one thread or two, and with outputs streamed or cached. Also
 * mg_cpu_exp and the AVX-512 softmax forward's mg_cpu_exp16 against exp. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/cpu_exp16.h"
#include "backend/cpu_kernels.h"
#include "kernel_testutil.h"

static mg_tensor *mat(int64_t r, int64_t c) { return junk(2, (int64_t[]){r, c}); }

static void expect_same(const mg_tensor *a, const mg_tensor *b, double tol, const char *what) {
    char msg[256];
    ck_assert_int_eq(a->numel, b->numel);
    ck_assert_msg(mg_test_close(a->data, b->data, a->numel, tol, tol, msg, sizeof msg), "%s: %s",
                  what, msg);
}

START_TEST(test_exp) {
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -100.0f + 188.0f * (float)i / 200000.0f;
        double want = exp((double)x), got = mg_cpu_exp(x);
        if (want < 1e-36) { /* at the bottom of the float range: 0 or the true value */
            ck_assert_msg(fabs(got - want) < 2e-38, "exp(%g) = %g, want %g", x, got, want);
            continue;
        }
        worst = fmax(worst, fabs(got - want) / want);
    }
    ck_assert_msg(worst < 3e-7, "worst relative error %g", worst);
    ck_assert(mg_cpu_exp(-INFINITY) == 0.0f);
    ck_assert(mg_cpu_exp(0.0f) == 1.0f);
    ck_assert(isnan(mg_cpu_exp(NAN)));
    /* the same in a loop that vectorizes: the clamps are vector max and min */
    float in[64], out[64];
    for (int j = 0; j < 64; j++) in[j] = (float)-j;
    in[3] = NAN, in[17] = -INFINITY, in[40] = -1000.0f, in[41] = -88.5f, in[63] = -INFINITY;
    for (int j = 0; j < 64; j++) out[j] = mg_cpu_exp(in[j]);
    ck_assert(isnan(out[3]));
    ck_assert(out[17] == 0.0f && out[40] == 0.0f && out[41] == 0.0f && out[63] == 0.0f);
    ck_assert(fabs(out[5] - exp(-5.0)) < 3e-7 * exp(-5.0));
}
END_TEST

#ifdef MG_CPU_EXP16
/* mg_cpu_exp16 on 16 floats, lane by lane */
__attribute__((target("arch=x86-64-v4"))) static void exp16_of(const float *in, float *out) {
    _mm512_storeu_ps(out, mg_cpu_exp16(_mm512_loadu_ps(in)));
}
#endif

/* the softmax forward's exp with AVX-512: within 2 ulp of exp on every 61st
 * float from -104 to 0 and on [0, 88] (the sweep's step is odd so that it
 * meets every last mantissa bit), 0 at the bottom of the range and for -inf,
 * NaN through */
START_TEST(test_exp16) {
#ifdef MG_CPU_EXP16
    if (!__builtin_cpu_supports("x86-64-v4")) return;
    /* the bits of 0 and 88, then of -0 and -104 */
    static const uint32_t from[2] = {0x00000000u, 0x80000000u}, to[2] = {0x42B00000u, 0xC2D00000u};
    float in[16], out[16];
    double worst = 0;
    for (int side = 0; side < 2; side++)
        for (uint32_t bits = from[side]; bits <= to[side];) {
            int n = 0;
            for (; n < 16 && bits <= to[side]; n++, bits += 61) memcpy(&in[n], &bits, sizeof bits);
            exp16_of(in, out);
            for (int i = 0; i < n; i++) {
                double want = exp((double)in[i]);
                if (want < 0x1p-126) /* subnormal or 0: within a subnormal's ulp or two */
                    ck_assert_msg(fabs(out[i] - want) <= 0x1p-148, "exp16(%g) = %g, want %g",
                                  in[i], out[i], want);
                else
                    worst = fmax(worst, fabs(out[i] - want) / ldexp(1.0, ilogb(want) - 23));
            }
        }
    ck_assert_msg(worst < 2.0, "worst error %g ulp", worst);
    float special[16] = {-INFINITY, NAN,   0.0f,     -0.0f, -88.5f, -103.0f, -104.0f, -1e30f,
                         88.7f,     89.0f, INFINITY, 1.0f,  -1.0f,  -0.5f,   0.5f,    -87.0f};
    exp16_of(special, out);
    ck_assert(out[0] == 0.0f && isnan(out[1]) && out[2] == 1.0f && out[3] == 1.0f);
    ck_assert(out[4] > 0.0f && out[4] < 0x1p-126f); /* a subnormal */
    ck_assert(out[6] == 0.0f && out[7] == 0.0f);
    ck_assert(isfinite(out[8]) && isinf(out[9]) && isinf(out[10]));
#endif
}
END_TEST

/* ---- softmax ------------------------------------------------------------------- */

static void softmax_ref(const float *x, int64_t rows, int64_t c, bool as_log, double *out) {
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; j++) m = fmax(m, x[r * c + j]);
        for (int64_t j = 0; j < c; j++) s += exp(x[r * c + j] - m);
        for (int64_t j = 0; j < c; j++)
            out[r * c + j] = as_log ? x[r * c + j] - m - log(s) : exp(x[r * c + j] - m) / s;
    }
}

/* the two halves' statistics combined as the op does: max of maxes, sums
 * rescaled to it and added */
static void split_stats(const mg_tensor *x, int64_t half, mg_tensor *m, mg_tensor *s) {
    int64_t rows = x->shape[0], c = x->shape[1];
    mg_tensor *a = columns(x, 0, half), *b = columns(x, half, c - half);
    mg_tensor *ma = mat(rows, 1), *mb = mat(rows, 1), *sa = vec(rows), *sb = vec(rows);
    BE->reduce_max(CTX, a, ma);
    BE->reduce_max(CTX, b, mb);
    for (int64_t r = 0; r < rows; r++) m->data[r] = fmaxf(ma->data[r], mb->data[r]);
    BE->softmax_sum(CTX, a, m, sa);
    BE->softmax_sum(CTX, b, m, sb);
    for (int64_t r = 0; r < rows; r++) s->data[r] = sa->data[r] + sb->data[r];
    mg_tensor *all[] = {a, b, ma, mb, sa, sb};
    for (int i = 0; i < 6; i++) mg_tensor_free(all[i]);
}

START_TEST(test_softmax) {
    /* with AVX-512, rows up to 4096 long go in runs of 64 (cpu_nn.c): runs
     * cut short, rows of whole vectors, rows too long for the runs */
    static const int64_t shapes[][2] = {{5, 7},    {3, 1},      {0, 4},    {4, 0},
                                        {40, 300}, {200, 1000}, {130, 48}, {3, 5000}};
    for (int s = 0; s < 8; s++)
        for (int as_log = 0; as_log < 2; as_log++) {
            int64_t rows = shapes[s][0], c = shapes[s][1];
            mg_tensor *x = rnd(2, shapes[s], 10 + s), *out = junk(2, shapes[s]);
            for (int64_t i = 0; i < x->numel; i++)
                x->data[i] = 6 * x->data[i] + (s == 0 ? 1000.0f : 0.0f);
            double *want = malloc((x->numel + 1) * sizeof *want);
            softmax_ref(x->data, rows, c, as_log, want);
            BE->softmax(CTX, x, NULL, NULL, as_log, out);
            expect_close_d(out->data, want, x->numel, 1e-6, as_log ? "log_softmax" : "softmax");
            if (c >= 2) { /* the row split in two: the same result from the combined stats */
                int64_t half = c / 2;
                mg_tensor *m = vec(rows), *sum = vec(rows), *whole = junk(2, shapes[s]);
                split_stats(x, half, m, sum);
                for (int part = 0; part < 2; part++) {
                    int64_t c0 = part ? half : 0, n = part ? c - half : half;
                    mg_tensor *xp = columns(x, c0, n), *op = mat(rows, n);
                    BE->softmax(CTX, xp, m, sum, as_log, op);
                    put_columns(whole, op, c0);
                    mg_tensor_free(xp);
                    mg_tensor_free(op);
                }
                expect_close_d(whole->data, want, x->numel, 1e-6, "softmax of a split row");
                mg_tensor_free(m), mg_tensor_free(sum), mg_tensor_free(whole);
            }
            free(want);
            mg_tensor_free(x);
            mg_tensor_free(out);
        }
}
END_TEST

START_TEST(test_softmax_backward) {
    static const int64_t shapes[][2] = {{6, 9}, {0, 3}, {3, 0}, {64, 700}};
    for (int s = 0; s < 4; s++)
        for (int as_log = 0; as_log < 2; as_log++) {
            int64_t rows = shapes[s][0], c = shapes[s][1];
            mg_tensor *x = rnd(2, shapes[s], 20 + s), *y = junk(2, shapes[s]);
            mg_tensor *dy = rnd(2, shapes[s], 30 + s), *dx = junk(2, shapes[s]);
            BE->softmax(CTX, x, NULL, NULL, as_log, y);
            BE->softmax_backward(CTX, y, dy, NULL, as_log, dx);
            double *want = malloc((x->numel + 1) * sizeof *want);
            for (int64_t r = 0; r < rows; r++) {
                double dot = 0;
                for (int64_t j = 0; j < c; j++)
                    dot += as_log ? dy->data[r * c + j]
                                  : (double)dy->data[r * c + j] * y->data[r * c + j];
                for (int64_t j = 0; j < c; j++) {
                    double yy = y->data[r * c + j], g = dy->data[r * c + j];
                    want[r * c + j] = as_log ? g - exp(yy) * dot : yy * (g - dot);
                }
            }
            expect_close_d(dx->data, want, x->numel, 1e-6, "softmax_backward");
            if (c >= 2) { /* split rows: dots of the halves added */
                int64_t half = c / 2;
                mg_tensor *ya = columns(y, 0, half), *yb = columns(y, half, c - half);
                mg_tensor *ga = columns(dy, 0, half), *gb = columns(dy, half, c - half);
                mg_tensor *da = vec(rows), *db = vec(rows), *oa = mat(rows, half),
                          *ob = mat(rows, c - half);
                BE->softmax_dot(CTX, ya, ga, as_log, da);
                BE->softmax_dot(CTX, yb, gb, as_log, db);
                for (int64_t r = 0; r < rows; r++) da->data[r] += db->data[r];
                BE->softmax_backward(CTX, ya, ga, da, as_log, oa);
                BE->softmax_backward(CTX, yb, gb, da, as_log, ob);
                mg_tensor *whole = junk(2, shapes[s]);
                put_columns(whole, oa, 0);
                put_columns(whole, ob, half);
                expect_close_d(whole->data, want, x->numel, 1e-6, "softmax_backward, split row");
                mg_tensor *all[] = {ya, yb, ga, gb, da, db, oa, ob, whole};
                for (int i = 0; i < 9; i++) mg_tensor_free(all[i]);
            }
            free(want);
            mg_tensor *all[] = {x, y, dy, dx};
            for (int i = 0; i < 4; i++) mg_tensor_free(all[i]);
        }
}
END_TEST

/* ---- layer norm ------------------------------------------------------------------ */

typedef struct {
    double *y, *dx, *dw, *db;
} ln_ref;

static ln_ref layer_norm_ref(const mg_tensor *x, const float *w, const float *b,
                             const mg_tensor *dy, float eps) {
    int64_t rows = x->shape[0], c = x->shape[1];
    ln_ref r = {calloc(x->numel + 1, 8), calloc(x->numel + 1, 8), calloc(c + 1, 8),
                calloc(c + 1, 8)};
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x->data + i * c, *g = dy->data + i * c;
        double mean = 0, var = 0, a = 0, bb = 0;
        for (int64_t j = 0; j < c; j++) mean += xr[j] / (double)c;
        for (int64_t j = 0; j < c; j++) var += (xr[j] - mean) * (xr[j] - mean) / c;
        double rstd = 1 / sqrt(var + eps);
        for (int64_t j = 0; j < c; j++) {
            double xh = (xr[j] - mean) * rstd, gw = g[j] * (w ? w[j] : 1.0);
            r.y[i * c + j] = xh * (w ? w[j] : 1.0) + (b ? b[j] : 0.0);
            a += gw;
            bb += gw * xh;
            r.dw[j] += g[j] * xh;
            r.db[j] += g[j];
        }
        for (int64_t j = 0; j < c; j++) {
            double xh = (xr[j] - mean) * rstd, gw = g[j] * (w ? w[j] : 1.0);
            r.dx[i * c + j] = rstd * (gw - a / c - xh * bb / c);
        }
    }
    return r;
}

static void layer_norm_case(int64_t rows, int64_t c, int affine, float offset) {
    int64_t shape[2] = {rows, c};
    mg_tensor *x = rnd(2, shape, 40 + rows), *dy = rnd(2, shape, 41), *y = junk(2, shape);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] = 3 * x->data[i] + offset;
    mg_tensor *w = affine & 1 ? rnd(1, &c, 42) : NULL, *b = affine & 2 ? rnd(1, &c, 43) : NULL;
    mg_tensor *stats = vec(2 * rows), *dx = junk(2, shape), *dw = vec(c), *db = vec(c);
    const float eps = 1e-5f;
    ln_ref ref = layer_norm_ref(x, w ? w->data : NULL, b ? b->data : NULL, dy, eps);
    BE->layer_norm(CTX, x, w, b, eps, NULL, c, stats, y);
    expect_close_d(y->data, ref.y, x->numel, 2e-5, "layer_norm");
    BE->layer_norm_backward(CTX, x, w, dy, stats, NULL, c, dx, w ? dw : NULL, b ? db : NULL);
    expect_close_d(dx->data, ref.dx, x->numel, 2e-5, "layer_norm dx");
    if (w) expect_close_d(dw->data, ref.dw, c, 2e-5, "layer_norm dw");
    if (b) expect_close_d(db->data, ref.db, c, 2e-5, "layer_norm db");
    if (c >= 2) { /* rows split in two: moments and backward sums added across the halves */
        int64_t half = c / 2, n[2] = {half, c - half}, c0[2] = {0, half};
        mg_tensor *part[2], *mom = vec(2 * rows), *tmp = vec(rows), *sums = vec(2 * rows);
        mg_tensor *mean = vec(rows);
        for (int h = 0; h < 2; h++) part[h] = columns(x, c0[h], n[h]);
        memset(mom->data, 0, 2 * rows * sizeof(float));
        for (int h = 0; h < 2; h++) { /* the sums of the halves, then the squared deviations */
            BE->layer_norm_moments(CTX, part[h], NULL, tmp);
            for (int64_t r = 0; r < rows; r++) mom->data[r] += tmp->data[r];
        }
        for (int64_t r = 0; r < rows; r++) mean->data[r] = mom->data[r] /= (float)c;
        for (int h = 0; h < 2; h++) {
            BE->layer_norm_moments(CTX, part[h], mean, tmp);
            for (int64_t r = 0; r < rows; r++) mom->data[rows + r] += tmp->data[r];
        }
        mg_tensor *whole = junk(2, shape), *wdx = junk(2, shape), *st = vec(2 * rows);
        memset(sums->data, 0, 2 * rows * sizeof(float));
        for (int h = 0; h < 2; h++) { /* forward, and the backward sums of each half */
            mg_tensor *wp = slice(w, c0[h], n[h]), *bp = slice(b, c0[h], n[h]);
            mg_tensor *yp = mat(rows, n[h]), *gp = columns(dy, c0[h], n[h]), *s2 = vec(2 * rows);
            BE->layer_norm(CTX, part[h], wp, bp, eps, mom, c, st, yp);
            put_columns(whole, yp, c0[h]);
            BE->layer_norm_backward_sums(CTX, part[h], wp, gp, st, s2);
            for (int64_t r = 0; r < 2 * rows; r++) sums->data[r] += s2->data[r];
            mg_tensor *all[] = {wp, bp, yp, gp, s2};
            for (int i = 0; i < 5; i++) mg_tensor_free(all[i]);
        }
        expect_close_d(whole->data, ref.y, x->numel, 2e-5, "layer_norm of split rows");
        /* dx from the summed sums; with weight and bias their gradients too, each
         * half's columns (the AVX-512 backward takes given sums where c is a
         * multiple of 16: the halves of 256 columns) */
        float *sdw = calloc((size_t)c + 1, sizeof(float));
        float *sdb = calloc((size_t)c + 1, sizeof(float));
        for (int h = 0; h < 2; h++) {
            mg_tensor *wp = slice(w, c0[h], n[h]), *gp = columns(dy, c0[h], n[h]);
            mg_tensor *dp = mat(rows, n[h]), *dwp = w && b ? vec(n[h]) : NULL;
            mg_tensor *dbp = w && b ? vec(n[h]) : NULL;
            BE->layer_norm_backward(CTX, part[h], wp, gp, st, sums, c, dp, dwp, dbp);
            put_columns(wdx, dp, c0[h]);
            if (dwp) {
                memcpy(sdw + c0[h], dwp->data, (size_t)n[h] * sizeof(float));
                memcpy(sdb + c0[h], dbp->data, (size_t)n[h] * sizeof(float));
            }
            mg_tensor *all[] = {wp, gp, dp, dwp, dbp};
            for (int i = 0; i < 5; i++) mg_tensor_free(all[i]);
        }
        expect_close_d(wdx->data, ref.dx, x->numel, 2e-5, "layer_norm dx of split rows");
        if (w && b) {
            expect_close_d(sdw, ref.dw, c, 2e-5, "layer_norm dw of split rows");
            expect_close_d(sdb, ref.db, c, 2e-5, "layer_norm db of split rows");
        }
        free(sdw), free(sdb);
        mg_tensor *all[] = {part[0], part[1], mom, tmp, sums, mean, whole, wdx, st};
        for (int i = 0; i < 9; i++) mg_tensor_free(all[i]);
    }
    free(ref.y), free(ref.dx), free(ref.dw), free(ref.db);
    mg_tensor *all[] = {x, dy, y, w, b, stats, dx, dw, db};
    for (int i = 0; i < 9; i++) mg_tensor_free(all[i]);
}

START_TEST(test_layer_norm) {
    for (int affine = 0; affine < 4; affine++) {
        layer_norm_case(5, 8, affine, 0.0f);
        layer_norm_case(3, 33, affine, 50.0f); /* a large mean: two passes keep the variance */
    }
    layer_norm_case(0, 6, 3, 0.0f);
    layer_norm_case(300, 256, 3, 1.0f);
    /* rows of 16-float vectors (cpu_layer_norm.c's AVX-512 forward, in runs
     * of 64 rows): shorter than a block of sums, a block and a part, a large
     * mean */
    for (int affine = 0; affine < 4; affine++) layer_norm_case(130, 272, affine, 50.0f);
    layer_norm_case(70, 48, 3, 0.0f);
    layer_norm_case(1, 16, 3, -20.0f);
    /* no columns: y and dx are empty, dw and db zeros of length 0 */
    layer_norm_case(4, 0, 0, 0.0f);
}
END_TEST

/* A large y or dx is written with streaming stores (cpu_rows.h: 8 MiB and more,
 * rows 64-byte aligned, on CPUs with AVX-512), and the layer norm and softmax
 * forwards go in runs of rows, each row's work woven into its neighbour's.
 * The same calls into an output one float off the alignment take the cached
 * path, two threads split the runs differently, and the rows after the
 * first, given alone, meet other neighbours: all must give the same bits,
 * the statistics and the weight gradients too. */
static void expect_bits(const mg_tensor *a, const mg_tensor *b, const char *what) {
    ck_assert_int_eq(a->numel, b->numel);
    ck_assert_msg(memcmp(a->data, b->data, (size_t)a->numel * sizeof(float)) == 0, "%s differs",
                  what);
}

START_TEST(test_streamed) {
    int64_t shape[2] = {2048, 1024}, c = 1024, n = 2048 * 1024;
    mg_tensor *x = rnd(2, shape, 60), *dy = rnd(2, shape, 61), *y = junk(2, shape);
    mg_tensor *w = rnd(1, &c, 62), *b = rnd(1, &c, 63), *stats = vec(2 * shape[0]);
    mg_tensor *stats2 = vec(2 * shape[0]), *dx = junk(2, shape);
    mg_tensor *dw = vec(c), *db = vec(c), *dw2 = vec(c), *db2 = vec(c);
    mg_tensor *buf = junk(1, (int64_t[]){n + 1});
    mg_tensor *flat = mg_tensor_slice(NULL, buf, 1, n), *off = mg_tensor_view(NULL, flat, 2, shape);
    ck_assert_ptr_nonnull(off);
    BE->layer_norm(CTX, x, w, b, 1e-5f, NULL, c, stats, y);
    BE->layer_norm(CTX, x, w, b, 1e-5f, NULL, c, stats2, off);
    expect_bits(y, off, "layer norm y");
    expect_bits(stats, stats2, "layer norm statistics");
    { /* the rows after the first, alone: each row's y where it is in the batch */
        int64_t rows = shape[0] - 1, s1[2] = {rows, c};
        mg_tensor *x1 = junk(2, s1), *y1 = junk(2, s1), *st1 = vec(2 * rows);
        memcpy(x1->data, x->data + c, (size_t)x1->numel * sizeof(float));
        BE->layer_norm(CTX, x1, w, b, 1e-5f, NULL, c, st1, y1);
        ck_assert_msg(memcmp(y1->data, y->data + c, (size_t)y1->numel * sizeof(float)) == 0,
                      "layer norm y of rows 1.. alone differs");
        ck_assert_msg(memcmp(st1->data, stats->data + 1, rows * sizeof(float)) == 0 &&
                          memcmp(st1->data + rows, stats->data + shape[0] + 1,
                                 rows * sizeof(float)) == 0,
                      "layer norm statistics of rows 1.. alone differ");
        mg_tensor_free(x1), mg_tensor_free(y1), mg_tensor_free(st1);
    }
#ifdef _OPENMP
    int threads = omp_get_max_threads();
    omp_set_num_threads(2);
    BE->layer_norm(CTX, x, w, b, 1e-5f, NULL, c, stats2, off);
    omp_set_num_threads(threads);
    expect_bits(y, off, "layer norm y on two threads");
    expect_bits(stats, stats2, "layer norm statistics on two threads");
#endif
    BE->layer_norm_backward(CTX, x, w, dy, stats, NULL, c, dx, dw, db);
    BE->layer_norm_backward(CTX, x, w, dy, stats, NULL, c, off, dw2, db2);
    expect_bits(dx, off, "layer norm dx");
    expect_bits(dw, dw2, "layer norm dw");
    expect_bits(db, db2, "layer norm db");
    BE->softmax(CTX, x, NULL, NULL, false, y);
    { /* the softmax's rows after the first alone, and on two threads */
        int64_t rows = shape[0] - 1, s1[2] = {rows, c};
        mg_tensor *x1 = junk(2, s1), *y1 = junk(2, s1);
        memcpy(x1->data, x->data + c, (size_t)x1->numel * sizeof(float));
        BE->softmax(CTX, x1, NULL, NULL, false, y1);
        ck_assert_msg(memcmp(y1->data, y->data + c, (size_t)y1->numel * sizeof(float)) == 0,
                      "softmax y of rows 1.. alone differs");
        mg_tensor_free(x1), mg_tensor_free(y1);
#ifdef _OPENMP
        omp_set_num_threads(2);
        BE->softmax(CTX, x, NULL, NULL, false, off);
        omp_set_num_threads(threads);
        expect_bits(y, off, "softmax y on two threads");
#endif
    }
    BE->softmax_backward(CTX, y, dy, NULL, false, dx);
    BE->softmax_backward(CTX, y, dy, NULL, false, off);
    expect_bits(dx, off, "softmax dx");
    mg_tensor *all[] = {off, flat, buf, x, dy, y, w, b, stats, stats2, dx, dw, db, dw2, db2};
    for (int i = 0; i < 15; i++) mg_tensor_free(all[i]);
}
END_TEST

/* ---- embedding ---------------------------------------------------------------------- */

START_TEST(test_embedding) {
    const int64_t v = 7, c = 5, n = 9;
    mg_tensor *table = rnd(2, (int64_t[]){v, c}, 50), *ids = vec(n),
              *dout = rnd(2, (int64_t[]){n, c}, 51);
    const float id_values[9] = {3, 0, 6, 3, 3, 1, 6, 2, 5}; /* repeats accumulate */
    memcpy(ids->data, id_values, sizeof id_values);
    /* the whole table, then two shards [0, 4) and [4, 7) whose lookups add up */
    for (int shards = 1; shards <= 2; shards++) {
        mg_tensor *sum = mat(n, c), *dtable = mat(v, c);
        memset(sum->data, 0, n * c * sizeof(float));
        for (int s = 0; s < shards; s++) {
            int64_t v0 = shards == 1 ? 0 : s * 4, vl = shards == 1 ? v : (s ? 3 : 4);
            mg_tensor *part = mat(vl, c), *out = mat(n, c), *dpart = mat(vl, c);
            memcpy(part->data, table->data + v0 * c, vl * c * sizeof(float));
            ck_assert_int_eq(BE->embedding(CTX, ids, part, v0, v, out), 0);
            for (int64_t e = 0; e < n * c; e++) sum->data[e] += out->data[e];
            BE->embedding_backward(CTX, ids, dout, v0, dpart);
            memcpy(dtable->data + v0 * c, dpart->data, vl * c * sizeof(float));
            mg_tensor_free(part), mg_tensor_free(out), mg_tensor_free(dpart);
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < c; j++)
                ck_assert_float_eq(sum->data[i * c + j],
                                   table->data[(int64_t)id_values[i] * c + j]);
        for (int64_t r = 0; r < v; r++)
            for (int64_t j = 0; j < c; j++) {
                float want = 0; /* rows added in id order, as the kernel does */
                for (int64_t i = 0; i < n; i++)
                    if (id_values[i] == r) want += dout->data[i * c + j];
                ck_assert_float_eq(dtable->data[r * c + j], want);
            }
        mg_tensor_free(sum), mg_tensor_free(dtable);
    }
    /* bad ids are counted and give zero rows */
    const float bad[9] = {-1, 7, 2.5f, NAN, 0, 0, 0, 0, 0};
    memcpy(ids->data, bad, sizeof bad);
    mg_tensor *out = mat(n, c);
    ck_assert_int_eq(BE->embedding(CTX, ids, table, 0, v, out), 4);
    for (int64_t e = 0; e < 4 * c; e++) ck_assert_float_eq(out->data[e], 0.0f);
    mg_tensor *empty = vec(0), *eout = mat(0, c);
    ck_assert_int_eq(BE->embedding(CTX, empty, table, 0, v, eout), 0);
    mg_tensor *all[] = {table, ids, dout, out, empty, eout};
    for (int i = 0; i < 6; i++) mg_tensor_free(all[i]);
}
END_TEST

/* ---- cross-entropy over a shard of the classes ---------------------------------------- */

START_TEST(test_cross_entropy_sharded) {
    const int64_t n = 6, v = 9, half = 4;
    mg_tensor *x = rnd(2, (int64_t[]){n, v}, 60), *labels = vec(n), *whole = junk(0, NULL);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] *= 5;
    const float lab[6] = {0, 8, 3, 4, 4, 7};
    memcpy(labels->data, lab, sizeof lab);
    float scale = 1.0f / n;
    ck_assert_int_eq(BE->cross_entropy(CTX, x, labels, scale, whole), 0);
    mg_tensor *g = junk(2, (int64_t[]){n, v});
    BE->cross_entropy_backward(CTX, x, labels, NULL, 0, v, scale, g);
    /* two shards: max combined, then the sums added; loss = mean of lse - target */
    mg_tensor *m = vec(n), *sum = vec(n);
    split_stats(x, half, m, sum);
    mg_tensor *sums = vec(2 * n), *acc = vec(2 * n), *lse = vec(n);
    memset(acc->data, 0, 2 * n * sizeof(float));
    mg_tensor *part[2] = {columns(x, 0, half), columns(x, half, v - half)};
    for (int s = 0; s < 2; s++) {
        ck_assert_int_eq(BE->cross_entropy_sums(CTX, part[s], labels, m, s ? half : 0, v, sums), 0);
        for (int64_t r = 0; r < 2 * n; r++) acc->data[r] += sums->data[r];
    }
    double loss = 0;
    for (int64_t r = 0; r < n; r++) {
        ck_assert(fabsf(acc->data[r] - sum->data[r]) <= 1e-5f * sum->data[r]);
        ck_assert_float_eq(acc->data[n + r], x->data[r * v + (int64_t)lab[r]]);
        lse->data[r] = m->data[r] + logf(acc->data[r]);
        loss += (lse->data[r] - acc->data[n + r]) * scale;
    }
    ck_assert_msg(fabs(loss - whole->data[0]) < 1e-5, "sharded loss %g, whole %g", loss,
                  whole->data[0]);
    mg_tensor *gs = junk(2, (int64_t[]){n, v});
    for (int s = 0; s < 2; s++) {
        int64_t c0 = s ? half : 0, w = s ? v - half : half;
        mg_tensor *gp = mat(n, w);
        BE->cross_entropy_backward(CTX, part[s], labels, lse, c0, v, scale, gp);
        put_columns(gs, gp, c0);
        mg_tensor_free(gp);
    }
    expect_same(gs, g, 1e-5, "dlogits of two shards");
    /* a bad label is counted by the sums kernel too */
    labels->data[2] = 9;
    ck_assert_int_eq(BE->cross_entropy_sums(CTX, part[0], labels, m, 0, v, sums), 1);
    mg_tensor *all[] = {x, labels, whole, g, m, sum, sums, acc, lse, part[0], part[1], gs};
    for (int i = 0; i < 12; i++) mg_tensor_free(all[i]);
}
END_TEST

/* ---- attention ------------------------------------------------------------------------ */

typedef struct {
    int64_t b, h, tq, tk, d, dv, q0, k0;
    bool causal;
} att_case;

/* plain attention in double: o, lse, and the gradients from dout */
static void attention_ref(const att_case *a, const float *q, const float *k, const float *v,
                          const float *dout, double *o, double *lse, double *dq, double *dk,
                          double *dv) {
    double scale = a->d ? 1.0 / sqrt((double)a->d) : 1.0;
    int64_t slices = a->b * a->h;
    double *p = malloc((a->tk + 1) * sizeof *p), *dp = malloc((a->tk + 1) * sizeof *dp);
    memset(dq, 0, (slices * a->tq * a->d + 1) * sizeof *dq);
    memset(dk, 0, (slices * a->tk * a->d + 1) * sizeof *dk);
    memset(dv, 0, (slices * a->tk * a->dv + 1) * sizeof *dv);
    for (int64_t z = 0; z < slices; z++)
        for (int64_t i = 0; i < a->tq; i++) {
            const float *qi = q + (z * a->tq + i) * a->d, *gi = dout + (z * a->tq + i) * a->dv;
            double m = -INFINITY, s = 0;
            int64_t n = 0;
            for (int64_t j = 0; j < a->tk; j++) {
                if (a->causal && a->k0 + j > a->q0 + i) break;
                double dot = 0;
                for (int64_t e = 0; e < a->d; e++)
                    dot += (double)qi[e] * k[(z * a->tk + j) * a->d + e];
                p[j] = dot * scale;
                m = fmax(m, p[j]);
                n = j + 1;
            }
            for (int64_t j = 0; j < n; j++) s += exp(p[j] - m);
            double *oi = o + (z * a->tq + i) * a->dv, dsum = 0;
            lse[z * a->tq + i] = n ? m + log(s) : -INFINITY;
            for (int64_t e = 0; e < a->dv; e++) oi[e] = 0;
            for (int64_t j = 0; j < n; j++) {
                p[j] = exp(p[j] - m) / s;
                dp[j] = 0;
                for (int64_t e = 0; e < a->dv; e++) {
                    double vv = v[(z * a->tk + j) * a->dv + e];
                    oi[e] += p[j] * vv;
                    dp[j] += gi[e] * vv;
                    dv[(z * a->tk + j) * a->dv + e] += p[j] * gi[e];
                }
                dsum += p[j] * dp[j];
            }
            for (int64_t j = 0; j < n; j++) {
                double ds = p[j] * (dp[j] - dsum) * scale;
                for (int64_t e = 0; e < a->d; e++) {
                    dq[(z * a->tq + i) * a->d + e] += ds * k[(z * a->tk + j) * a->d + e];
                    dk[(z * a->tk + j) * a->d + e] += ds * qi[e];
                }
            }
        }
    free(p);
    free(dp);
}

static void attention_case(const att_case *a) {
    int64_t qs[4] = {a->b, a->h, a->tq, a->d}, ks[4] = {a->b, a->h, a->tk, a->d};
    int64_t vs[4] = {a->b, a->h, a->tk, a->dv}, os[4] = {a->b, a->h, a->tq, a->dv};
    int64_t ls[3] = {a->b, a->h, a->tq};
    mg_tensor *q = rnd(4, qs, 70), *k = rnd(4, ks, 71), *v = rnd(4, vs, 72), *g = rnd(4, os, 73);
    for (int64_t i = 0; i < q->numel; i++) q->data[i] *= 3; /* peaked softmax rows */
    mg_tensor *o = junk(4, os), *lse = junk(3, ls), *dq = junk(4, qs), *dk = junk(4, ks),
              *dv = junk(4, vs);
    double *ro = malloc((o->numel + 1) * 8), *rl = malloc((lse->numel + 1) * 8);
    double *rq = malloc((q->numel + 1) * 8), *rk = malloc((k->numel + 1) * 8),
           *rv = malloc((v->numel + 1) * 8);
    attention_ref(a, q->data, k->data, v->data, g->data, ro, rl, rq, rk, rv);
    float scale = a->d ? 1.0f / sqrtf((float)a->d) : 1.0f;
    BE->attention(CTX, q, k, v, scale, a->causal, a->q0, a->k0, o, lse);
    BE->attention_backward(CTX, q, k, v, o, lse, g, scale, a->causal, a->q0, a->k0, dq, dk, dv);
    char what[160];
    snprintf(what, sizeof what,
             "attention b%lld h%lld tq%lld tk%lld d%lld dv%lld q0 %lld k0 %lld%s", (long long)a->b,
             (long long)a->h, (long long)a->tq, (long long)a->tk, (long long)a->d, (long long)a->dv,
             (long long)a->q0, (long long)a->k0, a->causal ? " causal" : "");
    expect_close_d(o->data, ro, o->numel, 2e-5, what);
    for (int64_t i = 0; i < lse->numel; i++)
        ck_assert_msg(isinf(rl[i]) ? isinf(lse->data[i]) && lse->data[i] < 0
                                   : fabs(lse->data[i] - rl[i]) < 2e-5 * fmax(1, fabs(rl[i])),
                      "%s: lse[%lld] %g want %g", what, (long long)i, lse->data[i], rl[i]);
    expect_close_d(dq->data, rq, dq->numel, 5e-5, "attention dq");
    expect_close_d(dk->data, rk, dk->numel, 5e-5, "attention dk");
    expect_close_d(dv->data, rv, dv->numel, 5e-5, "attention dv");
    free(ro), free(rl), free(rq), free(rk), free(rv);
    mg_tensor *all[] = {q, k, v, g, o, lse, dq, dk, dv};
    for (int i = 0; i < 9; i++) mg_tensor_free(all[i]);
}

START_TEST(test_attention) {
    static const att_case cases[] = {
        {2, 2, 5, 5, 4, 4, 0, 0, false},      {2, 2, 5, 5, 4, 4, 0, 0, true},
        {1, 3, 130, 130, 8, 8, 0, 0, true},   /* tiles of 64 crossed, partial last tile */
        {1, 1, 130, 200, 16, 8, 0, 0, false}, /* Tq != Tk, Dv != D */
        {1, 2, 40, 100, 8, 8, 60, 0, true},   /* a slice of the queries against all keys */
        {1, 1, 70, 70, 4, 4, 0, 20, true},    /* keys start later: early rows see nothing */
        {2, 1, 0, 7, 4, 4, 0, 0, true},       /* no queries */
        {1, 2, 6, 0, 4, 4, 0, 0, false},      /* no keys: o = 0, lse = -inf */
        {1, 1, 3, 3, 0, 5, 0, 0, true},       /* D = 0: uniform weights */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) attention_case(&cases[i]);
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_exp,       test_exp16,      test_softmax,
                            test_softmax_backward,      test_layer_norm, test_streamed,
                            test_embedding, test_cross_entropy_sharded, test_attention,
                            NULL};
    return mg_test_run(mg_test_suite("nn_kernels", tests));
}
