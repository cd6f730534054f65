/* test_exact.c: the order-free float sums of src/exact.c. The sum of many
 * floats of every magnitude (subnormals, both signs, up to 2^100) is the same
 * accumulator, word for word, in any order and however the terms are split
 * into merged parts, and its value is the exact sum: checked against sums
 * whose exact value is known (cancelling pairs around one term; integers
 * summed in int64) and against a compensated long-double sum; infinities and
 * NaN are counted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exact.h"
#include "testutil.h"

enum { N = 20000 };

/* n floats of every magnitude: sign, exponent 2^-149 .. 2^100, mantissa drawn */
static void draw(float *x, int n, uint64_t seed) {
    srand((unsigned)seed);
    for (int i = 0; i < n; i++) {
        int e = rand() % 250 - 149;
        float m = 1.0f + (float)rand() / (float)RAND_MAX;
        x[i] = ldexpf(m, e);
        if (rand() & 1) x[i] = -x[i];
        if (i % 97 == 0) x[i] = ldexpf((float)(rand() % 1000), -149); /* subnormals */
    }
}

static void sum_of(const float *x, int n, mg_exact *a) {
    mg_exact_zero(a);
    for (int i = 0; i < n; i++) mg_exact_add(a, x[i]);
    mg_exact_normalize(a);
}

START_TEST(test_order_free) {
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    draw(x, N, 1);
    mg_exact a, b;
    sum_of(x, N, &a);
    for (int round = 0; round < 3; round++) {
        memcpy(y, x, N * sizeof *y);
        for (int i = N - 1; i > 0; i--) { /* a shuffle */
            int j = rand() % (i + 1);
            float t = y[i];
            y[i] = y[j], y[j] = t;
        }
        sum_of(y, N, &b);
        ck_assert_msg(memcmp(a.d, b.d, sizeof a.d) == 0, "round %d: a shuffled order gave other words",
                      round);
        ck_assert(mg_exact_value(&a) == mg_exact_value(&b));
    }
    /* split into four parts summed on their own, merged in another order */
    mg_exact part[4];
    for (int p = 0; p < 4; p++) sum_of(x + p * (N / 4), N / 4, &part[p]);
    mg_exact_merge(&part[3], &part[1]);
    mg_exact_merge(&part[3], &part[0]);
    mg_exact_merge(&part[3], &part[2]);
    ck_assert_msg(memcmp(a.d, part[3].d, sizeof a.d) == 0, "merged parts differ from the whole");
    /* and a plain float sum in two orders does differ: the data can tell */
    float f1 = 0, f2 = 0;
    for (int i = 0; i < N; i++) f1 += x[i];
    for (int i = 0; i < N; i++) f2 += y[i];
    ck_assert_msg(f1 != f2, "a float sum in two orders agrees: the test cannot tell");
    free(x), free(y);
}
END_TEST

START_TEST(test_exact_value) {
    /* +v and -v cancel exactly whatever their sizes: the sum is the one term left */
    float *x = malloc(2 * N * sizeof *x);
    draw(x, N, 2);
    for (int i = 0; i < N; i++) x[N + i] = -x[i];
    float keep = 0.3f;
    x[N] = keep; /* replaces -x[0]: the sum is x[0] + keep */
    mg_exact a;
    sum_of(x, 2 * N, &a);
    double want = (double)x[0] + (double)keep;
    ck_assert_msg(mg_exact_value(&a) == want, "got %.17g, want %.17g", mg_exact_value(&a), want);
    /* integers: the int64 sum is exact */
    int64_t isum = 0;
    mg_exact_zero(&a);
    for (int i = 0; i < N; i++) {
        int v = rand() % 2000001 - 1000000;
        isum += v;
        mg_exact_add(&a, (float)v);
    }
    ck_assert_msg(mg_exact_value(&a) == (double)isum, "got %.17g, want %lld", mg_exact_value(&a),
                  (long long)isum);
    /* moderate magnitudes against a compensated long-double sum */
    mg_exact_zero(&a);
    long double s = 0, c = 0;
    for (int i = 0; i < N; i++) {
        float v = ldexpf(1.0f + (float)rand() / (float)RAND_MAX, rand() % 40 - 20);
        mg_exact_add(&a, v);
        long double yv = (long double)v - c, t = s + yv;
        c = (t - s) - yv;
        s = t;
    }
    ck_assert_msg(fabs(mg_exact_value(&a) - (double)s) <= 1e-15 * fabs((double)s),
                  "got %.17g, want %.17Lg", mg_exact_value(&a), s);
    /* the smallest subnormal and the largest float */
    mg_exact_zero(&a);
    mg_exact_add(&a, ldexpf(1.0f, -149));
    mg_exact_add(&a, ldexpf(1.0f, -149));
    ck_assert(mg_exact_value(&a) == ldexp(1.0, -148));
    mg_exact_zero(&a);
    mg_exact_add(&a, 3.4028235e38f);
    mg_exact_add(&a, 3.4028235e38f);
    ck_assert(mg_exact_value(&a) == 2.0 * 3.4028235e38f);
    free(x);
}
END_TEST

START_TEST(test_special) {
    mg_exact a;
    mg_exact_zero(&a);
    mg_exact_add(&a, 1.0f);
    mg_exact_add(&a, INFINITY);
    ck_assert(isinf(mg_exact_value(&a)) && mg_exact_value(&a) > 0);
    mg_exact_add(&a, -INFINITY);
    ck_assert(isnan(mg_exact_value(&a)));
    mg_exact_zero(&a);
    mg_exact_add(&a, NAN);
    ck_assert(isnan(mg_exact_value(&a)));
    mg_exact_zero(&a);
    mg_exact_add(&a, -0.0f);
    mg_exact_add(&a, 0.0f);
    ck_assert(mg_exact_value(&a) == 0.0);
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_order_free, test_exact_value, test_special, NULL};
    return mg_test_run(mg_test_suite("exact", tests));
}
