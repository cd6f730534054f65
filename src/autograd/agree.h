/* agree.h: the ranks of a mesh agree on the graph a backward walks.
 *
 * SPMD: every rank of a mesh records the same ops with the same arguments, on
 * its own block of the same global tensors. A value computed from the rank
 * that reaches an op (a scale factor, a dim, a narrow's start) breaks that
 * without any error: on replicated tensors the replicas drift apart, and a
 * sum across ranks mixes different functions. Before a backward walks a
 * graph, each rank hashes it (per node in walking order: the op, its
 * arguments, its output's and inputs' global shapes and placements) and the
 * mesh compares the hashes in one all-reduce of 16 bytes (mg_mesh_agree: not
 * counted with the model's collectives). Where they differ,
 * the backward is refused before it changes anything, with a message naming
 * the first node that differs, its op and this rank's arguments.
 *
 * Exports mg_graph_agree, mg_graph_node_hash. */
#ifndef MG_AUTOGRAD_AGREE_H
#define MG_AUTOGRAD_AGREE_H

#include "dist/mesh.h"
#include "ops/tape.h"

/* Collective over mesh (skipped on a mesh of one rank): MG_OK when every rank
 * passed an equal graph of n nodes (in walking order); else MG_ESTATE with a
 * message naming `who` and the first node that differs. */
int mg_graph_agree(const mg_mesh *mesh, mg_node *const *graph, int n, const char *who);
/* (n -1: this rank has refused the backward already, and only takes part.) */
/* One node's hash: its op, arguments, output's and inputs' global shapes and
 * placements (what the ranks compare; a recomputed segment run again is held
 * to its first run with it, autograd/recompute.h). */
uint64_t mg_graph_node_hash(const mg_node *n);

#endif
