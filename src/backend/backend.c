/* backend.c: what every backend shares: the pointwise kernels' names (from
 * kernel_math.h's lists), the broadcast layout of the binary kernels, the
 * bf16 GEMM and deterministic-mode switches, and the version of the weights
 * that their bf16 copies are checked against. It calls no other file of
 * backend/, so every one may call it: device.c picks a tensor's backend
 * (mg_backend_of), cpu_threads.c holds the CPU thread setting.
 * Exports: mg_binary_names, mg_unary_names, mg_binary_dims,
 * mg_backend_set_gemm_bf16, mg_backend_gemm_bf16, mg_backend_bf16_weights_changed,
 * mg_set_compute_dtype, mg_get_compute_dtype, mg_set_deterministic,
 * mg_get_deterministic (meshgrad.h), mg_det_leaf, mg_det_split_ok.
 * The CPU kernels live in cpu*.c, the CUDA ones in cuda*.cu. */
#include "config.h"

#include "backend/backend.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_state.h"
#include "context.h"
#include "status.h"

#define KERNEL_NAME(E, name, f) #name,
const char *const mg_binary_names[MG_BINARY_COUNT] = {MG_BINARY_KERNELS(KERNEL_NAME)};
const char *const mg_unary_names[MG_UNARY_COUNT] = {MG_UNARY_KERNELS(KERNEL_NAME)};

/* ---- broadcasting ------------------------------------------------------------- */

/* Broadcast strides of t against out (dims right-aligned; size 1 -> stride 0). */
static void broadcast_strides(const mg_tensor *t, const mg_tensor *out, int64_t *st) {
    int64_t s = 1;
    for (int i = out->ndim - 1; i >= 0; i--) {
        int j = i - (out->ndim - t->ndim);
        int64_t size = j >= 0 ? t->shape[j] : 1;
        st[i] = size == 1 ? 0 : s;
        s *= size;
    }
}

int mg_binary_dims(const mg_tensor *a, const mg_tensor *b, const mg_tensor *out, int64_t *n,
                   int64_t *sa, int64_t *sb) {
    int64_t sa_full[MG_MAX_DIMS], sb_full[MG_MAX_DIMS];
    broadcast_strides(a, out, sa_full);
    broadcast_strides(b, out, sb_full);
    int k = 0;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] == 1) continue;
        if (k > 0 && sa[k - 1] == sa_full[i] * out->shape[i] &&
            sb[k - 1] == sb_full[i] * out->shape[i]) {
            n[k - 1] *= out->shape[i];
            sa[k - 1] = sa_full[i];
            sb[k - 1] = sb_full[i];
            continue;
        }
        n[k] = out->shape[i];
        sa[k] = sa_full[i];
        sb[k] = sb_full[i];
        k++;
    }
    return k;
}

/* ---- bf16 GEMMs ---------------------------------------------------------------- */

/* The weights' bf16 copies (bf16_weights.c) hold while the version they were
 * made at is the context's: moving it on here drops them all, with no call up
 * into that file. */
void mg_backend_bf16_weights_changed(void) { mg_backend_ctx()->bf16_version++; }

void mg_backend_set_gemm_bf16(int on) {
    mg_backend_ctx()->gemm_bf16 = on ? 1 : 0;
    mg_backend_bf16_weights_changed();
}

int mg_backend_gemm_bf16(void) { return mg_backend_ctx()->gemm_bf16; }

int mg_set_compute_dtype(mg_dtype dtype) {
    if (dtype != MG_DTYPE_FP32 && dtype != MG_DTYPE_BF16)
        return mg_error(MG_EINVAL, "mg_set_compute_dtype: %d is not MG_DTYPE_FP32 (0) or "
                                   "MG_DTYPE_BF16 (1)", (int)dtype);
    if (dtype == MG_DTYPE_BF16 && mg_backend_ctx()->deterministic)
        return mg_error(MG_EINVAL, "mg_set_compute_dtype: the deterministic mode is fp32 only; "
                                   "turn it off (mg_set_deterministic(0)) for bf16");
    mg_backend_set_gemm_bf16(dtype == MG_DTYPE_BF16);
    return MG_OK;
}

mg_dtype mg_get_compute_dtype(void) { return mg_backend_ctx()->gemm_bf16 ? MG_DTYPE_BF16 : MG_DTYPE_FP32; }

/* ---- deterministic mode ------------------------------------------------------- */

int mg_set_deterministic(int on) {
    mg_backend_state *c = mg_backend_ctx();
    if (on && mg_ctx()->device == MG_DEVICE_CUDA)
        return mg_error(MG_EINVAL, "mg_set_deterministic: the mode runs on the CPU only (CUDA "
                                   "would need GEMMs of a fixed order and NCCL sums of a fixed "
                                   "tree, not built): use the CPU");
    if (on && c->gemm_bf16)
        return mg_error(MG_EINVAL, "mg_set_deterministic: the mode is fp32 only; set the compute "
                                   "dtype back to MG_DTYPE_FP32 first");
    c->deterministic = on ? 1 : 0;
    return MG_OK;
}

int mg_get_deterministic(void) { return mg_backend_ctx()->deterministic; }

int64_t mg_det_leaf(int64_t n) {
    while (n > MG_DET_LEAF && n % 2 == 0) n /= 2;
    return n;
}

int mg_det_split_ok(int64_t n, int64_t parts) {
    if (parts < 1 || n < 0) return 0;
    for (; parts > 1; parts /= 2) {
        if (parts % 2 || n <= MG_DET_LEAF || n % 2) return 0;
        n /= 2;
    }
    return 1;
}
