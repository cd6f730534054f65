/* ops_rope.c: the rotary position embedding (RoPE) on distributed tensors, in
 * llama's convention (llama2.c's apply_rotary_emb, Meta's code): x (B, T, H,
 * D), the pair (2i, 2i + 1) of each head's row at sequence index t rotated by
 * the angle pos * theta^(-2i / D), pos = pos0 + t with t the global index
 * along T.
 *
 * Placements (mg_rules_rope): a shard of B, T or H passes; a T shard is
 * sequence parallel, each rank's positions starting at pos0 plus its offset
 * along T. Partial passes (a rotation is linear). A shard of D is refused: its
 * pairs would be split. The VJP is the same op with the negative angle, on
 * the gradient at the output's placements.
 * The record (op_def.h): rope, args.pos = pos0, args.f = theta, args.flag =
 * the negative angle (the VJP's). */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/mesh.h"
#include "ops/ops.h"
#include "status.h"

static int rope_shape(mg_op_call *c) {
    const mg_spec *X = &c->x[0]->spec;
    char a[96];
    if (X->ndim != 4)
        return mg_error(MG_ESHAPE, "%s: x %s is not (B, T, H, D): want 4 dims, the head dim last",
                        c->who, mg_shape_format(a, sizeof a, X->ndim, X->shape));
    if (X->shape[3] % 2)
        return mg_error(MG_ESHAPE,
                        "%s: x %s has an odd head dim D = %lld: the rotary embedding turns pairs "
                        "(2i, 2i + 1); use an even head size",
                        c->who, mg_shape_format(a, sizeof a, X->ndim, X->shape),
                        (long long)X->shape[3]);
    float theta = c->args.f;
    if (!(theta > 0.0f) || isinf(theta))
        return mg_error(MG_EINVAL, "%s: theta is %g; it must be a finite number > 0 (llama: 10000)",
                        c->who, theta);
    if (c->args.pos < 0)
        return mg_error(MG_EINVAL, "%s: pos0 is %lld; the first position must be 0 or more", c->who,
                        (long long)c->args.pos);
    for (int m = 0; m < X->mesh->ndim; m++)
        if (X->p[m].kind == MG_PLACE_SHARD && X->p[m].dim == 3 && X->mesh->shape[m] > 1)
            return mg_error(MG_EPLACEMENT,
                            "%s: x is sharded on its head dim D (mesh dim %d): that would split "
                            "the pairs it rotates; shard x on B, T or H instead",
                            c->who, m);
    c->out_ndim = 4;
    memcpy(c->out_shape, X->shape, sizeof c->out_shape);
    return MG_OK;
}

static void rope_rule(const mg_op_call *c, mg_candidates *cands) {
    (void)c;
    mg_rules_rope(cands);
}

static int rope_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out) {
    int64_t shape[MG_MAX_DIMS], off[MG_MAX_DIMS];
    mg_spec_local(&in[0]->spec, NULL, shape, off);
    mg_backend *be = mg_backend_of(out->local);
    be->iface->rope(be->context, in[0]->local, c->args.pos + off[1], c->args.f,
                    c->args.flag != 0, out->local);
    return MG_OK;
}

static void rope_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                      mg_op_cost *cost) {
    (void)c, (void)in;
    double n = (double)out->local->numel;
    cost->flops = 3 * n; /* two products and a sum an element */
    cost->bytes = 4.0 * 2 * n;
}

static mg_dtensor *rope_op(const char *who, const mg_dtensor *x, int64_t pos0, float theta,
                           bool inverse);

/* dx: g turned back by the same angles */
static int rope_vjp(mg_node *node, mg_dtensor *g, mg_dtensor **grads) {
    NEED(grads[0] = rope_op("mg_rope (backward)", g, node->args.pos, node->args.f,
                            node->args.flag == 0));
    return MG_OK;
}

static const mg_op_def rope_def = {
    .name = "rope", .arity = 1, .required = 1, .required_names = "x",
    .shape = rope_shape, .rule = rope_rule, .kernel = rope_kernel,
    .cost = rope_cost, .vjp = rope_vjp, .grad_at_output = true,
};

static mg_dtensor *rope_op(const char *who, const mg_dtensor *x, int64_t pos0, float theta,
                           bool inverse) {
    mg_op_call c = {.who = who, .n = 1, .x = {x}, .args = {.f = theta, .pos = pos0,
                                                           .flag = inverse}};
    return mg_op_run(&rope_def, &c);
}

mg_dtensor *mg_rope(const mg_dtensor *x, int64_t pos0, float theta) {
    return rope_op("mg_rope", x, pos0, theta, false);
}
