/* cpu_nn.c: the CPU row kernels of the network ops but layer norm
 * (cpu_layer_norm.c): softmax and log_softmax with their backward, embedding
 * lookup and scatter-add, cross-entropy (whole rows, and a shard of the
 * classes), and GELU and SiLU with their backwards (elementwise). x (R, C)
 * is R rows of the last dim; a row is handled in one piece while it sits in cache, so
 * each kernel reads its inputs from memory once. A row's sums are float sums
 * of blocks of SUM_BLOCK terms (which vectorize) added up in double. The
 * softmax forward and backward write an output too large to stay in cache
 * with streaming stores (AVX-512), in the same bits.
 * Exports the mg_cpu_* functions of cpu_kernels.h (contracts in backend.h)
 * but the layer norm kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_state.h"
#include "backend/cpu_rows.h"
#include "parallel.h"

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
 * lanes one by one, which every 256 terms cost the softmax forward time. */
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

/* exp_row for CPUs with AVX-512, its exps mg_cpu_exp16's (cpu_exp16.h:
 * fewer cycles a vector than mg_cpu_exp's), in its own order of additions:
 * term j goes to lane j % 16, a float, a block of SUM_BLOCK terms at a time;
 * each block's lanes are added into double lanes, those at the row's end,
 * and then the last c % 16 terms. No sum across a vector's lanes per block,
 * which made it faster than exp_row there. With AVX2 (16 registers) the two
 * vectors of lanes and the exp's constants do not fit, and it was slower
 * than exp_row: the caller picks by CPU. yp = prev inv is written in the same
 * loop (prev NULL: not): the loop waits on the exps' latency, and those loads
 * and stores fill it (`mg_cpu_softmax`). */
#ifdef AVX512_KERNELS
static bool exp_row_wide_runs(void) { return mg_cpu_isa() >= MG_ISA_AVX512; }
__attribute__((target("arch=x86-64-v4"))) static double exp_row_wide(
    const float *restrict x, int64_t c, float m, float *restrict out, const float *next,
    const float *restrict prev, float inv, bool stream, float *restrict yp) {
    double s = 0, lanes_d[16] = {0};
    int64_t cn = c / 16 * 16;
    __m512 vinv = _mm512_set1_ps(inv), vm = _mm512_set1_ps(m);
    for (int64_t j0 = 0; j0 < cn; j0 += SUM_BLOCK) {
        int64_t j1 = j0 + SUM_BLOCK < cn ? j0 + SUM_BLOCK : cn;
        if (next)
            for (int64_t j = j0; j < j1; j += 16) __builtin_prefetch(next + j);
        __m512 lanes = _mm512_setzero_ps();
        for (int64_t jb = j0; jb < j1; jb += 16) {
            __m512 e = mg_cpu_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + jb), vm));
            _mm512_storeu_ps(out + jb, e);
            lanes = _mm512_add_ps(lanes, e);
            if (prev && stream)
                _mm512_stream_ps(yp + jb, _mm512_mul_ps(_mm512_loadu_ps(prev + jb), vinv));
            else if (prev)
                _mm512_storeu_ps(yp + jb, _mm512_mul_ps(_mm512_loadu_ps(prev + jb), vinv));
        }
        float part[16];
        _mm512_storeu_ps(part, lanes);
        for (int l = 0; l < 16; l++) lanes_d[l] += part[l];
    }
    for (int l = 0; l < 16; l++) s += lanes_d[l];
    if (cn < c) { /* the last c % 16 terms, in the same exp */
        __mmask16 tail = (__mmask16)((1u << (c - cn)) - 1);
        __m512 e = mg_cpu_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + cn), vm));
        _mm512_mask_storeu_ps(out + cn, tail, e);
        for (int64_t j = cn; j < c; j++) s += out[j];
    }
    if (prev)
        for (int64_t j = cn; j < c; j++) yp[j] = prev[j] * inv;
    return s;
}

/* row_max in four vectors of lanes: one was a chain of c / 16 maxes, each
 * waiting on the last, from memory and from cache alike. The max of a set of floats is one of them
 * whatever the order, NaN skipped as there: the same value. */
__attribute__((target("arch=x86-64-v4"))) static float row_max_wide(const float *restrict x,
                                                                    int64_t c) {
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    int64_t cn = c / 16 * 16, j = 0;
    for (; j + 64 <= cn; j += 64) { /* max_ps(x, m): m where x is NaN */
        m0 = _mm512_max_ps(_mm512_loadu_ps(x + j), m0);
        m1 = _mm512_max_ps(_mm512_loadu_ps(x + j + 16), m1);
        m2 = _mm512_max_ps(_mm512_loadu_ps(x + j + 32), m2);
        m3 = _mm512_max_ps(_mm512_loadu_ps(x + j + 48), m3);
    }
    for (; j < cn; j += 16) m0 = _mm512_max_ps(_mm512_loadu_ps(x + j), m0);
    float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
    for (; j < c; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* y = e inv, streamed: c a multiple of 16, y 64-byte aligned */
__attribute__((target("arch=x86-64-v4"))) static void scale_row_streamed(
    const float *restrict e, float inv, int64_t c, float *restrict y) {
    __m512 vinv = _mm512_set1_ps(inv);
    for (int64_t j = 0; j < c; j += 16)
        _mm512_stream_ps(y + j, _mm512_mul_ps(_mm512_loadu_ps(e + j), vinv));
}
#else
static bool exp_row_wide_runs(void) { return false; }
MG_CPU_INLINE float row_max_wide(const float *restrict x, int64_t c) { return row_max(x, c); }
MG_CPU_INLINE double exp_row_wide(const float *restrict x, int64_t c, float m, float *restrict out,
                                  const float *next, const float *restrict prev, float inv,
                                  bool stream, float *restrict yp) {
    (void)stream;
    if (prev)
        for (int64_t j = 0; j < c; j++) yp[j] = prev[j] * inv;
    return exp_row(x, c, m, out, next);
}
MG_CPU_INLINE void scale_row_streamed(const float *restrict e, float inv, int64_t c,
                                      float *restrict y) {
    for (int64_t j = 0; j < c; j++) y[j] = e[j] * inv;
}
#endif

/* ---- softmax ------------------------------------------------------------------- */

/* With AVX-512, the plain softmax goes in runs of SM_RUN rows (split over the
 * threads), row r's exps into a buffer in L1 in the loop that writes row
 * r - 1's y, its buffer scaled by the inverse of its sum. That takes the
 * place of a pass of its own that scales each row, and the exps' stores
 * find their lines in L1. The same operations, so the same bits. (The exps
 * written to y and row r - 1 scaled there in place, without the buffer,
 * were slower.) A y too large to stay in cache is streamed from the buffer
 * (`streams`): with mg_cpu_exp16's exps that is faster, and it spares the
 * backward after it the eviction of y's dirty lines. Each row's exps ask for
 * the row after next, which beat the next row (the backward asking the same
 * way was slower, so it does not). Rows longer than SM_ROW_MAX (two buffers
 * on the stack) take the plain kernel. Figures: docs/PERFORMANCE.md
 * "Transformer kernels". */
#define SM_RUN 64
#define SM_ROW_MAX 4096

MG_CPU_CLONES void mg_cpu_softmax(void *ctx, const mg_tensor *x, const mg_tensor *max,
                                  const mg_tensor *sum, bool as_log, mg_tensor *out) {
    (void)ctx;
    int64_t c = last_dim(x), rows = rows_of(x);
    bool wide = exp_row_wide_runs();
    if (wide && !max && !sum && !as_log && c <= SM_ROW_MAX) {
        int64_t runs = (rows + SM_RUN - 1) / SM_RUN;
        bool stream = streams(out);
        MG_PAR_REGION(x->numel > PAR_MIN,
            _Pragma("omp for schedule(static) nowait")
            for (int64_t k = 0; k < runs; k++) {
                _Alignas(64) float buf[2 * SM_ROW_MAX];
                int64_t r1 = (k + 1) * SM_RUN < rows ? (k + 1) * SM_RUN : rows;
                const float *prev = NULL;
                float inv = 0;
                for (int64_t r = k * SM_RUN; r < r1; r++) {
                    /* the row after next is asked for: the next one's was, in this
                     * row's exps, and is read by its max pass */
                    const float *xr = x->data + r * c;
                    const float *next = r + 2 < rows ? xr + 2 * c : NULL;
                    float *e = buf + (r % 2) * c;
                    float *yp = prev ? out->data + (r - 1) * c : NULL;
                    float m = row_max_wide(xr, c);
                    double s = exp_row_wide(xr, c, m, e, next, prev, inv, stream, yp);
                    prev = e;
                    inv = (float)(1.0 / s);
                }
                float *yl = out->data + (r1 - 1) * c;
                if (stream)
                    scale_row_streamed(prev, inv, c, yl);
                else
                    for (int64_t j = 0; j < c; j++) yl[j] = prev[j] * inv;
            }
            if (stream) stream_fence();
        );
        return;
    }
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = x->data + r * c;
        float *restrict o = out->data + r * c;
        float m = max ? max->data[r] : wide ? row_max_wide(xr, c) : row_max(xr, c);
        const float *next = r + 1 < rows ? xr + c : NULL;
        double s = sum ? sum->data[r]
                 : wide ? exp_row_wide(xr, c, m, o, next, NULL, 0, false, NULL)
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
    });
}

MG_CPU_CLONES void mg_cpu_softmax_sum(void *ctx, const mg_tensor *x, const mg_tensor *max,
                                      mg_tensor *sum) {
    (void)ctx;
    int64_t c = last_dim(x), rows = sum->numel;
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = x->data + r * c;
        float m = max->data[r];
        double s = 0;
        BLOCK_SUM(s, j, c, mg_cpu_exp(xr[j] - m))
        sum->data[r] = (float)s;
    });
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
    MG_PAR_FOR(y->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++)
        dot->data[r] = (float)dot_row(y->data + r * c, dy->data + r * c, c, as_log););
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
    MG_PAR_REGION(y->numel > PAR_MIN,
        _Pragma("omp for schedule(static) nowait")
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
    );
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
    MG_PAR_FOR_SUM(out->numel > PAR_MIN, (bad), for (int64_t i = 0; i < ids->numel; i++) {
        int64_t row = index_of(ids->data[i], v);
        float *o = out->data + i * c;
        bad += row < 0;
        if (row >= v0 && row < v0 + vl)
            memcpy(o, table->data + (row - v0) * c, (size_t)c * sizeof(float));
        else
            memset(o, 0, (size_t)c * sizeof(float));
    });
    return bad;
}

/* The deterministic mode's dtable: the ids' rows in the halving tree of
 * cpu_det.c, a leaf adding its rows in order into a whole table (a table row
 * no id of the leaf names is +0 there), the leaves' tables merged by the
 * binary counter. 1 when out of memory. */
static int embedding_backward_det(const mg_tensor *ids, const mg_tensor *dout, int64_t v0,
                                  mg_tensor *dtable) {
    int64_t c = last_dim(dtable), vl = dtable->ndim ? dtable->shape[0] : 0, size = vl * c;
    int64_t n = ids->numel, leaf = mg_det_leaf(n), blocks = n / leaf;
    int levels = 1;
    while ((1LL << (levels - 1)) < blocks) levels++;
    float *mem = mg_cpu_det_scratch((levels + 1) * (size > 0 ? size : 1));
    if (!mem) return 1;
    float *cur = mem + (int64_t)levels * size;
    for (int64_t b = 0; b < blocks; b++) {
        memset(cur, 0, (size_t)size * sizeof(float));
        for (int64_t i = b * leaf; i < (b + 1) * leaf; i++) {
            int64_t row = index_of(ids->data[i], v0 + vl);
            if (row < v0) continue;
            float *restrict t = cur + (row - v0) * c;
            const float *restrict g = dout->data + i * c;
            for (int64_t j = 0; j < c; j++) t[j] += g[j];
        }
        int l = 0;
        for (; b >> l & 1; l++) {
            const float *restrict s = mem + (int64_t)l * size;
            for (int64_t j = 0; j < size; j++) cur[j] += s[j];
        }
        memcpy(mem + (int64_t)l * size, cur, (size_t)size * sizeof(float));
    }
    memcpy(dtable->data, mem + (int64_t)(levels - 1) * size, (size_t)size * sizeof(float));
    return 0;
}

void mg_cpu_embedding_backward(void *ctx, const mg_tensor *ids, const mg_tensor *dout, int64_t v0,
                               mg_tensor *dtable) {
    (void)ctx;
    int64_t c = last_dim(dtable), vl = dtable->ndim ? dtable->shape[0] : 0;
    if (mg_backend_ctx()->deterministic && ids->numel > 0) {
        if (embedding_backward_det(ids, dout, v0, dtable) == 0) return;
        for (int64_t j = 0; j < dtable->numel; j++) dtable->data[j] = NAN; /* out of memory */
        return;
    }
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
 * torch (glibc's expf, a call per element, showed in a GPT step's profile) */
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
    MG_PAR_FOR_SUM(logits->numel > PAR_MIN, (loss, bad), for (int64_t r = 0; r < rows; r++) {
        int64_t y = index_of(ld[r], c);
        if (y < 0) {
            bad++;
            continue;
        }
        float m, lse;
        row_logsumexp(xd + r * c, c, &m, &lse);
        loss -= (double)(xd[r * c + y] - m - lse);
    });
    out->data[0] = (float)(scale * loss);
    return bad;
}

MG_CPU_CLONES int64_t mg_cpu_cross_entropy_sums(void *ctx, const mg_tensor *logits,
                                                const mg_tensor *labels, const mg_tensor *max,
                                                int64_t v0, int64_t v, mg_tensor *sums) {
    (void)ctx;
    int64_t c = last_dim(logits), rows = labels->numel, bad = 0;
    MG_PAR_FOR_SUM(logits->numel > PAR_MIN, (bad), for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = logits->data + r * c;
        int64_t y = index_of(labels->data[r], v);
        float m = max->data[r];
        double s = 0;
        BLOCK_SUM(s, j, c, mg_cpu_exp(xr[j] - m))
        sums->data[r] = (float)s;
        sums->data[rows + r] = y >= v0 && y < v0 + c ? xr[y - v0] : 0.0f;
        bad += y < 0;
    });
    return bad;
}

int64_t mg_cpu_cross_entropy_fixed(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *max, int64_t v0, int64_t v, int64_t *fixed,
                                   float *target) {
    (void)ctx;
    int64_t c = last_dim(logits), rows = labels->numel, bad = 0;
    MG_PAR_FOR_SUM(logits->numel > PAR_MIN, (bad), for (int64_t r = 0; r < rows; r++) {
        const float *xr = logits->data + r * c;
        int64_t y = index_of(labels->data[r], v), q = 0;
        float m = max->data[r];
        const float unit = (float)(1LL << MG_CE_FIXED_BITS); /* exp <= 1: below 2^40, exactly */
        for (int64_t j = 0; j < c; j++) q += (int64_t)(mg_cpu_exp(xr[j] - m) * unit);
        fixed[r] = q;
        target[r] = y >= v0 && y < v0 + c ? xr[y - v0] : 0.0f;
        bad += y < 0;
    });
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
    MG_PAR_FOR(logits->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
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
    });
}

/* ---- GELU (tanh approximation) --------------------------------------------------- */

/* tanh(u) of kernel_math.h's GELU as 1 - 2 / (exp(2u) + 1): the vectorizable
 * exp instead of glibc's tanhf, a call per element that took a third of a GPT
 * step. Saturates to +-1 where exp overflows or underflows; NaN stays NaN. */
MG_CPU_INLINE float gelu_tanh(float x) {
    float u = mg_kernel_gelu_arg(x);
    return 1.0f - 2.0f / (mg_cpu_exp(2.0f * u) + 1.0f);
}

/* for (int64_t i = 0; i < n; i++) body, as `omp simd` loops over chunks of
 * CHUNK that the threads share when n is worth it */
#define SIMD_CHUNKS(n, i, ...)                                                           \
    MG_PAR_FOR(n > PAR_MIN, for (int64_t c_ = 0; c_ < ((n) + CHUNK - 1) / CHUNK; c_++) { \
        int64_t end_ = (c_ + 1) * CHUNK < (n) ? (c_ + 1) * CHUNK : (n);                  \
        _Pragma("omp simd") for (int64_t i = c_ * CHUNK; i < end_; i++) __VA_ARGS__     \
    })

MG_CPU_CLONES void mg_cpu_gelu(const float *restrict x, float *restrict out, int64_t n) {
    SIMD_CHUNKS(n, i, out[i] = mg_kernel_gelu_of(x[i], gelu_tanh(x[i])););
}

MG_CPU_CLONES void mg_cpu_gelu_backward(const float *restrict dy, const float *restrict x,
                                        float *restrict dx, int64_t n) {
    SIMD_CHUNKS(n, i, dx[i] = dy[i] * mg_kernel_gelu_grad_of(x[i], gelu_tanh(x[i])););
}

/* ---- SiLU ------------------------------------------------------------------------- */

/* sigmoid(x) with the vectorizable exp instead of glibc's expf, a call per
 * element that took a tenth of a Llama step: e = exp(-|x|) never overflows,
 * and sigmoid is 1 / (1 + e) for x >= 0, e / (1 + e) below. It goes to 0
 * below -88 (mg_cpu_exp's bound), so silu(-inf) is NaN as torch's; NaN stays
 * NaN. */
MG_CPU_INLINE float silu_sigmoid(float x) {
    float e = mg_cpu_exp(-fabsf(x)), r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

MG_CPU_CLONES void mg_cpu_silu(const float *restrict x, float *restrict out, int64_t n) {
    SIMD_CHUNKS(n, i, out[i] = x[i] * silu_sigmoid(x[i]););
}

MG_CPU_CLONES void mg_cpu_silu_backward(const float *restrict dy, const float *restrict x,
                                        float *restrict dx, int64_t n) {
    SIMD_CHUNKS(n, i, dx[i] = dy[i] * mg_kernel_silu_grad_of(x[i], silu_sigmoid(x[i])););
}
