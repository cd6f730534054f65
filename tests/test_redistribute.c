/* test_redistribute.c (MPI): every placement list to every placement list, on
 * every mesh the world size allows, for shapes that divide evenly, unevenly and
 * smaller than the mesh (empty shards), 1-d to 3-d: mg_distribute ->
 * mg_redistribute_local -> mg_dtensor_make -> mg_full_tensor gives the original
 * bit for bit (integer-valued data, so Partial sums are exact), and the new
 * local block is exactly the naive block of the full tensor. 3-D and 4-D meshes
 * get a deterministic sample of pairs plus the nested ones. Also: bytes counted
 * against mg_redistribute_cost and the accounting rules, arena outputs, and the
 * split (count > max) collective paths. */
#include <stdio.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/redistribute.h"
#include "status.h"
#include "test_dist.h"
#include "testutil.h"

static int world;

typedef struct {
    int nd;
    int64_t shape[3];
} tshape;

/* One round trip; returns 1 if good, else 0 with a message in msg. */
static int round_trip(const mg_mesh *mesh, const mg_tensor *full, const mg_placement *src,
                      const mg_placement *dst, char *msg, size_t len) {
    int mnd = mesh->ndim;
    char a[64], b[64], sh[64];
    mg_placements_format(a, sizeof a, src, mnd);
    mg_placements_format(b, sizeof b, dst, mnd);
    mg_shape_format(sh, sizeof sh, full->ndim, full->shape);
    int ok = 1;
    mg_dtensor *x = mg_distribute(mesh, full, src, mnd);
    if (!x) {
        snprintf(msg, len, "%s %s: mg_distribute: %s", sh, a, mg_last_error());
        return 0;
    }
    mg_spec ds;
    mg_tensor *out = NULL;
    if (mg_spec_make(&ds, mesh, dst, mnd, full->ndim, full->shape, "test") != MG_OK ||
        mg_redistribute_local(&x->spec, x->local, &ds, &out, NULL) != MG_OK) {
        snprintf(msg, len, "%s %s -> %s: %s", sh, a, b, mg_last_error());
        mg_dtensor_free(x);
        return 0;
    }
    if (!mg_spec_has_partial(&ds) && !test_block_matches(&ds, out, full->data)) {
        snprintf(msg, len, "%s %s -> %s: the local block is not the block of the full tensor", sh,
                 a, b);
        ok = 0;
    }
    if (mg_spec_has_partial(&ds) && !mg_spec_has_partial(&x->spec)) {
        /* R -> P: coordinate 0 of every Partial dim keeps the block, the others hold zeros */
        int keeper = 1;
        for (int i = 0; i < mnd; i++)
            if (ds.p[i].kind == MG_PLACE_PARTIAL && mesh->coord[i] != 0) keeper = 0;
        int good = 1;
        if (keeper) good = test_block_matches(&ds, out, full->data);
        else
            for (int64_t e = 0; e < out->numel; e++) good &= out->data[e] == 0.0f;
        if (!good) {
            snprintf(msg, len, "%s %s -> %s: Partial block wrong on a %s coordinate", sh, a, b,
                     keeper ? "keeping" : "zero");
            ok = 0;
        }
    }
    mg_dtensor *y = mg_dtensor_make(&ds, out, NULL);
    if (!y) {
        snprintf(msg, len, "%s %s -> %s: mg_dtensor_make: %s", sh, a, b, mg_last_error());
        mg_dtensor_free(x);
        return 0;
    }
    mg_tensor *back = mg_full_tensor(y);
    if (!back) {
        snprintf(msg, len, "%s %s -> %s: mg_full_tensor: %s", sh, a, b, mg_last_error());
        ok = 0;
    } else if (!mg_shape_equal(back->ndim, back->shape, full->ndim, full->shape) ||
               (full->numel && memcmp(back->data, full->data, full->numel * sizeof(float)))) {
        snprintf(msg, len, "%s %s -> %s: the full tensor differs from the original", sh, a, b);
        ok = 0;
    }
    mg_tensor_free(back);
    mg_dtensor_free(y);
    mg_dtensor_free(x);
    return ok;
}

static mg_tensor *int_tensor(const tshape *s, uint64_t seed) {
    mg_tensor *t = mg_tensor_new(s->nd, s->shape);
    mg_test_fill_int(t->data, t->numel, seed);
    return t;
}

/* all pairs on 1-D and 2-D meshes */
START_TEST(round_trip_all_pairs) {
    static const tshape shapes[] = {
        {1, {8}},    {1, {7}},       {1, {1}},       {2, {4, 6}},    {2, {3, 5}},
        {2, {0, 3}}, {3, {4, 2, 4}}, {3, {3, 5, 2}}, {3, {1, 1, 3}},
    };
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 2, ms), pairs = 0, bad = 0;
    char msg[512] = "", first[sizeof msg + 64] = "";
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        mg_assert_all(mesh != NULL, "mesh: %s", mg_last_error());
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            mg_tensor *full = int_tensor(&shapes[si], 11 + si);
            int nl = test_placement_count(mesh->ndim, shapes[si].nd);
            for (int a = 0; a < nl; a++)
                for (int b = 0; b < nl; b++) {
                    mg_placement src[MG_MAX_MESH_DIMS], dst[MG_MAX_MESH_DIMS];
                    test_placement_list(a, mesh->ndim, shapes[si].nd, src);
                    test_placement_list(b, mesh->ndim, shapes[si].nd, dst);
                    pairs++;
                    if (!round_trip(mesh, full, src, dst, msg, sizeof msg) && bad++ == 0) {
                        char mt[32];
                        snprintf(first, sizeof first, "mesh %s: %s", mg_mesh_format(mt, 32, mesh),
                                 msg);
                    }
                }
            mg_tensor_free(full);
        }
        mg_mesh_free(mesh);
    }
    mg_assert_all(bad == 0, "%d of %d round trips failed; first: %s", bad, pairs, first);
    mg_assert_all(pairs > 100, "only %d pairs", pairs);
}
END_TEST

/* 3-D and 4-D meshes: the nested lists and a deterministic sample of pairs */
START_TEST(round_trip_nd_meshes) {
    static const tshape shapes[] = {{1, {7}}, {2, {5, 4}}, {3, {3, 1, 6}}};
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 4, ms), pairs = 0, bad = 0;
    char msg[512] = "", first[sizeof msg + 64] = "";
    for (int m = 0; m < nm; m++) {
        if (ms[m].ndim < 3) continue;
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        mg_assert_all(mesh != NULL, "mesh: %s", mg_last_error());
        int mnd = mesh->ndim;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            mg_tensor *full = int_tensor(&shapes[si], 5 + si);
            int nl = test_placement_count(mnd, shapes[si].nd);
            uint64_t rs = 12345 + si;
            for (int t = 0; t < 160; t++) {
                mg_placement src[MG_MAX_MESH_DIMS], dst[MG_MAX_MESH_DIMS];
                if (t < 4) { /* all S(0) <-> R / P / S(last) */
                    for (int i = 0; i < mnd; i++) {
                        src[i] = t % 2 ? MG_SHARD(shapes[si].nd - 1) : MG_SHARD(0);
                        dst[i] = t < 2 ? MG_REPLICATE : MG_PARTIAL_SUM;
                    }
                    if (t == 1) dst[0] = MG_SHARD(0);
                } else {
                    test_placement_list((int)(mg_test_next(&rs) % nl), mnd, shapes[si].nd, src);
                    test_placement_list((int)(mg_test_next(&rs) % nl), mnd, shapes[si].nd, dst);
                }
                pairs++;
                if (!round_trip(mesh, full, src, dst, msg, sizeof msg) && bad++ == 0) {
                    char mt[32];
                    snprintf(first, sizeof first, "mesh %s: %s", mg_mesh_format(mt, 32, mesh), msg);
                }
            }
            mg_tensor_free(full);
        }
        mg_mesh_free(mesh);
    }
    mg_assert_all(bad == 0, "%d of %d round trips failed; first: %s", bad, pairs, first);
}
END_TEST

static int64_t total_bytes(void) {
    mg_comm_stats s[MG_COLL_COUNT];
    mg_comm_stats_get(s);
    int64_t b = 0;
    for (int k = 0; k < MG_COLL_COUNT; k++) b += s[k].bytes;
    return b;
}

/* Even shapes: the bytes counted equal mg_redistribute_cost for every pair,
 * and the cost is the same number on every rank. */
START_TEST(bytes_match_cost) {
    static const tshape shapes[] = {{1, {8}}, {2, {4, 8}}, {3, {4, 4, 8}}};
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 2, ms), bad = 0, checked = 0;
    char first[512] = "";
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        mg_assert_all(mesh != NULL, "mesh: %s", mg_last_error());
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            mg_tensor *full = int_tensor(&shapes[si], 3);
            int nl = test_placement_count(mesh->ndim, shapes[si].nd);
            for (int a = 0; a < nl; a++) {
                mg_placement src[MG_MAX_MESH_DIMS];
                test_placement_list(a, mesh->ndim, shapes[si].nd, src);
                mg_dtensor *x = mg_distribute(mesh, full, src, mesh->ndim);
                for (int b = 0; b < nl; b++) {
                    mg_placement dst[MG_MAX_MESH_DIMS];
                    test_placement_list(b, mesh->ndim, shapes[si].nd, dst);
                    mg_spec ds;
                    mg_spec_make(&ds, mesh, dst, mesh->ndim, full->ndim, full->shape, "t");
                    double cost = mg_redistribute_cost(&x->spec, &ds);
                    int64_t before = total_bytes();
                    mg_tensor *out = NULL;
                    int rc = mg_redistribute_local(&x->spec, x->local, &ds, &out, NULL);
                    int64_t moved = total_bytes() - before;
                    mg_tensor_free(out);
                    checked++;
                    if ((rc != MG_OK || (double)moved != cost) && bad++ == 0) {
                        char pa[64], pb[64], mt[32];
                        snprintf(first, sizeof first,
                                 "mesh %s %s -> %s: moved %lld, cost %.0f (%s)",
                                 mg_mesh_format(mt, 32, mesh),
                                 mg_placements_format(pa, 64, src, mesh->ndim),
                                 mg_placements_format(pb, 64, dst, mesh->ndim), (long long)moved,
                                 cost, rc ? mg_last_error() : "ok");
                    }
                    double lo = cost, hi = cost;
                    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
                    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                    if (lo != hi && bad++ == 0)
                        snprintf(first, sizeof first, "cost differs across ranks: %.0f vs %.0f", lo,
                                 hi);
                }
                mg_dtensor_free(x);
            }
            mg_tensor_free(full);
        }
        mg_mesh_free(mesh);
    }
    mg_assert_all(bad == 0, "%d of %d pairs: %s", bad, checked, first);
}
END_TEST

/* moved bytes of src -> dst for a tensor of `shape` on `mesh` */
static int64_t moved_bytes(const mg_mesh *mesh, int nd, const int64_t *shape,
                           const mg_placement *src, const mg_placement *dst) {
    mg_tensor *full = mg_tensor_new(nd, shape);
    mg_dtensor *x = mg_distribute(mesh, full, src, mesh->ndim);
    mg_spec ds;
    mg_spec_make(&ds, mesh, dst, mesh->ndim, nd, shape, "t");
    int64_t before = total_bytes();
    mg_tensor *out = NULL;
    int rc = mg_redistribute_local(&x->spec, x->local, &ds, &out, NULL);
    int64_t moved = total_bytes() - before;
    mg_tensor_free(out);
    mg_dtensor_free(x);
    mg_tensor_free(full);
    return rc == MG_OK ? moved : -1;
}

START_TEST(accounting_rules) {
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 4, ms);
    int64_t shape[2] = {12, 8}; /* 96 floats, 384 bytes */
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        mg_assert_all(mesh != NULL, "mesh: %s", mg_last_error());
        int mnd = mesh->ndim;
        mg_placement r[MG_MAX_MESH_DIMS], p[MG_MAX_MESH_DIMS];
        for (int i = 0; i < mnd; i++) r[i] = MG_REPLICATE;
        /* R -> S moves nothing, on any dim, for any tensor dim */
        for (int i = 0; i < mnd; i++)
            for (int d = 0; d < 2; d++) {
                memcpy(p, r, sizeof r);
                p[i] = MG_SHARD(d);
                int64_t b = moved_bytes(mesh, 2, shape, r, p);
                mg_assert_all(b == 0, "mesh dim %d R -> S(%d) moved %lld bytes", i, d,
                              (long long)b);
            }
        for (int i = 0; i < mnd; i++) {
            /* any move on a size-1 mesh dim moves nothing */
            if (mesh->shape[i] == 1) {
                mg_placement kinds[4] = {MG_REPLICATE, MG_PARTIAL_SUM, MG_SHARD(0), MG_SHARD(1)};
                for (int a = 0; a < 4; a++)
                    for (int b = 0; b < 4; b++) {
                        mg_placement s0[MG_MAX_MESH_DIMS], s1[MG_MAX_MESH_DIMS];
                        memcpy(s0, r, sizeof r);
                        memcpy(s1, r, sizeof r);
                        s0[i] = kinds[a];
                        s1[i] = kinds[b];
                        int64_t bytes = moved_bytes(mesh, 2, shape, s0, s1);
                        mg_assert_all(bytes == 0, "size-1 mesh dim %d: move %d -> %d sent %lld", i,
                                      a, b, (long long)bytes);
                    }
            }
            /* S -> R on a 2-rank dim moves exactly (n-1)/n = 1/2 of the tensor */
            if (mesh->shape[i] == 2) {
                memcpy(p, r, sizeof r);
                p[i] = MG_SHARD(0);
                int64_t b = moved_bytes(mesh, 2, shape, p, r);
                mg_assert_all(b == 96 * 4 / 2, "mesh dim %d S(0) -> R moved %lld, want 192", i,
                              (long long)b);
                p[i] = MG_SHARD(1);
                b = moved_bytes(mesh, 2, shape, p, r);
                mg_assert_all(b == 96 * 4 / 2, "mesh dim %d S(1) -> R moved %lld, want 192", i,
                              (long long)b);
            }
            /* same -> same moves nothing */
            memcpy(p, r, sizeof r);
            p[i] = MG_SHARD(1);
            mg_assert_all(moved_bytes(mesh, 2, shape, p, p) == 0, "same -> same moved bytes");
        }
        mg_mesh_free(mesh);
    }
}
END_TEST

START_TEST(arena_and_copy) {
    int shape1[1] = {world};
    mg_mesh *mesh = mg_mesh_new(1, shape1);
    mg_assert_all(mesh != NULL, "%s", mg_last_error());
    int64_t shape[2] = {6, 5};
    mg_tensor *full = mg_tensor_new(2, shape);
    mg_test_fill_int(full->data, full->numel, 9);
    mg_placement s0 = MG_SHARD(0), s1 = MG_SHARD(1);
    mg_dtensor *x = mg_distribute(mesh, full, &s0, 1);
    mg_arena *arena = mg_arena_new(1 << 16);
    mg_spec ds;
    mg_spec_make(&ds, mesh, &s1, 1, 2, shape, "t");
    mg_tensor *out = NULL;
    mg_assert_all(mg_redistribute_local(&x->spec, x->local, &ds, &out, arena) == MG_OK, "%s",
                  mg_last_error());
    mg_assert_all(out && (out->flags & MG_TENSOR_IN_ARENA), "output not in the arena");
    mg_assert_all(test_block_matches(&ds, out, full->data), "S(0) -> S(1) block wrong");
    /* same spec: a copy, not the source */
    mg_tensor *same = NULL;
    mg_assert_all(mg_redistribute_local(&x->spec, x->local, &x->spec, &same, NULL) == MG_OK, "%s",
                  mg_last_error());
    mg_assert_all(same != x->local && same->data != x->local->data, "not a copy");
    mg_assert_all(test_block_matches(&x->spec, same, full->data), "copy differs");
    /* a local tensor of the wrong shape is refused */
    int64_t wrong[2] = {7, 5};
    mg_tensor *w = mg_tensor_new(2, wrong);
    mg_tensor *o2 = NULL;
    mg_assert_all(mg_redistribute_local(&x->spec, w, &ds, &o2, NULL) == MG_ESHAPE && !o2,
                  "wrong local shape accepted");
    mg_assert_all(strstr(mg_last_error(), "(7, 5)") != NULL, "%s", mg_last_error());
    mg_tensor_free(w);
    mg_tensor_free(same);
    mg_arena_free(arena);
    mg_dtensor_free(x);
    mg_tensor_free(full);
    mg_mesh_free(mesh);
}
END_TEST

/* The same round trips with MPI calls split into pieces of 3 floats. */
START_TEST(split_collectives) {
    test_mesh_shape ms[16];
    int nm = test_meshes(world, 2, ms), bad = 0, pairs = 0;
    char msg[512], first[512] = "";
    mg_comm_mpi_set_max_count(3);
    tshape s = {2, {5, 6}};
    mg_tensor *full = int_tensor(&s, 77);
    for (int m = 0; m < nm; m++) {
        mg_mesh *mesh = mg_mesh_new(ms[m].ndim, ms[m].shape);
        int nl = test_placement_count(mesh->ndim, 2);
        for (int a = 0; a < nl; a++)
            for (int b = 0; b < nl; b++) {
                mg_placement src[MG_MAX_MESH_DIMS], dst[MG_MAX_MESH_DIMS];
                test_placement_list(a, mesh->ndim, 2, src);
                test_placement_list(b, mesh->ndim, 2, dst);
                pairs++;
                if (!round_trip(mesh, full, src, dst, msg, sizeof msg) && bad++ == 0)
                    snprintf(first, sizeof first, "%s", msg);
            }
        mg_mesh_free(mesh);
    }
    mg_comm_mpi_set_max_count(0);
    mg_tensor_free(full);
    mg_assert_all(bad == 0, "%d of %d failed with split collectives; first: %s", bad, pairs, first);
}
END_TEST

static Suite *make_suite(void) {
    world = mg_world_size();
    const TTest *tests[] = {round_trip_all_pairs, round_trip_nd_meshes, bytes_match_cost,
                            accounting_rules, arena_and_copy, split_collectives, NULL};
    return mg_test_suite("redistribute", tests);
}

int main(int argc, char **argv) { return mg_test_main_mpi(&argc, &argv, make_suite, NULL); }
