/* test_dist.h: helpers shared by the distributed-tensor suites: the meshes a
 * world size allows, placement lists by index, and a naive check of a local
 * block against the full tensor. */
#ifndef MG_TEST_DIST_H
#define MG_TEST_DIST_H

#include <stdint.h>
#include <string.h>

#include "dist/dtensor.h"
#include "dist/mesh.h"
#include "dist/placement.h"
#include "meshgrad.h"
#include "tensor.h"

typedef struct {
    int ndim;
    int shape[MG_MAX_MESH_DIMS];
} test_mesh_shape;

/* The meshes of 1..max_ndim dims the tests try, whose sizes multiply to world:
 * 1, 2, 4, 1x2, 2x1, 2x2, and with more dims 1x1, 1x2x1, 2x1x2, 1x2x1x2. */
static inline int test_meshes(int world, int max_ndim, test_mesh_shape *out) {
    static const test_mesh_shape all[] = {
        {1, {1}},       {1, {2}},          {1, {4}},          {2, {1, 2}},
        {2, {2, 1}},    {2, {2, 2}},       {2, {1, 1}},       {3, {1, 2, 1}},
        {3, {2, 1, 2}}, {4, {1, 2, 1, 2}}, {4, {1, 1, 1, 1}},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        int p = 1;
        for (int d = 0; d < all[i].ndim; d++) p *= all[i].shape[d];
        if (p == world && all[i].ndim <= max_ndim) out[n++] = all[i];
    }
    return n;
}

/* Placement lists on an mnd-D mesh for a tensor of nd dims: per mesh dim one of
 * R, P, S(0) .. S(nd-1); list `index` in 0 .. (2+nd)^mnd - 1. */
static inline int test_placement_count(int mnd, int nd) {
    int n = 1;
    for (int i = 0; i < mnd; i++) n *= 2 + nd;
    return n;
}
static inline void test_placement_list(int index, int mnd, int nd, mg_placement *p) {
    for (int i = 0; i < mnd; i++) {
        int o = index % (2 + nd);
        index /= 2 + nd;
        p[i] = o == 0 ? MG_REPLICATE : o == 1 ? MG_PARTIAL_SUM : MG_SHARD(o - 2);
    }
}

/* 1 when `local` is exactly the block of `full` (global shape s->shape) that
 * spec s gives this rank, element by element (Partial dims ignored). */
static inline int test_block_matches(const mg_spec *s, const mg_tensor *local, const float *full) {
    int64_t ls[MG_MAX_DIMS], off[MG_MAX_DIMS], idx[MG_MAX_DIMS] = {0};
    mg_spec_local(s, NULL, ls, off);
    if (!mg_shape_equal(local->ndim, local->shape, s->ndim, ls)) return 0;
    for (int64_t e = 0; e < local->numel; e++) {
        int64_t g = 0;
        for (int d = 0; d < s->ndim; d++) g = g * s->shape[d] + off[d] + idx[d];
        if (memcmp(&local->data[e], &full[g], sizeof(float)) != 0) return 0;
        for (int d = s->ndim - 1; d >= 0; d--) {
            if (++idx[d] < ls[d]) break;
            idx[d] = 0;
        }
    }
    return 1;
}

#endif
