/* test_placement.c: placements and specs without communication. mg_spec_local
 * (local shape and global offset) against a brute-force reference that assigns
 * every global index by slicing index lists naively, on meshes of 1 to 4 dims
 * (sizes 1..3, so uneven and empty shards, nested shardings included); the
 * torch.chunk rule; mg_spec_make's refusals and messages; formatting.
 * Meshes here are plain structs (only their shape and coordinates are read). */
#include <stdio.h>
#include <string.h>

#include "dist/mesh.h"
#include "dist/placement.h"
#include "meshgrad.h"
#include "status.h"
#include "tensor.h"
#include "testutil.h"

static mg_mesh fake_mesh(int ndim, const int *shape) {
    mg_mesh m;
    memset(&m, 0, sizeof m);
    m.ndim = ndim;
    for (int i = 0; i < ndim; i++) m.shape[i] = shape[i];
    return m;
}

START_TEST(chunk_rule) {
    /* torch.chunk(5 elements, 4): 2, 2, 1, then an empty piece */
    int64_t st, sz;
    const int64_t want_start[4] = {0, 2, 4, 5}, want_size[4] = {2, 2, 1, 0};
    for (int c = 0; c < 4; c++) {
        mg_chunk(5, 4, c, &st, &sz);
        ck_assert_int_eq(st, want_start[c]);
        ck_assert_int_eq(sz, want_size[c]);
    }
    /* 1 element over 3: only the first piece holds it */
    mg_chunk(1, 3, 0, &st, &sz);
    ck_assert(st == 0 && sz == 1);
    mg_chunk(1, 3, 2, &st, &sz);
    ck_assert(st == 1 && sz == 0);
    /* 0 elements */
    mg_chunk(0, 2, 1, &st, &sz);
    ck_assert(st == 0 && sz == 0);
    /* 6 over 4: chunk 2 -> 2, 2, 2, 0 */
    mg_chunk(6, 4, 3, &st, &sz);
    ck_assert(st == 6 && sz == 0);
}
END_TEST

/* The indices of dim d (size n) held at `coord`, by naive list slicing. */
static int64_t naive_indices(int64_t n, const mg_mesh *m, const mg_placement *p, int d,
                             const int *coord, int64_t *idx) {
    int64_t len = n;
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    for (int i = 0; i < m->ndim; i++) {
        if (p[i].kind != MG_PLACE_SHARD || p[i].dim != d) continue;
        int k = m->shape[i];
        int64_t chunk = (len + k - 1) / k, lo = coord[i] * chunk, hi = lo + chunk, w = 0;
        for (int64_t j = 0; j < len; j++)
            if (j >= lo && j < hi) idx[w++] = idx[j];
        len = w;
    }
    return len;
}

/* Every placement list (R, P, S(0..nd-1) per mesh dim) for one mesh and shape,
 * at every coordinate: mg_spec_local equals the naive reference, held indices
 * are contiguous, and each global element is held exactly by the coordinates
 * that do not shard it. Returns the number of specs checked. */
static int check_mesh(int mnd, const int *mshape, int nd, const int64_t *shape) {
    mg_mesh m = fake_mesh(mnd, mshape);
    int opts = 2 + nd, lists = 1, coords = 1, checked = 0;
    for (int i = 0; i < mnd; i++) {
        lists *= opts;
        coords *= mshape[i];
    }
    int64_t numel = mg_shape_numel(nd, shape);
    static int owners[4096];
    ck_assert(numel <= 4096);
    for (int l = 0; l < lists; l++) {
        mg_placement p[MG_MAX_MESH_DIMS];
        int rest = l, replicas = 1;
        for (int i = 0; i < mnd; i++) {
            int o = rest % opts;
            rest /= opts;
            p[i] = o == 0 ? MG_REPLICATE : o == 1 ? MG_PARTIAL_SUM : MG_SHARD(o - 2);
            if (o < 2) replicas *= mshape[i];
        }
        mg_spec s;
        ck_assert_int_eq(mg_spec_make(&s, &m, p, mnd, nd, shape, "test"), MG_OK);
        memset(owners, 0, sizeof owners);
        for (int c = 0; c < coords; c++) {
            int coord[MG_MAX_MESH_DIMS], r = c;
            for (int i = mnd - 1; i >= 0; i--) {
                coord[i] = r % mshape[i];
                r /= mshape[i];
            }
            int64_t ls[MG_MAX_DIMS], off[MG_MAX_DIMS], idx[MG_MAX_DIMS][64];
            mg_spec_local(&s, coord, ls, off);
            for (int d = 0; d < nd; d++) {
                int64_t len = naive_indices(shape[d], &m, p, d, coord, idx[d]);
                ck_assert_msg(ls[d] == len, "list %d coord %d dim %d: local %lld, naive %lld", l, c,
                              d, (long long)ls[d], (long long)len);
                for (int64_t j = 0; j < len; j++)
                    ck_assert_msg(idx[d][j] == off[d] + j,
                                  "list %d coord %d dim %d: not contiguous", l, c, d);
            }
            ck_assert_int_eq(mg_spec_local_numel(&s, coord), mg_shape_numel(nd, ls));
            /* count the owners of every global element */
            int64_t li[MG_MAX_DIMS] = {0}, n = mg_shape_numel(nd, ls);
            for (int64_t e = 0; e < n; e++) {
                int64_t g = 0;
                for (int d = 0; d < nd; d++) g = g * shape[d] + off[d] + li[d];
                owners[g]++;
                for (int d = nd - 1; d >= 0; d--) {
                    if (++li[d] < ls[d]) break;
                    li[d] = 0;
                }
            }
        }
        for (int64_t g = 0; g < numel; g++)
            ck_assert_msg(owners[g] == replicas, "list %d: element %lld held %d times, want %d", l,
                          (long long)g, owners[g], replicas);
        checked++;
    }
    return checked;
}

START_TEST(local_blocks_match_brute_force) {
    static const int meshes[][5] = {
        /* ndim, sizes */
        {1, 1},    {1, 2},    {1, 3},       {1, 4},       {2, 2, 2},       {2, 1, 2},
        {2, 3, 2}, {2, 2, 3}, {3, 2, 1, 3}, {3, 2, 2, 2}, {4, 2, 1, 2, 3}, {4, 2, 2, 2, 2},
    };
    static const int64_t shapes[][4] = {
        /* ndim, sizes */
        {0}, {1, 0}, {1, 1}, {1, 5}, {1, 12}, {2, 3, 7}, {2, 8, 2}, {3, 2, 5, 3}, {3, 7, 1, 4},
    };
    int total = 0;
    for (size_t a = 0; a < sizeof meshes / sizeof meshes[0]; a++)
        for (size_t b = 0; b < sizeof shapes / sizeof shapes[0]; b++) {
            int mnd = meshes[a][0], nd = (int)shapes[b][0];
            if (mnd == 4 && nd == 3) continue; /* 5^4 lists x 48 coords: enough said by 3-D */
            total += check_mesh(mnd, &meshes[a][1], nd, &shapes[b][1]);
        }
    ck_assert_int_gt(total, 1000);
}
END_TEST

START_TEST(nested_shard_example) {
    /* 10 rows over mesh 2x3 as [S(0), S(0)]: 5 rows per mesh row, then 2, 2, 1 */
    int ms[2] = {2, 3};
    mg_mesh m = fake_mesh(2, ms);
    int64_t shape[1] = {10}, ls, off;
    mg_placement p[2] = {MG_SHARD(0), MG_SHARD(0)};
    mg_spec s;
    ck_assert_int_eq(mg_spec_make(&s, &m, p, 2, 1, shape, "test"), MG_OK);
    int c[2] = {1, 2};
    mg_spec_local(&s, c, &ls, &off);
    ck_assert(ls == 1 && off == 9);
    c[0] = 0, c[1] = 1;
    mg_spec_local(&s, c, &ls, &off);
    ck_assert(ls == 2 && off == 2);
}
END_TEST

START_TEST(spec_refusals) {
    int ms[2] = {1, 2};
    mg_mesh m = fake_mesh(2, ms);
    int64_t shape[3] = {2, 40, 10};
    mg_spec s;
    mg_placement one[1] = {MG_SHARD(0)};
    /* the seed bug: one placement on a 2-D mesh */
    ck_assert_int_eq(mg_spec_make(&s, &m, one, 1, 3, shape, "mg_distribute"), MG_EPLACEMENT);
    ck_assert_str_eq(mg_last_error(), "mg_distribute: placements has 1 entry but the mesh is 2-D "
                                      "(1x2): give one placement per mesh dimension");
    mg_placement three[3] = {MG_REPLICATE, MG_REPLICATE, MG_REPLICATE};
    ck_assert_int_eq(mg_spec_make(&s, &m, three, 3, 3, shape, "who"), MG_EPLACEMENT);
    ck_assert_str_eq(mg_last_error(), "who: placements has 3 entries but the mesh is 2-D (1x2): "
                                      "give one placement per mesh dimension");
    mg_placement bad[2] = {MG_REPLICATE, MG_SHARD(3)};
    ck_assert_int_eq(mg_spec_make(&s, &m, bad, 2, 3, shape, "who"), MG_EPLACEMENT);
    ck_assert_str_eq(mg_last_error(), "who: placement 1 is S(3) but the tensor has 3 dims (shape "
                                      "(2, 40, 10)): shard a dim in -3..2");
    bad[1] = MG_SHARD(-4);
    ck_assert_int_eq(mg_spec_make(&s, &m, bad, 2, 3, shape, "who"), MG_EPLACEMENT);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "S(-4) but the tensor has 3 dims"));
    bad[1] = MG_SHARD(0);
    ck_assert_int_eq(mg_spec_make(&s, &m, bad, 2, 0, NULL, "who"), MG_EPLACEMENT);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "0-d"));
    bad[1] = (mg_placement){(mg_place_kind)7, 0};
    ck_assert_int_eq(mg_spec_make(&s, &m, bad, 2, 3, shape, "who"), MG_EPLACEMENT);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "unknown kind 7"));
    int64_t neg[2] = {3, -1};
    mg_placement rr[2] = {MG_REPLICATE, MG_REPLICATE};
    ck_assert_int_eq(mg_spec_make(&s, &m, rr, 2, 2, neg, "who"), MG_ESHAPE);
    ck_assert_int_eq(mg_spec_make(&s, NULL, rr, 2, 2, shape, "who"), MG_EINVAL);
    /* and a good one right after, with a negative dim normalized */
    mg_placement ok[2] = {MG_PARTIAL_SUM, MG_SHARD(-1)};
    ck_assert_int_eq(mg_spec_make(&s, &m, ok, 2, 3, shape, "who"), MG_OK);
    ck_assert_int_eq(s.p[1].dim, 2);
    ck_assert(mg_spec_has_partial(&s) && !mg_spec_is_replicate(&s));
}
END_TEST

START_TEST(format_and_compare) {
    int ms[2] = {1, 2};
    mg_mesh m = fake_mesh(2, ms);
    int64_t shape[3] = {2, 40, 10};
    mg_placement p[2] = {MG_REPLICATE, MG_SHARD(0)};
    mg_spec a, b;
    ck_assert_int_eq(mg_spec_make(&a, &m, p, 2, 3, shape, "t"), MG_OK);
    char buf[128];
    ck_assert_str_eq(mg_spec_format(buf, sizeof buf, &a), "(2, 40, 10) [R, S(0)] on mesh 1x2");
    mg_placement q[2] = {MG_PARTIAL_SUM, MG_SHARD(-3)};
    ck_assert_int_eq(mg_spec_make(&b, &m, q, 2, 3, shape, "t"), MG_OK);
    ck_assert_str_eq(mg_placements_format(buf, sizeof buf, b.p, 2), "[P, S(0)]");
    ck_assert(!mg_spec_equal(&a, &b));
    b.p[0] = MG_REPLICATE;
    ck_assert(mg_spec_equal(&a, &b));
    ck_assert(mg_placement_equal(MG_SHARD(1), MG_SHARD(1)));
    ck_assert(!mg_placement_equal(MG_SHARD(1), MG_SHARD(0)));
    ck_assert(mg_placement_equal(MG_PARTIAL_SUM, MG_PARTIAL_SUM));
    /* truncation never overruns */
    char small[8];
    mg_spec_format(small, sizeof small, &a);
    ck_assert_int_eq((int)strlen(small), 7);
}
END_TEST

int main(void) {
    const TTest *tests[] = {chunk_rule, local_blocks_match_brute_force, nested_shard_example,
                            spec_refusals, format_and_compare, NULL};
    return mg_test_run(mg_test_suite("placement", tests));
}
