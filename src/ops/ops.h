/* ops.h: inside the ops layer: the gradient ops that the VJPs of several
 * files use, and the dispatch helpers of src/ops*.c. Each op is a record
 * (op_def.h) beside its public function; mg_op_run walks it through
 *   validate global shapes and meshes -> dist/rules picks target specs ->
 *   inputs redistributed (recorded, so backward runs the mirror) -> local
 *   kernel on local shards (size arguments made local from the output spec)
 *   -> a tape node (ops/tape.h) when gradients are wanted.
 * Files: ops.c (the path, redistribute, parameter copies), ops_shape.c
 * (layout), ops_math.c (pointwise, reductions, mse), ops_matmul.c (linear,
 * matmul), ops_nn.c (softmax, layer norm), ops_rms_norm.c, ops_rope.c (the
 * rotary embedding), ops_vocab.c (embedding, cross-entropy), ops_attention.c
 * (attention, grouped-query attention). */
#ifndef MG_OPS_H
#define MG_OPS_H

#include <stdbool.h>

#include "context.h"
#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/rules.h"
#include "ops/op_def.h"
#include "ops/tape.h"

/* ---- gradient ops (used by the VJPs; run with grad off, never recorded) ---- */

/* x brought to `target` (same mesh and global shape); x itself when equal.
 * Recorded when gradients are on (its VJP is the mirror move). */
mg_dtensor *mg_op_redistribute(const mg_dtensor *x, const mg_spec *target);
/* The same to placements p (one per mesh dim), as a model moves its
 * activations between its plan's regions; NULL x gives NULL (a chain of ops
 * stops at its first failure); `what` names x in a message. */
mg_dtensor *mg_op_redistribute_to(const mg_dtensor *x, const mg_placement *p, const char *what);
/* dy (..., N), w (N, K) -> dx (..., K) = dy w */
mg_dtensor *mg_op_linear_input_grad(const mg_dtensor *dy, const mg_dtensor *w);
/* dy (..., N), x (..., K) -> dw (N, K) = sum over the batch of dy^T x */
mg_dtensor *mg_op_linear_weight_grad(const mg_dtensor *dy, const mg_dtensor *x);
/* Sums g (a broadcast of `shape`) back to `shape`: the gradient of a broadcast. */
mg_dtensor *mg_op_sum_to(const mg_dtensor *g, int ndim, const int64_t *shape);
/* sum over dims, times `scale` (mean = sum * 1/n) */
mg_dtensor *mg_op_sum_scaled(const mg_dtensor *x, int n, const int *dims, int keepdim, float scale,
                             const char *who);
/* A 0-d tensor of value v, Replicate on every mesh dim (the seed of backward). */
mg_dtensor *mg_op_scalar(const mg_mesh *mesh, float v);

/* ---- dispatch helpers shared by src/ops*.c ---------------------------------- */

/* NULL inputs, freed tensors and mixed meshes: a message naming the op. */
int mg_ops_check_inputs(const char *who, int n, const mg_dtensor *const *xs);
/* The same, after checking that the first `required` inputs are given (else
 * MG_EINVAL "WHO: NAMES is NULL", names such as "x or w"). */
int mg_ops_check_given(const char *who, int n, const mg_dtensor *const *xs, int required,
                       const char *names);
/* Rule -> targets -> redistribute each input (NULL inputs skipped). xs_out[i]
 * receives the input at its target spec. */
int mg_ops_prepare(const char *who, const mg_candidates *cands, int n, const mg_dtensor *const *xs,
                   int out_ndim, const int64_t *out_shape, mg_dtensor **xs_out, mg_spec *out_spec);
/* MG_ESHAPE "WHO: NA (shape) and NB (shape) do not fit: WANT"; NULL. */
mg_dtensor *mg_ops_shape_error(const char *who, const char *na, const mg_spec *a, const char *nb,
                               const mg_spec *b, const char *want);
/* mg_ops_prepare, then the op's output (mg_ops_output of the spec the rule chose):
 * what most ops start with. NULL on failure (the message is set). */
mg_dtensor *mg_ops_begin(const char *who, const mg_candidates *cands, int n,
                         const mg_dtensor *const *xs, int out_ndim, const int64_t *out_shape,
                         mg_dtensor **xs_out);
/* A new output tensor of `spec`, local data uninitialized, from the step arena. */
mg_dtensor *mg_ops_output(const mg_spec *spec);
/* Records a node of `def` when gradients are on and any input wants one. */
mg_node *mg_ops_record(const mg_op_def *def, int n, mg_dtensor *const *inputs, mg_dtensor *out);
/* In a VJP: input i wants a gradient (asked for, and it takes one). */
bool mg_vjp_wants(const mg_node *n, int i);
/* Parameter copies (ops.c): a parameter (a leaf that requires grad) brought to
 * `target` for use, with its data in the scratch arena, given back when an op
 * starts that does not take it and gathered again when an op takes it.
 * Recorded like mg_op_redistribute. The plans (nn/param.c) use it for fsdp's
 * gathers; ops use it for parameters they are handed directly. */
mg_dtensor *mg_op_param_copy(const mg_dtensor *param, const mg_spec *target);
/* The parameter copies among xs (n of them, NULL entries skipped) gathered
 * again where they were given back, and the other copies given back: what an
 * op does before it reads its inputs (mg_ops_prepare does it; a gradient that
 * reads a parameter copy's data outside mg_ops_prepare calls it first). */
int mg_ops_hold(int n, const mg_dtensor *const *xs);
/* The parameter behind a parameter copy of this step, or NULL: backward sends
 * a copy's gradient to its parameter. */
mg_dtensor *mg_ops_param_of(const mg_dtensor *t);
/* t is a parameter copy whose data was given back (until an op takes it). */
bool mg_ops_copy_released(const mg_dtensor *t);
/* Every copy given back and the scratch arena reset (backward, after each
 * node: what the node gathered and the gradients it made go at once). */
void mg_ops_release_all(void);
/* The step ends (mg_step_end): its copies are forgotten. */
void mg_ops_step_end(void);
/* The cost of an op that copies its output's elements (ops_shape.c: the
 * layout ops, expand): no FLOPs, each element read and written. */
void mg_ops_copy_cost(const mg_op_call *c, mg_dtensor *const *in, const mg_dtensor *out,
                      mg_op_cost *cost);
/* normalizes a possibly negative dim; -1 and a message naming `who` when out of range */
int mg_ops_dim(const char *who, int dim, int ndim);

/* ---- helpers of the ops that reduce over a dim that may be sharded (ops.c) ----- */

/* The mesh dims (bit m: mesh dim m, of size > 1) whose placement shards dim d. */
unsigned mg_ops_shard_mask(const mg_spec *spec, int d);
/* buf (n floats, host or device) summed (or max-ed) over the mesh dims in mask,
 * one all-reduce per dim. Every rank of those dims holds the same n. */
int mg_ops_reduce_over(const mg_mesh *mesh, unsigned mask, float *buf, int64_t n, mg_reduce_op op);
/* g brought to spec, Partial made Replicate: the gradient of an output of spec. */
mg_dtensor *mg_ops_grad_at(const mg_dtensor *g, const mg_spec *spec);
/* A temporary local tensor (step arena) on the device of t. */
mg_tensor *mg_ops_temp(int ndim, const int64_t *shape);
/* The rows of a local tensor: the product of every dim but the last. */
int64_t mg_ops_local_rows(const mg_tensor *x);

/* ---- the norms over the last dim: layer norm, RMS norm (ops_nn.c) ---------------- */

/* The record's shape: x (c->x[0]) of at least one dim, its affine inputs
 * c->x[1..c->n) (weight, then bias) absent or (N), N its last dim, and eps
 * (c->args.f) finite and >= 0, each refused with a message; the output is x's
 * shape. */
int mg_ops_norm_shape(mg_op_call *c);
/* The record's rule: mg_rules_layer_norm (a shard of a row dim passes with
 * the affine inputs Replicate; x sharded on its last dim takes them sharded
 * alike). */
void mg_ops_norm_rule(const mg_op_call *c, mg_candidates *cands);
/* The spec of the gradient of affine input p: p's own, Partial on the mesh
 * dims that shard x's rows (each rank summed its own rows). */
mg_spec mg_ops_norm_affine_grad_spec(const mg_dtensor *x, const mg_dtensor *p);
/* The start of a norm's VJP: x and the weight held (ops.c's parameter
 * copies), *dy the gradient at the output's spec, and grads[i] a new tensor
 * for each input i that wants a gradient (dx at x's spec, an affine input's
 * at mg_ops_norm_affine_grad_spec), the others NULL. The VJP then fills
 * them with its kernels. */
int mg_ops_norm_vjp_begin(mg_node *node, mg_dtensor *g, mg_dtensor **dy, mg_dtensor **grads);
/* One call of a norm's record: x with its affine inputs (those of the
 * record's arity: weight, then bias; NULL where absent) and eps. */
mg_dtensor *mg_ops_norm_run(const mg_op_def *def, const char *who, const mg_dtensor *x,
                            const mg_dtensor *weight, const mg_dtensor *bias, float eps);
/* The fields a norm's record takes from the family: x required, the shape
 * and rule above, the VJP's gradient read at the output's placements. The
 * record names its own name, arity, kernel, cost and VJP. */
#define MG_OPS_NORM_FIELDS                                                                  \
    .required = 1, .required_names = "x", .shape = mg_ops_norm_shape,                       \
    .rule = mg_ops_norm_rule, .grad_at_output = true

#endif
