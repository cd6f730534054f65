/* mesh.h: the n-D device mesh (1..4 dims) over all ranks. Built on
 * MPI_Cart_create (rank order row-major in mesh coordinates) with one
 * sub-communicator per mesh dimension (MPI_Cart_sub), each wrapped in an mg_comm.
 * Exports struct mg_mesh and helpers, mg_mesh_agree, mg_mesh_pair (a comm of
 * two ranks of a dim), mg_mesh_count_tensor; mg_mesh_new/free are public
 * (meshgrad.h). */
#ifndef MG_MESH_H
#define MG_MESH_H

#include <mpi.h>

#include "dist/comm.h"
#include "meshgrad.h"

struct mg_mesh {
    int ndim;
    int shape[MG_MAX_MESH_DIMS];
    int coord[MG_MAX_MESH_DIMS]; /* this rank's coordinates */
    int rank, size;              /* in the mesh communicator */
    MPI_Comm cart;
    /* a duplicate of cart for checks (mg_mesh_agree): never matched with the
     * model's collectives, whatever order a failing rank takes them in */
    MPI_Comm checks;
    MPI_Comm dim_mpi[MG_MAX_MESH_DIMS];
    mg_comm *dim_comm[MG_MAX_MESH_DIMS]; /* collectives along one mesh dim */
    mg_comm *world;                      /* collectives over the whole mesh */
    int id;                              /* distinct per mesh made in this process */
    /* a meta mesh (mg_mesh_new_meta): no MPI communicator, meta comms; the
     * world rank of coordinates c is base + sum c[i] stride[i], and ranks
     * r / node_ranks share a node */
    int meta, meta_base, meta_stride[MG_MAX_MESH_DIMS], meta_node_ranks;
    /* heap tensors on it not yet freed (dtensor.c counts them with
     * mg_mesh_count_tensor): mg_mesh_free refuses while there are any */
    int tensors;
};

/* A mesh for the meta device (backend/meta.c): this process plays the rank at
 * `coord` of a mesh of `shape` that exists only in count, `node_ranks` ranks
 * to a node (0: all on one). Its comms are meta ones (comm_meta.c); no MPI
 * call is made. Freed with mg_mesh_free. */
mg_mesh *mg_mesh_new_meta(int ndim, const int *shape, const int *coord, int node_ranks);

/* "2x2" (or "1" for a 1-D mesh of 1). Returns buf. */
char *mg_mesh_format(char *buf, size_t len, const mg_mesh *mesh);
/* Mesh rank of the given coordinates (row-major). */
int mg_mesh_rank_of(const mg_mesh *mesh, const int *coord);
/* A heap tensor on the mesh was made (delta 1) or freed (-1). The count is
 * kept on a const mesh: a tensor's spec holds its mesh const, and the count
 * is its users', not what the mesh is. */
void mg_mesh_count_tensor(const mg_mesh *mesh, int delta);
/* Parses "2", "1x2", "2x2" into shape; returns ndim or MG_EINVAL with a message. */
int mg_mesh_parse(const char *text, int *shape);
/* Collective over the mesh. The mesh without `dim`, over the ranks that share
 * this rank's coordinate on it (a pipeline stage's ranks: the mesh of its
 * other dims, in their order, with comms of its own; a 1-D mesh of 1 rank when
 * `dim` was the only one). Freed with mg_mesh_free. */
mg_mesh *mg_mesh_sub(const mg_mesh *m, int dim);

/* Collective over the mesh, outside the collectives' statistics (a check,
 * not the model's traffic; on its own communicator, so it never matches
 * one of theirs; under the watchdog, as `who`): every[i] = whether
 * all ranks passed the same v[i], i < n <= 32 (one all-reduce MAX of v and
 * its complement: max == min). The verdicts are the same on every rank. */
int mg_mesh_agree(const mg_mesh *m, const uint64_t *v, int n, int *every, const char *who);

/* Two ranks along a dim: those at coordinates a and b of `dim` that share this
 * rank's other coordinates (a pipeline's first and last stage: the group that
 * sums a tied embedding's gradient, as Megatron's embedding group). comm
 * (rank 0: the one at a) is NULL on the ranks at neither. */
typedef struct {
    mg_comm *comm;
    MPI_Comm mpi;
} mg_mesh_pair;
/* Collective over the mesh. MG_EINVAL for bad coordinates, MG_ECOMM. */
int mg_mesh_pair_new(mg_mesh_pair *out, const mg_mesh *m, int dim, int a, int b);
void mg_mesh_pair_free(mg_mesh_pair *p);

#endif
