/* cpu_layer_norm.c: the CPU layer norm kernels, over the last dim of x (R, C):
 * the forward (whole rows, or split rows from their summed moments), the
 * moments of a split row, the backward's row sums, and the backward with the
 * weight gradients. A row is handled in one piece while it sits in cache, so
 * each kernel reads its inputs from memory once; its sums are float sums of
 * blocks of SUM_BLOCK terms added up in double, and the column sums of the
 * weight gradients add rows in order in float, as PyTorch does. With AVX-512
 * a row's sums go in four vectors of lanes (LANES4_SUM), the forward weaves
 * each row's output into the next row's read, and both directions write an
 * output too large to stay in cache with streaming stores, in the same bits.
 * Exports mg_cpu_layer_norm, mg_cpu_layer_norm_moments,
 * mg_cpu_layer_norm_backward_sums and mg_cpu_layer_norm_backward
 * (cpu_kernels.h; contracts in backend.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_state.h"
#include "backend/cpu_rows.h"
#include "parallel.h"

MG_CPU_INLINE double row_sum(const float *restrict x, int64_t c) {
    double s = 0;
    BLOCK_SUM(s, j, c, x[j])
    return s;
}

MG_CPU_INLINE double row_squares(const float *restrict x, int64_t c, float mean) {
    double s = 0;
    BLOCK_SUM(s, j, c, (x[j] - mean) * (x[j] - mean))
    return s;
}

/* The forward with weight and bias on CPUs with AVX-512, c a multiple of 16,
 * in runs of LN_RUN rows. Row r's y is written in the loop that reads row
 * r + 1 from memory for its sum, so the memory streams all the while: the
 * plain kernel reads a row, then normalizes it from cache while it asks for
 * the next row, and its reads come in bursts. A y too large to stay in cache
 * is written with streaming stores (`streams`), which also spares the
 * backward after it the eviction of y's dirty lines. Asking for lines ahead
 * of the loop's reads made it slower; asking for the whole row after next
 * (into the L1: into the L2 only was slower, and three rows ahead gained
 * nothing more) before the row's squares, its first pass from cache, makes
 * it faster. The row's sums go in four vectors of lanes (LANES4_SUM below).
 * Every row's sum is taken in the same order, whether read alone (a run's
 * first row) or in the loop (the others), and the stores do not change the
 * values: the same bits at every size, alignment and number of threads.
 * Figures: docs/PERFORMANCE.md "Transformer kernels". */
#ifdef AVX512_KERNELS
#define LN_RUN 64
static bool layer_norm_wide_runs(int64_t c) {
    return c > 0 && c % 16 == 0 && mg_cpu_isa() >= MG_ISA_AVX512;
}

/* acc (a double) += the sum of the terms TERM_AT(j), 16 at a time for j in
 * [0, c) in steps of 16: a block of SUM_BLOCK at a time, each in four vectors
 * of float lanes, then those added ((v0 + v1) + (v2 + v3)) and their lanes.
 * The terms j0 + 64 i + 16 k of the block from j0 go to vector k, its last
 * vectors short of 64 to vector 0. One vector was a chain of c / 16
 * additions, each waiting on the last: the kernels ran at the adds' latency,
 * even from cache. */
#define LANES4_SUM(acc, c, TERM_AT)                                                                \
    for (int64_t j0_ = 0; j0_ < (c); j0_ += SUM_BLOCK) {                                           \
        int64_t j1_ = j0_ + SUM_BLOCK < (c) ? j0_ + SUM_BLOCK : (c), j_ = j0_;                     \
        __m512 v0_ = _mm512_setzero_ps(), v1_ = v0_, v2_ = v0_, v3_ = v0_;                         \
        for (; j_ + 64 <= j1_; j_ += 64) {                                                         \
            v0_ = _mm512_add_ps(v0_, TERM_AT(j_));                                                 \
            v1_ = _mm512_add_ps(v1_, TERM_AT(j_ + 16));                                            \
            v2_ = _mm512_add_ps(v2_, TERM_AT(j_ + 32));                                            \
            v3_ = _mm512_add_ps(v3_, TERM_AT(j_ + 48));                                            \
        }                                                                                          \
        for (; j_ < j1_; j_ += 16) v0_ = _mm512_add_ps(v0_, TERM_AT(j_));                          \
        acc += lanes4_sum(v0_, v1_, v2_, v3_);                                                     \
    }

__attribute__((target("arch=x86-64-v4"), always_inline)) static inline float lanes4_sum(
    __m512 v0, __m512 v1, __m512 v2, __m512 v3) {
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(v0, v1), _mm512_add_ps(v2, v3)));
}

/* row_sum and row_squares in LANES4_SUM's order */
__attribute__((target("arch=x86-64-v4"))) static double row_sum_wide(const float *restrict x,
                                                                     int64_t c) {
    double s = 0;
#define TERM_AT(j) _mm512_loadu_ps(x + (j))
    LANES4_SUM(s, c, TERM_AT);
#undef TERM_AT
    return s;
}

__attribute__((target("arch=x86-64-v4"), always_inline)) static inline __m512 square_at(
    const float *p, __m512 vmean) {
    __m512 d = _mm512_sub_ps(_mm512_loadu_ps(p), vmean);
    return _mm512_mul_ps(d, d);
}

__attribute__((target("arch=x86-64-v4"))) static double row_squares_wide(const float *restrict x,
                                                                         int64_t c, float mean) {
    __m512 vmean = _mm512_set1_ps(mean);
    double s = 0;
#define TERM_AT(j) square_at(x + (j), vmean)
    LANES4_SUM(s, c, TERM_AT);
#undef TERM_AT
    return s;
}

/* y = (x - mean) rstd w + b at columns [j, j + 16) of a row; returns the
 * next row's x there (nx), a term of its sum. stream: yr 64-byte aligned,
 * written with streaming stores */
__attribute__((target("arch=x86-64-v4"), always_inline)) static inline __m512 out_at(
    const float *restrict xr, const float *restrict wd, const float *restrict bd, __m512 vmean,
    __m512 vrstd, const float *restrict nx, bool stream, float *restrict yr, int64_t j) {
    __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + j), vmean), vrstd);
    __m512 v = _mm512_fmadd_ps(xhat, _mm512_loadu_ps(wd + j), _mm512_loadu_ps(bd + j));
    if (stream)
        _mm512_stream_ps(yr + j, v);
    else
        _mm512_storeu_ps(yr + j, v);
    return _mm512_loadu_ps(nx + j);
}

/* y of one row, while row_sum_wide(nx) is taken; returns it */
__attribute__((target("arch=x86-64-v4"), always_inline)) static inline double row_out_wide(
    const float *restrict xr, const float *restrict wd, const float *restrict bd, int64_t c,
    float mean, float rstd, const float *restrict nx, bool stream, float *restrict yr) {
    __m512 vmean = _mm512_set1_ps(mean), vrstd = _mm512_set1_ps(rstd);
    double s = 0;
#define TERM_AT(j) out_at(xr, wd, bd, vmean, vrstd, nx, stream, yr, j)
    LANES4_SUM(s, c, TERM_AT);
#undef TERM_AT
    return s;
}

/* rows [r0, r1) of x (rows, c); the last one reads row r1 for nothing when
 * there is one, so the next run's first row is in cache when it is read */
__attribute__((target("arch=x86-64-v4"))) static void layer_norm_run_wide(
    const float *x, const float *wd, const float *bd, float eps, int64_t c, int64_t rows,
    int64_t r0, int64_t r1, bool stream, float *stats, float *y) {
    double s = row_sum_wide(x + r0 * c, c);
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * c, *nx = r + 1 < rows ? xr + c : xr;
        float mean = (float)(s / c);
        if (r + 2 < rows) /* the row after next, while this row's passes run from cache */
            for (int64_t j = 0; j < c; j += 16) __builtin_prefetch(xr + 2 * c + j);
        float rstd = (float)(1.0 / sqrt(row_squares_wide(xr, c, mean) / c + eps));
        stats[r] = mean;
        stats[rows + r] = rstd;
        s = stream ? row_out_wide(xr, wd, bd, c, mean, rstd, nx, true, y + r * c)
                   : row_out_wide(xr, wd, bd, c, mean, rstd, nx, false, y + r * c);
    }
}
#endif

MG_CPU_CLONES void mg_cpu_layer_norm(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                     const mg_tensor *b, float eps, const mg_tensor *moments,
                                     int64_t n, mg_tensor *stats, mg_tensor *y) {
    (void)ctx;
    int64_t c = last_dim(x), rows = stats->numel / 2;
    const float *restrict wd = w ? w->data : NULL, *restrict bd = b ? b->data : NULL;
#ifdef AVX512_KERNELS
    if (!moments && wd && bd && layer_norm_wide_runs(c)) {
        bool stream = streams(y);
        int64_t runs = (rows + LN_RUN - 1) / LN_RUN;
        MG_PAR_REGION(x->numel > PAR_MIN,
            _Pragma("omp for schedule(static) nowait")
            for (int64_t k = 0; k < runs; k++) {
                int64_t r0 = k * LN_RUN, r1 = r0 + LN_RUN < rows ? r0 + LN_RUN : rows;
                layer_norm_run_wide(x->data, wd, bd, eps, c, rows, r0, r1, stream, stats->data,
                                    y->data);
            }
            if (stream) stream_fence();
        );
        return;
    }
#endif
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = x->data + r * c;
        float *restrict yr = y->data + r * c;
        float mean, rstd;
        if (moments) {
            mean = moments->data[r];
            rstd = (float)(1.0 / sqrt(moments->data[rows + r] / (double)n + eps));
        } else {
            mean = c ? (float)(row_sum(xr, c) / c) : 0.0f;
            /* the rest of the row runs from cache: ask for the next row now,
             * so the memory does not idle meanwhile */
            if (r + 1 < rows)
                for (int64_t j = 0; j < c; j += 16) __builtin_prefetch(xr + c + j);
            rstd = (float)(1.0 / sqrt((c ? row_squares(xr, c, mean) / c : 0.0) + eps));
        }
        stats->data[r] = mean;
        stats->data[rows + r] = rstd;
        if (wd && bd)
            for (int64_t j = 0; j < c; j++) yr[j] = (xr[j] - mean) * rstd * wd[j] + bd[j];
        else if (wd)
            for (int64_t j = 0; j < c; j++) yr[j] = (xr[j] - mean) * rstd * wd[j];
        else if (bd)
            for (int64_t j = 0; j < c; j++) yr[j] = (xr[j] - mean) * rstd + bd[j];
        else
            for (int64_t j = 0; j < c; j++) yr[j] = (xr[j] - mean) * rstd;
    });
}

MG_CPU_CLONES void mg_cpu_layer_norm_moments(void *ctx, const mg_tensor *x, const mg_tensor *mean,
                                             mg_tensor *out) {
    (void)ctx;
    int64_t c = last_dim(x), rows = out->numel;
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *xr = x->data + r * c;
        out->data[r] = (float)(mean ? row_squares(xr, c, mean->data[r]) : row_sum(xr, c));
    });
}

/* (sum_j g, sum_j g xhat) of one row, g = dy w (dy where w is NULL): float
 * sums of SUM_BLOCK terms added in double, as BLOCK_SUM, two at once */
MG_CPU_INLINE void backward_row_sums(const float *restrict xr, const float *restrict g,
                                     const float *restrict wd, int64_t c, float mean, float rstd,
                                     double *a_out, double *b_out) {
    double a = 0, b = 0;
    for (int64_t j0 = 0; j0 < c; j0 += SUM_BLOCK) {
        int64_t j1 = j0 + SUM_BLOCK < c ? j0 + SUM_BLOCK : c;
        float pa = 0, pb = 0;
        if (wd) {
#pragma omp simd reduction(+ : pa, pb)
            for (int64_t j = j0; j < j1; j++) {
                float gj = g[j] * wd[j];
                pa += gj;
                pb += gj * ((xr[j] - mean) * rstd);
            }
        } else {
#pragma omp simd reduction(+ : pa, pb)
            for (int64_t j = j0; j < j1; j++) {
                pa += g[j];
                pb += g[j] * ((xr[j] - mean) * rstd);
            }
        }
        a += pa;
        b += pb;
    }
    *a_out = a;
    *b_out = b;
}

MG_CPU_CLONES void mg_cpu_layer_norm_backward_sums(void *ctx, const mg_tensor *x,
                                                   const mg_tensor *w, const mg_tensor *dy,
                                                   const mg_tensor *stats, mg_tensor *sums) {
    (void)ctx;
    int64_t c = last_dim(x), rows = stats->numel / 2;
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        double a, b;
        backward_row_sums(x->data + r * c, dy->data + r * c, w ? w->data : NULL, c, stats->data[r],
                          stats->data[rows + r], &a, &b);
        sums->data[r] = (float)a;
        sums->data[rows + r] = (float)b;
    });
}

/* dx of one row from its sums a = sum g, b = sum g xhat over n columns */
MG_CPU_INLINE void backward_row_dx(const float *restrict xr, const float *restrict g,
                                   const float *restrict wd, int64_t c, float mean, float rstd,
                                   double a, double b, int64_t n, float *restrict dxr) {
    float ma = n ? (float)(a / n) : 0.0f, mb = n ? (float)(b / n) : 0.0f;
    if (wd)
        for (int64_t j = 0; j < c; j++)
            dxr[j] = rstd * (g[j] * wd[j] - ma - (xr[j] - mean) * rstd * mb);
    else
        for (int64_t j = 0; j < c; j++) dxr[j] = rstd * (g[j] - ma - (xr[j] - mean) * rstd * mb);
}

/* ask for columns [j0, j1) of a later row's x and dy (nx NULL: none) */
MG_CPU_INLINE void ask_next_rows(const float *nx, const float *ng, int64_t j0, int64_t j1) {
    if (nx)
        for (int64_t j = j0; j < j1; j += 16) {
            __builtin_prefetch(nx + j);
            __builtin_prefetch(ng + j);
        }
}

/* backward_row_dx with the row's terms of dw and db added in the same pass.
 * This pass runs from cache while the memory would idle: the x and dy of
 * the row after next (nx, ng; NULL near the end) are asked for a block at a
 * time (the row after next beat both the next row and three rows ahead) */
MG_CPU_INLINE void backward_row_all(const float *restrict xr, const float *restrict g,
                                    const float *restrict wd, int64_t c, float mean, float rstd,
                                    double a, double b, int64_t n, float *restrict dxr,
                                    float *restrict dwd, float *restrict dbd, const float *nx,
                                    const float *ng) {
    float ma = n ? (float)(a / n) : 0.0f, mb = n ? (float)(b / n) : 0.0f;
    for (int64_t j0 = 0; j0 < c; j0 += SUM_BLOCK) {
        int64_t j1 = j0 + SUM_BLOCK < c ? j0 + SUM_BLOCK : c;
        ask_next_rows(nx, ng, j0, j1);
        for (int64_t j = j0; j < j1; j++) {
            float xhat = (xr[j] - mean) * rstd;
            dxr[j] = rstd * (g[j] * wd[j] - ma - xhat * mb);
            dwd[j] += g[j] * xhat;
            dbd[j] += g[j];
        }
    }
}

/* The usual backward (weights, both their gradients) on CPUs with AVX-512,
 * c a multiple of 16: backward_row_sums with each of its two sums in four
 * vectors of lanes, as LANES4_SUM (one chain of additions waited on each
 * add's latency), then backward_row_all's pass, dx streamed where
 * it is too large to stay in cache (`streams`; dx 64-byte aligned), in the
 * same bits either way. */
#ifdef AVX512_KERNELS
/* the two sums' terms at columns [j, j + 16): a += g w, b += g w xhat */
__attribute__((target("arch=x86-64-v4"), always_inline)) static inline void sums_at(
    const float *restrict xr, const float *restrict g, const float *restrict wd, __m512 vmean,
    __m512 vrstd, int64_t j, __m512 *a, __m512 *b) {
    __m512 gw = _mm512_mul_ps(_mm512_loadu_ps(g + j), _mm512_loadu_ps(wd + j));
    __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + j), vmean), vrstd);
    *a = _mm512_add_ps(*a, gw);
    *b = _mm512_fmadd_ps(gw, xhat, *b);
}

/* sums_ab: the row's two sums given (a split row), or NULL: taken here */
__attribute__((target("arch=x86-64-v4"), always_inline)) static inline void backward_row_wide(
    const float *restrict xr, const float *restrict g, const float *restrict wd, int64_t c,
    float mean, float rstd, const float *sums_ab, int64_t n, bool stream, float *restrict dxr,
    float *restrict dwd, float *restrict dbd, const float *nx, const float *ng) {
    __m512 vmean = _mm512_set1_ps(mean), vrstd = _mm512_set1_ps(rstd);
    double a = 0, b = 0;
    if (sums_ab) {
        a = sums_ab[0];
        b = sums_ab[1];
    } else {
        for (int64_t j0 = 0; j0 < c; j0 += SUM_BLOCK) {
            int64_t j1 = j0 + SUM_BLOCK < c ? j0 + SUM_BLOCK : c, j = j0;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (; j + 64 <= j1; j += 64) {
                sums_at(xr, g, wd, vmean, vrstd, j, &a0, &b0);
                sums_at(xr, g, wd, vmean, vrstd, j + 16, &a1, &b1);
                sums_at(xr, g, wd, vmean, vrstd, j + 32, &a2, &b2);
                sums_at(xr, g, wd, vmean, vrstd, j + 48, &a3, &b3);
            }
            for (; j < j1; j += 16) sums_at(xr, g, wd, vmean, vrstd, j, &a0, &b0);
            a += lanes4_sum(a0, a1, a2, a3);
            b += lanes4_sum(b0, b1, b2, b3);
        }
    }
    float ma = n ? (float)(a / n) : 0.0f, mb = n ? (float)(b / n) : 0.0f;
    __m512 vma = _mm512_set1_ps(ma), vmb = _mm512_set1_ps(mb);
    for (int64_t j0 = 0; j0 < c; j0 += SUM_BLOCK) {
        int64_t j1 = j0 + SUM_BLOCK < c ? j0 + SUM_BLOCK : c;
        ask_next_rows(nx, ng, j0, j1);
        for (int64_t j = j0; j < j1; j += 16) {
            __m512 gj = _mm512_loadu_ps(g + j);
            __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + j), vmean), vrstd);
            __m512 t = _mm512_fmsub_ps(gj, _mm512_loadu_ps(wd + j), vma); /* g w - ma */
            t = _mm512_mul_ps(vrstd, _mm512_fnmadd_ps(xhat, vmb, t));     /* - xhat mb */
            if (stream)
                _mm512_stream_ps(dxr + j, t);
            else
                _mm512_storeu_ps(dxr + j, t);
            _mm512_storeu_ps(dwd + j, _mm512_fmadd_ps(gj, xhat, _mm512_loadu_ps(dwd + j)));
            _mm512_storeu_ps(dbd + j, _mm512_add_ps(_mm512_loadu_ps(dbd + j), gj));
        }
    }
}

/* all rows, in order (dw and db add them so); sums (2, rows) or NULL */
__attribute__((target("arch=x86-64-v4"))) static void backward_rows_wide(
    const float *x, const float *wd, const float *dy, const float *stats, const float *sums,
    int64_t c, int64_t rows, int64_t n, bool stream, float *dx, float *dwd, float *dbd) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * c, *g = dy + r * c;
        const float *nx = r + 2 < rows ? xr + 2 * c : NULL, *ng = nx ? g + 2 * c : NULL;
        float ab[2], *sums_ab = NULL;
        if (sums) {
            ab[0] = sums[r];
            ab[1] = sums[rows + r];
            sums_ab = ab;
        }
        if (stream)
            backward_row_wide(xr, g, wd, c, stats[r], stats[rows + r], sums_ab, n, true, dx + r * c,
                              dwd, dbd, nx, ng);
        else
            backward_row_wide(xr, g, wd, c, stats[r], stats[rows + r], sums_ab, n, false,
                              dx + r * c, dwd, dbd, nx, ng);
    }
}
#endif

/* The deterministic mode's dw and db: each row's terms, then the tree sums down
 * the rows (cpu_det.c) */
static void det_backward_weights(const mg_tensor *x, const mg_tensor *dy, const mg_tensor *stats,
                                 mg_tensor *dw, mg_tensor *db) {
    int64_t c = last_dim(x), rows = stats->numel / 2;
    if (db) mg_cpu_det_colsum(dy->data, rows, c, c, db->data);
    if (!dw) return;
    float *t = mg_cpu_det_scratch(rows * c);
    if (!t) { /* no message path here: NaN makes the failure visible */
        for (int64_t j = 0; j < c; j++) dw->data[j] = NAN;
        return;
    }
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *xr = x->data + r * c, *g = dy->data + r * c;
        float mean = stats->data[r], rstd = stats->data[rows + r];
        for (int64_t j = 0; j < c; j++) t[r * c + j] = g[j] * ((xr[j] - mean) * rstd);
    });
    mg_cpu_det_colsum(t, rows, c, c, dw->data);
}

MG_CPU_CLONES void mg_cpu_layer_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                              const mg_tensor *dy, const mg_tensor *stats,
                                              const mg_tensor *sums, int64_t n, mg_tensor *dx,
                                              mg_tensor *dw, mg_tensor *db) {
    (void)ctx;
    int64_t c = last_dim(x), rows = stats->numel / 2;
    const float *wd = w ? w->data : NULL;
    if ((dw || db) && mg_backend_ctx()->deterministic) {
        det_backward_weights(x, dy, stats, dw, db);
        if (dx) mg_cpu_layer_norm_backward(ctx, x, w, dy, stats, sums, n, dx, NULL, NULL);
        return;
    }
    if (dw) memset(dw->data, 0, (size_t)dw->numel * sizeof(float));
    if (db) memset(db->data, 0, (size_t)db->numel * sizeof(float));
#ifdef AVX512_KERNELS
    if (dx && wd && dw && db && layer_norm_wide_runs(c)) {
        bool stream = streams(dx);
        backward_rows_wide(x->data, wd, dy->data, stats->data, sums ? sums->data : NULL, c, rows,
                           n, stream, dx->data, dw->data, db->data);
        if (stream) stream_fence();
        return;
    }
#endif
    /* the weight gradients add rows in order: one thread then (the row's values
     * are in cache for both) */
    bool columns = dw || db;
    MG_PAR_FOR(!columns && x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = x->data + r * c, *restrict g = dy->data + r * c;
        float mean = stats->data[r], rstd = stats->data[rows + r];
        float *restrict dwd = dw ? dw->data : NULL, *restrict dbd = db ? db->data : NULL;
        if (dx) {
            double a, b;
            if (sums) {
                a = sums->data[r];
                b = sums->data[rows + r];
            } else {
                backward_row_sums(xr, g, wd, c, mean, rstd, &a, &b);
            }
            if (wd && dwd && dbd) { /* the usual case in one pass: the loads are the work */
                const float *nx = r + 2 < rows ? xr + 2 * c : NULL, *ng = nx ? g + 2 * c : NULL;
                backward_row_all(xr, g, wd, c, mean, rstd, a, b, n, dx->data + r * c, dwd, dbd,
                                 nx, ng);
                continue;
            }
            backward_row_dx(xr, g, wd, c, mean, rstd, a, b, n, dx->data + r * c);
        }
        if (dw && db) {
            for (int64_t j = 0; j < c; j++) {
                dwd[j] += g[j] * ((xr[j] - mean) * rstd);
                dbd[j] += g[j];
            }
        } else if (dw) {
            for (int64_t j = 0; j < c; j++) dwd[j] += g[j] * ((xr[j] - mean) * rstd);
        } else if (db) {
            for (int64_t j = 0; j < c; j++) dbd[j] += g[j];
        }
    });
}
