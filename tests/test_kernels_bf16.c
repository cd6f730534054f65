/* test_kernels_bf16.c: the CPU backend's bf16 GEMMs (backend.h, cpu_bf16.c).
 * - mg_bf16_round against a reference that picks the nearer of the two bf16
 *   neighbours by arithmetic (ties to the even one), on edge cases and on
 *   random floats of every magnitude;
 * - gemm and gemm_batched with the bf16 switch on, against a plain loop that
 *   rounds each input the same way and sums the products in fp32: equal up to
 *   the order of the sums (a bound of k float roundings of the sum of |terms|),
 *   and measurably apart from the fp32 GEMM (the rounding really happens);
 * - the slow fallback loop of cpu.c against the same reference;
 * - the switch goes off again: plain fp32 afterwards. */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#include "backend/backend.h"
#include "backend/cpu_bf16.h"
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

int main(void) {
    const TTest *tests[] = {test_round_cases, test_round_random, test_gemm_batched_bf16,
                            test_gemm_bf16_edges, NULL};
    Suite *s = suite_create("kernels_bf16");
    tcase_add_loop_test(mg_test_case(s, "bf16", tests), test_gemm_bf16, 0, 2);
    return mg_test_run(s);
}
