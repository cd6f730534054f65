/* cuda_rms_norm.cu: the CUDA RMS norm kernels (llama's RMSNorm), with the
 * semantics of cpu_rms_norm.c: the forward (whole rows, or split rows from
 * their summed squares), the squares of a split row, the backward's row sums,
 * and the backward with the weight's gradient.
 *
 * A row is one warp's (x (R, C): rows of the last dim); its sums are taken in
 * double across the lanes. The weight's gradient adds rows in a fixed order
 * (each split of rows, then the splits) without atomics, as layer norm's in
 * cuda_nn.cu, so a run repeats bitwise.
 *
 * Exports: mg_cu_rms_norm_iface (cuda_internal.h). */
#include <math.h>
#include <stdint.h>

#include "backend/cuda_internal.h"

static int64_t last_dim(const mg_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

/* sum_j x^2 of one row; every lane gets it */
__device__ double rms_row_squares(const float *x, int64_t c, int lane) {
    double s = 0;
    for (int64_t j = lane; j < c; j += 32) s += (double)x[j] * x[j];
    return warp_sum(s);
}

/* sum_j g xhat of one row, g = dy w (dy where w is NULL), xhat = x rstd */
__device__ double rms_row_dot(const float *xr, const float *g, const float *w, int64_t c,
                              float rstd, int lane) {
    double s = 0;
    for (int64_t j = lane; j < c; j += 32) {
        float gj = w ? g[j] * w[j] : g[j];
        s += (double)gj * (xr[j] * rstd);
    }
    return warp_sum(s);
}

__global__ void k_rms_norm(const float *x, const float *w, float eps, const float *squares,
                           int64_t n, float *rstd, float *y, int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *xr = x + r * c;
        double ms;
        if (squares)
            ms = n ? squares[r] / (double)n : 0.0;
        else
            ms = c ? rms_row_squares(xr, c, lane) / (double)c : 0.0;
        float s = (float)(1.0 / sqrt(ms + eps));
        if (lane == 0) rstd[r] = s;
        for (int64_t j = lane; j < c; j += 32) {
            float v = xr[j] * s;
            if (w) v *= w[j];
            y[r * c + j] = v;
        }
    }
}

static void cuda_rms_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, float eps,
                          const mg_tensor *squares, int64_t n, mg_tensor *rstd, mg_tensor *y) {
    (void)ctx;
    int64_t rows = rstd->numel;
    if (rows == 0) return;
    k_rms_norm<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
        x->data, w ? w->data : NULL, eps, squares ? squares->data : NULL, n, rstd->data, y->data,
        rows, last_dim(x));
    LAUNCHED("rms_norm kernel");
}

__global__ void k_rms_norm_squares(const float *x, float *out, int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        double s = rms_row_squares(x + r * c, c, lane);
        if (lane == 0) out[r] = (float)s;
    }
}

static void cuda_rms_norm_squares(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx;
    int64_t rows = out->numel;
    if (rows == 0) return;
    k_rms_norm_squares<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(x->data, out->data, rows,
                                                                       last_dim(x));
    LAUNCHED("rms_norm_squares kernel");
}

__global__ void k_rms_norm_backward_sums(const float *x, const float *w, const float *dy,
                                         const float *rstd, float *sums, int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        double a = rms_row_dot(x + r * c, dy + r * c, w, c, rstd[r], lane);
        if (lane == 0) sums[r] = (float)a;
    }
}

static void cuda_rms_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                        const mg_tensor *dy, const mg_tensor *rstd,
                                        mg_tensor *sums) {
    (void)ctx;
    int64_t rows = rstd->numel;
    if (rows == 0) return;
    k_rms_norm_backward_sums<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
        x->data, w ? w->data : NULL, dy->data, rstd->data, sums->data, rows, last_dim(x));
    LAUNCHED("rms_norm_backward_sums kernel");
}

__global__ void k_rms_norm_dx(const float *x, const float *w, const float *dy, const float *rstd,
                              const float *sums, int64_t n, float *dx, int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *xr = x + r * c, *g = dy + r * c;
        float s = rstd[r];
        double a = sums ? (double)sums[r] : rms_row_dot(xr, g, w, c, s, lane);
        int64_t cols = sums ? n : c;
        float ma = cols ? (float)(a / (double)cols) : 0.0f;
        for (int64_t j = lane; j < c; j += 32) {
            float gj = w ? g[j] * w[j] : g[j];
            dx[r * c + j] = s * (gj - xr[j] * s * ma);
        }
    }
}

/* partial[p][j] for column j over the rows of split p: dy xhat */
__global__ void k_rms_norm_dw_partial(const float *x, const float *dy, const float *rstd,
                                      int64_t rows, int64_t c, int64_t chunk, double *pw) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, p = blockIdx.y;
    if (j >= c) return;
    int64_t r0 = p * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double acc = 0;
    for (int64_t r = r0; r < r1; r++) acc += (double)dy[r * c + j] * (x[r * c + j] * rstd[r]);
    pw[p * c + j] = acc;
}

__global__ void k_rms_norm_dw_finish(const double *pw, int64_t splits, int64_t c, float *dw) {
    FOR_EACH(j, c) {
        double acc = 0;
        for (int64_t p = 0; p < splits; p++) acc += pw[p * c + j];
        dw[j] = (float)acc;
    }
}

static void cuda_rms_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                   const mg_tensor *dy, const mg_tensor *rstd,
                                   const mg_tensor *sums, int64_t n, mg_tensor *dx,
                                   mg_tensor *dw) {
    (void)ctx;
    int64_t c = last_dim(x), rows = rstd->numel;
    if (dx && rows > 0 && c > 0) {
        k_rms_norm_dx<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
            x->data, w ? w->data : NULL, dy->data, rstd->data, sums ? sums->data : NULL, n,
            dx->data, rows, c);
        if (!LAUNCHED("rms_norm_backward kernel")) return;
    }
    if (!dw || c == 0) return;
    int64_t splits = rows > 0 ? ceil_div(rows, 64) : 1; /* 64 rows a thread */
    if (splits > 256) splits = 256;
    int64_t chunk = rows > 0 ? ceil_div(rows, splits) : 0;
    double *scratch = mg_cu_scratch(splits * c + 1);
    if (!scratch) return;
    double *pw = scratch + 1;
    dim3 grid((unsigned)ceil_div(c, THREADS), (unsigned)splits);
    k_rms_norm_dw_partial<<<grid, THREADS, 0, mg_cu.stream>>>(x->data, dy->data, rstd->data, rows,
                                                              c, chunk, pw);
    if (!LAUNCHED("rms_norm_backward kernel")) return;
    k_rms_norm_dw_finish<<<grid_for(c), THREADS, 0, mg_cu.stream>>>(pw, splits, c, dw->data);
    LAUNCHED("rms_norm_backward kernel");
}

void mg_cu_rms_norm_iface(struct mg_backend_iface *f) {
    f->rms_norm = cuda_rms_norm;
    f->rms_norm_squares = cuda_rms_norm_squares;
    f->rms_norm_backward = cuda_rms_norm_backward;
    f->rms_norm_backward_sums = cuda_rms_norm_backward_sums;
}
