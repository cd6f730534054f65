/* placement.h: placements and specs. A spec is a mesh, a global shape and one
 * placement per mesh dimension. mg_spec_local() is THE function that says which
 * block of the global tensor a mesh coordinate holds; every other part (ops,
 * redistribute, checkpoint, data loader) asks it.
 *
 * Sharding follows torch.chunk: dim of size n split k ways has chunk = ceil(n/k)
 * and coordinate c holds [c*chunk, min(n, (c+1)*chunk)), possibly empty. Mesh dims
 * that shard the same tensor dim nest left to right: the leftmost splits the whole
 * dim, the next splits that piece, and so on. */
#ifndef MG_PLACEMENT_H
#define MG_PLACEMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "meshgrad.h"

typedef struct {
    const mg_mesh *mesh;
    int ndim;                          /* tensor rank */
    int64_t shape[MG_MAX_DIMS];        /* global */
    mg_placement p[MG_MAX_MESH_DIMS];  /* one per mesh dim; shard dims normalized >= 0 */
} mg_spec;

/* Validates and builds a spec. Refuses (MG_EPLACEMENT, clear message naming `who`)
 * a placement count that is not the mesh's ndim, shard dims out of range,
 * unknown kinds; normalizes negative shard dims. */
int mg_spec_make(mg_spec *out, const mg_mesh *mesh, const mg_placement *p, int n, int ndim,
                 const int64_t *shape, const char *who);

/* Local shape and global offset of the block held at mesh coordinates `coord`
 * (NULL = this rank). Either output may be NULL. */
void mg_spec_local(const mg_spec *s, const int *coord, int64_t *local_shape, int64_t *offset);
int64_t mg_spec_local_numel(const mg_spec *s, const int *coord);

/* torch.chunk rule on one dim: start and size of piece c of k for length n. */
void mg_chunk(int64_t n, int k, int c, int64_t *start, int64_t *size);

bool mg_placement_equal(mg_placement a, mg_placement b);
bool mg_spec_equal(const mg_spec *a, const mg_spec *b); /* mesh, shape and placements */
bool mg_spec_is_replicate(const mg_spec *s);             /* R on every mesh dim */
bool mg_spec_has_partial(const mg_spec *s);
/* "[R, S(0)]" */
char *mg_placements_format(char *buf, size_t len, const mg_placement *p, int n);
/* "(2, 40, 10) [R, S(0)] on mesh 1x2" */
char *mg_spec_format(char *buf, size_t len, const mg_spec *s);

#endif
