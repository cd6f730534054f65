/* test_kernels_bf16.c: the CPU backend's bf16 GEMMs (backend.h, cpu_gemm_bf16.c,
 * cpu_bf16.c) and the weights' bf16 copies (bf16_weights.c).
 * - mg_bf16_round against a reference that picks the nearer of the two bf16
 *   neighbours by arithmetic (ties to the even one), on edge cases and on
 *   random floats of every magnitude; cast_bf16 against it (values under
 *   2^-126 may go to zero, as the bf16 instructions flush them);
 * - gemm and gemm_batched with the bf16 switch on, against a plain loop that
 *   rounds each input the same way and sums the products in fp32: equal up to
 *   the order of the sums (a bound of k float roundings of the sum of |terms|),
 *   and measurably apart from the fp32 GEMM (the rounding really happens);
 * - gemm_bf16 on the kernel (AVX512-BF16, where the CPU has it) and on the
 *   emulation (forced by MG_CPU_BF16=emulate): against an fp64 sum of the
 *   exact products of the bf16-rounded inputs, the error within
 *   K eps32 sum |a||b| (plus the roundings of alpha, beta and the bias), for
 *   M, N, K of 1, odd and around the kernel's tile and block sizes (a B wider
 *   than its packed block too), every transpose, fp32 and bf16 inputs, padded
 *   rows, beta 0 and not, a bias, batches (a shared B too); the kernel's bits
 *   the same on 1 and 2 threads and for a row whatever rows are around it;
 * - the slow fallback loop of the emulation against the same reference;
 * - the switch goes off again: plain fp32 afterwards;
 * - a weight's bf16 copy: the cast's bits, kept for the step, cast again after
 *   mg_backend_bf16_weights_changed or the step's end, its bytes counted;
 * - the small product of the attention tiles (mg_cpu_gemm_bf16_small) against
 *   the same fp64 reference, on the kernel and emulated, and refusing what is
 *   too large for it; attention (forward and backward) in bf16 mode within 2e-2
 *   of fp32's, relative to the largest value (about 5e-3 measured), but not it,
 *   and the kernel's within 1e-5 of the emulation's (about 1e-7). */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#include "backend/backend.h"
#include "backend/backend_state.h"
#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "context.h"
#include "testutil.h"

#define BE (mg_backend_cpu()->iface)
#define CTX (mg_backend_cpu()->context)

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* the value of a bf16 bit pattern (upper 16 bits of a float), as a double;
 * the pattern just past the largest finite one counts as 2^128 */
static double bf16_value(uint32_t u) {
    if ((u & 0x7fffffffu) == 0x7f800000u) return (u >> 31 ? -1.0 : 1.0) * ldexp(1.0, 128);
    return (double)float_of(u);
}

/* Reference rounding, by arithmetic: the two bf16 values around x (x cut
 * towards zero, and one bf16 step further out), the nearer wins, a tie goes to
 * the one whose last kept bit is 0. */
static float reference_round(float x) {
    if (isnan(x) || isinf(x)) return x;
    uint32_t low = bits_of(x) & 0xffff0000u, high = low + 0x10000u;
    double dl = fabs((double)x - bf16_value(low)), dh = fabs(bf16_value(high) - (double)x);
    uint32_t pick = dl < dh ? low : dh < dl ? high : ((low >> 16) & 1u) ? high : low;
    return float_of(pick);
}

START_TEST(test_round_cases) {
    struct {
        float x, want;
    } cases[] = {
        {0.0f, 0.0f},
        {1.0f, 1.0f},
        {1.0f + 0x1p-8f, 1.0f},                       /* tie: to the even 1.0 */
        {1.0f + 0x1p-8f + 0x1p-20f, 1.0f + 0x1p-7f},  /* just past the tie: up */
        {1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-6f},         /* tie: to the even 1 + 2^-6 */
        {-(1.0f + 3 * 0x1p-8f), -(1.0f + 0x1p-6f)},   /* the same below zero */
        {1.0f + 0x1p-9f, 1.0f},                       /* below the tie: down */
        {FLT_MAX, INFINITY},                          /* past the largest bf16: inf */
        {-FLT_MAX, -INFINITY},
        {0x1.fe0000p127f, 0x1.fe0000p127f},           /* the largest bf16 itself */
        {INFINITY, INFINITY},
        {-INFINITY, -INFINITY},
        {0x1p-133f, 0x1p-133f},                       /* the smallest bf16 subnormal stays */
        {0x1.8p-130f, 0x1.8p-130f},                   /* a bf16 subnormal */
        {0x1p-149f, 0.0f},                            /* below half the smallest: to zero */
        {0x1.8p-134f, 0x1p-133f},                     /* past half of it: up */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float got = mg_bf16_round(cases[i].x), ref = reference_round(cases[i].x);
        ck_assert_msg(bits_of(got) == bits_of(cases[i].want),
                      "round(%a) = %a, want %a", (double)cases[i].x, (double)got,
                      (double)cases[i].want);
        ck_assert_msg(bits_of(ref) == bits_of(cases[i].want), "reference round(%a) = %a",
                      (double)cases[i].x, (double)ref);
    }
    ck_assert(bits_of(mg_bf16_round(-0.0f)) == bits_of(-0.0f));
    ck_assert(isnan(mg_bf16_round(NAN)));
    ck_assert(isnan(mg_bf16_round(float_of(0x7f800001u)))); /* a NaN whose payload is cut away */
}
END_TEST

START_TEST(test_round_random) {
    uint64_t s = 12345;
    int64_t ties = 0;
    for (int64_t i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)(mg_test_next(&s) >> 32);
        if (i % 7 == 0) u = (u & 0xffff0000u) | 0x8000u; /* exact ties, often */
        float x = float_of(u);
        if (isnan(x)) continue;
        ties += (u & 0xffffu) == 0x8000u;
        float got = mg_bf16_round(x), want = reference_round(x);
        ck_assert_msg(bits_of(got) == bits_of(want), "round(%a) = %a, reference %a", (double)x,
                      (double)got, (double)want);
        ck_assert((bits_of(got) & 0xffffu) == 0);
    }
    ck_assert(ties > 100000);
}
END_TEST

/* The plain loop: inputs rounded by the reference, products summed in fp32 in
 * k order; bound[i,j] = sum_p |terms| * k * 2^-24 (+ the alpha/beta roundings),
 * the most two orders of fp32 sums of these terms can differ by. */
static void reference_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                           const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                           const float *c0, float *want, double *bound, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            double mag = 0;
            for (int64_t p = 0; p < k; p++) {
                float t = reference_round(ta ? a[p * lda + i] : a[i * lda + p]) *
                          reference_round(tb ? b[j * ldb + p] : b[p * ldb + j]);
                s += t;
                mag += fabs(t);
            }
            float c = beta == 0.0f ? 0.0f : beta * c0[i * ldc + j];
            want[i * ldc + j] = alpha * s + c;
            bound[i * ldc + j] = (2.0 * (double)k * fabs(alpha) * mag + 4 * fabs(c)) * 0x1p-24 + 1e-30;
        }
}

/* One GEMM with the switch on, through `gemm` (the backend's, or the fallback
 * loop); returns the largest |got - want| / bound. */
static double bf16_case(int which, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t pad,
                        float beta, double *apart_from_fp32) {
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad, nc = m * ldc;
    float *a = malloc((size_t)(ar * lda + 1) * sizeof *a), *b = malloc((size_t)(br * ldb + 1) * sizeof *b);
    float *c = malloc((size_t)(nc + 1) * sizeof *c), *c0 = malloc((size_t)(nc + 1) * sizeof *c0);
    float *want = malloc((size_t)(nc + 1) * sizeof *want), *fp32 = malloc((size_t)(nc + 1) * sizeof *fp32);
    double *bound = malloc((size_t)(nc + 1) * sizeof *bound);
    mg_test_fill(a, ar * lda, 21 + (uint64_t)k);
    mg_test_fill(b, br * ldb, 22 + (uint64_t)n);
    mg_test_fill(c0, nc, 23);
    if (beta == 0.0f)
        for (int64_t i = 0; i < nc; i++) c0[i] = NAN; /* beta 0 overwrites */
    memcpy(c, c0, (size_t)nc * sizeof *c);
    memcpy(fp32, c0, (size_t)nc * sizeof *c);
    reference_gemm(ta, tb, m, n, k, 1.5f, a, lda, b, ldb, beta, c0, want, bound, ldc);
    mg_backend_set_gemm_bf16(1);
    if (which == 0)
        BE->gemm(CTX, ta, tb, m, n, k, 1.5f, a, lda, b, ldb, beta, c, ldc);
    else
        mg_cpu_bf16_gemm_loop(ta, tb, m, n, k, 1.5f, a, lda, b, ldb, beta, c, ldc);
    mg_backend_set_gemm_bf16(0);
    BE->gemm(CTX, ta, tb, m, n, k, 1.5f, a, lda, b, ldb, beta, fp32, ldc);
    double worst = 0, apart = 0, scale = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            int64_t e = i * ldc + j;
            if (j >= n) { /* padding untouched */
                ck_assert(memcmp(&c[e], &c0[e], sizeof(float)) == 0);
                continue;
            }
            double r = fabs((double)c[e] - want[e]) / bound[e];
            if (!(r <= worst)) worst = r; /* NaN sticks */
            apart = fmax(apart, fabs((double)fp32[e] - want[e]));
            scale = fmax(scale, fabs((double)want[e]));
        }
    *apart_from_fp32 = scale > 0 ? apart / scale : 0;
    free(a), free(b), free(c), free(c0), free(want), free(fp32), free(bound);
    return worst;
}

/* _i: 0 the backend's gemm, 1 the fallback loop */
START_TEST(test_gemm_bf16) {
    static const int64_t sizes[][3] = {{1, 1, 1},   {3, 5, 7},    {17, 33, 65},
                                       {64, 1, 128}, {1, 70, 1},  {96, 80, 300}};
    double apart_max = 0;
    for (int combo = 0; combo < 4; combo++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int64_t pad = 0; pad <= 3; pad += 3)
                for (int with_beta = 0; with_beta < 2; with_beta++) {
                    double apart = 0;
                    double r = bf16_case(_i, combo & 1, combo >> 1, sizes[s][0], sizes[s][1],
                                         sizes[s][2], pad, with_beta ? 0.5f : 0.0f, &apart);
                    ck_assert_msg(r <= 1.0,
                                  "bf16 gemm (%s) ta=%d tb=%d %lldx%lldx%lld pad %lld: error %.3g "
                                  "of the reassociation bound",
                                  _i ? "loop" : "backend", combo & 1, combo >> 1,
                                  (long long)sizes[s][0], (long long)sizes[s][1],
                                  (long long)sizes[s][2], (long long)pad, r);
                    if (sizes[s][2] >= 65) apart_max = fmax(apart_max, apart);
                }
    /* the fp32 GEMM of the unrounded inputs is ~2^-9 relative away: bf16 happened */
    ck_assert_msg(apart_max > 1e-4 && apart_max < 3e-2, "fp32 vs bf16 GEMM: %.3g apart", apart_max);
}
END_TEST

/* batched, B shared (stride 0) and strided: each entry equals one bf16 gemm */
START_TEST(test_gemm_batched_bf16) {
    int64_t batch = 4, m = 9, n = 11, k = 70;
    for (int shared = 0; shared < 2; shared++) {
        int64_t sb = shared ? 0 : k * n;
        float *a = malloc((size_t)(batch * m * k) * sizeof *a), *b = malloc((size_t)(batch * k * n) * sizeof *b);
        float *c = malloc((size_t)(batch * m * n) * sizeof *c), *want = malloc((size_t)(batch * m * n) * sizeof *want);
        mg_test_fill(a, batch * m * k, 31);
        mg_test_fill(b, batch * k * n, 32);
        mg_test_fill(c, batch * m * n, 33);
        memcpy(want, c, (size_t)(batch * m * n) * sizeof *c);
        mg_backend_set_gemm_bf16(1);
        BE->gemm_batched(CTX, false, false, m, n, k, 0.5f, a, k, m * k, b, n, sb, 1.0f, c, n, m * n, batch);
        for (int64_t e = 0; e < batch; e++)
            BE->gemm(CTX, false, false, m, n, k, 0.5f, a + e * m * k, k, b + e * sb, n, 1.0f,
                     want + e * m * n, n);
        mg_backend_set_gemm_bf16(0);
        ck_assert_msg(memcmp(c, want, (size_t)(batch * m * n) * sizeof *c) == 0,
                      "batched bf16 (shared B %d) differs from one gemm per entry", shared);
        free(a), free(b), free(c), free(want);
    }
}
END_TEST

/* k = 0 is C = beta C in bf16 mode too; and the switch reads back */
START_TEST(test_gemm_bf16_edges) {
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4}, c[4] = {1, 2, 3, NAN};
    mg_backend_set_gemm_bf16(1);
    ck_assert_int_eq(mg_backend_gemm_bf16(), 1);
    BE->gemm(CTX, false, false, 2, 2, 0, 1.0f, a, 1, b, 2, 0.5f, c, 2);
    ck_assert(c[0] == 0.5f && c[1] == 1.0f && c[2] == 1.5f && isnan(c[3]));
    BE->gemm(CTX, false, false, 2, 2, 0, 1.0f, a, 1, b, 2, 0.0f, c, 2);
    ck_assert(c[0] == 0 && c[1] == 0 && c[2] == 0 && c[3] == 0);
    mg_backend_set_gemm_bf16(0);
    ck_assert_int_eq(mg_backend_gemm_bf16(), 0);
    /* off again: 1 + 2^-10 survives an fp32 GEMM (it would not in bf16) */
    float x = 1.0f + 0x1p-10f, one = 1.0f, y = 0;
    BE->gemm(CTX, false, false, 1, 1, 1, 1.0f, &x, 1, &one, 1, 0.0f, &y, 1);
    ck_assert(y == x);
    mg_backend_set_gemm_bf16(1);
    BE->gemm(CTX, false, false, 1, 1, 1, 1.0f, &x, 1, &one, 1, 0.0f, &y, 1);
    mg_backend_set_gemm_bf16(0);
    ck_assert(y == 1.0f);
}
END_TEST

/* ---- gemm_bf16: the kernel and the emulation ------------------------------------------ */

/* _i of the tests below: 0 the CPU's choice (the kernel where it has
 * AVX512-BF16), 1 the emulation, forced as a user would (each test runs in a
 * process of its own) */
static void pick(int emulate) {
    if (emulate) setenv("MG_CPU_BF16", "emulate", 1);
    else unsetenv("MG_CPU_BF16");
    mg_backend_ctx()->cpu_bf16 = 0; /* decide again */
    const char *name = mg_backend_cpu_bf16_gemm();
    if (emulate) ck_assert_msg(strstr(name, "emulated, as MG_CPU_BF16=emulate asks"), "%s", name);
}

static uint16_t bits16(float x) { return (uint16_t)(bits_of(mg_bf16_round(x)) >> 16); }

/* element (r, c) of a stored matrix of floats or bf16 values, as its bf16 value */
static double stored(const void *x, bool bf16, int64_t ld, int64_t r, int64_t c) {
    if (bf16) return (double)float_of((uint32_t)((const uint16_t *)x)[r * ld + c] << 16);
    return (double)reference_round(((const float *)x)[r * ld + c]);
}

typedef struct {
    bool ta, tb, a16, b16, bias;
    int64_t m, n, k, pad, batch, sb; /* sb: B's stride in matrices (0: shared) */
    float beta;
} kcase;

/* One gemm_bf16 call against the fp64 reference; returns the worst error as a
 * fraction of its bound. got_out (optional) receives C. */
static double kernel_case(const kcase *q, float *got_out) {
    int64_t ar = q->ta ? q->k : q->m, ac = q->ta ? q->m : q->k;
    int64_t br = q->tb ? q->n : q->k, bc = q->tb ? q->k : q->n;
    int64_t lda = ac + q->pad, ldb = bc + q->pad, ldc = q->n + q->pad;
    int64_t sa = ar * lda, sb = q->sb * br * ldb, sc = q->m * ldc, nb = q->batch;
    int64_t na = nb * sa + 1, nbb = (q->sb ? nb : 1) * br * ldb + 1, nc = nb * sc + 1;
    float *a = malloc((size_t)na * sizeof *a), *b = malloc((size_t)nbb * sizeof *b);
    float *c = malloc((size_t)nc * sizeof *c), *c0 = malloc((size_t)nc * sizeof *c0);
    float *bias = malloc((size_t)q->n * sizeof *bias);
    uint16_t *a16 = malloc((size_t)na * sizeof *a16), *b16 = malloc((size_t)nbb * sizeof *b16);
    mg_test_fill(a, na, 41 + (uint64_t)q->k);
    mg_test_fill(b, nbb, 42 + (uint64_t)q->n);
    mg_test_fill(c0, nc, 43);
    mg_test_fill(bias, q->n, 44);
    for (int64_t i = 0; i < na; i++) a16[i] = bits16(a[i]);
    for (int64_t i = 0; i < nbb; i++) b16[i] = bits16(b[i]);
    if (q->beta == 0.0f)
        for (int64_t i = 0; i < nc; i++) c0[i] = NAN; /* beta 0 overwrites */
    memcpy(c, c0, (size_t)nc * sizeof *c);
    const float alpha = 1.5f;
    mg_gemm_in ai = {q->a16 ? (const void *)a16 : a, lda, sa, q->a16};
    mg_gemm_in bi = {q->b16 ? (const void *)b16 : b, ldb, sb, q->b16};
    BE->gemm_bf16(CTX, q->ta, q->tb, q->m, q->n, q->k, alpha, &ai, &bi, q->beta, c, ldc, sc, nb,
                  q->bias ? bias : NULL);
    double worst = 0;
    for (int64_t e = 0; e < nb; e++) {
        const void *ae = q->a16 ? (const void *)(a16 + e * sa) : a + e * sa;
        const void *be = q->b16 ? (const void *)(b16 + e * sb) : b + e * sb;
        for (int64_t i = 0; i < q->m; i++)
            for (int64_t j = 0; j < ldc; j++) {
                int64_t x = e * sc + i * ldc + j;
                if (j >= q->n) { /* padding untouched */
                    ck_assert(memcmp(&c[x], &c0[x], sizeof(float)) == 0);
                    continue;
                }
                double sum = 0, mag = 0;
                for (int64_t p = 0; p < q->k; p++) {
                    double t = (q->ta ? stored(ae, q->a16, lda, p, i) : stored(ae, q->a16, lda, i, p)) *
                               (q->tb ? stored(be, q->b16, ldb, j, p) : stored(be, q->b16, ldb, p, j));
                    sum += t; /* exact: 16-bit significands */
                    mag += fabs(t);
                }
                double rest = (q->beta == 0.0f ? 0.0 : (double)q->beta * c0[x]) +
                              (q->bias ? (double)bias[j] : 0.0);
                double want = alpha * sum + rest;
                double bound = (2.0 * (double)q->k * alpha * mag + 4 * fabs(rest)) * 0x1p-24 + 1e-30;
                double r = fabs((double)c[x] - want) / bound;
                if (!(r <= worst)) worst = r; /* NaN sticks */
            }
    }
    if (got_out) memcpy(got_out, c, (size_t)nc * sizeof *c);
    free(a), free(b), free(c), free(c0), free(bias), free(a16), free(b16);
    return worst;
}

/* the sizes around the kernel's tile (6 x 64), K block (384) and M block (192) */
START_TEST(test_gemm_bf16_shapes) {
    pick(_i);
    static const int64_t sizes[][3] = {
        {1, 1, 1},    {1, 70, 3},    {5, 1, 9},     {6, 64, 2},     {7, 65, 33},  {13, 129, 1},
        {2, 3, 385},  {193, 63, 64}, {12, 128, 769}, {31, 17, 384}, {64, 192, 130}, {200, 70, 390},
    };
    for (int combo = 0; combo < 16; combo++)
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            kcase q = {.ta = combo & 1, .tb = combo & 2, .a16 = combo & 4, .b16 = combo & 8,
                       .bias = z % 2, .m = sizes[z][0], .n = sizes[z][1], .k = sizes[z][2],
                       .pad = z % 3 == 1 ? 3 : 0, .batch = 1, .beta = z % 4 == 3 ? 0.5f : 0.0f};
            double r = kernel_case(&q, NULL);
            ck_assert_msg(r <= 1.0,
                          "gemm_bf16 (%s) ta=%d tb=%d a16=%d b16=%d %lldx%lldx%lld pad %lld: "
                          "error %.3g of the bound", mg_backend_cpu_bf16_gemm(), q.ta, q.tb, q.a16,
                          q.b16, (long long)q.m, (long long)q.n, (long long)q.k,
                          (long long)q.pad, r);
        }
}
END_TEST

/* B wider than one packed block (N blocks, each packing A again): a short A
 * against a wide B, every transpose, bf16 and fp32 operands */
START_TEST(test_gemm_bf16_wide) {
    pick(_i);
    for (int combo = 0; combo < 8; combo++) {
        kcase q = {.ta = combo & 1, .tb = combo & 2, .a16 = combo & 4, .b16 = combo & 4,
                   .bias = combo & 1, .m = 8, .n = 3600, .k = 600, .pad = 1, .batch = 1,
                   .beta = combo & 2 ? 0.5f : 0.0f};
        double r = kernel_case(&q, NULL);
        ck_assert_msg(r <= 1.0, "gemm_bf16 (%s) ta=%d tb=%d bf16=%d 8x3600x600: %.3g of the bound",
                      mg_backend_cpu_bf16_gemm(), q.ta, q.tb, q.a16, r);
    }
}
END_TEST

/* batches: strided and a shared B; each entry within the bound */
START_TEST(test_gemm_bf16_batched) {
    pick(_i);
    for (int shared = 0; shared < 2; shared++)
        for (int combo = 0; combo < 4; combo++) {
            kcase q = {.ta = combo & 1, .tb = combo & 2, .a16 = shared, .bias = combo == 3,
                       .m = 9, .n = 70, .k = 37, .pad = 1, .batch = 4, .sb = !shared, .beta = 1.0f};
            double r = kernel_case(&q, NULL);
            ck_assert_msg(r <= 1.0, "batched gemm_bf16 shared B %d combo %d: %.3g of the bound",
                          shared, combo, r);
        }
}
END_TEST

/* alpha 0 and k 0: C = beta C + bias, A and B not read */
START_TEST(test_gemm_bf16_kernel_edges) {
    pick(_i);
    float c[4] = {1, 2, 3, NAN}, bias[2] = {10, 20};
    mg_gemm_in none = {NULL, 1, 0, false};
    BE->gemm_bf16(CTX, false, false, 2, 2, 0, 1.0f, &none, &none, 0.5f, c, 2, 0, 1, bias);
    ck_assert(c[0] == 10.5f && c[1] == 21.0f && c[2] == 11.5f && isnan(c[3]));
    BE->gemm_bf16(CTX, false, false, 2, 2, 5, 0.0f, &none, &none, 0.0f, c, 2, 0, 1, NULL);
    ck_assert(c[0] == 0 && c[1] == 0 && c[2] == 0 && c[3] == 0);
}
END_TEST

/* The kernel's sums do not depend on the threads, nor on the rows around a
 * row (a row shard gets the bits of the whole) */
START_TEST(test_gemm_bf16_deterministic) {
    pick(0);
    int64_t m = 400, n = 130, k = 900;
    for (int ta = 0; ta < 2; ta++) {
        float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
        float *c1 = malloc((size_t)(m * n) * sizeof *c1), *c2 = malloc((size_t)(m * n) * sizeof *c2);
        float *part = malloc((size_t)(m * n) * sizeof *part);
        mg_test_fill(a, m * k, 51);
        mg_test_fill(b, k * n, 52);
        int64_t lda = ta ? m : k;
        mg_gemm_in ai = {a, lda, 0, false}, bi = {b, n, 0, false};
        mg_backend_cpu_set_threads(1);
        BE->gemm_bf16(CTX, ta, false, m, n, k, 1.0f, &ai, &bi, 0.0f, c1, n, 0, 1, NULL);
        mg_backend_cpu_set_threads(2);
        BE->gemm_bf16(CTX, ta, false, m, n, k, 1.0f, &ai, &bi, 0.0f, c2, n, 0, 1, NULL);
        ck_assert_msg(memcmp(c1, c2, (size_t)(m * n) * sizeof *c1) == 0,
                      "ta=%d: 1 and 2 threads differ", ta);
        /* rows [7, 7 + 101) alone */
        mg_gemm_in rows = {ta ? (const void *)(a + 7) : (const void *)(a + 7 * k), lda, 0, false};
        BE->gemm_bf16(CTX, ta, false, 101, n, k, 1.0f, &rows, &bi, 0.0f, part, n, 0, 1, NULL);
        ck_assert_msg(memcmp(part, c1 + 7 * n, (size_t)(101 * n) * sizeof *c1) == 0,
                      "ta=%d: a row's bits depend on the rows around it", ta);
        mg_backend_cpu_set_threads(1);
        free(a), free(b), free(c1), free(c2), free(part);
    }
}
END_TEST

/* cast_bf16 rounds as mg_bf16_round, but for values under 2^-126, which the
 * bf16 instructions may take to zero */
START_TEST(test_cast_bf16) {
    pick(_i);
    uint64_t s = 777;
    int64_t n = 100003;
    float *x = malloc((size_t)n * sizeof *x);
    uint16_t *y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)(mg_test_next(&s) >> 32);
        if (i % 5 == 0) u = (u & 0xffff0000u) | 0x8000u; /* ties */
        x[i] = float_of(u);
    }
    x[0] = INFINITY, x[1] = -INFINITY, x[2] = NAN, x[3] = FLT_MAX, x[4] = 0.0f, x[5] = -0.0f;
    BE->cast_bf16(CTX, x, y, n);
    for (int64_t i = 0; i < n; i++) {
        float got = float_of((uint32_t)y[i] << 16), want = mg_bf16_round(x[i]);
        if (isnan(x[i])) {
            ck_assert(isnan(got));
            continue;
        }
        bool tiny = fabsf(x[i]) < 0x1p-126f;
        ck_assert_msg(bits_of(got) == bits_of(want) || (tiny && got == 0.0f),
                      "cast(%a) = %a, want %a", (double)x[i], (double)got, (double)want);
    }
    free(x), free(y);
}
END_TEST

/* a weight's copy: cast once a step, again after a change or the step's end */
START_TEST(test_bf16_weights) {
    pick(_i);
    mg_backend_bf16_weights_free();
    int64_t shape[2] = {33, 17};
    mg_tensor *w = mg_tensor_alloc(NULL, 2, shape);
    mg_test_fill(w->data, w->numel, 61);
    const uint16_t *c1 = mg_backend_bf16_weight(w);
    ck_assert_ptr_nonnull(c1);
    for (int64_t i = 0; i < w->numel; i++) ck_assert_uint_eq(c1[i], bits16(w->data[i]));
    ck_assert_uint_eq(mg_backend_bf16_weights_bytes(MG_DEVICE_CPU), (size_t)w->numel * 2);
    uint16_t before = c1[0];
    w->data[0] = 1000.0f; /* in mid-step: not seen until the copies are dropped */
    ck_assert_ptr_eq(mg_backend_bf16_weight(w), c1);
    ck_assert_uint_eq(c1[0], before);
    mg_backend_bf16_weights_changed(); /* an optimizer step */
    const uint16_t *c2 = mg_backend_bf16_weight(w);
    ck_assert_ptr_eq(c2, c1); /* the same memory, cast again */
    ck_assert_uint_eq(c2[0], bits16(1000.0f));
    w->data[1] = -3.0f;
    mg_ctx()->steps++; /* mg_step_end */
    ck_assert_uint_eq(mg_backend_bf16_weight(w)[1], bits16(-3.0f));
    ck_assert_uint_eq(mg_backend_bf16_weights_bytes(MG_DEVICE_CPU), (size_t)w->numel * 2);
    mg_backend_bf16_weights_free();
    ck_assert_uint_eq(mg_backend_bf16_weights_bytes(MG_DEVICE_CPU), 0);
    mg_tensor_free(w);
}
END_TEST

/* ---- the attention tiles' small product, and attention in bf16 mode ---------------------- */

START_TEST(test_gemm_bf16_small) {
    static const int64_t sizes[][3] = {{1, 1, 1},   {7, 33, 5},   {64, 64, 32}, {64, 32, 64},
                                       {13, 17, 255}, {6, 16, 2}, {128, 128, 256}, {65, 70, 31}};
    for (int kernel = 0; kernel < 2; kernel++)
        for (int combo = 0; combo < 4; combo++)
            for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
                bool ta = combo & 1, tb = combo & 2;
                int64_t m = sizes[z][0], n = sizes[z][1], k = sizes[z][2];
                int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
                float *a = malloc((size_t)((ta ? k : m) * lda) * sizeof *a);
                float *b = malloc((size_t)((tb ? n : k) * ldb) * sizeof *b);
                float *c = malloc((size_t)(m * ldc) * sizeof *c), *c0 = malloc((size_t)(m * ldc) * sizeof *c);
                mg_test_fill(a, (ta ? k : m) * lda, 71 + (uint64_t)z);
                mg_test_fill(b, (tb ? n : k) * ldb, 72 + (uint64_t)z);
                mg_test_fill(c0, m * ldc, 73);
                memcpy(c, c0, (size_t)(m * ldc) * sizeof *c);
                float beta = z % 2 ? 1.0f : 0.0f, alpha = 0.25f;
                ck_assert_int_eq(mg_cpu_gemm_bf16_small(kernel, ta, tb, m, n, k, alpha, a, lda, b, ldb,
                                                        beta, c, ldc), 0);
                double worst = 0;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < ldc; j++) {
                        if (j >= n) {
                            ck_assert(memcmp(&c[i * ldc + j], &c0[i * ldc + j], sizeof(float)) == 0);
                            continue;
                        }
                        double sum = 0, mag = 0;
                        for (int64_t p = 0; p < k; p++) {
                            double t = stored(a, false, lda, ta ? p : i, ta ? i : p) *
                                       stored(b, false, ldb, tb ? j : p, tb ? p : j);
                            sum += t;
                            mag += fabs(t);
                        }
                        double rest = beta * c0[i * ldc + j], want = alpha * sum + rest;
                        double bound = (2.0 * (double)k * alpha * mag + 4 * fabs(rest)) * 0x1p-24 + 1e-30;
                        double r = fabs((double)c[i * ldc + j] - want) / bound;
                        if (!(r <= worst)) worst = r;
                    }
                ck_assert_msg(worst <= 1.0, "small bf16 product (kernel %d) ta=%d tb=%d %lldx%lldx%lld: "
                              "%.3g of the bound", kernel, ta, tb, (long long)m, (long long)n,
                              (long long)k, worst);
                free(a), free(b), free(c), free(c0);
            }
    float x[4] = {0};
    ck_assert_int_eq(mg_cpu_gemm_bf16_small(1, false, false, 129, 1, 1, 1.0f, x, 1, x, 1, 0.0f, x, 1), -1);
    ck_assert_int_eq(mg_cpu_gemm_bf16_small(1, false, false, 1, 1, 257, 1.0f, x, 257, x, 1, 0.0f, x, 1), -1);
}
END_TEST

/* one attention forward and backward (causal, B 2, H 4 over 2 kv heads, T 80, D 32) */
static void attention_run(int bf16, float **out) {
    int64_t sq[4] = {2, 4, 80, 32}, skv[4] = {2, 2, 80, 32}, sl[3] = {2, 4, 80};
    mg_tensor *q = mg_tensor_alloc(NULL, 4, sq), *k = mg_tensor_alloc(NULL, 4, skv);
    mg_tensor *v = mg_tensor_alloc(NULL, 4, skv), *o = mg_tensor_alloc(NULL, 4, sq);
    mg_tensor *lse = mg_tensor_alloc(NULL, 3, sl), *dout = mg_tensor_alloc(NULL, 4, sq);
    mg_tensor *dq = mg_tensor_alloc(NULL, 4, sq), *dk = mg_tensor_alloc(NULL, 4, skv);
    mg_tensor *dv = mg_tensor_alloc(NULL, 4, skv);
    mg_test_fill(q->data, q->numel, 81);
    mg_test_fill(k->data, k->numel, 82);
    mg_test_fill(v->data, v->numel, 83);
    mg_test_fill(dout->data, dout->numel, 84);
    mg_backend_set_gemm_bf16(bf16);
    BE->attention(CTX, q, k, v, 0.5f, true, 0, 0, o, lse);
    BE->attention_backward(CTX, q, k, v, o, lse, dout, 0.5f, true, 0, 0, dq, dk, dv);
    mg_backend_set_gemm_bf16(0);
    const mg_tensor *res[4] = {o, dq, dk, dv};
    for (int i = 0; i < 4; i++) {
        out[i] = malloc((size_t)res[i]->numel * sizeof(float));
        memcpy(out[i], res[i]->data, (size_t)res[i]->numel * sizeof(float));
    }
    mg_tensor_free(q), mg_tensor_free(k), mg_tensor_free(v), mg_tensor_free(o);
    mg_tensor_free(lse), mg_tensor_free(dout), mg_tensor_free(dq), mg_tensor_free(dk);
    mg_tensor_free(dv);
}

/* the largest difference of two results relative to the first's largest value */
static double apart(const float *x, const float *y, int64_t n) {
    double d = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)x[i] - y[i]));
        scale = fmax(scale, fabs((double)x[i]));
    }
    return d / scale;
}

START_TEST(test_attention_bf16) {
    static const char *const names[4] = {"o", "dq", "dk", "dv"};
    const int64_t numel[4] = {2 * 4 * 80 * 32, 2 * 4 * 80 * 32, 2 * 2 * 80 * 32, 2 * 2 * 80 * 32};
    float *f32[4], *kern[4], *emu[4];
    pick(0);
    attention_run(0, f32);
    attention_run(1, kern);
    pick(1);
    attention_run(1, emu);
    for (int i = 0; i < 4; i++) {
        double a = apart(f32[i], kern[i], numel[i]), e = apart(emu[i], kern[i], numel[i]);
        ck_assert_msg(a > 1e-5 && a < 2e-2, "%s: bf16 attention %.3g from fp32", names[i], a);
        ck_assert_msg(e < 1e-5, "%s: the kernel's %.3g from the emulation's", names[i], e);
        free(f32[i]), free(kern[i]), free(emu[i]);
    }
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_round_cases,   test_round_random,         test_gemm_batched_bf16,
                            test_gemm_bf16_edges, test_gemm_bf16_deterministic, test_gemm_bf16_small,
                            test_attention_bf16, NULL};
    Suite *s = suite_create("kernels_bf16");
    TCase *tc = mg_test_case(s, "bf16", tests);
    tcase_add_loop_test(tc, test_gemm_bf16, 0, 2);
    /* 0: the CPU's choice (the kernel), 1: the emulation, forced */
    tcase_add_loop_test(tc, test_gemm_bf16_shapes, 0, 2);
    tcase_add_loop_test(tc, test_gemm_bf16_wide, 0, 2);
    tcase_add_loop_test(tc, test_gemm_bf16_batched, 0, 2);
    tcase_add_loop_test(tc, test_gemm_bf16_kernel_edges, 0, 2);
    tcase_add_loop_test(tc, test_cast_bf16, 0, 2);
    tcase_add_loop_test(tc, test_bf16_weights, 0, 2);
    return mg_test_run(s);
}
