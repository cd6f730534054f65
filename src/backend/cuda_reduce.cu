/* cuda_reduce.cu: the CUDA backend's reductions: sum and max over any set of
 * dims (sums in double, NaN wins max), sum of squares, and the device scratch
 * the kernels of this backend keep their partial sums in.
 *
 * Deterministic: the split of the work depends only on the shapes and the
 * device, partials are combined in a fixed order, no atomics, so a run repeats
 * bitwise. Calls that return a value to the host wait for the stream.
 *
 * Exports: mg_cu_reduce_iface, mg_cu_scratch, mg_cu_sum_to_host (cuda_internal.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda_internal.h"

/* ---- scratch -------------------------------------------------------------------- */

/* double scratch of at least n entries (grows rarely: a new size syncs the device) */
double *mg_cu_scratch(int64_t n) {
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
    if (splits > 1 && !(partial = mg_cu_scratch(p.kept * splits))) return;
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

/* The n partials at scratch + 1 summed into scratch[0] and handed to the host. */
double mg_cu_sum_to_host(int64_t n) {
    double *scratch = mg_cu_scratch(n + 1);
    if (!scratch) return 0.0;
    k_sum_partials<<<1, THREADS, 0, mg_cu.stream>>>(scratch + 1, n, scratch);
    if (!LAUNCHED("sum kernel") || !read_back(scratch, 1)) return 0.0;
    return mg_cu.pinned[0];
}

static double cuda_sum_squares(void *ctx, const mg_tensor *x) {
    (void)ctx;
    int64_t n = x->numel;
    if (n <= 0) return 0.0;
    unsigned blocks = grid_for(ceil_div(n, 4)); /* a few elements a thread */
    double *partial = mg_cu_scratch((int64_t)blocks + 1);
    if (!partial) return 0.0;
    k_sum_squares<<<blocks, THREADS, 0, mg_cu.stream>>>(x->data, n, partial + 1);
    if (!LAUNCHED("sum_squares kernel")) return 0.0;
    return mg_cu_sum_to_host(blocks);
}

void mg_cu_reduce_iface(struct mg_backend_iface *f) {
    f->reduce_sum = cuda_reduce_sum;
    f->reduce_max = cuda_reduce_max;
    f->sum_squares = cuda_sum_squares;
}
