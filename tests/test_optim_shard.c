/* test_optim_shard.c (MPI): the optimizer step of a data-parallel parameter
 * split across the ranks of a node (nn/optim_shard.h), on a small MLP
 * (Linear(IN, HID), ReLU, Linear(HID, OUT), mse loss) whose first weight is
 * large enough for the split (>= MG_GRAD_LARGE_FLOATS elements) and whose
 * other parameters take the ordinary path. Each case trains the model
 * distributed and, in the same process, the same model with everything
 * Replicate (no Partial, no communication, never split), from the same initial
 * parameters on the same global batches, and compares parameters and optimizer
 * state after every step. It also checks the path really taken: fc1.weight's
 * value and state in shared memory and its shard_dim (-1 at 1 rank), the
 * gradient left in parts by the second and later backward passes (rows of
 * the sum for a weight whole on every rank, dist/reducer_rows.h; each rank's
 * unsummed part for a tp-sharded one), value and state one copy that every
 * rank maps (so bitwise equal), the small parameters unsplit:
 * - SGD with momentum and weight decay;
 * - the weight used twice, in its linear and in a penalty, in both orders;
 * - mg_grad of an unsummed gradient before the step (the step then matches,
 *   and has the same bits as a step that sums the parts itself) and after it;
 * - gradient accumulation over two half batches without mg_zero_grad;
 * - AdamW (both state tensors), and AdamW taking over from SGD without momentum;
 * - mg_clip_grad_norm on unsummed gradients;
 * - at 4 ranks, 2x2 meshes: dp,tp (split over dim 0, tp-sharded weight), batch
 *   split over dim 1 (split over dim 1), batch split over both dims (summed
 *   over two dims: never split). */
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "dist/reducer.h"
#include "dist/reducer_buckets.h"
#include "meshgrad.h"
#include "nn/optim.h"
#include "nn/param.h"
#include "nn/plan.h"
#include "tensor.h"
#include "testutil.h"

#define RTOL 1e-5

static int world;

enum { OUT = 16, BATCH = 16, SEED = 11 };
enum { W1, B1, W2, B2, NPARAM }; /* the table's order */

/* IN and HID of the 1-D cases: fc1.weight has 601 * 513 = 308313 elements, an
 * odd count, so the ranks' parts [r n/k, (r+1) n/k) are uneven and no part is
 * a whole number of the step's tiles. */
enum { IN = 513, HID = 601 };

typedef struct {
    mg_mesh *mesh;
    int64_t in, hid;
    mg_placement batch[MG_MAX_MESH_DIMS];
    mg_param_table t;
    mg_optimizer opt;
} model;

/* The model on `mesh`: placed by `plan`, or (plan NULL) every parameter
 * Replicate and the batch at `batch` (NULL: Replicate, the reference). */
static void model_init(model *m, mg_mesh *mesh, const mg_plan *plan, const mg_placement *batch,
                       int64_t in, int64_t hid, mg_optim_kind kind, float momentum, float wd) {
    memset(m, 0, sizeof *m);
    m->mesh = mesh;
    m->in = in;
    m->hid = hid;
    int nd = mesh->ndim;
    for (int d = 0; d < nd; d++) m->batch[d] = batch ? batch[d] : MG_REPLICATE;
    if (plan) mg_plan_batch(plan, m->batch);
    const int64_t widths[3] = {in, hid, OUT};
    for (int l = 0; l < 2; l++) {
        mg_placement ws[MG_MAX_MESH_DIMS], wu[MG_MAX_MESH_DIMS], bs[MG_MAX_MESH_DIMS],
            bu[MG_MAX_MESH_DIMS];
        for (int d = 0; d < nd; d++) ws[d] = wu[d] = bs[d] = bu[d] = MG_REPLICATE;
        if (plan) mg_plan_linear(plan, l, ws, wu, bs, bu);
        float bound = 1.0f / sqrtf((float)widths[l]);
        char name[32];
        snprintf(name, sizeof name, "fc%d.weight", l + 1);
        int rc = mg_params_add(&m->t, mesh, name, 2, (int64_t[]){widths[l + 1], widths[l]}, ws, wu,
                               SEED, -bound, bound);
        mg_assert_all(rc == 2 * l, "%s: %s", name, mg_last_error());
        snprintf(name, sizeof name, "fc%d.bias", l + 1);
        rc = mg_params_add(&m->t, mesh, name, 1, (int64_t[]){widths[l + 1]}, bs, bu, SEED, -bound,
                           bound);
        mg_assert_all(rc == 2 * l + 1, "%s: %s", name, mg_last_error());
    }
    mg_optimizer_init(&m->opt, kind, momentum, wd);
    mg_assert_all(mg_optimizer_add_state(&m->opt, &m->t) == MG_OK, "state: %s", mg_last_error());
}

/* Rows [row0, row0 + rows) of the global (BATCH, cols) tensor of `seed`, at
 * the batch placements. */
static mg_dtensor *batch_rows(const model *m, int64_t cols, uint64_t seed, int64_t row0,
                              int64_t rows) {
    float *full = malloc((size_t)(BATCH * cols) * sizeof(float));
    mg_test_fill(full, BATCH * cols, seed);
    mg_tensor *t = mg_tensor_from_data(2, (int64_t[]){rows, cols}, full + row0 * cols);
    mg_dtensor *d = mg_distribute(m->mesh, t, m->batch, m->mesh->ndim);
    mg_tensor_free(t);
    free(full);
    return d;
}

/* Forward and backward of step `step`'s batch, rows [row0, row0 + rows), the
 * loss mse * scale. Gradients add to what is there (no zeroing here). */
/* 1e-3 sum(fc1.weight^2): a second use of the weight, outside its linear. */
static mg_dtensor *penalty(model *m) {
    mg_dtensor *w = mg_params_use(&m->t, W1), *sq = w ? mg_mul(w, w) : NULL;
    mg_dtensor *sum = sq ? mg_sum(sq) : NULL;
    return sum ? mg_scale(sum, 1e-3f) : NULL;
}

/* Forward and backward of (scale times) the mse loss on batch rows [row0,
 * row0 + rows) of step `step`, plus the penalty when `reg` is set: recorded
 * after the forward pass (reg 1: backward reaches it first) or before it
 * (reg 2: backward reaches the linear first). */
static void backward_reg(model *m, int step, int64_t row0, int64_t rows, float scale, int reg) {
    mg_dtensor *x = batch_rows(m, m->in, 100 + (uint64_t)step, row0, rows);
    mg_dtensor *target = batch_rows(m, OUT, 200 + (uint64_t)step, row0, rows);
    mg_assert_all(x && target, "batch: %s", mg_last_error());
    mg_param_table *t = &m->t;
    mg_dtensor *before = reg == 2 ? penalty(m) : NULL;
    mg_dtensor *h = mg_linear(x, mg_params_use(t, W1), mg_params_use(t, B1));
    if (h) h = mg_relu(h);
    mg_dtensor *y = h ? mg_linear(h, mg_params_use(t, W2), mg_params_use(t, B2)) : NULL;
    mg_dtensor *loss = y ? mg_mse_loss(y, target) : NULL;
    if (loss && scale != 1.0f) loss = mg_scale(loss, scale);
    if (loss && reg) {
        mg_dtensor *p = reg == 2 ? before : penalty(m);
        loss = p ? mg_add(loss, p) : NULL;
    }
    mg_assert_all(loss != NULL, "forward: %s", mg_last_error());
    mg_assert_all(mg_backward(loss) == MG_OK, "backward: %s", mg_last_error());
    mg_step_end();
    mg_dtensor_free(x);
    mg_dtensor_free(target);
}

static void backward(model *m, int step, int64_t row0, int64_t rows, float scale) {
    backward_reg(m, step, row0, rows, scale, 0);
}

static void step(model *m, float lr) {
    mg_params_collect_grads(&m->t);
    mg_assert_all(mg_optimizer_step(&m->opt, &m->t, lr) == MG_OK, "step: %s", mg_last_error());
}

static void zero_grads(model *m) {
    mg_assert_all(mg_params_zero_grads(&m->t) == MG_OK, "zero grads: %s", mg_last_error());
}

/* A fresh backward of step s on the whole batch, for a model and its reference. */
static void both_backward(model *m, model *ref, int s) {
    zero_grads(m);
    zero_grads(ref);
    backward(m, s, 0, BATCH, 1.0f);
    backward(ref, s, 0, BATCH, 1.0f);
}

/* Every parameter and state tensor of m against the reference. */
static void check_params(model *m, model *ref, const char *what, int s) {
    char msg[256] = "";
    for (int i = 0; i < NPARAM; i++) {
        mg_param *p = &m->t.p[i], *r = &ref->t.p[i];
        mg_assert_all(mg_test_same_full(p->value, r->value, RTOL, msg, sizeof msg),
                      "%s step %d: %s: %s", what, s, p->name, msg);
        for (int k = 0; k < mg_optimizer_state_count(&m->opt); k++)
            mg_assert_all(mg_test_same_full(p->state[k], r->state[k], RTOL, msg, sizeof msg),
                          "%s step %d: %s %s: %s", what, s, p->name,
                          mg_optimizer_state_name(&m->opt, k), msg);
        mg_assert_all(r->shard_dim == -1, "%s: the reference's %s was split", what, r->name);
    }
}

/* The gradients of m (mg_grad: summed) against the reference's. */
static void check_grads(model *m, model *ref, const char *what, int s) {
    char msg[256] = "";
    for (int i = 0; i < NPARAM; i++) {
        mg_dtensor *g = mg_grad(m->t.p[i].value), *gr = mg_grad(ref->t.p[i].value);
        mg_assert_all(mg_test_same_full(g, gr, RTOL, msg, sizeof msg),
                      "%s step %d: gradient of %s: %s", what, s, m->t.p[i].name, msg);
    }
}

static uint64_t fnv(const float *x, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *b = (const unsigned char *)x;
    for (size_t k = 0; k < (size_t)n * sizeof(float); k++) {
        h ^= b[k];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* 1 when every rank of c holds the same bits in its local x. */
static int same_bits(mg_comm *c, const mg_tensor *x) {
    uint64_t h = fnv(x->data, x->numel), lo = h, hi = h;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, c->mpi);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, c->mpi);
    return lo == hi;
}

/* x lies in shared memory of c, this rank's copy where the comm says it is. */
static int shared(mg_comm *c, const mg_tensor *x) {
    return mg_comm_shared_peer(c, x->data, x->numel, 0) != NULL &&
           mg_comm_shared_peer(c, x->data, x->numel, c->rank) == x->data;
}

/* x lies in shared memory of c as one copy: every rank of c maps this memory. */
static int shared_one(mg_comm *c, const mg_tensor *x) {
    for (int q = 0; q < c->size; q++)
        if (mg_comm_shared_peer(c, x->data, x->numel, q) != x->data) return 0;
    return 1;
}

/* After a step: fc1.weight split over mesh dim `dim` (-1: not split), its value
 * and state one copy in that dim's shared memory, the same bits on every rank;
 * the small parameters never split. */
static void check_split(model *m, int dim, const char *what, int s) {
    mg_param *p = &m->t.p[W1];
    int ns = mg_optimizer_state_count(&m->opt);
    mg_assert_all(p->shard_dim == dim, "%s step %d: fc1.weight shard_dim %d, want %d", what, s,
                  p->shard_dim, dim);
    for (int i = B1; i < NPARAM; i++) {
        const mg_param *q = &m->t.p[i];
        mg_assert_all(q->shard_dim == -1 && !mg_reducer_deferred(q->value),
                      "%s step %d: the small %s was split", what, s, q->name);
    }
    if (dim < 0) {
        mg_assert_all(!p->one_copy,
                      "%s step %d: fc1.weight not split but kept once per node", what, s);
        return;
    }
    mg_comm *c = m->mesh->dim_comm[dim];
    mg_assert_all(mg_reducer_deferred(p->value) && p->one_copy,
                  "%s step %d: fc1.weight not deferred and kept once per node", what, s);
    mg_assert_all(shared_one(c, p->value->local), "%s step %d: fc1.weight's value not in shared memory",
                  what, s);
    mg_assert_all(same_bits(c, p->value->local), "%s step %d: fc1.weight's replicas differ", what,
                  s);
    for (int k = 0; k < ns; k++) {
        const char *state = mg_optimizer_state_name(&m->opt, k);
        mg_assert_all(shared_one(c, p->state[k]->local),
                      "%s step %d: fc1.weight's %s not in shared memory", what, s, state);
        mg_assert_all(same_bits(c, p->state[k]->local),
                      "%s step %d: fc1.weight's %s replicas differ", what, s, state);
    }
}

/* One step of a model and its reference, then the split and every parameter
 * and state checked. */
static void both_step(model *m, model *ref, float lr, int dim, const char *what, int s) {
    step(m, lr);
    step(ref, lr);
    check_split(m, dim, what, s);
    check_params(m, ref, what, s);
}

/* After a backward of 0-based step s: fc1.weight's gradient left in parts
 * exactly when it is split, from the first step on (the optimizer marked it
 * when it made its state, so every step, a resumed run's first one included,
 * computes the same way). The parts are rows
 * of the sum (reducer_rows.h) when the weight is whole on every rank, else each
 * rank's unsummed partial gradient (a tp-sharded weight). */
static const char *form_name(mg_grad_form form) {
    return form == MG_GRAD_ROWS ? "rows of the sum" : form == MG_GRAD_LOCAL ? "unsummed" : "summed";
}

static void check_unsummed(model *m, int dim, const char *what, int s) {
    mg_dtensor *v = m->t.p[W1].value;
    int want = dim >= 0, whole = 1, have_dim = -1;
    for (int d = 0; d < m->mesh->ndim; d++)
        if (m->mesh->shape[d] > 1 && v->spec.p[d].kind != MG_PLACE_REPLICATE) whole = 0;
    mg_grad_form form = whole ? MG_GRAD_ROWS : MG_GRAD_LOCAL;
    mg_grad_form have = mg_reducer_form(v, &have_dim);
    int parts = mg_param_grad_in_parts(&m->t.p[W1]);
    mg_assert_all(want ? have == form : !parts, "%s step %d: fc1.weight's gradient %s, want %s",
                  what, s, form_name(have), !want ? "summed" : form_name(form));
    mg_assert_all(!want || have_dim == dim, "%s step %d: split over dim %d, want %d", what, s,
                  have_dim, dim);
    for (int i = B1; i < NPARAM; i++)
        mg_assert_all(!mg_param_grad_in_parts(&m->t.p[i]),
                      "%s step %d: the small %s left unsummed", what, s, m->t.p[i].name);
}

static mg_mesh *mesh1d(void) { return mg_mesh_new(1, &world); }

static void dp_plan(mg_plan *plan) {
    mg_assert_all(mg_plan_parse("dp", plan) == MG_OK, "plan: %s", mg_last_error());
}

/* the dim of a 1-D dp mesh that splits fc1.weight */
static int dp_dim(void) { return world > 1 ? 0 : -1; }

/* A model on the 1-D dp mesh and its reference (everything Replicate), both
 * with the same optimizer. */
static void dp_models(model *m, model *ref, mg_mesh *mesh, mg_optim_kind kind, float momentum,
                      float wd) {
    mg_plan plan;
    dp_plan(&plan);
    model_init(m, mesh, &plan, NULL, IN, HID, kind, momentum, wd);
    model_init(ref, mesh, NULL, NULL, IN, HID, kind, momentum, wd);
}

static void free_models(model *a, model *b, model *c) {
    mg_params_free(&a->t);
    mg_params_free(&b->t);
    if (c) mg_params_free(&c->t);
}

/* ---- SGD ------------------------------------------------------------------- */

START_TEST(sgd_momentum) {
    mg_mesh *mesh = mesh1d();
    model m, ref;
    dp_models(&m, &ref, mesh, MG_OPTIM_SGD, 0.9f, 0.01f);
    char msg[256] = "";
    mg_assert_all(mg_tensor_numel(m.t.p[W1].value->local) >= MG_GRAD_LARGE_FLOATS &&
                      mg_tensor_numel(m.t.p[W2].value->local) < MG_GRAD_LARGE_FLOATS,
                  "fc1.weight must be large and fc2.weight small");
    mg_tensor *w0 = mg_full_tensor(m.t.p[W1].value);
    mg_comm *c = mesh->dim_comm[0];
    for (int s = 0; s < 4; s++) {
        both_backward(&m, &ref, s);
        check_unsummed(&m, dp_dim(), "sgd", s);
        if (s == 0) { /* the first backward moved the gradient, not yet the value */
            const mg_tensor *g = m.t.p[W1].value->grad->local;
            mg_assert_all(world == 1 || shared(c, g), "fc1.weight's gradient not in shared memory");
            mg_assert_all(!shared(c, m.t.p[W1].value->local),
                          "fc1.weight's value shared before a step");
        }
        both_step(&m, &ref, 0.1f, dp_dim(), "sgd", s);
    }
    /* and the steps did move the weight: the comparisons show something */
    mg_tensor *w = mg_full_tensor(m.t.p[W1].value);
    mg_assert_all(!mg_test_close(mg_tensor_data(w), mg_tensor_data(w0), mg_tensor_numel(w0), 1e-3,
                                 1e-4, msg, sizeof msg),
                  "fc1.weight hardly changed in 4 steps");
    mg_tensor_free(w);
    mg_tensor_free(w0);
    free_models(&m, &ref, NULL);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- mg_grad of an unsummed gradient ---------------------------------------- */

/* a sums fc1.weight's gradient with mg_grad before each step, b lets the step
 * sum it and asks mg_grad after the step; both against the reference, and a and
 * b with the same bits (the step's sum adds the parts in the same order). */
START_TEST(grad_before_and_after_step) {
    mg_mesh *mesh = mesh1d();
    mg_plan plan;
    dp_plan(&plan);
    model a, b, ref;
    model_init(&a, mesh, &plan, NULL, IN, HID, MG_OPTIM_SGD, 0.9f, 0.01f);
    dp_models(&b, &ref, mesh, MG_OPTIM_SGD, 0.9f, 0.01f);
    char msg[256] = "";
    int dim = dp_dim();
    for (int s = 0; s < 3; s++) {
        zero_grads(&a);
        zero_grads(&b);
        zero_grads(&ref);
        backward(&a, s, 0, BATCH, 1.0f);
        backward(&b, s, 0, BATCH, 1.0f);
        backward(&ref, s, 0, BATCH, 1.0f);
        check_unsummed(&a, dim, "grad before", s);
        check_unsummed(&b, dim, "grad after", s);
        /* a: summed now, collectively; the flag goes */
        mg_dtensor *g = mg_grad(a.t.p[W1].value), *gr = mg_grad(ref.t.p[W1].value);
        mg_assert_all(g != NULL, "mg_grad: %s", mg_last_error());
        mg_assert_all(g == a.t.p[W1].value->grad,
                      "mg_grad returned another tensor than the gradient buffer");
        mg_assert_all(!mg_param_grad_in_parts(&a.t.p[W1]),
                      "step %d: still unsummed after mg_grad", s);
        mg_assert_all(mg_test_same_full(g, gr, RTOL, msg, sizeof msg),
                      "step %d: mg_grad before the step: %s", s, msg);
        step(&a, 0.1f);
        step(&b, 0.1f);
        step(&ref, 0.1f);
        check_split(&a, dim, "grad before", s);
        check_split(&b, dim, "grad after", s);
        check_params(&a, &ref, "grad before", s);
        check_params(&b, &ref, "grad after", s);
        mg_assert_all(memcmp(a.t.p[W1].value->local->data, b.t.p[W1].value->local->data,
                             (size_t)a.t.p[W1].value->local->numel * sizeof(float)) == 0,
                      "step %d: fc1.weight summed by mg_grad first and summed by the step "
                      "differ in their bits",
                      s);
        /* b: the step kept the parts; mg_grad sums them now */
        check_unsummed(&b, dim, "grad after (after the step)", s);
        check_grads(&b, &ref, "mg_grad after the step", s);
        check_grads(&a, &ref, "mg_grad before the step, again after it", s);
    }
    free_models(&a, &b, &ref);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- accumulation ----------------------------------------------------------- */

/* Two backward passes over the two half batches (mean over each half) and no
 * mg_zero_grad between: the gradient of the sum of the two halves' losses, the
 * reference's 2 * mse over the whole batch. */
START_TEST(accumulation) {
    mg_mesh *mesh = mesh1d();
    model m, ref;
    dp_models(&m, &ref, mesh, MG_OPTIM_SGD, 0.9f, 0.01f);
    int dim = dp_dim();
    for (int s = 0; s < 3; s++) {
        zero_grads(&m);
        zero_grads(&ref);
        backward(&m, s, 0, BATCH / 2, 1.0f);
        check_unsummed(&m, dim, "first half", s);
        backward(&m, s, BATCH / 2, BATCH / 2, 1.0f);
        check_unsummed(&m, dim, "second half", s); /* added to this rank's part, still in parts */
        backward(&ref, s, 0, BATCH, 2.0f);
        both_step(&m, &ref, 0.1f, dim, "accumulation", s);
        check_grads(&m, &ref, "accumulation", s);
    }
    free_models(&m, &ref, NULL);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- AdamW ------------------------------------------------------------------ */

/* PyTorch's defaults but eps: with eps 1e-8 the first update of an element
 * whose gradient is ~1e-8 (this model has a few dozen under 1e-7, the mean is
 * ~5e-4) is lr * g / (|g| + eps), and the ~1e-9 by which a sum in another order
 * moves g changes it by a good part of lr: the comparison would measure that
 * conditioning, not the split. */
#define ADAMW_EPS 1e-4f

START_TEST(adamw) {
    mg_mesh *mesh = mesh1d();
    model m, ref;
    dp_models(&m, &ref, mesh, MG_OPTIM_ADAMW, 0, -1);
    m.opt.eps = ref.opt.eps = ADAMW_EPS;
    mg_assert_all(mg_optimizer_state_count(&m.opt) == 2, "AdamW has %d state tensors",
                  mg_optimizer_state_count(&m.opt));
    int dim = dp_dim();
    for (int s = 0; s < 3; s++) {
        both_backward(&m, &ref, s);
        check_unsummed(&m, dim, "adamw", s);
        both_step(&m, &ref, 1e-3f, dim, "adamw", s);
    }
    mg_assert_all(m.opt.step == 3, "optimizer step count %lld", (long long)m.opt.step);
    free_models(&m, &ref, NULL);
    mg_mesh_free(mesh);
}
END_TEST

/* SGD without momentum (no state) for 2 steps, then AdamW on the same table:
 * the weight is already one copy per node when its AdamW state is made, and
 * the state joins it there on the next step. */
START_TEST(optimizer_switch) {
    mg_mesh *mesh = mesh1d();
    model m, ref;
    dp_models(&m, &ref, mesh, MG_OPTIM_SGD, 0.0f, 0.01f);
    int dim = dp_dim();
    for (int s = 0; s < 4; s++) {
        if (s == 2)
            for (model *x = &m; x; x = x == &m ? &ref : NULL) {
                mg_optimizer_init(&x->opt, MG_OPTIM_ADAMW, 0, -1);
                x->opt.eps = ADAMW_EPS;
                mg_assert_all(mg_optimizer_add_state(&x->opt, &x->t) == MG_OK, "state: %s",
                              mg_last_error());
            }
        both_backward(&m, &ref, s);
        both_step(&m, &ref, s < 2 ? 0.1f : 1e-3f, dim, s < 2 ? "sgd, no momentum" : "adamw after sgd",
                  s);
    }
    free_models(&m, &ref, NULL);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- clipping --------------------------------------------------------------- */

START_TEST(clip_grad_norm) {
    mg_mesh *mesh = mesh1d();
    model m, ref;
    dp_models(&m, &ref, mesh, MG_OPTIM_SGD, 0.9f, 0.01f);
    const double max_norm = 1e-3;
    int dim = dp_dim();
    for (int s = 0; s < 3; s++) {
        both_backward(&m, &ref, s);
        check_unsummed(&m, dim, "clip", s);
        mg_params_collect_grads(&m.t);
        mg_params_collect_grads(&ref.t);
        double norm = -1, norm_ref = -1, after = -1;
        mg_assert_all(mg_clip_grad_norm(&m.t, max_norm, &norm) == MG_OK, "clip: %s",
                      mg_last_error());
        mg_assert_all(mg_clip_grad_norm(&ref.t, max_norm, &norm_ref) == MG_OK, "clip: %s",
                      mg_last_error());
        mg_assert_all(norm_ref > 10 * max_norm, "step %d: norm %.9g: nothing to clip", s, norm_ref);
        mg_assert_all(fabs(norm - norm_ref) <= RTOL * norm_ref,
                      "step %d: norm %.9g, reference %.9g", s, norm, norm_ref);
        mg_assert_all(mg_grad_norm(&m.t, &after) == MG_OK, "norm: %s", mg_last_error());
        mg_assert_all(fabs(after - max_norm) <= 1e-4 * max_norm,
                      "step %d: norm after clipping %.9g, want %.9g", s, after, max_norm);
        mg_assert_all(mg_optimizer_step(&m.opt, &m.t, 0.1f) == MG_OK, "step: %s", mg_last_error());
        mg_assert_all(mg_optimizer_step(&ref.opt, &ref.t, 0.1f) == MG_OK, "step: %s",
                      mg_last_error());
        check_split(&m, dim, "clip", s);
        check_params(&m, &ref, "clip", s);
    }
    free_models(&m, &ref, NULL);
    mg_mesh_free(mesh);
}
END_TEST

/* fc1.weight used twice, in its linear and in a penalty, once its step is
 * split (the first step has no penalty): backward reaches the penalty first
 * (its gradient, already whole, then gets this rank's rows of the linear's
 * added) or the linear first (its rows are gathered before the penalty's
 * gradient is added). SGD, 4 steps each, against the reference. */
START_TEST(weight_used_twice) {
    mg_mesh *mesh = mesh1d();
    mg_plan plan;
    dp_plan(&plan);
    for (int reg = 1; reg <= 2; reg++) {
        model m, ref;
        dp_models(&m, &ref, mesh, MG_OPTIM_SGD, 0.9f, 0.01f);
        const char *what = reg == 1 ? "penalty reached first" : "linear reached first";
        for (int s = 0; s < 4; s++) {
            zero_grads(&m);
            zero_grads(&ref);
            backward_reg(&m, s, 0, BATCH, 1.0f, s ? reg : 0);
            backward_reg(&ref, s, 0, BATCH, 1.0f, s ? reg : 0);
            /* the linear's contribution, when it is the last one (without the
             * penalty, or with the penalty reached first), gives rows of the
             * sum; when the penalty's comes last, the two are added locally
             * and the sum is left to the step */
            mg_grad_form want = dp_dim() < 0                ? MG_GRAD_FULL
                                : (s == 0 || reg == 1) ? MG_GRAD_ROWS
                                                        : MG_GRAD_LOCAL;
            mg_grad_form have = mg_reducer_form(m.t.p[W1].value, NULL);
            mg_assert_all(have == want, "%s, step %d: fc1.weight's gradient %s, want %s", what, s,
                          form_name(have), form_name(want));
            both_step(&m, &ref, 0.1f, dp_dim(), what, s);
        }
        free_models(&m, &ref, NULL);
    }
    mg_mesh_free(mesh);
}
END_TEST

/* ---- 2-D meshes (4 ranks) --------------------------------------------------- */

/* SGD for 3 steps on a 2x2 mesh against the reference on the same mesh:
 * `plan` (or Replicate parameters and the batch at `batch`), fc1.weight split
 * over `dim`. */
static void train_2d(mg_mesh *mesh, const char *plan_text, const mg_placement *batch, int64_t in,
                     int64_t hid, int dim, const char *what) {
    mg_plan plan;
    if (plan_text)
        mg_assert_all(mg_plan_parse(plan_text, &plan) == MG_OK &&
                          mg_plan_check(&plan, mesh, BATCH) == MG_OK,
                      "plan %s: %s", plan_text, mg_last_error());
    model m, ref;
    model_init(&m, mesh, plan_text ? &plan : NULL, batch, in, hid, MG_OPTIM_SGD, 0.9f, 0.01f);
    model_init(&ref, mesh, NULL, NULL, in, hid, MG_OPTIM_SGD, 0.9f, 0.01f);
    mg_assert_all(mg_tensor_numel(m.t.p[W1].value->local) >= MG_GRAD_LARGE_FLOATS,
                  "%s: fc1.weight's local block is not large", what);
    for (int s = 0; s < 3; s++) {
        both_backward(&m, &ref, s);
        check_unsummed(&m, dim, what, s);
        if (dim < 0) /* summed over both dims: never moved to either dim's shared memory */
            for (int d = 0; d < 2; d++)
                mg_assert_all(!shared(mesh->dim_comm[d], m.t.p[W1].value->grad->local),
                              "%s step %d: gradient in dim %d's shared memory", what, s, d);
        both_step(&m, &ref, 0.1f, dim, what, s);
    }
    free_models(&m, &ref, NULL);
}

START_TEST(meshes_2d) {
    mg_mesh *mesh = mg_mesh_new(2, (int[]){2, 2});
    mg_assert_all(mesh != NULL, "mesh: %s", mg_last_error());
    /* dp,tp: fc1.weight column-parallel, its (513, 513) block over dim 1 */
    train_2d(mesh, "dp,tp", NULL, 513, 1026, 0, "dp,tp");
    train_2d(mesh, NULL, (mg_placement[]){MG_REPLICATE, MG_SHARD(0)}, IN, HID, 1, "batch on dim 1");
    train_2d(mesh, NULL, (mg_placement[]){MG_SHARD(0), MG_SHARD(0)}, IN, HID, -1,
             "batch on both dims");
    mg_mesh_free(mesh);
}
END_TEST

/* A test that failed part way (no-fork mode) leaves its tape behind: start clean. */
static void clean_step(void) { mg_step_end(); }

static Suite *make_suite(void) {
    world = mg_world_size();
    const TTest *tests[] = {sgd_momentum, weight_used_twice, grad_before_and_after_step,
                            accumulation, adamw, optimizer_switch, clip_grad_norm, NULL};
    Suite *s = suite_create("optim_shard");
    TCase *tc = mg_test_case(s, "optim_shard", tests);
    tcase_add_checked_fixture(tc, clean_step, NULL);
    if (world == 4) tcase_add_test(tc, meshes_2d); /* a 2x2 mesh */
    return s;
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
