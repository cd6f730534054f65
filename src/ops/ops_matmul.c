/* ops_matmul.c: contractions on distributed tensors: mg_linear (y = x w^T + b,
 * w (N, K) as in PyTorch), mg_matmul ((Z.., M, K) @ (Z.., K, N) or (K, N)), and
 * the gradients their VJPs use. Each names its dims with labels so one rule
 * (mg_rules_contraction) gives every strategy: batch/row dims sharded -> output
 * sharded; w sharded on N -> output sharded on its last dim; the contracted dim
 * sharded on both -> Partial output. The local kernel is one cblas-style GEMM
 * with transpose flags (no transposed copies). Each op and gradient op is a
 * record (op_def.h) whose `kind` is its GEMM; the contraction's labels follow
 * from the kind and the inputs' global shapes (contraction_of). */
#include <string.h>

#include "backend/backend.h"
#include "context.h"
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

static bool partial_out(const mg_spec *out) {
    for (int m = 0; m < out->mesh->ndim; m++)
        if (out->p[m].kind == MG_PLACE_PARTIAL && out->mesh->shape[m] > 1) return true;
    return false;
}

static bool add_bias_here(const mg_spec *out) {
    const mg_mesh *mesh = out->mesh;
    for (int m = 0; m < mesh->ndim; m++)
        if (out->p[m].kind == MG_PLACE_PARTIAL && mesh->coord[m] != 0) return false;
    return true;
}

/* The contracted length of a call of `kind` on local shards. */
static int64_t gemm_inner(gemm_kind kind, const mg_tensor *a, const mg_tensor *b,
                          const mg_tensor *out, int b_ndim) {
    switch (kind) {
    case GEMM_LINEAR: return a->shape[a->ndim - 1];
    case GEMM_LINEAR_DX: return a->shape[a->ndim - 1];
    case GEMM_LINEAR_DW: {
        int64_t n = a->shape[a->ndim - 1], k = b->shape[b->ndim - 1];
        return n ? a->numel / n : k ? b->numel / k : 0;
    }
    case GEMM_MATMUL:
    case GEMM_MATMUL_DA: return a->shape[a->ndim - 1];
    case GEMM_MATMUL_DB: {
        int nd = a->ndim;
        return b_ndim == 2 ? prod(a->shape, nd - 2) * a->shape[nd - 2] : a->shape[nd - 2];
    }
    }
    (void)out;
    return 0;
}

/* How a contraction's GEMMs run: the backend, its inputs a and b (local
 * shards) and which of them are weights, and whether they run as the
 * backend's bf16 GEMM (bf16 mode, on a backend that has one: backend.h). */
typedef struct {
    const struct mg_backend_iface *f;
    void *ctx;
    const mg_tensor *a, *b;
    bool weight[2], bf16;
} gemm_run;

/* An input of the bf16 GEMM: a weight's bf16 copy of this step (cast once,
 * mg_backend_bf16_weight), anything else its floats, rounded as read. */
static mg_gemm_in gemm_input(const mg_tensor *t, bool weight, int64_t ld, int64_t stride) {
    const uint16_t *copy = weight ? mg_backend_bf16_weight(t) : NULL;
    if (copy) return (mg_gemm_in){copy, ld, stride, true};
    return (mg_gemm_in){t->data, ld, stride, false};
}

/* C = op(a) op(b) (+ beta C) over `batch` entries: the backend's gemm (one
 * entry, not `batched`) or gemm_batched, or its bf16 GEMM, which also adds
 * the bias when one is given. */
static void gemm_call(const gemm_run *g, bool batched, bool ta, bool tb, int64_t m, int64_t n,
                      int64_t k, int64_t lda, int64_t sa, int64_t ldb, int64_t sb, float beta,
                      float *c, int64_t ldc, int64_t sc, int64_t batch, const float *bias) {
    if (g->bf16) {
        mg_gemm_in a = gemm_input(g->a, g->weight[0], lda, sa);
        mg_gemm_in b = gemm_input(g->b, g->weight[1], ldb, sb);
        g->f->gemm_bf16(g->ctx, ta, tb, m, n, k, 1.0f, &a, &b, beta, c, ldc, sc, batch, bias);
    } else if (batched) {
        g->f->gemm_batched(g->ctx, ta, tb, m, n, k, 1.0f, g->a->data, lda, sa, g->b->data, ldb, sb,
                           beta, c, ldc, sc, batch);
    } else {
        g->f->gemm(g->ctx, ta, tb, m, n, k, 1.0f, g->a->data, lda, g->b->data, ldb, beta, c, ldc);
    }
}

/* local GEMM for each kind; shapes are the local shards at the chosen specs;
 * weight[i]: input i is a weight (kept for the step in bf16, gemm_input) */
static int run_gemm(gemm_kind kind, const mg_tensor *a, const mg_tensor *b, const mg_tensor *bias,
                     bool with_bias, mg_tensor *out, int b_ndim, const bool weight[2]) {
    mg_backend *be = mg_backend_of(out);
    void *ctx = be->context;
    const struct mg_backend_iface *f = be->iface;
    if (out->numel == 0) return MG_OK;
    gemm_run g = {f, ctx, a, b, {weight[0], weight[1]}, mg_backend_gemm_bf16() && f->gemm_bf16};
    int64_t inner = 0; /* contracted length */
    switch (kind) {
    case GEMM_LINEAR: {
        int64_t k = a->shape[a->ndim - 1], n = b->shape[0], m = a->numel / (k ? k : 1);
        if (k == 0) m = out->numel / n;
        inner = k;
        if (with_bias && bias && g.bf16 && k) { /* the bf16 GEMM adds the bias as it writes */
            gemm_call(&g, false, false, true, m, n, k, k, 0, k, 0, 0.0f, out->data, n, 0, 1,
                      bias->data);
            return MG_OK;
        }
        if (with_bias && bias) {
            /* bias fused: every row of out starts as the bias (one write pass,
             * instead of the GEMM zeroing out and a second pass adding it), then
             * the GEMM accumulates onto it (beta = 1) */
            int64_t shape[2] = {m, n}, bshape[2] = {1, n};
            mg_tensor *ov = mg_tensor_view(mg_step_arena(), out, 2, shape);
            mg_tensor *bv = mg_tensor_view(mg_step_arena(), (mg_tensor *)bias, 2, bshape);
            mg_tensor *zero = mg_tensor_alloc(mg_step_arena(), 0, NULL);
            if (!ov || !bv || !zero) return mg_last_code();
            f->fill(ctx, zero, 0.0f);
            f->binary(ctx, MG_BINARY_ADD, bv, zero, ov); /* out = bias, broadcast over rows */
            if (k) gemm_call(&g, false, false, true, m, n, k, k, 0, k, 0, 1.0f, out->data, n, 0, 1, NULL);
            return MG_OK;
        }
        if (k) gemm_call(&g, false, false, true, m, n, k, k, 0, k, 0, 0.0f, out->data, n, 0, 1, NULL);
        break;
    }
    case GEMM_LINEAR_DX: {
        int64_t n = a->shape[a->ndim - 1], k = b->shape[1], m = out->numel / k;
        inner = n;
        if (n) gemm_call(&g, false, false, false, m, k, n, n, 0, k, 0, 0.0f, out->data, k, 0, 1, NULL);
        break;
    }
    case GEMM_LINEAR_DW: {
        int64_t n = a->shape[a->ndim - 1], k = b->shape[b->ndim - 1], m = n ? a->numel / n : 0;
        if (!n) m = k ? b->numel / k : 0;
        inner = m;
        if (m) gemm_call(&g, false, true, false, n, k, m, n, 0, k, 0, 0.0f, out->data, k, 0, 1, NULL);
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
            gemm_call(&g, false, false, tb, z * m, n, k, k, 0, ldb, 0, 0.0f, out->data, n, 0, 1,
                      NULL);
        else
            gemm_call(&g, true, false, tb, m, n, k, k, m * k, ldb, b->shape[b->ndim - 2] * ldb,
                      0.0f, out->data, n, m * n, z, NULL);
        break;
    }
    case GEMM_MATMUL_DB: {
        int nd = a->ndim;
        int64_t m = a->shape[nd - 2], k = a->shape[nd - 1], n = b->shape[nd - 1];
        int64_t z = prod(a->shape, nd - 2);
        if (b_ndim == 2) { /* (K, N) = sum over Z*M rows */
            inner = z * m;
            if (inner)
                gemm_call(&g, false, true, false, k, n, z * m, k, 0, n, 0, 0.0f, out->data, n, 0,
                          1, NULL);
        } else {
            inner = m;
            if (m)
                gemm_call(&g, true, true, false, k, n, m, k, m * k, n, m * n, 0.0f, out->data, n,
                          k * n, z, NULL);
        }
        break;
    }
    }
    if (inner == 0) f->fill(ctx, out, 0.0f); /* an empty contraction sums to zero */
    return MG_OK;
}

/* The labels and the output's global shape of a call of GEMM `kind` (the
 * matmul's b_ndim: c->args.ndim). */
static void contraction_of(const mg_op_call *c, contraction *ct) {
    const mg_spec *A = &c->x[0]->spec, *B = &c->x[1]->spec;
    int nd = A->ndim, b_ndim = c->args.ndim;
    switch ((gemm_kind)c->def->kind) {
    case GEMM_LINEAR: { /* x (.., K), w (N, K) [, b (N)] */
        int nb = nd - 1;
        ct->ndim[0] = nd;
        set_labels(ct->labels[0], nb, LABEL_K, -1);
        ct->ndim[1] = 2;
        set_labels(ct->labels[1], 0, LABEL_N, LABEL_K);
        ct->ndim[2] = 1;
        set_labels(ct->labels[2], 0, LABEL_N, -1);
        ct->out_ndim = nd;
        set_labels(ct->out_labels, nb, LABEL_N, -1);
        memcpy(ct->out_shape, A->shape, sizeof ct->out_shape);
        ct->out_shape[nb] = B->shape[0];
        break;
    }
    case GEMM_LINEAR_DX: { /* dy (.., N), w (N, K) */
        int nb = nd - 1;
        ct->ndim[0] = nd;
        set_labels(ct->labels[0], nb, LABEL_N, -1);
        ct->ndim[1] = 2;
        set_labels(ct->labels[1], 0, LABEL_N, LABEL_K);
        ct->out_ndim = nd;
        set_labels(ct->out_labels, nb, LABEL_K, -1);
        memcpy(ct->out_shape, A->shape, sizeof ct->out_shape);
        ct->out_shape[nb] = B->shape[1];
        break;
    }
    case GEMM_LINEAR_DW: { /* dy (.., N), x (.., K) */
        int nb = nd - 1;
        ct->ndim[0] = nd;
        set_labels(ct->labels[0], nb, LABEL_N, -1);
        ct->ndim[1] = B->ndim;
        set_labels(ct->labels[1], nb, LABEL_K, -1);
        ct->out_ndim = 2;
        set_labels(ct->out_labels, 0, LABEL_N, LABEL_K);
        ct->out_shape[0] = A->shape[nb];
        ct->out_shape[1] = B->shape[nb];
        break;
    }
    case GEMM_MATMUL: { /* a (Z.., M, K), b (Z.., K, N) or (K, N) */
        int nb = nd - 2;
        ct->ndim[0] = nd;
        set_labels(ct->labels[0], nb, LABEL_M, LABEL_K);
        ct->ndim[1] = B->ndim;
        set_labels(ct->labels[1], B->ndim == 2 ? 0 : nb, LABEL_K, LABEL_N);
        ct->out_ndim = nd;
        set_labels(ct->out_labels, nb, LABEL_M, LABEL_N);
        memcpy(ct->out_shape, A->shape, sizeof ct->out_shape);
        ct->out_shape[nd - 1] = B->shape[B->ndim - 1];
        break;
    }
    case GEMM_MATMUL_DA: { /* dc (Z.., M, N), b (Z.., K, N) or (K, N) */
        int nb = nd - 2, bnd = B->ndim;
        ct->ndim[0] = nd;
        set_labels(ct->labels[0], nb, LABEL_M, LABEL_N);
        ct->ndim[1] = bnd;
        set_labels(ct->labels[1], bnd == 2 ? 0 : nb, LABEL_K, LABEL_N);
        ct->out_ndim = nd;
        set_labels(ct->out_labels, nb, LABEL_M, LABEL_K);
        memcpy(ct->out_shape, A->shape, sizeof ct->out_shape);
        ct->out_shape[nd - 1] = B->shape[bnd - 2];
        break;
    }
    case GEMM_MATMUL_DB: { /* a (Z.., M, K), dc (Z.., M, N) -> b's shape */
        int nb = nd - 2;
        ct->ndim[0] = nd;
        set_labels(ct->labels[0], nb, LABEL_M, LABEL_K);
        ct->ndim[1] = nd;
        set_labels(ct->labels[1], nb, LABEL_M, LABEL_N);
        ct->out_ndim = b_ndim;
        set_labels(ct->out_labels, b_ndim == 2 ? 0 : nb, LABEL_K, LABEL_N);
        if (b_ndim == 2) {
            ct->out_shape[0] = A->shape[nd - 1];
            ct->out_shape[1] = B->shape[nd - 1];
        } else {
            memcpy(ct->out_shape, A->shape, sizeof ct->out_shape);
            ct->out_shape[nd - 2] = A->shape[nd - 1];
            ct->out_shape[nd - 1] = B->shape[nd - 1];
        }
        break;
    }
    }
}

/* The gradient ops' inputs come from the forward: their shapes fit. */
static int contraction_shape(mg_op_call *c) {
    contraction ct;
    contraction_of(c, &ct);
    c->out_ndim = ct.out_ndim;
    memcpy(c->out_shape, ct.out_shape, sizeof c->out_shape);
    return MG_OK;
}

static void contraction_rule(const mg_op_call *c, mg_candidates *cands) {
    contraction ct;
    contraction_of(c, &ct);
    const int *labels[3] = {ct.labels[0], ct.labels[1], ct.labels[2]};
    mg_rules_contraction(cands, c->n, ct.ndim, labels, ct.out_ndim, ct.out_labels, c->n == 3);
}

/* A weight, as the bf16 GEMMs keep it for the step: a leaf made on the heap
 * that wants a gradient (a parameter; its copies gathered for use are not:
 * they live in the scratch arena and are rounded as the GEMM reads them). */
static bool is_weight(const mg_dtensor *t) {
    return (t->flags & MG_DTENSOR_HEAP) && t->requires_grad && !t->node;
}

/* The deterministic mode: a contraction whose K is split over ranks (a Partial
 * output) must split it along the halving tree (backend.h), else the ranks'
 * sums would not be the one rank's; and a row-parallel product takes its bias
 * after the ranks' sum, as one rank adds it after its whole sum. */
static int det_check(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    int64_t parts = 1;
    for (int m = 0; m < out->spec.mesh->ndim; m++)
        if (out->spec.p[m].kind == MG_PLACE_PARTIAL) parts *= out->spec.mesh->shape[m];
    int64_t k = gemm_inner((gemm_kind)c->def->kind, in[0]->local, in[1]->local, out->local,
                           c->args.ndim) * parts;
    if (parts > 1 && !mg_det_split_ok(k, parts))
        return mg_error(MG_EINVAL, "%s: the deterministic mode cannot split a sum of %lld terms "
                        "over %lld ranks: each rank's part must be one of the sum's halves "
                        "(quarters, ...) in its fixed tree, which needs at least %lld terms, a "
                        "multiple of %lld; give the model larger dims (embd, hidden, kv-heads x "
                        "head dim) or the batch more rows, or use a smaller degree", c->who,
                        (long long)k, (long long)parts, (long long)(MG_DET_LEAF * parts),
                        (long long)parts);
    return MG_OK;
}

/* Sums a Partial output over its ranks (the tree, comm_tree.c) and marks it
 * Replicate there: the deterministic mode's row-parallel product with a bias. */
static int det_sum_output(mg_dtensor *out) {
    const mg_mesh *mesh = out->spec.mesh;
    unsigned mask = 0;
    for (int m = 0; m < mesh->ndim; m++)
        if (out->spec.p[m].kind == MG_PLACE_PARTIAL && mesh->shape[m] > 1) mask |= 1u << m;
    int rc = mg_ops_reduce_over(mesh, mask, out->local->data, out->local->numel, MG_REDUCE_SUM);
    for (int m = 0; m < mesh->ndim; m++)
        if (out->spec.p[m].kind == MG_PLACE_PARTIAL) out->spec.p[m] = MG_REPLICATE;
    return rc;
}

/* The product alone, summed over the ranks, then the bias on every rank. */
static int det_bias_after_sum(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out,
                              const bool weight[2]) {
    int rc = run_gemm((gemm_kind)c->def->kind, in[0]->local, in[1]->local, NULL, false, out->local,
                      c->args.ndim, weight);
    if (rc == MG_OK) rc = det_sum_output(out);
    if (rc != MG_OK) return rc;
    mg_backend *be = mg_backend_of(out->local);
    int64_t n = in[2]->local->numel, rows = n ? out->local->numel / n : 0;
    int64_t os[2] = {rows, n}, bs[2] = {1, n};
    mg_tensor *ov = mg_tensor_view(mg_step_arena(), out->local, 2, os);
    mg_tensor *bv = mg_tensor_view(mg_step_arena(), in[2]->local, 2, bs);
    if (!ov || !bv) return mg_last_code();
    be->iface->binary(be->context, MG_BINARY_ADD, ov, bv, ov);
    return MG_OK;
}

static int contraction_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    bool bias = c->n == 3, weight[2] = {is_weight(in[0]), is_weight(in[1])};
    if (mg_get_deterministic()) {
        int rc = det_check(c, in, out);
        if (rc != MG_OK) return rc;
        if (bias && partial_out(&out->spec)) return det_bias_after_sum(c, in, out, weight);
    }
    return run_gemm((gemm_kind)c->def->kind, in[0]->local, in[1]->local,
                    bias ? in[2]->local : NULL, bias && add_bias_here(&out->spec), out->local,
                    c->args.ndim, weight);
}

static void contraction_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                             mg_op_cost *cost) {
    const mg_tensor *a = in[0]->local, *b = in[1]->local;
    cost->flops = 2.0 * (double)out->local->numel *
                  (double)gemm_inner((gemm_kind)c->def->kind, a, b, out->local, c->args.ndim);
    cost->bytes = 4.0 * (double)(a->numel + b->numel + out->local->numel);
}

#define CONTRACTION(gemm)                                                                  \
    .kind = (gemm), .shape = contraction_shape, .rule = contraction_rule,                  \
    .kernel = contraction_kernel, .cost = contraction_cost

/* ---- linear ---------------------------------------------------------------------- */

static int linear_shape(mg_op_call *c) {
    const mg_spec *X = &c->x[0]->spec, *W = &c->x[1]->spec;
    const mg_dtensor *b = c->x[2];
    if (X->ndim < 1 || W->ndim != 2 || X->shape[X->ndim - 1] != W->shape[1]) {
        mg_ops_shape_error(c->who, "x", X, "w", W, "want x (..., K) and w (N, K)");
        return mg_last_code();
    }
    if (b && (b->spec.ndim != 1 || b->spec.shape[0] != W->shape[0])) {
        mg_ops_shape_error(c->who, "w", W, "bias", &b->spec,
                           "the bias must be (N) with N = w's first dim");
        return mg_last_code();
    }
    c->args.ndim = 2;
    return contraction_shape(c);
}

static int linear_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    mg_dtensor *x = n->inputs[0], *w = n->inputs[1];
    if (mg_vjp_wants(n, 0)) NEED(out[0] = mg_op_linear_input_grad(g, w));
    if (mg_vjp_wants(n, 1)) NEED(out[1] = mg_op_linear_weight_grad(g, x));
    if (n->inputs[2] && mg_vjp_wants(n, 2)) {
        int dims[MG_MAX_DIMS], nb = g->spec.ndim - 1;
        for (int d = 0; d < nb; d++) dims[d] = d;
        NEED(out[2] = nb ? mg_op_sum_scaled(g, nb, dims, 0, 1.0f, "linear bias grad") : g);
    }
    return MG_OK;
}

/* dW (N, K) = dy^T x over the rows */
static bool linear_rows(const mg_node *n, mg_dtensor *g, int i, const mg_dtensor **a,
                        const mg_dtensor **b) {
    if (i != 1) return false;
    *a = g;            /* dy (..., N) */
    *b = n->inputs[0]; /* x (..., K) */
    return true;
}

static const mg_op_def linear_def = {
    .name = "linear", .arity = 3, .required = 2, .required_names = "x or w",
    .kind = GEMM_LINEAR, .shape = linear_shape, .rule = contraction_rule,
    .kernel = contraction_kernel, .cost = contraction_cost, .vjp = linear_vjp, .rows = linear_rows,
};
static const mg_op_def linear_input_grad_def = {
    .name = "linear_input_grad", .arity = 2, .required = 2, CONTRACTION(GEMM_LINEAR_DX),
};
static const mg_op_def linear_weight_grad_def = {
    .name = "linear_weight_grad", .arity = 2, .required = 2, CONTRACTION(GEMM_LINEAR_DW),
};

mg_dtensor *mg_linear(const mg_dtensor *x, const mg_dtensor *w, const mg_dtensor *b) {
    mg_op_call c = {.who = "mg_linear", .n = b ? 3 : 2, .x = {x, w, b}};
    return mg_op_run(&linear_def, &c);
}

mg_dtensor *mg_op_linear_input_grad(const mg_dtensor *dy, const mg_dtensor *w) {
    mg_op_call c = {.n = 2, .x = {dy, w}, .args.ndim = 2};
    return mg_op_run(&linear_input_grad_def, &c);
}

mg_dtensor *mg_op_linear_weight_grad(const mg_dtensor *dy, const mg_dtensor *x) {
    mg_op_call c = {.n = 2, .x = {dy, x}, .args.ndim = 2};
    return mg_op_run(&linear_weight_grad_def, &c);
}

/* ---- matmul: args.ndim is b's rank (2: one weight for the whole batch) ---------- */

static int matmul_shape(mg_op_call *c) {
    const mg_spec *A = &c->x[0]->spec, *B = &c->x[1]->spec;
    int nd = A->ndim, nb = nd - 2;
    if (nd < 2 || B->ndim < 2 || A->shape[nd - 1] != B->shape[B->ndim - 2]) {
        mg_ops_shape_error(c->who, "a", A, "b", B, "want a (..., M, K) and b (..., K, N) or (K, N)");
        return mg_last_code();
    }
    if (B->ndim != 2 && (B->ndim != nd || !mg_shape_equal(nb, A->shape, nb, B->shape))) {
        mg_ops_shape_error(c->who, "a", A, "b", B, "b must be (K, N) or have a's batch dims");
        return mg_last_code();
    }
    c->args.ndim = B->ndim;
    return contraction_shape(c);
}

static const mg_op_def matmul_grad_a_def = {
    .name = "matmul_grad_a", .arity = 2, .required = 2, CONTRACTION(GEMM_MATMUL_DA),
};
static const mg_op_def matmul_grad_b_def = {
    .name = "matmul_grad_b", .arity = 2, .required = 2, CONTRACTION(GEMM_MATMUL_DB),
};

static int matmul_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    if (mg_vjp_wants(n, 0)) {
        mg_op_call c = {.n = 2, .x = {g, n->inputs[1]}, .args.ndim = n->inputs[1]->spec.ndim};
        NEED(out[0] = mg_op_run(&matmul_grad_a_def, &c));
    }
    if (mg_vjp_wants(n, 1)) {
        mg_op_call c = {.n = 2, .x = {n->inputs[0], g}, .args.ndim = n->args.ndim};
        NEED(out[1] = mg_op_run(&matmul_grad_b_def, &c));
    }
    return MG_OK;
}

static const mg_op_def matmul_def = {
    .name = "matmul", .arity = 2, .required = 2, .required_names = "input",
    .kind = GEMM_MATMUL, .shape = matmul_shape, .rule = contraction_rule,
    .kernel = contraction_kernel, .cost = contraction_cost, .vjp = matmul_vjp,
};

mg_dtensor *mg_matmul(const mg_dtensor *a, const mg_dtensor *b) {
    return mg_op_run2(&matmul_def, "mg_matmul", a, b);
}
