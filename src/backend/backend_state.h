/* backend_state.h: what the backend layer remembers between calls, behind
 * the context's layers.backend (context.h): made on first use by
 * mg_backend_ctx, freed at each mg_context_reset by mg_backend_state_free
 * (backend_state.c). Included by backend/ and the layers above it.
 * Exports: mg_backend_state, mg_bf16_copy, mg_backend_ctx, mg_backend_state_free. */
#ifndef MG_BACKEND_STATE_H
#define MG_BACKEND_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"

struct mg_backend_iface;

/* A weight's bf16 copy (backend/bf16_weights.c): of the `numel` floats at `src`
 * on `device`, in `bytes` of that device's memory (freed with `free`), valid
 * while the step and version are the context's. */
typedef struct {
    const float *src;
    int64_t numel, step, version;
    int device;
    void *bf16;
    size_t bytes;
    void (*free)(void *ctx, void *p);
    void *free_ctx;
} mg_bf16_copy;

struct mg_backend_state {
    int cpu_threads; /* of the CPU kernels; 0 until first set */
    int gemm_bf16;   /* backend.c: GEMM inputs rounded to bf16, sums in fp32 */
    int deterministic; /* backend.c: every sum in its fixed order (DESIGN.md, Determinism) */
    mg_staging bf16_rounded[2]; /* cpu_bf16.c: a GEMM's A and B rounded to bf16 (host) */
    /* cpu_gemm_bf16.c: which bf16 GEMM the CPU runs (0 until first asked), the
     * warning said once, B packed for the kernel (host, grown and kept) */
    int cpu_bf16, cpu_bf16_warned;
    mg_staging bf16_packed;
    mg_staging det_scratch; /* cpu_det.c: the deterministic sums' terms (host, grown, kept) */
    /* bf16_weights.c: the weights' bf16 copies; backend.c: the version they are
     * valid at, which mg_backend_bf16_weights_changed moves on */
    mg_bf16_copy *bf16_copies;
    int n_bf16_copies, cap_bf16_copies;
    int64_t bf16_version;
    /* trace_kernels.c: while tracing, the traced backend's own iface, and the
     * decorated copy that took its place (freed by mg_backend_trace_kernels,
     * which mg_finalize runs, not at a reset: the backend may point at it) */
    const struct mg_backend_iface *kernels_untraced;
    struct mg_backend_iface *kernels_traced;
};
typedef struct mg_backend_state mg_backend_state;

/* Frees the layer's buffers and bf16 copies, then the state, and NULLs the
 * context's pointer (mg_context_on_reset: at every reset; nothing when the
 * state was not made). */
void mg_backend_state_free(void);

/* The backend layer's state, made on first use (mg_backend is the backend
 * object of backend.h, hence the name). */
MG_CONTEXT_LAYER(mg_backend_ctx, mg_backend_state, backend, mg_backend_state_free)

#endif
