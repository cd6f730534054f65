/* cpu_gemm_bf16.c: the CPU's bf16 GEMM (backend.h: gemm_bf16, and gemm and
 * gemm_batched in bf16 mode) and cast_bf16: bf16 inputs, each product exact
 * in fp32, the sums in fp32, fp32 C.
 *
 * Where the CPU has AVX512-BF16 it runs our kernel on vdpbf16ps, which
 * multiplies 16 pairs of bf16 values and adds both products to 16 fp32 sums
 * (32 multiply-adds an instruction, twice an fp32 FMA's). Elsewhere, or with
 * MG_CPU_BF16=emulate in the environment, it runs the emulation of
 * cpu_bf16.c (inputs rounded to bf16 into fp32 copies, OpenBLAS's sgemm):
 * the same products and sums in another order, at fp32's speed or below.
 * The kernel is built with target attributes (configure checks the
 * compiler) and picked at run time, so no other CPU meets its instructions.
 *
 * The kernel follows Goto's loops (the names are BLIS's):
 *   for each block of NC columns of C and each block of KC of the K dim
 *     pack B's block (shared by the threads): panels of NR = 64 columns, each
 *       (k, k + 1) pair of a column one 32-bit word, the two bf16 values that
 *       vdpbf16ps multiplies; fp32 input is rounded here. Up to 2 MiB (N
 *       2048 at K 512): it lives in L3, a panel at a time passing through L2,
 *       and a wide B is packed in fewer blocks, each of which packs A again.
 *     for each block of MC rows of A (the threads split the blocks)
 *       pack the block (rounded) into a buffer of the thread, in L2: strip
 *       by strip of MR = 6 rows as the first tiles reach them; transposed A
 *       whole first, laid out as B's panels are (16 rows a vector)
 *     for each strip of MR rows of the block
 *       for each panel: a 6 x 64 tile of C in 24 registers, one vdpbf16ps
 *         a register for each k pair (a word of A broadcast, 16 of B)
 * A tile is written when its K block ends: the first block writes
 * alpha acc + beta C + bias, the later ones add alpha acc. Each element of C
 * is therefore its K blocks' sums, each over k in order from zero, then
 * added up in order; the blocks depend on K and N alone, so C is the same
 * bits for any number of threads and whatever rows are around a row.
 * vdpbf16ps takes bf16 values under 2^-126 as zero and writes no fp32
 * subnormal, and the rounding (vcvtne2ps2bf16) flushes them too.
 *
 * A small product (an attention tile's) runs the same tiles on this thread,
 * its operands packed on the stack (mg_cpu_gemm_bf16_small).
 *
 * Exports mg_cpu_gemm_bf16, mg_cpu_cast_bf16, mg_cpu_bf16_kernel,
 * mg_cpu_gemm_bf16_small (cpu_kernels.h), mg_backend_cpu_bf16_gemm (backend.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_state.h"
#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "context.h"

#ifdef _OPENMP
#include <omp.h>
#endif

enum { KERNEL_AVX512BF16 = 1, KERNEL_EMULATE_CPU, KERNEL_EMULATE_ASKED, KERNEL_EMULATE_BUILD };

/* Which GEMM runs: decided once (the context keeps it), from the build, the
 * CPU and MG_CPU_BF16. */
static int kernel_choice(void) {
    mg_backend_state *c = mg_backend_ctx();
    if (c->cpu_bf16) return c->cpu_bf16;
    const char *env = getenv("MG_CPU_BF16");
    if (env && strcmp(env, "emulate") == 0)
        c->cpu_bf16 = KERNEL_EMULATE_ASKED;
#if MG_HAVE_AVX512BF16
    else if (__builtin_cpu_supports("avx512bf16"))
        c->cpu_bf16 = KERNEL_AVX512BF16;
    else
        c->cpu_bf16 = KERNEL_EMULATE_CPU;
#else
    else
        c->cpu_bf16 = KERNEL_EMULATE_BUILD;
#endif
    return c->cpu_bf16;
}

const char *mg_backend_cpu_bf16_gemm(void) {
    switch (kernel_choice()) {
    case KERNEL_AVX512BF16: return "avx512-bf16 (vdpbf16ps)";
    case KERNEL_EMULATE_ASKED:
        return "emulated, as MG_CPU_BF16=emulate asks (inputs rounded to bf16, fp32 sgemm)";
    case KERNEL_EMULATE_CPU:
        return "emulated: this CPU has no AVX512-BF16 (inputs rounded to bf16, fp32 sgemm)";
    default: return "emulated: built without AVX512-BF16 code (inputs rounded to bf16, fp32 sgemm)";
    }
}

/* The emulation, and once a process (rank 0's) a line saying why when the
 * kernel was not asked away. */
static bool use_kernel(void) {
    int k = kernel_choice();
    if (k == KERNEL_AVX512BF16) return true;
    mg_backend_state *c = mg_backend_ctx();
    if (k != KERNEL_EMULATE_ASKED && !c->cpu_bf16_warned) {
        c->cpu_bf16_warned = 1;
        const char *rank = getenv("OMPI_COMM_WORLD_RANK");
        if (!rank || strcmp(rank, "0") == 0)
            fprintf(stderr, "meshgrad: warning: bf16 GEMMs %s, slower than fp32\n",
                    mg_backend_cpu_bf16_gemm());
    }
    return false;
}

/* C = beta C + bias, rows of n (alpha 0 or k 0: A and B are not read) */
static void scale_c(int64_t m, int64_t n, float beta, float *c, int64_t ldc, const float *bias) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float v = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
            c[i * ldc + j] = bias ? v + bias[j] : v;
        }
}

#if MG_HAVE_AVX512BF16
#include <immintrin.h>

#define BF16_ISA "avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,prfchw"
#define BF16 __attribute__((target(BF16_ISA)))
#define BF16_INLINE static inline __attribute__((always_inline, target(BF16_ISA)))

enum { MR = 6, NV = 4, NR = 16 * NV, MC = 32 * MR };
#define KC_MAX 512                 /* k per block */
#define B_BLOCK ((size_t)2 << 20) /* bytes of B's packed block */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The k pairs of a strip of A, as the tile reads them: row i's pair t at
 * a[i * rs + t * cs]. */
typedef struct {
    const uint32_t *a;
    int64_t rs, cs;
} strip;

/* lanes [0, n) of 16 */
BF16_INLINE __mmask16 mask16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* 16 pairs (x0[l], x1[l]) of bf16 values, one 32-bit word each, from the 32
 * bf16 values of v: x0 in its low half, x1 in its high half */
BF16_INLINE __m512i interleave16(__m512i v) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                         24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                         16, 0);
    return _mm512_permutexvar_epi16(idx, v);
}

/* bf16 bits of x, rounded to nearest even */
BF16_INLINE uint32_t round1(float x) {
    __m128bh v = _mm_cvtneps_pbh(_mm_set_ss(x));
    uint16_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

/* 16 pairs of row `row` of a stored matrix from column col, of which `left`
 * values are there (zeros past them) */
BF16_INLINE __m512i row_pairs(const mg_gemm_in *x, int64_t row, int64_t col, int64_t left) {
    if (x->bf16) {
        __mmask32 mk = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1);
        return _mm512_maskz_loadu_epi16(mk, (const uint16_t *)x->data + row * x->ld + col);
    }
    const float *p = (const float *)x->data + row * x->ld + col;
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mask16(left - 16), p + 16),
                                        _mm512_maskz_loadu_ps(mask16(left), p));
}

/* ---- the tile --------------------------------------------------------------------- */

/* The rows of a strip of non-transposed A that a tile packs as it goes: A's
 * rows r.. (stored, fp32 or bf16), k from k0, kc of them, into the strip's rows
 * (rs words apart). */
typedef struct {
    const mg_gemm_in *a;
    int64_t r, k0, kc, rs;
    uint32_t *out;
} strip_src;

/* pairs [t0, t0 + 16) of the strip's MR rows, rounded into their words */
BF16_INLINE void pack_chunk(const strip_src *q, int64_t t0) {
    int64_t left = q->kc - 2 * t0; /* values left in each row */
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
        _mm512_store_si512(q->out + i * q->rs + t0,
                           row_pairs(q->a, q->r + i, q->k0 + 2 * t0, left));
}

/* C's tile of MR rows and nv vectors (16 nv columns, NR at most) at c (mr x
 * nr of it stored) from kp pairs of the strip and of a panel of B (kp x 16 nv
 * words): the first K block writes alpha acc + beta C
 * + bias, a later one adds alpha acc. With src (a whole strip of
 * non-transposed A, in rows) the tile packs the strip too, 16 pairs ahead of
 * the sums that read them: A's loads from memory then overlap the products,
 * where a pass of packing alone would wait on them. */
BF16_INLINE void tile(int nv, int64_t kp, strip s, const strip_src *src, const uint32_t *pb,
                      float *c, int64_t ldc, int mr, int nr, float alpha, float beta,
                      const float *bias, bool first) {
    /* C's lines, for writing, while the sums run (C is seldom in cache) */
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nv && 16 * j < nr; j++) __builtin_prefetch(c + i * ldc + 16 * j, 1, 3);
    __m512 acc[MR][NV];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nv; j++) acc[i][j] = _mm512_setzero_ps();
    const uint32_t *pa = s.a;
    for (int64_t t0 = 0; t0 < kp; t0 += 16) {
        if (src) pack_chunk(src, t0);
        int64_t t1 = t0 + 16 < kp ? t0 + 16 : kp;
        for (int64_t t = t0; t < t1; t++, pa += s.cs, pb += 16 * nv) {
            __m512bh b[NV];
#pragma GCC unroll 4
            for (int j = 0; j < nv; j++) b[j] = (__m512bh)_mm512_loadu_si512(pb + 16 * j);
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++) {
                __m512bh a = (__m512bh)_mm512_set1_epi32((int)pa[i * s.rs]);
#pragma GCC unroll 4
                for (int j = 0; j < nv; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a, b[j]);
            }
        }
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 4
    for (int j = 0; j < nv; j++) {
        __mmask16 mk = mask16(nr - 16 * j);
        if (!mk) break;
        __m512 bj = first && bias ? _mm512_maskz_loadu_ps(mk, bias + 16 * j) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            if (i >= mr) break;
            float *ci = c + i * ldc + 16 * j;
            __m512 v = _mm512_mul_ps(acc[i][j], va);
            if (!first)
                v = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, ci), v);
            else {
                if (beta != 0.0f) v = _mm512_add_ps(v, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mk, ci)));
                if (bias) v = _mm512_add_ps(v, bj);
            }
            _mm512_mask_storeu_ps(ci, mk, v);
        }
    }
}

/* ---- packing ---------------------------------------------------------------------- */

/* r[i] word j becomes r[j] word i: unpacking pairs of rows by words, then by
 * pairs of words, leaves in 128-bit lane L of r[4 i + c] column 4 L + c of
 * rows 4 i .. 4 i + 3; two lane shuffles gather each column's four lanes. */
BF16_INLINE void transpose16(__m512i r[16]) {
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i e0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44); /* lanes 0, 1 of each */
        __m512i e1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xee); /* lanes 2, 3 */
        __m512i f0 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
        __m512i f1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xee);
        r[c] = _mm512_shuffle_i32x4(e0, f0, 0x88); /* lane 0 of the four */
        r[4 + c] = _mm512_shuffle_i32x4(e0, f0, 0xdd);
        r[8 + c] = _mm512_shuffle_i32x4(e1, f1, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(e1, f1, 0xdd);
    }
}

/* Pair t of rows [k0, k0 + kc) of a (K, N) row-major B, columns [j0, j0 +
 * nr) (zeros past nr, and in the second value past kc), into out[0, 16 nv):
 * rows k and k + 1 side by side. The rows PAIRS_AHEAD pairs on are fetched
 * meanwhile: B is mostly an activation, in memory and not in cache, and a
 * pass that only loads would otherwise wait on each line. */
#define PAIRS_AHEAD 4
BF16_INLINE void pack_pair(const mg_gemm_in *b, int64_t k0, int64_t kc, int64_t t, int64_t j0,
                           int64_t nr, uint32_t *out, int nv) {
    int64_t r0 = k0 + 2 * t, ld = b->ld;
    size_t es = b->bf16 ? sizeof(uint16_t) : sizeof(float);
    bool two = 2 * t + 1 < kc, ahead = 2 * (t + PAIRS_AHEAD) + 1 < kc;
    for (int g = 0; g < nv; g++) {
        __mmask16 mk = mask16(nr - 16 * g);
        if (!mk) {
            _mm512_storeu_si512(out + 16 * g, _mm512_setzero_si512());
            continue;
        }
        const char *p = (const char *)b->data + (size_t)(r0 * ld + j0 + 16 * g) * es;
        if (ahead) {
            __builtin_prefetch(p + (size_t)(2 * PAIRS_AHEAD * ld) * es, 0, 3);
            __builtin_prefetch(p + (size_t)((2 * PAIRS_AHEAD + 1) * ld) * es, 0, 3);
        }
        __m512i w;
        if (b->bf16) {
            const uint16_t *q = (const uint16_t *)p;
            __m256i y0 = _mm256_maskz_loadu_epi16(mk, q);
            __m256i y1 = two ? _mm256_maskz_loadu_epi16(mk, q + ld) : _mm256_setzero_si256();
            w = interleave16(_mm512_inserti64x4(_mm512_castsi256_si512(y0), y1, 1));
        } else {
            const float *q = (const float *)p;
            __m512 x0 = _mm512_maskz_loadu_ps(mk, q);
            __m512 x1 = two ? _mm512_maskz_loadu_ps(mk, q + ld) : _mm512_setzero_ps();
            w = interleave16((__m512i)_mm512_cvtne2ps_pbh(x1, x0));
        }
        _mm512_storeu_si512(out + 16 * g, w);
    }
}

/* One panel of B: columns [j0, j0 + nr) (zeros past nr), k rows [k0, k0 +
 * kc), kp = (kc + 1) / 2 pairs (the last one's second value 0 when kc is odd),
 * into out (kp x 16 nv words: a panel of nv vectors). B is (K, N) row-major,
 * or (N, K) when transposed. */
BF16 static void pack_panel(const mg_gemm_in *b, bool tb, int64_t k0, int64_t kc, int64_t j0,
                            int64_t nr, uint32_t *out, int nv) {
    int64_t kp = (kc + 1) / 2, width = 16 * nv;
    if (!tb) {
        for (int64_t t = 0; t < kp; t++) pack_pair(b, k0, kc, t, j0, nr, out + t * width, nv);
        return;
    }
    /* transposed: a column of op(B) is a row of the stored B, its pairs side
     * by side. 16 rows' next 16 pairs are 16 vectors; transposed, each is
     * one pair of the 16 columns, as the panel holds it. */
    for (int g = 0; g < nv; g++)
        for (int64_t t0 = 0; t0 < kp; t0 += 16) {
            __m512i r[16];
            for (int j = 0; j < 16; j++)
                r[j] = 16 * g + j < nr ? row_pairs(b, j0 + 16 * g + j, k0 + 2 * t0, kc - 2 * t0)
                                       : _mm512_setzero_si512();
            transpose16(r);
            for (int64_t l = 0; l < 16 && t0 + l < kp; l++)
                _mm512_storeu_si512(out + (t0 + l) * width + 16 * g, r[l]);
        }
}

/* A strip of non-transposed A: rows [i0, i0 + mr) (MR rows, zeros past mr),
 * k [k0, k0 + kc), kp pairs, row i's pairs in out[i * rs + t] (rs a multiple
 * of 16 >= kp). Transposed A is packed by pack_panel instead: a column of the
 * stored A is a row of op(A), so a block of op(A)'s rows is a panel of the
 * stored A, pair t of row i at out[t * width + i], 16 rows a vector. */
BF16 static void pack_strip(const mg_gemm_in *a, int64_t i0, int mr, int64_t k0, int64_t kc,
                            int64_t rs, uint32_t *out) {
    int64_t kp = (kc + 1) / 2;
    for (int i = 0; i < MR; i++) {
        uint32_t *o = out + i * rs;
        if (i >= mr) {
            memset(o, 0, (size_t)kp * sizeof *o);
            continue;
        }
        for (int64_t q = 0; 32 * q < kc; q++) /* 32 values, 16 pairs a pass */
            _mm512_mask_storeu_epi32(o + 16 * q, mask16(kp - 16 * q),
                                     row_pairs(a, i0 + i, k0 + 32 * q, kc - 32 * q));
    }
}

/* vectors of 16 words a packed block of m rows of transposed A takes a pair:
 * whole strips of MR, in vectors */
static int64_t block_vectors(int64_t m) { return ((m + MR - 1) / MR * MR + 15) / 16; }

/* A share of the lines of a stored block (rows [r0, r0 + rows), columns [c0,
 * c0 + cols) of x), part `q` of `parts`. Packing reads its operand from memory
 * and computes nothing: the next block of A is prefetched, a share at each
 * tile, while the block before it computes. */
static void prefetch_block(const mg_gemm_in *x, int64_t r0, int64_t rows, int64_t c0,
                           int64_t cols, int64_t q, int64_t parts) {
    size_t es = x->bf16 ? sizeof(uint16_t) : sizeof(float);
    int64_t lines = (cols * (int64_t)es + 63) / 64 + 1;
    int64_t total = rows * lines, from = total * q / parts, to = total * (q + 1) / parts;
    if (from >= to) return;
    int64_t r = from / lines, l = from % lines; /* then counted on: no division a line */
    const char *row = (const char *)x->data + (size_t)((r0 + r) * x->ld + c0) * es;
    for (int64_t i = from; i < to; i++) {
        __builtin_prefetch(row + l * 64, 0, 2);
        if (++l == lines) {
            l = 0;
            row += (size_t)x->ld * es;
        }
    }
}

/* the block of op(A) rows [i0, i0 + mc), k [k0, k0 + kc) as stored */
static void prefetch_a(const mg_gemm_in *a, bool ta, int64_t i0, int64_t mc, int64_t k0,
                       int64_t kc, int64_t q, int64_t parts) {
    if (ta) prefetch_block(a, k0, kc, i0, mc, q, parts);
    else prefetch_block(a, i0, mc, k0, kc, q, parts);
}

/* ---- one GEMM --------------------------------------------------------------------- */

/* The blocks: of K, as even as KC_MAX allows, each but the last of even
 * length; of N, as wide as keep B's packed block within B_BLOCK; of M, MC
 * rows (a thread's packed A, in L2). They depend on the shape alone. */
static void blocking(int64_t n, int64_t k, int64_t *kc, int64_t *nc) {
    int64_t blocks = (k + KC_MAX - 1) / KC_MAX;
    *kc = (k + blocks - 1) / blocks;
    *kc += *kc & 1;
    int64_t cols = (int64_t)(B_BLOCK / ((size_t)*kc * sizeof(uint16_t))) / NR * NR;
    int64_t n_pad = (n + NR - 1) / NR * NR;
    *nc = cols < NR ? NR : cols > n_pad ? n_pad : cols;
}

/* words of a packed strip of A: MR rows of kp pairs, rows a multiple of 16 apart */
static int64_t strip_words(int64_t kc) { return MR * (((kc + 1) / 2 + 15) / 16 * 16); }

/* The threads one GEMM runs on: those of the CPU backend, when it is large
 * enough to share. */
static int gemm_threads(int64_t m, int64_t n, int64_t k) {
    int t = mg_backend_cpu_threads();
    return t > 1 && (double)m * (double)n * (double)k >= (double)(1 << 21) && m >= 2 * MC ? t : 1;
}

/* One GEMM, C (m, n) from a and b, as run by each thread of a parallel region
 * (or whole by one thread outside any); pb holds B's packed block, pa[thread]
 * a thread's packed A. */
BF16 static void gemm_part(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                           const mg_gemm_in *a, const mg_gemm_in *b, float beta, float *c,
                           int64_t ldc, const float *bias, uint32_t *pb, uint32_t *pa_all) {
    int64_t kc, nc;
    blocking(n, k, &kc, &nc);
    int64_t words = strip_words(kc), rs = words / MR, mblocks = (m + MC - 1) / MC;
#ifdef _OPENMP
    uint32_t *pa = pa_all + (size_t)omp_get_thread_num() * (MC / MR) * words;
#else
    uint32_t *pa = pa_all;
#endif
    for (int64_t j0 = 0; j0 < n; j0 += nc) {
        int64_t ncb = min64(nc, n - j0), panels = (ncb + NR - 1) / NR;
        for (int64_t k0 = 0; k0 < k; k0 += kc) {
            int64_t kcb = min64(kc, k - k0), kp = (kcb + 1) / 2;
            bool first = k0 == 0;
#pragma omp for schedule(static)
            for (int64_t p = 0; p < panels; p++)
                pack_panel(b, tb, k0, kcb, j0 + p * NR, min64(NR, ncb - p * NR), pb + p * kp * NR,
                           NV);
#pragma omp for schedule(static)
            for (int64_t ib = 0; ib < mblocks; ib++) {
                int64_t i0 = ib * MC, mcb = min64(MC, m - i0), strips = (mcb + MR - 1) / MR;
                /* transposed A is packed first, whole; of A, a last short
                 * strip, and the others by their first tile */
                int64_t tv = block_vectors(mcb);
                if (ta)
                    pack_panel(a, false, k0, kcb, i0, mcb, pa, (int)tv);
                else if (mcb % MR)
                    pack_strip(a, i0 + (strips - 1) * MR, (int)(mcb % MR), k0, kcb, rs,
                               pa + (strips - 1) * words);
                int64_t next = i0 + MC, tiles = panels * strips; /* A's next block */
                for (int64_t p = 0; p < panels; p++) {
                    int nr = (int)min64(NR, ncb - p * NR);
                    const uint32_t *pbp = pb + p * kp * NR;
                    const float *bp = bias ? bias + j0 + p * NR : NULL;
                    for (int64_t s = 0; s < strips; s++) {
                        int64_t r = i0 + s * MR;
                        if (next < m)
                            prefetch_a(a, ta, next, min64(MC, m - next), k0, kcb,
                                       p * strips + s, tiles);
                        int mr = (int)min64(MR, m - r);
                        float *ct = c + r * ldc + j0 + p * NR;
                        strip_src src = {a, r, k0, kcb, rs, pa + s * words};
                        if (ta)
                            tile(NV, kp, (strip){pa + s * MR, 1, 16 * tv}, NULL, pbp, ct, ldc,
                                 mr, nr, alpha, beta, bp, first);
                        else if (p == 0 && mr == MR)
                            tile(NV, kp, (strip){pa + s * words, rs, 1}, &src, pbp, ct, ldc,
                                 mr, nr, alpha, beta, bp, first);
                        else
                            tile(NV, kp, (strip){pa + s * words, rs, 1}, NULL, pbp, ct, ldc,
                                 mr, nr, alpha, beta, bp, first);
                    }
                }
            }
        }
    }
}

/* One GEMM on `threads` threads (a parallel region only for more than one:
 * parallel.h says why). */
BF16 static void gemm_one(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const mg_gemm_in *a, const mg_gemm_in *b, float beta, float *c,
                          int64_t ldc, const float *bias, uint32_t *pb, uint32_t *pa_all,
                          int threads) {
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
        gemm_part(ta, tb, m, n, k, alpha, a, b, beta, c, ldc, bias, pb, pa_all);
    } else {
        gemm_part(ta, tb, m, n, k, alpha, a, b, beta, c, ldc, bias, pb, pa_all);
    }
}

/* B's packed block and each thread's packed A, in the context's buffer
 * (grown, kept); NULL when it cannot grow. */
static uint32_t *packed_blocks(int64_t n, int64_t k, int threads, uint32_t **pa) {
    int64_t kc, nc;
    blocking(n, k, &kc, &nc);
    size_t b_words = (size_t)(nc * ((kc + 1) / 2) + 15) / 16 * 16;
    size_t bytes = (b_words + (size_t)threads * (MC / MR) * (size_t)strip_words(kc)) * sizeof(uint32_t);
    mg_staging *s = &mg_backend_ctx()->bf16_packed;
    if (bytes > s->bytes) {
        void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!p) return NULL;
        free(s->p);
        s->p = p;
        s->bytes = bytes;
    }
    *pa = (uint32_t *)s->p + b_words;
    return s->p;
}

/* A small product on this thread, with no allocation: B and A packed whole
 * on the stack, then the tiles */
enum { SMALL_M = 128, SMALL_N = 128, SMALL_K = 256 };
/* words of A packed: whole strips of rows, in vectors when transposed */
#define SMALL_PA ((((SMALL_M + MR - 1) / MR * MR + 15) / 16 * 16) * (SMALL_K / 2))

/* nv: the tile's width in vectors, 2 for products at most 32 wide (an
 * attention head's), whose 64-wide tiles would be half empty */
BF16_INLINE void small_tiles(int nv, bool ta, int64_t m, int64_t n, int64_t kp, int64_t rs,
                             const uint32_t *pa, const uint32_t *pb, float alpha, float beta,
                             float *c, int64_t ldc) {
    int64_t w = 16 * nv, panels = (n + w - 1) / w, strips = (m + MR - 1) / MR;
    for (int64_t p = 0; p < panels; p++)
        for (int64_t s = 0; s < strips; s++) {
            strip st = ta ? (strip){pa + s * MR, 1, rs} : (strip){pa + s * MR * rs, rs, 1};
            tile(nv, kp, st, NULL, pb + p * kp * w, c + s * MR * ldc + p * w, ldc,
                 (int)min64(MR, m - s * MR), (int)min64(w, n - p * w), alpha, beta, NULL, true);
        }
}

BF16 static void gemm_small_kernel(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                                   const mg_gemm_in *a, const mg_gemm_in *b, float beta, float *c,
                                   int64_t ldc) {
    uint32_t pb[SMALL_K / 2 * ((SMALL_N + NR - 1) / NR * NR)] __attribute__((aligned(64)));
    uint32_t pa[SMALL_PA] __attribute__((aligned(64)));
    int nv = n <= 32 ? 2 : NV, w = 16 * nv;
    int64_t kp = (k + 1) / 2, panels = (n + w - 1) / w, strips = (m + MR - 1) / MR;
    /* A's rows rs words apart; transposed A's pairs rs words apart (a block) */
    int64_t rs = ta ? 16 * block_vectors(m) : (kp + 15) / 16 * 16;
    for (int64_t p = 0; p < panels; p++)
        pack_panel(b, tb, 0, k, p * w, min64(w, n - p * w), pb + p * kp * w, nv);
    if (ta)
        pack_panel(a, false, 0, k, 0, m, pa, (int)(rs / 16));
    else
        for (int64_t s = 0; s < strips; s++)
            pack_strip(a, s * MR, (int)min64(MR, m - s * MR), 0, k, rs, pa + s * MR * rs);
    if (nv == 2) small_tiles(2, ta, m, n, kp, rs, pa, pb, alpha, beta, c, ldc);
    else small_tiles(NV, ta, m, n, kp, rs, pa, pb, alpha, beta, c, ldc);
}

BF16 static void cast_kernel(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        _mm512_storeu_si512(y + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16),
                                                                _mm512_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = (uint16_t)round1(x[i]);
}
#endif /* MG_HAVE_AVX512BF16 */

/* ---- the entries ------------------------------------------------------------------ */

int mg_cpu_bf16_kernel(void) { return use_kernel() ? 1 : 0; }

int mg_cpu_gemm_bf16_small(bool kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                           float beta, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return 0;
    if (m > SMALL_M || n > SMALL_N || k > SMALL_K) return -1;
    if (k <= 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc, NULL);
        return 0;
    }
#if MG_HAVE_AVX512BF16
    if (kernel) {
        mg_gemm_in ai = {a, lda, 0, false}, bi = {b, ldb, 0, false};
        gemm_small_kernel(ta, tb, m, n, k, alpha, &ai, &bi, beta, c, ldc);
        return 0;
    }
#else
    (void)kernel;
#endif
    /* emulated: the inputs rounded into copies on the stack, then sgemm */
    float ra[SMALL_M * SMALL_K], rb[SMALL_K * SMALL_N];
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    for (int64_t i = 0; i < ar; i++)
        for (int64_t j = 0; j < ac; j++) ra[i * ac + j] = mg_bf16_round(a[i * lda + j]);
    for (int64_t i = 0; i < br; i++)
        for (int64_t j = 0; j < bc; j++) rb[i * bc + j] = mg_bf16_round(b[i * ldb + j]);
    mg_cpu_gemm(NULL, ta, tb, m, n, k, alpha, ra, ac, rb, bc, beta, c, ldc);
    return 0;
}

void mg_cpu_cast_bf16(void *ctx, const float *x, uint16_t *y, int64_t n) {
    (void)ctx;
#if MG_HAVE_AVX512BF16
    if (use_kernel()) {
        cast_kernel(x, y, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) {
        float r = mg_bf16_round(x[i]);
        uint32_t u;
        memcpy(&u, &r, sizeof u);
        y[i] = (uint16_t)(u >> 16);
    }
}

void mg_cpu_gemm_bf16(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const mg_gemm_in *a, const mg_gemm_in *b, float beta, float *c,
                      int64_t ldc, int64_t stride_c, int64_t batch, const float *bias) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0 || alpha == 0.0f) { /* as BLAS: C = beta C, A and B not read */
        for (int64_t e = 0; e < batch; e++) scale_c(m, n, beta, c + e * stride_c, ldc, bias);
        return;
    }
#if MG_HAVE_AVX512BF16
    int threads = gemm_threads(m, n, k);
    uint32_t *pa = NULL, *pb = use_kernel() ? packed_blocks(n, k, threads, &pa) : NULL;
    if (pb) {
        size_t sa = a->bf16 ? sizeof(uint16_t) : sizeof(float);
        size_t sb = b->bf16 ? sizeof(uint16_t) : sizeof(float);
        for (int64_t e = 0; e < batch; e++) {
            mg_gemm_in ae = *a, be = *b;
            ae.data = (const char *)a->data + (size_t)(e * a->stride) * sa;
            be.data = (const char *)b->data + (size_t)(e * b->stride) * sb;
            gemm_one(ta, tb, m, n, k, alpha, &ae, &be, beta, c + e * stride_c, ldc, bias, pb, pa,
                     threads);
        }
        return;
    }
#endif
    mg_cpu_bf16_emulate(ctx, ta, tb, m, n, k, alpha, a, b, beta, c, ldc, stride_c, batch, bias);
}
