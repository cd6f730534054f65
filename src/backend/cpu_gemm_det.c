/* cpu_gemm_det.c: the deterministic fp32 GEMM of --deterministic training,
 *   C (M, N) = alpha op(A) op(B) + beta C, row-major, mg_cpu_gemm's arguments,
 * whose every element has one order of additions over K that depends on
 * nothing else: not M, N, the thread count, the ISA, the rows around it.
 * The contract (a test holds it bit for bit):
 *   - K is cut into nb = 2^j leaves of mg_det_leaf(K) k (cpu_det.c: K halved
 *     while even and above 64); a leaf's partial is a chain
 *     p = fmaf(opA[i][k], opB[k][j], p) from +0.0f in ascending k;
 *   - the leaves are summed in the perfect binary tree over them, so K split
 *     into 2^i equal ranges (a rank's share of a K split across ranks) gives
 *     subtrees, and the ranks' sums added in the same tree give the bits of
 *     one rank's whole product;
 *   - S so summed, C = alpha S (beta 0: C is overwritten, NaN or not) or
 *     C = alpha S + beta C as two rounded products and one rounded sum
 *     (alpha 1 and beta 1 multiply nothing); K <= 0: C = beta C (beta 0: 0).
 * Lanes of the vectors are output columns: each lane runs one element's chain,
 * so the AVX-512, AVX2 and scalar paths give the same bits. op(B) is packed
 * into panels of columns (k-major), op(A) broadcast where it lies; at each
 * block's end the register tile goes into a binary-counter stack of partials
 * (log2(nb) + 1 levels, on the thread's stack). Threads split M and N, never K.
 * Exports mg_cpu_gemm_det and mg_cpu_gemm_det_force (cpu_kernels.h). */
#include <math.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/blas_core.h"
#include "backend/cpu_kernels.h"
#include "parallel.h"

#ifdef _OPENMP
#include <omp.h>
static int max_threads(void) { return omp_get_max_threads(); }
#else
static int max_threads(void) { return 1; }
#endif

/* No multiply and add may fuse but the fmaf the contract names (-std=c11 has
 * this already; a GNU mode would not). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define DET_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,fma")))
#define AVX2 __attribute__((target("avx2,fma")))
#else
#define DET_X86 0
#endif
#define INLINE __attribute__((always_inline)) inline

#define MAX_LEVELS 40 /* nb < 2^40 blocks: K < 2^46 */
#define MAX_ACC 16    /* accumulator vectors of a register tile */
#define MAX_NR 32     /* the widest panel (AVX-512's) */

/* One call's arguments, with op(B) packed: panel p (columns p*nr ..) at
 * bp + p * k * nr, k rows of nr floats, columns past n zero. */
typedef struct {
    bool ta, tb;
    int64_t m, n, k, nb, blk; /* nb leaves of blk (mg_det_leaf) */
    float alpha, beta;
    const float *a, *b;
    int64_t lda, ldb, ldc;
    float *c, *bp;
    int64_t nr, npanels;
} det_job;

/* ---- the scalar path (and the reference of the others) --------------------------- */

static inline float op_a(const det_job *J, int64_t i, int64_t p) {
    return J->ta ? J->a[p * J->lda + i] : J->a[i * J->lda + p];
}
static inline float op_b(const det_job *J, int64_t p, int64_t j) {
    return J->tb ? J->b[j * J->ldb + p] : J->b[p * J->ldb + j];
}

static inline float epilogue(float s, float c, float alpha, float beta) {
    float t = alpha == 1.0f ? s : alpha * s;
    if (beta == 0.0f) return t;
    return t + (beta == 1.0f ? c : beta * c);
}

static void gemm_scalar(const det_job *J) {
    int64_t m = J->m, n = J->n, k = J->k;
    MG_PAR_FOR(max_threads() > 1 && m > 1 && m * n * k > (1 << 18), for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float stk[64], cur = 0.0f;
            int64_t q = 0;
            for (int64_t k0 = 0; k0 < k; k0 += J->blk, q++) {
                int64_t k1 = k0 + J->blk;
                cur = 0.0f;
                for (int64_t p = k0; p < k1; p++) cur = fmaf(op_a(J, i, p), op_b(J, p, j), cur);
                int l = 0;
                for (; (q >> l) & 1; l++) cur = stk[l] + cur;
                if (k1 < k) stk[l] = cur;
                else
                    for (l++; (J->nb >> l) != 0; l++)
                        if ((J->nb >> l) & 1) cur = stk[l] + cur;
            }
            float *cp = J->c + i * J->ldc + j;
            *cp = epilogue(cur, *cp, J->alpha, J->beta);
        });
}

/* ---- packing op(B), any ISA --------------------------------------------------------- */

static void pack_plain(const det_job *J, int64_t p) {
    int64_t nr = J->nr, j0 = p * nr, w = J->n - j0 < nr ? J->n - j0 : nr;
    float *dst = J->bp + p * J->k * nr;
    if (!J->tb) {
        for (int64_t q = 0; q < J->k; q++) {
            memcpy(dst + q * nr, J->b + q * J->ldb + j0, (size_t)w * sizeof(float));
            for (int64_t j = w; j < nr; j++) dst[q * nr + j] = 0.0f;
        }
        return;
    }
    for (int64_t q0 = 0; q0 < J->k; q0 += 64) { /* a 64 x nr block at a time */
        int64_t q1 = q0 + 64 < J->k ? q0 + 64 : J->k;
        for (int64_t j = 0; j < nr; j++) {
            const float *src = J->b + (j0 + j) * J->ldb;
            for (int64_t q = q0; q < q1; q++) dst[q * nr + j] = j < w ? src[q] : 0.0f;
        }
    }
}

#if DET_X86
/* ---- the register tile, either vector path ------------------------------------------ */

#define UNROLL16 _Pragma("GCC unroll 16")

/* The tile of the vector path P: MR rows from i0 by NP panels from p0, two
 * vectors a panel (MR * NP * 2 <= 16 vectors). Every block of k goes into the
 * registers, one k at a time by P_step, then into the stack of partials (block
 * q adds the levels it completes; the last block adds those of nb's other
 * bits); P_store writes the tile to C. A macro, so that each path's tile is
 * compiled for its ISA with its vector type VEC (ZERO and ADD its intrinsics);
 * NR is its panel's columns. DET_TILE_OF makes the tiles the drivers take,
 * P_<MR>x<NP>_n and _t (op(A) = A, A^T). */
#define DET_TILE(P, TARGET, VEC, NR, ZERO, ADD)                                                  \
    TARGET static INLINE void P##_tile(const det_job *J, int64_t i0, int64_t p0, VEC *stk,        \
                                       const int MR, const int NP, const bool TA) {               \
        const int NV = 2 * NP, NA = MR * NV;                                                      \
        const int64_t K = J->k, ps = K * NR, lda = J->lda;                                        \
        const float *bp = J->bp + p0 * ps;                                                        \
        const float *ar[8];                                                                       \
        for (int i = 0; i < MR; i++) ar[i] = J->a + (TA ? i0 + i : (i0 + i) * lda);               \
        VEC acc[MAX_ACC];                                                                         \
        UNROLL16 for (int r = 0; r < NA; r++) acc[r] = ZERO(); /* k > 0: only for the compiler */ \
        int64_t q = 0;                                                                            \
        for (int64_t k0 = 0; k0 < K; k0 += J->blk, q++) {                                        \
            int64_t k1 = k0 + J->blk;                                                             \
            UNROLL16 for (int r = 0; r < NA; r++) acc[r] = ZERO();                                \
            for (int64_t p = k0; p < k1; p++) {                                                   \
                const float *b = bp + p * NR;                                                     \
                P##_step(ar, b, ps, p, lda, acc, MR, NV, TA);                                     \
            }                                                                                     \
            int l = 0;                                                                            \
            for (; (q >> l) & 1; l++)                                                             \
                UNROLL16 for (int r = 0; r < NA; r++) acc[r] = ADD(stk[l * MAX_ACC + r], acc[r]); \
            if (k1 < K) {                                                                         \
                UNROLL16 for (int r = 0; r < NA; r++) stk[l * MAX_ACC + r] = acc[r];              \
            } else {                                                                              \
                for (l++; (J->nb >> l) != 0; l++)                                                 \
                    if ((J->nb >> l) & 1)                                                         \
                        UNROLL16 for (int r = 0; r < NA; r++)                                     \
                            acc[r] = ADD(stk[l * MAX_ACC + r], acc[r]);                           \
            }                                                                                     \
        }                                                                                         \
        P##_store(J, i0, p0, acc, MR, NV);                                                        \
    }
#define DET_TILE_OF(P, TARGET, MR, NP)                                                           \
    TARGET static void P##_##MR##x##NP##_n(const det_job *J, int64_t i0, int64_t p0, void *s) { \
        P##_tile(J, i0, p0, s, MR, NP, false);                                                   \
    }                                                                                            \
    TARGET static void P##_##MR##x##NP##_t(const det_job *J, int64_t i0, int64_t p0, void *s) { \
        P##_tile(J, i0, p0, s, MR, NP, true);                                                    \
    }

/* ---- AVX-512: panels of 32 columns, tiles of 8 x 32 (or 4 x 64, 2 x 128, 1 x 256) --- */

/* One k of the tile: the MR rows' op(A) values at k = p times the NV vectors of
 * the panels at b. (The steps are macros: as functions, the AVX2 tile's
 * accumulators leave the registers at each block's end.) */
#define z_step(ar, b, ps, p, lda, acc, MR, NV, TA)                                                 \
    do {                                                                                         \
        __m512 x[8];                                                                             \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                     \
            x[i] = _mm512_set1_ps(TA ? ar[0][p * lda + i] : ar[i][p]);                           \
        if (MR == 1) {                                                                           \
            UNROLL16 for (int v = 0; v < NV; v++)                                                \
                acc[v] = _mm512_fmadd_ps(x[0], _mm512_loadu_ps(b + (v / 2) * ps + (v % 2) * 16),  \
                                         acc[v]);                                                \
        } else {                                                                                 \
            __m512 bv[MAX_ACC];                                                                  \
            UNROLL16 for (int v = 0; v < NV; v++)                                                \
                bv[v] = _mm512_loadu_ps(b + (v / 2) * ps + (v % 2) * 16);                        \
            _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                 \
                UNROLL16 for (int v = 0; v < NV; v++)                                            \
                    acc[i * NV + v] = _mm512_fmadd_ps(x[i], bv[v], acc[i * NV + v]);             \
        }                                                                                        \
    } while (0)

/* C = alpha S + beta C of the tile's sums S, with masked loads and stores past n. */
AVX512 static INLINE void z_store(const det_job *J, int64_t i0, int64_t p0, const __m512 *acc,
                                  const int MR, const int NV) {
    const __m512 alpha = _mm512_set1_ps(J->alpha), beta = _mm512_set1_ps(J->beta);
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) {
            int64_t col = (p0 + v / 2) * 32 + (v % 2) * 16, left = J->n - col;
            if (left <= 0) continue;
            __mmask16 mk = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            float *cp = J->c + (i0 + i) * J->ldc + col;
            __m512 s = acc[i * NV + v];
            if (J->alpha != 1.0f) s = _mm512_mul_ps(s, alpha);
            if (J->beta != 0.0f) {
                __m512 u = _mm512_maskz_loadu_ps(mk, cp);
                if (J->beta != 1.0f) u = _mm512_mul_ps(u, beta);
                s = _mm512_add_ps(s, u);
            }
            _mm512_mask_storeu_ps(cp, mk, s);
        }
}

DET_TILE(z, AVX512, __m512, 32, _mm512_setzero_ps, _mm512_add_ps)
DET_TILE_OF(z, AVX512, 8, 1)
DET_TILE_OF(z, AVX512, 4, 2)
DET_TILE_OF(z, AVX512, 4, 1)
DET_TILE_OF(z, AVX512, 2, 4)
DET_TILE_OF(z, AVX512, 2, 1)
DET_TILE_OF(z, AVX512, 1, 8)
DET_TILE_OF(z, AVX512, 1, 1)

/* op(B) = B^T: 16 x 16 blocks of B transposed in registers. */
AVX512 static void z_pack(const det_job *J, int64_t p) {
    if (!J->tb) {
        pack_plain(J, p);
        return;
    }
    enum { NR = 32 };
    int64_t j0 = p * NR, w = J->n - j0 < NR ? J->n - j0 : NR, K = J->k;
    float *dst = J->bp + p * K * NR;
    for (int64_t q0 = 0; q0 < K; q0 += 16) {
        int64_t kq = K - q0 < 16 ? K - q0 : 16;
        __mmask16 mk = kq == 16 ? (__mmask16)0xffff : (__mmask16)((1u << kq) - 1);
        for (int h = 0; h < 2; h++) {
            __m512 r[16], t[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                r[j] = h * 16 + j < w ? _mm512_maskz_loadu_ps(mk, J->b + (j0 + h * 16 + j) * J->ldb + q0)
                                      : _mm512_setzero_ps();
#pragma GCC unroll 16
            for (int i = 0; i < 8; i++) {
                t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
            }
#pragma GCC unroll 16
            for (int i = 0; i < 4; i++) {
                r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
                r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
                r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
                r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
            }
#pragma GCC unroll 16
            for (int c = 0; c < 4; c++) {
                t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
                t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
                t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
                t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
            }
#pragma GCC unroll 16
            for (int c = 0; c < 4; c++) {
                r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
                r[c + 8] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);
                r[c + 4] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
                r[c + 12] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD);
            }
            if (kq == 16) {
#pragma GCC unroll 16
                for (int x = 0; x < 16; x++) _mm512_storeu_ps(dst + (q0 + x) * NR + h * 16, r[x]);
            } else {
                float *d = dst + q0 * NR + h * 16;
                alignas(64) float tmp[16][16];
#pragma GCC unroll 16
                for (int x = 0; x < 16; x++) _mm512_store_ps(tmp[x], r[x]);
                for (int64_t x = 0; x < kq; x++) memcpy(d + x * NR, tmp[x], sizeof tmp[x]);
            }
        }
    }
}

/* ---- AVX2: panels of 16 columns, tiles of 6 x 16 (or 4 x 16, 2 x 32, 1 x 64) -------- */

/* One k of the tile: the NV vectors of the panels at b times each of the MR
 * rows' op(A) values at k = p. */
#define y_step(ar, b, ps, p, lda, acc, MR, NV, TA)                                                 \
    do {                                                                                         \
        __m256 bv[8];                                                                            \
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)                                     \
            bv[v] = _mm256_loadu_ps(b + (v / 2) * ps + (v % 2) * 8);                             \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {                                   \
            __m256 x = _mm256_set1_ps(TA ? ar[0][p * lda + i] : ar[i][p]);                       \
            _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)                                 \
                acc[i * NV + v] = _mm256_fmadd_ps(x, bv[v], acc[i * NV + v]);                    \
        }                                                                                        \
    } while (0)

/* C = alpha S + beta C of the tile's sums S: whole vectors stored as they are
 * when alpha is 1 and beta 0, else element by element (epilogue). */
AVX2 static INLINE void y_store(const det_job *J, int64_t i0, int64_t p0, const __m256 *acc,
                                const int MR, const int NV) {
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++) {
            int64_t col = (p0 + v / 2) * 16 + (v % 2) * 8, left = J->n - col;
            if (left <= 0) continue;
            float *cp = J->c + (i0 + i) * J->ldc + col;
            if (left >= 8 && J->beta == 0.0f && J->alpha == 1.0f) {
                _mm256_storeu_ps(cp, acc[i * NV + v]);
                continue;
            }
            alignas(32) float s[8];
            _mm256_store_ps(s, acc[i * NV + v]);
            for (int64_t j = 0; j < (left < 8 ? left : 8); j++)
                cp[j] = epilogue(s[j], cp[j], J->alpha, J->beta);
        }
}

DET_TILE(y, AVX2, __m256, 16, _mm256_setzero_ps, _mm256_add_ps)
DET_TILE_OF(y, AVX2, 6, 1)
DET_TILE_OF(y, AVX2, 4, 1)
DET_TILE_OF(y, AVX2, 2, 2)
DET_TILE_OF(y, AVX2, 2, 1)
DET_TILE_OF(y, AVX2, 1, 4)
DET_TILE_OF(y, AVX2, 1, 1)
#endif

/* ---- the driver, any vector path ------------------------------------------------------ */

typedef void (*tile_fn)(const det_job *J, int64_t i0, int64_t p0, void *stk);

/* A vector path: its panel width, its full tile (mr rows x 1 panel), and for
 * the rows left below mr (4, 2, 1 of them) a tile over np panels and one over 1. */
typedef struct {
    int nr, mr;
    tile_fn full[2];     /* [ta] */
    int np[3];           /* panels of the 4-, 2- and 1-row wide tiles */
    tile_fn wide[3][2];  /* [4, 2, 1 rows][ta] */
    tile_fn one[3][2];   /* the same over one panel */
    void (*pack)(const det_job *J, int64_t p);
} det_path;

#if DET_X86
static const det_path path512 = {
    32, 8, {z_8x1_n, z_8x1_t}, {2, 4, 8},
    {{z_4x2_n, z_4x2_t}, {z_2x4_n, z_2x4_t}, {z_1x8_n, z_1x8_t}},
    {{z_4x1_n, z_4x1_t}, {z_2x1_n, z_2x1_t}, {z_1x1_n, z_1x1_t}}, z_pack};
static const det_path path256 = {
    16, 6, {y_6x1_n, y_6x1_t}, {1, 2, 4},
    {{y_4x1_n, y_4x1_t}, {y_2x2_n, y_2x2_t}, {y_1x4_n, y_1x4_t}},
    {{y_4x1_n, y_4x1_t}, {y_2x1_n, y_2x1_t}, {y_1x1_n, y_1x1_t}}, pack_plain};
#endif

/* The rows m - m % mr .. m over panels [p0, p1): 4, 2, 1 rows at a time. */
static void rest_rows(const det_path *P, const det_job *J, int64_t p0, int64_t p1, void *stk) {
    int64_t i0 = J->m - J->m % P->mr;
    int left = (int)(J->m % P->mr), ta = J->ta;
    for (int s = 0; s < 3; s++) {
        int rows = 4 >> s;
        if (!(left & rows)) continue;
        int64_t p = p0;
        for (; p + P->np[s] <= p1; p += P->np[s]) P->wide[s][ta](J, i0, p, stk);
        for (; p < p1; p++) P->one[s][ta](J, i0, p, stk);
        i0 += rows;
    }
}

/* Item `it` of gemm_vector's: a full tile, or the rows left over a chunk of
 * panels. by_panel: full tiles panel-major (a panel's rows follow each other). */
static void run_item(const det_path *P, const det_job *J, int64_t it, int64_t full, int by_panel,
                     void *stk) {
    int64_t np = J->npanels, chunk = P->np[2];
    if (it < full * np) {
        int64_t t = by_panel ? it % full : it / np, p = by_panel ? it / full : it % np;
        P->full[J->ta](J, t * P->mr, p, stk);
    } else {
        int64_t p0 = (it - full * np) * chunk;
        rest_rows(P, J, p0, p0 + chunk < np ? p0 + chunk : np, stk);
    }
}

static void gemm_vector(const det_path *P, det_job *J) {
    int64_t full = J->m / P->mr, np = J->npanels;
    int64_t chunk = P->np[2]; /* panels per item of the rows left */
    int64_t rest = J->m % P->mr ? (np + chunk - 1) / chunk : 0;
    int64_t items = full * np + rest;
    /* the packed op(B) past half of L2: each panel in turn over all the rows,
     * so that it is read from L2 while A streams; else a row tile in turn
     * over all the panels (A's tile stays in L1) */
    int by_panel = (double)J->k * (double)J->nr * (double)np * sizeof(float) > 512 * 1024;
    int par = max_threads() > 1 && (double)J->m * (double)J->n * (double)J->k > (double)(1 << 18);
    if (!par) { /* no parallel region: its cost shows on a one-row product */
        alignas(64) float stk[MAX_LEVELS * MAX_ACC * 16];
        for (int64_t p = 0; p < np; p++) P->pack(J, p);
        for (int64_t it = 0; it < items; it++) run_item(P, J, it, full, by_panel, stk);
        return;
    }
#pragma omp parallel
    {
        /* the stack of partials: MAX_LEVELS levels of a tile's vectors */
        alignas(64) float stk[MAX_LEVELS * MAX_ACC * 16];
#pragma omp for schedule(static)
        for (int64_t p = 0; p < np; p++) P->pack(J, p);
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) run_item(P, J, it, full, by_panel, stk);
    }
}

/* ---- the packed panels: the thread's kept buffer (cpu_common.c) --------------------- */

static float *packed_panels(size_t n) { return mg_cpu_thread_buffer(MG_CPU_BUFFER_DET_GEMM, n); }

/* ---- the entry ------------------------------------------------------------------------ */

static atomic_int forced = -1;

int mg_cpu_gemm_det_force(int isa) {
    if (isa != -1 && isa != MG_ISA_GENERIC && isa != MG_ISA_AVX2 && isa != MG_ISA_AVX512) return -1;
#if DET_X86
    if (isa == MG_ISA_AVX512 && !(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")))
        return -1;
    if (isa == MG_ISA_AVX2 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
        return -1;
#else
    if (isa == MG_ISA_AVX512 || isa == MG_ISA_AVX2) return -1;
#endif
    atomic_store(&forced, isa);
    return 0;
}

/* The path a call takes: forced, else the CPU's level (MG_CPU_ISA lowers it). */
static int det_isa(void) {
    int f = atomic_load_explicit(&forced, memory_order_relaxed);
    if (f >= 0) return f;
#if DET_X86
    mg_isa level = mg_cpu_isa();
    if (level >= MG_ISA_AVX512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
        return MG_ISA_AVX512;
    if (level >= MG_ISA_AVX2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return MG_ISA_AVX2;
#endif
    return MG_ISA_GENERIC;
}

void mg_cpu_gemm_det(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    det_job J = {.ta = trans_a, .tb = trans_b, .m = m, .n = n, .k = k,
                 .blk = mg_det_leaf(k), .nb = k / mg_det_leaf(k), .alpha = alpha, .beta = beta, .a = a, .b = b,
                 .lda = lda, .ldb = ldb, .ldc = ldc, .c = c};
    int isa = det_isa();
#if DET_X86
    const det_path *P = isa == MG_ISA_AVX512 ? &path512 : isa == MG_ISA_AVX2 ? &path256 : NULL;
    if (P && J.nb < ((int64_t)1 << (MAX_LEVELS - 1))) {
        J.nr = P->nr;
        J.npanels = (n + P->nr - 1) / P->nr;
        if ((J.bp = packed_panels((size_t)(J.npanels * P->nr * k)))) {
            gemm_vector(P, &J);
            return;
        }
    }
#else
    (void)isa;
#endif
    gemm_scalar(&J); /* the same bits, slower */
}
