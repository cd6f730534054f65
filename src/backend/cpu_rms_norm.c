/* cpu_rms_norm.c: the CPU RMS norm kernels (llama's RMSNorm), over the last
 * dim of x (R, C): the forward (whole rows, or split rows from their summed
 * squares), the squares of a split row, the backward's row sums, and the
 * backward with the weight's gradient. Row sums are float sums of blocks of
 * SUM_BLOCK terms added up in double (cpu_rows.h's BLOCK_SUM); the weight's
 * gradient adds rows in order in float, as layer norm's does.
 * Exports mg_cpu_rms_norm, mg_cpu_rms_norm_squares,
 * mg_cpu_rms_norm_backward_sums and mg_cpu_rms_norm_backward
 * (cpu_kernels.h; contracts in backend.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_state.h"
#include "backend/cpu_rows.h"
#include "parallel.h"

MG_CPU_INLINE double row_squares(const float *restrict x, int64_t c) {
    double s = 0;
    BLOCK_SUM(s, j, c, x[j] * x[j])
    return s;
}

/* sum_j g xhat of one row, g = dy w (dy where w is NULL), xhat = x rstd */
MG_CPU_INLINE double row_dot(const float *restrict x, const float *restrict g,
                             const float *restrict wd, int64_t c, float rstd) {
    double s = 0;
    if (wd) {
        BLOCK_SUM(s, j, c, g[j] * wd[j] * (x[j] * rstd))
    } else {
        BLOCK_SUM(s, j, c, g[j] * (x[j] * rstd))
    }
    return s;
}

MG_CPU_CLONES void mg_cpu_rms_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, float eps,
                                   const mg_tensor *squares, int64_t n, mg_tensor *rstd,
                                   mg_tensor *y) {
    (void)ctx;
    int64_t c = last_dim(x), rows = rstd->numel;
    const float *restrict wd = w ? w->data : NULL;
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = x->data + r * c;
        float *restrict yr = y->data + r * c;
        double ms = squares ? (n ? squares->data[r] / (double)n : 0.0)
                            : (c ? row_squares(xr, c) / (double)c : 0.0);
        float s = (float)(1.0 / sqrt(ms + eps));
        rstd->data[r] = s;
        if (wd)
            for (int64_t j = 0; j < c; j++) yr[j] = xr[j] * s * wd[j];
        else
            for (int64_t j = 0; j < c; j++) yr[j] = xr[j] * s;
    });
}

MG_CPU_CLONES void mg_cpu_rms_norm_squares(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx;
    int64_t c = last_dim(x), rows = out->numel;
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) out->data[r] = (float)row_squares(x->data + r * c, c););
}

MG_CPU_CLONES void mg_cpu_rms_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                                 const mg_tensor *dy, const mg_tensor *rstd,
                                                 mg_tensor *sums) {
    (void)ctx;
    int64_t c = last_dim(x), rows = rstd->numel;
    const float *wd = w ? w->data : NULL;
    MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++)
        sums->data[r] =
            (float)row_dot(x->data + r * c, dy->data + r * c, wd, c, rstd->data[r]););
}

MG_CPU_CLONES void mg_cpu_rms_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                            const mg_tensor *dy, const mg_tensor *rstd,
                                            const mg_tensor *sums, int64_t n, mg_tensor *dx,
                                            mg_tensor *dw) {
    (void)ctx;
    int64_t c = last_dim(x), rows = rstd->numel;
    const float *restrict wd = w ? w->data : NULL;
    if (dw && mg_backend_ctx()->deterministic) { /* dw: each row's terms, then the tree sums */
        float *t = mg_cpu_det_scratch(rows * c);
        if (!t) {
            for (int64_t j = 0; j < c; j++) dw->data[j] = NAN; /* no message path here */
        } else {
            MG_PAR_FOR(x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < c; j++)
                    t[r * c + j] = dy->data[r * c + j] * (x->data[r * c + j] * rstd->data[r]););
            mg_cpu_det_colsum(t, rows, c, c, dw->data);
        }
        if (dx) mg_cpu_rms_norm_backward(ctx, x, w, dy, rstd, sums, n, dx, NULL);
        return;
    }
    float *restrict dwd = dw ? dw->data : NULL;
    if (dwd) memset(dwd, 0, (size_t)dw->numel * sizeof(float));
    /* the weight's gradient adds rows in order: one thread then */
    MG_PAR_FOR(!dwd && x->numel > PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = x->data + r * c, *restrict g = dy->data + r * c;
        float s = rstd->data[r];
        if (dx) {
            double a = sums ? sums->data[r] : row_dot(xr, g, wd, c, s);
            int64_t cols = sums ? n : c;
            float ma = cols ? (float)(a / (double)cols) : 0.0f;
            float *restrict dxr = dx->data + r * c;
            if (wd)
                for (int64_t j = 0; j < c; j++) dxr[j] = s * (g[j] * wd[j] - xr[j] * s * ma);
            else
                for (int64_t j = 0; j < c; j++) dxr[j] = s * (g[j] - xr[j] * s * ma);
        }
        if (dwd)
            for (int64_t j = 0; j < c; j++) dwd[j] += g[j] * (xr[j] * s);
    });
}
