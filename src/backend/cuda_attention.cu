/* cuda_attention.cu: fused attention on the GPU, with the semantics of
 * cpu_attention.c (global causal positions q0, k0; a query with no key gets
 * o = 0 and lse = -inf).
 *
 * A block is ROWS warps, one query row each (the forward and dq) or one key
 * row each (dk, dv). The block walks the other side in tiles that it loads
 * into shared memory together; each warp keeps its row's online softmax (the
 * running max m and sum l) and NACC output columns per lane in registers, so
 * no (Tq, Tk) matrix exists and nothing but lse and rowsum(dO o) is kept per
 * row. Heads wider than 32 * NACC columns take several passes. Every sum has
 * a fixed order and there are no atomics: a run repeats bitwise.
 *
 * Grouped-query (k, v with KV heads, KV dividing q's H): a query slice reads
 * its group's k, v slice in place; the dk, dv kernel's warps walk the
 * group's query heads one after another for their key row.
 *
 * Exports: mg_cu_attention_iface (cuda_internal.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/cuda_internal.h"

#define ROWS 8            /* rows per block, a warp each */
#define NACC 8            /* output columns per lane and pass */
#define SMEM_FLOATS 12288 /* 48 KiB: the shared memory a block may take by default */

typedef struct {
    int64_t tq, tk, d, dv, q0, k0, slices;
    int64_t h, kv; /* query heads and k, v heads: kv divides h */
    float scale;
    bool causal;
} att_shape;

/* the k, v slice (batch, kv head) that query slice z (batch, head) reads */
__device__ __forceinline__ int64_t kv_slice(const att_shape &s, int64_t z) {
    return s.h == s.kv ? z : z / s.h * s.kv + z % s.h / (s.h / s.kv);
}

/* query i sees keys [0, key_end) */
__device__ __forceinline__ int64_t key_end(const att_shape &s, int64_t i) {
    if (!s.causal) return s.tk;
    int64_t e = s.q0 + i - s.k0 + 1;
    return e < 0 ? 0 : (e < s.tk ? e : s.tk);
}

/* key j is seen by queries [query_start, tq) */
__device__ __forceinline__ int64_t query_start(const att_shape &s, int64_t j) {
    if (!s.causal) return 0;
    int64_t b = s.k0 + j - s.q0;
    return b < 0 ? 0 : (b < s.tq ? b : s.tq);
}

/* a . b over n floats, by one warp (every lane gets it) */
__device__ __forceinline__ float warp_dot(const float *a, const float *b, int64_t n, int lane) {
    double acc = 0;
    for (int64_t e = lane; e < n; e += 32) acc += (double)a[e] * b[e];
    return (float)warp_sum(acc);
}

/* rows [r0, r0 + n) of a (.., width) matrix into shared memory */
__device__ __forceinline__ void load_tile(float *dst, const float *src, int64_t r0, int64_t n,
                                          int64_t width) {
    for (int64_t e = threadIdx.x; e < n * width; e += blockDim.x) dst[e] = src[r0 * width + e];
}

/* rows [r0, r0 + n) of a (.., wa) and b (.., wb) into the block's two tiles,
 * between barriers (the tiles were in use until every warp got here) */
__device__ __forceinline__ void load_tiles(float *ta, const float *a, int64_t wa, float *tb,
                                           const float *b, int64_t wb, int64_t r0, int64_t n) {
    __syncthreads();
    load_tile(ta, a, r0, n, wa);
    load_tile(tb, b, r0, n, wb);
    __syncthreads();
}

/* The rows of work item `task`: slice z, rows [r0, r0 + ROWS) of the slice's n,
 * this warp's row r = r0 + warp, and the block's last row (rows past n idle). */
typedef struct {
    int64_t z, r0, r, last;
} block_rows;

__device__ __forceinline__ block_rows rows_of(int64_t task, int64_t n) {
    int64_t per_slice = ceil_div(n, ROWS);
    block_rows b;
    b.z = task / per_slice;
    b.r0 = task % per_slice * ROWS;
    b.r = b.r0 + (threadIdx.x >> 5);
    b.last = (b.r0 + ROWS < n ? b.r0 + ROWS : n) - 1;
    return b;
}

/* ---- forward ------------------------------------------------------------------- */

__global__ void k_attention(const float *q, const float *k, const float *v, float *o, float *lse,
                            att_shape s, int64_t tile) {
    extern __shared__ float sh[];
    float *kt = sh, *vt = sh + tile * s.d;
    int lane = threadIdx.x & 31;
    for (int64_t task = blockIdx.x; task < s.slices * ceil_div(s.tq, ROWS); task += gridDim.x) {
        block_rows b = rows_of(task, s.tq);
        int64_t z = b.z, i = b.r, end = key_end(s, b.last), mine = i < s.tq ? key_end(s, i) : 0;
        int64_t zk = kv_slice(s, z);
        const float *qi = q + (z * s.tq + i) * s.d, *kz = k + zk * s.tk * s.d,
                    *vz = v + zk * s.tk * s.dv;
        for (int64_t c0 = 0; c0 < s.dv || c0 == 0; c0 += 32 * NACC) {
            float m = -INFINITY, l = 0.0f, acc[NACC];
            for (int t = 0; t < NACC; t++) acc[t] = 0.0f;
            for (int64_t j0 = 0; j0 < end; j0 += tile) {
                int64_t nk = end - j0 < tile ? end - j0 : tile;
                load_tiles(kt, kz, s.d, vt, vz, s.dv, j0, nk);
                for (int64_t j = 0; j < nk && j0 + j < mine; j++) {
                    float sc = s.scale * warp_dot(qi, kt + j * s.d, s.d, lane);
                    float mn = fmaxf(m, sc), alpha = expf(m - mn), p = expf(sc - mn);
                    l = l * alpha + p;
                    for (int t = 0; t < NACC; t++) {
                        int64_t c = c0 + lane + 32 * t;
                        if (c < s.dv) acc[t] = acc[t] * alpha + p * vt[j * s.dv + c];
                    }
                    m = mn;
                }
            }
            if (i >= s.tq) continue;
            for (int t = 0; t < NACC; t++) {
                int64_t c = c0 + lane + 32 * t;
                if (c < s.dv) o[(z * s.tq + i) * s.dv + c] = l > 0.0f ? acc[t] / l : 0.0f;
            }
            if (c0 == 0 && lane == 0) lse[z * s.tq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
        }
    }
}

/* ---- backward ------------------------------------------------------------------ */

/* di[row] = dO . o of each query row */
__global__ void k_attention_di(const float *dout, const float *o, int64_t rows, int64_t dv,
                               double *di) {
    int lane = threadIdx.x & 31;
    for (int64_t r = WARP_ID; r < rows; r += WARPS) {
        float d = warp_dot(dout + r * dv, o + r * dv, dv, lane);
        if (lane == 0) di[r] = d;
    }
}

/* dq: a warp a query row, key tiles in shared memory */
__global__ void k_attention_dq(const float *q, const float *k, const float *v, const float *lse,
                               const float *dout, const double *di, float *dq, att_shape s,
                               int64_t tile) {
    extern __shared__ float sh[];
    float *kt = sh, *vt = sh + tile * s.d;
    int lane = threadIdx.x & 31;
    for (int64_t task = blockIdx.x; task < s.slices * ceil_div(s.tq, ROWS); task += gridDim.x) {
        block_rows b = rows_of(task, s.tq);
        int64_t z = b.z, i = b.r, row = z * s.tq + i, end = key_end(s, b.last), mine = 0;
        if (i < s.tq && lse[row] != -INFINITY) mine = key_end(s, i);
        const float *qi = q + row * s.d, *doi = dout + row * s.dv;
        int64_t zk = kv_slice(s, z);
        const float *kz = k + zk * s.tk * s.d, *vz = v + zk * s.tk * s.dv;
        for (int64_t c0 = 0; c0 < s.d || c0 == 0; c0 += 32 * NACC) {
            float acc[NACC];
            for (int t = 0; t < NACC; t++) acc[t] = 0.0f;
            for (int64_t j0 = 0; j0 < end; j0 += tile) {
                int64_t nk = end - j0 < tile ? end - j0 : tile;
                load_tiles(kt, kz, s.d, vt, vz, s.dv, j0, nk);
                for (int64_t j = 0; j < nk && j0 + j < mine; j++) {
                    float p = expf(s.scale * warp_dot(qi, kt + j * s.d, s.d, lane) - lse[row]);
                    float ds = p * (warp_dot(doi, vt + j * s.dv, s.dv, lane) - (float)di[row]);
                    for (int t = 0; t < NACC; t++) {
                        int64_t c = c0 + lane + 32 * t;
                        if (c < s.d) acc[t] += s.scale * ds * kt[j * s.d + c];
                    }
                }
            }
            if (i >= s.tq) continue;
            for (int t = 0; t < NACC; t++) {
                int64_t c = c0 + lane + 32 * t;
                if (c < s.d) dq[row * s.d + c] = acc[t];
            }
        }
    }
}

/* dk (which = 1) or dv (which = 0): a warp a key row of a k, v slice (its
 * group's query heads in turn), query tiles in shared memory */
__global__ void k_attention_dkdv(const float *q, const float *k, const float *v, const float *lse,
                                 const float *dout, const double *di, float *out, int which,
                                 att_shape s, int64_t tile) {
    extern __shared__ float sh[];
    float *qt = sh, *dot = sh + tile * s.d;
    int lane = threadIdx.x & 31;
    int64_t width = which ? s.d : s.dv, group = s.h / s.kv;
    int64_t kv_slices = s.slices / group;
    for (int64_t task = blockIdx.x; task < kv_slices * ceil_div(s.tk, ROWS); task += gridDim.x) {
        block_rows b = rows_of(task, s.tk);
        int64_t zk = b.z, j = b.r, start = query_start(s, b.r0);
        int64_t mine = j < s.tk ? query_start(s, j) : s.tq;
        const float *kj = k + (zk * s.tk + j) * s.d, *vj = v + (zk * s.tk + j) * s.dv;
        for (int64_t c0 = 0; c0 < width || c0 == 0; c0 += 32 * NACC) {
            float acc[NACC];
            for (int t = 0; t < NACC; t++) acc[t] = 0.0f;
            for (int64_t gi = 0; gi < group; gi++) {
                int64_t z = zk / s.kv * s.h + zk % s.kv * group + gi;
                const float *qz = q + z * s.tq * s.d, *dz = dout + z * s.tq * s.dv;
                const float *lz = lse + z * s.tq;
                const double *dz_i = di + z * s.tq;
                for (int64_t i0 = start; i0 < s.tq; i0 += tile) {
                    int64_t nq = s.tq - i0 < tile ? s.tq - i0 : tile;
                    load_tiles(qt, qz, s.d, dot, dz, s.dv, i0, nq);
                    if (j >= s.tk) continue;
                    for (int64_t r = 0; r < nq; r++) {
                        int64_t i = i0 + r;
                        if (i < mine || lz[i] == -INFINITY) continue;
                        float p = expf(s.scale * warp_dot(qt + r * s.d, kj, s.d, lane) - lz[i]);
                        float ds = 0.0f;
                        if (which)
                            ds = p * (warp_dot(dot + r * s.dv, vj, s.dv, lane) - (float)dz_i[i]);
                        for (int t = 0; t < NACC; t++) {
                            int64_t c = c0 + lane + 32 * t;
                            if (c >= width) continue;
                            acc[t] += which ? s.scale * ds * qt[r * s.d + c]
                                            : p * dot[r * s.dv + c];
                        }
                    }
                }
            }
            if (j >= s.tk) continue;
            for (int t = 0; t < NACC; t++) {
                int64_t c = c0 + lane + 32 * t;
                if (c < width) out[(zk * s.tk + j) * width + c] = acc[t];
            }
        }
    }
}

/* ---- launches ------------------------------------------------------------------ */

static att_shape shape_of(const mg_tensor *q, const mg_tensor *k, const mg_tensor *v, float scale,
                          bool causal, int64_t q0, int64_t k0) {
    att_shape s;
    s.tq = q->shape[2];
    s.tk = k->shape[2];
    s.d = q->shape[3];
    s.dv = v->shape[3];
    s.q0 = q0;
    s.k0 = k0;
    s.slices = q->shape[0] * q->shape[1];
    s.h = q->shape[1];
    s.kv = k->shape[1];
    s.scale = scale;
    s.causal = causal;
    return s;
}

/* rows per shared-memory tile for rows of `width` floats; 0 when one does not fit */
static int64_t tile_rows(int64_t width) {
    if (width <= 0) return 32;
    int64_t t = SMEM_FLOATS / width;
    return t > 32 ? 32 : t;
}

static unsigned blocks_for(int64_t tasks) {
    int64_t cap = (int64_t)(mg_cu.sm_count > 0 ? mg_cu.sm_count : 16) * 32;
    return (unsigned)(tasks < 1 ? 1 : tasks < cap ? tasks : cap);
}

static bool fits(int64_t tile, const att_shape &s) {
    if (tile > 0) return true;
    char detail[128];
    snprintf(detail, sizeof detail,
             "head sizes D = %lld and Dv = %lld need more than 48 KiB of "
             "shared memory for one row",
             (long long)s.d, (long long)s.dv);
    mg_cu_keep_error("attention", detail);
    return false;
}

static void cuda_attention(void *ctx, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v,
                           float scale, bool causal, int64_t q0, int64_t k0, mg_tensor *o,
                           mg_tensor *lse) {
    (void)ctx;
    att_shape s = shape_of(q, k, v, scale, causal, q0, k0);
    if (s.slices == 0 || s.tq == 0) return;
    int64_t tile = tile_rows(s.d + s.dv);
    if (!fits(tile, s)) return;
    size_t smem = (size_t)(tile * (s.d + s.dv)) * sizeof(float);
    k_attention<<<blocks_for(s.slices * ceil_div(s.tq, ROWS)), ROWS * 32, smem, mg_cu.stream>>>(
        q->data, k->data, v->data, o->data, lse->data, s, tile);
    LAUNCHED("attention kernel");
}

static void cuda_attention_backward(void *ctx, const mg_tensor *q, const mg_tensor *k,
                                    const mg_tensor *v, const mg_tensor *o, const mg_tensor *lse,
                                    const mg_tensor *dout, float scale, bool causal, int64_t q0,
                                    int64_t k0, mg_tensor *dq, mg_tensor *dk, mg_tensor *dv) {
    (void)ctx;
    att_shape s = shape_of(q, k, v, scale, causal, q0, k0);
    if (s.slices == 0) return;
    int64_t tile = tile_rows(s.d + s.dv);
    if (!fits(tile, s)) return;
    size_t smem = (size_t)(tile * (s.d + s.dv)) * sizeof(float);
    int64_t rows = s.slices * s.tq;
    double *scratch = mg_cu_scratch(rows + 1);
    if (!scratch) return;
    double *di = scratch + 1;
    if (rows > 0) {
        k_attention_di<<<row_blocks(rows), THREADS, 0, mg_cu.stream>>>(dout->data, o->data, rows,
                                                                       s.dv, di);
        if (!LAUNCHED("attention_backward kernel")) return;
        k_attention_dq<<<blocks_for(s.slices * ceil_div(s.tq, ROWS)), ROWS * 32, smem,
                         mg_cu.stream>>>(q->data, k->data, v->data, lse->data, dout->data, di,
                                         dq->data, s, tile);
        if (!LAUNCHED("attention_backward kernel")) return;
    }
    if (s.tk == 0) return;
    int64_t kv_slices = q->shape[0] * s.kv;
    if (kv_slices == 0) return;
    for (int which = 0; which < 2; which++) {
        k_attention_dkdv<<<blocks_for(kv_slices * ceil_div(s.tk, ROWS)), ROWS * 32, smem,
                           mg_cu.stream>>>(q->data, k->data, v->data, lse->data, dout->data, di,
                                           which ? dk->data : dv->data, which, s, tile);
        if (!LAUNCHED("attention_backward kernel")) return;
    }
}

void mg_cu_attention_iface(struct mg_backend_iface *f) {
    f->attention = cuda_attention;
    f->attention_backward = cuda_attention_backward;
}
