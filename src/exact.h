/* exact.h: sums of floats whose result does not depend on the order of the
 * terms, nor on how they were split among ranks or threads: each float is added
 * exactly into a fixed-point integer wide enough for every finite float (LSB
 * 2^-149, ten 32-bit digits kept in int64 so carries can wait), and integer
 * addition is associative. The deterministic mode sums the loss, the squares of
 * the gradient norm and the softmax denominators this way (DESIGN.md,
 * "Determinism").
 * Exports: mg_exact, mg_exact_zero, mg_exact_add, mg_exact_merge,
 * mg_exact_normalize, mg_exact_value, MG_EXACT_WORDS. */
#ifndef MG_EXACT_H
#define MG_EXACT_H

#include <stdint.h>

#define MG_EXACT_DIGITS 10
/* The int64 words of an mg_exact: digits, then the NaN, +inf and -inf counts
 * and the pending-add count, so a sum over ranks is one all-reduce (SUM) of
 * MG_EXACT_WORDS int64 values of normalized accumulators. */
#define MG_EXACT_WORDS (MG_EXACT_DIGITS + 4)

typedef struct {
    int64_t d[MG_EXACT_DIGITS]; /* d[i] weighs 2^(32 i - 149); only the top one has a sign
                                   once normalized */
    int64_t nan, pos_inf, neg_inf;
    int64_t pending; /* adds since the last normalize (carries wait for 2^30 of them) */
} mg_exact;

void mg_exact_zero(mg_exact *a);
void mg_exact_add(mg_exact *a, float x);
/* a += b, exactly (both normalized first). */
void mg_exact_merge(mg_exact *a, mg_exact *b);
/* Carries propagated: digits 0..8 in [0, 2^32), the sign in the top one. Two
 * accumulators of the same exact sum are then equal word for word. */
void mg_exact_normalize(mg_exact *a);
/* The sum as a double (NaN if any term was NaN or both infinities came; an
 * infinity if one did): a function of the exact sum only. */
double mg_exact_value(mg_exact *a);

#endif
