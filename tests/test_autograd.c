/* test_autograd.c: what the op matrix does not show.
 * - the seed's failures: a placement list shorter than the mesh is refused at
 *   every constructor and by mg_redistribute; expand takes GLOBAL sizes (the
 *   local shape of the report is refused, the global one works on any sharding);
 * - expand keeps the shard of unchanged dims, never shards a broadcast dim, and
 *   the kernel's local sizes are those of the output spec;
 * - communication: a data-parallel linear moves nothing forward and all-reduces
 *   the weight gradient once; column- then row-parallel linears all-reduce once
 *   forward and once backward (Megatron);
 * - gradients: accumulation over two uses, zeroing, Shard(0) parameters gathered
 *   for use get their gradient reduce-scattered;
 * - mg_backward_with's gradient is only read: narrows of an intermediate that
 *   is also used whole (their gradients added in place) leave the caller's
 *   tensor as it was, and a seed that is a leaf's own gradient (mg_grad) gives
 *   the gradient of the seed as it was when backward began;
 * - clear errors: shapes that do not fit, mixed meshes, backward on a non-scalar,
 *   a view with no valid strategy, backward twice; the library keeps working;
 * - the ranks' graphs are compared before backward: a rank's own scale factor,
 *   or an op one rank runs alone, is refused, naming the op. */
#include <stdlib.h>
#include <string.h>

#include "meshgrad.h"
#include "testutil.h"

static int64_t chunk(int64_t n, int k, int c) {
    int64_t size = (n + k - 1) / k, start = c * size;
    if (start > n) start = n;
    return (start + size > n ? n : start + size) - start;
}

static void stats(mg_comm_stats s[MG_COLL_COUNT]) { mg_comm_stats_get(s); }

static int64_t calls_except(const mg_comm_stats *a, const mg_comm_stats *b, mg_coll_kind kind) {
    int64_t n = 0;
    for (int k = 0; k < MG_COLL_COUNT; k++)
        if (k != (int)kind) n += b[k].calls - a[k].calls;
    return n;
}

START_TEST(test_seed_placements_refused) {
    int w = mg_world_size();
    int shape[2] = {1, w};
    mg_mesh *mesh = mg_mesh_new(2, shape);
    mg_tensor *x = mg_tensor_new(3, (int64_t[]){2, 10, 40});
    mg_placement one[1] = {MG_SHARD(0)};
    mg_dtensor *d = mg_distribute(mesh, x, one, 1);
    mg_assert_all(d == NULL, "one placement on a 2-D mesh was accepted");
    char want[128];
    snprintf(want, sizeof want, "placements has 1 entry but the mesh is 2-D (1x%d)", w);
    mg_assert_all(strstr(mg_last_error(), want) != NULL, "message: %s", mg_last_error());
    mg_assert_all(strstr(mg_last_error(), "one placement per mesh dimension") != NULL, "%s",
                  mg_last_error());
    d = mg_from_local(mesh, x, one, 1, 3, (int64_t[]){2, 10, 40});
    mg_assert_all(d == NULL && strstr(mg_last_error(), want), "mg_from_local: %s", mg_last_error());
    mg_placement rr[2] = {MG_REPLICATE, MG_REPLICATE};
    mg_dtensor *ok = mg_distribute(mesh, x, rr, 2);
    mg_assert_all(ok != NULL, "after a refusal: %s", mg_last_error());
    mg_dtensor *r = mg_redistribute(ok, one, 1);
    mg_assert_all(r == NULL && strstr(mg_last_error(), "mg_redistribute: placements has 1 entry"),
                  "mg_redistribute: %s", mg_last_error());
    mg_dtensor *s = mg_redistribute(ok, (mg_placement[]){MG_REPLICATE, MG_SHARD(0)}, 2);
    mg_assert_all(s != NULL, "a good redistribute after a refusal: %s", mg_last_error());
    mg_step_end();
    mg_dtensor_free(ok);
    mg_tensor_free(x);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(test_expand_global_sizes) {
    int w = mg_world_size();
    mg_mesh *mesh = mg_test_mesh1d();
    /* the report: x (2, 40, 10) sharded on dim 0; expand with the global shape */
    mg_dtensor *x = mg_test_dtensor(mesh, 3, (int64_t[]){2, 40, 10}, MG_SHARD(0), 1);
    mg_dtensor *y = mg_expand(x, 3, (int64_t[]){2, 40, 10});
    mg_assert_all(y != NULL, "global expand: %s", mg_last_error());
    mg_assert_all(mg_dtensor_placements(y)[0].kind == MG_PLACE_SHARD &&
                      mg_dtensor_placements(y)[0].dim == 0,
                  "expand of an unchanged sharded dim must keep the shard");
    mg_assert_all(mg_tensor_shape(mg_local(y))[0] == chunk(2, w, mg_rank()), "local rows %lld",
                  (long long)mg_tensor_shape(mg_local(y))[0]);
    /* the report's local size as a global one: refused with both shapes named */
    if (w > 1) {
        mg_dtensor *bad = mg_expand(x, 3, (int64_t[]){1, 40, 10});
        mg_assert_all(bad == NULL, "expand to the local shape was accepted");
        mg_assert_all(strstr(mg_last_error(), "(2, 40, 10)") && strstr(mg_last_error(), "(1, 40, 10)"),
                      "%s", mg_last_error());
    }
    /* broadcast dims are never sharded; unchanged dims keep their shard */
    mg_dtensor *row = mg_test_dtensor(mesh, 2, (int64_t[]){1, 6}, MG_SHARD(1), 2);
    mg_dtensor *e = mg_expand(row, 2, (int64_t[]){5, 6});
    mg_assert_all(e != NULL, "%s", mg_last_error());
    mg_assert_all(mg_dtensor_placements(e)[0].kind == MG_PLACE_SHARD &&
                      mg_dtensor_placements(e)[0].dim == 1,
                  "the unchanged dim 1 must stay sharded");
    const int64_t *ls = mg_tensor_shape(mg_local(e));
    mg_assert_all(ls[0] == 5 && ls[1] == chunk(6, w, mg_rank()), "local (%lld, %lld)",
                  (long long)ls[0], (long long)ls[1]);
    mg_dtensor *col =
        mg_test_dtensor(mesh, 2, (int64_t[]){1, 6}, MG_SHARD(0), 3); /* a size-1 dim sharded */
    mg_dtensor *f = mg_expand(col, 3, (int64_t[]){3, 4, 6});
    mg_assert_all(f != NULL, "%s", mg_last_error());
    mg_placement fp = mg_dtensor_placements(f)[0];
    mg_assert_all(!(fp.kind == MG_PLACE_SHARD && (fp.dim == 0 || fp.dim == 1)) || w == 1,
                  "a broadcast dim was sharded");
    mg_tensor *full = mg_full_tensor(f), *cf = mg_full_tensor(col);
    int same = 1;
    for (int64_t i = 0; i < 3 * 4 * 6; i++)
        if (mg_tensor_data(full)[i] != mg_tensor_data(cf)[i % 6]) same = 0;
    mg_assert_all(same, "expanded values differ from the broadcast input");
    mg_tensor_free(full);
    mg_tensor_free(cf);
    mg_step_end();
    mg_dtensor_free(x);
    mg_dtensor_free(row);
    mg_dtensor_free(col);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(test_data_parallel_linear_comm) {
    int w = mg_world_size();
    mg_mesh *mesh = mg_test_mesh1d();
    mg_dtensor *x = mg_test_dtensor(mesh, 2, (int64_t[]){8, 6}, MG_SHARD(0), 4);
    mg_dtensor *wt = mg_test_dtensor(mesh, 2, (int64_t[]){5, 6}, MG_REPLICATE, 5);
    mg_set_requires_grad(wt, 1);
    mg_comm_stats s0[MG_COLL_COUNT], s1[MG_COLL_COUNT], s2[MG_COLL_COUNT];
    stats(s0);
    mg_dtensor *loss = mg_sum(mg_linear(x, wt, NULL));
    stats(s1);
    for (int k = 0; k < MG_COLL_COUNT; k++)
        mg_assert_all(s1[k].calls == s0[k].calls && s1[k].bytes == s0[k].bytes,
                      "forward ran %lld %s", (long long)(s1[k].calls - s0[k].calls),
                      mg_coll_name((mg_coll_kind)k));
    mg_assert_all(mg_backward(loss) == MG_OK, "%s", mg_last_error());
    stats(s2);
    int64_t ar = s2[MG_COLL_ALL_REDUCE].calls - s1[MG_COLL_ALL_REDUCE].calls;
    mg_assert_all(ar == (w > 1 ? 1 : 0), "backward ran %lld all-reduces", (long long)ar);
    mg_assert_all(calls_except(s1, s2, MG_COLL_ALL_REDUCE) == 0, "backward ran other collectives");
    mg_assert_all(mg_dtensor_placements(mg_grad(wt))[0].kind == MG_PLACE_REPLICATE,
                  "the gradient of a replicated weight must be replicated");
    mg_step_end();
    mg_dtensor_free(x);
    mg_dtensor_free(wt);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(test_megatron_comm) {
    int w = mg_world_size();
    mg_mesh *mesh = mg_test_mesh1d();
    mg_dtensor *x = mg_test_dtensor(mesh, 2, (int64_t[]){4, 6}, MG_REPLICATE, 6);
    mg_dtensor *w1 =
        mg_test_dtensor(mesh, 2, (int64_t[]){8, 6}, MG_SHARD(0), 7); /* column-parallel */
    mg_dtensor *b1 = mg_test_dtensor(mesh, 1, (int64_t[]){8}, MG_SHARD(0), 8);
    mg_dtensor *w2 = mg_test_dtensor(mesh, 2, (int64_t[]){6, 8}, MG_SHARD(1), 9); /* row-parallel */
    mg_dtensor *b2 = mg_test_dtensor(mesh, 1, (int64_t[]){6}, MG_REPLICATE, 10);
    mg_dtensor *ps[5] = {x, w1, b1, w2, b2};
    for (int i = 0; i < 5; i++) mg_set_requires_grad(ps[i], 1);
    mg_comm_stats s0[MG_COLL_COUNT], s1[MG_COLL_COUNT], s2[MG_COLL_COUNT];
    stats(s0);
    mg_dtensor *h = mg_relu(mg_linear(x, w1, b1));
    mg_assert_all(h && mg_dtensor_placements(h)[0].kind == MG_PLACE_SHARD, "h should be S(1)");
    mg_dtensor *y = mg_linear(h, w2, b2);
    mg_assert_all(y && (w == 1 || mg_dtensor_placements(y)[0].kind == MG_PLACE_PARTIAL),
                  "row-parallel output should be Partial");
    y = mg_redistribute(y, (mg_placement[]){MG_REPLICATE}, 1);
    mg_dtensor *loss = mg_sum(mg_mul(y, y));
    stats(s1);
    int64_t ar = s1[MG_COLL_ALL_REDUCE].calls - s0[MG_COLL_ALL_REDUCE].calls;
    mg_assert_all(ar == (w > 1 ? 1 : 0), "forward ran %lld all-reduces", (long long)ar);
    mg_assert_all(calls_except(s0, s1, MG_COLL_ALL_REDUCE) == 0, "forward ran other collectives");
    mg_assert_all(mg_backward(loss) == MG_OK, "%s", mg_last_error());
    stats(s2);
    ar = s2[MG_COLL_ALL_REDUCE].calls - s1[MG_COLL_ALL_REDUCE].calls;
    mg_assert_all(ar == (w > 1 ? 1 : 0), "backward ran %lld all-reduces", (long long)ar);
    mg_assert_all(calls_except(s1, s2, MG_COLL_ALL_REDUCE) == 0, "backward ran other collectives");
    for (int i = 1; i < 5; i++) {
        const mg_placement *gp = mg_dtensor_placements(mg_grad(ps[i]));
        const mg_placement *pp = mg_dtensor_placements(ps[i]);
        mg_assert_all(gp[0].kind == pp[0].kind && gp[0].dim == pp[0].dim,
                      "parameter %d: gradient placement differs from the parameter's", i);
    }
    mg_step_end();
    for (int i = 0; i < 5; i++) mg_dtensor_free(ps[i]);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(test_fsdp_gradient_reduce_scattered) {
    int w = mg_world_size();
    mg_mesh *mesh = mg_test_mesh1d();
    mg_dtensor *x = mg_test_dtensor(mesh, 2, (int64_t[]){8, 6}, MG_SHARD(0), 11);
    mg_dtensor *wt = mg_test_dtensor(mesh, 2, (int64_t[]){5, 6}, MG_SHARD(0), 12);
    mg_set_requires_grad(wt, 1);
    mg_comm_stats s1[MG_COLL_COUNT], s2[MG_COLL_COUNT];
    mg_dtensor *full_w = mg_redistribute(wt, (mg_placement[]){MG_REPLICATE}, 1);
    mg_dtensor *loss = mg_sum(mg_linear(x, full_w, NULL));
    stats(s1);
    mg_assert_all(mg_backward(loss) == MG_OK, "%s", mg_last_error());
    stats(s2);
    int64_t rs = s2[MG_COLL_REDUCE_SCATTER].calls - s1[MG_COLL_REDUCE_SCATTER].calls;
    mg_assert_all(rs == (w > 1 ? 1 : 0), "backward ran %lld reduce-scatters", (long long)rs);
    mg_assert_all(calls_except(s1, s2, MG_COLL_REDUCE_SCATTER) == 0, "backward ran other collectives");
    mg_assert_all(mg_dtensor_placements(mg_grad(wt))[0].kind == MG_PLACE_SHARD,
                  "a Shard(0) parameter's gradient must be Shard(0)");
    mg_step_end();
    mg_dtensor_free(x);
    mg_dtensor_free(wt);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(test_accumulate_and_zero) {
    mg_mesh *mesh = mg_test_mesh1d();
    mg_dtensor *a = mg_test_dtensor(mesh, 2, (int64_t[]){4, 3}, MG_SHARD(0), 13);
    mg_set_requires_grad(a, 1);
    /* loss = sum(a * a) + sum(a): used three times; gradient 2a + 1 */
    mg_dtensor *loss = mg_add(mg_sum(mg_mul(a, a)), mg_sum(a));
    mg_assert_all(mg_backward(loss) == MG_OK, "%s", mg_last_error());
    mg_tensor *g = mg_full_tensor(mg_grad(a)), *av = mg_full_tensor(a);
    int ok = 1;
    for (int i = 0; i < 12; i++)
        if (fabsf(mg_tensor_data(g)[i] - (2 * mg_tensor_data(av)[i] + 1)) > 1e-5f) ok = 0;
    mg_assert_all(ok, "gradient is not 2a + 1");
    mg_tensor_free(g);
    mg_step_end();
    /* a second step accumulates into the same gradient until zeroed */
    loss = mg_sum(a);
    mg_assert_all(mg_backward(loss) == MG_OK, "%s", mg_last_error());
    g = mg_full_tensor(mg_grad(a));
    ok = 1;
    for (int i = 0; i < 12; i++)
        if (fabsf(mg_tensor_data(g)[i] - (2 * mg_tensor_data(av)[i] + 2)) > 1e-5f) ok = 0;
    mg_assert_all(ok, "gradients did not accumulate across backward calls");
    mg_tensor_free(g);
    mg_step_end();
    mg_zero_grad(a);
    g = mg_full_tensor(mg_grad(a));
    ok = 1;
    for (int i = 0; i < 12; i++)
        if (mg_tensor_data(g)[i] != 0) ok = 0;
    mg_assert_all(ok, "mg_zero_grad left non-zero values");
    mg_tensor_free(g);
    mg_tensor_free(av);
    /* no-grad mode records nothing */
    int was = mg_set_grad_enabled(0);
    loss = mg_sum(a);
    mg_assert_all(mg_backward(loss) != MG_OK, "backward through a no-grad forward succeeded");
    mg_set_grad_enabled(was);
    mg_step_end();
    mg_dtensor_free(a);
    mg_mesh_free(mesh);
}
END_TEST

/* dx for y = t + cat(t[:, 2:5], t[:, 0:3]), t = 1.5 x (4, 6), from dy = g */
static void shifted_grad(const float *g, float *dx) {
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++) {
            float s = g[i * 6 + j];
            if (j >= 2 && j < 5) s += g[i * 6 + j - 2];
            if (j < 3) s += g[i * 6 + j + 3];
            dx[i * 6 + j] = 1.5f * s;
        }
}

static mg_dtensor *shifted(const mg_dtensor *x) {
    mg_dtensor *t = mg_scale(x, 1.5f);
    const mg_dtensor *parts[2] = {mg_narrow(t, 1, 2, 3), mg_narrow(t, 1, 0, 3)};
    return mg_add(t, mg_cat(2, parts, 1));
}

START_TEST(test_backward_with_reads_its_gradient) {
    mg_mesh *mesh = mg_test_mesh1d();
    int64_t shape[2] = {4, 6};
    mg_dtensor *x = mg_test_dtensor(mesh, 2, shape, MG_REPLICATE, 51);
    mg_dtensor *g = mg_test_dtensor(mesh, 2, shape, MG_REPLICATE, 52);
    mg_set_requires_grad(x, 1);
    mg_tensor *g0 = mg_full_tensor(g);
    const float *gv = mg_tensor_data(g0);
    /* the root's gradient is the caller's g; t's narrows add into t's in place */
    mg_assert_all(mg_backward_with(shifted(x), g) == MG_OK, "%s", mg_last_error());
    mg_tensor *g1 = mg_full_tensor(g), *dx = mg_full_tensor(mg_grad(x));
    float want[24];
    shifted_grad(gv, want);
    char msg[256] = "";
    mg_assert_all(mg_test_close(mg_tensor_data(g1), gv, 24, 0, 0, msg, sizeof msg),
                  "mg_backward_with changed the caller's gradient: %s", msg);
    mg_assert_all(mg_test_close(mg_tensor_data(dx), want, 24, 1e-6, 1e-6, msg, sizeof msg),
                  "dx: %s", msg);
    mg_tensor_free(g1);
    mg_tensor_free(dx);
    mg_step_end();
    /* seeded with grad(x) itself: its buffer takes x's contributions during the
     * walk; y = 2 x (recorded after the narrows, so met first) + shifted(x) */
    mg_dtensor *dxw = mg_grad(x);
    mg_tensor *d0 = mg_full_tensor(dxw);
    const mg_dtensor *parts[2] = {shifted(x), mg_scale(x, 2.0f)};
    mg_dtensor *y = mg_add(parts[0], parts[1]);
    mg_assert_all(mg_backward_with(y, dxw) == MG_OK, "%s", mg_last_error());
    dx = mg_full_tensor(mg_grad(x));
    const float *d = mg_tensor_data(d0);
    shifted_grad(d, want);
    for (int i = 0; i < 24; i++) want[i] += d[i] + 2 * d[i];
    mg_assert_all(mg_test_close(mg_tensor_data(dx), want, 24, 1e-6, 1e-6, msg, sizeof msg),
                  "seeded with grad(x): dx = grad(x) + the seed's VJP wanted: %s", msg);
    mg_tensor_free(dx);
    mg_tensor_free(d0);
    mg_tensor_free(g0);
    mg_step_end();
    mg_dtensor_free(g);
    mg_dtensor_free(x);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(test_clear_errors) {
    int w = mg_world_size();
    mg_mesh *mesh = mg_test_mesh1d();
    mg_dtensor *x = mg_test_dtensor(mesh, 2, (int64_t[]){5, 6}, MG_REPLICATE, 14);
    mg_dtensor *wt = mg_test_dtensor(mesh, 2, (int64_t[]){3, 7}, MG_REPLICATE, 15);
    mg_dtensor *y = mg_linear(x, wt, NULL);
    mg_assert_all(y == NULL, "linear of misfit shapes was accepted");
    mg_assert_all(strstr(mg_last_error(), "mg_linear") && strstr(mg_last_error(), "(5, 6)") &&
                      strstr(mg_last_error(), "(3, 7)"),
                  "%s", mg_last_error());
    mg_assert_all(mg_add(x, wt) == NULL && strstr(mg_last_error(), "broadcast"), "%s",
                  mg_last_error());
    /* tensors on different meshes */
    int shape2[2] = {1, w};
    mg_mesh *other = mg_mesh_new(2, shape2);
    mg_tensor *t = mg_tensor_new(2, (int64_t[]){5, 6});
    mg_dtensor *z = mg_distribute(other, t, (mg_placement[]){MG_REPLICATE, MG_REPLICATE}, 2);
    mg_assert_all(mg_add(x, z) == NULL && strstr(mg_last_error(), "mesh"), "%s", mg_last_error());
    /* backward on a non-scalar */
    mg_set_requires_grad(x, 1);
    mg_dtensor *r = mg_relu(x);
    mg_assert_all(mg_backward(r) != MG_OK && strstr(mg_last_error(), "scalar") &&
                      strstr(mg_last_error(), "(5, 6)"),
                  "%s", mg_last_error());
    /* backward twice */
    mg_dtensor *l = mg_sum(r);
    mg_assert_all(mg_backward(l) == MG_OK, "%s", mg_last_error());
    mg_assert_all(mg_backward(l) != MG_OK && strstr(mg_last_error(), "freed"), "%s",
                  mg_last_error());
    mg_dtensor *l2 = mg_mean(r); /* a new loss on the freed part of the graph */
    mg_assert_all(mg_backward(l2) != MG_OK && strstr(mg_last_error(), "freed"), "%s",
                  mg_last_error());
    /* a view with no valid strategy names the redistribute that makes it valid */
    if (w > 1) {
        mg_dtensor *s = mg_test_dtensor(mesh, 2, (int64_t[]){4, 6}, MG_SHARD(1), 16);
        mg_dtensor *v = mg_view(s, 1, (int64_t[]){24});
        mg_assert_all(v == NULL && strstr(mg_last_error(), "mg_redistribute(x, [R])"), "%s",
                      mg_last_error());
        mg_dtensor *rs = mg_reshape(s, 1, (int64_t[]){24});
        mg_assert_all(rs != NULL, "reshape (which may copy) must work: %s", mg_last_error());
        mg_dtensor_free(s);
    }
    /* the library keeps working */
    mg_dtensor *ok =
        mg_linear(x, mg_test_dtensor(mesh, 2, (int64_t[]){3, 6}, MG_REPLICATE, 17), NULL);
    mg_assert_all(ok != NULL, "%s", mg_last_error());
    mg_step_end();
    mg_tensor_free(t);
    mg_dtensor_free(z);
    mg_dtensor_free(x);
    mg_dtensor_free(wt);
    mg_mesh_free(other);
    mg_mesh_free(mesh);
}
END_TEST

/* A call given NULL leaves its own message, not an older one; none crashes. */
static void stale_error(void) { mg_redistribute(NULL, NULL, 0); } /* "mg_redistribute: ..." */

#define OWN_MESSAGE(call, name)                                                                    \
    do {                                                                                           \
        stale_error();                                                                             \
        (void)(call);                                                                              \
        mg_assert_all(strstr(mg_last_error(), name) != NULL, "%s left \"%s\"", name,               \
                      mg_last_error());                                                            \
    } while (0)

START_TEST(test_null_arguments) {
    OWN_MESSAGE(mg_grad(NULL), "mg_grad");
    OWN_MESSAGE(mg_local(NULL), "mg_local");
    OWN_MESSAGE(mg_dtensor_mesh(NULL), "mg_dtensor_mesh");
    OWN_MESSAGE(mg_dtensor_shape(NULL), "mg_dtensor_shape");
    OWN_MESSAGE(mg_dtensor_placements(NULL), "mg_dtensor_placements");
    OWN_MESSAGE(mg_mesh_shape(NULL), "mg_mesh_shape");
    OWN_MESSAGE(mg_mesh_coord(NULL), "mg_mesh_coord");
    OWN_MESSAGE(mg_tensor_data(NULL), "mg_tensor_data");
    OWN_MESSAGE(mg_tensor_shape(NULL), "mg_tensor_shape");
    mg_assert_all(mg_grad(NULL) == NULL && mg_local(NULL) == NULL && mg_mesh_shape(NULL) == NULL,
                  "a getter given NULL returned something");
    mg_assert_all(mg_dtensor_ndim(NULL) == -1 && mg_mesh_ndim(NULL) == 0 &&
                      mg_tensor_ndim(NULL) == -1 && mg_tensor_numel(NULL) == 0,
                  "counts of NULL");
    OWN_MESSAGE(mg_comm_stats_get(NULL), "mg_comm_stats_get");
    /* a NULL dims list with n = 1: refused like mg_sum_dims, not a crash */
    mg_mesh *mesh = mg_test_mesh1d();
    mg_dtensor *x = mg_test_dtensor(mesh, 2, (int64_t[]){3, 4}, MG_REPLICATE, 18);
    OWN_MESSAGE(mg_mean_dims(x, 1, NULL, 0), "mg_mean_dims");
    mg_assert_all(mg_mean_dims(x, 1, NULL, 0) == NULL && mg_sum_dims(x, 1, NULL, 0) == NULL,
                  "a NULL dims list was accepted");
    mg_dtensor *m = mg_mean_dims(x, 1, (int[]){1}, 0);
    mg_assert_all(m != NULL, "the library keeps working: %s", mg_last_error());
    mg_step_end();
    mg_dtensor_free(x);
    mg_mesh_free(mesh);
}
END_TEST

/* A value that depends on the rank reaching an op (here a scale factor; or an
 * op only some ranks run) used to give replicas that drift apart without a
 * word; the ranks now compare their graphs before backward, which refuses,
 * changing nothing, and names the op. */
START_TEST(test_ranks_record_one_graph) {
    int w = mg_world_size(), me = mg_rank();
    mg_mesh *mesh = mg_test_mesh1d();
    mg_dtensor *x = mg_test_dtensor(mesh, 2, (int64_t[]){4, 6}, MG_REPLICATE, 7);
    mg_assert_all(x && mg_set_requires_grad(x, 1) == MG_OK, "%s", mg_last_error());

    mg_dtensor *loss = mg_sum(mg_scale(x, me == 1 ? 0.5f : 1.0f));
    int rc = mg_backward(loss);
    if (w > 1) {
        const char *e = mg_last_error();
        mg_assert_all(rc == MG_ESTATE &&
                          strstr(e, "mg_backward: the ranks of the mesh recorded different "
                                    "graphs: op 2 of 2") &&
                          strstr(e, "(here: scale"),
                      "a rank's own scale factor: rc %d, %s", rc, mg_last_error());
        mg_assert_all(mg_grad(x) == NULL, "the refused backward left a gradient");
    } else {
        mg_assert_all(rc == MG_OK, "one rank: %s", mg_last_error());
    }
    mg_step_end();
    mg_zero_grad(x);

    /* an op that only rank 0 runs */
    mg_dtensor *y = me == 0 ? mg_scale(x, 2.0f) : x;
    rc = mg_backward(mg_sum(mg_mul(y, x)));
    if (w > 1)
        mg_assert_all(rc == MG_ESTATE && strstr(mg_last_error(), "recorded different graphs"),
                      "an op on rank 0 only: rc %d, %s", rc, mg_last_error());
    mg_step_end();
    mg_zero_grad(x);

    /* the same graph on every rank: backward runs, d sum(3 x) / dx = 3 */
    rc = mg_backward(mg_sum(mg_scale(x, 3.0f)));
    mg_assert_all(rc == MG_OK, "the same graph everywhere: %s", mg_last_error());
    mg_tensor *g = mg_full_tensor(mg_grad(x));
    int bad = !g;
    for (int i = 0; !bad && i < 24; i++) bad = mg_tensor_data(g)[i] != 3.0f;
    mg_assert_all(!bad, "the gradient after the refusals is not 3");
    mg_tensor_free(g);
    mg_step_end();
    mg_dtensor_free(x);
    mg_mesh_free(mesh);
}
END_TEST

static Suite *make_suite(void) {
    const TTest *tests[] = {test_seed_placements_refused, test_expand_global_sizes,
                            test_data_parallel_linear_comm, test_megatron_comm,
                            test_fsdp_gradient_reduce_scattered, test_accumulate_and_zero,
                            test_backward_with_reads_its_gradient, test_clear_errors,
                            test_null_arguments, test_ranks_record_one_graph, NULL};
    return mg_test_suite("autograd", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
