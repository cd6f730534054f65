/* rng.h: Philox4x32-10, a counter-based generator (Salmon et al., SC'11).
 * A number is addressed by (seed, stream, element index), not by a position in
 * a sequence, so a rank can draw exactly its part of a global tensor and every
 * mesh draws the same global tensor.
 *
 * Element i of (seed, stream) uses counter (i_lo, i_hi, stream_lo, stream_hi)
 * and key (seed_lo, seed_hi): uniform takes output word 0, normal takes words
 * 0 and 1 (Box-Muller). */
#ifndef MG_RNG_H
#define MG_RNG_H

#include <stdint.h>

/* One Philox4x32-10 block. */
void mg_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* 32 random bits -> float in [0, 1) (24 bits of mantissa). */
float mg_rng_u32_to_unit(uint32_t x);

float mg_rng_uniform_at(uint64_t seed, uint64_t stream, uint64_t index);
float mg_rng_normal_at(uint64_t seed, uint64_t stream, uint64_t index);
uint32_t mg_rng_bits_at(uint64_t seed, uint64_t stream, uint64_t index);

/* out[i] = uniform/normal at index first + i, i < n. */
void mg_rng_uniform(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, float *out);
void mg_rng_normal(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, float *out);

/* A permutation of 0..n-1 from (seed, stream), Fisher-Yates on Philox draws. */
void mg_rng_permutation(uint64_t seed, uint64_t stream, int64_t n, int64_t *out);

#endif
