/* test_grad_path.c (MPI): the gradient path of mg_backward, each case against
 * the same computation done without distribution (inputs Replicate, no
 * Partial, no communication) in the same process:
 * - fsdp parameter copies (mg_op_param_copy, as nn/param.c uses it): gradients,
 *   their Shard(0) placement, gathered weights kept out of the step arena and
 *   the gather and scratch arenas holding a few layers, not all; a copy released between two
 *   ops and gathered again; an eval forward in no-grad mode;
 * - lazy zero: after mg_zero_grad a backward gives that step's gradient only,
 *   mg_grad with no backward gives zeros, a parameter used twice gets both
 *   contributions (also when the first one's all-reduce is still in flight);
 * - buckets: ~30 small data-parallel gradients are packed into one all-reduce,
 *   the large ones get one each;
 * - micro-batches: sums off for all but the last backward (mg_set_grad_sync),
 *   several graphs in one step, a peek with mg_grad in between;
 * - a Shard(0) parameter handed straight to mg_linear (the seed program's way).
 * The fsdp case runs first: the arenas keep their capacity between tests. */
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "dist/placement.h"
#include "meshgrad.h"
#include "ops/ops.h"
#include "testutil.h"

#define RTOL 1e-5

static int world;

static mg_mesh *mesh1d(void) { return mg_mesh_new(1, &world); }

/* A leaf of global shape with data from seed (times scale, plus shift) at placement p. */
static mg_dtensor *leaf(const mg_mesh *mesh, int ndim, const int64_t *shape, mg_placement p,
                        uint64_t seed, float scale, float shift) {
    mg_tensor *t = mg_tensor_new(ndim, shape);
    float *d = mg_tensor_data(t);
    int64_t n = mg_tensor_numel(t);
    mg_test_fill(d, n, seed);
    for (int64_t i = 0; i < n; i++) d[i] = d[i] * scale + shift;
    mg_dtensor *x = mg_distribute(mesh, t, &p, 1);
    mg_tensor_free(t);
    return x;
}

static mg_dtensor *param(const mg_mesh *mesh, int ndim, const int64_t *shape, mg_placement p,
                         uint64_t seed, float scale, float shift) {
    mg_dtensor *w = leaf(mesh, ndim, shape, p, seed, scale, shift);
    if (w) mg_set_requires_grad(w, 1);
    return w;
}

static int is_shard0(const mg_dtensor *t) {
    return t && mg_dtensor_placements(t)[0].kind == MG_PLACE_SHARD &&
           mg_dtensor_placements(t)[0].dim == 0;
}

static int64_t calls(mg_coll_kind kind) {
    mg_comm_stats s[MG_COLL_COUNT];
    mg_comm_stats_get(s);
    return s[kind].calls;
}

/* Exactly as nn/param.c mg_params_use: the parameter at Replicate, as a copy. */
static mg_dtensor *use_replicated(mg_dtensor *w) {
    mg_placement r[1] = {MG_REPLICATE};
    mg_spec target;
    if (mg_spec_make(&target, w->spec.mesh, r, w->spec.mesh->ndim, w->spec.ndim, w->spec.shape,
                     "parameter use") != MG_OK)
        return NULL;
    return mg_op_param_copy(w, &target);
}

/* ---- fsdp ------------------------------------------------------------------ */

enum { L = 6, D = 512, BATCH = 8 };

/* A batch of `cols` columns of data from seed: split by rows (*x) and whole
 * on every rank (*xr, the reference's). */
static void inputs(const mg_mesh *mesh, int64_t cols, uint64_t seed, mg_dtensor **x,
                   mg_dtensor **xr) {
    *x = leaf(mesh, 2, (int64_t[]){BATCH, cols}, MG_SHARD(0), seed, 1.0f, 0.0f);
    *xr = leaf(mesh, 2, (int64_t[]){BATCH, cols}, MG_REPLICATE, seed, 1.0f, 0.0f);
}

/* Frees a[i] and b[i] for i < n: tensors and their references. */
static void free_pairs(mg_dtensor **a, mg_dtensor **b, int n) {
    for (int i = 0; i < n; i++) {
        mg_dtensor_free(a[i]);
        mg_dtensor_free(b[i]);
    }
}

/* relu(linear(...)) L times, no relu after the last; copies = 1: through parameter copies */
static mg_dtensor *mlp(mg_dtensor *x, mg_dtensor *const *ws, int copies) {
    mg_dtensor *h = x;
    for (int l = 0; l < L && h; l++) {
        mg_dtensor *w = copies ? use_replicated(ws[l]) : ws[l];
        h = w ? mg_linear(h, w, NULL) : NULL;
        if (h && l < L - 1) h = mg_relu(h);
    }
    return h;
}

static void make_weights(const mg_mesh *mesh, mg_placement p, mg_dtensor **ws) {
    for (int l = 0; l < L; l++) {
        ws[l] = param(mesh, 2, (int64_t[]){D, D}, p, 100 + (uint64_t)l, 0.08f, 0.0f);
        mg_assert_all(ws[l] != NULL, "weight %d: %s", l, mg_last_error());
    }
}

START_TEST(fsdp_param_copies) {
    mg_mesh *mesh = mesh1d();
    char msg[256] = "";
    const size_t layer = (size_t)D * D * sizeof(float);
    mg_dtensor *ws[L], *rs[L];
    make_weights(mesh, MG_SHARD(0), ws);
    make_weights(mesh, MG_REPLICATE, rs);
    mg_dtensor *x, *xr;
    inputs(mesh, D, 1, &x, &xr);

    /* training step through copies; memory looked at before the reference runs */
    mg_dtensor *loss = mg_sum(mlp(x, ws, 1));
    mg_assert_all(loss != NULL, "fsdp forward: %s", mg_last_error());
    mg_assert_all(mg_backward(loss) == MG_OK, "fsdp backward: %s", mg_last_error());
    size_t used = mg_arena_used(mg_step_arena());
    /* one arena for gathered weights and gradients on their way, and one layer
     * of either at a time (the doubling growth may round it up to two) */
    size_t scratch = mg_arena_capacity(mg_scratch_arena());
    mg_assert_all(used < 2 * layer, "step arena holds %zu bytes after backward (a layer is %zu)",
                  used, layer);
    mg_assert_all(scratch <= 2 * layer + ((size_t)1 << 20),
                  "scratch arena capacity %zu bytes: more than 2 layers of %zu + 1 MiB", scratch,
                  layer);
    mg_tensor *lf = mg_full_tensor(loss);
    float loss_fsdp = mg_tensor_data(lf)[0];
    mg_tensor_free(lf);
    mg_step_end();

    mg_dtensor *ref_loss = mg_sum(mlp(xr, rs, 0));
    mg_assert_all(mg_backward(ref_loss) == MG_OK, "reference backward: %s", mg_last_error());
    lf = mg_full_tensor(ref_loss);
    float loss_ref = mg_tensor_data(lf)[0];
    mg_tensor_free(lf);
    mg_step_end();
    mg_assert_all(fabs(loss_fsdp - loss_ref) <= 1e-4 * fmax(1.0, fabs(loss_ref)),
                  "loss %.9g, reference %.9g", loss_fsdp, loss_ref);
    for (int l = 0; l < L; l++) {
        mg_assert_all(is_shard0(mg_grad(ws[l])), "layer %d: gradient not Shard(0)", l);
        mg_assert_all(mg_test_same_full(mg_grad(ws[l]), mg_grad(rs[l]), RTOL, msg, sizeof msg),
                      "layer %d gradient: %s", l, msg);
    }

    /* one copy used by two linears with a relu between: released, gathered again */
    for (int l = 0; l < L; l++) {
        mg_zero_grad(ws[l]);
        mg_zero_grad(rs[l]);
    }
    int64_t ag0 = calls(MG_COLL_ALL_GATHER);
    mg_dtensor *c = use_replicated(ws[0]);
    mg_dtensor *h = mg_relu(mg_linear(x, c, NULL));
    mg_assert_all(world == 1 || (c && mg_ops_copy_released(c)),
                  "the copy was not released by an op that does not take it");
    h = mg_linear(h, c, NULL);
    int64_t gathers = calls(MG_COLL_ALL_GATHER) - ag0;
    mg_assert_all(gathers == (world > 1 ? 2 : 0), "forward ran %lld all-gathers, want %d",
                  (long long)gathers, world > 1 ? 2 : 0);
    loss = mg_sum(h);
    mg_assert_all(loss && mg_backward(loss) == MG_OK, "regather backward: %s", mg_last_error());
    mg_step_end();
    ref_loss = mg_sum(mg_linear(mg_relu(mg_linear(xr, rs[0], NULL)), rs[0], NULL));
    mg_assert_all(mg_backward(ref_loss) == MG_OK, "%s", mg_last_error());
    mg_step_end();
    mg_assert_all(is_shard0(mg_grad(ws[0])), "regathered: gradient not Shard(0)");
    mg_assert_all(mg_test_same_full(mg_grad(ws[0]), mg_grad(rs[0]), RTOL, msg, sizeof msg),
                  "gradient of a copy used twice: %s", msg);

    /* eval forward with copies in no-grad mode */
    int was = mg_set_grad_enabled(0);
    mg_dtensor *y = mlp(x, ws, 1);
    mg_dtensor *yr = mlp(xr, rs, 0);
    mg_assert_all(y && yr, "eval forward: %s", mg_last_error());
    mg_assert_all(mg_test_same_full(y, yr, RTOL, msg, sizeof msg), "eval output: %s", msg);
    mg_set_grad_enabled(was);
    mg_step_end();

    free_pairs(ws, rs, L);
    free_pairs(&x, &xr, 1);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- lazy zero ------------------------------------------------------------- */

enum { NO = 16, NI = 12 };

/* loss of one step: sum(linear(x, w)), with sum(w * w) before or after it */
static mg_dtensor *step_loss(mg_dtensor *x, mg_dtensor *w, int square) {
    mg_dtensor *lin = mg_sum(mg_linear(x, w, NULL));
    if (square == 0) return lin;
    if (square == 1) return mg_add(lin, mg_sum(mg_mul(w, w)));
    mg_dtensor *sq = mg_sum(mg_mul(w, w)); /* recorded first: its gradient comes last */
    return mg_add(sq, mg_sum(mg_linear(x, w, NULL)));
}

/* A fresh Replicate w with x Replicate: the reference gradient of one step. */
static mg_dtensor *reference_grad(const mg_mesh *mesh, uint64_t xseed, int square,
                                  mg_dtensor **w_out) {
    mg_dtensor *x = leaf(mesh, 2, (int64_t[]){8, NI}, MG_REPLICATE, xseed, 1.0f, 0.0f);
    mg_dtensor *w = param(mesh, 2, (int64_t[]){NO, NI}, MG_REPLICATE, 7, 1.0f, 0.0f);
    mg_assert_all(mg_backward(step_loss(x, w, square)) == MG_OK, "reference: %s", mg_last_error());
    mg_step_end();
    mg_dtensor_free(x);
    *w_out = w;
    return mg_grad(w);
}

START_TEST(lazy_zero) {
    mg_mesh *mesh = mesh1d();
    char msg[256] = "";
    mg_dtensor *w = param(mesh, 2, (int64_t[]){NO, NI}, MG_REPLICATE, 7, 1.0f, 0.0f);
    mg_dtensor *x1 = leaf(mesh, 2, (int64_t[]){8, NI}, MG_SHARD(0), 21, 1.0f, 0.0f);
    mg_dtensor *x2 = leaf(mesh, 2, (int64_t[]){8, NI}, MG_SHARD(0), 22, 1.0f, 0.0f);
    mg_dtensor *ref1, *ref2;
    mg_dtensor *g1 = reference_grad(mesh, 21, 0, &ref1), *g2 = reference_grad(mesh, 22, 0, &ref2);

    /* step 1, zero, step 2: the gradient of step 2 alone */
    mg_assert_all(mg_backward(step_loss(x1, w, 0)) == MG_OK, "%s", mg_last_error());
    mg_step_end();
    mg_assert_all(mg_test_same_full(mg_grad(w), g1, RTOL, msg, sizeof msg), "step 1: %s", msg);
    mg_assert_all(mg_dtensor_placements(mg_grad(w))[0].kind == MG_PLACE_REPLICATE,
                  "a Replicate parameter's gradient must be Replicate");
    mg_zero_grad(w);
    mg_assert_all(mg_backward(step_loss(x2, w, 0)) == MG_OK, "%s", mg_last_error());
    mg_step_end();
    mg_assert_all(mg_test_same_full(mg_grad(w), g2, RTOL, msg, sizeof msg),
                  "after mg_zero_grad, step 2 (not step 1 + step 2): %s", msg);

    /* zeroed and no backward: zeros */
    mg_zero_grad(w);
    mg_tensor *z = mg_full_tensor(mg_grad(w));
    int zeros = 1;
    for (int64_t i = 0; i < mg_tensor_numel(z); i++) zeros &= mg_tensor_data(z)[i] == 0.0f;
    mg_tensor_free(z);
    mg_assert_all(zeros, "mg_grad after mg_zero_grad with no backward is not zero");
    /* the buffer was filled with zeros: a backward now adds to it */
    mg_assert_all(mg_backward(step_loss(x1, w, 0)) == MG_OK, "%s", mg_last_error());
    mg_step_end();
    mg_assert_all(mg_test_same_full(mg_grad(w), g1, RTOL, msg, sizeof msg),
                  "backward after zero fill: %s",
                  msg);

    /* used twice in one step, in both orders (square == 2: the data-parallel
     * contribution comes first and its all-reduce is in flight at the second) */
    for (int square = 1; square <= 2; square++) {
        mg_dtensor *ref;
        mg_dtensor *g = reference_grad(mesh, 22, square, &ref);
        mg_zero_grad(w);
        mg_assert_all(mg_backward(step_loss(x2, w, square)) == MG_OK, "%s", mg_last_error());
        mg_step_end();
        mg_assert_all(mg_test_same_full(mg_grad(w), g, RTOL, msg, sizeof msg),
                      "used twice (order %d): %s",
                      square, msg);
        mg_dtensor_free(ref);
    }
    /* and the reference itself is not what one use gives */
    mg_assert_all(!mg_test_same_full(mg_grad(w), g2, RTOL, msg, sizeof msg),
                  "used twice equals used once: the check shows nothing");

    mg_dtensor_free(ref1);
    mg_dtensor_free(ref2);
    mg_dtensor_free(w);
    mg_dtensor_free(x1);
    mg_dtensor_free(x2);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- buckets --------------------------------------------------------------- */

enum { NLAYER = 10, NSMALL = 3 * NLAYER, NPARAM = NSMALL + 2, WIDE = 600, IN = 512, GROUP = 16 };
static const int widths[NLAYER + 1] = {GROUP, 20, 12, 22, 8, 17, 21, 5, 19, 22, 9};

/* params[0..1]: the large weights (WIDE x IN, IN x WIDE); then per small layer
 * k: weight (widths[k+1] x widths[k]), bias (widths[k+1]) and a gain (1). */
static void make_chain(const mg_mesh *mesh, mg_dtensor **ps) {
    ps[0] = param(mesh, 2, (int64_t[]){WIDE, IN}, MG_REPLICATE, 50, 0.08f, 0.0f);
    ps[1] = param(mesh, 2, (int64_t[]){IN, WIDE}, MG_REPLICATE, 51, 0.07f, 0.0f);
    for (int k = 0; k < NLAYER; k++) {
        int64_t o = widths[k + 1], i = widths[k];
        ps[2 + 3 * k] = param(mesh, 2, (int64_t[]){o, i}, MG_REPLICATE, 60 + (uint64_t)k,
                              1.0f / sqrtf((float)i), 0.0f);
        ps[3 + 3 * k] = param(mesh, 1, (int64_t[]){o}, MG_REPLICATE, 80 + (uint64_t)k, 0.1f, 0.0f);
        ps[4 + 3 * k] =
            param(mesh, 1, (int64_t[]){1}, MG_REPLICATE, 90 + (uint64_t)k, 0.1f, 1.0f);
    }
    for (int i = 0; i < NPARAM; i++) mg_assert_all(ps[i] != NULL, "param %d: %s", i, mg_last_error());
}

static mg_dtensor *chain_loss(mg_dtensor *x, mg_dtensor *const *ps) {
    mg_dtensor *h = mg_relu(mg_linear(x, ps[0], NULL));
    h = mg_linear(h, ps[1], NULL);
    h = mg_reshape(h, 3, (int64_t[]){BATCH, IN / GROUP, GROUP});
    for (int k = 0; k < NLAYER && h; k++) {
        h = mg_linear(h, ps[2 + 3 * k], ps[3 + 3 * k]);
        h = mg_mul(h, ps[4 + 3 * k]);
    }
    return mg_sum(h);
}

START_TEST(small_gradients_packed) {
    mg_mesh *mesh = mesh1d();
    char msg[256] = "";
    mg_dtensor *ps[NPARAM], *rs[NPARAM];
    make_chain(mesh, ps);
    make_chain(mesh, rs);
    int64_t small_floats = 0, large = 0;
    for (int i = 0; i < NPARAM; i++) {
        int64_t n = mg_tensor_numel(mg_local(ps[i]));
        if (i < 2) {
            mg_assert_all(n >= 300000, "parameter %d is not large (%lld)", i, (long long)n);
            large++;
        } else {
            mg_assert_all(n >= 1 && n <= 500, "parameter %d is not small (%lld)", i, (long long)n);
            small_floats += n;
        }
    }
    mg_assert_all(small_floats <= ((int64_t)1 << 20), "the small ones do not fit one 4 MiB pack");
    mg_dtensor *x, *xr;
    inputs(mesh, IN, 3, &x, &xr);

    for (int step = 0; step < 2; step++) { /* the second reuses the packing buffer */
        for (int i = 0; i < NPARAM; i++) {
            mg_zero_grad(ps[i]);
            mg_zero_grad(rs[i]);
        }
        mg_dtensor *loss = chain_loss(x, ps);
        mg_assert_all(loss != NULL, "forward: %s", mg_last_error());
        int64_t ar0 = calls(MG_COLL_ALL_REDUCE);
        mg_assert_all(mg_backward(loss) == MG_OK, "backward: %s", mg_last_error());
        int64_t ar = calls(MG_COLL_ALL_REDUCE) - ar0;
        mg_step_end();
        int64_t want = world > 1 ? large + 1 : 0;
        mg_assert_all(ar == want, "step %d: backward ran %lld all-reduces for %d parameters, want %lld",
                      step, (long long)ar, NPARAM, (long long)want);
        mg_assert_all(world == 1 || ar < NPARAM, "small gradients were not packed");
        mg_assert_all(mg_backward(chain_loss(xr, rs)) == MG_OK, "reference: %s", mg_last_error());
        mg_step_end();
        for (int i = 0; i < NPARAM; i++) {
            mg_assert_all(mg_dtensor_placements(mg_grad(ps[i]))[0].kind == MG_PLACE_REPLICATE,
                          "parameter %d: gradient not Replicate", i);
            mg_assert_all(mg_test_same_full(mg_grad(ps[i]), mg_grad(rs[i]), RTOL, msg, sizeof msg),
                          "step %d parameter %d: %s", step, i, msg);
        }
    }
    free_pairs(ps, rs, NPARAM);
    free_pairs(&x, &xr, 1);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- micro-batches ------------------------------------------------------------ */

enum { MICRO = 3 };

/* The chain on MICRO micro-batches of BATCH rows, in one step (no mg_step_end
 * between them: one graph each), with data-parallel sums off but for the
 * last: no all-reduce until the last backward, which runs as many as one
 * backward of one batch does; the gradients equal the Replicate model's
 * accumulated over the same micro-batches. mg_grad in between sums what is
 * there (and nothing is counted twice after it); a second backward through a
 * consumed graph is refused and changes nothing. */
START_TEST(micro_batches) {
    mg_mesh *mesh = mesh1d();
    char msg[256] = "";
    mg_dtensor *ps[NPARAM], *rs[NPARAM], *x[MICRO], *xr[MICRO], *loss[MICRO];
    make_chain(mesh, ps);
    make_chain(mesh, rs);
    for (int m = 0; m < MICRO; m++) {
        inputs(mesh, IN, 30 + (uint64_t)m, &x[m], &xr[m]);
    }
    for (int peek = 0; peek < 2; peek++) {
        for (int i = 0; i < NPARAM; i++) {
            mg_zero_grad(ps[i]);
            mg_zero_grad(rs[i]);
        }
        mg_assert_all(mg_grad_sync() == 1, "gradient sync is not on at the start");
        for (int m = 0; m < MICRO; m++) {
            int last = m == MICRO - 1;
            mg_assert_all(mg_set_grad_sync(last) == (m == 0), "micro-batch %d: previous sync setting", m);
            loss[m] = chain_loss(x[m], ps);
            mg_assert_all(loss[m] != NULL, "micro-batch %d forward: %s", m, mg_last_error());
            int64_t ar0 = calls(MG_COLL_ALL_REDUCE);
            mg_assert_all(mg_backward(loss[m]) == MG_OK, "micro-batch %d: %s", m, mg_last_error());
            int64_t ar = calls(MG_COLL_ALL_REDUCE) - ar0;
            int64_t want = last && world > 1 ? 2 + 1 : 0; /* the two large ones, one pack */
            mg_assert_all(ar == want, "micro-batch %d: backward ran %lld all-reduces, want %lld", m,
                          (long long)ar, (long long)want);
            mg_assert_all(mg_backward(chain_loss(xr[m], rs)) == MG_OK, "reference: %s", mg_last_error());
            if (peek && m == 1) /* the sum of the first two, summed across ranks now */
                for (int i = 0; i < NPARAM; i++)
                    mg_assert_all(mg_test_same_full(mg_grad(ps[i]), mg_grad(rs[i]), RTOL, msg, sizeof msg),
                                  "peek after micro-batch %d, parameter %d: %s", m, i, msg);
        }
        for (int i = 0; i < NPARAM; i++)
            mg_assert_all(mg_test_same_full(mg_grad(ps[i]), mg_grad(rs[i]), RTOL, msg, sizeof msg),
                          "%s: parameter %d after %d micro-batches: %s", peek ? "peeked" : "plain", i,
                          MICRO, msg);
        /* a consumed graph again: refused, nothing added */
        mg_assert_all(mg_backward(loss[0]) != MG_OK && strstr(mg_last_error(), "freed"),
                      "a second backward through micro-batch 0 was not refused: %s", mg_last_error());
        for (int i = 0; i < NPARAM; i++)
            mg_assert_all(mg_test_same_full(mg_grad(ps[i]), mg_grad(rs[i]), RTOL, msg, sizeof msg),
                          "parameter %d after a refused backward: %s", i, msg);
        mg_step_end();
    }
    mg_assert_all(mg_grad_sync() == 1, "gradient sync is not on at the end");
    free_pairs(ps, rs, NPARAM);
    free_pairs(x, xr, MICRO);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- a parameter handed straight to an op ----------------------------------- */

START_TEST(direct_sharded_parameter) {
    mg_mesh *mesh = mesh1d();
    char msg[256] = "";
    enum { DD = 64, NW = 3 };
    mg_dtensor *ws[NW], *rs[NW];
    for (int l = 0; l < NW; l++) {
        ws[l] = param(mesh, 2, (int64_t[]){DD, DD}, MG_SHARD(0), 200 + (uint64_t)l, 0.2f, 0.0f);
        rs[l] = param(mesh, 2, (int64_t[]){DD, DD}, MG_REPLICATE, 200 + (uint64_t)l, 0.2f, 0.0f);
    }
    mg_dtensor *x, *xr;
    inputs(mesh, DD, 4, &x, &xr);
    /* w0, w1, w2, then w0 again: the op's own gathered copy is gathered again */
    mg_dtensor *const *sets[2] = {ws, rs};
    mg_dtensor *in[2] = {x, xr};
    for (int s = 0; s < 2; s++) {
        mg_dtensor *h = in[s];
        for (int l = 0; l < NW + 1 && h; l++) {
            h = mg_linear(h, sets[s][l % NW], NULL);
            if (h) h = mg_relu(h);
        }
        mg_dtensor *loss = mg_sum(h);
        mg_assert_all(loss && mg_backward(loss) == MG_OK, "set %d: %s", s, mg_last_error());
        mg_step_end();
    }
    for (int l = 0; l < NW; l++) {
        mg_assert_all(is_shard0(mg_grad(ws[l])), "weight %d: gradient not Shard(0)", l);
        mg_assert_all(mg_test_same_full(mg_grad(ws[l]), mg_grad(rs[l]), RTOL, msg, sizeof msg),
                      "weight %d: %s", l, msg);
    }
    free_pairs(ws, rs, NW);
    free_pairs(&x, &xr, 1);
    mg_mesh_free(mesh);
}
END_TEST

/* A test that failed part way (no-fork mode) leaves its tape behind, or sums
 * off: start clean. */
static void clean_step(void) {
    mg_step_end();
    mg_set_grad_sync(1);
}

static Suite *make_suite(void) {
    world = mg_world_size();
    /* fsdp_param_copies first: see the file comment */
    const TTest *tests[] = {fsdp_param_copies, lazy_zero, small_gradients_packed, micro_batches,
                            direct_sharded_parameter, NULL};
    Suite *s = suite_create("grad_path");
    tcase_add_checked_fixture(mg_test_case(s, "grad_path", tests), clean_step, NULL);
    return s;
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
