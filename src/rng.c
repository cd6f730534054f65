/* rng.c: Philox4x32-10 (Salmon et al., SC'11, as in Random123) and the draws
 * built on it (see rng.h for the counter/key addressing).
 * Exports: mg_philox4x32_10, mg_rng_u32_to_unit, mg_rng_{bits,uniform,normal}_at,
 * mg_rng_uniform, mg_rng_normal, mg_rng_permutation.
 * Everything is integer arithmetic except the float conversions and Box-Muller,
 * so a number depends only on (seed, stream, index), never on the machine's
 * thread count or the rank that draws it. */
#include "rng.h"

#include <math.h>

#include "parallel.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

static inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

void mg_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    for (int i = 0; i < 4; i++) out[i] = c[i];
}

/* the block for element `index` of (seed, stream) */
static inline void block_at(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    mg_philox4x32_10(ctr, key, out);
}

float mg_rng_u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

uint32_t mg_rng_bits_at(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    block_at(seed, stream, index, w);
    return w[0];
}

float mg_rng_uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
    return mg_rng_u32_to_unit(mg_rng_bits_at(seed, stream, index));
}

/* Box-Muller on words 0 and 1: u1 in (0, 1] so log(u1) is finite. */
float mg_rng_normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    block_at(seed, stream, index, w);
    double u1 = ((double)(w[0] >> 8) + 1.0) * (1.0 / 16777216.0);
    double u2 = (double)(w[1] >> 8) * (1.0 / 16777216.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void mg_rng_uniform(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, float *out) {
    MG_PAR_FOR(n > 32768, for (int64_t i = 0; i < n; i++) out[i] = mg_rng_uniform_at(seed, stream, first + (uint64_t)i););
}

void mg_rng_normal(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, float *out) {
    MG_PAR_FOR(n > 32768, for (int64_t i = 0; i < n; i++) out[i] = mg_rng_normal_at(seed, stream, first + (uint64_t)i););
}

/* high 64 bits of a * b, portably */
static uint64_t mulhi64(uint64_t a, uint64_t b) {
    uint64_t a_lo = (uint32_t)a, a_hi = a >> 32, b_lo = (uint32_t)b, b_hi = b >> 32;
    uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
    uint64_t cross = (lo_lo >> 32) + (uint32_t)hi_lo + lo_hi;
    return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

/* Fisher-Yates from the back: the swap for position i uses draw number n-1-i,
 * scaled to [0, i] by integer multiply-shift (no floats, same on every machine). */
void mg_rng_permutation(uint64_t seed, uint64_t stream, int64_t n, int64_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        uint64_t draw = (uint64_t)(n - 1 - i), range = (uint64_t)i + 1, j;
        uint32_t w[4];
        block_at(seed, stream, draw, w);
        if (range <= 0xFFFFFFFFull)
            j = ((uint64_t)w[0] * range) >> 32;
        else
            j = mulhi64(((uint64_t)w[1] << 32) | w[0], range);
        int64_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}
