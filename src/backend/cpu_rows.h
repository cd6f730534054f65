/* cpu_rows.h: what the row kernels of cpu_nn.c and cpu_layer_norm.c share:
 * how their loops are built (fused multiply-adds; AVX512_KERNELS, where their
 * AVX-512 versions are), a tensor's rows (last_dim, rows_of), row sums in
 * blocks (SUM_BLOCK, BLOCK_SUM), and streaming stores for outputs too large
 * to stay in cache (STREAM_MIN, streams, stream_fence). The pragma below
 * holds for the rest of the file that includes this header. */
#ifndef MG_BACKEND_CPU_ROWS_H
#define MG_BACKEND_CPU_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/blas_core.h"
#include "backend/cpu_exp16.h"
#include "backend/cpu_kernels.h"

/* Fused multiply-adds where the clone has them (GCC's ISO C mode leaves them
 * off): the exps of these loops wait on their polynomial's latency, which FMA
 * shortens. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

/* AVX512_KERNELS: GCC on x86-64, where the kernels' AVX-512 versions are
 * built (target attributes, intrinsics) and picked at run time where
 * mg_cpu_isa() (the CPU's level, lowered by MG_CPU_ISA) is AVX-512;
 * elsewhere the plain versions stand in for them. The same place as
 * mg_cpu_exp16's, which the softmax's wide kernel calls: one condition,
 * cpu_exp16.h's. */
#ifdef MG_CPU_EXP16
#define AVX512_KERNELS 1
#endif

static inline int64_t last_dim(const mg_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }
static inline int64_t rows_of(const mg_tensor *t) {
    int64_t c = last_dim(t);
    return c ? t->numel / c : 0;
}

/* acc (a double) += the sum of TERM over j < n (TERM an expression of j):
 * blocks of SUM_BLOCK terms summed in float, in vector lanes, then added in
 * double, so long rows keep their precision and the loop still vectorizes */
#define SUM_BLOCK 256
#define BLOCK_SUM(acc, j, n, TERM)                                                                 \
    for (int64_t j##_0 = 0; j##_0 < (n); j##_0 += SUM_BLOCK) {                                     \
        int64_t j##_1 = j##_0 + SUM_BLOCK < (n) ? j##_0 + SUM_BLOCK : (n);                         \
        float part_ = 0;                                                                           \
        _Pragma("omp simd reduction(+ : part_)") for (int64_t j = j##_0; j < j##_1; j++) part_ +=  \
            (TERM);                                                                                \
        acc += part_;                                                                              \
    }

/* Streaming stores for large outputs. An ordinary store first reads
 * the line it writes (the core must own it), so a kernel that writes one tensor
 * moves it twice. When other tenants load the host's memory, those extra reads
 * are what it waits on (memcpy writes whole lines without reading them, so
 * a kernel falls behind it there). A streaming store writes the line without
 * reading it and without keeping it in cache, so only outputs too large to
 * stay in cache take them: STREAM_MIN bytes, past the share of the
 * last-level cache one core of a server can count on (32 MiB shared by 8
 * cores, say). The backwards stream dx; the forwards stream their y from the
 * loop that works on the next row (the layer norm's sum, the softmax's
 * exps): streamed after a row's passes instead, they ran slower. AVX-512
 * only; rows 64-byte aligned. Figures: docs/PERFORMANCE.md "Transformer
 * kernels". */
#define STREAM_MIN ((int64_t)8 << 20)
#ifdef AVX512_KERNELS
static inline bool streams(const mg_tensor *out) {
    int64_t c = last_dim(out);
    return out->numel * (int64_t)sizeof(float) >= STREAM_MIN && c % 16 == 0 &&
           (uintptr_t)out->data % 64 == 0 && mg_cpu_isa() >= MG_ISA_AVX512;
}
/* the streamed lines reach memory before what follows the call reads them */
static inline void stream_fence(void) { _mm_sfence(); }
#else
static inline bool streams(const mg_tensor *out) { (void)out; return false; }
static inline void stream_fence(void) {}
#endif

#endif
