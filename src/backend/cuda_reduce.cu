/* cuda_reduce.cu: the CUDA backend's reductions: sum and max over any set of
 * dims (sums in double, NaN wins max), sum of squares, log_softmax and
 * cross-entropy with its backward (bad labels counted, their rows get 0).
 *
 * Deterministic: the split of the work depends only on the shapes and the
 * device, partials are combined in a fixed order, no atomics, so a run repeats
 * bitwise. Calls that return a value to the host wait for the stream.
 *
 * Exports: mg_cu_reduce_iface (cuda_internal.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda_internal.h"

/* ---- scratch -------------------------------------------------------------------- */

/* double scratch of at least n entries (grows rarely: a new size syncs the device) */
static double *partial_scratch(int64_t n) {
    size_t want = (size_t)(n > 0 ? n : 1);
    if (mg_cu.partial_cap < want) {
        if (mg_cu.partial) cudaFree(mg_cu.partial);
        mg_cu.partial = NULL;
        mg_cu.partial_cap = 0;
        if (!cuda_ok("cudaMalloc (reduction scratch)",
                     cudaMalloc((void **)&mg_cu.partial, want * sizeof(double))))
            return NULL;
        mg_cu.partial_cap = want;
    }
    return mg_cu.partial;
}

/* copy n doubles of device memory to the pinned buffer and wait */
static bool read_back(const double *dev, int n) {
    if (!cuda_ok("cudaMemcpyAsync (result)",
                 cudaMemcpyAsync(mg_cu.pinned, dev, (size_t)n * sizeof(double),
                                 cudaMemcpyDeviceToHost, mg_cu.stream)))
        return false;
    return cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(mg_cu.stream));
}

/* ---- reductions ----------------------------------------------------------------- */

/* sum, or max where NaN wins (as in torch and cpu.c) */
__device__ __forceinline__ double combine(bool max, double acc, double v) {
    if (!max) return acc + v;
    return (v > acc || v != v) ? v : acc;
}

/* Reduces `acc` over the block (THREADS threads) in a fixed tree; the result is
 * valid in thread 0. */
__device__ double block_combine(bool max, double acc) {
    __shared__ double sh[THREADS];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = combine(max, sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads(); /* sh is reused by the next call */
    return r;
}

__device__ __forceinline__ int64_t unravel_offset(int64_t idx, int nd, const dims8 &size,
                                                  const dims8 &stride) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += idx % size.v[d] * stride.v[d];
        idx /= size.v[d];
    }
    return off;
}

/* x seen as kept dims (ks sizes, kx strides) and reduced dims (rs, rx). */
typedef struct {
    int nk, nr;
    dims8 ks, kx, rs, rx;
    int64_t kept, red;
} reduce_shape;

/* Inner dims reduced: one block per (out element o, split s), threads stride the
 * reduced elements (consecutive threads, consecutive addresses). Writes out[o]
 * when there is one split, else partial[o * splits + s]. */
__global__ void k_reduce_blocks(const float *x, reduce_shape p, bool max, int64_t splits,
                                int64_t chunk, float *out, double *partial) {
    for (int64_t task = blockIdx.x; task < p.kept * splits; task += gridDim.x) {
        int64_t o = task / splits, s = task % splits;
        int64_t base = unravel_offset(o, p.nk, p.ks, p.kx);
        int64_t r0 = s * chunk, r1 = r0 + chunk < p.red ? r0 + chunk : p.red;
        double acc = max ? -INFINITY : 0.0;
        for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
            acc = combine(max, acc, (double)x[base + unravel_offset(r, p.nr, p.rs, p.rx)]);
        acc = block_combine(max, acc);
        if (threadIdx.x == 0) {
            if (splits == 1) out[o] = (float)acc;
            else partial[o * splits + s] = acc;
        }
    }
}

/* Inner dim kept: one thread per (split s, out element o); neighbouring threads
 * read neighbouring elements. Writes out[o] or partial[s * kept + o]. */
__global__ void k_reduce_threads(const float *x, reduce_shape p, bool max, int64_t splits,
                                 int64_t chunk, float *out, double *partial) {
    FOR_EACH(t, p.kept * splits) {
        int64_t s = t / p.kept, o = t % p.kept;
        int64_t base = unravel_offset(o, p.nk, p.ks, p.kx);
        int64_t r0 = s * chunk, r1 = r0 + chunk < p.red ? r0 + chunk : p.red;
        double acc = max ? -INFINITY : 0.0;
        for (int64_t r = r0; r < r1; r++)
            acc = combine(max, acc, (double)x[base + unravel_offset(r, p.nr, p.rs, p.rx)]);
        if (splits == 1) out[o] = (float)acc;
        else partial[s * p.kept + o] = acc;
    }
}

/* out[o] = the partials of o combined in split order */
__global__ void k_reduce_finish(const double *partial, int64_t kept, int64_t splits,
                                bool split_major, bool max, float *out) {
    FOR_EACH(o, kept) {
        double acc = max ? -INFINITY : 0.0;
        for (int64_t s = 0; s < splits; s++)
            acc = combine(max, acc, partial[split_major ? s * kept + o : o * splits + s]);
        out[o] = (float)acc;
    }
}

__global__ void k_fill_value(float *p, int64_t n, float v) {
    FOR_EACH(i, n) p[i] = v;
}

/* out has x's ndim, each dim equal to x's (kept) or 1 (reduced) */
static void reduce(const mg_tensor *x, mg_tensor *out, bool max) {
    if (out->numel <= 0) return;
    if (x->numel == 0) { /* empty reduction: 0 or -inf */
        k_fill_value<<<grid_for(out->numel), THREADS, 0, mg_cu.stream>>>(
            out->data, out->numel, max ? -INFINITY : 0.0f);
        LAUNCHED("reduce kernel");
        return;
    }
    /* merge x's dims into runs all kept or all reduced (size-1 dims dropped) */
    int64_t xs[MG_MAX_DIMS];
    mg_shape_strides(x->ndim, x->shape, xs);
    int64_t n[MG_MAX_DIMS], st[MG_MAX_DIMS];
    bool red[MG_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (x->shape[i] == 1) continue;
        bool r = out->shape[i] == 1;
        if (k > 0 && red[k - 1] == r) {
            n[k - 1] *= x->shape[i];
            st[k - 1] = xs[i];
            continue;
        }
        n[k] = x->shape[i];
        st[k] = xs[i];
        red[k] = r;
        k++;
    }
    reduce_shape p;
    memset(&p, 0, sizeof p);
    p.kept = out->numel;
    p.red = x->numel / out->numel;
    for (int i = 0; i < k; i++) {
        if (red[i]) {
            p.rs.v[p.nr] = n[i];
            p.rx.v[p.nr++] = st[i];
        } else {
            p.ks.v[p.nk] = n[i];
            p.kx.v[p.nk++] = st[i];
        }
    }
    bool inner_reduced = k == 0 || red[k - 1];
    int64_t sm = mg_cu.sm_count > 0 ? mg_cu.sm_count : 16, splits = 1;
    if (inner_reduced) {
        int64_t want_blocks = sm * 8;
        if (p.kept < want_blocks) splits = ceil_div(want_blocks, p.kept);
        int64_t most = ceil_div(p.red, 4 * THREADS); /* at least 4 elements a thread */
        if (splits > most) splits = most;
    } else {
        int64_t want_threads = sm * 2048;
        if (p.kept < want_threads) splits = ceil_div(want_threads, p.kept);
        int64_t most = ceil_div(p.red, 32); /* at least 32 elements a thread */
        if (splits > most) splits = most;
    }
    if (splits < 1) splits = 1;
    int64_t chunk = ceil_div(p.red, splits);
    double *partial = NULL;
    if (splits > 1 && !(partial = partial_scratch(p.kept * splits))) return;
    if (inner_reduced) {
        int64_t tasks = p.kept * splits;
        unsigned blocks = (unsigned)(tasks < 65535 * 16 ? tasks : 65535 * 16);
        k_reduce_blocks<<<blocks, THREADS, 0, mg_cu.stream>>>(x->data, p, max, splits, chunk,
                                                            out->data, partial);
    } else {
        k_reduce_threads<<<grid_for(p.kept * splits), THREADS, 0, mg_cu.stream>>>(
            x->data, p, max, splits, chunk, out->data, partial);
    }
    if (!LAUNCHED("reduce kernel") || splits == 1) return;
    k_reduce_finish<<<grid_for(p.kept), THREADS, 0, mg_cu.stream>>>(partial, p.kept, splits,
                                                                   !inner_reduced, max, out->data);
    LAUNCHED("reduce kernel");
}

static void cuda_reduce_sum(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx;
    reduce(x, out, false);
}

static void cuda_reduce_max(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx;
    reduce(x, out, true);
}

/* partial[block] = sum of x^2 over the block's grid-stride share */
__global__ void k_sum_squares(const float *x, int64_t n, double *partial) {
    double acc = 0;
    FOR_EACH(i, n) acc += (double)x[i] * x[i];
    acc = block_combine(false, acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/* result[0] = sum of the n partials, one block, fixed order */
__global__ void k_sum_partials(const double *partial, int64_t n, double *result) {
    double acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    acc = block_combine(false, acc);
    if (threadIdx.x == 0) result[0] = acc;
}

static double cuda_sum_squares(void *ctx, const mg_tensor *x) {
    (void)ctx;
    int64_t n = x->numel;
    if (n <= 0) return 0.0;
    unsigned blocks = grid_for(ceil_div(n, 4)); /* a few elements a thread */
    double *partial = partial_scratch((int64_t)blocks + 1);
    if (!partial) return 0.0;
    k_sum_squares<<<blocks, THREADS, 0, mg_cu.stream>>>(x->data, n, partial + 1);
    if (!LAUNCHED("sum_squares kernel")) return 0.0;
    k_sum_partials<<<1, THREADS, 0, mg_cu.stream>>>(partial + 1, blocks, partial);
    if (!LAUNCHED("sum_squares kernel") || !read_back(partial, 1)) return 0.0;
    return mg_cu.pinned[0];
}

/* ---- softmax and cross-entropy -------------------------------------------------- */

__device__ __forceinline__ float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* max and log(sum(exp(x - max))) of one row of c, by one warp (every lane gets them) */
__device__ void row_logsumexp(const float *x, int64_t c, int lane, float *m_out, float *lse_out) {
    float m = -INFINITY;
    for (int64_t j = lane; j < c; j += 32) m = max_nan(m, x[j]);
    m = warp_max(m);
    double s = 0;
    for (int64_t j = lane; j < c; j += 32) s += expf(x[j] - m);
    s = warp_sum(s);
    *m_out = m;
    *lse_out = (float)log(s);
}

/* class index of a label, or -1 when it is not an integer in [0, c) */
__device__ __forceinline__ int64_t label_class(float label, int64_t c) {
    if (!(label >= 0.0f) || label >= (float)c || label != floorf(label)) return -1;
    return (int64_t)label;
}

#define WARP_ID ((int64_t)(blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5)
#define WARPS ((int64_t)gridDim.x * blockDim.x >> 5)

__global__ void k_log_softmax(const float *x, float *out, int64_t rows, int64_t c) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *xr = x + r * c;
        float m, lse;
        row_logsumexp(xr, c, lane, &m, &lse);
        for (int64_t j = lane; j < c; j += 32) out[r * c + j] = xr[j] - m - lse;
    }
}

static unsigned row_blocks(int64_t rows) { return grid_for(rows * 32); } /* a warp a row */

static void cuda_log_softmax(void *ctx, const mg_tensor *x, mg_tensor *out) {
    (void)ctx;
    int64_t c = x->ndim ? x->shape[x->ndim - 1] : 1;
    if (c == 0 || x->numel == 0) return;
    int64_t rows = x->numel / c;
    k_log_softmax<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(x->data, out->data, rows, c);
    LAUNCHED("log_softmax kernel");
}

/* Each warp sums -log_softmax[label] over its rows and counts the bad labels:
 * partial[2w] = loss, partial[2w + 1] = bad rows (lane 0 writes). */
__global__ void k_cross_entropy(const float *x, const float *labels, int64_t rows, int64_t c,
                                double *partial) {
    int lane = threadIdx.x & 31;
    double loss = 0, bad = 0;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        int64_t y = label_class(labels[r], c);
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
        partial[2 * WARP_ID] = loss;
        partial[2 * WARP_ID + 1] = bad;
    }
}

/* result = (loss, bad) summed over the warps in a fixed order; out = scale * loss */
__global__ void k_cross_entropy_finish(const double *partial, int64_t warps, float scale,
                                       float *out, double *result) {
    double loss = 0, bad = 0;
    for (int64_t i = threadIdx.x; i < warps; i += blockDim.x) {
        loss += partial[2 * i];
        bad += partial[2 * i + 1];
    }
    loss = block_combine(false, loss);
    bad = block_combine(false, bad);
    if (threadIdx.x == 0) {
        out[0] = (float)(scale * loss);
        result[0] = bad;
    }
}

static int64_t cuda_cross_entropy(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                  float scale, mg_tensor *out) {
    (void)ctx;
    int64_t c = logits->ndim ? logits->shape[logits->ndim - 1] : 1;
    int64_t rows = c ? logits->numel / c : labels->numel;
    unsigned blocks = row_blocks(rows > 0 ? rows : 1);
    int64_t warps = (int64_t)blocks * THREADS / 32;
    double *partial = partial_scratch(2 * warps + 1);
    if (!partial) return 0;
    k_cross_entropy<<<blocks, THREADS, 0, mg_cu.stream>>>(logits->data, labels->data, rows, c,
                                                         partial + 1);
    if (!LAUNCHED("cross_entropy kernel")) return 0;
    k_cross_entropy_finish<<<1, THREADS, 0, mg_cu.stream>>>(partial + 1, warps, scale, out->data,
                                                          partial);
    if (!LAUNCHED("cross_entropy kernel") || !read_back(partial, 1)) return 0;
    return (int64_t)mg_cu.pinned[0];
}

/* dlogits = scale * (softmax(logits) - onehot(labels)); rows with a bad label get 0 */
__global__ void k_cross_entropy_backward(const float *x, const float *labels, int64_t rows,
                                         int64_t c, float scale, float *g) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        const float *xr = x + r * c;
        float *gr = g + r * c;
        int64_t y = label_class(labels[r], c);
        if (y < 0) {
            for (int64_t j = lane; j < c; j += 32) gr[j] = 0.0f;
            continue;
        }
        float m, lse;
        row_logsumexp(xr, c, lane, &m, &lse);
        for (int64_t j = lane; j < c; j += 32) {
            float v = scale * expf(xr[j] - m - lse);
            if (j == y) v -= scale;
            gr[j] = v;
        }
    }
}

static void cuda_cross_entropy_backward(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                        float scale, mg_tensor *dlogits) {
    (void)ctx;
    int64_t c = logits->ndim ? logits->shape[logits->ndim - 1] : 1;
    if (c == 0 || logits->numel == 0) return;
    int64_t rows = logits->numel / c;
    k_cross_entropy_backward<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(
        logits->data, labels->data, rows, c, scale, dlogits->data);
    LAUNCHED("cross_entropy_backward kernel");
}

void mg_cu_reduce_iface(struct mg_backend_iface *f) {
    f->reduce_sum = cuda_reduce_sum;
    f->reduce_max = cuda_reduce_max;
    f->sum_squares = cuda_sum_squares;
    f->log_softmax = cuda_log_softmax;
    f->cross_entropy = cuda_cross_entropy;
    f->cross_entropy_backward = cuda_cross_entropy_backward;
}
