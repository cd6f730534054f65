/* test_rng.c: Philox4x32-10 against Random123's known-answer vectors, and the
 * draws built on it: ranges, moments, slicing (a rank's part equals the slice of
 * the whole), permutations. */
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "testutil.h"

/* Random123's known-answer vectors (counter, key, the output they give): all
 * zeros, all ones, and the digits of pi */
static const struct {
    uint32_t ctr[4], key[2], want[4];
} kat[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

/* a loop test: one check per vector */
START_TEST(test_kat) {
    uint32_t got[4];
    mg_philox4x32_10(kat[_i].ctr, kat[_i].key, got);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(got[i] == kat[_i].want[i], "vector %d, word %d: got %08x, want %08x", _i, i,
                      got[i], kat[_i].want[i]);
}
END_TEST

/* the documented addressing: element i of (seed, stream) is counter
 * (i_lo, i_hi, stream_lo, stream_hi), key (seed_lo, seed_hi), word 0 */
START_TEST(test_addressing) {
    uint64_t seed = 0x299f31d0a4093822ull, stream = 0x0370734413198a2eull,
             index = 0x85a308d3243f6a88ull;
    ck_assert_uint_eq(mg_rng_bits_at(seed, stream, index), 0xd16cfe09u);
    ck_assert_uint_eq(mg_rng_bits_at(0, 0, 0), 0x6627e8d5u);
    ck_assert_float_eq(mg_rng_uniform_at(0, 0, 0), (float)(0x6627e8d5u >> 8) / 16777216.0f);
}
END_TEST

START_TEST(test_unit_conversion) {
    ck_assert_float_eq(mg_rng_u32_to_unit(0), 0.0f);
    ck_assert(mg_rng_u32_to_unit(0xffffffffu) < 1.0f);
    ck_assert_float_eq(mg_rng_u32_to_unit(0x80000000u), 0.5f);
}
END_TEST

START_TEST(test_uniform_range_and_mean) {
    int64_t n = 100000;
    float *u = malloc(n * sizeof *u);
    mg_rng_uniform(42, 7, 0, n, u);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(u[i] >= 0.0f && u[i] < 1.0f, "u[%lld] = %g", (long long)i, u[i]);
        sum += u[i];
    }
    double mean = sum / n;
    ck_assert_msg(fabs(mean - 0.5) < 0.005, "mean %g", mean);
    free(u);
}
END_TEST

START_TEST(test_normal_moments) {
    int64_t n = 100000;
    float *z = malloc(n * sizeof *z);
    mg_rng_normal(1234, 0, 0, n, z);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert(isfinite(z[i]));
        s += z[i];
        s2 += (double)z[i] * z[i];
    }
    double mean = s / n, var = s2 / n - mean * mean;
    ck_assert_msg(fabs(mean) < 0.015, "mean %g", mean);
    ck_assert_msg(fabs(var - 1.0) < 0.02, "variance %g", var);
    free(z);
}
END_TEST

/* a zero draw of word 0 must not give log(0): a normal is finite everywhere */
START_TEST(test_normal_finite_many_streams) {
    for (uint64_t stream = 0; stream < 64; stream++)
        for (uint64_t i = 0; i < 256; i++) ck_assert(isfinite(mg_rng_normal_at(9, stream, i)));
}
END_TEST

/* drawing [a, b) gives exactly the slice of drawing [0, n) */
START_TEST(test_slices_match) {
    int64_t n = 1000;
    float *all = malloc(n * sizeof *all), *part = malloc(n * sizeof *part);
    mg_rng_uniform(5, 3, 0, n, all);
    mg_rng_uniform(5, 3, 137, 400, part);
    ck_assert(memcmp(all + 137, part, 400 * sizeof(float)) == 0);
    mg_rng_normal(5, 3, 0, n, all);
    mg_rng_normal(5, 3, 999, 1, part);
    ck_assert(memcmp(all + 999, part, sizeof(float)) == 0);
    mg_rng_normal(5, 3, 250, 500, part);
    ck_assert(memcmp(all + 250, part, 500 * sizeof(float)) == 0);
    for (int64_t i = 0; i < n; i++) ck_assert_float_eq(all[i], mg_rng_normal_at(5, 3, i));
    free(all);
    free(part);
}
END_TEST

START_TEST(test_streams_and_seeds_differ) {
    int same_stream = 0, same_seed = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        same_stream += mg_rng_bits_at(1, 0, i) == mg_rng_bits_at(1, 1, i);
        same_seed += mg_rng_bits_at(1, 0, i) == mg_rng_bits_at(2, 0, i);
    }
    ck_assert_int_le(same_stream, 1);
    ck_assert_int_le(same_seed, 1);
}
END_TEST

static int is_permutation(const int64_t *p, int64_t n) {
    char *seen = calloc(n ? n : 1, 1);
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        if (p[i] < 0 || p[i] >= n || seen[p[i]]) ok = 0;
        else seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

START_TEST(test_permutation) {
    int64_t n = 1000;
    int64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    mg_rng_permutation(7, 0, n, a);
    mg_rng_permutation(7, 1, n, b); /* another epoch */
    mg_rng_permutation(8, 0, n, c); /* another seed */
    ck_assert(is_permutation(a, n));
    ck_assert(is_permutation(b, n));
    ck_assert(is_permutation(c, n));
    ck_assert(memcmp(a, b, n * sizeof *a) != 0);
    ck_assert(memcmp(a, c, n * sizeof *a) != 0);
    int fixed = 0;
    for (int64_t i = 0; i < n; i++) fixed += a[i] == i;
    ck_assert_int_lt(fixed, 10); /* about 1 expected for a random permutation */
    mg_rng_permutation(7, 1, n, c); /* same (seed, stream) -> same permutation */
    ck_assert(memcmp(b, c, n * sizeof *b) == 0);
    free(a);
    free(b);
    free(c);
}
END_TEST

/* Fisher-Yates with the documented draws, written out here: the order must not
 * depend on anything but (seed, stream, n). */
START_TEST(test_permutation_reference) {
    int64_t n = 50, p[50], ref[50];
    mg_rng_permutation(11, 4, n, p);
    for (int64_t i = 0; i < n; i++) ref[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        uint64_t j = ((uint64_t)mg_rng_bits_at(11, 4, (uint64_t)(n - 1 - i)) * (uint64_t)(i + 1)) >> 32;
        int64_t t = ref[i];
        ref[i] = ref[j];
        ref[j] = t;
    }
    for (int64_t i = 0; i < n; i++) ck_assert_int_eq(p[i], ref[i]);
}
END_TEST

START_TEST(test_permutation_small) {
    int64_t p[2] = {-1, -1};
    mg_rng_permutation(1, 1, 0, p); /* nothing written */
    ck_assert_int_eq(p[0], -1);
    mg_rng_permutation(1, 1, 1, p);
    ck_assert_int_eq(p[0], 0);
    /* both orders of 2 appear over streams */
    int swapped = 0;
    for (uint64_t s = 0; s < 64; s++) {
        mg_rng_permutation(1, s, 2, p);
        ck_assert(is_permutation(p, 2));
        swapped += p[0] == 1;
    }
    ck_assert(swapped > 10 && swapped < 54);
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_addressing, test_unit_conversion, test_uniform_range_and_mean,
                            test_normal_moments, test_normal_finite_many_streams,
                            test_slices_match, test_streams_and_seeds_differ, test_permutation,
                            test_permutation_reference, test_permutation_small, NULL};
    Suite *s = suite_create("rng");
    TCase *tc = mg_test_case(s, "rng", tests);
    tcase_add_loop_test(tc, test_kat, 0, (int)(sizeof kat / sizeof kat[0]));
    return mg_test_run(s);
}
