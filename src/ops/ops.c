/* ops.c: the dispatch path every op walks (mg_op_run: validate -> shape ->
 * rule -> redistribute -> kernel -> record, op_def.h), the redistribute op
 * and the public mg_redistribute, the parameter copies, and what the op
 * families share (mg_ops_shard_mask, mg_ops_reduce_over). The ops
 * themselves are in ops_*.c (ops.h lists them). */
#include "ops/ops.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "backend/backend.h"
#include "context.h"
#include "dist/mesh.h"
#include "dist/redistribute.h"
#include "ops/ops_state.h"
#include "ops/tape.h"
#include "status.h"
#include "trace.h"

/* ---- redistribute ----------------------------------------------------------- */

/* The mirror: back to the source placements, a Partial source taking a
 * Replicate gradient (each addend's gradient is the whole gradient). */
static int redistribute_vjp(mg_node *n, mg_dtensor *g, mg_dtensor **out) {
    mg_spec target = n->inputs[0]->spec;
    for (int m = 0; m < target.mesh->ndim; m++)
        if (n->placements[m].kind == MG_PLACE_PARTIAL) target.p[m] = MG_REPLICATE;
        else target.p[m] = n->placements[m];
    NEED(out[0] = mg_op_redistribute(g, &target));
    return MG_OK;
}

/* Run by redistribute_recorded, not mg_op_run: the move is the op. */
static const mg_op_def redistribute_def = {
    .name = "redistribute", .arity = 1, .required = 1, .vjp = redistribute_vjp,
};

int mg_ops_dim(const char *who, int dim, int ndim) {
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= ndim) {
        mg_error(MG_EINVAL, "%s: dim %d is out of range for a %d-d tensor (use 0..%d or -%d..-1)",
                 who, dim, ndim, ndim - 1, ndim);
        return -1;
    }
    return d;
}

int mg_ops_check_inputs(const char *who, int n, const mg_dtensor *const *xs) {
    const mg_dtensor *first = NULL;
    for (int i = 0; i < n; i++) {
        if (!xs[i]) continue;
        int rc = mg_dtensor_alive(xs[i], who);
        if (rc != MG_OK) return rc;
        if (!first) {
            first = xs[i];
            continue;
        }
        if ((rc = mg_dtensor_same_mesh(first, xs[i], who)) != MG_OK) return rc;
    }
    if (!first) return mg_error(MG_EINVAL, "%s: input is NULL", who);
    return MG_OK;
}

int mg_ops_check_given(const char *who, int n, const mg_dtensor *const *xs, int required,
                       const char *names) {
    for (int i = 0; i < required; i++)
        if (!xs[i]) return mg_error(MG_EINVAL, "%s: %s is NULL", who, names);
    return mg_ops_check_inputs(who, n, xs);
}

mg_dtensor *mg_ops_shape_error(const char *who, const char *na, const mg_spec *a, const char *nb,
                               const mg_spec *b, const char *want) {
    char x[96], y[96];
    return mg_error_null(MG_ESHAPE, "%s: %s %s and %s %s do not fit: %s", who, na,
                         mg_shape_format(x, sizeof x, a->ndim, a->shape), nb,
                         mg_shape_format(y, sizeof y, b->ndim, b->shape), want);
}

mg_dtensor *mg_ops_output(const mg_spec *spec) {
    mg_arena *arena = mg_step_arena();
    int64_t local[MG_MAX_DIMS];
    mg_spec_local(spec, NULL, local, NULL);
    mg_tensor *t = mg_tensor_alloc(arena, spec->ndim, local);
    if (!t) return NULL;
    return mg_dtensor_make(spec, t, arena);
}

bool mg_vjp_wants(const mg_node *n, int i) {
    return (n->want_mask >> i & 1u) && n->inputs[i] && mg_tape_wants_grad(n->inputs[i]);
}

mg_node *mg_ops_record(const mg_op_def *def, int n, mg_dtensor *const *inputs, mg_dtensor *out) {
    if (def != &redistribute_def) mg_trace_op_end(); /* --trace: the op's span ends */
    if (!mg_grad_enabled()) return NULL;
    bool want = false;
    for (int i = 0; i < n; i++) want |= mg_tape_wants_grad(inputs[i]);
    if (!want) return NULL;
    /* a heap tensor (or the one an op's copy stands for) must outlive the graph */
    for (int i = 0; i < n; i++) {
        mg_dtensor *held = inputs[i] ? mg_ops_param_of(inputs[i]) : NULL;
        if (!held) held = inputs[i];
        if (held && (held->flags & MG_DTENSOR_HEAP)) held->graph_step = mg_ctx()->steps + 1;
    }
    return mg_tape_push(def, n, inputs, out);
}

/* y is x moved to other placements: recorded so that backward moves its
 * gradient back. */
static mg_node *record_redistribute(mg_dtensor *x, mg_dtensor *y) {
    mg_node *node = mg_ops_record(&redistribute_def, 1, &x, y);
    if (node)
        for (int m = 0; m < x->spec.mesh->ndim; m++) node->placements[m] = x->spec.p[m];
    return node;
}

/* x moved to `target`, recorded so that backward moves its gradient back.
 * `share`: when no data moves (the specs differ only on mesh dims of size 1),
 * the result is a view of x's shard rather than a copy. */
static mg_dtensor *redistribute_recorded(const mg_dtensor *x, const mg_spec *target, bool share) {
    mg_tensor *local = NULL;
    if (share && mg_redistribute_is_noop(&x->spec, target)) {
        local = mg_tensor_view(mg_step_arena(), x->local, x->local->ndim, x->local->shape);
        if (!local) return NULL;
    } else if (mg_redistribute_local(&x->spec, x->local, target, &local, mg_step_arena()) != MG_OK) {
        return NULL;
    }
    mg_dtensor *y = mg_dtensor_make(target, local, mg_step_arena());
    if (y) record_redistribute((mg_dtensor *)x, y);
    return y;
}

mg_dtensor *mg_op_redistribute(const mg_dtensor *x, const mg_spec *target) {
    if (mg_spec_equal(&x->spec, target)) return (mg_dtensor *)x;
    return redistribute_recorded(x, target, true);
}

mg_dtensor *mg_op_redistribute_to(const mg_dtensor *x, const mg_placement *p, const char *what) {
    if (!x) return NULL;
    mg_spec s;
    if (mg_spec_make(&s, x->spec.mesh, p, x->spec.mesh->ndim, x->spec.ndim, x->spec.shape,
                     what) != MG_OK)
        return NULL;
    return mg_op_redistribute(x, &s);
}

/* Every rank must ask for the same placements: one small all-reduce checks it
 * (ranks asking for different ones ran on with wrong blocks, or waited in the
 * watchdog for minutes) on a mesh of the whole world, as the user's are. */
mg_dtensor *mg_redistribute(const mg_dtensor *x, const mg_placement *p, int n) {
    if (!x) return mg_error_null(MG_EINVAL, "mg_redistribute: input is NULL");
    if (mg_dtensor_alive(x, "mg_redistribute") != MG_OK) return NULL;
    if (mg_check_not_finalized("mg_redistribute") != MG_OK) return NULL;
    mg_spec target;
    int rc = mg_spec_make(&target, x->spec.mesh, p, n, x->spec.ndim, x->spec.shape,
                          "mg_redistribute");
    if (x->spec.mesh->size == mg_world_size())
        rc = mg_dtensor_agree(rc, &target, "mg_redistribute");
    if (rc != MG_OK) return NULL;
    return redistribute_recorded(x, &target, false);
}

/* ---- parameter copies ---------------------------------------------------------
 * A parameter brought to other placements for use (fsdp: a Shard(0) weight
 * gathered to Replicate, by mg_op_param_copy or by an op that takes the
 * parameter itself) is a "parameter copy": its data lives in the scratch arena
 * and is given back as soon as an op starts that does not take it, so a step
 * holds about one op's gathered weights instead of all of them until backward.
 * A copy given back is gathered again when an op takes it (mg_ops_prepare),
 * in the forward pass and in backward alike. The copies of this step are the
 * context's `copies` (context.h). */

static mg_param_copy_entry *copy_entry(const mg_dtensor *t) {
    mg_ops_state *c = mg_ops();
    for (int i = c->n_copies - 1; i >= 0; i--)
        if (c->copies[i].copy == t) return &c->copies[i];
    return NULL;
}

mg_dtensor *mg_ops_param_of(const mg_dtensor *t) {
    const mg_param_copy_entry *e = t ? copy_entry(t) : NULL;
    return e ? e->param : NULL;
}

bool mg_ops_copy_released(const mg_dtensor *t) {
    const mg_param_copy_entry *e = copy_entry(t);
    return e && !e->held;
}

static void reset_scratch(void) {
    mg_arena_reset(mg_scratch_arena());
    mg_ops()->gathered_bytes = 0;
}

void mg_ops_step_end(void) {
    mg_ops()->n_copies = 0;
    reset_scratch();
}

void mg_ops_release_all(void) {
    mg_ops_state *c = mg_ops();
    for (int i = 0; i < c->n_copies; i++) c->copies[i].held = 0;
    reset_scratch();
}

static int add_copy(mg_dtensor *copy, mg_dtensor *param, int held) {
    mg_ops_state *c = mg_ops();
    int rc = mg_array_grow((void **)&c->copies, &c->cap_copies, c->n_copies + 1, sizeof *c->copies,
                           "parameter copies");
    if (rc != MG_OK) return rc;
    c->copies[c->n_copies++] = (mg_param_copy_entry){copy, param, held};
    return MG_OK;
}

/* Gives back the held copies that are not among xs. The scratch arena is reset
 * once none is held, if it holds nothing but copies: else something else
 * lives there (a gradient on its way, autograd/backward.c), and backward
 * resets it when that is done. */
static void release_except(const mg_dtensor *const *xs, int n) {
    mg_ops_state *c = mg_ops();
    int held = 0;
    for (int i = 0; i < c->n_copies; i++) {
        mg_param_copy_entry *e = &c->copies[i];
        if (!e->held) continue;
        bool used = false;
        for (int j = 0; j < n; j++) used |= xs[j] == e->copy;
        e->held = used;
        held += used;
    }
    if (!held && mg_arena_data_used(mg_scratch_arena()) == c->gathered_bytes) reset_scratch();
}

/* `param` brought to `spec`: data from the scratch arena, header from the step arena. */
static mg_tensor *gather(const mg_dtensor *param, const mg_spec *spec) {
    mg_arena *step = mg_step_arena(), *scratch = mg_scratch_arena();
    mg_arena *was = mg_arena_redirect_data(step, scratch);
    /* a gradient's destination (backward's hint) is not for a copy that may
     * be the same size */
    size_t hint_bytes;
    void *hint = mg_arena_hint(scratch, &hint_bytes);
    mg_arena_hint_data(scratch, NULL, 0);
    size_t before = mg_arena_data_used(scratch);
    mg_tensor *local = NULL;
    int rc = mg_redistribute_local(&param->spec, param->local, spec, &local, step);
    mg_arena_hint_data(scratch, hint, hint_bytes);
    mg_arena_redirect_data(step, was);
    mg_ops()->gathered_bytes += mg_arena_data_used(scratch) - before;
    return rc == MG_OK ? local : NULL;
}

static int regather(mg_param_copy_entry *e) {
    mg_tensor *local = gather(e->param, &e->copy->spec);
    if (!local) return mg_last_code() ? mg_last_code() : MG_ENOMEM;
    e->copy->local = local;
    e->held = 1;
    return MG_OK;
}

static bool is_param(const mg_dtensor *t) { return !t->node && t->requires_grad; }

mg_dtensor *mg_op_param_copy(const mg_dtensor *param, const mg_spec *target) {
    if (mg_spec_equal(&param->spec, target)) return (mg_dtensor *)param;
    /* where no data moves (mesh dims of size 1) the copy is a view of the
     * parameter: nothing to give back, but backward still sends its gradient
     * straight to the parameter */
    bool view = mg_redistribute_is_noop(&param->spec, target);
    mg_dtensor *y;
    if (view) {
        y = redistribute_recorded(param, target, true);
    } else {
        mg_tensor *local = gather(param, target);
        y = local ? mg_dtensor_make(target, local, mg_step_arena()) : NULL;
        if (y) record_redistribute((mg_dtensor *)param, y);
    }
    if (!y) return NULL;
    return add_copy(y, (mg_dtensor *)param, !view) == MG_OK ? y : NULL;
}

int mg_ops_hold(int n, const mg_dtensor *const *xs) {
    release_except(xs, n); /* copies the earlier ops used, not this one */
    for (int i = 0; i < n; i++) {
        mg_param_copy_entry *e = xs[i] ? copy_entry(xs[i]) : NULL;
        int rc = e && !e->held ? regather(e) : MG_OK;
        if (rc != MG_OK) return rc;
    }
    return MG_OK;
}

int mg_ops_prepare(const char *who, const mg_candidates *cands, int n, const mg_dtensor *const *xs,
                   int out_ndim, const int64_t *out_shape, mg_dtensor **xs_out, mg_spec *out_spec) {
    const mg_spec *specs[MG_RULE_MAX_INPUTS] = {0};
    mg_spec targets[MG_RULE_MAX_INPUTS];
    mg_trace_op_begin(who); /* --trace: the op's span starts */
    for (int i = 0; i < n; i++) specs[i] = xs[i] ? &xs[i]->spec : NULL;
    int rc = mg_check_not_finalized(who); /* the inputs' lives: mg_ops_check_inputs, before */
    if (rc != MG_OK) return rc;
    rc = mg_rules_choose(cands, n, specs, out_ndim, out_shape, targets, out_spec);
    if (rc != MG_OK) return mg_error(rc, "%s: %s", who, mg_last_error());
    if ((rc = mg_ops_hold(n, xs)) != MG_OK) return rc;
    for (int i = 0; i < n; i++) {
        xs_out[i] = NULL;
        if (!xs[i]) continue;
        xs_out[i] = is_param(xs[i]) ? mg_op_param_copy(xs[i], &targets[i])
                                    : mg_op_redistribute(xs[i], &targets[i]);
        if (!xs_out[i]) return mg_last_code() ? mg_last_code() : MG_ECOMM;
    }
    return MG_OK;
}

mg_dtensor *mg_ops_begin(const char *who, const mg_candidates *cands, int n,
                         const mg_dtensor *const *xs, int out_ndim, const int64_t *out_shape,
                         mg_dtensor **xs_out) {
    mg_spec out_spec;
    if (mg_ops_prepare(who, cands, n, xs, out_ndim, out_shape, xs_out, &out_spec) != MG_OK)
        return NULL;
    return mg_ops_output(&out_spec);
}

mg_dtensor *mg_op_scalar(const mg_mesh *mesh, float v) {
    mg_placement p[MG_MAX_MESH_DIMS];
    for (int m = 0; m < mesh->ndim; m++) p[m] = MG_REPLICATE;
    mg_spec spec;
    if (mg_spec_make(&spec, mesh, p, mesh->ndim, 0, NULL, "scalar") != MG_OK) return NULL;
    mg_dtensor *t = mg_ops_output(&spec);
    if (!t) return NULL;
    mg_backend_of(t->local)->iface->fill(mg_backend_of(t->local)->context, t->local, v);
    return t;
}

/* ---- the path of a record ----------------------------------------------------- */

/* The kernel's cost (the record's, op_def.h): the op's span in --trace, and
 * summed in the context as the steps run (context.h's op_flops, op_bytes). */
static void add_cost(const mg_op_def *def, const mg_op_call *c, mg_dtensor *const *in,
                     const mg_dtensor *out) {
    mg_op_cost k = {0, 4.0 * (double)out->local->numel};
    if (def->cost) def->cost(c, in, out, &k);
    mg_ops_state *ctx = mg_ops();
    ctx->op_flops += k.flops;
    ctx->op_bytes += k.bytes;
    mg_trace_op_cost(k.flops, k.bytes);
}

mg_dtensor *mg_op_run(const mg_op_def *def, mg_op_call *c) {
    c->def = def;
    if (!c->who) c->who = def->name;
    if (mg_ops_check_given(c->who, c->n, c->x, def->required, def->required_names) != MG_OK ||
        def->shape(c) != MG_OK)
        return NULL;
    mg_candidates cands;
    def->rule(c, &cands);
    mg_dtensor *in[MG_OP_MAX_INPUTS] = {NULL};
    mg_dtensor *y = mg_ops_begin(c->who, &cands, c->n, c->x, c->out_ndim, c->out_shape, in);
    if (!y || def->kernel(c, in, y) != MG_OK) return NULL;
    add_cost(def, c, in, y);
    if (!def->vjp) return y; /* a gradient op: its span ends at the next op's start */
    mg_node *node = mg_ops_record(def, c->n, in, y);
    if (node) {
        node->args = c->args;
        node->saved = c->saved;
    }
    return y;
}

mg_dtensor *mg_op_run1(const mg_op_def *def, const char *who, const mg_dtensor *x, float f) {
    mg_op_call c = {.who = who, .n = 1, .x = {x}, .args.f = f};
    return mg_op_run(def, &c);
}

mg_dtensor *mg_op_run2(const mg_op_def *def, const char *who, const mg_dtensor *a,
                       const mg_dtensor *b) {
    mg_op_call c = {.who = who, .n = 2, .x = {a, b}};
    return mg_op_run(def, &c);
}

/* ---- shared by the op families ----------------------------------------------- */

unsigned mg_ops_shard_mask(const mg_spec *spec, int d) {
    unsigned mask = 0;
    for (int m = 0; m < spec->mesh->ndim; m++)
        if (spec->p[m].kind == MG_PLACE_SHARD && spec->p[m].dim == d && spec->mesh->shape[m] > 1)
            mask |= 1u << m;
    return mask;
}

int mg_ops_reduce_over(const mg_mesh *mesh, unsigned mask, float *buf, int64_t n, mg_reduce_op op) {
    for (int m = 0; m < mesh->ndim; m++) {
        if (!(mask >> m & 1u)) continue;
        int rc = mg_comm_all_reduce(mesh->dim_comm[m], buf, n, op);
        if (rc != MG_OK) return rc;
    }
    return MG_OK;
}
