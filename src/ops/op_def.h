/* op_def.h: the record of an op. Everything meshgrad knows about one op lives
 * in one mg_op_def, next to the op's public function: its name, its inputs,
 * how its output's global shape follows from theirs, the sharding rule's
 * candidates, the local kernel, the vector-Jacobian product and the cost.
 * There is no table of ops: a node on the tape points at its op's record.
 *
 * mg_op_run walks one call of an op through the dispatch path:
 *   inputs checked -> def->shape (global shapes and arguments; the output's
 *   shape) -> def->rule (candidates) -> each input redistributed to the
 *   chosen spec, recorded (mg_ops_begin) -> def->kernel on local shards ->
 *   a tape node when gradients are wanted and the op has a VJP.
 * An op without a VJP is a gradient op (a linear's dx, gelu's backward): the
 * VJPs run it with grad off, and it is never recorded.
 *
 * Exports mg_op_args, mg_op_call, mg_op_cost, mg_op_def, mg_op_run, and the
 * pieces records share: the pointwise family (ops_math.c) and NEED. */
#ifndef MG_OPS_OP_DEF_H
#define MG_OPS_OP_DEF_H

#include <stdbool.h>
#include <stdint.h>

#include "dist/dtensor.h"
#include "dist/rules.h"
#include "status.h"

#define MG_OP_MAX_INPUTS 3 /* of one node; a cat of more is a tree of cats */

struct mg_node;
struct mg_op_def;

/* What a node keeps for its op's VJP besides inputs and output: set by the
 * op's public function (or its shape function) and copied onto the node. */
typedef struct {
    int i[MG_MAX_DIMS]; /* a permutation, a reduced-dims mask, a dim */
    int ni;
    int flag;           /* causal (attention), log (softmax), keepdim (sum), inverse (rope) */
    float f;            /* the scale of a sum or mean, of mg_scale; layer norm's eps;
                         * rope's theta */
    int64_t pos;        /* rope's first position */
    int ndim;           /* a global shape: the input's (reshape, expand), b's rank (matmul) */
    int64_t shape[MG_MAX_DIMS];
} mg_op_args;

/* One call of an op, as mg_op_run walks it. */
typedef struct {
    const struct mg_op_def *def; /* set by mg_op_run */
    const char *who; /* the name in messages: the public function's ("mg_gelu");
                      * NULL: the record's */
    int n;           /* inputs given (absent optional ones are NULL) */
    const mg_dtensor *x[MG_OP_MAX_INPUTS];
    mg_op_args args;
    /* set by def->shape */
    int out_ndim;
    int64_t out_shape[MG_MAX_DIMS];
    /* set by def->kernel: a tensor the VJP reads (the rows' statistics) */
    mg_tensor *saved;
} mg_op_call;

/* The work of one kernel call on this rank's shards. */
typedef struct {
    double flops; /* floating-point operations (a multiply-add is 2) */
    double bytes; /* bytes read and written */
} mg_op_cost;

typedef struct mg_op_def {
    const char *name; /* "gelu": in --trace, backward's messages and graph checks */
    int arity;        /* inputs at most */
    int required;     /* the first `required` inputs must be given ... */
    const char *required_names; /* ... else "WHO: NAMES is NULL" ("x or w") */
    /* checks the inputs' global shapes and c->args (a message naming c->who
     * on failure); sets c->out_ndim and c->out_shape */
    int (*shape)(mg_op_call *c);
    /* the candidates for one mesh dim (dist/rules.h) */
    void (*rule)(const mg_op_call *c, mg_candidates *cands);
    /* the local work: in[i] is input i at the chosen spec (NULL where absent),
     * out the output, made at the rule's spec; may collect statistics over
     * the mesh dims that split a row (ops.h's reduce helpers) */
    int (*kernel)(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out);
    /* the cost of that kernel; NULL: it moves only out's bytes */
    void (*cost)(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                 mg_op_cost *cost);
    /* The VJP: grads[i] gets the gradient of input i (its global shape, any
     * placement) for the inputs whose bit is set in node->want_mask (ops.h's
     * mg_vjp_wants), from g, the gradient of the output. Written with the
     * ops themselves, so each gradient is placed by the same rules as a
     * forward value. NULL: a gradient op, never recorded. */
    int (*vjp)(struct mg_node *node, mg_dtensor *g, mg_dtensor **grads);
    /* The VJP's results are new tensors made for their inputs alone: the
     * engine may add later contributions into them in place. */
    bool vjp_fresh;
    /* The VJP of input 0 added into grad (that input's gradient, the
     * engine's own) in place: MG_OK, or 1 (nothing done) where grad's
     * placements do not allow it and the engine adds vjp's result. NULL:
     * never (a narrow's gradient goes straight into its slice). */
    int (*vjp_add)(struct mg_node *node, mg_dtensor *g, mg_dtensor *grad);
    /* When the gradient of input i is a sum over rows of a^T b (a linear's
     * weight: dW = dy^T x), sets a and b: the gradient reducer may compute it
     * in pieces (dist/reducer.h). NULL: never. */
    bool (*rows)(const struct mg_node *node, mg_dtensor *g, int i, const mg_dtensor **a,
                 const mg_dtensor **b);
    /* the VJP reads g at the output's placements with Partial made Replicate:
     * the engine sums it once for every input that wants a gradient */
    bool grad_at_output;
    /* a family's kernel: MG_UNARY_* or MG_BINARY_* (backend.h) for the
     * pointwise ops, the GEMM of a contraction (ops_matmul.c) */
    int kind;
    /* the pointwise family's: how a Partial input passes (dist/rules.h),
     * and the cost */
    mg_linearity linearity;
    double flops_per_element;
} mg_op_def;

/* Runs one call of def (see above). NULL with a message on failure. */
mg_dtensor *mg_op_run(const mg_op_def *def, mg_op_call *c);

/* The pointwise family (ops_math.c): out = f(x[, y]) elementwise, with
 * broadcasting. A record of it names its kernel (def->kind), its
 * linearity and its FLOPs per element, and takes these for the rest. */
int mg_op_pointwise_shape(mg_op_call *c);
void mg_op_pointwise_rule(const mg_op_call *c, mg_candidates *cands);
int mg_op_unary_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out);
int mg_op_binary_kernel(mg_op_call *c, mg_dtensor *const *in, mg_dtensor *out);
void mg_op_pointwise_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                          mg_op_cost *cost);
/* One- and two-input calls of a record, for the public functions. */
mg_dtensor *mg_op_run1(const mg_op_def *def, const char *who, const mg_dtensor *x, float f);
mg_dtensor *mg_op_run2(const mg_op_def *def, const char *who, const mg_dtensor *a,
                       const mg_dtensor *b);

/* In a VJP: a NULL result returns its error. */
#define NEED(p)                                                       \
    do {                                                              \
        if (!(p)) return mg_last_code() ? mg_last_code() : MG_ENOMEM; \
    } while (0)

#endif
