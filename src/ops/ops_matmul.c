/* ops_matmul.c: contractions on distributed tensors: mg_linear (y = x w^T + b,
 * w (N, K) as in PyTorch), mg_matmul ((Z.., M, K) @ (Z.., K, N) or (K, N)), and
 * the gradients their VJPs use. Each names its dims with labels so one rule
 * (mg_rules_contraction) gives every strategy: batch/row dims sharded -> output
 * sharded; w sharded on N -> output sharded on its last dim; the contracted dim
 * sharded on both -> Partial output. The local kernel is one cblas-style GEMM
 * with transpose flags (no transposed copies). */
#include <string.h>

#include "ops/tape.h"
#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "status.h"

enum { LABEL_M = 100, LABEL_K, LABEL_N };

typedef enum {
    GEMM_LINEAR,   /* x (.., K), w (N, K) [, b (N)]  -> (.., N)      y = x w^T + b */
    GEMM_LINEAR_DX, /* dy (.., N), w (N, K)           -> (.., K)      dx = dy w */
    GEMM_LINEAR_DW, /* dy (.., N), x (.., K)          -> (N, K)       dw = dy^T x */
    GEMM_MATMUL,   /* a (Z.., M, K), b (Z.., K, N)|(K, N) -> (Z.., M, N) */
    GEMM_MATMUL_DA, /* dc (Z.., M, N), b (Z.., K, N)|(K, N) -> (Z.., M, K) = dc b^T */
    GEMM_MATMUL_DB, /* a (Z.., M, K), dc (Z.., M, N) -> (Z.., K, N), or (K, N) summed */
} gemm_kind;

typedef struct {
    int ndim[3];
    int labels[3][MG_MAX_DIMS];
    int out_ndim;
    int out_labels[MG_MAX_DIMS];
    int64_t out_shape[MG_MAX_DIMS];
} contraction;

static void set_labels(int *dst, int nbatch, int a, int b) {
    for (int i = 0; i < nbatch; i++) dst[i] = i;
    int k = nbatch;
    if (a >= 0) dst[k++] = a;
    if (b >= 0) dst[k++] = b;
}

static int64_t prod(const int64_t *s, int n) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= s[i];
    return p;
}

static bool add_bias_here(const mg_spec *out) {
    const mg_mesh *mesh = out->mesh;
    for (int m = 0; m < mesh->ndim; m++)
        if (out->p[m].kind == MG_PLACE_PARTIAL && mesh->coord[m] != 0) return false;
    return true;
}

/* local GEMM for each kind; shapes are the local shards at the chosen specs */
static void run_gemm(gemm_kind kind, const mg_tensor *a, const mg_tensor *b, const mg_tensor *bias,
                     bool with_bias, mg_tensor *out, int b_ndim) {
    mg_backend *be = mg_backend_of(out);
    void *ctx = be->context;
    const struct mg_backend_iface *f = be->iface;
    if (out->numel == 0) return;
    int64_t inner = 0; /* contracted length */
    switch (kind) {
    case GEMM_LINEAR: {
        int64_t k = a->shape[a->ndim - 1], n = b->shape[0], m = a->numel / (k ? k : 1);
        if (k == 0) m = out->numel / n;
        inner = k;
        if (with_bias && bias) {
            /* bias fused: every row of out starts as the bias (one write pass,
             * instead of the GEMM zeroing out and a second pass adding it), then
             * the GEMM accumulates onto it (beta = 1) */
            int64_t shape[2] = {m, n}, bshape[2] = {1, n};
            mg_tensor *ov = mg_tensor_view(mg_step_arena(), out, 2, shape);
            mg_tensor *bv = mg_tensor_view(mg_step_arena(), (mg_tensor *)bias, 2, bshape);
            mg_tensor *zero = mg_tensor_alloc(mg_step_arena(), 0, NULL);
            if (!ov || !bv || !zero) return;
            f->fill(ctx, zero, 0.0f);
            f->binary(ctx, MG_BINARY_ADD, bv, zero, ov); /* out = bias, broadcast over rows */
            if (k) f->gemm(ctx, false, true, m, n, k, 1.0f, a->data, k, b->data, k, 1.0f, out->data, n);
            return;
        }
        if (k) f->gemm(ctx, false, true, m, n, k, 1.0f, a->data, k, b->data, k, 0.0f, out->data, n);
        break;
    }
    case GEMM_LINEAR_DX: {
        int64_t n = a->shape[a->ndim - 1], k = b->shape[1], m = out->numel / k;
        inner = n;
        if (n) f->gemm(ctx, false, false, m, k, n, 1.0f, a->data, n, b->data, k, 0.0f, out->data, k);
        break;
    }
    case GEMM_LINEAR_DW: {
        int64_t n = a->shape[a->ndim - 1], k = b->shape[b->ndim - 1], m = n ? a->numel / n : 0;
        if (!n) m = k ? b->numel / k : 0;
        inner = m;
        if (m) f->gemm(ctx, true, false, n, k, m, 1.0f, a->data, n, b->data, k, 0.0f, out->data, k);
        break;
    }
    case GEMM_MATMUL:
    case GEMM_MATMUL_DA: {
        int nd = a->ndim;
        int64_t m = a->shape[nd - 2], k = a->shape[nd - 1];
        int64_t n = out->shape[out->ndim - 1];
        int64_t z = prod(a->shape, nd - 2);
        bool tb = kind == GEMM_MATMUL_DA; /* b stored (K', N') and used transposed */
        int64_t ldb = b->shape[b->ndim - 1];
        inner = k;
        if (k == 0) break;
        if (b_ndim == 2) /* one weight for the whole batch: a single GEMM over Z*M rows */
            f->gemm(ctx, false, tb, z * m, n, k, 1.0f, a->data, k, b->data, ldb, 0.0f, out->data, n);
        else
            f->gemm_batched(ctx, false, tb, m, n, k, 1.0f, a->data, k, m * k, b->data, ldb,
                            b->shape[b->ndim - 2] * ldb, 0.0f, out->data, n, m * n, z);
        break;
    }
    case GEMM_MATMUL_DB: {
        int nd = a->ndim;
        int64_t m = a->shape[nd - 2], k = a->shape[nd - 1], n = b->shape[nd - 1];
        int64_t z = prod(a->shape, nd - 2);
        if (b_ndim == 2) { /* (K, N) = sum over Z*M rows */
            inner = z * m;
            if (inner)
                f->gemm(ctx, true, false, k, n, z * m, 1.0f, a->data, k, b->data, n, 0.0f,
                        out->data, n);
        } else {
            inner = m;
            if (m)
                f->gemm_batched(ctx, true, false, k, n, m, 1.0f, a->data, k, m * k, b->data, n,
                                m * n, 0.0f, out->data, n, k * n, z);
        }
        break;
    }
    }
    if (inner == 0) f->fill(ctx, out, 0.0f); /* an empty contraction sums to zero */
}

static mg_dtensor *contract(const char *who, gemm_kind kind, mg_op op, const mg_dtensor *a,
                            const mg_dtensor *b, const mg_dtensor *bias, const contraction *ct,
                            int b_ndim) {
    const mg_dtensor *xs[3] = {a, b, bias};
    int n = bias ? 3 : 2;
    const int *labels[3] = {ct->labels[0], ct->labels[1], ct->labels[2]};
    mg_candidates c;
    mg_rules_contraction(&c, n, ct->ndim, labels, ct->out_ndim, ct->out_labels, bias != NULL);
    mg_dtensor *in[3] = {NULL, NULL, NULL};
    mg_dtensor *y = mg_ops_begin(who, &c, n, xs, ct->out_ndim, ct->out_shape, in);
    if (!y) return NULL;
    run_gemm(kind, in[0]->local, in[1]->local, bias ? in[2]->local : NULL,
             bias && add_bias_here(&y->spec), y->local, b_ndim);
    if (op != MG_OP_COUNT) {
        mg_node *node = mg_ops_record(op, n, in, y);
        if (node) node->ndim = b_ndim;
    }
    return y;
}

/* ---- linear ---------------------------------------------------------------------- */

mg_dtensor *mg_linear(const mg_dtensor *x, const mg_dtensor *w, const mg_dtensor *b) {
    const char *who = "mg_linear";
    const mg_dtensor *xs[3] = {x, w, b};
    if (mg_ops_check_given(who, 3, xs, 2, "x or w") != MG_OK) return NULL;
    const mg_spec *X = &x->spec, *W = &w->spec;
    if (X->ndim < 1 || W->ndim != 2 || X->shape[X->ndim - 1] != W->shape[1])
        return mg_ops_shape_error(who, "x", &x->spec, "w", &w->spec,
                                  "want x (..., K) and w (N, K)");
    if (b && (b->spec.ndim != 1 || b->spec.shape[0] != W->shape[0]))
        return mg_ops_shape_error(who, "w", &w->spec, "bias", &b->spec,
                                  "the bias must be (N) with N = w's first dim");
    contraction ct;
    int nb = X->ndim - 1;
    ct.ndim[0] = X->ndim;
    set_labels(ct.labels[0], nb, LABEL_K, -1);
    ct.ndim[1] = 2;
    set_labels(ct.labels[1], 0, LABEL_N, LABEL_K);
    ct.ndim[2] = 1;
    set_labels(ct.labels[2], 0, LABEL_N, -1);
    ct.out_ndim = X->ndim;
    set_labels(ct.out_labels, nb, LABEL_N, -1);
    memcpy(ct.out_shape, X->shape, sizeof ct.out_shape);
    ct.out_shape[nb] = W->shape[0];
    return contract(who, GEMM_LINEAR, MG_OP_LINEAR, x, w, b, &ct, 2);
}

mg_dtensor *mg_op_linear_input_grad(const mg_dtensor *dy, const mg_dtensor *w) {
    contraction ct;
    int nb = dy->spec.ndim - 1;
    ct.ndim[0] = dy->spec.ndim;
    set_labels(ct.labels[0], nb, LABEL_N, -1);
    ct.ndim[1] = 2;
    set_labels(ct.labels[1], 0, LABEL_N, LABEL_K);
    ct.out_ndim = dy->spec.ndim;
    set_labels(ct.out_labels, nb, LABEL_K, -1);
    memcpy(ct.out_shape, dy->spec.shape, sizeof ct.out_shape);
    ct.out_shape[nb] = w->spec.shape[1];
    return contract("linear_input_grad", GEMM_LINEAR_DX, MG_OP_COUNT, dy, w, NULL, &ct, 2);
}

mg_dtensor *mg_op_linear_weight_grad(const mg_dtensor *dy, const mg_dtensor *x) {
    contraction ct;
    int nb = dy->spec.ndim - 1;
    ct.ndim[0] = dy->spec.ndim;
    set_labels(ct.labels[0], nb, LABEL_N, -1);
    ct.ndim[1] = x->spec.ndim;
    set_labels(ct.labels[1], nb, LABEL_K, -1);
    ct.out_ndim = 2;
    set_labels(ct.out_labels, 0, LABEL_N, LABEL_K);
    ct.out_shape[0] = dy->spec.shape[nb];
    ct.out_shape[1] = x->spec.shape[nb];
    return contract("linear_weight_grad", GEMM_LINEAR_DW, MG_OP_COUNT, dy, x, NULL, &ct, 2);
}

/* ---- matmul ---------------------------------------------------------------------- */

mg_dtensor *mg_matmul(const mg_dtensor *a, const mg_dtensor *b) {
    const char *who = "mg_matmul";
    const mg_dtensor *xs[2] = {a, b};
    if (mg_ops_check_given(who, 2, xs, 2, "input") != MG_OK) return NULL;
    const mg_spec *A = &a->spec, *B = &b->spec;
    int nd = A->ndim, nb = nd - 2;
    if (nd < 2 || B->ndim < 2 || A->shape[nd - 1] != B->shape[B->ndim - 2])
        return mg_ops_shape_error(who, "a", A, "b", B,
                                  "want a (..., M, K) and b (..., K, N) or (K, N)");
    if (B->ndim != 2 && (B->ndim != nd || !mg_shape_equal(nb, A->shape, nb, B->shape)))
        return mg_ops_shape_error(who, "a", A, "b", B, "b must be (K, N) or have a's batch dims");
    contraction ct;
    ct.ndim[0] = nd;
    set_labels(ct.labels[0], nb, LABEL_M, LABEL_K);
    ct.ndim[1] = B->ndim;
    set_labels(ct.labels[1], B->ndim == 2 ? 0 : nb, LABEL_K, LABEL_N);
    ct.out_ndim = nd;
    set_labels(ct.out_labels, nb, LABEL_M, LABEL_N);
    memcpy(ct.out_shape, A->shape, sizeof ct.out_shape);
    ct.out_shape[nd - 1] = B->shape[B->ndim - 1];
    return contract(who, GEMM_MATMUL, MG_OP_MATMUL, a, b, NULL, &ct, B->ndim);
}

mg_dtensor *mg_op_matmul_grad_a(const mg_dtensor *dc, const mg_dtensor *b) {
    int nd = dc->spec.ndim, nb = nd - 2, bnd = b->spec.ndim;
    contraction ct;
    ct.ndim[0] = nd;
    set_labels(ct.labels[0], nb, LABEL_M, LABEL_N);
    ct.ndim[1] = bnd;
    set_labels(ct.labels[1], bnd == 2 ? 0 : nb, LABEL_K, LABEL_N);
    ct.out_ndim = nd;
    set_labels(ct.out_labels, nb, LABEL_M, LABEL_K);
    memcpy(ct.out_shape, dc->spec.shape, sizeof ct.out_shape);
    ct.out_shape[nd - 1] = b->spec.shape[bnd - 2];
    return contract("matmul_grad_a", GEMM_MATMUL_DA, MG_OP_COUNT, dc, b, NULL, &ct, bnd);
}

mg_dtensor *mg_op_matmul_grad_b(const mg_dtensor *a, const mg_dtensor *dc, int b_ndim) {
    int nd = a->spec.ndim, nb = nd - 2;
    contraction ct;
    ct.ndim[0] = nd;
    set_labels(ct.labels[0], nb, LABEL_M, LABEL_K);
    ct.ndim[1] = nd;
    set_labels(ct.labels[1], nb, LABEL_M, LABEL_N);
    ct.out_ndim = b_ndim;
    set_labels(ct.out_labels, b_ndim == 2 ? 0 : nb, LABEL_K, LABEL_N);
    if (b_ndim == 2) {
        ct.out_shape[0] = a->spec.shape[nd - 1];
        ct.out_shape[1] = dc->spec.shape[nd - 1];
    } else {
        memcpy(ct.out_shape, a->spec.shape, sizeof ct.out_shape);
        ct.out_shape[nd - 2] = a->spec.shape[nd - 1];
        ct.out_shape[nd - 1] = dc->spec.shape[nd - 1];
    }
    return contract("matmul_grad_b", GEMM_MATMUL_DB, MG_OP_COUNT, a, dc, NULL, &ct, b_ndim);
}
