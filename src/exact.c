/* exact.c: order-free sums of floats (see exact.h). A finite float is M 2^q
 * with M < 2^24 and q >= -149, read from its bits; M 2^(q + 149) is an integer
 * below 2^278, added as one 55-bit value split over two 32-bit digits. */
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
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t e = u >> 23 & 0xff, m = u & 0x7fffff;
    if (e == 0xff) { /* infinity or NaN */
        if (m) a->nan++;
        else if (u >> 31) a->neg_inf++;
        else a->pos_inf++;
        return;
    }
    if (e == 0 && m == 0) return; /* a zero adds nothing */
    /* |x| = M 2^(p - 149): normal M = 1.m (24 bits), p = e - 1; subnormal M = m, p = 0 */
    int p = e ? (int)e - 1 : 0;
    int64_t v = (int64_t)(e ? m | 0x800000u : m) << (p % 32); /* < 2^55 */
    int i = p / 32;
    int64_t lo = v & 0xffffffffLL, hi = v >> 32;
    if (u >> 31) lo = -lo, hi = -hi;
    a->d[i] += lo;
    a->d[i + 1] += hi;
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
