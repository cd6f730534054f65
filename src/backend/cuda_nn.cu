/* cuda_nn.cu: the CUDA row kernels of the network ops, with the semantics of
 * cpu_nn.c: softmax and log_softmax with their backward, layer norm (whole or
 * split rows) with its backward, embedding lookup and scatter-add, and
 * cross-entropy (whole rows, and a shard of the classes).
 *
 * A row is one warp's (x (R, C): rows of the last dim); its sums are taken in
 * double across the lanes. Column sums (the layer norm weight gradients, the
 * embedding table gradient) add rows in a fixed order without atomics, so a
 * run repeats bitwise.
 *
 * Exports: mg_cu_nn_iface (cuda_internal.h). */
#include <math.h>
#include <stdint.h>

#include "backend/cuda_internal.h"

static int64_t last_dim(const mg_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

/* row index of an id or label, or -1 when it is not an integer in [0, v) */
__device__ __forceinline__ int64_t index_of(float id, int64_t v) {
    if (!(id >= 0.0f) || id >= (float)v || id != floorf(id)) return -1;
    return (int64_t)id;
}

__device__ float row_max(const float *x, int64_t c, int lane) {
    float m = -INFINITY;
    for (int64_t j = lane; j < c; j += 32) m = max_nan(m, x[j]);
    return warp_max(m);
}

__device__ double row_exp_sum(const float *x, int64_t c, float m, int lane) {
    double s = 0;
    for (int64_t j = lane; j < c; j += 32) s += expf(x[j] - m);
    return warp_sum(s);
}

/* ---- softmax ------------------------------------------------------------------ */

__global__ void k_softmax(const float *x, const float *max, const float *sum, bool as_log,
                          float *out, int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *xr = x + r * c;
        float m = max ? max[r] : row_max(xr, c, lane);
        double s = sum ? (double)sum[r] : row_exp_sum(xr, c, m, lane);
        float ls = (float)log(s), inv = (float)(1.0 / s);
        for (int64_t j = lane; j < c; j += 32)
            out[r * c + j] = as_log ? (xr[j] - m) - ls : expf(xr[j] - m) * inv;
    }
}

static void cuda_softmax(void *ctx, const mg_tensor *x, const mg_tensor *max, const mg_tensor *sum,
                         bool as_log, mg_tensor *out) {
    (void)ctx;
    int64_t c = last_dim(x);
    if (c == 0 || x->numel == 0) return;
    int64_t rows = x->numel / c;
    k_softmax<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
        x->data, max ? max->data : NULL, sum ? sum->data : NULL, as_log, out->data, rows, c);
    LAUNCHED("softmax kernel");
}

__global__ void k_softmax_sum(const float *x, const float *max, float *sum, int64_t rows,
                              int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        double s = row_exp_sum(x + r * c, c, max[r], lane);
        if (lane == 0) sum[r] = (float)s;
    }
}

static void cuda_softmax_sum(void *ctx, const mg_tensor *x, const mg_tensor *max, mg_tensor *sum) {
    (void)ctx;
    int64_t rows = sum->numel;
    if (rows == 0) return;
    k_softmax_sum<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(x->data, max->data, sum->data,
                                                                  rows, last_dim(x));
    LAUNCHED("softmax_sum kernel");
}

/* sum_j dy (log) or sum_j dy y of one row, every lane gets it */
__device__ double row_dot(const float *y, const float *dy, int64_t c, bool as_log, int lane) {
    double s = 0;
    for (int64_t j = lane; j < c; j += 32) s += as_log ? (double)dy[j] : (double)dy[j] * y[j];
    return warp_sum(s);
}

__global__ void k_softmax_dot(const float *y, const float *dy, bool as_log, float *dot,
                              int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        double s = row_dot(y + r * c, dy + r * c, c, as_log, lane);
        if (lane == 0) dot[r] = (float)s;
    }
}

static void cuda_softmax_dot(void *ctx, const mg_tensor *y, const mg_tensor *dy, bool as_log,
                             mg_tensor *dot) {
    (void)ctx;
    int64_t rows = dot->numel;
    if (rows == 0) return;
    k_softmax_dot<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(y->data, dy->data, as_log,
                                                                  dot->data, rows, last_dim(y));
    LAUNCHED("softmax_dot kernel");
}

__global__ void k_softmax_backward(const float *y, const float *dy, const float *dot, bool as_log,
                                   float *dx, int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *yr = y + r * c, *g = dy + r * c;
        float d = dot ? dot[r] : (float)row_dot(yr, g, c, as_log, lane);
        for (int64_t j = lane; j < c; j += 32)
            dx[r * c + j] = as_log ? g[j] - expf(yr[j]) * d : yr[j] * (g[j] - d);
    }
}

static void cuda_softmax_backward(void *ctx, const mg_tensor *y, const mg_tensor *dy,
                                  const mg_tensor *dot, bool as_log, mg_tensor *dx) {
    (void)ctx;
    int64_t c = last_dim(y);
    if (c == 0 || y->numel == 0) return;
    int64_t rows = y->numel / c;
    k_softmax_backward<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
        y->data, dy->data, dot ? dot->data : NULL, as_log, dx->data, rows, c);
    LAUNCHED("softmax_backward kernel");
}

/* ---- layer norm ------------------------------------------------------------------ */

/* mean NULL: sum of the row; else the sum of its squared deviations */
__device__ double row_moment(const float *x, int64_t c, const float *mean, int64_t r, int lane) {
    double s = 0;
    for (int64_t j = lane; j < c; j += 32) {
        double d = mean ? (double)(x[j] - mean[r]) : (double)x[j];
        s += mean ? d * d : d;
    }
    return warp_sum(s);
}

__global__ void k_layer_norm(const float *x, const float *w, const float *b, float eps,
                             const float *moments, int64_t n, float *stats, float *y, int64_t rows,
                             int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *xr = x + r * c;
        float mean, rstd;
        if (moments) {
            mean = moments[r];
            rstd = (float)(1.0 / sqrt(moments[rows + r] / (double)n + eps));
        } else {
            mean = c ? (float)(row_moment(xr, c, NULL, r, lane) / c) : 0.0f;
            double sq = 0;
            for (int64_t j = lane; j < c; j += 32) {
                float d = xr[j] - mean;
                sq += (double)d * d;
            }
            sq = warp_sum(sq);
            rstd = (float)(1.0 / sqrt((c ? sq / c : 0.0) + eps));
        }
        if (lane == 0) {
            stats[r] = mean;
            stats[rows + r] = rstd;
        }
        for (int64_t j = lane; j < c; j += 32) {
            float v = (xr[j] - mean) * rstd;
            if (w) v *= w[j];
            if (b) v += b[j];
            y[r * c + j] = v;
        }
    }
}

static void cuda_layer_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, const mg_tensor *b,
                            float eps, const mg_tensor *moments, int64_t n, mg_tensor *stats,
                            mg_tensor *y) {
    (void)ctx;
    int64_t rows = stats->numel / 2;
    if (rows == 0) return;
    k_layer_norm<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
        x->data, w ? w->data : NULL, b ? b->data : NULL, eps, moments ? moments->data : NULL, n,
        stats->data, y->data, rows, last_dim(x));
    LAUNCHED("layer_norm kernel");
}

__global__ void k_layer_norm_moments(const float *x, const float *mean, float *out, int64_t rows,
                                     int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        double s = row_moment(x + r * c, c, mean, r, lane);
        if (lane == 0) out[r] = (float)s;
    }
}

static void cuda_layer_norm_moments(void *ctx, const mg_tensor *x, const mg_tensor *mean,
                                    mg_tensor *out) {
    (void)ctx;
    int64_t rows = out->numel;
    if (rows == 0) return;
    k_layer_norm_moments<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
        x->data, mean ? mean->data : NULL, out->data, rows, last_dim(x));
    LAUNCHED("layer_norm_moments kernel");
}

/* (sum_j g, sum_j g xhat) of one row, g = dy w; every lane gets both */
__device__ void ln_row_sums(const float *xr, const float *g, const float *w, int64_t c, float mean,
                            float rstd, int lane, double *a, double *b) {
    double sa = 0, sb = 0;
    for (int64_t j = lane; j < c; j += 32) {
        float gj = w ? g[j] * w[j] : g[j];
        sa += gj;
        sb += (double)gj * ((xr[j] - mean) * rstd);
    }
    *a = warp_sum(sa);
    *b = warp_sum(sb);
}

__global__ void k_layer_norm_backward_sums(const float *x, const float *w, const float *dy,
                                           const float *stats, float *sums, int64_t rows,
                                           int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        double a, b;
        ln_row_sums(x + r * c, dy + r * c, w, c, stats[r], stats[rows + r], lane, &a, &b);
        if (lane == 0) {
            sums[r] = (float)a;
            sums[rows + r] = (float)b;
        }
    }
}

static void cuda_layer_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                          const mg_tensor *dy, const mg_tensor *stats,
                                          mg_tensor *sums) {
    (void)ctx;
    int64_t rows = stats->numel / 2;
    if (rows == 0) return;
    k_layer_norm_backward_sums<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
        x->data, w ? w->data : NULL, dy->data, stats->data, sums->data, rows, last_dim(x));
    LAUNCHED("layer_norm_backward_sums kernel");
}

__global__ void k_layer_norm_dx(const float *x, const float *w, const float *dy, const float *stats,
                                const float *sums, int64_t n, float *dx, int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *xr = x + r * c, *g = dy + r * c;
        float mean = stats[r], rstd = stats[rows + r];
        double a, b;
        if (sums) {
            a = sums[r];
            b = sums[rows + r];
        } else {
            ln_row_sums(xr, g, w, c, mean, rstd, lane, &a, &b);
        }
        float ma = n ? (float)(a / n) : 0.0f, mb = n ? (float)(b / n) : 0.0f;
        for (int64_t j = lane; j < c; j += 32) {
            float gj = w ? g[j] * w[j] : g[j];
            dx[r * c + j] = rstd * (gj - ma - (xr[j] - mean) * rstd * mb);
        }
    }
}

/* partial[s][j] for column j over the rows of split s: dy xhat (dw) and dy (db) */
__global__ void k_layer_norm_dwdb_partial(const float *x, const float *dy, const float *stats,
                                          int64_t rows, int64_t c, int64_t chunk, double *pw,
                                          double *pb) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
    if (j >= c) return;
    int64_t r0 = s * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double aw = 0, ab = 0;
    for (int64_t r = r0; r < r1; r++) {
        float g = dy[r * c + j];
        aw += (double)g * ((x[r * c + j] - stats[r]) * stats[rows + r]);
        ab += g;
    }
    pw[s * c + j] = aw;
    pb[s * c + j] = ab;
}

__global__ void k_layer_norm_dwdb_finish(const double *pw, const double *pb, int64_t splits,
                                         int64_t c, float *dw, float *db) {
    FOR_EACH(j, c) {
        double aw = 0, ab = 0;
        for (int64_t s = 0; s < splits; s++) {
            aw += pw[s * c + j];
            ab += pb[s * c + j];
        }
        if (dw) dw[j] = (float)aw;
        if (db) db[j] = (float)ab;
    }
}

static void cuda_layer_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                     const mg_tensor *dy, const mg_tensor *stats,
                                     const mg_tensor *sums, int64_t n, mg_tensor *dx, mg_tensor *dw,
                                     mg_tensor *db) {
    (void)ctx;
    int64_t c = last_dim(x), rows = stats->numel / 2;
    if (dx && rows > 0 && c > 0) {
        k_layer_norm_dx<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
            x->data, w ? w->data : NULL, dy->data, stats->data, sums ? sums->data : NULL, n,
            dx->data, rows, c);
        if (!LAUNCHED("layer_norm_backward kernel")) return;
    }
    if ((!dw && !db) || c == 0) return;
    int64_t splits = rows > 0 ? ceil_div(rows, 64) : 1; /* 64 rows a thread */
    if (splits > 256) splits = 256;
    int64_t chunk = rows > 0 ? ceil_div(rows, splits) : 0;
    double *scratch = mg_cu_scratch(2 * splits * c + 1);
    if (!scratch) return;
    double *pw = scratch + 1, *pb = pw + splits * c;
    dim3 grid((unsigned)ceil_div(c, THREADS), (unsigned)splits);
    k_layer_norm_dwdb_partial<<<grid, THREADS, 0, mg_cu.stream>>>(x->data, dy->data, stats->data,
                                                                  rows, c, chunk, pw, pb);
    if (!LAUNCHED("layer_norm_backward kernel")) return;
    k_layer_norm_dwdb_finish<<<grid_for(c), THREADS, 0, mg_cu.stream>>>(
        pw, pb, splits, c, dw ? dw->data : NULL, db ? db->data : NULL);
    LAUNCHED("layer_norm_backward kernel");
}

/* ---- embedding ------------------------------------------------------------------- */

__global__ void k_embedding(const float *ids, const float *table, int64_t v0, int64_t vl, int64_t v,
                            float *out, int64_t n, int64_t c) {
    FOR_EACH(e, n * c) {
        int64_t i = e / c, j = e % c, row = index_of(ids[i], v);
        out[e] = row >= v0 && row < v0 + vl ? table[(row - v0) * c + j] : 0.0f;
    }
}

/* partial[block] = the block's count of bad ids */
__global__ void k_count_bad(const float *ids, int64_t n, int64_t v, double *partial) {
    double bad = 0;
    FOR_EACH(i, n) bad += index_of(ids[i], v) < 0;
    bad = block_combine(false, bad);
    if (threadIdx.x == 0) partial[blockIdx.x] = bad;
}

/* bad ids (or labels) among n: a sum handed to the host */
static int64_t count_bad(const float *ids, int64_t n, int64_t v) {
    if (n <= 0) return 0;
    unsigned blocks = grid_for(n);
    double *scratch = mg_cu_scratch((int64_t)blocks + 1);
    if (!scratch) return 0;
    k_count_bad<<<blocks, THREADS, 0, mg_cu.stream>>>(ids, n, v, scratch + 1);
    if (!LAUNCHED("count kernel")) return 0;
    return (int64_t)mg_cu_sum_to_host(blocks);
}

static int64_t cuda_embedding(void *ctx, const mg_tensor *ids, const mg_tensor *table, int64_t v0,
                              int64_t v, mg_tensor *out) {
    (void)ctx;
    int64_t c = last_dim(out), vl = table->ndim ? table->shape[0] : 0;
    if (out->numel > 0) {
        k_embedding<<<grid_for(out->numel), THREADS, 0, mg_cu.stream>>>(
            ids->data, table->data, v0, vl, v, out->data, ids->numel, c);
        if (!LAUNCHED("embedding kernel")) return 0;
    }
    return count_bad(ids->data, ids->numel, v);
}

/* Thread (column j, vocab part p) adds, in id order, the rows of dout whose id
 * falls in part p of the shard: every element has one writer, the sums repeat. */
__global__ void k_embedding_backward(const float *ids, const float *dout, int64_t n, int64_t c,
                                     int64_t v0, int64_t vl, int64_t part, float *dtable) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    int64_t lo = v0 + blockIdx.y * part, hi = lo + part < v0 + vl ? lo + part : v0 + vl;
    for (int64_t r = lo; r < hi; r++) dtable[(r - v0) * c + j] = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        int64_t row = index_of(ids[i], v0 + vl);
        if (row >= lo && row < hi) dtable[(row - v0) * c + j] += dout[i * c + j];
    }
}

static void cuda_embedding_backward(void *ctx, const mg_tensor *ids, const mg_tensor *dout,
                                    int64_t v0, mg_tensor *dtable) {
    (void)ctx;
    int64_t c = last_dim(dtable), vl = dtable->ndim ? dtable->shape[0] : 0;
    if (dtable->numel == 0) return;
    int64_t parts = vl < 64 ? vl : 64, part = ceil_div(vl, parts);
    dim3 grid((unsigned)ceil_div(c, THREADS), (unsigned)ceil_div(vl, part));
    k_embedding_backward<<<grid, THREADS, 0, mg_cu.stream>>>(ids->data, dout->data, ids->numel, c,
                                                             v0, vl, part, dtable->data);
    LAUNCHED("embedding_backward kernel");
}

/* ---- cross-entropy ------------------------------------------------------------------ */

/* max and log(sum(exp(x - max))) of one row of c, by one warp (every lane gets them) */
__device__ void row_logsumexp(const float *x, int64_t c, int lane, float *m_out, float *lse_out) {
    float m = row_max(x, c, lane);
    double s = row_exp_sum(x, c, m, lane);
    *m_out = m;
    *lse_out = (float)log(s);
}

/* Each warp sums -log_softmax[label] over its rows and counts the bad labels:
 * loss[w] and bad[w] (lane 0 writes). */
__global__ void k_cross_entropy(const float *x, const float *labels, int64_t rows, int64_t c,
                                double *bad_out, double *loss_out) {
    int lane = threadIdx.x & 31;
    double loss = 0, bad = 0;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        int64_t y = index_of(labels[r], c);
        if (y < 0) {
            bad += 1;
            continue;
        }
        const float *xr = x + r * c;
        float m, lse;
        row_logsumexp(xr, c, lane, &m, &lse);
        loss -= (double)(xr[y] - m - lse);
    }
    if (lane == 0) {
        bad_out[WARP_ID] = bad;
        loss_out[WARP_ID] = loss;
    }
}

/* out = scale * the warps' losses summed in a fixed order */
__global__ void k_cross_entropy_finish(const double *loss, int64_t warps, float scale, float *out) {
    double acc = 0;
    for (int64_t i = threadIdx.x; i < warps; i += blockDim.x) acc += loss[i];
    acc = block_combine(false, acc);
    if (threadIdx.x == 0) out[0] = (float)(scale * acc);
}

static int64_t cuda_cross_entropy(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                  float scale, mg_tensor *out) {
    (void)ctx;
    int64_t c = last_dim(logits);
    int64_t rows = c ? logits->numel / c : labels->numel;
    unsigned blocks = row_blocks(rows > 0 ? rows : 1);
    int64_t warps = (int64_t)blocks * THREADS / 32;
    double *scratch = mg_cu_scratch(2 * warps + 1);
    if (!scratch) return 0;
    double *bad = scratch + 1, *loss = bad + warps;
    k_cross_entropy<<<blocks, THREADS, 0, mg_cu.stream>>>(logits->data, labels->data, rows, c, bad,
                                                          loss);
    if (!LAUNCHED("cross_entropy kernel")) return 0;
    k_cross_entropy_finish<<<1, THREADS, 0, mg_cu.stream>>>(loss, warps, scale, out->data);
    if (!LAUNCHED("cross_entropy kernel")) return 0;
    return (int64_t)mg_cu_sum_to_host(warps);
}

__global__ void k_cross_entropy_sums(const float *x, const float *labels, const float *max,
                                     int64_t v0, int64_t v, float *sums, int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        double s = row_exp_sum(x + r * c, c, max[r], lane);
        int64_t y = index_of(labels[r], v);
        if (lane == 0) {
            sums[r] = (float)s;
            sums[rows + r] = y >= v0 && y < v0 + c ? x[r * c + y - v0] : 0.0f;
        }
    }
}

static int64_t cuda_cross_entropy_sums(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                       const mg_tensor *max, int64_t v0, int64_t v,
                                       mg_tensor *sums) {
    (void)ctx;
    int64_t rows = labels->numel;
    if (rows == 0) return 0;
    k_cross_entropy_sums<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
        logits->data, labels->data, max->data, v0, v, sums->data, rows, last_dim(logits));
    if (!LAUNCHED("cross_entropy_sums kernel")) return 0;
    return count_bad(labels->data, rows, v);
}

/* dlogits = scale * (softmax(logits) - onehot(labels)); rows with a bad label get 0 */
__global__ void k_cross_entropy_backward(const float *x, const float *labels, const float *lse,
                                         int64_t v0, int64_t v, int64_t rows, int64_t c,
                                         float scale, float *g) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *xr = x + r * c;
        float *gr = g + r * c;
        int64_t y = index_of(labels[r], v);
        if (y < 0) {
            for (int64_t j = lane; j < c; j += 32) gr[j] = 0.0f;
            continue;
        }
        float m = 0, l;
        if (lse)
            l = lse[r];
        else
            row_logsumexp(xr, c, lane, &m, &l);
        for (int64_t j = lane; j < c; j += 32) {
            float p = lse ? scale * expf(xr[j] - l) : scale * expf(xr[j] - m - l);
            if (j == y - v0) p -= scale;
            gr[j] = p;
        }
    }
}

static void cuda_cross_entropy_backward(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                        const mg_tensor *lse, int64_t v0, int64_t v, float scale,
                                        mg_tensor *dlogits) {
    (void)ctx;
    int64_t c = last_dim(logits);
    if (c == 0 || logits->numel == 0) return;
    int64_t rows = logits->numel / c;
    k_cross_entropy_backward<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
        logits->data, labels->data, lse ? lse->data : NULL, v0, v, rows, c, scale, dlogits->data);
    LAUNCHED("cross_entropy_backward kernel");
}

void mg_cu_nn_iface(struct mg_backend_iface *f) {
    f->softmax = cuda_softmax;
    f->softmax_sum = cuda_softmax_sum;
    f->softmax_backward = cuda_softmax_backward;
    f->softmax_dot = cuda_softmax_dot;
    f->layer_norm = cuda_layer_norm;
    f->layer_norm_moments = cuda_layer_norm_moments;
    f->layer_norm_backward = cuda_layer_norm_backward;
    f->layer_norm_backward_sums = cuda_layer_norm_backward_sums;
    f->embedding = cuda_embedding;
    f->embedding_backward = cuda_embedding_backward;
    f->cross_entropy = cuda_cross_entropy;
    f->cross_entropy_sums = cuda_cross_entropy_sums;
    f->cross_entropy_backward = cuda_cross_entropy_backward;
}
