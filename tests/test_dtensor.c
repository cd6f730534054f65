/* test_dtensor.c (MPI): distributed tensors on every mesh the world size
 * allows. mg_distribute gives each rank its naive block (Partial: coordinate 0
 * keeps the value); mg_from_local + mg_full_tensor rebuild the tensor;
 * mg_dtensor_fill_uniform draws the same global tensor on every mesh; describe
 * names every rank's block; and every refusal (placement count, shard dim out of
 * range, wrong local shape on all or one rank, mixed meshes, wrong block to
 * mg_dtensor_make) with its message, followed by a call that works; and
 * handles misused (freed twice, a mesh freed under its tensors, a tensor freed
 * while a graph needs it) refused without harm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/dtensor.h"
#include "rng.h"
#include "status.h"
#include "test_dist.h"
#include "testutil.h"

static int world, me;

START_TEST(distribute_gives_naive_blocks) {
    static const int64_t shapes[][4] = {{1, 7}, {2, 4, 6}, {2, 1, 3}, {3, 3, 2, 5}, {0}};
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 4, ms), bad = 0;
    char first[256] = "";
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int nd = (int)shapes[si][0];
            mg_tensor *full = mg_tensor_new(nd, &shapes[si][1]);
            mg_test_fill_int(full->data, full->numel, 4 + si);
            int nl = test_placement_count(mesh->ndim, nd);
            for (int l = 0; l < nl && l < 200; l++) {
                mg_placement p[MG_MAX_MESH_DIMS];
                test_placement_list(l, mesh->ndim, nd, p);
                mg_dtensor *x = mg_distribute(mesh, full, p, mesh->ndim);
                int keeper = 1;
                for (int i = 0; i < mesh->ndim; i++)
                    if (p[i].kind == MG_PLACE_PARTIAL && mesh->coord[i] != 0) keeper = 0;
                int good = x && mg_dtensor_ndim(x) == nd &&
                           mg_shape_equal(nd, mg_dtensor_shape(x), nd, full->shape) &&
                           mg_dtensor_mesh(x) == mesh;
                if (good && keeper) good = test_block_matches(&x->spec, x->local, full->data);
                if (good && !keeper)
                    for (int64_t e = 0; e < x->local->numel; e++) good &= x->local->data[e] == 0.0f;
                if (good) {
                    mg_tensor *back = mg_full_tensor(x);
                    good = back && back->numel == full->numel &&
                           memcmp(back->data, full->data, full->numel * sizeof(float)) == 0;
                    mg_tensor_free(back);
                }
                if (!good && bad++ == 0) {
                    char pl[64];
                    snprintf(first, sizeof first, "placements %s, shape %zu: %s",
                             mg_placements_format(pl, sizeof pl, p, mesh->ndim), si,
                             x ? "wrong block" : mg_last_error());
                }
                mg_dtensor_free(x);
            }
            mg_tensor_free(full);
        }
        mg_mesh_free(mesh);
    }
    mg_assert_all(bad == 0, "%d bad: %s", bad, first);
}
END_TEST

START_TEST(negative_shard_dims_are_normalized) {
    int one[1] = {world};
    mg_mesh *mesh = mg_mesh_new(1, one);
    int64_t shape[2] = {4, 6};
    mg_tensor *full = mg_tensor_new(2, shape);
    mg_placement p = MG_SHARD(-1);
    mg_dtensor *x = mg_distribute(mesh, full, &p, 1);
    mg_assert_all(x && mg_dtensor_placements(x)[0].kind == MG_PLACE_SHARD &&
                      mg_dtensor_placements(x)[0].dim == 1,
                  "S(-1) not normalized to S(1)");
    mg_assert_all(mg_local(x) == x->local && mg_tensor_shape(mg_local(x))[0] == 4, "local");
    mg_dtensor_free(x);
    mg_tensor_free(full);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(from_local_round_trip) {
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 2, ms);
    int64_t shape[2] = {5, 3};
    mg_tensor *full = mg_tensor_new(2, shape);
    mg_test_fill_int(full->data, full->numel, 21);
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        int nl = test_placement_count(mesh->ndim, 2);
        for (int l = 0; l < nl; l++) {
            mg_placement p[MG_MAX_MESH_DIMS];
            test_placement_list(l, mesh->ndim, 2, p);
            mg_dtensor *ref = mg_distribute(mesh, full, p, mesh->ndim);
            mg_tensor *mine = mg_tensor_clone(NULL, ref->local);
            mg_dtensor *x = mg_from_local(mesh, mine, p, mesh->ndim, 2, shape);
            mg_assert_all(x != NULL, "mg_from_local: %s", mg_last_error());
            if (mine->numel) mine->data[0] = 1e9f; /* the dtensor holds its own copy */
            mg_tensor *back = mg_full_tensor(x);
            mg_assert_all(back && memcmp(back->data, full->data, full->numel * sizeof(float)) == 0,
                          "from_local -> full differs (list %d)", l);
            mg_tensor_free(back);
            mg_tensor_free(mine);
            mg_dtensor_free(x);
            mg_dtensor_free(ref);
        }
        mg_mesh_free(mesh);
    }
    mg_tensor_free(full);
}
END_TEST

/* A 1 x world mesh: 2-D, so one placement is the seed bug's mistake. */
static mg_mesh *mesh_1xw(void) {
    int s[2] = {1, world};
    return mg_mesh_new(2, s);
}

START_TEST(distribute_refusals) {
    mg_mesh *mesh = mesh_1xw();
    int64_t shape[3] = {2, 40, 10};
    mg_tensor *full = mg_tensor_new(3, shape);
    mg_placement one[1] = {MG_SHARD(0)};
    char want[256];
    mg_assert_all(mg_distribute(mesh, full, one, 1) == NULL, "1 placement on a 2-D mesh accepted");
    mg_assert_all(mg_last_code() == MG_EPLACEMENT, "code %d", mg_last_code());
    snprintf(want, sizeof want,
             "mg_distribute: placements has 1 entry but the mesh is 2-D (1x%d): give one "
             "placement per mesh dimension",
             world);
    ck_assert_str_eq(mg_last_error(), want);
    mg_placement two[2] = {MG_SHARD(0), MG_SHARD(0)};
    mg_dtensor *x = mg_distribute(mesh, full, two, 2);
    mg_assert_all(x != NULL, "good call after refusal: %s", mg_last_error());
    mg_dtensor_free(x);

    mg_placement far[2] = {MG_REPLICATE, MG_SHARD(3)};
    mg_assert_all(mg_distribute(mesh, full, far, 2) == NULL, "S(3) of a 3-d tensor accepted");
    ck_assert_str_eq(mg_last_error(), "mg_distribute: placement 1 is S(3) but the tensor has 3 "
                                      "dims (shape (2, 40, 10)): shard a dim in -3..2");
    mg_assert_all(mg_distribute(mesh, NULL, two, 2) == NULL && mg_last_code() == MG_EINVAL, "NULL");
    mg_assert_all(mg_distribute(NULL, full, two, 2) == NULL && mg_last_code() == MG_EINVAL, "NULL");
    mg_placement last[2] = {MG_PARTIAL_SUM, MG_SHARD(-1)};
    x = mg_distribute(mesh, full, last, 2);
    mg_assert_all(x != NULL, "good call after refusal: %s", mg_last_error());
    mg_dtensor_free(x);

    /* the same for mg_from_local, which checks before touching the local tensor */
    mg_assert_all(mg_from_local(mesh, full, one, 1, 3, shape) == NULL, "from_local: 1 placement");
    snprintf(want, sizeof want,
             "mg_from_local: placements has 1 entry but the mesh is 2-D (1x%d): give one "
             "placement per mesh dimension",
             world);
    ck_assert_str_eq(mg_last_error(), want);
    mg_tensor_free(full);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(from_local_wrong_shape) {
    mg_mesh *mesh = mesh_1xw();
    int64_t shape[3] = {2, 40, 10}, wrong[3] = {2, 40, 10};
    mg_placement p[2] = {MG_REPLICATE, MG_SHARD(1)};
    /* every rank passes the full tensor instead of its block (world > 1), or a
     * tensor of the wrong rank (world 1) */
    int64_t blk = (40 + world - 1) / world, start = blk * me;
    int64_t mine_rows = start >= 40 ? 0 : (40 - start < blk ? 40 - start : blk);
    mg_tensor *t = world > 1 ? mg_tensor_new(3, wrong) : mg_tensor_new(2, wrong);
    mg_assert_all(mg_from_local(mesh, t, p, 2, 3, shape) == NULL, "wrong local shape accepted");
    mg_assert_all(mg_last_code() == MG_ESHAPE, "code %d", mg_last_code());
    char want[512];
    snprintf(want, sizeof want,
             "mg_from_local: rank %d (0,%d) passed a local tensor of shape %s but (2, 40, 10) [R, "
             "S(1)] on mesh 1x%d gives it (2, %lld, 10): pass this rank's block (or give every "
             "rank the full tensor to mg_distribute)",
             me, me, world > 1 ? "(2, 40, 10)" : "(2, 40)", world, (long long)mine_rows);
    ck_assert_str_eq(mg_last_error(), want);
    mg_tensor_free(t);

    /* right after: the right blocks work */
    int64_t ok_shape[3] = {2, mine_rows, 10};
    t = mg_tensor_new(3, ok_shape);
    mg_dtensor *x = mg_from_local(mesh, t, p, 2, 3, shape);
    mg_assert_all(x != NULL, "good call after refusal: %s", mg_last_error());
    mg_dtensor_free(x);
    mg_tensor_free(t);

    /* only the last rank is wrong: every rank refuses, the others name it */
    if (world > 1) {
        int64_t bad_shape[3] = {2, mine_rows + 1, 10};
        t = mg_tensor_new(3, me == world - 1 ? bad_shape : ok_shape);
        mg_assert_all(mg_from_local(mesh, t, p, 2, 3, shape) == NULL, "a rank went on alone");
        if (me != world - 1) {
            snprintf(want, sizeof want,
                     "mg_from_local: rank %d passed a local tensor that does not fit (2, 40, 10) "
                     "[R, S(1)] on mesh 1x%d (see rank %d's error)",
                     world - 1, world, world - 1);
            ck_assert_str_eq(mg_last_error(), want);
        } else {
            ck_assert_ptr_nonnull(strstr(mg_last_error(), "passed a local tensor of shape"));
        }
        mg_tensor_free(t);
        t = mg_tensor_new(3, ok_shape);
        x = mg_from_local(mesh, t, p, 2, 3, shape);
        mg_assert_all(x != NULL, "good call after refusal: %s", mg_last_error());
        mg_dtensor_free(x);
        mg_tensor_free(t);
    }
    mg_mesh_free(mesh);
}
END_TEST

/* Ranks passing different global shapes or placements are refused on every rank,
 * with the ranks named, instead of dying later in a collective. */
START_TEST(ranks_must_agree) {
    mg_mesh *mesh = mesh_1xw();
    int last = world - 1;
    int64_t a[2] = {4, 6}, b[2] = {4, 5};
    mg_placement p[2] = {MG_REPLICATE, MG_SHARD(0)}, q[2] = {MG_REPLICATE, MG_SHARD(1)};
    char want[256];
    if (world > 1) {
        mg_tensor *t = mg_tensor_new(2, me == last ? b : a);
        mg_assert_all(mg_distribute(mesh, t, p, 2) == NULL, "different shapes accepted");
        snprintf(want, sizeof want,
                 "rank 0 (4, 6) [R, S(0)], but rank %d other ones (rank %d: "
                 "(4, 5) [R, S(0)])",
                 last, last);
        mg_assert_all(strstr(mg_last_error(), want) != NULL, "message: %s", mg_last_error());
        mg_tensor_free(t);
        /* placements differ on every other rank */
        t = mg_tensor_new(2, a);
        mg_assert_all(mg_distribute(mesh, t, me % 2 ? q : p, 2) == NULL, "placements differ");
        mg_assert_all(strstr(mg_last_error(), "(rank 1: (4, 6) [R, S(1)])") != NULL, "message: %s",
                      mg_last_error());
        /* mg_from_local: one global shape, whatever the local blocks */
        mg_assert_all(mg_from_local(mesh, t, p, 2, 2, me == last ? b : a) == NULL,
                      "from_local with different global shapes accepted");
        mg_assert_all(strstr(mg_last_error(), "mg_from_local: the ranks passed different") != NULL,
                      "message: %s", mg_last_error());
        /* one rank refuses its own arguments: the others do not wait for it */
        mg_dtensor *x = mg_distribute(mesh, t, p, me == last ? 1 : 2);
        mg_assert_all(x == NULL, "a rank went on alone");
        snprintf(want, sizeof want, "mg_distribute: rank %d refused its arguments", last);
        mg_assert_all(me == last || strstr(mg_last_error(), want) != NULL, "message: %s",
                      mg_last_error());
        mg_tensor_free(t);
    }
    /* after all that, agreeing ranks are served */
    mg_tensor *t = mg_tensor_new(2, a);
    mg_dtensor *x = mg_distribute(mesh, t, p, 2);
    mg_assert_all(x != NULL, "agreeing ranks refused: %s", mg_last_error());
    if (world > 1) { /* mg_redistribute to placements that differ on every other rank:
                      * rank 0 ran on with wrong blocks before */
        mg_assert_all(mg_redistribute(x, me % 2 ? q : (mg_placement[]){MG_REPLICATE, MG_REPLICATE},
                                      2) == NULL,
                      "mg_redistribute to different placements accepted");
        mg_assert_all(strstr(mg_last_error(), "mg_redistribute: the ranks passed different") &&
                          strstr(mg_last_error(), "(rank 1: (4, 6) [R, S(1)])"),
                      "message: %s", mg_last_error());
    }
    mg_dtensor *y = mg_redistribute(x, q, 2);
    mg_assert_all(y != NULL, "agreeing ranks refused by mg_redistribute: %s", mg_last_error());
    mg_step_end();
    mg_dtensor_free(x);
    mg_tensor_free(t);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(mixed_meshes_refused) {
    int one[1] = {world};
    mg_mesh *a = mg_mesh_new(1, one), *b = mesh_1xw();
    int64_t shape[1] = {6};
    mg_tensor *full = mg_tensor_new(1, shape);
    mg_placement r1[1] = {MG_REPLICATE}, r2[2] = {MG_REPLICATE, MG_SHARD(0)};
    mg_dtensor *x = mg_distribute(a, full, r1, 1), *y = mg_distribute(b, full, r2, 2);
    mg_assert_all(mg_dtensor_same_mesh(x, y, "mg_add") == MG_EMESH, "mixed meshes accepted");
    char want[512];
    snprintf(want, sizeof want,
             "mg_add: the tensors are on different meshes (mesh %d #%d and mesh 1x%d #%d; (6) [R] "
             "on mesh %d and (6) [R, S(0)] on mesh 1x%d): make every input of one call on the "
             "same mg_mesh",
             world, a->id, world, b->id, world, world);
    ck_assert_str_eq(mg_last_error(), want);
    mg_dtensor *z = mg_distribute(a, full, r1, 1);
    mg_assert_all(mg_dtensor_same_mesh(x, z, "mg_add") == MG_OK, "same mesh refused");
    mg_dtensor_free(x);
    mg_dtensor_free(y);
    mg_dtensor_free(z);
    mg_tensor_free(full);
    mg_mesh_free(a);
    mg_mesh_free(b);
}
END_TEST

START_TEST(make_checks_the_block) {
    mg_mesh *mesh = mesh_1xw();
    int64_t shape[2] = {3, 8};
    mg_placement p[2] = {MG_REPLICATE, MG_SHARD(1)};
    mg_spec s;
    ck_assert_int_eq(mg_spec_make(&s, mesh, p, 2, 2, shape, "t"), MG_OK);
    mg_tensor *wrong = mg_tensor_new(2, shape);
    mg_dtensor *x = mg_dtensor_make(&s, wrong, NULL); /* frees `wrong` when refusing */
    mg_assert_all(world == 1 ? x != NULL : x == NULL, "whole tensor taken for a block");
    if (world > 1)
        mg_assert_all(strstr(mg_last_error(), "does not fit") != NULL, "%s", mg_last_error());
    mg_dtensor_free(x);
    mg_dtensor *z = mg_dtensor_zeros(&s, NULL);
    mg_assert_all(z && z->local->numel == 3 * (8 / world) && (z->flags & MG_DTENSOR_HEAP), "zeros");
    /* a heap gradient goes with its tensor */
    z->grad = mg_dtensor_zeros(&s, NULL);
    mg_dtensor_free(z);
    /* in an arena: not heap, mg_dtensor_free ignores it */
    mg_arena *arena = mg_arena_new(4096);
    mg_dtensor *w = mg_dtensor_zeros(&s, arena);
    mg_assert_all(w && !(w->flags & MG_DTENSOR_HEAP), "arena tensor marked heap");
    mg_dtensor_free(w);
    mg_arena_free(arena);
    mg_mesh_free(mesh);
}
END_TEST

START_TEST(fill_uniform_same_on_every_mesh) {
    int64_t shape[3] = {3, 5, 4};
    int64_t n = 60;
    float ref[60];
    for (int64_t i = 0; i < n; i++) ref[i] = -2.0f + 3.0f * mg_rng_uniform_at(42, 7, (uint64_t)i);
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 4, ms);
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        int nl = test_placement_count(mesh->ndim, 3);
        for (int l = 0; l < nl && l < 150; l++) {
            mg_placement p[MG_MAX_MESH_DIMS];
            test_placement_list(l, mesh->ndim, 3, p);
            mg_spec s;
            mg_spec_make(&s, mesh, p, mesh->ndim, 3, shape, "t");
            mg_dtensor *x = mg_dtensor_zeros(&s, NULL);
            mg_assert_all(mg_dtensor_fill_uniform(x, 42, 7, -2.0f, 1.0f) == MG_OK, "%s",
                          mg_last_error());
            int in_range = 1;
            for (int64_t e = 0; e < x->local->numel; e++)
                in_range &= x->local->data[e] >= -2.0f && x->local->data[e] < 1.0f;
            mg_tensor *back = mg_full_tensor(x);
            char pl[64];
            mg_placements_format(pl, sizeof pl, p, mesh->ndim);
            mg_assert_all(in_range && back && memcmp(back->data, ref, sizeof ref) == 0,
                          "fill_uniform under %s differs from the single-process draw", pl);
            mg_tensor_free(back);
            mg_dtensor_free(x);
        }
        mg_mesh_free(mesh);
    }
}
END_TEST

START_TEST(describe_names_the_blocks) {
    mg_mesh *mesh = mesh_1xw();
    int64_t shape[3] = {2, 40, 10};
    mg_tensor *full = mg_tensor_new(3, shape);
    mg_placement p[2] = {MG_REPLICATE, MG_SHARD(0)};
    mg_dtensor *x = mg_distribute(mesh, full, p, 2);
    char buf[1024], want[1024];
    int n = mg_dtensor_describe(x, buf, sizeof buf);
    size_t u = (size_t)snprintf(want, sizeof want, "(2, 40, 10) on mesh 1x%d [R, S(0)]", world);
    for (int r = 0; r < world; r++) {
        int64_t st = r < 2 ? (world >= 2 ? r : 0) : 2, en = world >= 2 ? (r < 2 ? r + 1 : 2) : 2;
        u += (size_t)snprintf(want + u, sizeof want - u,
                              "; rank %d (0,%d) holds [%lld:%lld, 0:40, 0:10]", r, r, (long long)st,
                              (long long)en);
    }
    ck_assert_str_eq(buf, want);
    ck_assert_int_eq(n, (int)strlen(want));
    /* a short buffer is cut, never overrun, and the length still says what it needs */
    char small[16];
    ck_assert_int_eq(mg_dtensor_describe(x, small, sizeof small), n);
    ck_assert_int_eq((int)strlen(small), 15);
    mg_dtensor_free(x);
    mg_tensor_free(full);
    mg_mesh_free(mesh);
}
END_TEST

/* A (4, 6) tensor of start, start + step, start + 2 step, ... */
static mg_tensor *ramp_4x6(float step, float start) {
    mg_tensor *full = mg_tensor_new(2, (int64_t[]){4, 6});
    for (int i = 0; i < 24; i++) full->data[i] = step * (float)i + start;
    return full;
}

/* full at [Replicate, Shard(1)] on mesh (asserted made). */
static mg_dtensor *placed(const mg_mesh *mesh, const mg_tensor *full) {
    mg_placement p[2] = {MG_REPLICATE, MG_SHARD(1)};
    mg_dtensor *x = mg_distribute(mesh, full, p, 2);
    mg_assert_all(x != NULL, "%s", mg_last_error());
    return x;
}

/* t's full value is k times full's, element by element. */
static int is_times(const mg_dtensor *t, float k, const mg_tensor *full) {
    mg_tensor *g = mg_full_tensor(t);
    int ok = g != NULL;
    for (int64_t i = 0; ok && i < full->numel; i++) ok = g->data[i] == k * full->data[i];
    mg_tensor_free(g);
    return ok;
}

/* Misused handles change nothing and say so: a tensor freed twice, a mesh freed
 * under its tensors, a tensor freed while this step's graph needs it, a
 * parameter's gradient freed on its own. Each used to end in a double free or
 * a read of freed memory. */
START_TEST(lifetimes_are_checked) {
    mg_mesh *mesh = mesh_1xw();
    mg_tensor *full = ramp_4x6(0.5f, -3.0f);
    mg_dtensor *gone = placed(mesh, full);
    mg_assert_all(mg_dtensor_live_on(mesh) == 1, "live on the mesh: %d, not 1",
                  mg_dtensor_live_on(mesh));
    mg_dtensor_free(gone);
    mg_dtensor_free(gone); /* twice: nothing touched (it was a double free) */
    mg_assert_all(mg_dtensor_live_on(mesh) == 0, "live on the mesh after two frees: %d",
                  mg_dtensor_live_on(mesh));
    /* the tensors made after it may get its memory from malloc: the freed
     * pointer is still refused, and freeing it again frees none of them (it
     * freed the newest, which malloc had put at the same address) */
    enum { AFTER = 8 };
    mg_dtensor *after[AFTER];
    for (int i = 0; i < AFTER; i++) after[i] = placed(mesh, full);
    mg_assert_all(mg_sum(gone) == NULL && mg_last_code() == MG_ESTATE &&
                      strstr(mg_last_error(), "not a live tensor") != NULL,
                  "a freed tensor given to an op after %d more were made: %s", AFTER,
                  mg_last_error());
    mg_dtensor_free(gone);
    mg_assert_all(mg_dtensor_live_on(mesh) == AFTER, "live after freeing a freed tensor again: "
                  "%d, not %d", mg_dtensor_live_on(mesh), AFTER);
    for (int i = 0; i < AFTER; i++) {
        mg_tensor *back = mg_full_tensor(after[i]);
        mg_assert_all(back && back->data[23] == full->data[23], "tensor %d made after the free: "
                      "%s", i, back ? "wrong data" : mg_last_error());
        mg_tensor_free(back);
        mg_dtensor_free(after[i]);
    }

    mg_dtensor *x = placed(mesh, full);
    mg_assert_all(mg_set_requires_grad(x, 1) == MG_OK, "%s", mg_last_error());
    mg_mesh_free(mesh); /* x still lives on it: refused */
    mg_assert_all(mg_last_code() == MG_ESTATE && strstr(mg_last_error(), "still alive") != NULL,
                  "mesh freed under a tensor: %s", mg_last_error());

    /* the graph of this step needs x until mg_step_end */
    mg_dtensor *loss = mg_sum(mg_mul(x, x));
    mg_assert_all(loss != NULL, "%s", mg_last_error());
    mg_dtensor_free(x);
    mg_assert_all(mg_last_code() == MG_ESTATE && strstr(mg_last_error(), "mg_step_end") != NULL,
                  "free under a graph: %s", mg_last_error());
    mg_assert_all(mg_backward(loss) == MG_OK, "backward: %s", mg_last_error());
    mg_assert_all(is_times(mg_grad(x), 2.0f, full), "d sum(x*x)/dx is not 2x after the refused frees");
    mg_dtensor_free(mg_grad(x)); /* the gradient goes with its parameter only */
    mg_assert_all(mg_last_code() == MG_ESTATE && strstr(mg_last_error(), "gradient") != NULL,
                  "gradient freed alone: %s", mg_last_error());
    mg_step_end();
    mg_assert_all(mg_dtensor_live_on(mesh) == 2, "live on the mesh: %d (x and its gradient)",
                  mg_dtensor_live_on(mesh));
    mg_dtensor_free(x);
    mg_assert_all(mg_dtensor_live_on(mesh) == 0, "x not freed after mg_step_end");
    mg_tensor_free(full);
    mg_mesh_free(mesh);
}
END_TEST

/* An op's result dies with its step: used after mg_step_end (right after, or
 * after the next step made the same tensors again, where its memory now holds
 * theirs) it is refused with a message, never read as a tensor. */
START_TEST(results_die_with_their_step) {
    mg_mesh *mesh = mesh_1xw();
    mg_tensor *full = ramp_4x6(1.0f, -5.0f);
    mg_dtensor *x = placed(mesh, full);

    mg_dtensor *kept = mg_scale(x, 2.0f), *sum = kept ? mg_add(kept, x) : NULL;
    mg_assert_all(sum != NULL, "%s", mg_last_error());
    mg_step_end();
    mg_assert_all(mg_add(kept, x) == NULL && mg_last_code() == MG_ESTATE &&
                      strstr(mg_last_error(), "mg_add: this tensor is an op's result from 1 step "
                                              "ago, and mg_step_end released it") != NULL,
                  "an op on last step's result: %s", mg_last_error());
    mg_assert_all(mg_dtensor_shape(kept) == NULL && strstr(mg_last_error(), "mg_dtensor_shape"),
                  "a getter on last step's result: %s", mg_last_error());
    mg_assert_all(mg_full_tensor(kept) == NULL && mg_last_code() == MG_ESTATE,
                  "mg_full_tensor of last step's result: %s", mg_last_error());
    mg_assert_all(mg_backward(sum) == MG_ESTATE, "mg_backward of last step's result: %s",
                  mg_last_error());

    /* the same ops again: without the shifted start, `kept` would point at
     * this step's first result and the op would run on it */
    mg_dtensor *again = mg_scale(x, 2.0f), *sum2 = again ? mg_add(again, x) : NULL;
    mg_assert_all(sum2 != NULL, "x (a tensor of our own) lives across steps: %s", mg_last_error());
    mg_assert_all(again != kept, "this step's result sits where last step's did");
    mg_assert_all(mg_add(kept, x) == NULL && mg_last_code() == MG_ESTATE,
                  "last step's result after this step made the same tensors: %s", mg_last_error());
    mg_assert_all(is_times(sum2, 3.0f, full), "this step's 2x + x is not 3x after the refusals");
    mg_step_end();
    /* and in each of the next 14 steps that make them again, or make others:
     * views (reshapes), whose headers sit closer together than the 64-byte
     * shifts of the arena's start that this check used before (a pointer kept
     * to one then found the next one in some later steps) */
    mg_dtensor *view = mg_reshape(x, 2, (int64_t[]){6, 4});
    mg_assert_all(view != NULL, "%s", mg_last_error());
    mg_step_end();
    for (int step = 3; step < MG_DTENSOR_STEPS; step++) {
        mg_dtensor *y = mg_scale(x, 2.0f);
        mg_assert_all(y && mg_add(y, x) != NULL, "step %d: %s", step, mg_last_error());
        for (int k = 0; k < 8; k++) /* views, header after header */
            mg_assert_all(mg_reshape(x, 2, (int64_t[]){k % 2 ? 6 : 2, k % 2 ? 4 : 12}) != NULL,
                          "step %d: %s", step, mg_last_error());
        mg_assert_all(mg_add(kept, x) == NULL && mg_last_code() == MG_ESTATE,
                      "step %d: step 0's result was taken: %s", step, mg_last_error());
        mg_assert_all(mg_dtensor_shape(view) == NULL && mg_last_code() == MG_ESTATE,
                      "step %d: step 2's view was taken: %s", step, mg_last_error());
        mg_step_end();
    }
    /* a step that outgrows the arena: at its end the blocks are merged into
     * a new one and freed, and a result kept into them is refused unread (it
     * was a crash: the check read unmapped memory) */
    int64_t big[2] = {1024, 1024};
    mg_tensor *bf = mg_tensor_new(2, big);
    mg_dtensor *b = mg_distribute(mesh, bf, (mg_placement[]){MG_REPLICATE, MG_REPLICATE}, 2);
    mg_dtensor *early = b ? mg_scale(b, 2.0f) : NULL;
    for (int i = 0; early && i < 24; i++) mg_add(b, b); /* 96 MiB: more than any step before */
    mg_step_end();
    mg_assert_all(early && mg_add(early, b) == NULL && mg_last_code() == MG_ESTATE,
                  "a result kept into a block the arena freed: %s", mg_last_error());
    mg_step_end();
    mg_dtensor_free(b);
    mg_tensor_free(bf);
    mg_dtensor_free(x);
    mg_tensor_free(full);
    mg_mesh_free(mesh);
}
END_TEST

static Suite *make_suite(void) {
    world = mg_world_size();
    me = mg_rank();
    const TTest *tests[] = {distribute_gives_naive_blocks, negative_shard_dims_are_normalized,
                            from_local_round_trip, distribute_refusals, from_local_wrong_shape,
                            ranks_must_agree, mixed_meshes_refused, make_checks_the_block,
                            fill_uniform_same_on_every_mesh, describe_names_the_blocks,
                            lifetimes_are_checked, results_die_with_their_step, NULL};
    return mg_test_suite("dtensor", tests);
}

/* Made before mg_finalize, used after it (after_finalize). */
static mg_mesh *old_mesh;
static mg_dtensor *old_x, *old_loss;

static void keep_for_after(void) {
    int64_t shape[2] = {4, 6};
    mg_tensor *full = mg_tensor_new(2, shape);
    for (int i = 0; i < 24; i++) full->data[i] = (float)i;
    old_mesh = mesh_1xw();
    old_x = mg_distribute(old_mesh, full, (mg_placement[]){MG_REPLICATE, MG_SHARD(1)}, 2);
    if (old_x) mg_set_requires_grad(old_x, 1);
    old_loss = old_x ? mg_sum(mg_mul(old_x, old_x)) : NULL;
    mg_tensor_free(full);
}

/* After mg_finalize, the meshes and tensors made before it are refused with a
 * message: mg_full_tensor aborted inside MPI, mg_distribute made a tensor on
 * a dead mesh, mg_backward read a freed graph. 0 when every call says so. */
static int after_finalize(void) {
    if (!old_x || !old_loss) return 1;
    int bad = 0;
    const char *want = "called after mg_finalize";
    mg_tensor *full = mg_tensor_new(2, (int64_t[]){4, 6});
#define REFUSED(call, what)                                                                        \
    do {                                                                                           \
        mg_clear_error();                                                                          \
        if (!(call) || !strstr(mg_last_error(), want)) {                                           \
            fprintf(stderr, "after mg_finalize, %s: not refused (%s)\n", what, mg_last_error());  \
            bad = 1;                                                                               \
        }                                                                                          \
    } while (0)
    REFUSED(mg_full_tensor(old_x) == NULL, "mg_full_tensor");
    REFUSED(mg_add(old_x, old_x) == NULL, "mg_add");
    REFUSED(mg_distribute(old_mesh, full, (mg_placement[]){MG_REPLICATE, MG_REPLICATE}, 2) == NULL,
            "mg_distribute");
    REFUSED(mg_redistribute(old_x, (mg_placement[]){MG_REPLICATE, MG_REPLICATE}, 2) == NULL,
            "mg_redistribute");
    REFUSED(mg_backward(old_loss) == MG_ESTATE, "mg_backward");
    REFUSED(mg_mesh_new(1, (int[]){1}) == NULL, "mg_mesh_new");
#undef REFUSED
    mg_tensor_free(full);
    return bad;
}

int main(int argc, char **argv) {
    int rc = mg_test_main_mpi(&argc, &argv, make_suite, keep_for_after);
    if (rc == 0 && after_finalize() != 0) rc = 1;
    return rc;
}
