/* cpu.c: the CPU backend: its vtable, and the general kernels of backend.h on
 * host memory (the network ops' row kernels are in cpu_nn.c,
 * cpu_layer_norm.c and cpu_rms_norm.c, the rotary embedding in cpu_rope.c,
 * attention in cpu_attention.c). Matrix work goes to
 * OpenBLAS (cblas_sgemm, row-major, transpose flags, never a transposed
 * copy); big elementwise loops use OpenMP (only past PAR_MIN elements, so
 * small tensors pay nothing). Sums accumulate in double. In bf16 mode
 * (backend.h) the GEMMs of the vtable are cpu_gemm_bf16.c's; the kernels' own
 * GEMMs (mg_cpu_gemm, cpu_gemm.c) stay fp32.
 * Exports: mg_backend_cpu(). */
#include "backend/backend.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_state.h"
#include "backend/cpu_kernels.h"
#include "backend/kernel_math.h"
#include "parallel.h"

/* ---- memory ------------------------------------------------------------------- */

static void *cpu_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    size_t rounded = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, rounded ? rounded : 64);
}

static void cpu_free(void *ctx, void *ptr) {
    (void)ctx;
    free(ptr);
}

static void cpu_memcpy(void *ctx, float *dst, const float *src, int64_t n) {
    (void)ctx;
    if (n > 0 && dst != src) memcpy(dst, src, (size_t)n * sizeof(float));
}

/* ---- matrix work -------------------------------------------------------------- */

/* fp32, or in bf16 mode (backend.h) cpu_gemm_bf16.c's GEMM of the same inputs */
static void cpu_gemm_batched(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n,
                             int64_t k, float alpha, const float *a, int64_t lda, int64_t stride_a,
                             const float *b, int64_t ldb, int64_t stride_b, float beta, float *c,
                             int64_t ldc, int64_t stride_c, int64_t batch) {
    if (mg_backend_gemm_bf16()) {
        mg_gemm_in ai = {a, lda, stride_a, false}, bi = {b, ldb, stride_b, false};
        mg_cpu_gemm_bf16(ctx, trans_a, trans_b, m, n, k, alpha, &ai, &bi, beta, c, ldc, stride_c,
                         batch, NULL);
        return;
    }
    for (int64_t i = 0; i < batch; i++)
        mg_cpu_gemm(ctx, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b,
                    ldb, beta, c + i * stride_c, ldc);
}

static void cpu_gemm(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                     float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                     float beta, float *c, int64_t ldc) {
    cpu_gemm_batched(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

/* ---- layout ------------------------------------------------------------------- */

static void cpu_copy(void *ctx, const mg_tensor *src, mg_tensor *dst) {
    cpu_memcpy(ctx, dst->data, src->data, src->numel);
}

static void cpu_fill(void *ctx, mg_tensor *t, float value) {
    (void)ctx;
    float *p = t->data;
    int64_t n = t->numel;
    if (value == 0.0f && !signbit(value)) {
        if (n > 0) memset(p, 0, (size_t)n * sizeof(float));
        return;
    }
    MG_PAR_FOR(n > PAR_MIN, for (int64_t i = 0; i < n; i++) p[i] = value;);
}

/* dst[dst_offset + i] = src[src_offset + i] (add: +=) for i in the box
 * `extent`. Trailing dims that the box covers whole in both tensors merge into
 * one contiguous run, copied with memcpy or added in one loop. */
static void block_apply(const mg_tensor *src, const int64_t *src_offset, mg_tensor *dst,
                        const int64_t *dst_offset, const int64_t *extent, bool add) {
    int nd = src->ndim;
    if (nd == 0) {
        dst->data[0] = add ? dst->data[0] + src->data[0] : src->data[0];
        return;
    }
    for (int d = 0; d < nd; d++)
        if (extent[d] <= 0) return;
    int64_t ss[MG_MAX_DIMS], ds[MG_MAX_DIMS];
    mg_shape_strides(nd, src->shape, ss);
    mg_shape_strides(nd, dst->shape, ds);
    int k = nd - 1; /* dims k.. form one run */
    int64_t run = extent[k];
    while (k > 0 && extent[k] == src->shape[k] && extent[k] == dst->shape[k]) {
        k--;
        run *= extent[k];
    }
    int64_t src_base = 0, dst_base = 0, outer = 1;
    for (int d = 0; d < nd; d++) {
        src_base += src_offset[d] * ss[d];
        dst_base += dst_offset[d] * ds[d];
    }
    for (int d = 0; d < k; d++) outer *= extent[d];
    const float *s = src->data + src_base;
    float *o = dst->data + dst_base;
    MG_PAR_FOR(outer * run > PAR_MIN && outer > 1, for (int64_t r = 0; r < outer; r++) {
        int64_t so, dof;
        mg_unravel2(r, k, extent, ss, ds, &so, &dof);
        if (!add) {
            memcpy(o + dof, s + so, (size_t)run * sizeof(float));
            continue;
        }
        float *restrict out = o + dof;
        const float *restrict in = s + so;
        for (int64_t j = 0; j < run; j++) out[j] += in[j];
    });
}

static void cpu_copy_block(void *ctx, const mg_tensor *src, const int64_t *src_offset,
                           mg_tensor *dst, const int64_t *dst_offset, const int64_t *extent) {
    (void)ctx;
    block_apply(src, src_offset, dst, dst_offset, extent, false);
}

static void cpu_add_block(void *ctx, const mg_tensor *src, const int64_t *src_offset,
                          mg_tensor *dst, const int64_t *dst_offset, const int64_t *extent) {
    (void)ctx;
    block_apply(src, src_offset, dst, dst_offset, extent, true);
}

/* out = x permuted: out.shape[i] = x.shape[perm[i]]. Walks out in order; the
 * last two out dims are copied in 32x32 tiles so a transpose reads and writes
 * whole cache lines. */
#define TILE 32
static void cpu_permute(void *ctx, const mg_tensor *x, const int *perm, mg_tensor *out) {
    int nd = x->ndim;
    if (out->numel == 0) return;
    if (nd < 2) {
        cpu_memcpy(ctx, out->data, x->data, x->numel);
        return;
    }
    int64_t xs[MG_MAX_DIMS], is[MG_MAX_DIMS]; /* is[i]: x stride of out dim i */
    mg_shape_strides(nd, x->shape, xs);
    for (int i = 0; i < nd; i++) is[i] = xs[perm[i]];
    int64_t rows = out->shape[nd - 2], cols = out->shape[nd - 1];
    int64_t s_row = is[nd - 2], s_col = is[nd - 1];
    int64_t slices = out->numel / (rows * cols);
    int64_t row_tiles = (rows + TILE - 1) / TILE;
    const float *xd = x->data;
    float *od = out->data;
    MG_PAR_FOR(out->numel > PAR_MIN, for (int64_t task = 0; task < slices * row_tiles; task++) {
        int64_t slice = task / row_tiles, r0 = (task % row_tiles) * TILE;
        int64_t r1 = r0 + TILE < rows ? r0 + TILE : rows;
        int64_t base = 0, rem = slice;
        for (int d = nd - 3; d >= 0; d--) {
            base += (rem % out->shape[d]) * is[d];
            rem /= out->shape[d];
        }
        float *o = od + slice * rows * cols;
        if (s_col == 1) {
            for (int64_t r = r0; r < r1; r++)
                memcpy(o + r * cols, xd + base + r * s_row, (size_t)cols * sizeof(float));
            continue;
        }
        for (int64_t c0 = 0; c0 < cols; c0 += TILE) {
            int64_t c1 = c0 + TILE < cols ? c0 + TILE : cols;
            for (int64_t r = r0; r < r1; r++) {
                const float *xr = xd + base + r * s_row;
                float *orow = o + r * cols;
                for (int64_t c = c0; c < c1; c++) orow[c] = xr[c * s_col];
            }
        }
    });
}

/* ---- elementwise -------------------------------------------------------------- */

static void cpu_axpy(void *ctx, float alpha, const mg_tensor *x, mg_tensor *y) {
    (void)ctx;
    const float *restrict xd = x->data;
    float *restrict yd = y->data;
    int64_t n = y->numel;
    MG_PAR_FOR(n > PAR_MIN, for (int64_t i = 0; i < n; i++) yd[i] += alpha * xd[i];);
}

/* out[i] = op(a[i*sa], b[i*sb]) for i < n; the switch sits outside the loops. */
#define BINARY_CASE(OP, EXPR)                                                     \
    case OP:                                                                      \
        if (sa == 1 && sb == 1)                                                   \
            for (int64_t i = 0; i < n; i++) {                                     \
                float x = a[i], y = b[i];                                         \
                out[i] = (EXPR);                                                  \
            }                                                                     \
        else if (sa == 1 && sb == 0)                                              \
            for (int64_t i = 0; i < n; i++) {                                     \
                float x = a[i], y = b[0];                                         \
                out[i] = (EXPR);                                                  \
            }                                                                     \
        else                                                                      \
            for (int64_t i = 0; i < n; i++) {                                     \
                float x = a[i * sa], y = b[i * sb];                               \
                out[i] = (EXPR);                                                  \
            }                                                                     \
        break;

static void binary_run(mg_binary_op op, const float *a, int64_t sa, const float *b, int64_t sb,
                       float *out, int64_t n) {
#define BINARY_KERNEL(E, name, f) BINARY_CASE(MG_BINARY_##E, f)
    switch (op) {
        MG_BINARY_KERNELS(BINARY_KERNEL)
    default:
        break;
    }
}

/* The pointwise kernels with a loop of their own (cpu_nn.c: vectorizable exp
 * instead of a libm call per element), for contiguous operands of out's size;
 * the others run the formulas of kernel_math.h below. */
static void (*const unary_vectorized[MG_UNARY_COUNT])(const float *, float *, int64_t) = {
    [MG_UNARY_GELU] = mg_cpu_gelu,
    [MG_UNARY_SILU] = mg_cpu_silu,
};
static void (*const binary_vectorized[MG_BINARY_COUNT])(const float *, const float *, float *,
                                                         int64_t) = {
    [MG_BINARY_GELU_BACKWARD] = mg_cpu_gelu_backward,
    [MG_BINARY_SILU_BACKWARD] = mg_cpu_silu_backward,
};

/* out = op(a, b) with broadcasting. Dims are first merged (mg_binary_dims); then
 * out is walked row by row. */
static void cpu_binary(void *ctx, mg_binary_op op, const mg_tensor *a, const mg_tensor *b,
                       mg_tensor *out) {
    (void)ctx;
    if (out->numel == 0) return;
    if ((unsigned)op < MG_BINARY_COUNT && binary_vectorized[op] && a->numel == out->numel &&
        b->numel == out->numel) {
        binary_vectorized[op](a->data, b->data, out->data, out->numel);
        return;
    }
    int64_t n[MG_MAX_DIMS], sa[MG_MAX_DIMS], sb[MG_MAX_DIMS];
    int k = mg_binary_dims(a, b, out, n, sa, sb);
    const float *ad = a->data, *bd = b->data;
    float *od = out->data;
    if (k <= 1) { /* one flat (possibly broadcast) run */
        int64_t len = k ? n[0] : 1, s_a = k ? sa[0] : 0, s_b = k ? sb[0] : 0;
        int64_t chunks = (len + CHUNK - 1) / CHUNK;
        MG_PAR_FOR(len > PAR_MIN, for (int64_t c = 0; c < chunks; c++) {
            int64_t i0 = c * CHUNK, m = len - i0 < CHUNK ? len - i0 : CHUNK;
            binary_run(op, ad + i0 * s_a, s_a, bd + i0 * s_b, s_b, od + i0, m);
        });
        return;
    }
    int64_t len = n[k - 1], rows = out->numel / len;
    MG_PAR_FOR(out->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        int64_t oa, ob;
        mg_unravel2(r, k - 1, n, sa, sb, &oa, &ob);
        binary_run(op, ad + oa, sa[k - 1], bd + ob, sb[k - 1], od + r * len, len);
    });
}

/* out = op(x) (alpha is the factor of SCALE, unused by the others). */
#define UNARY_CASE(OP, EXPR)                                                      \
    case OP:                                                                      \
        MG_PAR_FOR(n > PAR_MIN, for (int64_t i = 0; i < n; i++) {                 \
            float x = xd[i];                                                      \
            od[i] = (EXPR);                                                       \
        });                                                                       \
        break;

static void cpu_unary(void *ctx, mg_unary_op op, const mg_tensor *x, float alpha, mg_tensor *out) {
    (void)ctx;
    const float *xd = x->data;
    float *od = out->data;
    int64_t n = out->numel;
    if ((unsigned)op < MG_UNARY_COUNT && unary_vectorized[op]) {
        unary_vectorized[op](xd, od, n);
        return;
    }
#define UNARY_KERNEL(E, name, f) UNARY_CASE(MG_UNARY_##E, f)
    switch (op) {
        MG_UNARY_KERNELS(UNARY_KERNEL)
    default:
        break;
    }
}

/* ---- reductions --------------------------------------------------------------- */

/* x's dims merged into runs that are all reduced or all kept (size-1 dims
 * dropped). n[i]: size, xs[i]: stride in x, os[i]: stride in out (kept dims). */
typedef struct {
    int k;
    int64_t n[MG_MAX_DIMS], xs[MG_MAX_DIMS], os[MG_MAX_DIMS];
    bool reduced[MG_MAX_DIMS];
} reduce_plan;

static void reduce_plan_make(const mg_tensor *x, const mg_tensor *out, reduce_plan *p) {
    int64_t xs[MG_MAX_DIMS], os[MG_MAX_DIMS];
    mg_shape_strides(x->ndim, x->shape, xs);
    mg_shape_strides(out->ndim, out->shape, os);
    p->k = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (x->shape[i] == 1) continue;
        bool red = out->shape[i] == 1;
        int k = p->k;
        if (k > 0 && p->reduced[k - 1] == red) { /* x is contiguous: always mergeable */
            p->n[k - 1] *= x->shape[i];
            p->xs[k - 1] = xs[i];
            p->os[k - 1] = red ? 0 : os[i];
            continue;
        }
        p->n[k] = x->shape[i];
        p->xs[k] = xs[i];
        p->os[k] = red ? 0 : os[i];
        p->reduced[k] = red;
        p->k++;
    }
}

/* offset in x (and out) of combination `idx` of the dims in [0, upto) whose
 * reduced flag equals `which` */
static void reduce_offsets(const reduce_plan *p, int upto, bool which, int64_t idx, int64_t *xo,
                           int64_t *oo) {
    int64_t x_off = 0, o_off = 0;
    for (int d = upto - 1; d >= 0; d--) {
        if (p->reduced[d] != which) continue;
        int64_t i = idx % p->n[d];
        idx /= p->n[d];
        x_off += i * p->xs[d];
        o_off += i * p->os[d];
    }
    *xo = x_off;
    if (oo) *oo = o_off;
}

static double run_sum(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}

static float run_max(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m || x[i] != x[i]) m = x[i]; /* NaN wins, as in torch */
    return m;
}

static inline double combine(bool max, double acc, double v) {
    if (!max) return acc + v;
    return (v > acc || v != v) ? v : acc;
}

#define REDUCE_TILE 256

/* acc[j] += x[j], j < w: one row's part of column sums (a bias's gradient),
 * in the CPU's widest vectors; each column's adds stay in row order */
MG_CPU_CLONES static void add_row(double *restrict acc, const float *restrict x, int64_t w) {
    for (int64_t j = 0; j < w; j++) acc[j] += x[j];
}

/* The deterministic mode's sum: x laid out as (reduced, kept), then summed
 * down in the halving tree (cpu_det.c), whatever the dims. */
static void reduce_det(const mg_tensor *x, mg_tensor *out) {
    reduce_plan p;
    reduce_plan_make(x, out, &p);
    int64_t kept = out->numel, red = x->numel / out->numel;
    if (p.k == 0 || (p.reduced[0] && (p.k == 1 || (p.k == 2 && !p.reduced[1])))) {
        mg_cpu_det_colsum(x->data, red, kept, kept, out->data); /* x is (reduced, kept) already */
        return;
    }
    float *t = mg_cpu_det_scratch(x->numel);
    if (!t) { /* no message path here: NaN makes the failure visible */
        for (int64_t i = 0; i < kept; i++) out->data[i] = NAN;
        return;
    }
    for (int64_t o = 0; o < kept; o++) {
        int64_t xo, oo;
        reduce_offsets(&p, p.k, false, o, &xo, &oo);
        for (int64_t q = 0; q < red; q++) {
            int64_t xr;
            reduce_offsets(&p, p.k, true, q, &xr, NULL);
            t[q * kept + oo] = x->data[xo + xr];
        }
    }
    mg_cpu_det_colsum(t, red, kept, kept, out->data);
}

static void reduce(const mg_tensor *x, mg_tensor *out, bool max) {
    const double empty = max ? -INFINITY : 0.0;
    if (out->numel == 0) return;
    if (!max && x->numel > 0 && mg_backend_ctx()->deterministic) {
        reduce_det(x, out);
        return;
    }
    if (x->numel == 0) {
        for (int64_t i = 0; i < out->numel; i++) out->data[i] = (float)empty;
        return;
    }
    reduce_plan p;
    reduce_plan_make(x, out, &p);
    int64_t kept = out->numel, red = x->numel / out->numel;
    const float *xd = x->data;
    float *od = out->data;
    if (p.k == 0 || (p.k == 1 && p.reduced[0])) { /* all of x -> one number */
        int64_t n = x->numel;
        double acc = empty;
        if (!max) {
            MG_PAR_FOR_SUM(n > PAR_MIN, (acc), for (int64_t i = 0; i < n; i++) acc += xd[i];);
        } else {
            acc = run_max(xd, n);
        }
        od[0] = (float)acc;
        return;
    }
    int last = p.k - 1;
    if (p.reduced[last]) {
        /* inner run reduced: each out element sums contiguous runs of x */
        int64_t len = p.n[last], outer_red = red / len;
        MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t o = 0; o < kept; o++) {
            int64_t xk, ok;
            reduce_offsets(&p, last, false, o, &xk, &ok);
            double acc = empty;
            for (int64_t r = 0; r < outer_red; r++) {
                int64_t xr;
                reduce_offsets(&p, last, true, r, &xr, NULL);
                const float *run = xd + xk + xr;
                acc = combine(max, acc, max ? (double)run_max(run, len) : run_sum(run, len));
            }
            od[ok] = (float)acc;
        });
        return;
    }
    /* inner run kept: accumulate rows of x into tiles of REDUCE_TILE outputs */
    int64_t len = p.n[last], rows = kept / len, tiles = (len + REDUCE_TILE - 1) / REDUCE_TILE;
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t task = 0; task < rows * tiles; task++) {
        int64_t row = task / tiles, c0 = (task % tiles) * REDUCE_TILE;
        int64_t w = len - c0 < REDUCE_TILE ? len - c0 : REDUCE_TILE;
        int64_t xk, ok;
        reduce_offsets(&p, last, false, row, &xk, &ok);
        double acc[REDUCE_TILE];
        for (int64_t j = 0; j < w; j++) acc[j] = empty;
        for (int64_t r = 0; r < red; r++) {
            int64_t xr;
            reduce_offsets(&p, last, true, r, &xr, NULL);
            const float *run = xd + xk + xr + c0;
            if (max)
                for (int64_t j = 0; j < w; j++) acc[j] = combine(true, acc[j], run[j]);
            else
                add_row(acc, run, w);
        }
        for (int64_t j = 0; j < w; j++) od[ok + c0 + j] = (float)acc[j];
    });
}

static void cpu_reduce_sum(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx;
    reduce(x, out, false);
}

static void cpu_reduce_max(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx;
    reduce(x, out, true);
}

/* The sum of the squares of x[0, n) in double, the vector's lanes summed
 * apart then together: one chain of dependent adds would wait on each add
 * (a grad norm's and the reducer's finite check's pass over every gradient). */
MG_CPU_CLONES static double squares(const float *restrict x, int64_t n) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static double cpu_sum_squares(void *ctx, const mg_tensor *x) {
    (void)ctx;
    const float *xd = x->data;
    int64_t n = x->numel, chunks = (n + PAR_MIN - 1) / PAR_MIN;
    double s = 0;
    MG_PAR_FOR_SUM(chunks > 1, (s), for (int64_t c = 0; c < chunks; c++) {
        int64_t i0 = c * PAR_MIN, len = n - i0 < PAR_MIN ? n - i0 : PAR_MIN;
        s += squares(xd + i0, len);
    });
    return s;
}

/* ---- optimizers ------------------------------------------------------------------ */

/* PyTorch SGD: g = grad + wd p; buf = g (first step) or momentum buf + g; p -= lr buf.
 * Without momentum there is no buffer (momentum_buf may be NULL). */
static void cpu_sgd_step(void *ctx, mg_tensor *param, const mg_tensor *grad,
                         mg_tensor *momentum_buf, float lr, float momentum, float weight_decay,
                         bool first_step) {
    (void)ctx;
    /* restrict and one loop per case: the compiler vectorizes them without
     * alias checks, which slowed them down */
    float *restrict p = param->data;
    float *restrict buf = momentum_buf && momentum != 0.0f ? momentum_buf->data : NULL;
    const float *restrict gd = grad->data;
    int64_t n = param->numel;
    if (!buf) {
        MG_PAR_FOR(n > PAR_MIN, for (int64_t i = 0; i < n; i++) p[i] -= lr * (gd[i] + weight_decay * p[i]););
    } else if (first_step) {
        MG_PAR_FOR(n > PAR_MIN, for (int64_t i = 0; i < n; i++) {
            float g = gd[i] + weight_decay * p[i];
            buf[i] = g;
            p[i] -= lr * g;
        });
    } else {
        MG_PAR_FOR(n > PAR_MIN, for (int64_t i = 0; i < n; i++) {
            float g = gd[i] + weight_decay * p[i];
            float m = momentum * buf[i] + g;
            buf[i] = m;
            p[i] -= lr * m;
        });
    }
}

/* PyTorch AdamW: p *= 1 - lr wd; m, v moving averages; p -= lr mhat / (sqrt(vhat) + eps),
 * computed as torch does: (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps). */
MG_CPU_CLONES static void cpu_adamw_step(void *ctx, mg_tensor *param, const mg_tensor *grad,
                                         mg_tensor *m, mg_tensor *v, float lr, float beta1,
                                         float beta2, float eps, float weight_decay,
                                         int64_t step) {
    (void)ctx;
    float *restrict p = param->data, *restrict md = m->data, *restrict vd = v->data;
    const float *restrict gd = grad->data;
    int64_t n = param->numel;
    double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    float decay = 1.0f - lr * weight_decay;
    MG_PAR_FOR(n > PAR_MIN, for (int64_t i = 0; i < n; i++) {
        float g = gd[i];
        p[i] *= decay;
        md[i] = beta1 * md[i] + (1.0f - beta1) * g;
        vd[i] = beta2 * vd[i] + (1.0f - beta2) * g * g;
        p[i] -= step_size * md[i] / (sqrtf(vd[i]) / bc2_sqrt + eps);
    });
}

/* ---- the vtable --------------------------------------------------------------- */

static const struct mg_backend_iface cpu_iface = {
    .name = "cpu",
    .device = MG_DEVICE_CPU,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_host = cpu_memcpy,
    .from_host = cpu_memcpy,
    .gemm = cpu_gemm,
    .gemm_batched = cpu_gemm_batched,
    .cast_bf16 = mg_cpu_cast_bf16,
    .gemm_bf16 = mg_cpu_gemm_bf16,
    .permute = cpu_permute,
    .copy_block = cpu_copy_block,
    .add_block = cpu_add_block,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .binary = cpu_binary,
    .unary = cpu_unary,
    .axpy = cpu_axpy,
    .reduce_sum = cpu_reduce_sum,
    .reduce_max = cpu_reduce_max,
    .sum_squares = cpu_sum_squares,
    .softmax = mg_cpu_softmax,
    .softmax_sum = mg_cpu_softmax_sum,
    .softmax_backward = mg_cpu_softmax_backward,
    .softmax_dot = mg_cpu_softmax_dot,
    .layer_norm = mg_cpu_layer_norm,
    .layer_norm_moments = mg_cpu_layer_norm_moments,
    .layer_norm_backward = mg_cpu_layer_norm_backward,
    .layer_norm_backward_sums = mg_cpu_layer_norm_backward_sums,
    .rms_norm = mg_cpu_rms_norm,
    .rms_norm_squares = mg_cpu_rms_norm_squares,
    .rms_norm_backward = mg_cpu_rms_norm_backward,
    .rms_norm_backward_sums = mg_cpu_rms_norm_backward_sums,
    .rope = mg_cpu_rope,
    .embedding = mg_cpu_embedding,
    .embedding_backward = mg_cpu_embedding_backward,
    .cross_entropy = mg_cpu_cross_entropy,
    .cross_entropy_sums = mg_cpu_cross_entropy_sums,
    .cross_entropy_backward = mg_cpu_cross_entropy_backward,
    .cross_entropy_fixed = mg_cpu_cross_entropy_fixed,
    .attention = mg_cpu_attention,
    .attention_backward = mg_cpu_attention_backward,
    .sgd_step = cpu_sgd_step,
    .adamw_step = cpu_adamw_step,
};

/* The vtable with its (empty) context: set here once, never written. */
static mg_backend cpu_backend = {&cpu_iface, NULL};

mg_backend *mg_backend_cpu(void) {
    mg_backend_cpu_threads(); /* applies the default thread count the first time */
    return &cpu_backend;
}
