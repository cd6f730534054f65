/* test_ops.c: every sharded op against the single-process computation, and
 * mg_scale's refusal of a factor that is not finite.
 * - grad: central finite differences vs the VJP (all inputs Replicate, so each
 *   rank computes the whole thing), for every op case.
 * - dist: every op on meshes of the world size (1-D and 2-D) for placement
 *   assignments of its inputs (R, S(d), P): the output (mg_full_tensor) and every
 *   input gradient equal the all-Replicate run within 1e-5 (relative to the
 *   largest value). Every assignment on every mesh of the world size (1-D and
 *   2-D: about 12k at 2 ranks, 18k at 4); MG_TEST_SAMPLE=1 keeps only the
 *   assignments whose mesh dims agree plus a fixed sample of the others.
 *   The cases of sample_2d() (attention: 6^6 = 46656 assignments per 2-D mesh)
 *   check an even spread of about that many on each 2-D mesh, every one on the
 *   1-D mesh; MG_TEST_ALL=1 checks every one everywhere. An assignment that a
 *   case says its op refuses (rope's D shard, heads that kv_heads does not
 *   split over) must fail with that one line, and is counted apart. */
#include <stdlib.h>

#include "ops_cases.h"
#include "status.h"
#include "testutil.h"

typedef struct {
    mg_tensor *out;
    mg_tensor *grad[3];
    char error[512];
} run_result;

static void result_free(run_result *r) {
    mg_tensor_free(r->out);
    for (int i = 0; i < 3; i++) mg_tensor_free(r->grad[i]);
    memset(r, 0, sizeof *r);
}

/* L = sum(y * r), r fixed and Replicate. r must outlive backward: it is freed
 * by free_loss_weights() after the step. */
static mg_dtensor *loss_weights[4];
static int n_loss_weights;

static void free_loss_weights(void) {
    for (int i = 0; i < n_loss_weights; i++) mg_dtensor_free(loss_weights[i]);
    n_loss_weights = 0;
}

static mg_dtensor *loss_of(const mg_mesh *mesh, mg_dtensor *y) {
    if (!y) return NULL;
    int nd = mg_dtensor_ndim(y);
    mg_tensor *r = mg_tensor_new(nd, mg_dtensor_shape(y));
    mg_test_fill(mg_tensor_data(r), mg_tensor_numel(r), 4242);
    mg_placement rep[4] = {MG_REPLICATE, MG_REPLICATE, MG_REPLICATE, MG_REPLICATE};
    mg_dtensor *rd = mg_distribute(mesh, r, rep, mg_mesh_ndim(mesh));
    mg_tensor_free(r);
    loss_weights[n_loss_weights++] = rd;
    return mg_sum(mg_mul(y, rd));
}

/* Runs a case with the given placements; fills out/grads (full tensors). */
static int run_case(const op_case *c, const mg_mesh *mesh, mg_placement p[3][4], run_result *res) {
    memset(res, 0, sizeof *res);
    mg_dtensor *in[3] = {NULL, NULL, NULL};
    int rc = 0;
    for (int i = 0; i < c->n_in; i++) {
        mg_tensor *full = case_input(c, i);
        in[i] = case_dtensor(mesh, full, p[i]);
        mg_tensor_free(full);
        if (!in[i]) {
            snprintf(res->error, sizeof res->error, "input %d: %s", i, mg_last_error());
            rc = -1;
            goto done;
        }
        if (c->grad[i]) mg_set_requires_grad(in[i], 1);
    }
    mg_dtensor *y = c->fn(in);
    if (!y) {
        snprintf(res->error, sizeof res->error, "op: %s", mg_last_error());
        rc = -1;
        goto done;
    }
    res->out = mg_full_tensor(y);
    mg_dtensor *loss = loss_of(mesh, y);
    if (!loss || mg_backward(loss) != MG_OK) {
        snprintf(res->error, sizeof res->error, "backward: %s", mg_last_error());
        rc = -1;
        goto done;
    }
    for (int i = 0; i < c->n_in; i++)
        if (c->grad[i]) {
            mg_dtensor *g = mg_grad(in[i]);
            if (!g) {
                snprintf(res->error, sizeof res->error, "input %d has no gradient", i);
                rc = -1;
                goto done;
            }
            res->grad[i] = mg_full_tensor(g);
        }
done:
    mg_step_end();
    free_loss_weights();
    for (int i = 0; i < c->n_in; i++) mg_dtensor_free(in[i]);
    return rc;
}

static double max_abs(const mg_tensor *t) {
    double m = 0;
    const float *x = mg_tensor_data((mg_tensor *)t);
    for (int64_t i = 0; i < mg_tensor_numel(t); i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* 1 when a equals ref within 1e-5 of ref's largest value */
static int same(const mg_tensor *a, const mg_tensor *ref, char *msg, size_t len) {
    if (!a || !ref) return snprintf(msg, len, "missing tensor"), 0;
    if (mg_tensor_numel(a) != mg_tensor_numel(ref)) return snprintf(msg, len, "sizes differ"), 0;
    double tol = 1e-5 * fmax(max_abs(ref), 1e-3);
    return mg_test_close(mg_tensor_data((mg_tensor *)a), mg_tensor_data((mg_tensor *)ref),
                         mg_tensor_numel(a), 0.0, tol, msg, len);
}

static void all_replicate(mg_placement p[3][4]) {
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < 4; m++) p[i][m] = MG_REPLICATE;
}

static mg_mesh *world_mesh_1d(void) {
    int n = mg_world_size();
    return mg_mesh_new(1, &n);
}

/* ---- finite differences ------------------------------------------------------- */

static float loss_value(const op_case *c, const mg_mesh *mesh, mg_tensor **full) {
    mg_placement p[3][4];
    all_replicate(p);
    mg_dtensor *in[3] = {NULL, NULL, NULL};
    for (int i = 0; i < c->n_in; i++) in[i] = case_dtensor(mesh, full[i], p[i]);
    int was = mg_set_grad_enabled(0);
    mg_dtensor *l = loss_of(mesh, c->fn(in));
    mg_tensor *lf = mg_full_tensor(l);
    float v = mg_tensor_data(lf)[0];
    mg_tensor_free(lf);
    mg_set_grad_enabled(was);
    mg_step_end();
    free_loss_weights();
    for (int i = 0; i < c->n_in; i++) mg_dtensor_free(in[i]);
    return v;
}

START_TEST(test_finite_differences) {
    const op_case *c = &op_cases[_i];
    mg_mesh *mesh = world_mesh_1d();
    mg_placement p[3][4];
    all_replicate(p);
    run_result r;
    int rc = run_case(c, mesh, p, &r);
    mg_assert_all(rc == 0, "%s: %s", c->name, r.error);
    mg_tensor *full[3] = {NULL, NULL, NULL};
    for (int i = 0; i < c->n_in; i++) full[i] = case_input(c, i);
    const float eps = 1e-2f;
    int ok = 1;
    char msg[256] = "";
    for (int i = 0; i < c->n_in && ok; i++) {
        if (!c->grad[i]) continue;
        float *x = mg_tensor_data(full[i]);
        const float *g = mg_tensor_data(r.grad[i]);
        for (int64_t k = 0; k < mg_tensor_numel(full[i]) && ok; k++) {
            float keep = x[k];
            x[k] = keep + eps;
            float up = loss_value(c, mesh, full);
            x[k] = keep - eps;
            float down = loss_value(c, mesh, full);
            x[k] = keep;
            double fd = ((double)up - down) / (2.0 * eps);
            if (fabs(fd - g[k]) > 5e-3 + 1e-2 * fabs(fd)) {
                ok = 0;
                snprintf(msg, sizeof msg, "input %d element %lld: finite difference %.6g, VJP %.6g",
                         i, (long long)k, fd, g[k]);
            }
        }
    }
    mg_assert_all(ok, "%s: %s", c->name, msg);
    for (int i = 0; i < c->n_in; i++) mg_tensor_free(full[i]);
    result_free(&r);
    mg_mesh_free(mesh);
}
END_TEST

/* ---- distributed vs single-process -------------------------------------------- */

/* the placement options of input i on one mesh dim */
static int options(const op_case *c, int i, mg_placement *opt) {
    int n = 0;
    opt[n++] = MG_REPLICATE;
    for (int d = 0; d < c->ndim[i]; d++) opt[n++] = MG_SHARD(d);
    if (c->partial_ok[i]) opt[n++] = MG_PARTIAL_SUM;
    return n;
}

static char *describe(char *buf, size_t len, const op_case *c, mg_placement p[3][4], int mesh_nd) {
    size_t used = snprintf(buf, len, "%s with", c->name);
    for (int i = 0; i < c->n_in; i++) {
        used += snprintf(buf + used, len > used ? len - used : 0, " in%d [", i);
        for (int m = 0; m < mesh_nd; m++) {
            mg_placement q = p[i][m];
            used += snprintf(buf + used, len > used ? len - used : 0, "%s%s", m ? ", " : "",
                             q.kind == MG_PLACE_REPLICATE ? "R" : q.kind == MG_PLACE_PARTIAL ? "P" : "S");
            if (q.kind == MG_PLACE_SHARD)
                used += snprintf(buf + used, len > used ? len - used : 0, "(%d)", q.dim);
        }
        used += snprintf(buf + used, len > used ? len - used : 0, "]");
    }
    return buf;
}

static int checked_assignments, sampled_out, refused_assignments;

/* about how many assignments a case checks per 2-D mesh; 0: all of them */
static int sample_2d(const op_case *c) {
    static const struct {
        const char *name;
        int n;
    } big[] = {
        {"attention", 150},          {"attention_causal", 150},  {"layer_norm", 150},
        {"cat_tree", 150},           {"attention_gqa", 150},     {"attention_gqa_mqa", 150},
        {"attention_gqa_even", 150}, {"attention_at", 150}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        if (strcmp(c->name, big[i].name) == 0) return getenv("MG_TEST_ALL") ? 0 : big[i].n;
    return 0;
}

static bool placement_same(mg_placement a, mg_placement b) {
    return a.kind == b.kind && (a.kind != MG_PLACE_SHARD || a.dim == b.dim);
}

static void check_mesh(const op_case *c, int mesh_nd, const int *mesh_shape) {
    mg_mesh *mesh = mg_mesh_new(mesh_nd, mesh_shape);
    mg_assert_all(mesh != NULL, "mesh: %s", mg_last_error());
    mg_placement ref_p[3][4];
    all_replicate(ref_p);
    run_result ref;
    int rc = run_case(c, mesh, ref_p, &ref);
    mg_assert_all(rc == 0, "%s all-Replicate: %s", c->name, ref.error);

    mg_placement opt[3][8];
    int nopt[3] = {1, 1, 1};
    for (int i = 0; i < c->n_in; i++) nopt[i] = options(c, i, opt[i]);
    /* an assignment: one option index per (input, mesh dim) */
    int slots = c->n_in * mesh_nd;
    int64_t total = 1;
    for (int s = 0; s < slots; s++) total *= nopt[s / mesh_nd];
    bool sampled = getenv("MG_TEST_SAMPLE") != NULL;
    int64_t stride = 1, want = sample_2d(c);
    if (mesh_nd > 1 && want && total > want) stride = (total + want - 1) / want;
    for (int64_t a = 0; a < total; a++) {
        mg_placement p[3][4];
        all_replicate(p);
        int64_t rest = a;
        bool uniform = true;
        for (int s = 0; s < slots; s++) {
            int i = s / mesh_nd, m = s % mesh_nd;
            int k = (int)(rest % nopt[i]);
            rest /= nopt[i];
            p[i][m] = opt[i][k];
            if (m > 0 && !placement_same(p[i][m], p[i][0])) uniform = false;
        }
        if (mesh_nd > 1 && !uniform && sampled && (a * 2654435761u) % 7 != 0) continue;
        if (stride > 1 && (a * 2654435761u) % stride != 0) {
            sampled_out++;
            continue;
        }
        run_result r;
        char what[256], msg[256] = "";
        describe(what, sizeof what, c, p, mesh_nd);
        rc = run_case(c, mesh, p, &r);
        op_refuses refuses = case_refuses(c);
        const char *refusal = refuses ? refuses(c, p, mesh_nd, mesh_shape) : NULL;
        if (refusal) {
            mg_assert_all(rc != 0, "%s: ran, but the op should refuse it (\"%s\")", what, refusal);
            mg_assert_all(strstr(r.error, refusal) != NULL && !strchr(r.error, '\n'),
                          "%s: refused with \"%s\", not one line saying \"%s\"", what, r.error,
                          refusal);
            result_free(&r);
            refused_assignments++;
            continue;
        }
        mg_assert_all(rc == 0, "%s: %s", what, r.error);
        int ok = same(r.out, ref.out, msg, sizeof msg);
        mg_assert_all(ok, "%s: output differs: %s", what, msg);
        for (int i = 0; i < c->n_in; i++) {
            if (!c->grad[i]) continue;
            ok = same(r.grad[i], ref.grad[i], msg, sizeof msg);
            mg_assert_all(ok, "%s: gradient of input %d differs: %s", what, i, msg);
        }
        result_free(&r);
        checked_assignments++;
    }
    result_free(&ref);
    mg_mesh_free(mesh);
}

START_TEST(test_distributed_matches_single) {
    const op_case *c = &op_cases[_i];
    int w = mg_world_size();
    check_mesh(c, 1, &w);
    if (w > 1) {
        int m12[2] = {1, w}, m21[2] = {w, 1};
        check_mesh(c, 2, m12);
        check_mesh(c, 2, m21);
    }
    if (w == 4) check_mesh(c, 2, (int[]){2, 2});
}
END_TEST

/* mg_scale by a factor that is not finite is refused (it was taken: NaN
 * spread through the step), on every placement, with one message. */
START_TEST(test_scale_refuses_nonfinite) {
    mg_mesh *mesh = mg_test_mesh1d();
    const mg_placement ps[3] = {MG_REPLICATE, MG_SHARD(0), MG_PARTIAL_SUM};
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) {
        mg_dtensor *x = mg_test_dtensor(mesh, 2, (int64_t[]){4, 3}, ps[i], 7);
        mg_assert_all(x != NULL, "%s", mg_last_error());
        for (int j = 0; j < 3; j++) {
            mg_assert_all(mg_scale(x, bad[j]) == NULL, "mg_scale by %g accepted", bad[j]);
            mg_assert_all(mg_last_code() == MG_EINVAL &&
                              strstr(mg_last_error(), "mg_scale: the factor is") &&
                              strstr(mg_last_error(), "give a finite number"),
                          "message: %s", mg_last_error());
        }
        mg_dtensor *y = mg_scale(x, 0.5f);
        mg_assert_all(y != NULL, "a finite factor after the refusals: %s", mg_last_error());
        mg_step_end();
        mg_dtensor_free(x);
    }
    mg_mesh_free(mesh);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("ops");
    const TTest *none[] = {NULL};
    TCase *g = mg_test_case(s, "finite_differences", none);
    tcase_add_loop_test(g, test_finite_differences, 0, n_op_cases);
    TCase *d = mg_test_case(s, "distributed", none);
    tcase_add_loop_test(d, test_distributed_matches_single, 0, n_op_cases);
    const TTest *refusals[] = {test_scale_refuses_nonfinite, NULL};
    mg_test_case(s, "refusals", refusals);
    return s;
}

static void report(void) {
    if (mg_rank() == 0)
        printf("ops: %d placement assignments checked, %d refused as they should be, %d sampled "
               "out (MG_TEST_ALL=1: all)\n",
               checked_assignments, refused_assignments, sampled_out);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, report); }
