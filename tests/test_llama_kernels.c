/* test_llama_kernels.c: the CPU kernels of the Llama family's ops
 * (cpu_rms_norm.c, cpu_rope.c, and cpu_attention.c with fewer k, v heads than
 * query heads) against references:
 * - RMS norm forward and backward against plain loops in double, whole rows
 *   and rows split in two (the halves' squares and backward sums added as the
 *   op adds them across ranks), with and without a weight, rows longer than a
 *   block of sums, no rows, no columns;
 * - the rotary embedding against llama's formula in double, at later
 *   positions, heads wider than a block of pairs, undone by its inverse, in
 *   place in the same bits, and a slice of the positions (a rank's shard of T)
 *   equal to the same rows of the whole;
 * - grouped-query attention against the same kernel on k and v repeated to
 *   every query head (llama2.c's repeat_kv): o, lse and dq in the same bits,
 *   dk and dv the sums over each group. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_kernels.h"
#include "kernel_testutil.h"

static void expect_close(const mg_tensor *got, const mg_tensor *want, double tol,
                         const char *what) {
    char msg[256];
    ck_assert_int_eq(got->numel, want->numel);
    double big = 1e-30;
    for (int64_t i = 0; i < want->numel; i++) big = fmax(big, fabs(want->data[i]));
    ck_assert_msg(mg_test_close(got->data, want->data, got->numel, 0.0, tol * fmax(big, 1.0), msg,
                                sizeof msg),
                  "%s: %s", what, msg);
}

static void expect_bits(const mg_tensor *a, const mg_tensor *b, const char *what) {
    ck_assert_int_eq(a->numel, b->numel);
    ck_assert_msg(memcmp(a->data, b->data, (size_t)a->numel * sizeof(float)) == 0, "%s differs",
                  what);
}

static void free_all(mg_tensor **t, int n) {
    for (int i = 0; i < n; i++) mg_tensor_free(t[i]);
}

/* ---- RMS norm ---------------------------------------------------------------------- */

/* y, dx, dw of RMS norm in double */
static void rms_norm_ref(const mg_tensor *x, const float *w, const mg_tensor *dy, float eps,
                         double *y, double *dx, double *dw) {
    int64_t rows = x->shape[0], c = x->shape[1];
    for (int64_t j = 0; j < c; j++) dw[j] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x->data + r * c, *g = dy->data + r * c;
        double ms = 0, dot = 0;
        for (int64_t j = 0; j < c; j++) ms += (double)xr[j] * xr[j] / (double)c;
        double rstd = 1 / sqrt(ms + eps);
        for (int64_t j = 0; j < c; j++) {
            double xh = xr[j] * rstd, wj = w ? w[j] : 1.0;
            y[r * c + j] = xh * wj;
            dot += g[j] * wj * xh;
            dw[j] += g[j] * xh;
        }
        for (int64_t j = 0; j < c; j++)
            dx[r * c + j] = rstd * (g[j] * (w ? w[j] : 1.0) - xr[j] * rstd * dot / (double)c);
    }
}

static void rms_norm_case(int64_t rows, int64_t c, bool weighted) {
    int64_t shape[2] = {rows, c};
    mg_tensor *x = rnd(2, shape, 80 + rows), *dy = rnd(2, shape, 81), *y = junk(2, shape);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] = 3 * x->data[i] + 0.5f;
    mg_tensor *w = weighted ? rnd(1, &c, 82) : NULL, *rstd = vec(rows), *dx = junk(2, shape);
    mg_tensor *dw = vec(c);
    const float eps = 1e-5f;
    double *ry = calloc(x->numel + 1, 8), *rdx = calloc(x->numel + 1, 8), *rdw = calloc(c + 1, 8);
    rms_norm_ref(x, w ? w->data : NULL, dy, eps, ry, rdx, rdw);
    BE->rms_norm(CTX, x, w, eps, NULL, c, rstd, y);
    expect_close_d(y->data, ry, x->numel, 2e-6, "rms_norm");
    BE->rms_norm_backward(CTX, x, w, dy, rstd, NULL, c, dx, w ? dw : NULL);
    expect_close_d(dx->data, rdx, x->numel, 2e-6, "rms_norm dx");
    if (w) expect_close_d(dw->data, rdw, c, 2e-6, "rms_norm dw");
    if (c >= 2) { /* rows split in two: squares and backward sums added across the halves */
        int64_t half = c / 2, n[2] = {half, c - half}, c0[2] = {0, half};
        mg_tensor *part[2], *sq = vec(rows), *tmp = vec(rows), *sums = vec(rows);
        mg_tensor *whole = junk(2, shape), *wdx = junk(2, shape), *st = vec(rows);
        for (int h = 0; h < 2; h++) part[h] = columns(x, c0[h], n[h]);
        memset(sq->data, 0, (size_t)rows * sizeof(float));
        memset(sums->data, 0, (size_t)rows * sizeof(float));
        for (int h = 0; h < 2; h++) {
            BE->rms_norm_squares(CTX, part[h], tmp);
            for (int64_t r = 0; r < rows; r++) sq->data[r] += tmp->data[r];
        }
        float *sdw = calloc((size_t)c + 1, sizeof(float));
        for (int h = 0; h < 2; h++) { /* forward, and each half's backward sums */
            mg_tensor *wp = slice(w, c0[h], n[h]), *yp = columns(x, c0[h], n[h]);
            mg_tensor *gp = columns(dy, c0[h], n[h]);
            BE->rms_norm(CTX, part[h], wp, eps, sq, c, st, yp);
            put_columns(whole, yp, c0[h]);
            BE->rms_norm_backward_sums(CTX, part[h], wp, gp, st, tmp);
            for (int64_t r = 0; r < rows; r++) sums->data[r] += tmp->data[r];
            free_all((mg_tensor *[]){wp, yp, gp}, 3);
        }
        expect_close_d(whole->data, ry, x->numel, 2e-6, "rms_norm of split rows");
        for (int h = 0; h < 2; h++) { /* dx from the summed sums, dw of each half's columns */
            mg_tensor *wp = slice(w, c0[h], n[h]), *gp = columns(dy, c0[h], n[h]);
            mg_tensor *dp = columns(x, c0[h], n[h]), *dwp = w ? vec(n[h]) : NULL;
            BE->rms_norm_backward(CTX, part[h], wp, gp, st, sums, c, dp, dwp);
            put_columns(wdx, dp, c0[h]);
            if (dwp) memcpy(sdw + c0[h], dwp->data, (size_t)n[h] * sizeof(float));
            free_all((mg_tensor *[]){wp, gp, dp, dwp}, 4);
        }
        expect_close_d(wdx->data, rdx, x->numel, 2e-6, "rms_norm dx of split rows");
        if (w) expect_close_d(sdw, rdw, c, 2e-6, "rms_norm dw of split rows");
        free(sdw);
        free_all((mg_tensor *[]){part[0], part[1], sq, tmp, sums, whole, wdx, st}, 8);
    }
    free(ry), free(rdx), free(rdw);
    free_all((mg_tensor *[]){x, dy, y, w, rstd, dx, dw}, 7);
}

START_TEST(test_rms_norm) {
    for (int weighted = 0; weighted < 2; weighted++) {
        rms_norm_case(5, 8, weighted);
        rms_norm_case(3, 33, weighted);
        rms_norm_case(40, 700, weighted); /* longer than a block of sums */
    }
    rms_norm_case(0, 6, true);
    rms_norm_case(4, 0, true); /* no columns: empty y and dx, dw of length 0 */
}
END_TEST

/* ---- rotary embedding -------------------------------------------------------------- */

/* llama's rotation of x (B, T, H, D) in double, positions from pos0 */
static void rope_ref(const mg_tensor *x, int64_t pos0, double theta, double *out) {
    int64_t nb = x->shape[0], nt = x->shape[1], nh = x->shape[2], d = x->shape[3];
    for (int64_t b = 0; b < nb; b++)
        for (int64_t t = 0; t < nt; t++)
            for (int64_t h = 0; h < nh; h++)
                for (int64_t i = 0; i < d / 2; i++) {
                    int64_t e = ((b * nt + t) * nh + h) * d + 2 * i;
                    double freq = 1.0 / pow(theta, (double)(2 * i) / (double)d);
                    double a = (double)(pos0 + t) * freq, xr = x->data[e], xi = x->data[e + 1];
                    out[e] = xr * cos(a) - xi * sin(a);
                    out[e + 1] = xr * sin(a) + xi * cos(a);
                }
}

static void rope_case(int64_t b, int64_t t, int64_t h, int64_t d, int64_t pos0, float theta) {
    int64_t shape[4] = {b, t, h, d};
    mg_tensor *x = rnd(4, shape, 90 + d), *y = junk(4, shape), *back = junk(4, shape);
    double *want = calloc((size_t)x->numel + 1, sizeof *want);
    char what[96];
    snprintf(what, sizeof what, "rope (%lld, %lld, %lld, %lld) pos0 %lld theta %g", (long long)b,
             (long long)t, (long long)h, (long long)d, (long long)pos0, theta);
    rope_ref(x, pos0, theta, want);
    BE->rope(CTX, x, pos0, theta, false, y);
    expect_close_d(y->data, want, x->numel, 1e-6, what);
    BE->rope(CTX, y, pos0, theta, true, back); /* the backward undoes it */
    expect_close(back, x, 1e-6, "rope, then its inverse");
    mg_tensor *inplace = junk(4, shape);
    memcpy(inplace->data, x->data, (size_t)x->numel * sizeof(float));
    BE->rope(CTX, inplace, pos0, theta, false, inplace);
    expect_bits(inplace, y, "rope in place");
    if (b >= 1 && t >= 2) { /* batch 0 at positions [t0, t) alone, from pos0 + t0 */
        int64_t t0 = t / 2, rows = t - t0, part_shape[4] = {1, rows, h, d};
        mg_tensor *part = junk(4, part_shape), *py = junk(4, part_shape);
        memcpy(part->data, x->data + t0 * h * d, (size_t)part->numel * sizeof(float));
        BE->rope(CTX, part, pos0 + t0, theta, false, py);
        ck_assert_msg(memcmp(py->data, y->data + t0 * h * d, (size_t)py->numel * sizeof(float)) == 0,
                      "%s: positions from %lld alone differ", what, (long long)t0);
        mg_tensor_free(part), mg_tensor_free(py);
    }
    free(want);
    free_all((mg_tensor *[]){x, y, back, inplace}, 4);
}

START_TEST(test_rope) {
    rope_case(2, 5, 3, 8, 0, 10000.0f);
    rope_case(2, 5, 3, 8, 37, 10000.0f); /* later positions (a cache, a shard of T) */
    rope_case(1, 7, 2, 6, 3, 50.0f);     /* a small theta: every pair turns far */
    rope_case(1, 3, 1, 300, 1000, 10000.0f); /* more pairs than a block of them */
    rope_case(1, 4, 2, 2, 5, 10000.0f);
    rope_case(0, 4, 2, 4, 0, 10000.0f);
    rope_case(2, 3, 2, 0, 0, 10000.0f);
}
END_TEST

/* ---- grouped-query attention -------------------------------------------------------- */

/* k (B, KV, T, D) with each head repeated for its group of `group` query heads */
static mg_tensor *repeat_kv(const mg_tensor *k, int64_t group) {
    int64_t b = k->shape[0], kv = k->shape[1], slice_n = k->shape[2] * k->shape[3];
    mg_tensor *out = junk(4, (int64_t[]){b, kv * group, k->shape[2], k->shape[3]});
    for (int64_t z = 0; z < b * kv; z++)
        for (int64_t g = 0; g < group; g++)
            memcpy(out->data + (z * group + g) * slice_n, k->data + z * slice_n,
                   (size_t)slice_n * sizeof(float));
    return out;
}

/* d (B, KV * group, T, D) summed over each group, in query-head order */
static mg_tensor *sum_groups(const mg_tensor *d, int64_t group) {
    int64_t b = d->shape[0], kv = d->shape[1] / group, slice_n = d->shape[2] * d->shape[3];
    mg_tensor *out = junk(4, (int64_t[]){b, kv, d->shape[2], d->shape[3]});
    for (int64_t z = 0; z < b * kv; z++)
        for (int64_t e = 0; e < slice_n; e++) {
            double s = 0;
            for (int64_t g = 0; g < group; g++) s += d->data[(z * group + g) * slice_n + e];
            out->data[z * slice_n + e] = (float)s;
        }
    return out;
}

static void gqa_case(int64_t b, int64_t h, int64_t kv, int64_t tq, int64_t tk, int64_t d,
                     int64_t q0, int64_t k0, bool causal) {
    int64_t group = h / kv;
    int64_t qs[4] = {b, h, tq, d}, ks[4] = {b, kv, tk, d}, os[4] = {b, h, tq, d},
            ls[3] = {b, h, tq};
    mg_tensor *q = rnd(4, qs, 100), *k = rnd(4, ks, 101), *v = rnd(4, ks, 102), *g = rnd(4, os, 103);
    for (int64_t i = 0; i < q->numel; i++) q->data[i] *= 3;
    mg_tensor *kr = repeat_kv(k, group), *vr = repeat_kv(v, group);
    mg_tensor *o = junk(4, os), *lse = junk(3, ls), *ro = junk(4, os), *rl = junk(3, ls);
    float scale = 1.0f / sqrtf((float)d);
    BE->attention(CTX, q, k, v, scale, causal, q0, k0, o, lse);
    BE->attention(CTX, q, kr, vr, scale, causal, q0, k0, ro, rl);
    expect_bits(o, ro, "gqa o");
    expect_bits(lse, rl, "gqa lse");
    mg_tensor *dq = junk(4, qs), *dk = junk(4, ks), *dv = junk(4, ks);
    mg_tensor *rq = junk(4, qs), *rk = junk(4, kr->shape), *rv = junk(4, kr->shape);
    BE->attention_backward(CTX, q, k, v, o, lse, g, scale, causal, q0, k0, dq, dk, dv);
    BE->attention_backward(CTX, q, kr, vr, ro, rl, g, scale, causal, q0, k0, rq, rk, rv);
    expect_bits(dq, rq, "gqa dq");
    mg_tensor *sk = sum_groups(rk, group), *sv = sum_groups(rv, group);
    expect_close(dk, sk, 1e-6, "gqa dk (the group's sum)");
    expect_close(dv, sv, 1e-6, "gqa dv (the group's sum)");
    free_all((mg_tensor *[]){q, k, v, g, kr, vr, o, lse, ro, rl, dq, dk, dv, rq, rk, rv, sk, sv},
             18);
}

START_TEST(test_attention_gqa) {
    gqa_case(2, 4, 2, 5, 5, 4, 0, 0, false);
    gqa_case(2, 4, 2, 5, 5, 4, 0, 0, true);
    gqa_case(1, 6, 1, 130, 130, 8, 0, 0, true); /* one k, v head; tiles of 64 crossed */
    gqa_case(2, 6, 3, 40, 100, 8, 60, 0, true); /* a slice of the queries against all keys */
    gqa_case(1, 4, 4, 9, 9, 4, 0, 0, true);     /* kv_heads = heads: the plain kernel */
    gqa_case(1, 4, 2, 0, 7, 4, 0, 0, true);     /* no queries: dk, dv zero */
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_rms_norm, test_rope, test_attention_gqa, NULL};
    return mg_test_run(mg_test_suite("llama_kernels", tests));
}
