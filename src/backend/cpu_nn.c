/* cpu_nn.c: the CPU row kernels of the network ops: softmax and log_softmax
 * with their backward, layer norm (statistics of whole or split rows) with its
 * backward, embedding lookup and scatter-add, cross-entropy (whole rows, and a
 * shard of the classes), and GELU with its backward (elementwise). x (R, C) is
 * R rows of the last dim; a row is handled in one piece while it sits in
 * cache, so each kernel reads its inputs from memory once. A row's sums are
 * float sums of blocks of SUM_BLOCK terms (which vectorize) added up in
 * double; the column sums of the layer norm weight gradients add rows in
 * order in float, as PyTorch does. The backward kernels and the layer norm
 * forward write an output too large to stay in cache with streaming stores
 * (AVX-512), in the same bits.
 * Exports the mg_cpu_* functions of cpu_internal.h (contracts in backend.h). */
#include <math.h>
#include <string.h>

#include "backend/cpu_internal.h"

/* Fused multiply-adds where the clone has them (GCC's ISO C mode leaves them
 * off): the exps of these loops wait on their polynomial's latency, which FMA
 * halves (softmax forward: 6.0 -> 4.5 ms on 8192 x 1024). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

/* AVX512_KERNELS: GCC on x86-64, where the AVX-512 versions below are built
 * (target attributes, intrinsics) and picked at run time by CPU; elsewhere
 * the plain versions stand in for them */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define AVX512_KERNELS 1
#include <immintrin.h>
#endif

static int64_t last_dim(const mg_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }
static int64_t rows_of(const mg_tensor *t) {
    int64_t c = last_dim(t);
    return c ? t->numel / c : 0;
}

/* acc (a double) += the sum of TERM over j < n (TERM an expression of j):
 * blocks of SUM_BLOCK terms summed in float, in vector lanes, then added in
 * double, so long rows keep their precision and the loop still vectorizes */
#define SUM_BLOCK 256
#define BLOCK_SUM(acc, j, n, TERM)                                                                 \
    for (int64_t j##_0 = 0; j##_0 < (n); j##_0 += SUM_BLOCK) {                                     \
        int64_t j##_1 = j##_0 + SUM_BLOCK < (n) ? j##_0 + SUM_BLOCK : (n);                         \
        float part_ = 0;                                                                           \
        _Pragma("omp simd reduction(+ : part_)") for (int64_t j = j##_0; j < j##_1; j++) part_ +=  \
            (TERM);                                                                                \
        acc += part_;                                                                              \
    }

MG_CPU_INLINE float row_max(const float *restrict x, int64_t c) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < c; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* out[j] = exp(x[j] - m); returns their sum. `next` (the row after, or NULL)
 * is asked for block by block: the exps run in cache, and the hardware
 * prefetcher only runs ahead of misses, so without it the next row's reads
 * would wait for this row's compute. The exps are the work here, and the sum
 * is in blocks longer than BLOCK_SUM's: the compiler adds a block's vector
 * lanes one by one, which every 256 terms cost the softmax forward 2-4%. */
#define EXP_BLOCK 1024
MG_CPU_INLINE double exp_row(const float *restrict x, int64_t c, float m, float *restrict out,
                             const float *next) {
    double s = 0;
    for (int64_t j0 = 0; j0 < c; j0 += EXP_BLOCK) {
        int64_t j1 = j0 + EXP_BLOCK < c ? j0 + EXP_BLOCK : c;
        if (next)
            for (int64_t j = j0; j < j1; j += 16) __builtin_prefetch(next + j);
        float part = 0;
#pragma omp simd reduction(+ : part)
        for (int64_t j = j0; j < j1; j++) part += (out[j] = mg_cpu_exp(x[j] - m));
        s += part;
    }
    return s;
}

/* exp_row for CPUs with AVX-512, in its order of additions: term j goes to
 * lane j % 16, a float, a block of SUM_BLOCK terms at a time; each block's
 * lanes are added into double lanes, and those at the row's end. No sum
 * across a vector's lanes per block: 8192 x 1024 10% faster than exp_row
 * there. With AVX2 (16 registers) the two vectors of lanes and the exp's
 * constants do not fit, and it was 3-4% slower than exp_row: the caller
 * picks by CPU. yp = prev inv is written in the same loop (prev NULL: not):
 * the loop waits on the exps' latency, and those loads and stores fill it
 * (`mg_cpu_softmax`). */
#ifdef AVX512_KERNELS
static bool exp_row_wide_runs(void) { return __builtin_cpu_supports("x86-64-v4"); }
__attribute__((target("arch=x86-64-v4"))) static double exp_row_wide(
    const float *restrict x, int64_t c, float m, float *restrict out, const float *next,
    const float *restrict prev, float inv, float *restrict yp) {
    double s = 0, lanes_d[16] = {0};
    int64_t cn = c / 16 * 16;
    __m512 vinv = _mm512_set1_ps(inv);
    for (int64_t j0 = 0; j0 < cn; j0 += SUM_BLOCK) {
        int64_t j1 = j0 + SUM_BLOCK < cn ? j0 + SUM_BLOCK : cn;
        if (next)
            for (int64_t j = j0; j < j1; j += 16) __builtin_prefetch(next + j);
        float lanes[16] = {0};
        for (int64_t jb = j0; jb < j1; jb += 16) {
#pragma omp simd
            for (int l = 0; l < 16; l++) lanes[l] += (out[jb + l] = mg_cpu_exp(x[jb + l] - m));
            if (prev)
                _mm512_storeu_ps(yp + jb, _mm512_mul_ps(_mm512_loadu_ps(prev + jb), vinv));
        }
        for (int l = 0; l < 16; l++) lanes_d[l] += lanes[l];
    }
    for (int l = 0; l < 16; l++) s += lanes_d[l];
    for (int64_t j = cn; j < c; j++) s += (out[j] = mg_cpu_exp(x[j] - m));
    if (prev)
        for (int64_t j = cn; j < c; j++) yp[j] = prev[j] * inv;
    return s;
}
#else
static bool exp_row_wide_runs(void) { return false; }
MG_CPU_INLINE double exp_row_wide(const float *restrict x, int64_t c, float m, float *restrict out,
                                  const float *next, const float *restrict prev, float inv,
                                  float *restrict yp) {
    if (prev)
        for (int64_t j = 0; j < c; j++) yp[j] = prev[j] * inv;
    return exp_row(x, c, m, out, next);
}
#endif

/* Streaming stores for the backward kernels' dx. An ordinary store first reads
 * the line it writes (the core must own it), so a kernel that writes one tensor
 * moves it twice. When other tenants load the host's memory, those extra reads
 * are what it waits on: then a plain store loop of 32 MiB runs at 0.66 of
 * memcpy (which writes whole lines without reading them), and the layer norm
 * backward at 0.5 of it. A streaming store writes the line without reading it
 * and without keeping it in cache, so only outputs too large to stay in cache
 * take them: STREAM_MIN bytes, past the share of the last-level cache a core
 * of today's servers can count on (32 MiB shared by 8 cores). 8192 x 1024
 * from memory: the layer norm backward 10-28% faster (the more, the busier
 * the host), the softmax backward 6-13%. The layer norm forward streams its
 * y from the loop that reads the next row (below); streamed after a row's
 * passes it ran 5-10% slower on a quiet host, and the softmax forward 14-33%.
 * AVX-512 only, as `exp_row_wide`; rows 64-byte aligned. */
#define STREAM_MIN ((int64_t)8 << 20)
#ifdef AVX512_KERNELS
static bool streams(const mg_tensor *out) {
    int64_t c = last_dim(out);
    return out->numel * (int64_t)sizeof(float) >= STREAM_MIN && c % 16 == 0 &&
           (uintptr_t)out->data % 64 == 0 && __builtin_cpu_supports("x86-64-v4");
}
/* the streamed lines reach memory before what follows the call reads them */
static void stream_fence(void) { _mm_sfence(); }
#else
static bool streams(const mg_tensor *out) { (void)out; return false; }
static void stream_fence(void) {}
#endif

/* ---- softmax ------------------------------------------------------------------- */

/* With AVX-512, the plain softmax goes in runs of SM_RUN rows (split over the
 * threads), row r's exps into a buffer in L1 in the loop that writes row
 * r - 1's y, its buffer scaled by the inverse of its sum. That takes the
 * place of a pass of its own that scales each row, and the exps' stores
 * find their lines in L1. The same operations, so the same bits. 8192 x
 * 1024 from memory, 48 runs alternating with the kernel that scales each
 * row after its exps (2026-12-03): the forward 10% faster (median, 1-17%;
 * 2.17 ms against 2.43), softmax against the copy 0.76 -> 0.81. The exps
 * written to y and row r - 1 scaled there in place: 5-6% slower than the
 * buffer; streaming y from the buffer: 2-18% slower than no pipeline. Rows
 * longer than SM_ROW_MAX (two buffers on the stack) take the plain kernel. */
#define SM_RUN 64
#define SM_ROW_MAX 4096

MG_CPU_CLONES void mg_cpu_softmax(void *ctx, const mg_tensor *x, const mg_tensor *max,
                                  const mg_tensor *sum, bool as_log, mg_tensor *out) {
    (void)ctx;
    int64_t c = last_dim(x), rows = rows_of(x);
    bool wide = exp_row_wide_runs();
    if (wide && !max && !sum && !as_log && c <= SM_ROW_MAX) {
        int64_t runs = (rows + SM_RUN - 1) / SM_RUN;
#pragma omp parallel for if (x->numel > PAR_MIN) schedule(static)
        for (int64_t k = 0; k < runs; k++) {
            _Alignas(64) float buf[2 * SM_ROW_MAX];
            int64_t r1 = (k + 1) * SM_RUN < rows ? (k + 1) * SM_RUN : rows;
            const float *prev = NULL;
            float inv = 0;
            for (int64_t r = k * SM_RUN; r < r1; r++) {
                const float *xr = x->data + r * c, *next = r + 1 < rows ? xr + c : NULL;
                float *e = buf + (r % 2) * c;
                float *yp = prev ? out->data + (r - 1) * c : NULL;
                double s = exp_row_wide(xr, c, row_max(xr, c), e, next, prev, inv, yp);
                prev = e;
                inv = (float)(1.0 / s);
            }
            float *yl = out->data + (r1 - 1) * c;
            for (int64_t j = 0; j < c; j++) yl[j] = prev[j] * inv;
        }
        return;
    }
#pragma omp parallel for if (x->numel > PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = x->data + r * c;
        float *restrict o = out->data + r * c;
        float m = max ? max->data[r] : row_max(xr, c);
        const float *next = r + 1 < rows ? xr + c : NULL;
        double s = sum ? sum->data[r]
                 : wide ? exp_row_wide(xr, c, m, o, next, NULL, 0, NULL)
                        : exp_row(xr, c, m, o, next);
        if (as_log) { /* (x - m) first: exact where x and m are close */
            float ls = (float)log(s);
            for (int64_t j = 0; j < c; j++) o[j] = (xr[j] - m) - ls;
        } else if (sum) {
            float inv = (float)(1.0 / s);
            for (int64_t j = 0; j < c; j++) o[j] = mg_cpu_exp(xr[j] - m) * inv;
        } else {
            float inv = (float)(1.0 / s);
            for (int64_t j = 0; j < c; j++) o[j] *= inv;
        }
    }
}

MG_CPU_CLONES void mg_cpu_softmax_sum(void *ctx, const mg_tensor *x, const mg_tensor *max,
                                      mg_tensor *sum) {
    (void)ctx;
    int64_t c = last_dim(x), rows = sum->numel;
#pragma omp parallel for if (x->numel > PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = x->data + r * c;
        float m = max->data[r];
        double s = 0;
        BLOCK_SUM(s, j, c, mg_cpu_exp(xr[j] - m))
        sum->data[r] = (float)s;
    }
}

MG_CPU_INLINE double dot_row(const float *restrict y, const float *restrict dy, int64_t c,
                             bool as_log) {
    double s = 0;
    if (as_log)
        BLOCK_SUM(s, j, c, dy[j])
    else
        BLOCK_SUM(s, j, c, dy[j] * y[j])
    return s;
}

MG_CPU_CLONES void mg_cpu_softmax_dot(void *ctx, const mg_tensor *y, const mg_tensor *dy,
                                      bool as_log, mg_tensor *dot) {
    (void)ctx;
    int64_t c = last_dim(y), rows = dot->numel;
#pragma omp parallel for if (y->numel > PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        dot->data[r] = (float)dot_row(y->data + r * c, dy->data + r * c, c, as_log);
}

/* o = y (g - d) with streaming stores, c a multiple of 16, o 64-byte aligned */
#ifdef AVX512_KERNELS
__attribute__((target("arch=x86-64-v4"))) static void softmax_dx_streamed(
    const float *restrict yr, const float *restrict g, float d, int64_t c, float *restrict o) {
    __m512 vd = _mm512_set1_ps(d);
    for (int64_t j = 0; j < c; j += 16)
        _mm512_stream_ps(o + j, _mm512_mul_ps(_mm512_loadu_ps(yr + j),
                                              _mm512_sub_ps(_mm512_loadu_ps(g + j), vd)));
}
#else
MG_CPU_INLINE void softmax_dx_streamed(const float *restrict yr, const float *restrict g, float d,
                                       int64_t c, float *restrict o) {
    for (int64_t j = 0; j < c; j++) o[j] = yr[j] * (g[j] - d);
}
#endif

MG_CPU_CLONES void mg_cpu_softmax_backward(void *ctx, const mg_tensor *y, const mg_tensor *dy,
                                           const mg_tensor *dot, bool as_log, mg_tensor *dx) {
    (void)ctx;
    int64_t c = last_dim(y), rows = rows_of(y);
    bool stream = !as_log && streams(dx);
#pragma omp parallel if (y->numel > PAR_MIN)
    {
#pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < rows; r++) {
            const float *restrict yr = y->data + r * c, *restrict g = dy->data + r * c;
            float *restrict o = dx->data + r * c;
            float d = dot ? dot->data[r] : (float)dot_row(yr, g, c, as_log);
            if (as_log)
                for (int64_t j = 0; j < c; j++) o[j] = g[j] - mg_cpu_exp(yr[j]) * d;
            else if (stream)
                softmax_dx_streamed(yr, g, d, c, o);
            else
                for (int64_t j = 0; j < c; j++) o[j] = yr[j] * (g[j] - d);
        }
        if (stream) stream_fence();
    }
}

/* ---- layer norm ------------------------------------------------------------------ */

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
 * is written with streaming stores (`streams`). 8192 x 1024 from memory, 106
 * runs alternating with the plain kernel (2026-12-03): the forward 4.5%
 * faster (median), the backward after it 3% (it no longer evicts y's dirty
 * lines); layer norm against the copy 0.89 -> 0.92 (median), at its lowest
 * 0.57 -> 0.70. Asking for lines ahead of the loop's reads made it slower.
 * Every row's sum is taken in the same order, whether read alone (a run's
 * first row) or in the loop (the others), and the stores do not change the
 * values: the same bits at every size, alignment and number of threads. */
#ifdef AVX512_KERNELS
#define LN_RUN 64
static bool layer_norm_wide_runs(int64_t c) {
    return c > 0 && c % 16 == 0 && __builtin_cpu_supports("x86-64-v4");
}

/* the sum of a row's c terms: 16 float lanes over each block of SUM_BLOCK,
 * the lanes added into a double at the block's end */
__attribute__((target("arch=x86-64-v4"))) static double row_sum_wide(const float *restrict x,
                                                                     int64_t c) {
    double s = 0;
    for (int64_t j0 = 0; j0 < c; j0 += SUM_BLOCK) {
        int64_t j1 = j0 + SUM_BLOCK < c ? j0 + SUM_BLOCK : c;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = j0; j < j1; j += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + j));
        s += _mm512_reduce_add_ps(acc);
    }
    return s;
}

/* y = (x - mean) rstd w + b of one row, while row_sum_wide(nx) is taken;
 * returns it. stream: yr 64-byte aligned, written with streaming stores */
__attribute__((target("arch=x86-64-v4"), always_inline)) static inline double row_out_wide(
    const float *restrict xr, const float *restrict wd, const float *restrict bd, int64_t c,
    float mean, float rstd, const float *restrict nx, bool stream, float *restrict yr) {
    __m512 vmean = _mm512_set1_ps(mean), vrstd = _mm512_set1_ps(rstd);
    double s = 0;
    for (int64_t j0 = 0; j0 < c; j0 += SUM_BLOCK) {
        int64_t j1 = j0 + SUM_BLOCK < c ? j0 + SUM_BLOCK : c;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = j0; j < j1; j += 16) {
            acc = _mm512_add_ps(acc, _mm512_loadu_ps(nx + j));
            __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + j), vmean), vrstd);
            __m512 v = _mm512_fmadd_ps(xhat, _mm512_loadu_ps(wd + j), _mm512_loadu_ps(bd + j));
            if (stream)
                _mm512_stream_ps(yr + j, v);
            else
                _mm512_storeu_ps(yr + j, v);
        }
        s += _mm512_reduce_add_ps(acc);
    }
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
        float rstd = (float)(1.0 / sqrt(row_squares(xr, c, mean) / c + eps));
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
#pragma omp parallel if (x->numel > PAR_MIN)
        {
#pragma omp for schedule(static) nowait
            for (int64_t k = 0; k < runs; k++) {
                int64_t r0 = k * LN_RUN, r1 = r0 + LN_RUN < rows ? r0 + LN_RUN : rows;
                layer_norm_run_wide(x->data, wd, bd, eps, c, rows, r0, r1, stream, stats->data,
                                    y->data);
            }
            if (stream) stream_fence();
        }
        return;
    }
#endif
#pragma omp parallel for if (x->numel > PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = x->data + r * c;
        float *restrict yr = y->data + r * c;
        float mean, rstd;
        if (moments) {
            mean = moments->data[r];
            rstd = (float)(1.0 / sqrt(moments->data[rows + r] / (double)n + eps));
        } else {
            mean = c ? (float)(row_sum(xr, c) / c) : 0.0f;
            /* the rest of the row runs from cache: ask for the next row now
             * (8192 x 1024: 10-17% faster, both kernels in one program) */
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
    }
}

MG_CPU_CLONES void mg_cpu_layer_norm_moments(void *ctx, const mg_tensor *x, const mg_tensor *mean,
                                             mg_tensor *out) {
    (void)ctx;
    int64_t c = last_dim(x), rows = out->numel;
#pragma omp parallel for if (x->numel > PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x->data + r * c;
        out->data[r] = (float)(mean ? row_squares(xr, c, mean->data[r]) : row_sum(xr, c));
    }
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
#pragma omp parallel for if (x->numel > PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        double a, b;
        backward_row_sums(x->data + r * c, dy->data + r * c, w ? w->data : NULL, c, stats->data[r],
                          stats->data[rows + r], &a, &b);
        sums->data[r] = (float)a;
        sums->data[rows + r] = (float)b;
    }
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

/* ask for columns [j0, j1) of the next row's x and dy (nx NULL: no next row) */
MG_CPU_INLINE void ask_next_rows(const float *nx, const float *ng, int64_t j0, int64_t j1) {
    if (nx)
        for (int64_t j = j0; j < j1; j += 16) {
            __builtin_prefetch(nx + j);
            __builtin_prefetch(ng + j);
        }
}

/* backward_row_dx with the row's terms of dw and db added in the same pass.
 * This pass runs from cache while the memory would idle: the next row's x
 * and dy (nx, ng; NULL for the last row) are asked for a block at a time
 * (8192 x 1024: 5-16% faster, both kernels in one program, alternating) */
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

/* backward_row_all with dx written by streaming stores, in its operations
 * (the same bits): c a multiple of 16, dxr 64-byte aligned */
#ifdef AVX512_KERNELS
__attribute__((target("arch=x86-64-v4"))) static void backward_row_streamed(
    const float *restrict xr, const float *restrict g, const float *restrict wd, int64_t c,
    float mean, float rstd, double a, double b, int64_t n, float *restrict dxr, float *restrict dwd,
    float *restrict dbd, const float *nx, const float *ng) {
    float ma = n ? (float)(a / n) : 0.0f, mb = n ? (float)(b / n) : 0.0f;
    __m512 vmean = _mm512_set1_ps(mean), vrstd = _mm512_set1_ps(rstd);
    __m512 vma = _mm512_set1_ps(ma), vmb = _mm512_set1_ps(mb);
    for (int64_t j0 = 0; j0 < c; j0 += SUM_BLOCK) {
        int64_t j1 = j0 + SUM_BLOCK < c ? j0 + SUM_BLOCK : c;
        ask_next_rows(nx, ng, j0, j1);
        for (int64_t j = j0; j < j1; j += 16) {
            __m512 gj = _mm512_loadu_ps(g + j);
            __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + j), vmean), vrstd);
            __m512 t = _mm512_fmsub_ps(gj, _mm512_loadu_ps(wd + j), vma); /* g w - ma */
            t = _mm512_fnmadd_ps(xhat, vmb, t);                            /* - xhat mb */
            _mm512_stream_ps(dxr + j, _mm512_mul_ps(vrstd, t));
            _mm512_storeu_ps(dwd + j, _mm512_fmadd_ps(gj, xhat, _mm512_loadu_ps(dwd + j)));
            _mm512_storeu_ps(dbd + j, _mm512_add_ps(_mm512_loadu_ps(dbd + j), gj));
        }
    }
}
#else
#define backward_row_streamed backward_row_all
#endif

MG_CPU_CLONES void mg_cpu_layer_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                              const mg_tensor *dy, const mg_tensor *stats,
                                              const mg_tensor *sums, int64_t n, mg_tensor *dx,
                                              mg_tensor *dw, mg_tensor *db) {
    (void)ctx;
    int64_t c = last_dim(x), rows = stats->numel / 2;
    const float *wd = w ? w->data : NULL;
    if (dw) memset(dw->data, 0, (size_t)dw->numel * sizeof(float));
    if (db) memset(db->data, 0, (size_t)db->numel * sizeof(float));
    /* the weight gradients add rows in order: one thread then (the row's values
     * are in cache for both) */
    bool columns = dw || db;
    /* streamed only on this one thread, which then fences */
    bool stream = dx && wd && dw && db && streams(dx);
#pragma omp parallel for if (!columns && x->numel > PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
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
                const float *nx = r + 1 < rows ? xr + c : NULL, *ng = nx ? g + c : NULL;
                if (stream)
                    backward_row_streamed(xr, g, wd, c, mean, rstd, a, b, n, dx->data + r * c,
                                          dwd, dbd, nx, ng);
                else
                    backward_row_all(xr, g, wd, c, mean, rstd, a, b, n, dx->data + r * c, dwd,
                                     dbd, nx, ng);
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
    }
    if (stream) stream_fence();
}

/* ---- embedding ------------------------------------------------------------------- */

/* row index of an id, or -1 when it is not an integer in [0, v) */
static inline int64_t index_of(float id, int64_t v) {
    if (!(id >= 0.0f) || id >= (float)v || id != floorf(id)) return -1;
    return (int64_t)id;
}

int64_t mg_cpu_embedding(void *ctx, const mg_tensor *ids, const mg_tensor *table, int64_t v0,
                         int64_t v, mg_tensor *out) {
    (void)ctx;
    int64_t c = last_dim(out), vl = c ? table->numel / c : table->shape[0], bad = 0;
#pragma omp parallel for if (out->numel > PAR_MIN) reduction(+ : bad) schedule(static)
    for (int64_t i = 0; i < ids->numel; i++) {
        int64_t row = index_of(ids->data[i], v);
        float *o = out->data + i * c;
        bad += row < 0;
        if (row >= v0 && row < v0 + vl)
            memcpy(o, table->data + (row - v0) * c, (size_t)c * sizeof(float));
        else
            memset(o, 0, (size_t)c * sizeof(float));
    }
    return bad;
}

void mg_cpu_embedding_backward(void *ctx, const mg_tensor *ids, const mg_tensor *dout, int64_t v0,
                               mg_tensor *dtable) {
    (void)ctx;
    int64_t c = last_dim(dtable), vl = dtable->ndim ? dtable->shape[0] : 0;
    memset(dtable->data, 0, (size_t)dtable->numel * sizeof(float));
    for (int64_t i = 0; i < ids->numel; i++) { /* in order: the sums repeat bitwise */
        int64_t row = index_of(ids->data[i], v0 + vl);
        if (row < v0) continue;
        float *restrict t = dtable->data + (row - v0) * c;
        const float *restrict g = dout->data + i * c;
        for (int64_t j = 0; j < c; j++) t[j] += g[j];
    }
}

/* ---- cross-entropy ------------------------------------------------------------------ */

/* max and log(sum(exp(x - max))) of one row of C, both vectorized: a NaN
 * among the logits makes the sum, so the loss and every gradient, NaN, as in
 * torch (glibc's expf, a call per element, was 2.5% of a GPT step) */
MG_CPU_INLINE void row_logsumexp(const float *restrict x, int64_t c, float *max_out,
                                 float *lse_out) {
    float m = row_max(x, c);
    double s = 0;
    BLOCK_SUM(s, j, c, mg_cpu_exp(x[j] - m))
    *max_out = m;
    *lse_out = (float)log(s);
}

MG_CPU_CLONES int64_t mg_cpu_cross_entropy(void *ctx, const mg_tensor *logits,
                                           const mg_tensor *labels, float scale, mg_tensor *out) {
    (void)ctx;
    int64_t c = last_dim(logits);
    int64_t rows = c ? logits->numel / c : labels->numel;
    const float *xd = logits->data, *ld = labels->data;
    double loss = 0;
    int64_t bad = 0;
#pragma omp parallel for if (logits->numel > PAR_MIN) reduction(+ : loss, bad) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = index_of(ld[r], c);
        if (y < 0) {
            bad++;
            continue;
        }
        float m, lse;
        row_logsumexp(xd + r * c, c, &m, &lse);
        loss -= (double)(xd[r * c + y] - m - lse);
    }
    out->data[0] = (float)(scale * loss);
    return bad;
}

MG_CPU_CLONES int64_t mg_cpu_cross_entropy_sums(void *ctx, const mg_tensor *logits,
                                                const mg_tensor *labels, const mg_tensor *max,
                                                int64_t v0, int64_t v, mg_tensor *sums) {
    (void)ctx;
    int64_t c = last_dim(logits), rows = labels->numel, bad = 0;
#pragma omp parallel for if (logits->numel > PAR_MIN) reduction(+ : bad) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = logits->data + r * c;
        int64_t y = index_of(labels->data[r], v);
        float m = max->data[r];
        double s = 0;
        BLOCK_SUM(s, j, c, mg_cpu_exp(xr[j] - m))
        sums->data[r] = (float)s;
        sums->data[rows + r] = y >= v0 && y < v0 + c ? xr[y - v0] : 0.0f;
        bad += y < 0;
    }
    return bad;
}

MG_CPU_CLONES void mg_cpu_cross_entropy_backward(void *ctx, const mg_tensor *logits,
                                                 const mg_tensor *labels, const mg_tensor *lse,
                                                 int64_t v0, int64_t v, float scale,
                                                 mg_tensor *dlogits) {
    (void)ctx;
    int64_t c = last_dim(logits);
    if (c == 0 || logits->numel == 0) return;
    int64_t rows = logits->numel / c;
    const float *xd = logits->data, *ld = labels->data;
    float *gd = dlogits->data;
#pragma omp parallel for if (logits->numel > PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *x = xd + r * c;
        float *g = gd + r * c;
        int64_t y = index_of(ld[r], v);
        if (y < 0) {
            for (int64_t j = 0; j < c; j++) g[j] = 0.0f;
            continue;
        }
        if (lse) { /* a shard of the classes, the row's log-sum-exp given */
            float l = lse->data[r];
            for (int64_t j = 0; j < c; j++) g[j] = scale * mg_cpu_exp(x[j] - l);
            if (y >= v0 && y < v0 + c) g[y - v0] -= scale;
            continue;
        }
        float m, l;
        row_logsumexp(x, c, &m, &l);
        for (int64_t j = 0; j < c; j++) g[j] = scale * mg_cpu_exp(x[j] - m - l);
        g[y] -= scale;
    }
}

/* ---- GELU (tanh approximation) --------------------------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* tanh(K (x + C x^3)) as 1 - 2 / (exp(2u) + 1): the vectorizable exp instead of
 * glibc's tanhf, a call per element that took a third of a GPT step. Saturates
 * to +-1 where exp overflows or underflows; NaN stays NaN. */
MG_CPU_INLINE float gelu_tanh(float x) {
    float u = GELU_K * (x + GELU_C * x * x * x);
    return 1.0f - 2.0f / (mg_cpu_exp(2.0f * u) + 1.0f);
}

MG_CPU_CLONES void mg_cpu_gelu(const float *restrict x, float *restrict out, int64_t n) {
    int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i1 = (c + 1) * CHUNK < n ? (c + 1) * CHUNK : n;
#pragma omp simd
        for (int64_t i = c * CHUNK; i < i1; i++) out[i] = 0.5f * x[i] * (1.0f + gelu_tanh(x[i]));
    }
}

MG_CPU_CLONES void mg_cpu_gelu_backward(const float *restrict dy, const float *restrict x,
                                        float *restrict dx, int64_t n) {
    int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for if (n > PAR_MIN) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i1 = (c + 1) * CHUNK < n ? (c + 1) * CHUNK : n;
#pragma omp simd
        for (int64_t i = c * CHUNK; i < i1; i++) {
            float v = x[i], t = gelu_tanh(v), v2 = v * v;
            float g = 0.5f * (1.0f + t) +
                      0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * v2);
            dx[i] = dy[i] * g;
        }
    }
}
