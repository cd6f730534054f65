/* hash.h: FNV-1a 64, the one hash the library uses to compare what ranks
 * passed or hold (arguments, graphs, parameters) and to name trace flows.
 * Not for security: equal inputs give equal hashes on every rank and build.
 * Exports MG_HASH_START, mg_hash_bytes, mg_hash_i64. */
#ifndef MG_HASH_H
#define MG_HASH_H

#include <stddef.h>
#include <stdint.h>

#define MG_HASH_START 0xcbf29ce484222325ull /* FNV-1a 64 offset basis */

/* n bytes at p, continuing from h. */
static inline uint64_t mg_hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull; /* FNV-1a 64 prime */
    return h;
}

/* One 64-bit value, low byte first (the same on every byte order). */
static inline uint64_t mg_hash_i64(uint64_t h, int64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ ((uint64_t)v >> (8 * i) & 0xff)) * 0x100000001b3ull;
    return h;
}

#endif
