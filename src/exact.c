/* exact.c: order-free sums of floats (see exact.h). A finite float is m 2^e
 * with |m| < 2^24 and e >= -149; m 2^(e + 149) is an integer below 2^278,
 * added as one 55-bit value split over two 32-bit digits. */
#include "exact.h"

#include <math.h>
#include <string.h>

void mg_exact_zero(mg_exact *a) { memset(a, 0, sizeof *a); }

void mg_exact_normalize(mg_exact *a) {
    for (int i = 0; i + 1 < MG_EXACT_DIGITS; i++) {
        int64_t carry = a->d[i] >> 32; /* floor: the digit left in [0, 2^32) */
        a->d[i] -= carry * ((int64_t)1 << 32);
        a->d[i + 1] += carry;
    }
    a->pending = 0;
}

void mg_exact_add(mg_exact *a, float x) {
    if (x == 0.0f) return;
    if (isnan(x)) {
        a->nan++;
        return;
    }
    if (isinf(x)) {
        if (x > 0) a->pos_inf++;
        else a->neg_inf++;
        return;
    }
    int e;
    float f = frexpf(fabsf(x), &e); /* |x| = f 2^e, f in [0.5, 1) */
    /* |x| = m 2^(e - 24) with m = f 2^24 an integer (a subnormal: fewer bits, still exact) */
    int64_t m = (int64_t)ldexpf(f, 24);
    int p = e - 24 + 149; /* the bit of m's lowest place; >= 0 for every float */
    if (p < 0) { /* a subnormal's trailing zeros: shift them out, exactly */
        m >>= -p;
        p = 0;
    }
    int64_t v = m << (p % 32); /* < 2^55 */
    int i = p / 32;
    int64_t lo = v & 0xffffffffLL, hi = v >> 32;
    if (x < 0) lo = -lo, hi = -hi;
    a->d[i] += lo;
    if (hi) a->d[i + 1] += hi;
    if (++a->pending >= (1 << 30)) mg_exact_normalize(a);
}

void mg_exact_merge(mg_exact *a, mg_exact *b) {
    mg_exact_normalize(a);
    mg_exact_normalize(b);
    for (int i = 0; i < MG_EXACT_DIGITS; i++) a->d[i] += b->d[i];
    a->nan += b->nan;
    a->pos_inf += b->pos_inf;
    a->neg_inf += b->neg_inf;
    mg_exact_normalize(a);
}

double mg_exact_value(mg_exact *a) {
    if (a->nan || (a->pos_inf && a->neg_inf)) return NAN;
    if (a->pos_inf) return INFINITY;
    if (a->neg_inf) return -INFINITY;
    mg_exact_normalize(a);
    double v = 0;
    for (int i = MG_EXACT_DIGITS - 1; i >= 0; i--) v += ldexp((double)a->d[i], 32 * i - 149);
    return v;
}
