/* cpu_attention.c: fused attention on the CPU, as flash attention does it.
 * Grouped-query: k and v may have fewer heads than q (KV dividing H); query
 * head h reads k, v head h / (H / KV) in place (no copy), and backward adds
 * the group's dk, dv into that head's, one query head after another.
 *
 * Forward, for each (batch, head) and each tile of BQ query rows: walk the keys
 * in tiles of BK; scores S = scale Q K^T (one GEMM), an online softmax (each
 * row's running max m and sum l; when the max grows, what was summed so far is
 * scaled by exp(m_old - m_new)), O += P V (one GEMM). At the end O /= l and
 * lse = m + log l. Backward recomputes P = exp(S - lse) tile by tile and
 * accumulates dV += P^T dO, dS = P (dO V^T - rowsum(dO o)), dQ += scale dS K,
 * dK += scale dS^T Q (four more GEMMs). No (Tq, Tk) matrix exists: the memory
 * beyond q, k, v, o, lse and the gradients is two BQ x BK tiles per thread.
 *
 * In bf16 mode (backend.h) the seven products round their inputs to bf16 and
 * sum in fp32 (cpu_gemm_bf16.c's small product), as PyTorch's autocast runs
 * attention's matmuls in bf16; the softmax, its statistics and the outputs
 * stay fp32.
 *
 * Causal masks are on global positions: key j is hidden from query i when
 * k0 + j > q0 + i, so a rank holding a slice of the queries (sequence
 * parallel) against all keys masks the right ones. Key tiles wholly in a row
 * tile's future are skipped.
 * Exports mg_cpu_attention, mg_cpu_attention_backward (cpu_kernels.h). */
#include <math.h>
#include <string.h>

#include "backend/cpu_kernels.h"
#include "parallel.h"

/* Fused multiply-adds where the clone has them (GCC's ISO C mode leaves them
 * off): the exps of these loops wait on their polynomial's latency, which FMA
 * shortens. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#define BQ 64 /* query rows per tile */
#define BK 64 /* keys per tile */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A tile's product: fp32, or in bf16 mode (backend.h; bf16: 1 on the bf16
 * kernel, 2 emulated) with its inputs rounded to bf16 and fp32 sums, as the
 * vtable's GEMMs do. */
MG_CPU_INLINE void tile_gemm(int bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                             float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                             float beta, float *c, int64_t ldc) {
    if (bf16 && mg_cpu_gemm_bf16_small(bf16 == 1, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                                       ldc) == 0)
        return;
    mg_cpu_gemm(NULL, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* One (batch, head) slice: q (tq, d), k (tk, d), v (tk, dv), o (tq, dv), lse (tq). */
typedef struct {
    int64_t tq, tk, d, dv, q0, k0;
    float scale;
    bool causal;
} shape;

/* keys [0, end) are visible to some row of the tile starting at query i0 */
MG_CPU_INLINE int64_t keys_end(const shape *s, int64_t i0, int64_t nq) {
    if (!s->causal) return s->tk;
    int64_t end = s->q0 + i0 + nq - s->k0; /* last row sees keys up to q0 + i0 + nq - 1 */
    return end < 0 ? 0 : min64(end, s->tk);
}

/* keys [0, n) of the tile starting at key j0 are visible to query row i */
MG_CPU_INLINE int64_t visible(const shape *s, int64_t i, int64_t j0, int64_t nk) {
    if (!s->causal) return nk;
    int64_t n = s->q0 + i - (s->k0 + j0) + 1;
    return n < 0 ? 0 : min64(n, nk);
}

MG_CPU_INLINE float tile_row_max(const float *restrict x, int64_t n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* x[j] = exp(x[j] - m) for j < n, 0 for n <= j < len; returns the sum. One
 * loop writes the whole row in vectors: the GEMM that reads the row next
 * loads it in vectors, and a load over several smaller stores still in
 * flight waits for them all. */
MG_CPU_INLINE float exp_tile_row(float *x, int64_t n, int64_t len, float m) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < len; j++) {
        float e = j < n ? mg_cpu_exp(x[j] - m) : 0.0f;
        x[j] = e;
        s += e;
    }
    return s;
}

MG_CPU_INLINE void scale_row(float *x, int64_t n, float a) {
    for (int64_t j = 0; j < n; j++) x[j] *= a;
}

MG_CPU_CLONES static void forward_slice(const shape *s, const float *q, const float *k,
                                        const float *v, float *o, float *lse, int bf16) {
    float p[BQ * BK], l[BQ];
    int64_t d = s->d, dv = s->dv;
    for (int64_t i0 = 0; i0 < s->tq; i0 += BQ) {
        int64_t nq = min64(BQ, s->tq - i0);
        float *m = lse + i0, *acc = o + i0 * dv; /* running max and output, in place */
        for (int64_t r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        memset(acc, 0, (size_t)(nq * dv) * sizeof(float));
        int64_t end = keys_end(s, i0, nq);
        for (int64_t j0 = 0; j0 < end; j0 += BK) {
            int64_t nk = min64(BK, end - j0);
            tile_gemm(bf16, false, true, nq, nk, d, s->scale, q + i0 * d, d, k + j0 * d, d, 0.0f, p,
                      nk);
            for (int64_t r = 0; r < nq; r++) {
                float *pr = p + r * nk;
                int64_t n = visible(s, i0 + r, j0, nk);
                if (n == 0) {
                    memset(pr, 0, (size_t)nk * sizeof(float));
                    continue;
                }
                float mt = tile_row_max(pr, n), mnew = mt > m[r] ? mt : m[r];
                float alpha = mg_cpu_exp(m[r] - mnew);
                l[r] = l[r] * alpha + exp_tile_row(pr, n, nk, mnew);
                if (alpha != 1.0f) scale_row(acc + r * dv, dv, alpha);
                m[r] = mnew;
            }
            tile_gemm(bf16, false, false, nq, dv, nk, 1.0f, p, nk, v + j0 * dv, dv, 1.0f, acc, dv);
        }
        for (int64_t r = 0; r < nq; r++) {
            if (l[r] > 0.0f) {
                scale_row(acc + r * dv, dv, 1.0f / l[r]);
                m[r] += logf(l[r]);
            } else {
                m[r] = -INFINITY; /* no visible key: o = 0 */
            }
        }
    }
}

MG_CPU_CLONES static void backward_slice(const shape *s, const float *q, const float *k,
                                         const float *v, const float *o, const float *lse,
                                         const float *dout, float *dq, float *dk, float *dv,
                                         int bf16) {
    float p[BQ * BK], ds[BQ * BK], di[BQ];
    int64_t d = s->d, nv = s->dv;
    memset(dq, 0, (size_t)(s->tq * d) * sizeof(float)); /* dk, dv: the caller's */
    for (int64_t i0 = 0; i0 < s->tq; i0 += BQ) {
        int64_t nq = min64(BQ, s->tq - i0);
        const float *qi = q + i0 * d, *doi = dout + i0 * nv;
        for (int64_t r = 0; r < nq; r++) { /* di = rowsum(dO o) */
            float acc = 0;
            const float *a = doi + r * nv, *b = o + (i0 + r) * nv;
#pragma omp simd reduction(+ : acc)
            for (int64_t j = 0; j < nv; j++) acc += a[j] * b[j];
            di[r] = acc;
        }
        int64_t end = keys_end(s, i0, nq);
        for (int64_t j0 = 0; j0 < end; j0 += BK) {
            int64_t nk = min64(BK, end - j0);
            const float *kj = k + j0 * d, *vj = v + j0 * nv;
            tile_gemm(bf16, false, true, nq, nk, d, s->scale, qi, d, kj, d, 0.0f, p, nk);
            for (int64_t r = 0; r < nq; r++) {
                float lr = lse[i0 + r];
                int64_t n = lr == -INFINITY ? 0 : visible(s, i0 + r, j0, nk);
                exp_tile_row(p + r * nk, n, nk, lr);
            }
            /* dV_j += P^T dO_i;  dP = dO_i V_j^T */
            tile_gemm(bf16, true, false, nk, nv, nq, 1.0f, p, nk, doi, nv, 1.0f, dv + j0 * nv, nv);
            tile_gemm(bf16, false, true, nq, nk, nv, 1.0f, doi, nv, vj, nv, 0.0f, ds, nk);
            for (int64_t r = 0; r < nq; r++) { /* dS = P (dP - di) */
                float *dsr = ds + r * nk;
                const float *pr = p + r * nk;
                for (int64_t j = 0; j < nk; j++) dsr[j] = pr[j] * (dsr[j] - di[r]);
            }
            /* dQ_i += scale dS K_j;  dK_j += scale dS^T Q_i */
            tile_gemm(bf16, false, false, nq, d, nk, s->scale, ds, nk, kj, d, 1.0f, dq + i0 * d, d);
            tile_gemm(bf16, true, false, nk, d, nq, s->scale, ds, nk, qi, d, 1.0f, dk + j0 * d, d);
        }
    }
}

/* 0 in fp32; in bf16 mode 1 on the bf16 kernel, 2 emulated (decided here, before
 * the threads start) */
static int bf16_mode(void) {
    if (!mg_backend_gemm_bf16()) return 0;
    return mg_cpu_bf16_kernel() ? 1 : 2;
}

static shape shape_of(const mg_tensor *q, const mg_tensor *k, const mg_tensor *v, float scale,
                      bool causal, int64_t q0, int64_t k0, int64_t *slices) {
    shape s = {q->shape[2], k->shape[2], q->shape[3], v->shape[3], q0, k0, scale, causal};
    *slices = q->shape[0] * q->shape[1];
    return s;
}

/* the k, v slice (batch, kv head) that q slice z (batch, head) reads: h query
 * heads, kv of k and v */
static int64_t kv_slice(int64_t z, int64_t h, int64_t kv) {
    return h == kv ? z : z / h * kv + z % h / (h / kv);
}

void mg_cpu_attention(void *ctx, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v,
                      float scale, bool causal, int64_t q0, int64_t k0, mg_tensor *o,
                      mg_tensor *lse) {
    (void)ctx;
    int64_t slices;
    shape s = shape_of(q, k, v, scale, causal, q0, k0, &slices);
    int64_t h = q->shape[1], kv = k->shape[1];
    int bf16 = bf16_mode();
    MG_PAR_FOR(slices > 1 && q->numel > PAR_MIN, for (int64_t z = 0; z < slices; z++) {
        int64_t zk = kv_slice(z, h, kv);
        forward_slice(&s, q->data + z * s.tq * s.d, k->data + zk * s.tk * s.d,
                      v->data + zk * s.tk * s.dv, o->data + z * s.tq * s.dv, lse->data + z * s.tq,
                      bf16);
    });
}

void mg_cpu_attention_backward(void *ctx, const mg_tensor *q, const mg_tensor *k,
                               const mg_tensor *v, const mg_tensor *o, const mg_tensor *lse,
                               const mg_tensor *dout, float scale, bool causal, int64_t q0,
                               int64_t k0, mg_tensor *dq, mg_tensor *dk, mg_tensor *dv) {
    (void)ctx;
    int64_t slices;
    shape s = shape_of(q, k, v, scale, causal, q0, k0, &slices);
    /* a thread a k, v slice: the query heads of its group add into its dk, dv */
    int64_t h = q->shape[1], kv = k->shape[1], group = kv ? h / kv : 1;
    int64_t kv_slices = q->shape[0] * kv;
    int bf16 = bf16_mode();
    MG_PAR_FOR(kv_slices > 1 && q->numel > PAR_MIN, for (int64_t zk = 0; zk < kv_slices; zk++) {
        int64_t ko = zk * s.tk;
        memset(dk->data + ko * s.d, 0, (size_t)(s.tk * s.d) * sizeof(float));
        memset(dv->data + ko * s.dv, 0, (size_t)(s.tk * s.dv) * sizeof(float));
        for (int64_t gi = 0; gi < group; gi++) {
            int64_t z = zk / kv * h + zk % kv * group + gi, qo = z * s.tq;
            backward_slice(&s, q->data + qo * s.d, k->data + ko * s.d, v->data + ko * s.dv,
                           o->data + qo * s.dv, lse->data + qo, dout->data + qo * s.dv,
                           dq->data + qo * s.d, dk->data + ko * s.d, dv->data + ko * s.dv, bf16);
        }
    });
}
