/* cpu_kernels.h: what the files of the CPU backend share, a header of none of
 * them. cpu.c holds the vtable and the general kernels; cpu_nn.c the row
 * kernels of the network ops (softmax, embedding, cross-entropy, GELU),
 * cpu_layer_norm.c those of layer norm and cpu_rms_norm.c those of RMS norm;
 * cpu_rope.c the rotary embedding; cpu_attention.c the fused attention;
 * cpu_gemm.c the fp32 GEMM (over cpu_gemm_small.c and cpu_gemm_det.c);
 * cpu_gemm_bf16.c the bf16 GEMM; cpu_common.c and cpu_det.c what the kernels
 * call. The vtable, above them all, takes the kernels of the other files from
 * here.
 *
 * Exports the loop thresholds, MG_CPU_CLONES, MG_CPU_INLINE, mg_cpu_gemm,
 * mg_cpu_exp (a vectorizable expf for softmax arguments) and the kernel
 * functions of cpu_nn.c, cpu_layer_norm.c, cpu_rms_norm.c, cpu_rope.c,
 * cpu_attention.c and cpu_gemm_bf16.c (their contracts are those of the vtable entries in
 * backend.h). */
#ifndef MG_BACKEND_CPU_KERNELS_H
#define MG_BACKEND_CPU_KERNELS_H

#include <stdint.h>
#include <string.h>

#include "backend/backend.h"

#define PAR_MIN 32768 /* elements below which loops stay on one thread */
#define CHUNK 8192    /* elements per parallel work item of flat loops */

/* The row and attention kernels are built three times, for x86-64-v4
 * (AVX-512), x86-64-v3 (AVX2, FMA) and the baseline the library targets, and
 * the loader picks the best the CPU runs (GCC's target_clones, which
 * MG_CPU_ISA cannot lower: blas_core.h). Their exps and sums are the work, and
 * 16 lanes do them in well under the time of 8. valgrind hides AVX-512 from
 * the program, so under it the v3 clone runs. Elsewhere (another CPU or
 * compiler) there is one plain version. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define MG_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef MG_CPU_CLONES
#define MG_CPU_CLONES
#endif
/* for the small loops a cloned kernel calls: GCC does not inline them into a
 * clone on its own, and out of line they run the baseline code */
#if defined(__GNUC__)
#define MG_CPU_INLINE static inline __attribute__((always_inline))
#else
#define MG_CPU_INLINE static inline
#endif

/* exp(x) within 2 ulp for x <= 88, written in plain float and int arithmetic so
 * that a loop of it vectorizes (glibc's expf is a call per element, which made
 * the softmax and attention loops several times slower). What softmax-style code
 * feeds it is x - max <= 0: below about -87.7 (and -inf) it gives 0, NaN stays
 * NaN (1.05 ulp at worst over every float in [-87.3, 88]). The range
 * reduction is Cephes's expf: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two
 * parts), exp(r) by a polynomial, 2^n put into the exponent bits. In the
 * softmax it is the work per element, so it is short: about 20 vector
 * instructions for 8 lanes, no masks, and as few multiplies as it can (the
 * loop waits for the two FMA units).
 *   - Each clamp is one max or min that lets NaN through (`a > b ? a : b`
 *     keeps b when either is NaN), and NaN stays NaN through the arithmetic.
 *     The bounds, -88 and 88, are defined in cpu_common.c so the compiler does not
 *     know them here: with constants it folds the whole function at each
 *     bound and blends the results in, eight more instructions a loop.
 *   - Clamped at -88, n is -127 and 2^n's exponent bits are 0: the scale is
 *     0.0, so the result is exactly 0 with no compare.
 * With AVX-512 the whole-row softmax forward takes mg_cpu_exp16 (cpu_exp16.h)
 * instead: a table of 16 and fewer cycles a vector. */
extern const float mg_cpu_exp_lo, mg_cpu_exp_hi;
static inline float mg_cpu_exp(float x) {
    const float lo = mg_cpu_exp_lo, hi = mg_cpu_exp_hi;
    float xc = lo > x ? lo : x;
    xc = hi < xc ? hi : xc;
    /* t = 1.5 * 2^23 + n: adding the magic rounds x / ln2 to the integer n,
     * which is then t's low mantissa bits */
    float t = xc * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    /* exp(r) = 1 + r + r^2 q(r), q of degree 4 fitted to exp's relative
     * error on |r| <= ln2 / 2 (3.9e-9, under float's 6e-8), in Estrin's
     * order: short chains instead of one long one */
    float r2 = r * r, r4 = r2 * r2;
    float a = 1.6666521132e-1f * r + 4.9999994040e-1f;
    float b = 8.3687026054e-3f * r + 4.1668388993e-2f;
    float q = 1.3814583654e-3f * r4 + (b * r2 + a);
    float p = q * r2 + r + 1.0f;
    uint32_t bits; /* 2^n: (t's bits + 127) << 23 drops the magic's bits off the top */
    memcpy(&bits, &t, sizeof bits);
    bits = (bits + 127u) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* cpu_gemm.c: C(M,N) = alpha op(A) op(B) + beta C, row-major, as the gemm entry;
 * empty sizes are fine (k = 0 gives C = beta C). */
void mg_cpu_gemm(void *ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                 float *c, int64_t ldc);

/* cpu_gemm_bf16.c: the gemm_bf16 and cast_bf16 entries (also the gemm
 * entries' in bf16 mode): the AVX512-BF16 kernel where the CPU has it, else
 * the emulation of cpu_bf16.c. */
void mg_cpu_gemm_bf16(void *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const mg_gemm_in *a, const mg_gemm_in *b, float beta, float *c,
                      int64_t ldc, int64_t stride_c, int64_t batch, const float *bias);
void mg_cpu_cast_bf16(void *ctx, const float *x, uint16_t *y, int64_t n);
/* 1 where the bf16 kernel runs, 0 where the emulation does (the first call may
 * print its warning: call it before a parallel region, not in one) */
int mg_cpu_bf16_kernel(void);
/* C = alpha op(A) op(B) + beta C with A and B rounded to bf16 and the sums in
 * fp32, for a product of m, n <= 128 and k <= 256 (an attention tile's), on
 * this thread with no allocation: the kernel, or with `kernel` 0 the
 * emulation. 0, or -1 when it does not take the call (larger: mg_cpu_gemm). */
int mg_cpu_gemm_bf16_small(bool kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                           float beta, float *c, int64_t ldc);

/* cpu_gemm_small.c: the gemm entry's A B^T or A B when M is one row (AVX-512),
 * or A B^T for at most 64 rows when B is large, without packing B; -1 when
 * it does not take the call (another shape, CPU or thread count: use sgemm). */
int mg_cpu_gemm_small(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc);

/* cpu_common.c: `n` floats (64-byte aligned) of this thread's buffer `slot`,
 * grown and kept (freed when the thread ends); NULL when it cannot grow. */
enum { MG_CPU_BUFFER_SMALL_GEMM = 0, MG_CPU_BUFFER_DET_GEMM, MG_CPU_THREAD_BUFFERS };
float *mg_cpu_thread_buffer(int slot, size_t n);

/* cpu_gemm_det.c: C(M,N) = alpha op(A) op(B) + beta C, row-major, with one
 * canonical order of additions over K, whatever M, N, the threads or the ISA:
 * the halving tree of cpu_det.c over K, a leaf a chain of fmaf from +0 in
 * ascending k (the file's opening comment has the contract). */
void mg_cpu_gemm_det(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc);
/* For tests and benchmarks: the path mg_cpu_gemm_det takes, MG_ISA_AVX512,
 * MG_ISA_AVX2 or MG_ISA_GENERIC (the scalar one), or -1 for the CPU's best
 * (lowered by MG_CPU_ISA). 0, or -1 when this CPU or build lacks the path
 * (nothing changed). Every path gives the same bits. */
int mg_cpu_gemm_det_force(int isa);

/* cpu_nn.c */
void mg_cpu_softmax(void *ctx, const mg_tensor *x, const mg_tensor *max, const mg_tensor *sum,
                    bool log, mg_tensor *out);
void mg_cpu_softmax_sum(void *ctx, const mg_tensor *x, const mg_tensor *max, mg_tensor *sum);
void mg_cpu_softmax_backward(void *ctx, const mg_tensor *y, const mg_tensor *dy,
                             const mg_tensor *dot, bool log, mg_tensor *dx);
void mg_cpu_softmax_dot(void *ctx, const mg_tensor *y, const mg_tensor *dy, bool log,
                        mg_tensor *dot);
int64_t mg_cpu_embedding(void *ctx, const mg_tensor *ids, const mg_tensor *table, int64_t v0,
                         int64_t v, mg_tensor *out);
void mg_cpu_embedding_backward(void *ctx, const mg_tensor *ids, const mg_tensor *dout, int64_t v0,
                               mg_tensor *dtable);
/* cpu_det.c: the deterministic mode's sums. mg_cpu_det_colsum: out (cols) =
 * the pairwise-tree sums (the halving tree of backend.h down to leaves of one
 * term, or of rows' odd part) down the rows of t (rows, cols), rows ld floats
 * apart. */
void mg_cpu_det_colsum(const float *t, int64_t rows, int64_t cols, int64_t ld, float *out);
/* n floats of the context's scratch for those sums' terms (grown, kept; one
 * user at a time), NULL when it cannot grow. */
float *mg_cpu_det_scratch(int64_t n);
int64_t mg_cpu_cross_entropy(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                             float scale, mg_tensor *out);
int64_t mg_cpu_cross_entropy_sums(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                  const mg_tensor *max, int64_t v0, int64_t v, mg_tensor *sums);
/* The deterministic mode's sums (cpu_nn.c): fixed (N) = sum_j floor(exp(x - max)
 * 2^MG_CE_FIXED_BITS) as integers (an order-free sum, added exactly over the
 * class shards too), target (N) the label's logit or 0; returns the bad labels. */
int64_t mg_cpu_cross_entropy_fixed(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *max, int64_t v0, int64_t v, int64_t *fixed,
                                   float *target);
void mg_cpu_cross_entropy_backward(void *ctx, const mg_tensor *logits, const mg_tensor *labels,
                                   const mg_tensor *lse, int64_t v0, int64_t v, float scale,
                                   mg_tensor *dlogits);

/* GELU (tanh approximation) of n contiguous floats, and dx = dy gelu'(x) */
void mg_cpu_gelu(const float *x, float *out, int64_t n);
void mg_cpu_gelu_backward(const float *dy, const float *x, float *dx, int64_t n);
/* SiLU of n contiguous floats, and dx = dy silu'(x) */
void mg_cpu_silu(const float *x, float *out, int64_t n);
void mg_cpu_silu_backward(const float *dy, const float *x, float *dx, int64_t n);

/* cpu_layer_norm.c */
void mg_cpu_layer_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, const mg_tensor *b,
                       float eps, const mg_tensor *moments, int64_t n, mg_tensor *stats,
                       mg_tensor *y);
void mg_cpu_layer_norm_moments(void *ctx, const mg_tensor *x, const mg_tensor *mean,
                               mg_tensor *out);
void mg_cpu_layer_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                const mg_tensor *dy, const mg_tensor *stats, const mg_tensor *sums,
                                int64_t n, mg_tensor *dx, mg_tensor *dw, mg_tensor *db);
void mg_cpu_layer_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                     const mg_tensor *dy, const mg_tensor *stats, mg_tensor *sums);

/* cpu_rms_norm.c */
void mg_cpu_rms_norm(void *ctx, const mg_tensor *x, const mg_tensor *w, float eps,
                     const mg_tensor *squares, int64_t n, mg_tensor *rstd, mg_tensor *y);
void mg_cpu_rms_norm_squares(void *ctx, const mg_tensor *x, mg_tensor *out);
void mg_cpu_rms_norm_backward(void *ctx, const mg_tensor *x, const mg_tensor *w,
                              const mg_tensor *dy, const mg_tensor *rstd, const mg_tensor *sums,
                              int64_t n, mg_tensor *dx, mg_tensor *dw);
void mg_cpu_rms_norm_backward_sums(void *ctx, const mg_tensor *x, const mg_tensor *w,
                                   const mg_tensor *dy, const mg_tensor *rstd, mg_tensor *sums);

/* cpu_rope.c */
void mg_cpu_rope(void *ctx, const mg_tensor *x, int64_t pos0, float theta, bool inverse,
                 mg_tensor *out);

/* cpu_attention.c */
void mg_cpu_attention(void *ctx, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v,
                      float scale, bool causal, int64_t q0, int64_t k0, mg_tensor *o,
                      mg_tensor *lse);
void mg_cpu_attention_backward(void *ctx, const mg_tensor *q, const mg_tensor *k,
                               const mg_tensor *v, const mg_tensor *o, const mg_tensor *lse,
                               const mg_tensor *dout, float scale, bool causal, int64_t q0,
                               int64_t k0, mg_tensor *dq, mg_tensor *dk, mg_tensor *dv);

#endif
