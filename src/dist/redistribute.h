/* redistribute.h: moves a local shard from one spec to another spec of the same
 * mesh and global shape, per mesh dimension (docs/DESIGN.md "Redistribute"):
 * S->R all-gather, P->R all-reduce, P->S reduce-scatter, R->S local slice,
 * S(i)->S(j) all-to-all, R->P keep on coordinate 0 and zeros elsewhere, S->P
 * via R. Uneven shards are padded for the collective and unpadded after. The
 * planner orders the per-dim steps so nested shardings are undone inner first.
 * Also the whole tensor: mg_full_tensor (meshgrad.h) and mg_dtensor_item.
 * No autograd here: the public mg_redistribute (ops layer) records the node. */
#ifndef MG_REDISTRIBUTE_H
#define MG_REDISTRIBUTE_H

#include "arena.h"
#include "dist/comm.h"
#include "dist/dtensor.h"
#include "dist/placement.h"
#include "tensor.h"

/* *out receives a new local tensor (from `arena`, or the heap when NULL) holding
 * this rank's block of dst. When src and dst are equal, *out is a copy.
 * Collective over the mesh dims that change. */
int mg_redistribute_local(const mg_spec *src, const mg_tensor *src_local, const mg_spec *dst,
                          mg_tensor **out, mg_arena *arena);

/* Bytes this rank sends to go from src to dst (0 when no communication is
 * needed), walking the plan mg_redistribute_local runs on coordinate 0; it
 * depends only on global metadata, so every rank gets the same number. The
 * sharding rules price a candidate per mesh dim instead (rules.h's
 * mg_rules_dim_cost); tests/test_redistribute.c holds the bytes counted to
 * this. */
double mg_redistribute_cost(const mg_spec *src, const mg_spec *dst);

/* One step of going from src to dst as mg_redistribute_local makes it on
 * coordinate 0 (the largest block): its collective (MG_COLL_COUNT for a local
 * slice or R -> P, which need none), the mesh dim, that dim's size, the count
 * of floats the comm call takes (comm.h: the block of an all-gather,
 * reduce-scatter or all-to-all; the buffer of an all-reduce), the floats of
 * the buffer the step's result is made in, and of the two staging buffers it
 * needs (padding, packing: 0 when none). */
typedef struct {
    mg_coll_kind kind;
    int dim, size;
    int64_t n, out;
    int64_t staging[2];
} mg_redistribute_move;
#define MG_REDISTRIBUTE_MAX_MOVES (3 * MG_MAX_MESH_DIMS)
/* The steps of src -> dst (at most max); how many, or -1 when the specs do
 * not fit together. Global metadata only. */
int mg_redistribute_moves(const mg_spec *src, const mg_spec *dst, mg_redistribute_move *moves,
                          int max);

/* True when going from src to dst moves no data on this rank's shard: the specs
 * differ only on mesh dims of size 1 (or not at all), so the local block is the
 * same tensor and the ops layer can hand out a view instead of a copy. */
bool mg_redistribute_is_noop(const mg_spec *src, const mg_spec *dst);
/* The value of a 0-d tensor (a loss): read in place when it is replicated (no
 * allocation), else collective over its mesh (mg_full_tensor, which lives here
 * too: meshgrad.h). */
int mg_dtensor_item(const mg_dtensor *t, double *out);

/* Frees the staging buffers the moves keep between calls (registered with
 * mg_finalize when the first is made, world.h). */
void mg_redistribute_release(void);

#endif
